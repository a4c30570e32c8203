// The fork registry: one row per fork ever made in this repository. A row is written ('creating')
// before the first effect on disk and flipped to 'active' when the fork is complete, so a fork whose
// creator was killed is still known (and `discard` can clean it up); 'discarded' rows stay as history.

import type { Db } from './db';

export type ForkMode = 'overlay' | 'clone' | 'copy';

export interface ForkRow {
  id: string;
  dir: string;
  mode: ForkMode;
  snapshot: string;
  headOid: string | null;
  branch: string | null;
  gitDir: string | null;
  upper: string | null;
  work: string | null;
  state: 'creating' | 'active' | 'discarding' | 'discarded';
  createdAt: string;
  discardedAt: string | null;
  keptSnapshot: string | null;
  /** Set when `reclaim` took the fork down (its kept snapshot is pinned); with 'discarding', a
   * reclaim under way. */
  reclaimedAt?: string | null;
  /** The fork's own allowance (`fork --allowance`), null per dimension without one (migration 7). */
  allowanceBytes?: number | null;
  allowanceFiles?: number | null;
  /** What bounds the fork's own processes (src/workspace/layer.ts); null: nothing the kernel enforces. */
  layerRoute?: 'image' | 'tmpfs' | 'project-quota' | null;
}

const COLUMNS = `id, dir, mode, snapshot, head_oid AS headOid, branch, git_dir AS gitDir, upper, work, state,
  created_at AS createdAt, discarded_at AS discardedAt, kept_snapshot AS keptSnapshot, reclaimed_at AS reclaimedAt,
  allowance_bytes AS allowanceBytes, allowance_files AS allowanceFiles, layer_route AS layerRoute`;

export function insertFork(db: Db, row: Omit<ForkRow, 'state' | 'discardedAt' | 'keptSnapshot'>): void {
  db.prepare(
    `INSERT INTO forks(id, dir, mode, snapshot, head_oid, branch, git_dir, upper, work, state, created_at,
       allowance_bytes, allowance_files, layer_route)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'creating', ?, ?, ?, ?)`,
  ).run(
    row.id,
    row.dir,
    row.mode,
    row.snapshot,
    row.headOid,
    row.branch,
    row.gitDir,
    row.upper,
    row.work,
    row.createdAt,
    row.allowanceBytes ?? null,
    row.allowanceFiles ?? null,
    row.layerRoute ?? null,
  );
}

export function updateFork(db: Db, id: string, fields: Partial<Pick<ForkRow, 'gitDir' | 'state'>>): void {
  if (fields.gitDir !== undefined) db.prepare('UPDATE forks SET git_dir = ? WHERE id = ?').run(fields.gitDir, id);
  if (fields.state !== undefined) db.prepare('UPDATE forks SET state = ? WHERE id = ?').run(fields.state, id);
}

/** Removal starts: from here on the fork's work is whatever `keptSnapshot` holds, and a retry only
 * finishes the removal (it must never capture a half-removed tree). */
export function markDiscarding(db: Db, id: string, keptSnapshot: string | null): void {
  db.prepare(`UPDATE forks SET state = 'discarding', kept_snapshot = ? WHERE id = ?`).run(keptSnapshot, id);
}

/** A reclaim's point of no return: the fork's work is the pinned `keptSnapshot`; from here on any
 * run (reclaim or discard) only finishes the removal. */
export function markReclaiming(db: Db, id: string, keptSnapshot: string, at: string): void {
  db.prepare(`UPDATE forks SET state = 'discarding', kept_snapshot = ?, reclaimed_at = ? WHERE id = ?`).run(
    keptSnapshot,
    at,
    id,
  );
}

export function markDiscarded(db: Db, id: string, keptSnapshot: string | null, at: string): void {
  db.prepare(
    `UPDATE forks SET state = 'discarded', discarded_at = ?, kept_snapshot = COALESCE(?, kept_snapshot) WHERE id = ?`,
  ).run(at, keptSnapshot, id);
}

export function deleteFork(db: Db, id: string): void {
  db.prepare('DELETE FROM forks WHERE id = ?').run(id);
}

/** The live (not discarded) fork at this directory. */
export function liveForkAt(db: Db, dir: string): ForkRow | null {
  return (
    (db.prepare(`SELECT ${COLUMNS} FROM forks WHERE dir = ? AND state != 'discarded'`).get(dir) as ForkRow) ?? null
  );
}

export function liveForkByGitDir(db: Db, gitDir: string): ForkRow | null {
  return (
    (db.prepare(`SELECT ${COLUMNS} FROM forks WHERE git_dir = ? AND state != 'discarded'`).get(gitDir) as ForkRow) ??
    null
  );
}

export function listForks(db: Db, includeDiscarded: boolean): ForkRow[] {
  const where = includeDiscarded ? '' : `WHERE state != 'discarded'`;
  return db.prepare(`SELECT ${COLUMNS} FROM forks ${where} ORDER BY created_at, id`).all() as ForkRow[];
}

/** A fork's HEAD as created: detached at the snapshot's HEAD commit, or on the unborn branch. */
export function expectedForkHead(
  row: Pick<ForkRow, 'headOid' | 'branch'>,
): { kind: 'detached'; oid: string } | { kind: 'branch'; ref: string; oid: null } {
  if (row.headOid) return { kind: 'detached', oid: row.headOid };
  return { kind: 'branch', ref: row.branch ?? 'refs/heads/main', oid: null };
}
