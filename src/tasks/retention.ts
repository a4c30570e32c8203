// Collection of terminal tasks after xet.task.retention (default 168 h): the row, its events and
// exports, its private directory (spool included) and with the row its result snapshot's root.
// Never a task that has not ended. OWNER: task-store helper.
import type { Repo } from '../git/repo';
import type { Db } from '../sidecar/db';

export interface CollectResult {
  collected: string[];
}

/** Run at the start of task commands, at submission, at terminal completion, and by git xet gc. */
export function collectTasks(repo: Repo, opts: { now?: Date; dryRun?: boolean } = {}): CollectResult {
  void repo;
  void opts;
  return { collected: [] };
}

/** Snapshots that tasks keep alive (gc roots): every kept task's result, a running task's base. */
export function taskRoots(db: Db): { snapshot: string; task: string; why: 'result' | 'base' }[] {
  void db;
  return [];
}
