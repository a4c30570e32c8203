// git xet fetch: bring refs/xet/* (snapshots, handoffs) from a remote, and set up its refspec.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

export function registerFetch(program: Command): void {
  program
    .command('fetch')
    .description('fetch snapshots and handoffs (refs/xet/*) from a remote; never overwrites a local one')
    .argument('[remote]', 'remote name or URL (default: the branch upstream remote, else origin)')
    .action(
      run(async (out, remote: string | undefined) => {
        const { fetchXetRefs } = await import('../remote/publish');
        const r = await fetchXetRefs({ cwd: process.cwd(), remote });
        emit(out, r, () => `${r.fetched.length} new ref(s) from ${r.url}`);
      }),
    );
}
