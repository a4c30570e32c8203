// git xet discard: capture a fork's work (if any), then unmount and remove the fork.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerDiscard(program: Command): void {
  program
    .command('discard')
    .description('remove a fork; if it has changes they are captured first and the snapshot printed')
    .argument('<fork-dir>', 'the fork')
    .option('--no-capture', "drop the fork's changes instead of capturing them")
    .action(
      run(async (out, dir: string, opts: { capture: boolean }) => {
        const { discardFork } = await import('../workspace/discard');
        const r = await discardFork({ cwd: process.cwd(), dir, capture: opts.capture });
        emit(
          out,
          r,
          () =>
            (r.snapshot ? `discarded fork ${r.id}; its work is in snapshot ${r.snapshot}` : `discarded fork ${r.id}`) +
            (r.left ? `\n${r.left} was left in place: it no longer links to the fork` : ''),
        );
      }),
    );
}
