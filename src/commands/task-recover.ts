// git xet task recover (owner: recovery helper): reconcile tasks whose runner died.
import { s } from './schema';
import { XetError } from '../errors';
import { defineCommand } from './spec';

export const taskRecoverCommand = defineCommand({
  path: ['task', 'recover'],
  tool: 'task_recover',
  description:
    'reconcile tasks whose runner died: REATTACHED, SESSION_RESUMABLE, NOT_RECOVERABLE or UNKNOWN (nothing re-runs)',
  input: {
    task: s.string().optional().describe('a task id (or a unique prefix of 4+ hex digits)'),
    all: s
      .boolean()
      .optional()
      .describe('every task whose runner is gone, and every stale guard in this repository’s worktrees'),
  },
  args: ['task'],
  names: ['task'],
  refine(input) {
    if (input.task && input.all) throw new XetError('USAGE', 'give a task or --all, not both');
  },
  // Clears stale guards and captures what a dead runner left; a live task is left alone, and a
  // second run finds nothing more to do.
  annotations: { readOnly: false, destructive: false, idempotent: true },
  long: true,
  output: s.looseObject({
    tasks: s.array(
      s.looseObject({
        task: s.string(),
        classification: s.enum(['REATTACHED', 'SESSION_RESUMABLE', 'NOT_RECOVERABLE', 'UNKNOWN']),
        guardCleared: s.boolean(),
        snapshot: s.string().nullable(),
        reason: s.string(),
      }),
    ),
    skipped: s
      .array(s.looseObject({ task: s.string(), state: s.enum(['live', 'ended']), reason: s.string() }))
      .optional(),
  }),
  async run(input, ctx) {
    const { findRepo } = await import('../git/repo');
    const repo = await findRepo(ctx.cwd, true);
    const { reconcile } = await import('../tasks/recover');
    return reconcile(repo, input.task ? { task: input.task } : { all: true });
  },
  human(r) {
    const lines = r.tasks.map(
      (t) =>
        `${t.task || '(unreadable guard)'} ${t.classification}: ${t.reason}` +
        (t.guardCleared ? '; guard cleared' : '') +
        (t.snapshot ? `; snapshot ${t.snapshot}` : '') +
        (t.fence ? `; ${t.fence}` : ''),
    );
    for (const s of r.skipped ?? []) lines.push(`${s.task}: nothing to recover (${s.reason})`);
    return lines.length ? lines.join('\n') : 'nothing to recover';
  },
});
