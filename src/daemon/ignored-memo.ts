// The daemon's memo of git's listing of its worktree's untracked ignored paths
// (`git ls-files -o -i --exclude-standard --directory`): the last git process in the busiest stretch
// of a re-capture, ~10 ms of CPU beside the lstat of every path. What that listing depends on, and
// what stands for each while the listing is reused:
// - the names in the directories git reads: the tree watch (tree-watch.ts `quiet`) vouches that no
//   directory the last walk read has changed its listing since the listing was taken, after a walk
//   that entered every directory git reads (not one under `--ignored none`: review 42);
// - the ignore files: every `.gitignore` those directories list (as git opens them: not through a
//   symlink), info/exclude and the excludes file of the config (core.excludesFile, else git's
//   default; through a symlink, as git follows it: review 42), each as it was (inode, size, mode,
//   mtime, ctime; or still absent), and all older than the margin when the listing was taken
//   (file-stamps.ts: an edit in the same tick of the kernel's coarse clock as a read would keep its
//   times); a stamp that fails otherwise (a path through a file) keeps nothing;
// - the index (which paths are tracked): the same file, by its trailing hash (fsutil indexFileKey);
// - the config (core.excludesFile, core.ignoreCase): the same object from the config memo
//   (config-memo.ts gives a new one whenever a config file changed).
// Anything else (no watch, a listing changed, a reset, no index hash) asks git, as the CLI does
// (docs/DESIGN-NOTES.md "Fewer git processes in a daemon's re-capture").

import * as os from 'node:os';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import { gitZ, type GitOptions } from '../git/exec';
import type { Repo } from '../git/repo';
import { indexFileKey } from '../snapshot/fsutil';
import { IGNORED_LISTING_ARGS } from '../snapshot/walk';
import type { TreeWatch } from './tree-watch';
import { nowNs, stampFiles } from './file-stamps';

export { IGNORED_LISTING_ARGS };

/** The per-user excludes file git reads, run in `cwd`: core.excludesFile (`~/` expanded), else
 * $XDG_CONFIG_HOME/git/ignore or ~/.config/git/ignore; null for a `~user/` or `%(prefix)/` form
 * (not followed: such a listing is not kept). */
export function excludesFile(config: GitConfig, cwd: string, env: NodeJS.ProcessEnv = process.env): string | null {
  const home = env.HOME ?? os.homedir();
  const set = config.get('core.excludesfile');
  if (set === undefined) return path.join(env.XDG_CONFIG_HOME || path.join(home, '.config'), 'git', 'ignore');
  if (set.startsWith('~/')) return path.join(home, set.slice(2));
  return set.startsWith('~') || set.startsWith('%(') ? null : path.resolve(cwd, set);
}

/** A reader of git's ignored listing for the daemon's own worktree that asks git only when something
 * it depends on may have changed. */
export function ignoredListingMemo(
  repo: Repo,
  watch: TreeWatch,
  list: (opts: GitOptions) => Promise<string[]> = (opts) => gitZ(IGNORED_LISTING_ARGS, opts),
): (config: GitConfig, opts: GitOptions) => Promise<string[]> {
  const indexFile = path.join(repo.gitDir, 'index');
  let memo: { token: number; config: GitConfig; index: string; stamp: string; listing: string[] } | undefined;
  return async (config, opts) => {
    if (process.env.GIT_INDEX_FILE !== undefined) return list(opts);
    const startNs = nowNs();
    const quiet = watch.quiet();
    const excludes = excludesFile(config, repo.worktree);
    if (!quiet || excludes === null) {
      memo = undefined;
      return list(opts);
    }
    const inTree = quiet.gitignores.map((g) => path.join(repo.worktree, g));
    const followed = [
      path.join(repo.commonDir, 'info', 'exclude'),
      path.join(repo.gitDir, 'info', 'exclude'),
      excludes,
    ];
    const before = stampFiles(inTree, followed);
    if (!before) {
      memo = undefined;
      return list(opts);
    }
    const index = indexFileKey(indexFile);
    if (
      memo &&
      index !== null &&
      memo.config === config &&
      memo.index === index &&
      memo.stamp === before.key &&
      watch.quietSince(memo.token)
    ) {
      return memo.listing.slice();
    }
    const listing = await list(opts);
    const kept =
      index !== null &&
      before.settledAt(startNs) &&
      stampFiles(inTree, followed)?.key === before.key &&
      indexFileKey(indexFile) === index &&
      watch.quietSince(quiet.token);
    memo = kept ? { token: quiet.token, config, index, stamp: before.key, listing: listing.slice() } : undefined;
    return listing;
  };
}
