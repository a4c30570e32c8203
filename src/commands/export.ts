// git xet export: a fork's or snapshot's work as one commit on a branch, or as a patch.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerExport(program: Command): void {
  program
    .command('export')
    .description("turn a fork's (or snapshot's) changes into one commit on top of its base commit")
    .argument('<source>', 'a fork directory or a snapshot id')
    .option('--branch <name>', 'create (or with --force move) this branch to the commit')
    .option('--patch <file>', "write the commit as a patch (git am format); '-' for stdout")
    .option('-m, --message <msg>', 'commit message (trailers naming the snapshot are added)')
    .option('--force', 'move an existing branch')
    .option(
      '--task <id>',
      "the task the work came from (an Xet-Task trailer); found from a task's fork or result snapshot",
    )
    .action(
      run(
        async (
          out,
          source: string,
          opts: { branch?: string; patch?: string; message?: string; force?: boolean; task?: string },
        ) => {
          const { exportChanges } = await import('../workspace/export');
          const r = await exportChanges({ cwd: process.cwd(), source, ...opts });
          if (r.patchText !== undefined && !out.json) {
            process.stdout.write(r.patchText);
            return;
          }
          emit(out, r, () =>
            !r.commit
              ? `nothing to export: ${source} has no changes`
              : r.branch
                ? `exported ${r.changed} changed path(s) as ${r.commit.slice(0, 12)} on branch ${r.branch}`
                : `exported ${r.changed} changed path(s) as ${r.commit.slice(0, 12)} to ${r.patch}`,
          );
        },
      ),
    );
}
