// git xet restore: a snapshot -> a new repository in exactly the captured state.
import { s } from './schema';
import { defineCommand } from './spec';

export const restoreCommand = defineCommand({
  path: ['restore'],
  tool: 'restore',
  description: 'restore a snapshot into a new (or empty) directory as a self-contained repository',
  input: {
    snapshot: s.string().describe('snapshot id'),
    dir: s.string().describe('target directory; must not exist or be empty'),
    from: s
      .string()
      .optional()
      .describe('fetch the snapshot from this path, URL or remote instead of the current repository'),
    allowExec: s
      .boolean()
      .optional()
      .describe("keep a rebase todo's exec lines (git rebase --continue in the copy runs them)"),
    lazy: s
      .boolean()
      .optional()
      .describe(
        'with --from a Git server: leave chunked files unwritten, their chunks fetched on demand (hydrate, cat)',
      ),
  },
  args: ['snapshot', 'dir'],
  flags: { from: { value: '<source>' } },
  paths: { dir: 'target', from: 'source' },
  names: ['snapshot'],
  annotations: { readOnly: false, destructive: false, idempotent: false, openWorld: true },
  long: true,
  output: s.looseObject({ snapshot: s.string(), dir: s.string(), files: s.number(), head: s.string() }),
  async run(input, ctx) {
    const { restore } = await import('../snapshot/restore');
    return restore({
      cwd: ctx.cwd,
      snapshot: input.snapshot,
      dir: input.dir,
      from: input.from,
      progress: ctx.progress,
      allowExec: input.allowExec === true,
      lazy: input.lazy === true,
    });
  },
  human: (r) => `restored ${r.snapshot.slice(0, 12)} into ${r.dir} (${r.files} files, HEAD ${r.head})`,
});
