// git xet push: publish refs/xet/* (snapshots, handoffs), all or the ones named, to a xet store or any Git remote.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerPush(program: Command): void {
  program
    .command('push')
    .description('publish snapshots and handoffs (refs/xet/*) to a remote; create-once, with a publication id')
    .argument('[remote]', 'remote name or URL (default: the branch upstream remote, else origin)')
    .argument('[ids...]', 'publish only these snapshots and handoffs (a handoff brings its snapshot)')
    .action(
      run(async (out, remote: string | undefined, ids: string[]) => {
        const { pushXetRefs } = await import('../remote/publish');
        const r = await pushXetRefs({ cwd: process.cwd(), remote, only: ids });
        const fresh = r.refs.filter((x) => x.status === 'new').length;
        emit(out, r, () =>
          [
            ...r.resolved.map((p) => `earlier publication ${p.id}: ${p.state}`),
            `${fresh} ref(s) published to ${r.url} (publication ${r.publication}), ${
              r.refs.length - fresh
            } already there`,
          ].join('\n'),
        );
      }),
    );
}
