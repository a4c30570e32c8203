// git xet forks: the forks of this repository, their state and the disk each uses.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit, formatBytes } from '../cli/output';

export function registerForks(program: Command): void {
  program
    .command('forks')
    .description('list forks: id, directory, mode, base snapshot, state, bytes of their own')
    .option('--all', 'include discarded forks')
    .action(
      run(async (out, opts: { all?: boolean }) => {
        const { listForkInfo } = await import('../workspace/list');
        const forks = await listForkInfo(process.cwd(), Boolean(opts.all));
        emit(out, { forks }, () =>
          forks
            .map(
              (f) =>
                `${f.id}  ${f.state.padEnd(10)} ${f.mode.padEnd(7)} ${f.snapshot.slice(0, 12)}  ${
                  f.bytes === null ? '-' : formatBytes(f.bytes)
                }  ${f.dir}`,
            )
            .join('\n'),
        );
      }),
    );
}
