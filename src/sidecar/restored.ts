// Which snapshot a restored worktree was laid from (column workspaces.restored_from, migration 4):
// `git xet status` in a copy made by restore or handoff accept compares with it until the copy's
// own first capture.

import type { Db } from './db';

export function recordRestoredFrom(db: Db, workspace: string, snapshot: string): void {
  db.prepare('UPDATE workspaces SET restored_from = ? WHERE id = ?').run(snapshot, workspace);
}

export function restoredFrom(db: Db, workspace: string): string | null {
  const row = db.prepare('SELECT restored_from AS s FROM workspaces WHERE id = ?').get(workspace) as
    { s: string | null } | undefined;
  return row?.s ?? null;
}
