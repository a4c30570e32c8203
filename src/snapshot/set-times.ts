// Setting the modification times of a laid-out tree to the nanosecond. Node (libuv) rounds every
// utimes call down to the microsecond, which loses what ext4, XFS, btrfs and tmpfs keep. The native
// module (utimensat, then lstat, in one loop) sets a whole tree exactly; without it one python3
// process (os.utime with integer ns, not following symlinks) does. Where neither works, node sets
// them to the microsecond: truncation is monotonic, so no file ever becomes newer than one it was
// older than, which is what make and ninja compare.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { joinZ } from '../git/exec';
import { native } from '../native';

/** The python3 to run: the system's own when there is one. A version manager's `python3` on PATH
 * (pyenv's shim is a bash script that runs two more programs to choose an interpreter) cost 0.4 to
 * 0.9 s per start-up here, against 0.1 s for /usr/bin/python3; any python3 will do
 * (os.utime with ns= and follow_symlinks= is Python 3.3). */
export const PYTHON3 = ['/usr/bin/python3', '/usr/local/bin/python3'].find((p) => fs.existsSync(p)) ?? 'python3';

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
  if (stampNative(entries)) return 'ns';
  if (process.env.GIT_XET_TEST_NO_PYTHON !== '1') {
    const input = Buffer.concat(entries.map((e) => Buffer.from(`${e.abs}\0${e.sec}\0${e.nsec}\0`, 'utf8')));
    const r = spawnSync(PYTHON3, ['-c', SET_NS], { input, stdio: ['pipe', 'ignore', 'pipe'] });
    if (r.status === 0) return 'ns';
  }
  return setTimesNode(entries);
}

/**
 * Times to the nanosecond through the native module, and each entry's stat data afterwards
 * (STAMP_RECORD bytes each, as the python stamper writes them); null when the module is not loaded
 * or an entry failed (gone, or a relative path): the caller's fallback then sets every time again.
 */
function stampNative(entries: TimeEntry[]): Buffer | null {
  if (!native?.stampMany) return null;
  if (!entries.length) return Buffer.alloc(0);
  const names = joinZ(entries.map((e) => e.abs));
  const times = new BigInt64Array(entries.length * 2);
  for (let i = 0; i < entries.length; i++) {
    times[2 * i] = BigInt(entries[i].sec);
    times[2 * i + 1] = BigInt(entries[i].nsec);
  }
  const out = Buffer.alloc(entries.length * STAMP_RECORD);
  const done = native.stampMany(names, Buffer.from(times.buffer), out);
  return done === entries.length ? out : null;
}

