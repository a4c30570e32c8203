// Reclaiming a fork: capture it, verify the snapshot against it, pin the snapshot, then remove the
// fork; `git xet fork <snapshot> <dir>` brings it back. Only where nothing can write to the fork from
// the check to the end: an overlay fork is unmounted first (the kernel refuses while any process has
// a file or its cwd inside) and captured from a private read-only view of its layers
// (reclaim-view.ts). A clone or copy fork has no such mechanism and is refused (FORK_NOT_EXCLUSIVE)
// unless forced, and then a scan of /proc (open files, cwds) is all that stands between a writer
// and the removal.
//
// Order and crashes: the pin comes before the row says 'discarding' (with the snapshot and
// reclaimed_at), and that before the first removal; a run killed before the mark left the fork
// whole (an overlay fork unmounted: the next reclaim, discard or remount mounts it again), one
// killed after it is finished by the next reclaim or discard. One reclaim or discard per fork at a
// time (discard's lock).
//
// Activity (for --idle): the newest mtime or ctime of the fork's creation, its worktree admin dir's
// index, HEAD and logs/, and of its files: for an overlay fork every entry of the upper layer (the
// only place it writes, so the cost follows the changes), for a clone or copy fork every entry of the
// tree. Reading does not count; a process that still has a file or its cwd in the fork makes the
// reclaim refuse instead (FORK_BUSY).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { readHead, sameHead, type HeadState } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { holdObjectsShared } from '../gc/objects-lock';
import { parseDuration } from '../gc/duration';
import { markerRef } from '../gc/markers';
import { pinSnapshot } from '../gc/pins';
import { sidecarDir, withSidecar } from '../sidecar/db';
import { listForks, liveForkAt, markDiscarded, markReclaiming, type ForkMode, type ForkRow } from '../sidecar/forks';
import { acquireLock } from '../sidecar/lock';
import { capture } from '../snapshot/capture';
import { readSnapshot } from '../snapshot/store';
import { compareFiles, compareIndex, withScratchObjects, type Difference } from '../snapshot/verify';
import { dieAt, faultPoint } from '../testing/fault-points';
import { baseFor, ensureBase } from './base';
import { removeDeep } from './copy';
import { ensureLayer, ensureMounted, ensureUsable, removeForkFiles, resolveFork } from './fork';
import { holders, isMounted, mountsUnder, unmount } from './overlay';
import { dropReclaimView, mountReclaimView } from './reclaim-view';
import { assertForkWritable } from '../tasks/enforce';

export interface ReclaimOptions {
  cwd: string;
  /** One fork, or (with `idle`) every live fork idle that long. */
  dir?: string;
  idle?: string;
  /** Reclaim clone and copy forks too, trusting a scan of /proc instead of a guarantee. */
  force: boolean;
  now?: Date;
  progress?: (what: string) => void;
}

export interface ReclaimedFork {
  dir: string;
  id: string;
  mode: ForkMode;
  /** The snapshot that holds the fork's state: `git xet fork <snapshot> <dir>` brings it back. */
  snapshot: string;
  /** Always true for a reclaimed fork: the snapshot is pinned (refs/xet/pins/<snapshot>). */
  pinned: boolean;
  pinRef: string;
  /** How writers were kept out: 'unmounted' (overlay), 'scan' (clone/copy with --force). */
  exclusion: 'unmounted' | 'scan';
  /** The fork's last activity (ISO time); null when it was finishing an interrupted reclaim. */
  lastActivity: string | null;
  /** An earlier reclaim of this fork was killed after its mark; this run finished its removal. */
  resumed: boolean;
  /** The fork's directory was left in place: something wrote into the unmounted mountpoint. */
  left: string | null;
}

export interface ReclaimRefusal {
  dir: string;
  id: string;
  mode: ForkMode;
  code: string;
  message: string;
  lastActivity: string | null;
}

