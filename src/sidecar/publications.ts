// The publication ledger: one row per `git xet push`, written before anything is sent, so an outcome
// lost to a killed process or a dropped connection can be established afterwards, not guessed.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { sidecarDir, type Db } from './db';

export type PublicationState = 'pending' | 'published' | 'rejected' | 'not-published' | 'unknown';

export interface PublicationRow {
  id: string;
  remote: string;
  url: string;
  /** JSON array of the refspecs pushed. */
  refspecs: string;
  state: PublicationState;
  createdAt: string;
  /** JSON; while pending: `{"reachMarker":true}` when its helper marks reaching the store (below). */
  detail: string | null;
}

/** Written at insertion: this publication's helper writes `publicationReachedFile` before it opens or
 * creates the store, so the file's absence means it never touched one. Rows of earlier versions lack
 * it, and their absent file proves nothing. */
const REACH_MARKER_DETAIL = JSON.stringify({ reachMarker: true });

export function insertPublication(
  db: Db,
  p: { id: string; remote: string; url: string; refspecs: string[]; createdAt: string },
): void {
  db.prepare(
    `INSERT INTO publications(id, remote, url, refspecs, state, created_at, detail)
     VALUES (?, ?, ?, ?, 'pending', ?, ?)`,
  ).run(p.id, p.remote, p.url, JSON.stringify(p.refspecs), p.createdAt, REACH_MARKER_DETAIL);
}

export function pendingPublications(db: Db, url: string): PublicationRow[] {
  return db
    .prepare(
      `SELECT id, remote, url, refspecs, state, created_at AS createdAt, detail FROM publications
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

/** The marker a xet store's helper leaves before it opens or creates the store for publication `id`
 * (next to the publication's lock files, removed with them once the outcome is recorded). */
export function publicationReachedFile(commonDir: string, id: string): string {
  return path.join(sidecarDir(commonDir), 'locks', `publication-${id}.reached`);
}

/** Durable before the helper's first look at the store: a crash after it leaves the file. */
export function markPublicationReached(commonDir: string, id: string): void {
  const file = publicationReachedFile(commonDir, id);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const fd = fs.openSync(file, 'w');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  const dir = fs.openSync(path.dirname(file), 'r');
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
}

/** Whether a pending publication's helper may have touched its store: false only when the row says
 * its helper marks that (`reachMarker`) and no marker is there. */
export function publicationMayHaveReached(commonDir: string, row: PublicationRow): boolean {
  if (row.detail !== REACH_MARKER_DETAIL) return true;
  return fs.existsSync(publicationReachedFile(commonDir, row.id));
}
