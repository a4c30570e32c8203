// git xet task recover (owner: recovery helper): reconcile tasks whose runner died.
import type { Command } from 'commander';
import { XetError } from '../errors';
import { findRepo } from '../git/repo';
import { emit } from '../cli/output';
import { run } from '../cli/run';

export function registerTaskRecover(task: Command): void {
  task
    .command('recover')
    .description(
      'reconcile tasks whose runner died: REATTACHED, SESSION_RESUMABLE, NOT_RECOVERABLE or UNKNOWN (nothing re-runs)',
    )
    .argument('[task]', 'a task id (or a unique prefix of 4+ hex digits)')
    .option('--all', 'every task whose runner is gone, and every stale guard in this repository’s worktrees')
    .action(
      run(async (out, spec: string | undefined, opts: { all?: boolean }) => {
        if (spec && opts.all) throw new XetError('USAGE', 'give a task or --all, not both');
        const repo = await findRepo(process.cwd(), true);
        const { reconcile } = await import('../tasks/recover');
        const r = await reconcile(repo, spec ? { task: spec } : { all: true });
        emit(out, r, () => {
          const lines = r.tasks.map(
            (t) =>
              `${t.task || '(unreadable guard)'} ${t.classification}: ${t.reason}` +
              (t.guardCleared ? '; guard cleared' : '') +
              (t.snapshot ? `; snapshot ${t.snapshot}` : '') +
              (t.fence ? `; ${t.fence}` : ''),
          );
          for (const s of r.skipped ?? []) lines.push(`${s.task}: nothing to recover (${s.reason})`);
          return lines.length ? lines.join('\n') : 'nothing to recover';
        });
      }),
    );
}
