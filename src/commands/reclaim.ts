// git xet reclaim: capture, verify and pin a fork, then remove it (one fork, or every idle one).
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit, progressLine } from '../cli/output';

export function registerReclaim(program: Command): void {
  program
    .command('reclaim')
    .description(
      'capture a fork, verify and pin the snapshot, then remove the fork (git xet fork <snapshot> brings it back)',
    )
    .argument('[fork-dir]', 'the fork')
    .option('--idle <duration>', 'every live fork with no activity for this long (30m, 12h, 7d, 2w)')
    .option('--force', 'also clone and copy forks, after a scan for processes using them (not a guarantee)')
    .action(
      run(async (out, dir: string | undefined, opts: { idle?: string; force?: boolean }) => {
        const { reclaim } = await import('../workspace/reclaim');
        const r = await reclaim({
          cwd: process.cwd(),
          dir,
          idle: opts.idle,
          force: Boolean(opts.force),
          progress: progressLine(out),
        });
        emit(out, r, () =>
          [
            ...r.reclaimed.map(
              (f) =>
                `reclaimed fork ${f.id} (${f.mode}) at ${f.dir}: pinned snapshot ${f.snapshot}` +
                (f.left ? `\n  ${f.left} was left in place: something wrote into it after it was unmounted` : ''),
            ),
            ...r.refused.map((f) => `refused fork ${f.id} (${f.mode}) at ${f.dir}: ${f.message} [${f.code}]`),
            ...(r.idleSeconds !== null && !r.reclaimed.length && !r.refused.length ? ['no idle fork'] : []),
          ].join('\n'),
        );
      }),
    );
}
