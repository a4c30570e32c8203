// The repository's own config entries taken from one `git config --list --show-origin`
// (GitConfig.entriesOf) against what `git config --local --get-regexp` prints, with the same
// pattern a capture records: global and command-line entries, included files, a worktree's own
// config, a linked worktree, keys repeated, subsections with capitals and dots, values with
// newlines, a repository whose config is reached through a symlink.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { readConfig } from '../src/git/config';
import { readLocalConfig } from '../src/git/plumbing';
import { CAPTURED_CONFIG_RE } from '../src/snapshot/recorded';
import { withSandbox } from './support/sandbox';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

async function same(cwd: string, commonDir: string, what: string, env: Record<string, string> = {}): Promise<number> {
  const opts = { cwd, env };
  const viaGit = await readLocalConfig(CAPTURED_CONFIG_RE, opts);
  const fromList = (await readConfig(opts)).entriesOf(path.join(commonDir, 'config'), new RegExp(CAPTURED_CONFIG_RE));
  assert.deepEqual(fromList, viaGit, what);
  return viaGit.length;
}

test("a capture's local config from the whole listing is what git config --local gives", () =>
  withSandbox(async (sb) => {
    const r = sb.path('repo');
    fs.mkdirSync(r);
    git(r, 'init', '-q', '-b', 'main');
    const gd = path.join(r, '.git');
    assert.equal(await same(r, gd, 'a new repository'), 1, 'core.filemode and friends: one of them recorded');

    git(r, 'config', 'remote.Origin.Url', 'https://example.com/a.git');
    git(r, 'config', '--add', 'remote.Origin.fetch', '+refs/heads/*:refs/remotes/Origin/*');
    git(r, 'config', '--add', 'remote.Origin.fetch', '+refs/tags/*:refs/tags/*');
    git(r, 'config', 'branch.feature/x.y.merge', 'refs/heads/feature/x.y');
    git(r, 'config', 'branch.main.description', 'line one\nline two');
    git(r, 'config', 'core.autocrlf', 'input');
    git(r, 'config', 'submodule.lib.url', '../lib');
    git(r, 'config', 'user.name', 'not recorded');
    // Elsewhere: the global file, the command line, an included file, the worktree's own file.
    const home = sb.path('cfg-home');
    fs.mkdirSync(home);
    fs.writeFileSync(path.join(home, '.gitconfig'), '[core]\n\tautocrlf = true\n[remote "g"]\n\turl = /global\n');
    const inc = sb.path('included.cfg');
    fs.writeFileSync(inc, '[remote "inc"]\n\turl = /included\n[core]\n\teol = crlf\n');
    git(r, 'config', 'include.path', inc);
    git(r, 'config', 'core.symlinks', 'true'); // after the include: file order is kept
    git(r, 'config', 'extensions.worktreeConfig', 'true');
    git(r, 'config', '--worktree', 'core.eol', 'lf');
    const env = {
      HOME: home,
      XDG_CONFIG_HOME: sb.path('xdg'),
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: 'remote.cmd.url',
      GIT_CONFIG_VALUE_0: '/command-line',
    };
    assert.ok((await same(r, gd, 'every kind of source', env)) >= 8);
    const list = await readConfig({ cwd: r, env });
    assert.equal(list.get('remote.g.url'), '/global', 'the listing holds the global entry');
    assert.equal(list.get('remote.inc.url'), '/included');
    assert.equal(list.get('remote.cmd.url'), '/command-line');

    // A linked worktree, from inside a subdirectory: the common config is the local one.
    fs.writeFileSync(path.join(r, 'f'), 'f\n');
    git(r, 'add', 'f');
    git(r, '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-qm', 'one');
    const wt = sb.path('wt');
    git(r, 'worktree', 'add', '-q', wt);
    fs.mkdirSync(path.join(wt, 'sub'));
    await same(path.join(wt, 'sub'), gd, 'a linked worktree', env);

    // The repository reached through a symlink: git may spell the path either way.
    const link = sb.path('link');
    fs.symlinkSync(r, link);
    await same(link, gd, 'through a symlink', env);

    // No local config file at all.
    fs.renameSync(path.join(gd, 'config'), path.join(gd, 'config.away'));
    const bare = sb.path('bare.git');
    git(sb.root, 'init', '-q', '--bare', bare);
    fs.rmSync(path.join(bare, 'config'));
    assert.deepEqual(
      (await readConfig({ cwd: bare, env: { GIT_DIR: bare } })).entriesOf(
        path.join(bare, 'config'),
        new RegExp(CAPTURED_CONFIG_RE),
      ),
      [],
    );
    fs.renameSync(path.join(gd, 'config.away'), path.join(gd, 'config'));
  }));