export interface ReclaimResult {
  /** The --idle threshold in seconds; null for a single fork. */
  idleSeconds: number | null;
  reclaimed: ReclaimedFork[];
  refused: ReclaimRefusal[];
  /** Live forks with activity more recent than --idle (left alone). */
  active: { dir: string; id: string; mode: ForkMode; lastActivity: string }[];
}

export async function reclaim(options: ReclaimOptions): Promise<ReclaimResult> {
  if ((options.dir === undefined) === (options.idle === undefined)) {
    throw new XetError('USAGE', 'name one fork directory, or pass --idle DURATION (not both)');
  }
  const now = options.now ?? new Date();
  const idleSeconds = options.idle === undefined ? null : parseDuration(options.idle, '--idle duration');
  const result: ReclaimResult = { idleSeconds, reclaimed: [], refused: [], active: [] };
  if (options.dir !== undefined) {
    const { repo, row } = await resolveFork(options.cwd, options.dir);
    const lock = holdObjectsShared(repo.commonDir);
    try {
      result.reclaimed.push(await reclaimOne(repo, row, options.force, null, options.progress));
    } finally {
      lock.release();
    }
    return result;
  }
  const repo = await findRepo(options.cwd, true);
  const lock = holdObjectsShared(repo.commonDir);
  try {
    // Decided once, before the first reclaim: a long run does not make later forks look idler.
    // Incomplete forks ('creating') and discards under way are discard's to finish, not ours.
    const rows = withSidecar(repo.commonDir, (db) => listForks(db, false))
      .filter((row) => row.state === 'active' || (row.state === 'discarding' && row.reclaimedAt))
      .map((row) => ({ row, activity: row.state === 'active' ? lastActivity(row) : null }));
    for (const { row, activity } of rows) {
      if (activity) {
        const idleFor = (now.getTime() - activity.getTime()) / 1000;
        if (idleSeconds === Infinity || idleFor < (idleSeconds ?? 0)) {
          result.active.push({ dir: row.dir, id: row.id, mode: row.mode, lastActivity: activity.toISOString() });
          continue;
        }
      }
      try {
        result.reclaimed.push(await reclaimOne(repo, row, options.force, activity, options.progress));
      } catch (e) {
        if (!(e instanceof XetError)) throw e;
        result.refused.push({
          dir: row.dir,
          id: row.id,
          mode: row.mode,
          code: e.code,
          message: e.message,
          lastActivity: activity?.toISOString() ?? null,
        });
      }
    }
  } finally {
    lock.release();
  }
  return result;
}

async function reclaimOne(
  repo: Repo,
  found: ForkRow,
  force: boolean,
  activity: Date | null,
  progress: (what: string) => void = () => undefined,
): Promise<ReclaimedFork> {
  // The same lock as discard: a discard and a reclaim of one fork take turns.
  const lock = acquireLock(
    path.join(sidecarDir(repo.commonDir), 'locks', `fork-${found.id}.lockdb`),
    'discarding or reclaiming this fork',
  );
  try {
    const row = withSidecar(repo.commonDir, (db) => liveForkAt(db, found.dir));
    if (!row || row.id !== found.id) {
      throw new XetError('FORK_NOT_FOUND', `${found.dir} was discarded or reclaimed meanwhile`, { dir: found.dir });
    }
    // A fork a task writes (or whose runner died) is not reclaimed: --idle lists it as refused.
    assertForkWritable(repo, row, 'reclaim');
    // Run from inside the fork, this process must not keep it busy itself.
    process.chdir(repo.commonDir);
    if (row.state === 'discarding') {
      if (!row.reclaimedAt || !row.keptSnapshot) {
        throw new XetError(
          'USAGE',
          `fork ${row.id} is being discarded (a discard did not finish); run git xet discard ${row.dir}`,
          { dir: row.dir },
        );
      }
      if (row.mode === 'overlay') await dropReclaimView(repo, row.id);
      return await finish(repo, row, row.keptSnapshot, row.mode === 'overlay' ? 'unmounted' : 'scan', null, true);
    }
    if (row.state !== 'active') {
      throw new XetError('FORK_BROKEN', `fork ${row.id} was never completed; git xet discard removes it`, {
        dir: row.dir,
      });
    }
    const at = (activity ?? lastActivity(row)).toISOString();
    if (row.mode === 'overlay') return await reclaimOverlay(repo, row, at, progress);
    if (!force) {
      throw new XetError(
        'FORK_NOT_EXCLUSIVE',
        `fork ${row.id} is a ${row.mode} fork: nothing stops a process from writing to it between the capture ` +
          'and its removal (only an overlay fork can be unmounted first). Pass --force to reclaim it after a ' +
          'scan for processes using it, which is not a guarantee',
        { dir: row.dir, mode: row.mode },
      );
    }
    return await reclaimScanned(repo, row, at, progress);
  } finally {
    lock.release();
  }
}

