// git xet fork: a writable fork of a snapshot (overlay, reflink clone or copy), or --remount one.
import { Command, Option } from 'commander';
import { XetError } from '../errors';
import { run } from '../cli/run';
import { emit, progressLine } from '../cli/output';

export function registerFork(program: Command): void {
  program
    .command('fork')
    .description('make a writable fork of a snapshot: a linked worktree in exactly the snapshot state')
    .argument('<snapshot>', 'snapshot id (with --remount: the fork directory)')
    .argument('[dir]', 'directory for the fork; must not exist or be empty')
    .addOption(
      new Option('--mode <mode>', 'how files are laid out')
        .choices(['auto', 'overlay', 'clone', 'copy'])
        .default('auto'),
    )
    .option('--remount', 'mount an existing overlay fork again (after a reboot) instead of making one')
    .option(
      '--allowance <bytes[,files]>',
      "the fork's own allowance (default xet.fork.allowance); an overlay fork gets a filesystem of that size",
    )
    .action(
      run(
        async (
          out,
          a: string | undefined,
          b: string | undefined,
          opts: { mode: string; remount?: boolean; allowance?: string },
        ) => {
          const workspace = await import('../workspace/fork');
          if (opts.remount) {
            // `fork --remount <dir>`: the one argument is the directory.
            if (b !== undefined || opts.allowance !== undefined) {
              throw new XetError('USAGE', 'fork --remount takes only the fork directory');
            }
            const r = await workspace.remountFork(process.cwd(), a as string);
            emit(out, r, () =>
              r.mounted
                ? `mounted fork ${r.id} at ${r.dir}`
                : r.unfenced
                  ? `fork ${r.id} at ${r.dir} is writable again (it was fenced read-only by a task guard)`
                  : `fork ${r.id} at ${r.dir} is mounted`,
            );
            return;
          }
          if (b === undefined) throw new XetError('USAGE', 'fork needs <snapshot> and <dir>');
          const r = await workspace.createFork({
            cwd: process.cwd(),
            snapshot: a as string,
            dir: b,
            mode: opts.mode as 'auto',
            allowance: opts.allowance,
            progress: progressLine(out),
          });
          emit(out, r, () =>
            [
              `forked ${r.snapshot.slice(0, 12)} into ${r.dir} (${r.mode}, fork ${r.id}; HEAD detached at ${
                r.head?.slice(0, 12) ?? 'an unborn branch'
              }${r.branch ? `, from ${r.branch.replace(/^refs\/heads\//, '')}` : ''})`,
              ...Object.entries(r.notAvailable).map(([m, why]) => `  not ${m}: ${why}`),
              ...(r.allowance
                ? [
                    `  allowance ${r.allowance.bytes} bytes${r.allowance.files !== null ? `, ${r.allowance.files} files` : ''}; ` +
                      (r.route ? `enforced by its ${r.route} layer` : 'not enforced by the kernel (counted only)'),
                  ]
                : []),
            ].join('\n'),
          );
        },
      ),
    );
}
