// The publication ledger: one row per `git xet push`, written before anything is sent, so an outcome
// lost to a killed process or a dropped connection can be established afterwards, not guessed.

import type { Db } from './db';

export type PublicationState = 'pending' | 'published' | 'rejected' | 'not-published' | 'unknown';

export interface PublicationRow {
  id: string;
  remote: string;
  url: string;
  /** JSON array of the refspecs pushed. */
  refspecs: string;
  state: PublicationState;
  createdAt: string;
}

export function insertPublication(
  db: Db,
  p: { id: string; remote: string; url: string; refspecs: string[]; createdAt: string },
): void {
  db.prepare(
    `INSERT INTO publications(id, remote, url, refspecs, state, created_at) VALUES (?, ?, ?, ?, 'pending', ?)`,
  ).run(p.id, p.remote, p.url, JSON.stringify(p.refspecs), p.createdAt);
}

export function pendingPublications(db: Db, url: string): PublicationRow[] {
  return db
    .prepare(
      `SELECT id, remote, url, refspecs, state, created_at AS createdAt FROM publications
       WHERE url = ? AND state = 'pending' ORDER BY created_at`,
    )
    .all(url) as PublicationRow[];
}

export function resolvePublication(db: Db, id: string, state: PublicationState, detail: unknown): void {
  db.prepare(`UPDATE publications SET state = ?, resolved_at = ?, detail = ? WHERE id = ?`).run(
    state,
    new Date().toISOString(),
    detail === null ? null : JSON.stringify(detail),
    id,
  );
}

/** Drop a publication that provably sent nothing and needs no later resolution (refused by the
 * store's allowance before anything was published). */
export function forgetPublication(db: Db, id: string): void {
  db.prepare(`DELETE FROM publications WHERE id = ?`).run(id);
}
