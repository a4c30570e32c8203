// git xet fork: a writable fork of a snapshot (overlay, reflink clone or copy), or --remount one.
import { s } from './schema';
import { XetError } from '../errors';
import { defineCommand } from './spec';
import type { ForkResult } from '../workspace/fork';

export const forkCommand = defineCommand({
  path: ['fork'],
  tool: 'fork',
  description: 'make a writable fork of a snapshot: a linked worktree in exactly the snapshot state',
  input: {
    snapshot: s.string().describe('snapshot id (with --remount: the fork directory)'),
    dir: s.string().optional().describe('directory for the fork; must not exist or be empty'),
    mode: s.enum(['auto', 'overlay', 'clone', 'copy']).default('auto').describe('how files are laid out'),
    remount: s
      .boolean()
      .optional()
      .describe('mount an existing overlay fork again (after a reboot) instead of making one'),
    allowance: s
      .string()
      .optional()
      .describe(
        "the fork's own allowance (default xet.fork.allowance); an overlay fork gets a filesystem of that size",
      ),
  },
  args: ['snapshot', 'dir'],
  flags: { mode: { value: '<mode>' }, allowance: { value: '<bytes[,files]>' } },
  paths: { dir: 'target' },
  // With --remount `snapshot` is a fork's directory: it is only looked up among this repository's
  // registered forks (resolveFork), never opened as given, so a name's check is enough.
  names: ['snapshot'],
  annotations: { readOnly: false, destructive: false, idempotent: false },
  long: true,
  // The daemon runs it for a thin client (not --remount: src/daemon/relay.ts leaves that to the CLI).
  relayable: true,
  // A new fork's fields, or (--remount) id, dir, mounted and unfenced.
  output: s.looseObject({
    id: s.string(),
    dir: s.string(),
    mode: s.enum(['overlay', 'clone', 'copy']).optional(),
    snapshot: s.string().optional(),
    head: s.string().nullable().optional(),
    branch: s.string().nullable().optional(),
    notAvailable: s.record(s.string(), s.string()).optional(),
    baseBuilt: s.boolean().optional(),
    allowance: s.looseObject({ bytes: s.number(), files: s.number().nullable() }).nullable().optional(),
    route: s.string().nullable().optional(),
    mounted: s.boolean().optional(),
    unfenced: s.boolean().optional(),
    warnings: s
      .array(s.string())
      .optional()
      .describe(
        'problems after the fork was made (it stands): xet.daemon.autoStart not a boolean, or its daemon not started',
      ),
  }),
  refine(input) {
    if (input.remount) {
      // `fork --remount <dir>`: the one argument is the directory.
      if (input.dir !== undefined || input.allowance !== undefined) {
        throw new XetError('USAGE', 'fork --remount takes only the fork directory');
      }
    } else if (input.dir === undefined) throw new XetError('USAGE', 'fork needs <snapshot> and <dir>');
  },
  async run(input, ctx) {
    if (ctx.via === 'cli' && !input.remount) {
      // A running daemon (src/daemon/) makes the same fork without a start-up; else the normal path.
      const { viaDaemon } = await import('../daemon/client');
      const r = (await viaDaemon('fork', ctx.cwd, input)) as ForkResult | undefined;
      if (r) return r;
    }
    const workspace = await import('../workspace/fork');
    if (input.remount) return workspace.remountFork(ctx.cwd, input.snapshot);
    const r = await workspace.createFork({
      cwd: ctx.cwd,
      snapshot: input.snapshot,
      dir: input.dir as string,
      mode: input.mode,
      allowance: input.allowance,
      progress: ctx.progress,
    });
    if (ctx.via === 'cli') {
      // Ran here: no daemon answered. xet.daemon.autoStart starts one for the next fork.
      const { autoStartDaemon } = await import('../daemon/start');
      const warning = await autoStartDaemon(ctx.cwd);
      if (warning) return { ...r, warnings: [warning] };
    }
    return r;
  },
  human(r, ctx) {
    for (const w of ('warnings' in r ? (r.warnings as string[] | undefined) : undefined) ?? []) ctx.warn?.(w);
    if ('mounted' in r) {
      return r.mounted
        ? `mounted fork ${r.id} at ${r.dir}`
        : r.unfenced
          ? `fork ${r.id} at ${r.dir} is writable again (it was fenced read-only by a task guard)`
          : `fork ${r.id} at ${r.dir} is mounted`;
    }
    return [
      `forked ${r.snapshot.slice(0, 12)} into ${r.dir} (${r.mode}, fork ${r.id}; HEAD detached at ${
        r.head?.slice(0, 12) ?? 'an unborn branch'
      }${r.branch ? `, from ${r.branch.replace(/^refs\/heads\//, '')}` : ''})`,
      ...Object.entries(r.notAvailable).map(([m, why]) => `  not ${m}: ${why}`),
      ...(r.allowance
        ? [
            `  allowance ${r.allowance.bytes} bytes${r.allowance.files !== null ? `, ${r.allowance.files} files` : ''}; ` +
              (r.route ? `enforced by its ${r.route} layer` : 'not enforced by the kernel (counted only)'),
          ]
        : []),
    ].join('\n');
  },
});
