// Discarding a fork: capture first if it holds any change (so nothing is lost), then unmount and
// remove it. Only registered forks are ever removed, and only after checking that the directory
// still is that fork. One discard per fork at a time (a lock); once its work is kept, the row says
// so ('discarding', with the snapshot), so a discard killed half way is finished by the next one
// without capturing the half-removed tree.

import { holdObjectsShared } from '../gc/objects-lock';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import { sidecarDir, withSidecar } from '../sidecar/db';
import { markDiscarded, markDiscarding, liveForkAt, type ForkRow } from '../sidecar/forks';
import { acquireLock } from '../sidecar/lock';
import { capture } from '../snapshot/capture';
import { forkIsDirty } from './changes';
import { removeDeep } from './copy';
import { ensureUsable, removeForkFiles, resolveFork } from './fork';
import { holders, isMounted, mountsUnder, unmount } from './overlay';
import { dieAt, faultPoint } from '../testing/fault-points';
import { dropReclaimView } from './reclaim-view';
import { assertForkWritable } from '../tasks/enforce';

export interface DiscardOptions {
  cwd: string;
  dir: string;
  /** false: drop the fork's changes without capturing them (explicit --no-capture). */
  capture: boolean;
}

export interface DiscardResult {
  id: string;
  dir: string;
  /** The snapshot that keeps the fork's work, or null if it had none (or --no-capture). */
  snapshot: string | null;
  dirty: boolean | null;
  /** A directory left in place because it no longer holds the fork (it may be someone else's). */
  left: string | null;
}

export async function discardFork(options: DiscardOptions): Promise<DiscardResult> {
  const found = await resolveFork(options.cwd, options.dir);
  const { repo } = found;
  assertForkWritable(repo, found.row, 'discard');
  // Shared objects lock (its capture reuses objects; its kept snapshot must be a root before a gc
  // marks), taken before the fork's lock.
  const objectsLock = holdObjectsShared(repo.commonDir);
  let lock;
  try {
    lock = acquireLock(
      path.join(sidecarDir(repo.commonDir), 'locks', `fork-${found.row.id}.lockdb`),
      'discarding this fork',
    );
  } catch (e) {
    objectsLock.release();
    throw e;
  }
  try {
    // Whoever held the lock before us may have finished the job.
    const row = withSidecar(repo.commonDir, (db) => liveForkAt(db, found.row.dir));
    if (!row || row.id !== found.row.id) {
      throw new XetError('FORK_NOT_FOUND', `${found.row.dir} was discarded meanwhile`, { dir: found.row.dir });
    }
    // Again under the lock: a task may have started in the fork while we waited for it.
    assertForkWritable(repo, row, 'discard');
    return await discardLocked(repo, row, options);
  } finally {
    lock.release();
    objectsLock.release();
  }
}

async function discardLocked(repo: Repo, row: ForkRow, options: DiscardOptions): Promise<DiscardResult> {
  let dirty: boolean | null = null;
  let kept: string | null = row.keptSnapshot;
  // A reclaim killed with its read-only view of this fork mounted left it behind.
  if (row.mode === 'overlay') await dropReclaimView(repo, row.id);
  if (row.state === 'active') {
    // A discard run from inside the fork must not keep it busy itself.
    process.chdir(repo.commonDir);
    if (options.capture) {
      await ensureUsable(repo, row);
      if (!holdsFork(row)) {
        throw new XetError(
          'FORK_BROKEN',
          `${row.dir} does not hold fork ${row.id} (its layers or its link to the repository are gone); ` +
            'nothing was removed. Look at it, then discard with --no-capture if it holds nothing you need',
          { dir: row.dir },
        );
      }
      dirty = await forkIsDirty(repo, row);
      if (dirty) kept = await keepWork(row);
      await faultPoint('discard:after-capture');
    }
    refuseBusy(row, kept);
    withSidecar(repo.commonDir, (db) => markDiscarding(db, row.id, kept));
    await faultPoint('discard:after-mark');
  }
  const left = await removeFork(repo, row, kept);
  return { id: row.id, dir: row.dir, snapshot: kept, dirty, left };
}

/** Capture everything the fork holds, ignored files included whatever the capture policy says (a
 * discard must keep the fork's state, not a selection of it); refuse if anything was left out. */
