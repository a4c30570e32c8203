// The daemon's memo of the repository's git config (one `git config --list` per change, not per
// request). Git reads config from a fixed set of files (system, global, the repository's, the
// worktree's) plus the command line (GIT_CONFIG_PARAMETERS/COUNT, the same for every request: the
// client's GIT_* environment must equal the daemon's). The answer is reused while each of those
// files is as it was (file-stamps.ts: inode, size, mtime, ctime, or still absent; and older than its
// margin when it was read). Not memoised: config with
// includes (their files and conditions are git's to follow), or read from a file not in the set
// (a system config elsewhere than /etc/gitconfig).

import * as os from 'node:os';
import * as path from 'node:path';
import { git } from '../git/exec';
import { CONFIG_LIST_ARGS, GitConfig, parseConfigList } from '../git/config';
import { repoOpts, type Repo } from '../git/repo';
import { nowNs, stampFiles } from './file-stamps';

function configFiles(repo: Repo, env: NodeJS.ProcessEnv = process.env): string[] {
  const files: string[] = [];
  const noSystem = env.GIT_CONFIG_NOSYSTEM;
  if (!noSystem || ['0', 'false', 'no', 'off'].includes(noSystem.toLowerCase())) {
    files.push(env.GIT_CONFIG_SYSTEM ?? '/etc/gitconfig');
  }
  const home = env.HOME ?? os.homedir();
  if (env.GIT_CONFIG_GLOBAL !== undefined) files.push(env.GIT_CONFIG_GLOBAL);
  else {
    files.push(path.join(env.XDG_CONFIG_HOME || path.join(home, '.config'), 'git', 'config'));
    files.push(path.join(home, '.gitconfig'));
  }
  files.push(path.join(repo.commonDir, 'config'), path.join(repo.gitDir, 'config.worktree'));
  return files.map((f) => path.resolve(f));
}

/** The config files' stamps, through symlinks (as git reads them); null when one cannot be taken. */
const stamp = (files: string[]) => stampFiles([], files);

/** A reader of the repository's config that asks git again only when a config file changed. */
export function configMemo(repo: Repo): () => Promise<GitConfig> {
  const files = configFiles(repo);
  let memo: { stamp: string; config: GitConfig } | undefined;
  return async () => {
    const startNs = nowNs();
    const before = stamp(files);
    if (before && memo?.stamp === before.key) return memo.config;
    const r = await git(CONFIG_LIST_ARGS, { ...repoOpts(repo), okCodes: [1] });
    const entries = parseConfigList(r.stdout);
    let memoable = true;
    for (const { key, origin = '' } of entries) {
      if (key.startsWith('include.') || key.startsWith('includeif.')) memoable = false;
      if (origin.startsWith('file:') && !files.includes(path.resolve(repo.worktree, origin.slice(5)))) memoable = false;
    }
    const config = new GitConfig(entries, repo.worktree);
    // A file that changed while git read it, or within the margin before (file-stamps.ts), is read
    // again next time.
    const kept = memoable && before !== null && before.settledAt(startNs) && stamp(files)?.key === before.key;
    memo = kept ? { stamp: before.key, config } : undefined;
    return config;
  };
}
