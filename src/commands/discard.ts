// git xet discard: capture a fork's work (if any), then unmount and remove the fork.
import { s } from './schema';
import { defineCommand } from './spec';

export const discardCommand = defineCommand({
  path: ['discard'],
  tool: 'discard',
  description: 'remove a fork; if it has changes they are captured first and the snapshot printed',
  input: {
    forkDir: s.string().describe('the fork'),
    capture: s.boolean().default(true).describe("drop the fork's changes instead of capturing them"),
  },
  args: ['forkDir'],
  flags: { capture: { negate: true } },
  paths: { forkDir: 'existing' },
  // Removes the fork; with capture false its work is lost.
  annotations: { readOnly: false, destructive: true, idempotent: false },
  long: true,
  output: s.looseObject({
    id: s.string(),
    dir: s.string(),
    snapshot: s.string().nullable(),
    dirty: s.boolean().nullable(),
    left: s.string().nullable(),
  }),
  async run(input, ctx) {
    const { discardFork } = await import('../workspace/discard');
    return discardFork({ cwd: ctx.cwd, dir: input.forkDir, capture: input.capture });
  },
  human: (r) =>
    (r.snapshot ? `discarded fork ${r.id}; its work is in snapshot ${r.snapshot}` : `discarded fork ${r.id}`) +
    (r.left ? `\n${r.left} was left in place: it no longer links to the fork` : ''),
});