async function keepWork(row: ForkRow): Promise<string> {
  // Settling work: keeping a fork's work may use the headroom (docs/DESIGN-NOTES.md "Storage allowance").
  const r = await capture({
    cwd: row.dir,
    message: `git xet discard: fork ${row.id}`,
    ignored: 'all',
    admissionClass: 'settle',
  });
  const left = [...r.excludedSecrets, ...r.skipped.map((s) => s.path)];
  if (left.length || r.excludedByPattern > 0) {
    throw new XetError(
      'WORK_NOT_KEPT',
      `the capture before discarding left ${left.length + r.excludedByPattern} file(s) out ` +
        `(${left[0] ?? 'xet.capture.exclude patterns'}); the fork stays. ` +
        'Capture them explicitly (--include), or discard with --no-capture',
      { dir: row.dir, snapshot: r.snapshot, paths: left.slice(0, 50), excludedByPattern: r.excludedByPattern },
    );
  }
  return r.snapshot;
}

/** Whether the fork's directory (mounted, for overlay) still is the registered linked worktree. */
function holdsFork(row: ForkRow): boolean {
  try {
    const m = /^gitdir: (.*)$/m.exec(fs.readFileSync(path.join(row.dir, '.git'), 'utf8'));
    return Boolean(m && row.gitDir && fs.realpathSync(path.resolve(row.dir, m[1])) === row.gitDir);
  } catch {
    return false;
  }
}

/** A fork something still uses stays: processes with a file or cwd in it, or mounts inside it. */
function refuseBusy(row: ForkRow, kept: string | null): void {
  if (!fs.existsSync(row.dir)) return;
  const pids = holders(row.dir).filter((p) => p !== process.pid);
  const inner = mountsUnder(row.dir).filter((m) => m !== row.dir);
  if (!pids.length && !inner.length) return;
  const what = pids.length
    ? `process ${pids.join(', ')}`
    : `the mount${inner.length > 1 ? 's' : ''} ${inner.join(', ')}`;
  throw new XetError(
    'FORK_BUSY',
    `fork ${row.id} is in use by ${what}; nothing was removed` +
      (kept ? ` (its work is kept in snapshot ${kept})` : ''),
    { dir: row.dir, pids, mounts: inner, snapshot: kept },
  );
}

/** Remove the fork; returns the directory if it had to be left in place. */
async function removeFork(repo: Repo, row: ForkRow, kept: string | null): Promise<string | null> {
  if (row.mode === 'overlay' && isMounted(row.dir)) {
    const r = await unmount(row.dir);
    if (r === 'busy') {
      const pids = holders(row.dir).filter((p) => p !== process.pid);
      throw new XetError(
        'FORK_BUSY',
        `fork ${row.id} is in use${pids.length ? ` by process ${pids.join(', ')}` : ''}; nothing was removed` +
          (kept ? ` (its work is kept in snapshot ${kept})` : ''),
        { dir: row.dir, pids, snapshot: kept },
      );
    }
    if (r !== 'ok') throw new XetError('FORK_BROKEN', `cannot unmount ${row.dir}: ${r.error}`, { dir: row.dir });
  }
  let left: string | null = null;
  if (fs.existsSync(row.dir)) {
    if (row.mode === 'overlay') {
      // The unmounted mountpoint: empty unless someone wrote into it meanwhile (then it stays).
      if (fs.readdirSync(row.dir).length === 0) fs.rmdirSync(row.dir);
      else left = row.dir;
    } else if (holdsFork(row) || row.state !== 'active') {
      // Ours: it links to the fork's worktree, or its creation or removal was under way.
      await removeTree(row.dir);
    } else {
      left = row.dir; // an active fork whose link is gone: its contents may not be ours to delete
    }
  }
  await removeForkFiles(repo, row);
  withSidecar(repo.commonDir, (db) => markDiscarded(db, row.id, kept, new Date().toISOString()));
  return left;
}

/** Remove a copy or clone fork's tree, its `.git` link last: while any of it remains, the directory
 * still says which worktree it is. */
async function removeTree(dir: string): Promise<void> {
  await removeDeep(dir, { except: '.git' });
  dieAt('discard:mid-removal');
  fs.rmSync(path.join(dir, '.git'), { force: true });
  fs.rmdirSync(dir);
}
