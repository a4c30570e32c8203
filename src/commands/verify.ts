// git xet verify: is a directory exactly in a snapshot's state? Exit 0 if so, 1 with differences.
import { s } from './schema';
import { EXIT } from '../errors';
import { defineCommand } from './spec';
import { describeDifference } from './diff';

export const verifyCommand = defineCommand({
  path: ['verify'],
  tool: 'verify',
  description: 'compare a directory with a snapshot; exit 0 when identical, 1 with the differences',
  input: {
    snapshot: s.string().describe('snapshot id'),
    dir: s.string().describe('directory to check'),
  },
  args: ['snapshot', 'dir'],
  paths: { dir: 'existing' },
  names: ['snapshot'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    ok: s.boolean(),
    scope: s.enum(['repository', 'fork']),
    snapshot: s.string(),
    dir: s.string(),
    differences: s.array(s.looseObject({})),
  }),
  async run(input, ctx) {
    const { verify } = await import('../snapshot/verify');
    return verify({ cwd: ctx.cwd, snapshot: input.snapshot, dir: input.dir });
  },
  human(r, ctx) {
    const x = r.excludedByPolicy;
    if (x.secrets.length + x.byPattern + x.ignored > 0) {
      ctx.note(
        `not compared (the snapshot's policy leaves them out): ${x.secrets.length} secret file(s)${
          x.secrets.length ? ` (${x.secrets.slice(0, 5).join(', ')})` : ''
        }, ${x.byPattern} excluded by pattern, ${x.ignored} ignored`,
      );
    }
    return r.ok
      ? `${r.dir} matches snapshot ${r.snapshot.slice(0, 12)}`
      : [`${r.dir} differs from snapshot ${r.snapshot.slice(0, 12)}:`, ...r.differences.map(describeDifference)].join(
          '\n',
        );
  },
  exitCode: (r) => (r.ok ? EXIT.OK : EXIT.DIFFERENT),
});
