// Where git runs a repository's hooks from: what a push done in-process (src/remote/publish.ts) and
// a line the daemon runs for a client (spec.relayable, through install.ts runsUserHook) must know
// before they skip `git push` or run git in another process's environment.
import * as os from 'node:os';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import type { Repo } from '../git/repo';

/** The line git xet's own hook wrappers (install.ts) carry after their guard block. */
export const WRAPPER_MARK = '# git xet hook wrapper:';

/**
 * The directory git runs this repository's hooks from: core.hooksPath read as git reads a path
 * (`~` and `~/…` in the home directory, a relative path from the top of the worktree), else the
 * common git directory's hooks/. Null when git would expand it in a way this does not (`~user/…`,
 * `%(prefix)/…`): the caller then assumes a hook may run.
 */
export function hooksDirectory(repo: Repo, config: GitConfig): string | null {
  const hooks = config.get('core.hooksPath');
  if (!hooks) return path.join(repo.commonDir, 'hooks');
  if (hooks === '~' || hooks.startsWith('~/')) return path.join(os.homedir(), hooks.slice(1));
  if (hooks.startsWith('~') || hooks.startsWith('%(')) return null;
  return path.resolve(repo.worktree, hooks);
}
