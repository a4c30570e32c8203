// Shared by the fork and reclaim suites: a rich source repository, the fork/forks CLI calls, and the
// per-worktree state a fork must share with its source.
import { buildRichFixture } from './fixtures';
import { initRepo, type Repo } from './git';
import type { Sandbox } from './sandbox';
import { expectExit, parseJson, xet } from './xet';

/** Per-worktree state that must be identical between a source and a fork of its snapshot. */
export const FORK_STATE = {
  status: { args: ['status', '--porcelain=v2', '--untracked-files=all', '--ignored=matching'], sortLines: true },
  diff: { args: ['diff', '--binary', '--full-index'] },
  'diff --cached': { args: ['diff', '--cached', '--binary', '--full-index'] },
  'ls-files -s -v -t': { args: ['ls-files', '-s', '-v', '-t'] },
  'rev-parse HEAD': { args: ['rev-parse', '-q', '--verify', 'HEAD'], okExit: [0, 1] },
};

export function richSource(sb: Sandbox, at = 'src'): Repo {
  const r = initRepo(sb, at);
  buildRichFixture(r);
  return r;
}

/** `git xet fork … --json`, asserted to succeed. */
export function fork(sb: Sandbox, cwd: string, snapshot: string, dir: string, extra: string[] = [], wrap?: string[]) {
  const r = xet(sb, cwd, ['fork', snapshot, dir, ...extra, '--json'], { wrap });
  expectExit(r, 0);
  return parseJson(r);
}

/** `git xet forks --json` rows. */
export function forks(sb: Sandbox, cwd: string, all = false) {
  const r = xet(sb, cwd, ['forks', ...(all ? ['--all'] : []), '--json']);
  expectExit(r, 0);
  return parseJson(r).forks as {
    id: string;
    dir: string;
    mode: string;
    state: string;
    bytes: number | null;
    keptSnapshot: string;
  }[];
}
