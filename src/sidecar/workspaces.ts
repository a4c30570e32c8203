// Workspaces in the sidecar: one row per worktree that captured (or was restored), holding the last
// files tree and its totals so the next capture stores and counts only what changed.

import * as crypto from 'node:crypto';
import * as path from 'node:path';
import { sidecarDir, type Db } from './db';

export interface FilesTotals {
  files: number;
  bytes: number;
  symlinks: number;
}

/** A stable id for a worktree: its git dir is unique per worktree. */
export function workspaceId(gitDir: string): string {
  return crypto.createHash('sha256').update(gitDir).digest('hex').slice(0, 16);
}

/** Capture's stat cache for a workspace: an index of its files tree with each file's stat data. */
export function captureCacheIndex(commonDir: string, id: string): string {
  return path.join(sidecarDir(commonDir), 'cache', `${id}.index`);
}

export function lastFilesTree(db: Db, id: string): ({ tree: string } & FilesTotals) | null {
  const row = db
    .prepare(
      'SELECT last_files_tree AS tree, last_files AS files, last_bytes AS bytes, last_symlinks AS symlinks FROM workspaces WHERE id = ?',
    )
    .get(id) as ({ tree: string | null } & FilesTotals) | undefined;
  return row?.tree ? { ...row, tree: row.tree } : null;
}

export function recordFilesTree(
  db: Db,
  ws: { id: string; worktree: string; gitDir: string },
  tree: string,
  totals: FilesTotals,
  capturedAt: string | null,
): void {
  db.prepare(
    `INSERT INTO workspaces(id, worktree, git_dir, last_capture_at, last_files_tree, last_files, last_bytes, last_symlinks)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT(id) DO UPDATE SET worktree = excluded.worktree,
       last_capture_at = COALESCE(excluded.last_capture_at, workspaces.last_capture_at),
       last_files_tree = excluded.last_files_tree, last_files = excluded.last_files,
       last_bytes = excluded.last_bytes, last_symlinks = excluded.last_symlinks`,
  ).run(ws.id, ws.worktree, ws.gitDir, capturedAt, tree, totals.files, totals.bytes, totals.symlinks);
}
