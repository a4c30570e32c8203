// git xet init: create (or upgrade) the sidecar database. Idempotent.
import * as path from 'node:path';
import type { Command } from 'commander';
import { run } from '../run';
import { emit } from '../output';

export function registerInit(program: Command): void {
  program
    .command('init')
    .description('create the sidecar database in the common git dir (every command does this on first use)')
    .action(
      run(async (out) => {
        const { SCHEMA_VERSION, openSidecar, sidecarDir } = await import('../../sidecar/db');
        const { findRepo } = await import('../../git/repo');
        const repo = await findRepo(process.cwd(), true);
        openSidecar(repo.commonDir).close();
        const db = path.join(sidecarDir(repo.commonDir), 'xet.db');
        emit(out, { sidecar: db, schemaVersion: SCHEMA_VERSION }, () => `initialised ${db} (schema ${SCHEMA_VERSION})`);
      }),
    );
}
