// Handoff acceptances in the sidecar (table from migration 3): which handoff was accepted into which
// directory, how (restore or a fork mode) and when. A ledger for `handoff show`/`list`; the handoff
// itself lives in Git (refs/xet/handoffs/<id>), never here.

import type { Db } from './db';

export type AcceptMode = 'restore' | 'overlay' | 'clone' | 'copy';

export interface AcceptanceRow {
  handoff: string;
  dir: string;
  mode: AcceptMode;
  snapshot: string;
  acceptedAt: string;
}

const COLUMNS = 'handoff, dir, mode, snapshot, accepted_at AS acceptedAt';

/** Record an acceptance; accepting the same handoff into the same directory again (after it was
 * emptied) replaces the old row. */
export function recordAcceptance(db: Db, row: AcceptanceRow): void {
  db.prepare(
    `INSERT INTO handoff_acceptances(handoff, dir, mode, snapshot, accepted_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(handoff, dir) DO UPDATE SET mode = excluded.mode, snapshot = excluded.snapshot,
       accepted_at = excluded.accepted_at`,
  ).run(row.handoff, row.dir, row.mode, row.snapshot, row.acceptedAt);
}

export function acceptancesOf(db: Db, handoff: string): AcceptanceRow[] {
  return db
    .prepare(`SELECT ${COLUMNS} FROM handoff_acceptances WHERE handoff = ? ORDER BY accepted_at, dir`)
    .all(handoff) as AcceptanceRow[];
}

/** How many times each handoff was accepted here. */
export function acceptanceCounts(db: Db): Map<string, number> {
  const rows = db.prepare('SELECT handoff, COUNT(*) AS n FROM handoff_acceptances GROUP BY handoff').all() as {
    handoff: string;
    n: number;
  }[];
  return new Map(rows.map((r) => [r.handoff, r.n]));
}
