// git xet forks: the forks of this repository, their state and the disk each uses.
import { s } from './schema';
import { formatBytes } from '../cli/output';
import { defineCommand } from './spec';

export const forksCommand = defineCommand({
  path: ['forks'],
  tool: 'forks',
  description: 'list forks: id, directory, mode, base snapshot, state, bytes of their own',
  input: { all: s.boolean().optional().describe('include discarded forks') },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    forks: s.array(
      s.looseObject({
        id: s.string(),
        dir: s.string(),
        mode: s.string(),
        snapshot: s.string(),
        head: s.string().nullable(),
        branch: s.string().nullable(),
        state: s.string(),
        createdAt: s.string(),
        bytes: s.number().nullable(),
        keptSnapshot: s.string().nullable(),
        reclaimedAt: s.string().nullable(),
      }),
    ),
  }),
  async run(input, ctx) {
    const { listForkInfo } = await import('../workspace/list');
    return { forks: await listForkInfo(ctx.cwd, Boolean(input.all)) };
  },
  human: (r) =>
    r.forks
      .map(
        (f) =>
          `${f.id}  ${f.state.padEnd(10)} ${f.mode.padEnd(7)} ${f.snapshot.slice(0, 12)}  ${
            f.bytes === null ? '-' : formatBytes(f.bytes)
          }  ${f.dir}`,
      )
      .join('\n'),
});
