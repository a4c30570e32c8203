// git xet reclaim: capture, verify and pin a fork, then remove it (one fork, or every idle one).
import { z } from 'zod';
import { defineCommand } from './spec';

const forkRef = { dir: z.string(), id: z.string(), mode: z.enum(['overlay', 'clone', 'copy']) };

export const reclaimCommand = defineCommand({
  path: ['reclaim'],
  tool: 'reclaim',
  description:
    'capture a fork, verify and pin the snapshot, then remove the fork (git xet fork <snapshot> brings it back)',
  input: {
    forkDir: z.string().optional().describe('the fork'),
    idle: z.string().optional().describe('every live fork with no activity for this long (30m, 12h, 7d, 2w)'),
    force: z
      .boolean()
      .optional()
      .describe('also clone and copy forks, after a scan for processes using them (not a guarantee)'),
  },
  args: ['forkDir'],
  flags: { idle: { value: '<duration>' } },
  paths: { forkDir: 'existing' },
  // Removes forks (their state is kept as a pinned snapshot, but a writer the scan missed loses work).
  annotations: { readOnly: false, destructive: true, idempotent: false },
  long: true,
  output: z.looseObject({
    idleSeconds: z.number().nullable(),
    reclaimed: z.array(
      z.looseObject({
        ...forkRef,
        snapshot: z.string(),
        pinned: z.boolean(),
        pinRef: z.string(),
        exclusion: z.enum(['unmounted', 'scan']),
        lastActivity: z.string().nullable(),
        resumed: z.boolean(),
        left: z.string().nullable(),
      }),
    ),
    refused: z.array(
      z.looseObject({ ...forkRef, code: z.string(), message: z.string(), lastActivity: z.string().nullable() }),
    ),
    active: z.array(z.looseObject({ ...forkRef, lastActivity: z.string() })),
  }),
  async run(input, ctx) {
    const { reclaim } = await import('../workspace/reclaim');
    return reclaim({
      cwd: ctx.cwd,
      dir: input.forkDir,
      idle: input.idle,
      force: Boolean(input.force),
      progress: ctx.progress,
    });
  },
  human: (r) =>
    [
      ...r.reclaimed.map(
        (f) =>
          `reclaimed fork ${f.id} (${f.mode}) at ${f.dir}: pinned snapshot ${f.snapshot}` +
          (f.left ? `\n  ${f.left} was left in place: something wrote into it after it was unmounted` : ''),
      ),
      ...r.refused.map((f) => `refused fork ${f.id} (${f.mode}) at ${f.dir}: ${f.message} [${f.code}]`),
      ...(r.idleSeconds !== null && !r.reclaimed.length && !r.refused.length ? ['no idle fork'] : []),
    ].join('\n'),
});
