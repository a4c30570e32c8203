// Status: where this worktree stands with git xet. Its last snapshot, and whether anything changed
// since (files, index and flags, HEAD, refs, stash, config, info files), compared the way capture
// would see it but without writing anything: the snapshot's own policy, the workspace's stat cache
// (copied, so only files whose stat data changed are hashed), trees in a scratch object directory.
// Also the repository's forks, its pins, the repository root's storage allowance, and room for writer guards.

import { repositoryAllowance } from '../allowance/report';
import { countLeftovers } from './leftovers';
import { pinsOfWorktree, type WorktreePin } from '../gc/pins';
import { findRepo, repoOpts } from '../git/repo';
import { withExistingSidecar } from '../sidecar/db';
import { expectedForkHead, listForks, liveForkByGitDir, type ForkRow } from '../sidecar/forks';
import { captureCacheIndex, workspaceId } from '../sidecar/workspaces';
import { restoredFrom } from '../sidecar/restored';
import { sameHead, readHead, type HeadState } from '../git/plumbing';
import { stateOf, type ForkState } from '../workspace/list';
import type { ExcludedByPolicy } from './snapshot-policy';
import { readSnapshot } from './store';
import { lastWorkspaceSnapshot } from './unchanged';
import { compareFiles, compareIndex, compareRefs, withScratchObjects, type Difference } from './verify';

export interface StatusResult {
  worktree: string;
  /** The sidecar's id of this worktree (a hash of its git dir). */
  workspace: string;
  /** This worktree's newest snapshot (made by `git xet capture` here), or null. */
  lastSnapshot: { snapshot: string; createdAt: string; message: string } | null;
  /** When this worktree is a fork made by `git xet fork`: which, and of what. */
  fork: { id: string; snapshot: string; mode: ForkRow['mode'] } | null;
  /** What the changes are measured against: the last snapshot, else the fork's snapshot, else the
   * snapshot this copy was restored from (restore, handoff accept), else none. */
  base: { snapshot: string; kind: 'last-snapshot' | 'fork' | 'restored' } | null;
  /** Whether anything differs from `base` (null without a base): exactly when a capture would make a
   * new snapshot, unless the capture policy or git xet itself changed since. */
  changed: boolean | null;
  changes: Difference[];
  /** What the base snapshot's policy leaves out of this worktree (not a change). */
  excludedByPolicy: ExcludedByPolicy | null;
  /** The repository's live forks; `ofThisWorktree`: forked from one of this worktree's snapshots. */
  forks: {
    id: string;
    dir: string;
    mode: ForkRow['mode'];
    snapshot: string;
    state: ForkState;
    ofThisWorktree: boolean;
  }[];
  /** Temporary files of killed git xet processes (owner dead) in this repository, which the next
   * capture removes: counted here until then. */
  leftovers: number;
  /** Pins (refs/xet/pins/*) of snapshots captured in this worktree, expired ones flagged. */
  pins: WorktreePin[];
  /** Reserved for a later issue (writer guards): null until it exists. */
  guards: null;
  /** The repository root's storage allowance (`git xet allowance` has every root): limits, what is
   * used, and what growing work may still add (null per dimension without a limit). */
  allowance: Awaited<ReturnType<typeof repositoryAllowance>>;
}

export async function status(options: { cwd: string }): Promise<StatusResult> {
  const repo = await findRepo(options.cwd, true);
  const opts = repoOpts(repo);
  const wsId = workspaceId(repo.gitDir);
  const lastOid = await lastWorkspaceSnapshot(repo.commonDir, wsId, opts);
  const side =
    withExistingSidecar(repo.commonDir, (db) => ({
      mine: new Set(
        (db.prepare('SELECT oid FROM snapshots WHERE workspace_id = ?').all(wsId) as { oid: string }[]).map(
          (r) => r.oid,
        ),
      ),
      self: repo.gitDir !== repo.commonDir ? liveForkByGitDir(db, repo.gitDir) : null,
      forks: listForks(db, false),
      restored: restoredFrom(db, wsId),
    })) ?? null;
  const self = side?.self ?? null;
  const baseOid = lastOid ?? self?.snapshot ?? side?.restored ?? null;
  const baseKind = lastOid ? 'last-snapshot' : self ? 'fork' : 'restored';
  const result: StatusResult = {
    worktree: repo.worktree,
    workspace: wsId,
    lastSnapshot: null,
    fork: self ? { id: self.id, snapshot: self.snapshot, mode: self.mode } : null,
    base: baseOid ? { snapshot: baseOid, kind: baseKind } : null,
    changed: null,
    changes: [],
    excludedByPolicy: null,
    forks: (side?.forks ?? []).map((f) => ({
      id: f.id,
      dir: f.dir,
      mode: f.mode,
      snapshot: f.snapshot,
      state: stateOf(f),
      ofThisWorktree: side?.mine.has(f.snapshot) ?? false,
    })),
    leftovers: countLeftovers(repo),
    pins: await pinsOfWorktree(repo, repo.worktree),
    guards: null,
    allowance: await repositoryAllowance(repo),
  };
  if (!baseOid) return result;
  const snap = await readSnapshot(baseOid, opts);
  if (lastOid) {
    result.lastSnapshot = { snapshot: lastOid, createdAt: snap.manifest.createdAt, message: snap.manifest.message };
  }
  await withScratchObjects('status', async (scratch, objects) => {
    const alternates = [repo.objectsDir];
    const cache = captureCacheIndex(repo.commonDir, wsId);
    const files = await compareFiles(snap, repo, scratch, objects, alternates, cache);
    const index = await compareIndex(snap, repo, scratch, objects, alternates);
    let refs: Difference[];
    if (!lastOid && self) {
      // A fresh fork: its HEAD starts detached at the snapshot's; the repository's refs are not its own.
      const head = await readHead(opts).catch(() => null);
      const want = expectedForkHead(self);
      refs = sameHead(head, want as HeadState) ? [] : [{ kind: 'head', expected: want, actual: head }];
    } else {
      refs = await compareRefs(snap, repo);
    }
    result.changes = [...files.differences, ...index, ...refs];
    result.excludedByPolicy = files.excludedByPolicy;
  });
  result.changed = result.changes.length > 0;
  return result;
}
