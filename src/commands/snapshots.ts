// git xet snapshots: list the snapshots in this repository, newest first.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit, formatBytes } from '../cli/output';

export function registerSnapshots(program: Command): void {
  program
    .command('snapshots')
    .description('list snapshots (refs/xet/snapshots/*), newest first')
    .action(
      run(async (out) => {
        const { listSnapshots } = await import('../snapshot/store');
        const { findRepo, repoOpts } = await import('../git/repo');
        const repo = await findRepo(process.cwd(), true);
        const { pinnedSnapshots } = await import('../gc/pins');
        const pinned = await pinnedSnapshots(repo);
        const list = (await listSnapshots(repoOpts(repo))).map((s) => ({ ...s, pinned: pinned.has(s.snapshot) }));
        emit(out, { snapshots: list }, () =>
          list
            .map(
              (s) =>
                `${s.snapshot.slice(0, 12)}${s.pinned ? ' P' : '  '} ${s.createdAt}  ${String(s.files).padStart(7)} files  ${formatBytes(s.bytes).padStart(10)}  ${s.head}  ${s.message}`,
            )
            .join('\n'),
        );
      }),
    );
}
