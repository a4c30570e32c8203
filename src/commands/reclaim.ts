// git xet reclaim: capture, verify and pin a fork, then remove it (one fork, or every idle one).
import { s } from './schema';
import { defineCommand } from './spec';

const forkRef = { dir: s.string(), id: s.string(), mode: s.enum(['overlay', 'clone', 'copy']) };

export const reclaimCommand = defineCommand({
  path: ['reclaim'],
  tool: 'reclaim',
  description:
    'capture a fork, verify and pin the snapshot, then remove the fork (git xet fork <snapshot> brings it back)',
  input: {
    forkDir: s.string().optional().describe('the fork'),
    idle: s.string().optional().describe('every live fork with no activity for this long (30m, 12h, 7d, 2w)'),
    force: s
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
  output: s.looseObject({
    idleSeconds: s.number().nullable(),
    reclaimed: s.array(
      s.looseObject({
        ...forkRef,
        snapshot: s.string(),
        pinned: s.boolean(),
        pinRef: s.string(),
        exclusion: s.enum(['unmounted', 'scan']),
        lastActivity: s.string().nullable(),
        resumed: s.boolean(),
        left: s.string().nullable(),
      }),
    ),
    refused: s.array(
      s.looseObject({ ...forkRef, code: s.string(), message: s.string(), lastActivity: s.string().nullable() }),
    ),
    active: s.array(s.looseObject({ ...forkRef, lastActivity: s.string() })),
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
