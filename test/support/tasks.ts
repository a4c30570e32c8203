// Task rows for tests that reach the store directly (recovery, results, retention, guards): one
// complete row with the runner's defaults, so each test names only what it is about.
import * as crypto from 'node:crypto';
import type { TaskRow } from '../../src/tasks/store';

export type TaskRowFields = Pick<TaskRow, 'id' | 'slot' | 'worktree' | 'gitDir'> & Partial<TaskRow>;

/** A row as `task run` creates it (status created, nothing run yet), with `fields` on top. */
export function taskRow(fields: TaskRowFields): TaskRow {
  const manifestJson = fields.manifestJson ?? JSON.stringify({ schema: 'xet.task/v1', taskId: fields.id });
  return {
    createdAt: new Date().toISOString(),
    startedAt: null,
    endedAt: null,
    status: 'created',
    errorCode: null,
    exitCode: null,
    exitSignal: null,
    command: 'true',
    correlationId: null,
    sessionId: null,
    continuesTask: null,
    mode: 'worktree',
    forkId: null,
    baseSnapshot: null,
    resultSnapshot: null,
    deadlineAt: new Date(Date.now() + 3600_000).toISOString(),
    detached: false,
    capture: true,
    runnerPid: null,
    runnerStart: null,
    pid: null,
    pidStart: null,
    bootId: null,
    mark: crypto.randomBytes(8).toString('hex'),
    resultStorage: null,
    resultSource: null,
    resultSizeBytes: null,
    resultSha256: null,
    recovery: null,
    cancelRequestedAt: null,
    ...fields,
    manifestJson,
    manifestSha256: fields.manifestSha256 ?? crypto.createHash('sha256').update(manifestJson).digest('hex'),
  };
}
