// Setting the modification times of a laid-out tree to the nanosecond. Node (libuv) rounds every
// utimes call down to the microsecond, which loses what ext4, XFS, btrfs and tmpfs keep; one python3
// process (os.utime with integer ns, not following symlinks) sets a whole tree exactly. Where python3
// is missing or fails, node sets them to the microsecond: truncation is monotonic, so no file ever
// becomes newer than one it was older than, which is what make and ninja compare.

import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';

export interface TimeEntry {
  abs: string;
  sec: number;
  nsec: number;
}

const SET_NS = [
  'import os, sys, time',
  'd = sys.stdin.buffer.read().split(b"\\0")',
  'now = time.time_ns()',
  'for i in range(0, len(d) - 2, 3):',
  '    os.utime(d[i], ns=(now, int(d[i + 1]) * 1000000000 + int(d[i + 2])), follow_symlinks=False)',
].join('\n');

/** Sets every entry's mtime (atime: now); returns the precision reached. */
export function setTimes(entries: TimeEntry[]): 'ns' | 'us' {
  if (!entries.length) return 'ns';
  if (process.env.GIT_XET_TEST_NO_PYTHON !== '1') {
    const input = Buffer.concat(entries.map((e) => Buffer.from(`${e.abs}\0${e.sec}\0${e.nsec}\0`, 'utf8')));
    const r = spawnSync('python3', ['-c', SET_NS], { input, stdio: ['pipe', 'ignore', 'pipe'] });
    if (r.status === 0) return 'ns';
  }
  const now = new Date();
  for (const e of entries) {
    // Aim at the middle of the microsecond: the double's rounding must not cross into the next one.
    // Node replaces a negative number (a time before 1970) with "now"; a Date passes, to the ms.
    const us = Math.floor(e.nsec / 1000);
    const t = e.sec < 0 ? new Date(e.sec * 1000 + Math.floor(e.nsec / 1e6)) : e.sec + (us + 0.5) / 1e6;
    fs.lutimesSync(e.abs, now, t);
  }
  return 'us';
}
