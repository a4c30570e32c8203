// git xet changes: files a fork added, modified and deleted relative to its base snapshot.
import { s } from './schema';
import { defineCommand } from './spec';

export const changesCommand = defineCommand({
  path: ['changes'],
  tool: 'changes',
  description: "list a fork's added, modified and deleted files relative to its base snapshot",
  input: { forkDir: s.string().describe('the fork') },
  args: ['forkDir'],
  paths: { forkDir: 'existing' },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    id: s.string(),
    dir: s.string(),
    mode: s.string(),
    snapshot: s.string(),
    method: s.enum(['upper', 'scan']),
    added: s.array(s.string()),
    modified: s.array(s.string()),
    deleted: s.array(s.string()),
    addedEmptyDirs: s.array(s.string()),
    removedEmptyDirs: s.array(s.string()),
  }),
  async run(input, ctx) {
    const { forkChanges } = await import('../workspace/changes');
    return forkChanges(ctx.cwd, input.forkDir);
  },
  human: (r) =>
    [...r.added.map((p) => `A ${p}`), ...r.modified.map((p) => `M ${p}`), ...r.deleted.map((p) => `D ${p}`)].join('\n'),
});
