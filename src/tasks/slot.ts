// Workspace slots: a worktree a task may write (the current one, another linked worktree, a fork).
// A slot has a writer lease and, while a writing task runs, a persistent guard; both live in the
// worktree's own git dir, beside each other, so every linked worktree has its own and the hooks find
// the guard with shell builtins alone.
//
//   <git dir>/xet-slot.lock   the writer lease: a SQLite file held in an EXCLUSIVE transaction by
//                             the runner. The kernel drops the lock however the runner ends
//                             (SIGKILL too); a child process never inherits it (POSIX locks).
//   <git dir>/xet-guard       the guard (docs/FORMAT.md "Task guards"): published atomically after
//                             the lease is taken, removed before it is released. A guard whose
//                             lease is free means its runner died: the slot fails closed.
//
// The first line of the guard is for hooks/guard.sh (POSIX sh, no node): it names the task and the
// runner's identity, so a hook can tell a live runner (commits from inside the task are fine) from a
// dead one (refused) without the lease, which shell cannot test.

import Database from 'better-sqlite3';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import { workspaceId } from '../sidecar/workspaces';
import { TASK_ENV } from './model';
import type { ProcessIdentity } from './proc';

export interface Slot {
  /** workspaceId(gitDir): the same id capture uses for the worktree. */
  id: string;
  worktree: string;
  gitDir: string;
  commonDir: string;
}

export function slotOf(repo: Repo): Slot {
  return { id: workspaceId(repo.gitDir), worktree: repo.worktree, gitDir: repo.gitDir, commonDir: repo.commonDir };
}

export const GUARD_FILE = 'xet-guard';
export const LEASE_FILE = 'xet-slot.lock';
export const GUARD_SCHEMA = 'xet.guard/v1';

export function guardPath(slot: Pick<Slot, 'gitDir'>): string {
  return path.join(slot.gitDir, GUARD_FILE);
}
export function leasePath(slot: Pick<Slot, 'gitDir'>): string {
  return path.join(slot.gitDir, LEASE_FILE);
}

// ---------------------------------------------------------------------------------------------
// The writer lease

export interface Lease {
  slot: Slot;
  release(): void;
}

/**
 * Take the slot's writer lease, or return null if a live process holds it. `waitMs` rides out the
 * instant another process probes it (leaseHeld takes and drops it).
 */
export function tryAcquireLease(slot: Slot, waitMs = 300): Lease | null {
  const db = new Database(leasePath(slot), { timeout: waitMs });
  try {
    db.pragma('journal_mode = DELETE');
    db.exec('CREATE TABLE IF NOT EXISTS lease (x INTEGER)');
    db.exec('BEGIN EXCLUSIVE');
  } catch (e) {
    db.close();
    if ((e as { code?: string }).code === 'SQLITE_BUSY' || (e as { code?: string }).code === 'SQLITE_LOCKED')
      return null;
    throw e;
  }
  let released = false;
  return {
    slot,
    release() {
      if (released) return;
      released = true;
      try {
        db.exec('ROLLBACK');
      } finally {
        db.close();
      }
    },
  };
}

/** Whether a live process holds the slot's lease (takes and drops it when free). */
export function leaseHeld(slot: Slot): boolean {
  if (!fs.existsSync(leasePath(slot))) return false;
  const lease = tryAcquireLease(slot, 50);
  if (!lease) return true;
  lease.release();
  return false;
}

// ---------------------------------------------------------------------------------------------
// The guard

export interface Guard {
  schema: typeof GUARD_SCHEMA;
  task: string;
  slot: string;
  /** The process holding the lease (the runner, or the supervisor that reattached). */
  runner: ProcessIdentity;
  /** The command's process (its group leader), once started. */
  command: ProcessIdentity | null;
  createdAt: string;
}

const TASK_ID_RE = /^[0-9a-f]{16}$/;

/** The guard's bytes: a line for shell, then the canonical JSON. */
export function formatGuard(g: Guard): string {
  const json = JSON.stringify({
    command: g.command,
    createdAt: g.createdAt,
    runner: g.runner,
    schema: g.schema,
    slot: g.slot,
    task: g.task,
  });
  return `xet-guard 1 ${g.task} ${g.runner.pid} ${g.runner.start} ${g.runner.boot}\n${json}\n`;
}

