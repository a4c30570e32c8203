// git xet restore: a snapshot -> a new repository in exactly the captured state.
import type { Command } from 'commander';
import { run } from '../run';
import { progressLine, emit } from '../output';

export function registerRestore(program: Command): void {
  program
    .command('restore')
    .description('restore a snapshot into a new (or empty) directory as a self-contained repository')
    .argument('<snapshot>', 'snapshot id')
    .argument('<dir>', 'target directory; must not exist or be empty')
    .option('--from <source>', 'fetch the snapshot from this path, URL or remote instead of the current repository')
    .option('--allow-exec', "keep a rebase todo's exec lines (git rebase --continue in the copy runs them)")
    .action(
      run(async (out, snapshot: string, dir: string, opts: { from?: string; allowExec?: boolean }) => {
        const { restore } = await import('../../snapshot/restore');
        const r = await restore({
          cwd: process.cwd(),
          snapshot,
          dir,
          from: opts.from,
          progress: progressLine(out),
          allowExec: opts.allowExec === true,
        });
        emit(out, r, () => `restored ${r.snapshot.slice(0, 12)} into ${r.dir} (${r.files} files, HEAD ${r.head})`);
      }),
    );
}
