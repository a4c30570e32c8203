// Advisory locks between git xet processes, held as SQLite write transactions on a small lock
// database. The kernel owns the underlying POSIX lock: it is released when the holder exits, however
// it exits (SIGKILL included), so there is never a stale lock to judge or take over, and no race in
// doing so. A live holder makes others wait up to a timeout, then fail with BUSY.

import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';

export interface Lock {
  release(): void;
}

export function acquireLock(file: string, what: string, timeoutMs = 30000): Lock {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  // Rollback-journal mode: a write transaction takes a plain byte-range lock on this file.
  const db = new Database(file, { timeout: timeoutMs });
  try {
    db.pragma('journal_mode = DELETE');
    db.exec('BEGIN IMMEDIATE');
  } catch (e) {
    db.close();
    if ((e as { code?: string }).code === 'SQLITE_BUSY') {
      throw new XetError('BUSY', `another git xet process is ${what}; try again when it has finished`, {
        lock: file,
      });
    }
    throw e;
  }
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      db.exec('ROLLBACK');
      db.close();
    },
  };
}
