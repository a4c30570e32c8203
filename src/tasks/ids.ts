// Task ids and marks: 16 lowercase hex digits from the system's random source. A task id names the
// task's row and its private directory, so nothing else may ever be used as one (checked before
// any path is built from it); a mark is what every process of the task inherits (XET_TASK_MARK).
import * as crypto from 'node:crypto';

export const TASK_ID_RE = /^[0-9a-f]{16}$/;
/** What the CLI accepts for a task: a full id or a prefix of at least 4 hex digits. */
export const TASK_ID_PREFIX_RE = /^[0-9a-f]{4,16}$/;

export function newTaskId(): string {
  return crypto.randomBytes(8).toString('hex');
}

export function newMark(): string {
  return crypto.randomBytes(8).toString('hex');
}

export function isTaskId(s: unknown): s is string {
  return typeof s === 'string' && TASK_ID_RE.test(s);
}
