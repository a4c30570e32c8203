// git xet hooks install|uninstall|status: the guard hooks in the hooks directory Git uses
// (src/hooks/install.ts, hooks/README.md).
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';
import type { HooksResult } from '../hooks/install';

async function repoHere() {
  const { findRepo } = await import('../git/repo');
  return findRepo(process.cwd(), true);
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

export function registerHooks(program: Command): void {
  const hooks = program
    .command('hooks')
    .description('the hooks that refuse Git writes in a worktree whose task runner died (WORKDIR_RECOVERY_REQUIRED)');
  hooks
    .command('install')
    .description('install the guard hooks, chaining any hook already there (idempotent)')
    .action(
      run(async (out) => {
        const { installHooks } = await import('../hooks/install');
        const r = await installHooks(await repoHere());
        emit(out, r, () => describeHooks(r));
      }),
    );
  hooks
    .command('uninstall')
    .description('remove the guard hooks and put back, byte for byte, the hooks they chained')
    .option('--force', 'also from a hooks directory outside this repository (a global core.hooksPath)')
    .action(
      run(async (out, opts: { force?: boolean }) => {
        const { uninstallHooks } = await import('../hooks/install');
        const r = await uninstallHooks(await repoHere(), { force: opts.force === true });
        emit(out, r, () => describeHooks(r));
      }),
    );
  hooks
    .command('block')
    .description('print the guard block for <hook>, to paste into a hook the repository tracks')
    .argument('<hook>', 'pre-commit, pre-merge-commit, pre-rebase or reference-transaction')
    .action(
      run(async (out, name: string) => {
        const { HOOK_NAMES, guardBlock } = await import('../hooks/install');
        if (!(HOOK_NAMES as readonly string[]).includes(name)) {
          const { XetError } = await import('../errors');
          throw new XetError('USAGE', `no guard for hook ${name}: one of ${HOOK_NAMES.join(', ')}`, { hook: name });
        }
        emit(out, { hook: name, block: guardBlock(name) }, () => guardBlock(name));
      }),
    );
  hooks
    .command('status')
    .description(
      'per hook: absent, installed, chained, foreign (replaced since), modified, broken (its chained hook is gone) or skipped',
    )
    .action(
      run(async (out) => {
        const { hooksStatus } = await import('../hooks/install');
        const r = await hooksStatus(await repoHere());
        emit(out, r, () => describeHooks(r));
      }),
    );
}
