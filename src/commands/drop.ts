// git xet drop, undrop: stop retaining snapshots, and bring them back before gc reclaims them.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerDrop(program: Command): void {
  program
    .command('drop')
    .description('stop retaining snapshots (refused for a root: pinned, a live fork, an unexpired handoff)')
    .argument('<snapshots...>', 'snapshot ids (full or at least 4 hex digits)')
    .option('--remote <name>', 'delete the snapshots on this remote (a xet store) instead of here')
    .action(
      run(async (out, specs: string[], opts: { remote?: string }) => {
        if (opts.remote !== undefined) {
          const { dropOnRemote, describeRemoteDrop } = await import('../remote/drop-remote');
          const r = await dropOnRemote(process.cwd(), opts.remote, specs);
          emit(out, r, () => describeRemoteDrop(r));
          return;
        }
        const { findRepo } = await import('../git/repo');
        const { dropSnapshots } = await import('../gc/drop');
        const r = await dropSnapshots(await findRepo(process.cwd(), true), specs);
        emit(out, r, () =>
          r.dropped
            .map((d) =>
              d.created
                ? `dropped ${d.snapshot} (git xet undrop brings it back until gc reclaims it)`
                : `${d.snapshot} was already dropped`,
            )
            .join('\n'),
        );
      }),
    );
  program
    .command('undrop')
    .description('retain dropped snapshots again, while their objects are still here')
    .argument('<snapshots...>', 'snapshot ids (full or at least 4 hex digits)')
    .action(
      run(async (out, specs: string[]) => {
        const { findRepo } = await import('../git/repo');
        const { undropSnapshots } = await import('../gc/drop');
        const r = await undropSnapshots(await findRepo(process.cwd(), true), specs);
        emit(out, r, () =>
          r.undropped
            .map((u) =>
              u.from === 'retained' ? `${u.snapshot} was not dropped` : `retained ${u.snapshot} again (from ${u.from})`,
            )
            .join('\n'),
        );
      }),
    );
}