async function reclaimOverlay(repo: Repo, row: ForkRow, at: string, progress: (w: string) => void) {
  // A fork with a layer whose mount is gone (a reboot): the layer holds its upper dir.
  await ensureLayer(repo, row);
  if (!row.upper || !row.gitDir || !fs.existsSync(path.join(row.upper, '.git')) || !fs.existsSync(row.gitDir)) {
    throw new XetError('FORK_BROKEN', `the layers or the worktree admin dir of fork ${row.id} are missing`, {
      dir: row.dir,
    });
  }
  await dropReclaimView(repo, row.id);
  if (isMounted(row.dir)) {
    const inner = mountsUnder(row.dir).filter((m) => m !== row.dir);
    if (inner.length) throw busy(row, [], inner);
    progress('unmounting the fork');
    const r = await unmount(row.dir);
    if (r === 'busy')
      throw busy(
        row,
        holders(row.dir).filter((p) => p !== process.pid),
        [],
      );
    if (r !== 'ok') throw new XetError('FORK_BROKEN', `cannot unmount ${row.dir}: ${r.error}`, { dir: row.dir });
  } else if (fs.existsSync(row.dir) && fs.readdirSync(row.dir).length > 0) {
    // Not mounted (a reboot, or a reclaim killed after unmounting) and not empty: not the fork's.
    throw new XetError('FORK_BROKEN', `${row.dir} is not mounted and holds files of its own; nothing was changed`, {
      dir: row.dir,
    });
  }
  await faultPoint('reclaim:after-unmount');
  let kept: { snapshot: string; pinRef: string };
  try {
    let base = baseFor(repo, row.snapshot);
    if (!fs.existsSync(base.index)) {
      base = (await ensureBase(repo, await readSnapshot(row.snapshot, repoOpts(repo)))).base;
    }
    const view = await mountReclaimView(repo, row.id, row.upper, base.tree);
    if (!linksTo(view, row.gitDir)) {
      throw new XetError('FORK_BROKEN', `the layers of fork ${row.id} no longer link to its worktree`, {
        dir: row.dir,
      });
    }
    kept = await keep(repo, row, view, progress);
    withSidecar(repo.commonDir, (db) => markReclaiming(db, row.id, kept.snapshot, new Date().toISOString()));
  } catch (e) {
    throw await putBack(repo, row, e);
  }
  await dropReclaimView(repo, row.id);
  return finish(repo, row, kept.snapshot, 'unmounted', at, false);
}

/** After a failure before the mark: the fork as it was (mounted again), nothing lost. */
async function putBack(repo: Repo, row: ForkRow, e: unknown): Promise<unknown> {
  try {
    await dropReclaimView(repo, row.id);
    await ensureMounted(repo, row);
    return e;
  } catch (again) {
    const why = again instanceof Error ? again.message : String(again);
    const msg =
      `${e instanceof Error ? e.message : String(e)}; and the fork could not be mounted again (${why}): ` +
      `its work is intact in ${row.upper}; git xet fork --remount ${row.dir} mounts it`;
    return e instanceof XetError ? new XetError(e.code, msg, { ...e.details, remount: why }) : e;
  }
}

