// Task rows for tests that reach the store directly (recovery, results, retention, guards): the row
// `task run` would insert (newTaskRow), with what each test is about on top.
import * as crypto from 'node:crypto';
import { newTaskRow, type TaskRow } from '../../src/tasks/store';

export type TaskRowFields = Pick<TaskRow, 'id' | 'slot' | 'worktree' | 'gitDir'> & Partial<TaskRow>;

export function taskRow(fields: TaskRowFields): TaskRow {
  const manifestJson = fields.manifestJson ?? JSON.stringify({ schema: 'xet.task/v1', taskId: fields.id });
  const base = newTaskRow({
    id: fields.id,
    createdAt: new Date().toISOString(),
    command: 'true',
    slot: fields.slot,
    worktree: fields.worktree,
    gitDir: fields.gitDir,
    deadlineAt: new Date(Date.now() + 3600_000).toISOString(),
    manifestJson,
    manifestSha256: crypto.createHash('sha256').update(manifestJson).digest('hex'),
    mark: crypto.randomBytes(8).toString('hex'),
  });
  return { ...base, ...fields, manifestJson, manifestSha256: fields.manifestSha256 ?? base.manifestSha256 };
}
