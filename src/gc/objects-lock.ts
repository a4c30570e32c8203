// The repository's objects lock: many git xet commands that make objects or refs reachable again
// (capture, fork, handoff create/accept, fetch, export, pin, undrop, reclaim) hold it shared for
// their whole run; `git xet gc` holds it exclusive from marking the roots to the end of Git's
// object reclamation. Why: those commands reuse objects already in the repository without
// rewriting them (a capture takes an unchanged file's blob id from its stat cache), so Git's
// object-age grace does not protect them — an old blob of a snapshot gc is dropping could be
// pruned between a capture's decision to reuse it and its ref. With the lock, a gc sees every
// such command either finished (its ref or row is a root) or not yet started.
//
// Held as SQLite locks on `<common>/xet/locks/objects.lockdb` in rollback-journal mode: a read
// transaction holds a SHARED lock, `BEGIN EXCLUSIVE` waits until no reader is left and blocks new
// ones while it waits (writer preference), and the kernel drops every lock of a process however it
// exits, SIGKILL included: no stale lock to judge or take over.

import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { sidecarDir } from '../sidecar/db';

export interface ObjectsLock {
  release(): void;
}

/** How long a command waits for a running gc (and gc for running commands) before BUSY. */
export const OBJECTS_LOCK_WAIT_MS = Number(process.env.GIT_XET_OBJECTS_LOCK_WAIT_MS) || 30 * 60_000;

let sharedHeld = 0;
let sharedDb: Database.Database | null = null;
let sharedFile = '';

function lockFile(commonDir: string): string {
  return path.join(sidecarDir(commonDir), 'locks', 'objects.lockdb');
}

function open(file: string, timeoutMs: number): Database.Database {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const db = new Database(file, { timeout: timeoutMs });
  try {
    db.pragma('journal_mode = DELETE');
    // A table to read, so a read transaction really takes the SHARED lock.
    db.exec('CREATE TABLE IF NOT EXISTS held (x INTEGER)');
    return db;
  } catch (e) {
    db.close();
    throw e;
  }
}

function busy(e: unknown): boolean {
  return (e as { code?: string }).code === 'SQLITE_BUSY';
}

/**
 * Hold the objects lock shared: returns once no gc is running. Re-entrant within a process
 * (a discard captures; a capture captures inner repositories). `onWait` is called once if a gc
 * holds it, before waiting (a progress line says so).
 */
export function holdObjectsShared(commonDir: string, onWait?: () => void, waitMs = OBJECTS_LOCK_WAIT_MS): ObjectsLock {
  const file = lockFile(commonDir);
  if (sharedHeld > 0 && sharedFile === file) {
    sharedHeld++;
    return releaser(() => dropShared());
  }
  if (sharedHeld > 0) {
    // Another repository (an inner one, a restore source): its own lock, not counted here.
    return acquireShared(file, onWait, waitMs);
  }
  const lock = acquireShared(file, onWait, waitMs);
  sharedHeld = 1;
  sharedFile = file;
  sharedDb = (lock as unknown as { db: Database.Database }).db;
  return releaser(() => dropShared());
}

function dropShared(): void {
  sharedHeld--;
  if (sharedHeld === 0 && sharedDb) {
    sharedDb.exec('COMMIT');
    sharedDb.close();
    sharedDb = null;
    sharedFile = '';
  }
}

/**
 * Open the lock database and start a transaction with `begin`: at once if the lock is free, else,
 * after telling `onWait`, waiting up to `waitMs` (SQLite's busy handler), then BUSY naming `holder`.
 */
function acquire(
  file: string,
  begin: (db: Database.Database) => void,
  onWait: (() => void) | undefined,
  waitMs: number,
  holder: string,
): Database.Database {
  const attempt = (timeoutMs: number): Database.Database => {
    const d = open(file, timeoutMs);
    try {
      begin(d);
      return d;
    } catch (e) {
      d.close();
      throw e;
    }
  };
  try {
    return attempt(0);
  } catch (e) {
    if (!busy(e)) throw e;
    onWait?.();
    try {
      return attempt(waitMs);
    } catch (e2) {
      if (busy(e2)) throw busyError(file, holder);
      throw e2;
    }
  }
}

function acquireShared(
  file: string,
  onWait: (() => void) | undefined,
  waitMs: number,
): ObjectsLock & { db: Database.Database } {
  const db = acquire(
    file,
    (d) => {
      d.exec('BEGIN');
      d.prepare('SELECT count(*) FROM held').get();
    },
    onWait,
    waitMs,
    'collecting garbage (git xet gc)',
  );
  return Object.assign(
    releaser(() => {
      db.exec('COMMIT');
      db.close();
    }),
    { db },
  );
}

/**
 * Hold the objects lock exclusively (git xet gc): waits until every command holding it shared has
 * finished, and keeps new ones waiting meanwhile. Must not be called while this process holds it
 * shared (that would wait for itself).
 */
export function holdObjectsExclusive(
  commonDir: string,
  onWait?: () => void,
  waitMs = OBJECTS_LOCK_WAIT_MS,
): ObjectsLock {
  const file = lockFile(commonDir);
  if (sharedHeld > 0) throw new Error('holdObjectsExclusive called while this process holds the lock shared');
  const db = acquire(
    file,
    (d) => d.exec('BEGIN EXCLUSIVE'),
    onWait,
    waitMs,
    'using the repository (capture, fork, fetch …) or collecting garbage',
  );
  return releaser(() => {
    db.exec('ROLLBACK');
    db.close();
  });
}

function releaser(fn: () => void): ObjectsLock {
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      fn();
    },
  };
}

function busyError(file: string, what: string): XetError {
  return new XetError('BUSY', `another git xet process is ${what}; try again when it has finished`, { lock: file });
}

/** Run `fn` holding the objects lock shared. */
export async function withObjectsShared<T>(commonDir: string, fn: () => Promise<T>, onWait?: () => void): Promise<T> {
  const lock = holdObjectsShared(commonDir, onWait);
  try {
    return await fn();
  } finally {
    lock.release();
  }
}
