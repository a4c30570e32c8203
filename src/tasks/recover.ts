// Reconciliation of tasks whose runner died: REATTACHED, SESSION_RESUMABLE, NOT_RECOVERABLE or
// UNKNOWN (docs/CLI.md "task recover"). Nothing is ever re-run. OWNER: recovery helper.
import type { Repo } from '../git/repo';
import type { Recovery } from './model';

export interface Reconciled {
  task: string;
  classification: Recovery;
  /** What was done: guard cleared, workspace captured (snapshot), supervision resumed. */
  guardCleared: boolean;
  snapshot: string | null;
  reason: string;
}

export interface ReconcileResult {
  tasks: Reconciled[];
}

/** Reconcile one task, or every task (`all`) whose runner is gone. */
export async function reconcile(repo: Repo, opts: { task?: string; all?: boolean } = {}): Promise<ReconcileResult> {
  void repo;
  void opts;
  return { tasks: [] };
}

/** The cheap pass every task command runs first: only tasks whose runner is gone are touched. */
export async function reconcileAtStart(repo: Repo): Promise<void> {
  await reconcile(repo, { all: true });
}
