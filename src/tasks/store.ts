// The tasks' rows, events and exports in the sidecar (migration 6). OWNER: task-store helper.
// Every read and write of the tasks, task_events and task_exports tables goes through here.
import type { Db } from '../sidecar/db';
import type { EventType, Recovery, SlotMode, TaskStatus } from './model';

/** A row of `tasks`, camelCase. */
export interface TaskRow {
  id: string;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  status: TaskStatus;
  errorCode: string | null;
  exitCode: number | null;
  exitSignal: string | null;
  command: string;
  correlationId: string | null;
  sessionId: string | null;
  continuesTask: string | null;
  slot: string;
  worktree: string;
  gitDir: string;
  mode: SlotMode;
  forkId: string | null;
  baseSnapshot: string | null;
  resultSnapshot: string | null;
  deadlineAt: string;
  detached: boolean;
  capture: boolean;
  manifestJson: string;
  manifestSha256: string;
  runnerPid: number | null;
  runnerStart: string | null;
  pid: number | null;
  pidStart: string | null;
  bootId: string | null;
  mark: string;
  resultStorage: 'inline' | 'spool' | null;
  resultSource: 'stdout' | 'file' | null;
  resultSizeBytes: number | null;
  resultSha256: string | null;
  recovery: Recovery | null;
  cancelRequestedAt: string | null;
}

/** What may change after creation (the manifest, the id and what the manifest froze may not). */
export type TaskPatch = Partial<
  Pick<
    TaskRow,
    | 'startedAt'
    | 'endedAt'
    | 'status'
    | 'errorCode'
    | 'exitCode'
    | 'exitSignal'
    | 'resultSnapshot'
    | 'runnerPid'
    | 'runnerStart'
    | 'pid'
    | 'pidStart'
    | 'bootId'
    | 'resultStorage'
    | 'resultSource'
    | 'resultSizeBytes'
    | 'resultSha256'
    | 'recovery'
    | 'cancelRequestedAt'
  >
> & { resultInline?: Buffer | null };

/** Envelope schema version 1 (docs/FORMAT.md "Task events"). */
export interface TaskEvent {
  schemaVersion: 1;
  eventId: string;
  taskId: string;
  correlationId: string | null;
  eventType: EventType | string;
  createdAt: string;
  payload: Record<string, unknown>;
  /** Order within the sidecar (for `events --follow --after`). */
  seq: number;
}

const todo = (what: string): never => {
  throw new Error(`${what}: not implemented yet (issue 10)`);
};

/** Insert a new task (status 'created') and its task.created event in one transaction. */
export function insertTask(db: Db, row: TaskRow): TaskEvent {
  return todo(`insertTask ${db.name} ${row.id}`);
}
export function getTask(db: Db, id: string): TaskRow | null {
  return todo(`getTask ${db.name} ${id}`);
}
export function listTasks(db: Db, filter: { status?: TaskStatus[]; limit?: number } = {}): TaskRow[] {
  return todo(`listTasks ${db.name} ${JSON.stringify(filter)}`);
}
/** Update the mutable fields (a manifest change is refused by the schema's trigger as well). */
export function updateTask(db: Db, id: string, patch: TaskPatch): void {
  todo(`updateTask ${db.name} ${id} ${Object.keys(patch).join()}`);
}
/** The inline result bytes (null if none). */
export function inlineResult(db: Db, id: string): Buffer | null {
  return todo(`inlineResult ${db.name} ${id}`);
}
/** Append an event; the payload is checked to be metadata only. Returns the stored envelope. */
export function appendEvent(db: Db, taskId: string, type: EventType, payload: Record<string, unknown> = {}): TaskEvent {
  return todo(`appendEvent ${db.name} ${taskId} ${type} ${Object.keys(payload).join()}`);
}
export function listEvents(db: Db, taskId: string, afterSeq = 0): TaskEvent[] {
  return todo(`listEvents ${db.name} ${taskId} ${afterSeq}`);
}
/** A commit `git xet export` made from the task's workspace or result snapshot. */
export function recordExport(db: Db, taskId: string, commit: string, branch: string | null): void {
  todo(`recordExport ${db.name} ${taskId} ${commit} ${branch}`);
}
export function taskExports(db: Db, taskId: string): { commit: string; branch: string | null; createdAt: string }[] {
  return todo(`taskExports ${db.name} ${taskId}`);
}
/** Full id from a full or abbreviated (4+ hex digits) one: TASK_NOT_FOUND, or USAGE if ambiguous. */
export function resolveTaskId(db: Db, spec: string): string {
  return todo(`resolveTaskId ${db.name} ${spec}`);
}
/** The task whose result snapshot is `snapshot`, if any (export's trailer, handoff --task). */
export function taskOfSnapshot(db: Db, snapshot: string): TaskRow | null {
  return todo(`taskOfSnapshot ${db.name} ${snapshot}`);
}
