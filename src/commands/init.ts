// git xet init: create (or upgrade) the sidecar database and install the guard hooks. Idempotent.
import * as path from 'node:path';
import { s } from './schema';
import { defineCommand } from './spec';
import { describeHooks } from './hooks';

// Not a tool: every command (every tool) creates the sidecar on first use, and installing hooks
// into a repository is the person's decision, not an agent's.
export const initCommand = defineCommand({
  path: ['init'],
  tool: null,
  description:
    'create the sidecar database in the common git dir (every command does this on first use) and install the guard hooks',
  input: {
    hooks: s.boolean().default(true).describe('do not install the guard hooks (git xet hooks install does it later)'),
  },
  flags: { hooks: { negate: true } },
  annotations: { readOnly: false, destructive: false, idempotent: true },
  async run(input, ctx) {
    const { SCHEMA_VERSION, openSidecar, sidecarDir } = await import('../sidecar/db');
    const { findRepo } = await import('../git/repo');
    const repo = await findRepo(ctx.cwd, true);
    openSidecar(repo.commonDir).close();
    const db = path.join(sidecarDir(repo.commonDir), 'xet.db');
    // Hooks are installed after the sidecar: a HOOK_CONFLICT still leaves a working database.
    const hooks = input.hooks ? await (await import('../hooks/install')).installHooks(repo, { partial: true }) : null;
    return { sidecar: db, schemaVersion: SCHEMA_VERSION, hooks };
  },
  human: (r) =>
    [
      `initialised ${r.sidecar} (schema ${r.schemaVersion})`,
      r.hooks ? describeHooks(r.hooks) : 'guard hooks not installed (--no-hooks)',
    ].join('\n'),
});