async function reclaimScanned(repo: Repo, row: ForkRow, at: string, progress: (w: string) => void) {
  await ensureUsable(repo, row);
  if (!row.gitDir || !linksTo(row.dir, row.gitDir)) {
    throw new XetError('FORK_BROKEN', `${row.dir} no longer links to fork ${row.id}; nothing was changed`, {
      dir: row.dir,
    });
  }
  refuseInUse(row);
  const kept = await keep(repo, row, row.dir, progress);
  // Scanned again after the check: anything that came meanwhile stops the removal (the snapshot
  // stays pinned; the fork stays whole).
  refuseInUse(row, kept.snapshot);
  withSidecar(repo.commonDir, (db) => markReclaiming(db, row.id, kept.snapshot, new Date().toISOString()));
  return finish(repo, row, kept.snapshot, 'scan', at, false);
}

/** Capture `view` (the fork, or its read-only view), verify the snapshot against it, pin it. */
async function keep(
  repo: Repo,
  row: ForkRow,
  view: string,
  progress: (w: string) => void,
): Promise<{ snapshot: string; pinRef: string }> {
  progress(`capturing fork ${row.id}`);
  const r = await capture({
    cwd: view,
    message: `git xet reclaim: fork ${row.id}`,
    ignored: 'all',
    worktreeAs: row.dir,
    admissionClass: 'settle',
  });
  const left = [...r.excludedSecrets, ...r.skipped.map((s) => s.path)];
  if (left.length || r.excludedByPattern > 0) {
    throw new XetError(
      'WORK_NOT_KEPT',
      `the capture of fork ${row.id} left ${left.length + r.excludedByPattern} file(s) out ` +
        `(${left[0] ?? 'xet.capture.exclude patterns'}); the fork stays`,
      { dir: row.dir, snapshot: r.snapshot, paths: left.slice(0, 50), excludedByPattern: r.excludedByPattern },
    );
  }
  await faultPoint('reclaim:after-capture');
  progress('verifying the snapshot against the fork');
  const differences = await differencesFrom(repo, r.snapshot, view);
  if (differences.length) {
    throw new XetError(
      'WORKTREE_CHANGED',
      `snapshot ${r.snapshot} does not hold fork ${row.id} exactly (${differences.length} difference(s), ` +
        `first: ${differences[0].kind} ${differences[0].path ?? ''}); the fork stays`,
      { dir: row.dir, snapshot: r.snapshot, differences: differences.slice(0, 50) },
    );
  }
  const pin = await pinSnapshot(repo, r.snapshot, { reason: `reclaimed fork ${row.id}` });
  await faultPoint('reclaim:after-pin');
  return { snapshot: r.snapshot, pinRef: pin.ref };
}

/** What verify would report for the snapshot against the fork: its files (bytes, modes, times, empty
 * directories), its index and HEAD; refs, stash and config are the repository's, not the fork's. */
async function differencesFrom(repo: Repo, snapshot: string, dir: string): Promise<Difference[]> {
  const target = await findRepo(dir);
  const snap = await readSnapshot(snapshot, repoOpts(repo));
  return withScratchObjects('reclaim', async (scratch, objects) => {
    const alternates = [target.objectsDir];
    const files = await compareFiles(snap, target, scratch, objects, alternates, undefined, target.worktree);
    const diffs = [...files.differences, ...(await compareIndex(snap, target, scratch, objects, alternates))];
    const head = await readHead(repoOpts(target)).catch(() => null);
    if (!sameHead(head, snap.manifest.head as HeadState)) {
      diffs.push({ kind: 'head', expected: snap.manifest.head, actual: head });
    }
    return diffs;
  });
}

