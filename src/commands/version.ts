// git xet version: this git xet's version, and the git and Node.js it runs with.
import type { Command } from 'commander';
import { TOOL_VERSION } from '../version';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerVersion(program: Command): void {
  program
    .command('version')
    .description('print the version of git xet (with --json: also of git and Node.js)')
    .action(
      run(async (out) => {
        const { gitVersion } = await import('../git/exec');
        const v = gitVersion();
        const r = { version: TOOL_VERSION, git: v.join('.'), node: process.versions.node };
        emit(out, r, () => TOOL_VERSION);
      }),
    );
}
