// Locating a repository: its worktree, git dir, common git dir (shared by linked worktrees) and
// object format. Every command starts here.

import * as path from 'node:path';
import { XetError } from '../errors';
import { callerRepoEnv, git, requireGitVersion } from './exec';

export interface Repo {
  /** Top of the working tree (absolute). */
  worktree: string;
  /** This worktree's git dir: `.git` or `.git/worktrees/<name>` (absolute). */
  gitDir: string;
  /** The common git dir shared by all linked worktrees (absolute). */
  commonDir: string;
  /** The directory holding objects (absolute). */
  objectsDir: string;
  objectFormat: 'sha1' | 'sha256';
}

/** The worktree's own index file and its object format (for reading it without git). */
export function indexRef(repo: Repo): { file: string; format: 'sha1' | 'sha256' } {
  return { file: path.join(repo.gitDir, 'index'), format: repo.objectFormat };
}

/** Options that make a git command act on exactly this repository, whatever the environment. */
export function repoOpts(repo: Repo): { cwd: string; env: Record<string, string> } {
  return { cwd: repo.worktree, env: { GIT_DIR: repo.gitDir, GIT_WORK_TREE: repo.worktree } };
}

/**
 * The repository at `cwd`. With `caller`, the user's GIT_DIR / GIT_WORK_TREE are honoured (the
 * repository the user means, as `git --git-dir=… xet` expects); without, only `cwd` decides (a
 * target directory must never resolve to the caller's repository).
 */
export async function findRepo(cwd: string, caller = false): Promise<Repo> {
  // Both gits at once; a git too old is refused before what its rev-parse said is looked at.
  const version = requireGitVersion();
  version.catch(() => undefined);
  let out: string;
  try {
    const r = await git(
      [
        'rev-parse',
        '--path-format=absolute',
        '--is-bare-repository',
        '--show-toplevel',
        '--git-dir',
        '--git-common-dir',
        '--show-object-format',
      ],
      { cwd, env: caller ? callerRepoEnv() : {} },
    );
    await version;
    out = r.stdout.toString('utf8');
  } catch (e) {
    await version;
    if (e instanceof XetError && /not a git repository/i.test(String(e.details.stderr))) {
      throw new XetError('NOT_A_REPOSITORY', `not a git repository: ${cwd}`, { cwd });
    }
    if (
      e instanceof XetError &&
      /must be run in a work tree|this operation must be run/i.test(String(e.details.stderr))
    ) {
      throw new XetError('BARE_REPOSITORY', `the repository at ${cwd} has no working tree`, { cwd });
    }
    throw e;
  }
  const lines = out.replace(/\n$/, '').split('\n');
  if (lines[0] === 'true') {
    throw new XetError('BARE_REPOSITORY', `the repository at ${cwd} has no working tree`, { cwd });
  }
  const [, worktree, gitDir, commonDir, fmt] = lines;
  const objectsDir = path.join(commonDir, 'objects');
  return {
    worktree,
    gitDir,
    commonDir,
    objectsDir,
    objectFormat: fmt === 'sha256' ? 'sha256' : 'sha1',
  };
}

/** Like findRepo but returns null outside a repository instead of throwing. */
export async function tryFindRepo(cwd: string, caller = false): Promise<Repo | null> {
  try {
    return await findRepo(cwd, caller);
  } catch (e) {
    if (e instanceof XetError && (e.code === 'NOT_A_REPOSITORY' || e.code === 'BARE_REPOSITORY')) return null;
    throw e;
  }
}

export function emptyTreeOid(format: 'sha1' | 'sha256'): string {
  return format === 'sha256'
    ? '6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321'
    : '4b825dc642cb6eb9a060e54bf8d69288fbee4904';
}
