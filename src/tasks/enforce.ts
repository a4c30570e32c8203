// Where task guards are enforced on git xet's own writes (issue 10): which slot a fork or a
// directory is, the checks the writing commands make (fork --remount, discard, reclaim, export),
// and the fence for overlay forks — mounted read-only while a stale guard stands, so even a
// process writing files directly is refused (EROFS). slot.ts owns the guard and the lease; this
// module owns where they are checked. docs/CLI.md "Guards: which writes are refused".

import * as fs from 'node:fs';
import { XetError } from '../errors';
import { findRepo, type Repo } from '../git/repo';
import { withExistingSidecar } from '../sidecar/db';
import { liveForkByGitDir, type ForkRow } from '../sidecar/forks';
import { workspaceId } from '../sidecar/workspaces';
import { isMounted, isMountedReadOnly, remountMode } from '../workspace/overlay';
import { assertSlotWritable, guardState, readGuardFile, slotOf, type Slot } from './slot';

/** The slot of a fork (its linked worktree); null while its creation has not made the worktree. */
export function forkSlot(repo: Pick<Repo, 'commonDir'>, row: Pick<ForkRow, 'dir' | 'gitDir'>): Slot | null {
  if (!row.gitDir) return null;
  return { id: workspaceId(row.gitDir), worktree: row.dir, gitDir: row.gitDir, commonDir: repo.commonDir };
}

/** The slot of the worktree `dir` is in. */
export async function slotForDir(dir: string): Promise<Slot> {
  return slotOf(await findRepo(dir));
}

/** assertSlotWritable for a fork (WORKDIR_RECOVERY_REQUIRED, WORKDIR_BUSY); a fork without a
 * worktree yet has no guard. */
export function assertForkWritable(repo: Pick<Repo, 'commonDir'>, row: Pick<ForkRow, 'dir' | 'gitDir'>, what: string) {
  const slot = forkSlot(repo, row);
  if (slot) assertSlotWritable(slot, what);
}

/**
 * Refuse only after a runner died (WORKDIR_RECOVERY_REQUIRED), not while a task runs: for writes
 * that touch a worktree's refs but not its files, index or HEAD (export --branch makes a branch no
 * worktree has checked out), which the guard's reference-transaction hook would refuse half way.
 */
export function refuseStale(slot: Slot, what: string): void {
  if (guardState(slot).state === 'stale') assertSlotWritable(slot, what);
}

export function hasStaleGuard(slot: Slot | null): boolean {
  return slot !== null && guardState(slot).state === 'stale';
}

export interface Fence {
  fenced: boolean;
  /** `fenced: …` or `unfenced: <why>`, for reports. */
  message: string;
}

function forkOfSlot(repo: Pick<Repo, 'commonDir'>, slot: Slot): ForkRow | null {
  return withExistingSidecar(repo.commonDir, (db) => liveForkByGitDir(db, slot.gitDir)) ?? null;
}

/**
 * While a stale guard stands on an overlay fork, make it read-only (`underOwnLease`: the caller holds
 * the slot's lease and has judged its guard stale; the guard need only still stand): `mount -o remount,ro` if it is
 * mounted writable (root, and no file open for writing in it); an unmounted one is only ever
 * mounted read-only by git xet while the guard stands (ensureMounted). Other slots cannot be
 * fenced: a worktree or a clone/copy fork is a plain directory.
 */
export async function fenceSlot(
  repo: Pick<Repo, 'commonDir'>,
  slot: Slot,
  opts: { underOwnLease?: boolean } = {},
): Promise<Fence> {
  // A recovery fences under the slot's lease, which it holds itself: guardState would read every
  // guard as live then. Its own judgement (the guard outlived its runner) is what counts, and the
  // lease keeps anyone from clearing the guard between that judgement and the remount.
  const stale = opts.underOwnLease ? readGuardFile(slot).state !== 'none' : guardState(slot).state === 'stale';
  if (!stale) return { fenced: false, message: 'unfenced: the slot has no stale guard' };
  const row = forkOfSlot(repo, slot);
  if (!row) return { fenced: false, message: 'unfenced: not a fork (a worktree is a plain directory)' };
  if (row.mode !== 'overlay') {
    return {
      fenced: false,
      message: `unfenced: a ${row.mode} fork is a plain directory, it has no mount to make read-only`,
    };
  }
  return fenceOverlay(row);
}

async function fenceOverlay(row: ForkRow): Promise<Fence> {
  if (!isMounted(row.dir)) {
    return { fenced: true, message: 'fenced: not mounted; git xet mounts it only read-only while the guard stands' };
  }
  if (isMountedReadOnly(row.dir)) return { fenced: true, message: 'fenced: mounted read-only' };
  const failure = await remountMode(row.dir, 'ro');
  if (failure) return { fenced: false, message: `unfenced: mount -o remount,ro ${row.dir} failed: ${failure}` };
  return { fenced: true, message: 'fenced: remounted read-only' };
}

/** Called by ensureMounted for a mounted overlay fork: fence it if a stale guard stands. */
export async function fenceIfStale(repo: Pick<Repo, 'commonDir'>, row: ForkRow): Promise<Fence | null> {
  if (row.mode !== 'overlay' || !hasStaleGuard(forkSlot(repo, row))) return null;
  return fenceOverlay(row);
}

/**
 * Undo a fence once no guard stands (fork --remount after task recover): remount a read-only
 * overlay fork writable. Returns whether it did.
 */
export async function unfenceFork(repo: Pick<Repo, 'commonDir'>, row: ForkRow): Promise<boolean> {
  const slot = forkSlot(repo, row);
  if (row.mode !== 'overlay' || !slot || !isMounted(row.dir) || !isMountedReadOnly(row.dir)) return false;
  assertSlotWritable(slot, 'fork remount');
  // Nothing else makes a fork's mount read-only; a fork whose layers are gone stays as it is.
  if (!row.upper || !fs.existsSync(row.upper)) return false;
  const failure = await remountMode(row.dir, 'rw');
  if (failure) throw new XetError('FORK_BROKEN', `mount -o remount,rw ${row.dir} failed: ${failure}`, { dir: row.dir });
  return true;
}