/** Remove the fork after the mark; also what a run after an interrupted reclaim does. */
async function finish(
  repo: Repo,
  row: ForkRow,
  snapshot: string,
  exclusion: ReclaimedFork['exclusion'],
  at: string | null,
  resumed: boolean,
): Promise<ReclaimedFork> {
  let left: string | null = null;
  if (fs.existsSync(row.dir)) {
    if (row.mode === 'overlay') {
      if (isMounted(row.dir)) {
        // Mounted again after the mark (only by hand: a remount skips rows that are not active).
        const r = await unmount(row.dir);
        if (r !== 'ok')
          throw busy(
            row,
            holders(row.dir).filter((p) => p !== process.pid),
            [],
            snapshot,
          );
      }
      // The unmounted mountpoint: empty unless someone wrote into it meanwhile (then it stays).
      if (fs.readdirSync(row.dir).length === 0) fs.rmdirSync(row.dir);
      else left = row.dir;
      dieAt('reclaim:mid-remove');
    } else {
      // The fork's tree, its `.git` link last: while any of it remains, it says which worktree it is.
      await removeDeep(row.dir, { except: '.git' });
      dieAt('reclaim:mid-remove');
      fs.rmSync(path.join(row.dir, '.git'), { force: true });
      fs.rmdirSync(row.dir);
    }
  }
  await removeForkFiles(repo, row);
  withSidecar(repo.commonDir, (db) => markDiscarded(db, row.id, snapshot, new Date().toISOString()));
  return {
    dir: row.dir,
    id: row.id,
    mode: row.mode,
    snapshot,
    pinned: true,
    pinRef: markerRef('pin', snapshot),
    exclusion,
    lastActivity: at,
    resumed,
    left,
  };
}

function busy(row: ForkRow, pids: number[], mounts: string[], snapshot: string | null = null): XetError {
  const what = pids.length
    ? `process ${pids.join(', ')}`
    : mounts.length
      ? `the mount${mounts.length > 1 ? 's' : ''} ${mounts.join(', ')}`
      : 'a process';
  return new XetError(
    'FORK_BUSY',
    `fork ${row.id} is in use by ${what}; nothing was removed` +
      (snapshot ? ` (its work is kept in pinned snapshot ${snapshot})` : ''),
    { dir: row.dir, pids, mounts, snapshot },
  );
}

/** The scan that stands in for exclusion on clone and copy forks: processes, mounts inside. */
function refuseInUse(row: ForkRow, snapshot: string | null = null): void {
  const pids = holders(row.dir).filter((p) => p !== process.pid);
  const inner = mountsUnder(row.dir).filter((m) => m !== row.dir);
  if (pids.length || inner.length) throw busy(row, pids, inner, snapshot);
}

/** Whether `dir/.git` is a link to the admin dir `gitDir`. */
function linksTo(dir: string, gitDir: string): boolean {
  try {
    const m = /^gitdir: (.*)$/m.exec(fs.readFileSync(path.join(dir, '.git'), 'utf8'));
    return Boolean(m && fs.realpathSync(path.resolve(dir, m[1])) === fs.realpathSync(gitDir));
  } catch {
    return false;
  }
}

/** The fork's last activity (see the top comment). */
export function lastActivity(row: ForkRow): Date {
  let newest = Date.parse(row.createdAt) || 0;
  const see = (st: fs.Stats | undefined) => {
    if (st) newest = Math.max(newest, st.mtimeMs, st.ctimeMs);
  };
  const lstat = (p: string) => fs.lstatSync(p, { throwIfNoEntry: false });
  if (row.gitDir) {
    for (const f of ['index', 'HEAD']) see(lstat(path.join(row.gitDir, f)));
    walk(path.join(row.gitDir, 'logs'), see);
  }
  if (row.mode === 'overlay') {
    if (row.upper) walk(row.upper, see);
  } else {
    walk(row.dir, see);
  }
  return new Date(newest);
}

/** Every entry under `root` (itself included), on root's filesystem, without following links. */
function walk(root: string, see: (st: fs.Stats) => void): void {
  const top = fs.lstatSync(root, { throwIfNoEntry: false });
  if (!top) return;
  const stack = [root];
  see(top);
  while (stack.length) {
    const dir = stack.pop() as string;
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      const p = path.join(dir, name);
      const st = fs.lstatSync(p, { throwIfNoEntry: false });
      if (!st) continue;
      see(st);
      if (st.isDirectory() && st.dev === top.dev) stack.push(p);
    }
  }
}
