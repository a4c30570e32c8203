// The collector's journal: one `gc_runs` row per run of `git xet gc` (migration 5). A run inserts
// its row (`marking`), writes its plan (`planned`), records each sweep step (`sweeping`, `step`),
// then `reclaiming` while Git repacks, and ends `done` with its result or `failed`. A row left
// unfinished by a process that died is marked `interrupted` by the next run, which marks again from
// scratch: roots may have changed since, so an old plan is never replayed.

import * as crypto from 'node:crypto';
import type { Db } from '../sidecar/db';
import { ownerAlive } from '../snapshot/leftovers';

export type GcState = 'marking' | 'planned' | 'sweeping' | 'reclaiming' | 'done' | 'failed' | 'interrupted';
export const REPOSITORY_TARGET = 'repository';

export interface GcRunRow {
  id: string;
  target: string;
  pid: number;
  startedAt: string;
  finishedAt: string | null;
  state: GcState;
  dryRun: number;
  graceSeconds: number | null;
  cutoff: string | null;
  step: string | null;
}

const COLUMNS = `id, target, pid, started_at AS startedAt, finished_at AS finishedAt, state, dry_run AS dryRun,
  grace_seconds AS graceSeconds, cutoff, step`;

const UNFINISHED = `state IN ('marking', 'planned', 'sweeping', 'reclaiming')`;

/** Unfinished runs of a target (all, or only those whose process is gone). */
export function unfinishedRuns(db: Db, target: string, onlyDead: boolean): GcRunRow[] {
  const rows = db
    .prepare(`SELECT ${COLUMNS} FROM gc_runs WHERE target = ? AND ${UNFINISHED}`)
    .all(target) as GcRunRow[];
  return onlyDead ? rows.filter((r) => !ownerAlive(r.pid)) : rows;
}

/**
 * Mark the unfinished runs of `target` interrupted. Called under the exclusive objects lock: no
 * other repository gc can be running, so every unfinished row belongs to a dead process (a reused
 * pid included).
 */
export function interruptUnfinished(db: Db, target: string, now: string): string[] {
  const rows = db.prepare(`SELECT id FROM gc_runs WHERE target = ? AND ${UNFINISHED}`).all(target) as { id: string }[];
  const up = db.prepare(`UPDATE gc_runs SET state = 'interrupted', finished_at = ? WHERE id = ?`);
  db.transaction(() => rows.forEach((r) => up.run(now, r.id)))();
  return rows.map((r) => r.id);
}

export function startRun(db: Db, target: string, graceSeconds: number, cutoff: Date | null, now: Date): string {
  const id = `${now.toISOString().replace(/[-:.]/g, '').slice(0, 15)}-${crypto.randomBytes(4).toString('hex')}`;
  db.prepare(
    `INSERT INTO gc_runs(id, target, pid, started_at, state, dry_run, grace_seconds, cutoff)
     VALUES (?, ?, ?, ?, 'marking', 0, ?, ?)`,
  ).run(
    id,
    target,
    process.pid,
    now.toISOString(),
    Number.isFinite(graceSeconds) ? graceSeconds : null,
    cutoff ? cutoff.toISOString() : null,
  );
  return id;
}

export function recordPlan(db: Db, id: string, plan: unknown): void {
  db.prepare(`UPDATE gc_runs SET state = 'planned', plan = ? WHERE id = ?`).run(JSON.stringify(plan), id);
}

export function recordStep(db: Db, id: string, state: GcState, step: string): void {
  db.prepare('UPDATE gc_runs SET state = ?, step = ? WHERE id = ?').run(state, step, id);
}

export function finishRun(db: Db, id: string, state: 'done' | 'failed', result: unknown): void {
  db.prepare('UPDATE gc_runs SET state = ?, finished_at = ?, result = ? WHERE id = ?').run(
    state,
    new Date().toISOString(),
    JSON.stringify(result),
    id,
  );
}

export function recordDeletedRef(db: Db, runId: string, ref: string, oid: string, at: string): void {
  db.prepare(
    `INSERT INTO gc_deleted_refs(run_id, ref, oid, deleted_at) VALUES (?, ?, ?, ?)
     ON CONFLICT(run_id, ref) DO UPDATE SET oid = excluded.oid, deleted_at = excluded.deleted_at`,
  ).run(runId, ref, oid, at);
}

/** How many finished runs of a target the journal keeps (besides runs that deleted refs). */
export const KEEP_FINISHED_RUNS = 64;

/**
 * Forget finished runs of `target` beyond the newest KEEP_FINISHED_RUNS, so repeated runs of gc add
 * a bounded amount to the repository root (docs/CLI.md "Commands that add nothing"), not a row per
 * run forever. A run that deleted refs is kept: `undrop` finds through its gc_deleted_refs rows that
 * the drop is gone, and those rows are bounded by the refs deleted. Returns how many went.
 */
export function pruneFinishedRuns(db: Db, target: string, keep = KEEP_FINISHED_RUNS): number {
  return db
    .prepare(
      `DELETE FROM gc_runs WHERE target = ? AND state IN ('done', 'failed', 'interrupted')
         AND id NOT IN (SELECT run_id FROM gc_deleted_refs)
         AND id NOT IN (SELECT id FROM gc_runs WHERE target = ? ORDER BY started_at DESC, id DESC LIMIT ?)`,
    )
    .run(target, target, keep).changes;
}
