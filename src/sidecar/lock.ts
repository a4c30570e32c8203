// Advisory locks between git xet processes: a file created with O_EXCL holding the owner's pid.
// A lock whose owner is gone (killed with SIGKILL, say) is taken over; a live owner makes us wait up
// to a timeout and then fail with BUSY, never corrupt shared state.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';

export interface Lock {
  release(): void;
}

function ownerAlive(file: string): boolean {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return true; // vanished or unreadable: treat as held and retry
  }
  const [pidText, host] = text.split('\n');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) {
    // Half-written by an owner that died between create and write: old enough means dead.
    try {
      return Date.now() - fs.statSync(file).mtimeMs < 5000;
    } catch {
      return true;
    }
  }
  if (host && host !== os.hostname()) return true; // cannot judge another machine's process
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export function acquireLock(file: string, what: string, timeoutMs = 30000): Lock {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const fd = fs.openSync(file, 'wx', 0o644);
      fs.writeSync(fd, `${process.pid}\n${os.hostname()}\n`);
      const ino = fs.fstatSync(fd).ino;
      fs.closeSync(fd);
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          // Only our own file: if it was taken over (we were judged dead), the new owner's stays.
          const st = fs.statSync(file, { throwIfNoEntry: false });
          if (st && st.ino === ino) fs.rmSync(file, { force: true });
        },
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    if (!ownerAlive(file)) {
      // Take over by renaming the stale file away first, so two takers cannot both delete a fresh lock.
      const stale = `${file}.stale-${process.pid}`;
      try {
        fs.renameSync(file, stale);
        if (ownerAlive(stale)) {
          // Someone re-locked in between and we moved a live lock: put it back if we can.
          try {
            fs.linkSync(stale, file);
          } catch {
            /* the slot was taken again; the live owner's file is still ours to drop */
          }
        }
        fs.rmSync(stale, { force: true });
      } catch {
        /* another process took it over first */
      }
      continue;
    }
    if (Date.now() >= deadline) {
      throw new XetError('BUSY', `another git xet process is ${what}; try again when it has finished`, {
        lock: file,
      });
    }
    sleep(25 + Math.floor(Math.random() * 50));
  }
}
