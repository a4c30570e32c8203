// git xet export: a fork's or snapshot's work as one commit on a branch, or as a patch.
import { s } from './schema';
import { defineCommand } from './spec';

export const exportCommand = defineCommand({
  path: ['export'],
  tool: 'export',
  description: "turn a fork's (or snapshot's) changes into one commit on top of its base commit",
  input: {
    source: s.string().describe('a fork directory or a snapshot id'),
    branch: s.string().optional().describe('create (or with --force move) this branch to the commit'),
    patch: s.string().optional().describe("write the commit as a patch (git am format); '-' for stdout"),
    message: s.string().optional().describe('commit message (trailers naming the snapshot are added)'),
    force: s.boolean().optional().describe('move an existing branch'),
    task: s
      .string()
      .optional()
      .describe("the task the work came from (an Xet-Task trailer); found from a task's fork or result snapshot"),
  },
  args: ['source'],
  flags: {
    branch: { value: '<name>' },
    patch: { value: '<file>' },
    message: { short: 'm', value: '<msg>' },
    task: { value: '<id>' },
  },
  // `source` is a fork directory only as one of this repository's registered forks (resolveFork),
  // else a snapshot id: a name either way.
  paths: { patch: 'target' },
  names: ['source', 'branch', 'task'],
  // --force moves a branch it did not make; --patch FILE replaces the file.
  annotations: { readOnly: false, destructive: true, idempotent: false },
  long: true,
  output: s.looseObject({
    commit: s.string().nullable(),
    parent: s.string().nullable(),
    snapshot: s.string(),
    fork: s.string().nullable(),
    task: s.string().nullable(),
    branch: s.string().nullable(),
    patch: s.string().nullable(),
    patchText: s.string().optional(),
    changed: s.number(),
  }),
  async run(input, ctx) {
    const { exportChanges } = await import('../workspace/export');
    return exportChanges({
      cwd: ctx.cwd,
      source: input.source,
      branch: input.branch,
      patch: input.patch,
      message: input.message,
      force: input.force,
      task: input.task,
    });
  },
  human: (r, _ctx, input) =>
    // --patch -: the patch itself is the output.
    r.patchText !== undefined
      ? r.patchText
      : !r.commit
        ? `nothing to export: ${input.source} has no changes`
        : r.branch
          ? `exported ${r.changed} changed path(s) as ${r.commit.slice(0, 12)} on branch ${r.branch}`
          : `exported ${r.changed} changed path(s) as ${r.commit.slice(0, 12)} to ${r.patch}`,
});
