// Discarding a fork: capture first if it holds any change (so nothing is lost), then unmount and
// remove it. Only registered forks are ever removed, and only after checking that the directory
// still is that fork. Every step can be re-run: a discard that was killed half way finishes on the
// next try, because each removal tolerates what an earlier run already removed.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { markDiscarded, type ForkRow } from '../sidecar/forks';
import { capture } from '../snapshot/capture';
import { forkIsDirty } from './changes';
import { emptyDir, ensureMounted, removeForkFiles, resolveFork } from './fork';
import { holders, isMounted, unmount } from './overlay';

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
}

export async function discardFork(options: DiscardOptions): Promise<DiscardResult> {
  const { repo, row } = await resolveFork(options.cwd, options.dir);
  let dirty: boolean | null = null;
  let kept: string | null = null;
  // A fork whose creation never finished holds no work of anyone's.
  const present = row.state === 'active' && workingTreeIsFork(row);
  if (present) await ensureMounted(repo, row);
  if (present && options.capture) {
    dirty = await forkIsDirty(repo, row);
    if (dirty) {
      const r = await capture({ cwd: row.dir, message: `git xet discard: fork ${row.id}` });
      kept = r.snapshot;
      const left = [...r.excludedSecrets, ...r.skipped.map((s) => s.path)];
      if (left.length) {
        throw new XetError(
          'WORK_NOT_KEPT',
          `the capture before discarding left ${left.length} file(s) out (${left[0]}…); the fork stays. ` +
            'Capture them explicitly, or discard with --no-capture',
          { dir: row.dir, snapshot: kept, paths: left.slice(0, 50) },
        );
      }
    }
  } else if (row.state === 'active' && !present && options.capture) {
    throw new XetError('FORK_BROKEN', `${row.dir} no longer holds fork ${row.id}; discard it with --no-capture`, {
      dir: row.dir,
    });
  }
  await removeFork(repo, row, kept);
  return { id: row.id, dir: row.dir, snapshot: kept, dirty };
}

/** Whether the fork's directory (mounted, for overlay) still is the registered linked worktree. */
function workingTreeIsFork(row: ForkRow): boolean {
  if (row.mode === 'overlay') return Boolean(row.upper && fs.existsSync(path.join(row.upper, '.git')));
  try {
    const m = /^gitdir: (.*)$/m.exec(fs.readFileSync(path.join(row.dir, '.git'), 'utf8'));
    return Boolean(m && row.gitDir && path.resolve(row.dir, m[1]) === row.gitDir);
  } catch {
    return false;
  }
}

async function removeFork(repo: Repo, row: ForkRow, kept: string | null): Promise<void> {
  if (row.mode === 'overlay' && isMounted(row.dir)) {
    const r = await unmount(row.dir);
    if (r === 'busy') {
      const pids = holders(row.dir);
      throw new XetError(
        'FORK_BUSY',
        `fork ${row.id} is in use${pids.length ? ` by process ${pids.join(', ')}` : ''}; nothing was removed` +
          (kept ? ` (its work is kept in snapshot ${kept})` : ''),
        { dir: row.dir, pids, snapshot: kept },
      );
    }
    if (r !== 'ok') throw new XetError('FORK_BROKEN', `cannot unmount ${row.dir}: ${r.error}`, { dir: row.dir });
  }
  if (fs.existsSync(row.dir)) {
    if (row.mode === 'overlay') {
      // The unmounted mountpoint: empty unless someone wrote into it meanwhile (then it stays).
      if (fs.readdirSync(row.dir).length === 0) fs.rmdirSync(row.dir);
    } else if (workingTreeIsFork(row) || row.state === 'creating') {
      emptyDir(row.dir);
      fs.rmdirSync(row.dir);
    }
  }
  await removeForkFiles(repo, row);
  withSidecar(repo.commonDir, (db) => markDiscarded(db, row.id, kept, new Date().toISOString()));
}
