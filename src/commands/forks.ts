// git xet forks: the forks of this repository, their state and the disk each uses.
import { z } from 'zod';
import { formatBytes } from '../cli/output';
import { defineCommand } from './spec';

export const forksCommand = defineCommand({
  path: ['forks'],
  tool: 'forks',
  description: 'list forks: id, directory, mode, base snapshot, state, bytes of their own',
  input: { all: z.boolean().optional().describe('include discarded forks') },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: z.looseObject({
    forks: z.array(
      z.looseObject({
        id: z.string(),
        dir: z.string(),
        mode: z.string(),
        snapshot: z.string(),
        head: z.string().nullable(),
        branch: z.string().nullable(),
        state: z.string(),
        createdAt: z.string(),
        bytes: z.number().nullable(),
        keptSnapshot: z.string().nullable(),
        reclaimedAt: z.string().nullable(),
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
