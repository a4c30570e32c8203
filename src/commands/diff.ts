// git xet diff: changes between two snapshots, or from a snapshot to the working tree.
import type { Command } from 'commander';
import { EXIT } from '../errors';
import type { Difference } from '../snapshot/verify';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function describeDifference(d: Difference): string {
  const fmt = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));
  const detail =
    d.expected !== undefined || d.actual !== undefined
      ? `: ${fmt(d.expected ?? null)} -> ${fmt(d.actual ?? null)}`
      : '';
  return `  ${d.kind.padEnd(20)} ${d.path ?? ''}${detail}`;
}

export function registerDiff(program: Command): void {
  program
    .command('diff')
    .description('what changed between two snapshots, or from a snapshot to the current working tree')
    .argument('<snapshot>', 'the older snapshot')
    .argument('[other]', 'the newer snapshot (default: the working tree)')
    .option('--exit-code', 'exit 1 when there are differences')
    .action(
      run(async (out, a: string, b: string | undefined, opts: { exitCode?: boolean }) => {
        const { diffSnapshots } = await import('../snapshot/diff');
        const r = await diffSnapshots(process.cwd(), a, b);
        emit(out, r, () => (r.identical ? '' : r.changes.map(describeDifference).join('\n')));
        return opts.exitCode && !r.identical ? EXIT.DIFFERENT : EXIT.OK;
      }),
    );
}
