// git xet changes: files a fork added, modified and deleted relative to its base snapshot.
import { z } from 'zod';
import { defineCommand } from './spec';

export const changesCommand = defineCommand({
  path: ['changes'],
  tool: 'changes',
  description: "list a fork's added, modified and deleted files relative to its base snapshot",
  input: { forkDir: z.string().describe('the fork') },
  args: ['forkDir'],
  paths: { forkDir: 'existing' },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: z.looseObject({
    id: z.string(),
    dir: z.string(),
    mode: z.string(),
    snapshot: z.string(),
    method: z.enum(['upper', 'scan']),
    added: z.array(z.string()),
    modified: z.array(z.string()),
    deleted: z.array(z.string()),
    addedEmptyDirs: z.array(z.string()),
    removedEmptyDirs: z.array(z.string()),
  }),
  async run(input, ctx) {
    const { forkChanges } = await import('../workspace/changes');
    return forkChanges(ctx.cwd, input.forkDir);
  },
  human: (r) =>
    [...r.added.map((p) => `A ${p}`), ...r.modified.map((p) => `M ${p}`), ...r.deleted.map((p) => `D ${p}`)].join('\n'),
});