/** Parse a guard; null if it is not one (a malformed guard still fails the slot closed). */
export function parseGuard(text: string): Guard | null {
  const [line, json] = text.split('\n');
  const head = /^xet-guard 1 ([0-9a-f]{16}) (\d+) (\d+) ([0-9a-f-]{36})$/.exec(line ?? '');
  if (!head) return null;
  try {
    const g = JSON.parse(json) as Guard;
    if (g.schema !== GUARD_SCHEMA || g.task !== head[1] || !TASK_ID_RE.test(g.task)) return null;
    if (String(g.runner?.pid) !== head[2] || g.runner.start !== head[3] || g.runner.boot !== head[4]) return null;
    return g;
  } catch {
    return null;
  }
}

/** Publish (or replace) the guard atomically: a private temporary file, fsync, rename. */
export function publishGuard(slot: Slot, g: Guard): void {
  const file = guardPath(slot);
  const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`;
  const fd = fs.openSync(tmp, 'wx', 0o644);
  try {
    fs.writeSync(fd, formatGuard(g));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  syncDir(slot.gitDir);
}

/** Remove the guard if it is still `task`'s. Returns whether it removed one. */
export function removeGuard(slot: Slot, task: string): boolean {
  const cur = readGuardFile(slot);
  if (cur.state === 'none') return false;
  if (cur.state === 'guard' && cur.guard.task !== task) return false;
  fs.rmSync(guardPath(slot), { force: true });
  syncDir(slot.gitDir);
  return true;
}

function syncDir(dir: string): void {
  try {
    const fd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    // a directory that cannot be opened for sync: the rename is still atomic
  }
}

export type GuardFile = { state: 'none' } | { state: 'guard'; guard: Guard } | { state: 'malformed'; text: string };

export function readGuardFile(slot: Pick<Slot, 'gitDir'>): GuardFile {
  let text: string;
  try {
    // A guard is two short lines; anything large is not one (and is not read whole).
    const fd = fs.openSync(guardPath(slot), 'r');
    try {
      const buf = Buffer.alloc(4096);
      const n = fs.readSync(fd, buf, 0, buf.length, 0);
      text = buf.subarray(0, n).toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'none' };
    throw e;
  }
  const guard = parseGuard(text);
  return guard ? { state: 'guard', guard } : { state: 'malformed', text: text.slice(0, 200) };
}

/**
 * none: no task may be writing; live: a runner holds the lease; stale: the guard outlived its
 * runner (or is malformed) — the slot fails closed until `task recover` clears it.
 */
export type GuardState = { state: 'none' } | { state: 'live'; guard: Guard } | { state: 'stale'; guard: Guard | null };

export function guardState(slot: Slot): GuardState {
  const f = readGuardFile(slot);
  if (f.state === 'none') return { state: 'none' };
  const guard = f.state === 'guard' ? f.guard : null;
  if (guard && leaseHeld(slot)) return { state: 'live', guard };
  return { state: 'stale', guard };
}

/**
 * Refuse a git xet write to `slot` (`what` says which: "fork remount", "discard", "export", …):
 * WORKDIR_RECOVERY_REQUIRED after a runner died, WORKDIR_BUSY while another task writes it. A
 * git xet command run by that task itself (XET_TASK_ID in its environment) may write.
 */
export function assertSlotWritable(slot: Slot, what: string): void {
  const g = guardState(slot);
  if (g.state === 'none') return;
  const task = g.guard?.task ?? null;
  if (g.state === 'stale') {
    throw new XetError(
      'WORKDIR_RECOVERY_REQUIRED',
      `${what} refused: the runner of task ${task ?? '(unreadable guard)'} died while it could write ${slot.worktree}; run git xet task recover`,
      { slot: slot.id, worktree: slot.worktree, task },
    );
  }
  if (task && process.env[TASK_ENV.id] === task) return;
  throw new XetError('WORKDIR_BUSY', `${what} refused: task ${task} is writing ${slot.worktree}`, {
    slot: slot.id,
    worktree: slot.worktree,
    task,
  });
}
