// git xet fsck: check the repository's sidecar against its refs, worktrees and objects (--rebuild
// reconstructs the sidecar's roots), or with --store a xet directory store.
import type { Command } from 'commander';
import { EXIT, XetError } from '../errors';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerFsck(program: Command): void {
  program
    .command('fsck')
    .description(
      "check the repository's sidecar against refs, worktrees and objects (or a xet store with --store): exit 0 when whole, 1 with the problems found",
    )
    .option('--store <path>', 'check a store instead: a path, file:// URL or xet:: URL')
    .option('--rebuild', "rebuild the sidecar's roots (pins, forks) from refs, worktrees and mounts first")
    .action(
      run(async (out, opts: { store?: string; rebuild?: boolean }) => {
        if (opts.store) {
          if (opts.rebuild) throw new XetError('USAGE', '--rebuild applies to the repository, not to --store');
          const { fsckStore } = await import('../remote/fsck');
          const r = await fsckStore(process.cwd(), opts.store);
          emit(out, r, () =>
            r.ok
              ? `${r.store}: ok (${r.states} states, ${r.packs} packs, ${r.refs} refs)`
              : [`${r.store}: ${r.problems.length} problem(s)`, ...r.problems.map((p) => `  ${p}`)].join('\n'),
          );
          return r.ok ? EXIT.OK : EXIT.DIFFERENT;
        }
        const { findRepo } = await import('../git/repo');
        const { fsckRepository } = await import('../gc/fsck');
        const repo = await findRepo(process.cwd(), true);
        const r = await fsckRepository(repo, { rebuild: Boolean(opts.rebuild) });
        emit(out, r, () => {
          const lines: string[] = [];
          if (r.rebuilt) {
            if (r.rebuilt.movedAside) lines.push(`moved the corrupt sidecar aside to ${r.rebuilt.movedAside}`);
            lines.push(
              `rebuilt: ${r.rebuilt.pins} pin(s), ${r.rebuilt.forks} fork(s); ${r.rebuilt.pinRowsRemoved} stale pin row(s) removed, ${r.rebuilt.gcRunsInterrupted} gc run(s) marked interrupted`,
            );
          }
          const c = r.checked;
          lines.push(
            r.ok
              ? `ok (${c.snapshots} snapshots, ${c.pins} pins, ${c.forks} forks, ${c.gcRuns} gc runs)`
              : `${r.problems.length} problem(s)`,
          );
          for (const p of r.problems) lines.push(`  ${p.kind}: ${p.message}`);
          return lines.join('\n');
        });
        return r.ok ? EXIT.OK : EXIT.DIFFERENT;
      }),
    );
}
