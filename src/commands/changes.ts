// git xet changes: files a fork added, modified and deleted relative to its base snapshot.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerChanges(program: Command): void {
  program
    .command('changes')
    .description("list a fork's added, modified and deleted files relative to its base snapshot")
    .argument('<fork-dir>', 'the fork')
    .action(
      run(async (out, dir: string) => {
        const { forkChanges } = await import('../workspace/changes');
        const r = await forkChanges(process.cwd(), dir);
        emit(out, r, () =>
          [...r.added.map((p) => `A ${p}`), ...r.modified.map((p) => `M ${p}`), ...r.deleted.map((p) => `D ${p}`)].join(
            '\n',
          ),
        );
      }),
    );
}
