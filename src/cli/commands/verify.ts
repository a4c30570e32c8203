// git xet verify: is a directory exactly in a snapshot's state? Exit 0 if so, 1 with differences.
import type { Command } from 'commander';
import { EXIT } from '../../errors';
import { run } from '../run';
import { chatty, emit } from '../output';
import { describeDifference } from './diff';

export function registerVerify(program: Command): void {
  program
    .command('verify')
    .description('compare a directory with a snapshot; exit 0 when identical, 1 with the differences')
    .argument('<snapshot>', 'snapshot id')
    .argument('<dir>', 'directory to check')
    .action(
      run(async (out, snapshot: string, dir: string) => {
        const { verify } = await import('../../snapshot/verify');
        const r = await verify({ cwd: process.cwd(), snapshot, dir });
        const x = r.excludedByPolicy;
        if (chatty(out) && x.secrets.length + x.byPattern + x.ignored > 0) {
          process.stderr.write(
            `not compared (the snapshot's policy leaves them out): ${x.secrets.length} secret file(s)${
              x.secrets.length ? ` (${x.secrets.slice(0, 5).join(', ')})` : ''
            }, ${x.byPattern} excluded by pattern, ${x.ignored} ignored\n`,
          );
        }
        emit(out, r, () =>
          r.ok
            ? `${r.dir} matches snapshot ${r.snapshot.slice(0, 12)}`
            : [
                `${r.dir} differs from snapshot ${r.snapshot.slice(0, 12)}:`,
                ...r.differences.map(describeDifference),
              ].join('\n'),
        );
        return r.ok ? EXIT.OK : EXIT.DIFFERENT;
      }),
    );
}
