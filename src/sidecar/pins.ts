// The sidecar's pins table (migration 5): a cache of refs/xet/pins/*, which stay the truth. Written
// after the ref by pin and unpin; `git xet pins` compares the two, fsck --rebuild refills it.

import type { Db } from './db';

export interface PinRow {
  snapshot: string;
  commit: string;
  reason: string;
  until: string | null;
  createdAt: string;
}

export function upsertPinRow(db: Db, row: PinRow): void {
  db.prepare(
    `INSERT INTO pins(snapshot, commit_oid, reason, until, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(snapshot) DO UPDATE SET commit_oid = excluded.commit_oid, reason = excluded.reason,
       until = excluded.until, created_at = excluded.created_at`,
  ).run(row.snapshot, row.commit, row.reason, row.until, row.createdAt);
}

export function deletePinRow(db: Db, snapshot: string): void {
  db.prepare('DELETE FROM pins WHERE snapshot = ?').run(snapshot);
}

export function pinRows(db: Db): PinRow[] {
  return db
    .prepare(
      'SELECT snapshot, commit_oid AS "commit", reason, until, created_at AS createdAt FROM pins ORDER BY snapshot',
    )
    .all() as PinRow[];
}

/** Snapshot ids gc deleted a ref of (refs/xet/snapshots/<id> or refs/xet/dropped/<id>): what undrop
 * may still bring back while the objects are there. */
export function deletedSnapshotIds(db: Db): string[] {
  return (
    db
      .prepare(
        `SELECT DISTINCT oid FROM gc_deleted_refs
         WHERE ref = 'refs/xet/snapshots/' || oid OR ref = 'refs/xet/dropped/' || oid`,
      )
      .all() as { oid: string }[]
  ).map((r) => r.oid);
}
