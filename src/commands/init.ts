// git xet init: create (or upgrade) the sidecar database and install the guard hooks. Idempotent.
import * as path from 'node:path';
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerInit(program: Command): void {
  program
    .command('init')
    .description(
      'create the sidecar database in the common git dir (every command does this on first use) and install the guard hooks',
    )
    .option('--no-hooks', 'do not install the guard hooks (git xet hooks install does it later)')
    .action(
      run(async (out, opts: { hooks: boolean }) => {
        const { SCHEMA_VERSION, openSidecar, sidecarDir } = await import('../sidecar/db');
        const { findRepo } = await import('../git/repo');
        const repo = await findRepo(process.cwd(), true);
        openSidecar(repo.commonDir).close();
        const db = path.join(sidecarDir(repo.commonDir), 'xet.db');
        // Hooks are installed after the sidecar: a HOOK_CONFLICT still leaves a working database.
        const hooks = opts.hooks
          ? await (await import('../hooks/install')).installHooks(repo, { partial: true })
          : null;
        const { describeHooks } = await import('./hooks');
        emit(out, { sidecar: db, schemaVersion: SCHEMA_VERSION, hooks }, () =>
          [
            `initialised ${db} (schema ${SCHEMA_VERSION})`,
            hooks ? describeHooks(hooks) : 'guard hooks not installed (--no-hooks)',
          ].join('\n'),
        );
      }),
    );
}
