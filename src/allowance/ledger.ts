// The allowance ledger in the sidecar (migration 7): the large write-once parts of each root (packs
// git xet stored, overlay bases, a copy fork's files) and each root's last full recount. A part is
// recorded before the thing it names is published (a pack's rename, a base's rename), so a process
// killed in between leaves the ledger counting a little too much until the next recount, never too
// little. A failure to record after an effect is reported and leaves a crash marker (crash.ts) so
// the next writer recounts: the effect itself is never repeated.

import type { Db } from '../sidecar/db';
import type { Amount } from './model';

export const REPOSITORY_ROOT = 'repository';
export const forkRoot = (id: string): string => `fork:${id}`;

export function recordPart(db: Db, root: string, part: string, amount: Amount): void {
  db.prepare(
    `INSERT INTO allowance_parts(root, part, bytes, files, recorded_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(root, part) DO UPDATE SET bytes = excluded.bytes, files = excluded.files, recorded_at = excluded.recorded_at`,
  ).run(
    root,
    part,
    Math.max(0, Math.round(amount.bytes)),
    Math.max(0, Math.round(amount.files)),
    new Date().toISOString(),
  );
}

export function forgetPart(db: Db, root: string, part: string): void {
  db.prepare('DELETE FROM allowance_parts WHERE root = ? AND part = ?').run(root, part);
}

export function forgetRoot(db: Db, root: string): void {
  db.prepare('DELETE FROM allowance_parts WHERE root = ?').run(root);
  db.prepare('DELETE FROM allowance_counts WHERE root = ?').run(root);
}

export interface PartRow extends Amount {
  part: string;
  recordedAt: string;
}

export function partsOf(db: Db, root: string): PartRow[] {
  return db
    .prepare('SELECT part, bytes, files, recorded_at AS recordedAt FROM allowance_parts WHERE root = ? ORDER BY part')
    .all(root) as PartRow[];
}

export function partsTotal(db: Db, root: string, prefix = ''): Amount {
  const r = db
    .prepare(
      `SELECT COALESCE(SUM(bytes), 0) AS bytes, COALESCE(SUM(files), 0) AS files FROM allowance_parts
       WHERE root = ? AND substr(part, 1, ?) = ?`,
    )
    .get(root, prefix.length, prefix) as Amount;
  return { bytes: Number(r.bytes), files: Number(r.files) };
}

export interface CountRow extends Amount {
  countedAt: string;
  leftoversRemoved: number;
}

export function lastCount(db: Db, root: string): CountRow | null {
  return (
    (db
      .prepare(
        'SELECT bytes, files, counted_at AS countedAt, leftovers_removed AS leftoversRemoved FROM allowance_counts WHERE root = ?',
      )
      .get(root) as CountRow | undefined) ?? null
  );
}

export function recordCount(db: Db, root: string, amount: Amount, leftoversRemoved: number): void {
  db.prepare(
    `INSERT INTO allowance_counts(root, bytes, files, counted_at, leftovers_removed) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(root) DO UPDATE SET bytes = excluded.bytes, files = excluded.files, counted_at = excluded.counted_at,
       leftovers_removed = excluded.leftovers_removed`,
  ).run(root, amount.bytes, amount.files, new Date().toISOString(), leftoversRemoved);
}