/** Times to the microsecond through libuv (see the top of this module). */
function setTimesNode(entries: TimeEntry[]): 'us' {
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

/** What a stamped file's lstat gave after its time was set: nanoseconds as bigint, as node's
 * bigint lstat has them (statFields in git/index-file.ts takes this shape). */
export interface StampedStat {
  ctimeNs: bigint;
  mtimeNs: bigint;
  dev: bigint;
  ino: bigint;
  uid: bigint;
  gid: bigint;
  size: bigint;
  nlink: bigint;
}

// Reads `path\0sec\0nsec\0` records as they arrive, sets each one's times (atime: now) and lstat-s
// it, and at the end of its input writes one record of eight little-endian 64-bit fields per path,
// in input order. Streaming lets it work while the files are still being written.
const STAMP = [
  'import os, struct, sys, time',
  'inp = sys.stdin.buffer',
  'now = time.time_ns()',
  'pack = struct.Struct("<qqQQQQQQ").pack',
  'out = []',
  'rest = b""',
  'while True:',
  '    got = inp.read1(1 << 16)',
  '    if not got:',
  '        break',
  '    parts = (rest + got).split(b"\\0")',
  '    n = (len(parts) - 1) // 3 * 3',
  '    for i in range(0, n, 3):',
  '        p = parts[i]',
  '        os.utime(p, ns=(now, int(parts[i + 1]) * 1000000000 + int(parts[i + 2])), follow_symlinks=False)',
  '        s = os.lstat(p)',
  '        out.append(pack(s.st_ctime_ns, s.st_mtime_ns, s.st_dev, s.st_ino, s.st_uid, s.st_gid, s.st_size, s.st_nlink))',
  '    rest = b"\\0".join(parts[n:])',
  'if rest:',
  '    sys.exit(3)',
  'sys.stdout.buffer.write(b"".join(out))',
].join('\n');
const STAMP_RECORD = 64;
/** Entries the native stamper takes at a time while files are still being laid. */
const NATIVE_BATCH = 4096;

/**
 * Sets times of files as they are handed over and returns each one's lstat afterwards, so that a
 * restore learns the stat data git must record (ctime changes with the times) without a second
 * pass of its own. One python3 process, started before the files exist (its start-up, a few
 * hundred ms behind a version manager's shim, overlaps the writing) and fed while they are being
 * written. Where python3 is missing or fails, node sets the times to the microsecond (as setTimes)
 * and lstat-s each file at the end.
 */
export class Stamper {
  private readonly entries: TimeEntry[] = [];
  private readonly child: ChildProcess | null;
  private readonly out: Buffer[] = [];
  private readonly exited: Promise<number | null>;
  private pending: Buffer[] = [];
  /** With the native module: entries stamped so far (in batches as they come), and whether every
   * batch succeeded. */
  private stampedUpTo = 0;
  private nativeOk = native?.stampMany !== undefined;

  constructor() {
    let child: ChildProcess | null = null;
    if (!this.nativeOk && process.env.GIT_XET_TEST_NO_PYTHON !== '1') {
      try {
        child = spawn(PYTHON3, ['-c', STAMP], { stdio: ['pipe', 'pipe', 'ignore'] });
      } catch {
        child = null;
      }
    }
    this.child = child;
    this.exited = new Promise((resolve) => {
      if (!child) return resolve(null);
      child.once('error', () => resolve(null));
      child.once('close', (code) => resolve(code));
      child.stdout?.on('data', (b: Buffer) => this.out.push(b));
      // A python that died early leaves the pipe closed: the node fallback takes over at finish.
      child.stdin?.on('error', () => undefined);
    });
  }

  /** Set `e`'s times once the file is complete (its content, and any hard links to it, written). */
  add(e: TimeEntry): number {
    this.entries.push(e);
    if (this.nativeOk && this.entries.length - this.stampedUpTo >= NATIVE_BATCH) this.stampBatch();
    if (this.child?.stdin) {
      this.pending.push(Buffer.from(`${e.abs}\0${e.sec}\0${e.nsec}\0`, 'utf8'));
      if (this.pending.length >= 256) this.flush();
    }
    return this.entries.length - 1;
  }

  private flush(): void {
    if (!this.pending.length || !this.child?.stdin?.writable) return;
    this.child.stdin.write(Buffer.concat(this.pending));
    this.pending = [];
  }

  /** Stamp what was added since the last batch (native module). */
  private stampBatch(): void {
    const got = stampNative(this.entries.slice(this.stampedUpTo));
    if (!got) {
      this.nativeOk = false; // finish() sets every time again through node
      return;
    }
    this.out.push(got);
    this.stampedUpTo = this.entries.length;
  }

  /** Every added entry's stat after its times were set, in the order they were added. */
  async finish(): Promise<{ stats: StampedStat[]; precision: 'ns' | 'us' }> {
    if (this.nativeOk) this.stampBatch();
    this.flush();
    this.child?.stdin?.end();
    const code = this.nativeOk ? 0 : await this.exited;
    const out = Buffer.concat(this.out);
    if (code === 0 && out.length === this.entries.length * STAMP_RECORD) {
      const stats: StampedStat[] = new Array(this.entries.length);
      for (let i = 0, at = 0; i < stats.length; i++, at += STAMP_RECORD) {
        stats[i] = {
          ctimeNs: out.readBigInt64LE(at),
          mtimeNs: out.readBigInt64LE(at + 8),
          dev: out.readBigUInt64LE(at + 16),
          ino: out.readBigUInt64LE(at + 24),
          uid: out.readBigUInt64LE(at + 32),
          gid: out.readBigUInt64LE(at + 40),
          size: out.readBigUInt64LE(at + 48),
          nlink: out.readBigUInt64LE(at + 56),
        };
      }
      return { stats, precision: 'ns' };
    }
    // No python3, or it failed part of the way: every time is set (again) from here.
    const precision = setTimesNode(this.entries);
    const stats = this.entries.map((e) => {
      const s = fs.lstatSync(e.abs, { bigint: true });
      return {
        ctimeNs: s.ctimeNs,
        mtimeNs: s.mtimeNs,
        dev: s.dev,
        ino: s.ino,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        nlink: s.nlink,
      };
    });
    return { stats, precision };
  }

  /** Stop python3 without waiting for it (the caller failed and removes the files). */
  abort(): void {
    this.child?.stdin?.destroy();
    this.child?.kill('SIGKILL');
  }
}
