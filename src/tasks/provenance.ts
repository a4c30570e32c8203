// Provenance links from git xet's other commands to tasks (issue 10): which task a handoff or an
// export came from — named (`--task <id>`), or found from the source (a task's fork, a task's
// result snapshot). Reads through the task store only; `recordExport` links the commit back so
// `task show` lists it.

import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import { withExistingSidecar } from '../sidecar/db';
import { getTask, listTasks, resolveTaskId, taskOfSnapshot, type TaskRow } from './store';

/** The task a full or abbreviated id names: TASK_NOT_FOUND (USAGE if ambiguous). */
export function findTask(repo: Pick<Repo, 'commonDir'>, spec: string): TaskRow {
  const row = withExistingSidecar(repo.commonDir, (db) => getTask(db, resolveTaskId(db, spec)));
  if (!row) throw new XetError('TASK_NOT_FOUND', `no task ${spec} in this repository`, { task: spec });
  return row;
}

/** The task that made fork `forkId` (task run --fork), if it is still kept. */
export function taskOfFork(repo: Pick<Repo, 'commonDir'>, forkId: string): TaskRow | null {
  return (
    withExistingSidecar(repo.commonDir, (db) =>
      listTasks(db)
        .filter((t) => t.forkId === forkId)
        .sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1)),
    )?.[0] ?? null
  );
}

/** The task whose result snapshot `oid` is, if any. */
export function taskOfResult(repo: Pick<Repo, 'commonDir'>, oid: string): TaskRow | null {
  return withExistingSidecar(repo.commonDir, (db) => taskOfSnapshot(db, oid)) ?? null;
}
