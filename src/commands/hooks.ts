// git xet hooks install|uninstall|status: the guard hooks in the hooks directory Git uses
// (src/hooks/install.ts, hooks/README.md).
import { s } from './schema';
import { XetError } from '../errors';
import type { HooksResult } from '../hooks/install';
import { defineCommand } from './spec';

async function repoHere(cwd: string) {
  const { findRepo } = await import('../git/repo');
  return findRepo(cwd, true);
}

const RESTORED: Record<string, string> = {
  removed: 'removed',
  lost: 'removed (the hook it chained was gone)',
  tracked: 'left as committed (tracked)',
};

export function describeHooks(r: HooksResult): string {
  const width = Math.max(...r.hooks.map((h) => h.name.length));
  return [
    `hooks directory: ${r.dir}${r.disabled ? " (not a directory: Git's hooks are switched off)" : ''}${
      r.shared ? ' (outside this repository: shared with others)' : ''
    }`,
    ...r.hooks.map(
      (h) =>
        `  ${h.name.padEnd(width)}  ${h.state}${h.method ? ` (${h.method})` : ''}${
          h.restored ? `, ${RESTORED[h.restored] ?? `restored (${h.restored})`}` : ''
        }${h.reason ? `: ${h.reason}` : ''}`,
    ),
    ...(r.intact === false ? ['the guard hooks are not all in place: git xet hooks install'] : []),
  ].join('\n');
}

// Not tools: the hooks guard this repository against writes after a task runner died; whether
// they are in place is the person's decision (and `git xet init` installs them).
const notATool = { tool: null, annotations: { readOnly: false, destructive: false, idempotent: true } } as const;

/** The `hooks` group command's description (registry.ts GROUPS). */
export const HOOKS_GROUP =
  'the hooks that refuse Git writes in a worktree whose task runner died (WORKDIR_RECOVERY_REQUIRED)';

export const hooksInstallCommand = defineCommand({
  ...notATool,
  path: ['hooks', 'install'],
  description: 'install the guard hooks, chaining any hook already there (idempotent)',
  input: {},
  async run(_input, ctx) {
    const { installHooks } = await import('../hooks/install');
    return installHooks(await repoHere(ctx.cwd));
  },
  human: describeHooks,
});

export const hooksUninstallCommand = defineCommand({
  ...notATool,
  path: ['hooks', 'uninstall'],
  description: 'remove the guard hooks and put back, byte for byte, the hooks they chained',
  annotations: { readOnly: false, destructive: true, idempotent: true },
  input: {
    force: s
      .boolean()
      .optional()
      .describe('also from a hooks directory outside this repository (a global core.hooksPath)'),
  },
  async run(input, ctx) {
    const { uninstallHooks } = await import('../hooks/install');
    return uninstallHooks(await repoHere(ctx.cwd), { force: input.force === true });
  },
  human: describeHooks,
});

export const hooksBlockCommand = defineCommand({
  ...notATool,
  path: ['hooks', 'block'],
  description: 'print the guard block for <hook>, to paste into a hook the repository tracks',
  input: { hook: s.string().describe('pre-commit, pre-merge-commit, pre-rebase or reference-transaction') },
  args: ['hook'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  async run(input) {
    const { HOOK_NAMES, guardBlock } = await import('../hooks/install');
    const name = input.hook;
    if (!(HOOK_NAMES as readonly string[]).includes(name)) {
      throw new XetError('USAGE', `no guard for hook ${name}: one of ${HOOK_NAMES.join(', ')}`, { hook: name });
    }
    return { hook: name, block: guardBlock(name) };
  },
  human: (r) => r.block,
});

export const hooksStatusCommand = defineCommand({
  ...notATool,
  path: ['hooks', 'status'],
  description:
    'per hook: absent, installed, chained, foreign (replaced since), modified, broken (its chained hook is gone) or skipped',
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  async run(_input, ctx) {
    const { hooksStatus } = await import('../hooks/install');
    return hooksStatus(await repoHere(ctx.cwd));
  },
  human: describeHooks,
});
