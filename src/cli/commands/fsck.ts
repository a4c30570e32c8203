// git xet fsck --store: check a xet directory store (state log, packs, reachability).
import type { Command } from 'commander';
import { EXIT, XetError } from '../../errors';
import { run } from '../run';
import { emit } from '../output';

export function registerFsck(program: Command): void {
  program
    .command('fsck')
    .description('check a xet store: exit 0 when whole, 1 with the problems found')
    .requiredOption('--store <path>', 'the store: a path, file:// URL or xet:: URL')
    .action(
      run(async (out, opts: { store?: string }) => {
        if (!opts.store) throw new XetError('USAGE', 'fsck needs --store <path>');
        const { fsckStore } = await import('../../remote/fsck');
        const r = await fsckStore(process.cwd(), opts.store);
        emit(out, r, () =>
          r.ok
            ? `${r.store}: ok (${r.states} states, ${r.packs} packs, ${r.refs} refs)`
            : [`${r.store}: ${r.problems.length} problem(s)`, ...r.problems.map((p) => `  ${p}`)].join('\n'),
        );
        return r.ok ? EXIT.OK : EXIT.DIFFERENT;
      }),
    );
}
