// A fork's linked worktree: its admin dir under <common>/worktrees/ and the `.git` file that points
// at it, as `git worktree add --no-checkout --detach --lock --reason <why> <dir> <commit>` leaves
// them. Git 2.39's add writes five small files (locked, gitdir, commondir, HEAD, the .git file) and
// runs `git update-ref HEAD <commit>` in the new worktree, which writes HEAD and a reflog line.
// Those are written here directly (no process) when that is exactly what git would write; whenever
// something could make git write anything else (a name git would change, shared permissions,
// sparse checkout or per-worktree config copied, a reference-transaction hook that would run, a
// config include whose condition could depend on the new worktree, an identity or date git would
// compute on its own, a git version not checked), git itself does it. test/fork-worktree.test.ts
// holds the two to byte equality of the admin dir and to the same answers from git.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitVersion } from '../git/exec';
import type { GitConfig } from '../git/config';
import { identDate, plainIdent } from '../git/ident';
import { repoOpts, type Repo } from '../git/repo';

export interface ForkWorktree {
  /** The fork's working tree (exists, empty). */
  dir: string;
  /** Where the `.git` link goes: `<dir>/.git`, or an overlay fork's upper layer. */
  link: string;
  /** The commit HEAD is detached at. */
  commit: string;
  /** The reason `git worktree lock` shows. */
  reason: string;
}

/** Git versions whose `worktree add` was read and is held to these files by the tests. Newer ones
 * go through git (2.48 added relative worktree paths, for one). */
const CHECKED = { major: 2, minMinor: 38, maxMinor: 47 };

/** The reflog line `update-ref HEAD <commit>` appends in the new worktree, or a reason it cannot
 * be known without git. null line: git would not log (core.logAllRefUpdates=false). */
function reflogLine(
  config: GitConfig,
  zero: string,
  commit: string,
  env: NodeJS.ProcessEnv,
): { line: string | null } | string {
  const log = config.get('core.logallrefupdates');
  const on = log === undefined ? true : parseBool(log);
  if (on === false) return { line: null };
  if (on !== true && log?.toLowerCase() !== 'always') return `core.logAllRefUpdates=${log}`;
  const name = env.GIT_COMMITTER_NAME ?? config.get('committer.name') ?? config.get('user.name');
  const email = env.GIT_COMMITTER_EMAIL ?? config.get('committer.email') ?? config.get('user.email');
  if (!plainIdent(name) || !plainIdent(email)) return 'no plain committer identity in the environment or config';
  // Only now (where this process reads the zone as git would) and git's raw form are taken as
  // written; any other form is git's to parse.
  const when = identDate(env.GIT_COMMITTER_DATE, Date.now());
  if (when === null)
    return 'a committer date only git can write (GIT_COMMITTER_DATE not in raw form, or the zone of now)';
  return { line: `${zero} ${commit} ${name} <${email}> ${when}\n` };
}

function parseBool(v: string): boolean | undefined {
  const l = v.toLowerCase();
  if (['true', 'yes', 'on', ''].includes(l)) return true;
  if (['false', 'no', 'off'].includes(l)) return false;
  if (/^-?\d+$/.test(l)) return Number(l) !== 0;
  return undefined;
}

/** Why the admin files cannot be written directly (git must make the worktree), or the reflog line
 * to write (null: none). */
export function planDirectWorktree(repo: Repo, config: GitConfig, w: ForkWorktree): { line: string | null } | string {
  const [major, minor] = gitVersion();
  if (major !== CHECKED.major || minor < CHECKED.minMinor || minor > CHECKED.maxMinor) return `git ${major}.${minor}`;
  // git names the admin dir after the directory, made a valid ref component; only names it keeps.
  const name = path.basename(w.dir);
  if (!/^[A-Za-z0-9_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*$/.test(name) || name.endsWith('.lock')) {
    return `the name ${JSON.stringify(name)}`;
  }
  if (config.get('core.sharedrepository') !== undefined) return 'core.sharedRepository';
  if (config.getBool('core.sparsecheckout')) return 'sparse checkout (git copies its patterns)';
  if (config.getBool('extensions.worktreeconfig')) return 'extensions.worktreeConfig (git copies config.worktree)';
  if (config.keysMatching(/^includeif\./).length) return 'a conditional config include';
  if (config.get('core.hookspath') !== undefined) return 'core.hooksPath';
  if (fs.existsSync(path.join(repo.commonDir, 'hooks', 'reference-transaction'))) {
    return 'a reference-transaction hook (git runs it for the new HEAD)';
  }
  return reflogLine(config, '0'.repeat(w.commit.length), w.commit, process.env);
}

/** Make the fork's locked linked worktree, detached at `commit`; returns its admin dir (a real path).
 * Written directly when planDirectWorktree allows it, else by `git worktree add`. */
export async function addForkWorktree(repo: Repo, config: GitConfig, w: ForkWorktree): Promise<string> {
  const plan = planDirectWorktree(repo, config, w);
  if (typeof plan !== 'string') return writeWorktree(repo, w, plan.line);
  await git(
    ['worktree', 'add', '--no-checkout', '--detach', '--lock', '--reason', w.reason, w.dir, w.commit],
    repoOpts(repo),
  );
  const own = path.join(w.dir, '.git');
  const m = /^gitdir: (.*)$/m.exec(fs.readFileSync(own, 'utf8'));
  if (!m) throw new XetError('GIT_FAILED', `git worktree add wrote an unexpected ${own}`, { dir: w.dir });
  if (w.link !== own) {
    fs.copyFileSync(own, w.link);
    fs.rmSync(own);
  }
  return fs.realpathSync(path.resolve(w.dir, m[1]));
}

function writeWorktree(repo: Repo, w: ForkWorktree, reflog: string | null): string {
  const dir = fs.realpathSync(w.dir);
  // As git: refused when a registered worktree (missing, maybe locked) already claims the directory.
  const root = path.join(fs.realpathSync(repo.commonDir), 'worktrees');
  for (const other of safeReaddir(root)) {
    let claimed: string;
    try {
      claimed = fs.readFileSync(path.join(root, other, 'gitdir'), 'utf8').replace(/\n$/, '');
    } catch {
      continue;
    }
    if (path.resolve(claimed) === path.join(dir, '.git')) {
      throw new XetError(
        'TARGET_NOT_EMPTY',
        `${dir} is a missing but registered worktree (${path.join(root, other)}); run git worktree prune, or remove it`,
        { dir, worktree: other },
      );
    }
  }
  fs.mkdirSync(root, { recursive: true });
  // git's loop: the name, then name1, name2, … until mkdir succeeds.
  const name = path.basename(dir);
  let admin = path.join(root, name);
  for (let n = 1; ; n++) {
    try {
      fs.mkdirSync(admin);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      admin = path.join(root, `${name}${n}`);
    }
  }
  // Locked first, as git does, so a prune never takes a half-made worktree.
  fs.writeFileSync(path.join(admin, 'locked'), `${w.reason}\n`);
  fs.writeFileSync(path.join(admin, 'gitdir'), `${path.join(dir, '.git')}\n`);
  fs.writeFileSync(path.join(admin, 'commondir'), '../..\n');
  if (reflog !== null) {
    fs.mkdirSync(path.join(admin, 'logs'));
    fs.writeFileSync(path.join(admin, 'logs', 'HEAD'), reflog);
  }
  fs.writeFileSync(path.join(admin, 'HEAD'), `${w.commit}\n`);
  fs.writeFileSync(w.link, `gitdir: ${admin}\n`);
  return admin;
}

function safeReaddir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}
