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
import { CAPTURED_CONFIG, CAPTURED_CONFIG_RE } from '../src/snapshot/recorded';
import { withSandbox } from './support/sandbox';
import { initRepo } from './support/git';
import { capture, expectExit, parseJson, verify, xet } from './support/xet';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}

async function same(cwd: string, commonDir: string, what: string, env: Record<string, string> = {}): Promise<number> {
  const opts = { cwd, env };
  const viaGit = await readLocalConfig(CAPTURED_CONFIG_RE, opts);
  const fromList = (await readConfig(opts)).localEntries(path.join(commonDir, 'config'), CAPTURED_CONFIG);
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

    // The same file read a second time as the global one: its entries count once, as --local's.
    await same(r, gd, 'the local file as the global one too', { ...env, GIT_CONFIG_GLOBAL: path.join(gd, 'config') });
    // GIT_CONFIG (read by `git config` alone, which then refuses --local): not followed.
    process.env.GIT_CONFIG = path.join(home, '.gitconfig');
    try {
      await same(r, gd, 'GIT_CONFIG set', env);
    } finally {
      delete process.env.GIT_CONFIG;
    }
    // A key without a value is git's true (an empty value is false), both ways.
    fs.appendFileSync(path.join(gd, 'config'), '[core]\n\tsafecrlf\n');
    await same(r, gd, 'a key without a value', env);
    const local = (await readConfig({ cwd: r, env })).localEntries(path.join(gd, 'config'), CAPTURED_CONFIG);
    assert.deepEqual(
      local?.filter((e) => e.key === 'core.safecrlf'),
      [{ key: 'core.safecrlf', value: 'true' }],
    );
    // A branch whose name holds a line separator: matched as git matches it.
    git(r, 'config', 'branch.a\u2028b.remote', 'origin');
    assert.ok(
      local !== null &&
        (await readConfig({ cwd: r, env }))
          .localEntries(path.join(gd, 'config'), CAPTURED_CONFIG)
          ?.some((e) => e.key === 'branch.a\u2028b.remote'),
    );
    await same(r, gd, 'a line separator in a branch name', env);

    // No local config file at all.
    fs.renameSync(path.join(gd, 'config'), path.join(gd, 'config.away'));
    const bare = sb.path('bare.git');
    git(sb.root, 'init', '-q', '--bare', bare);
    fs.rmSync(path.join(bare, 'config'));
    assert.deepEqual(
      (await readConfig({ cwd: bare, env: { GIT_DIR: bare } })).localEntries(
        path.join(bare, 'config'),
        CAPTURED_CONFIG,
      ),
      [],
    );
    fs.renameSync(path.join(gd, 'config.away'), path.join(gd, 'config'));
  }));

test('what the capture records of the local config restores and verifies: a description ending in a newline, a key without a value, a branch named with a line separator', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('one', { 'a.txt': 'a\n' });
    r.git('remote', 'add', 'origin', 'https://example.com/x.git');
    // As `git branch --edit-description` stores it: the text and its newline.
    r.git('config', 'branch.main.description', 'what main is for\nsecond line\n');
    r.git('branch', 'a\u2028b');
    r.git('config', 'branch.a\u2028b.remote', 'origin');
    r.git('config', 'branch.a\u2028b.merge', 'refs/heads/a\u2028b');
    fs.appendFileSync(path.join(r.dir, '.git', 'config'), '[core]\n\tsafecrlf\n');
    const snap = capture(sb, r.dir);
    const manifest = JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`));
    const recorded = manifest.config as { key: string; value: string }[];
    assert.deepEqual(
      recorded.filter((c) => c.key.startsWith('branch.a')).map((c) => c.key),
      ['branch.a\u2028b.remote', 'branch.a\u2028b.merge'],
    );
    assert.ok(recorded.some((c) => c.key === 'core.safecrlf' && c.value === 'true'));
    const target = sb.path('restored');
    expectExit(xet(sb, r.dir, ['restore', snap, target, '--json']), 0);
    const v = verify(sb, r.dir, snap, target);
    expectExit(v, 0);
    assert.equal(parseJson(v).ok, true);
    const there = (key: string) => execFileSync('git', ['config', '--get', key], { cwd: target, encoding: 'utf8' });
    assert.equal(there('branch.main.description'), 'what main is for\nsecond line\n\n');
    assert.equal(there('branch.a\u2028b.merge'), 'refs/heads/a\u2028b\n');
    assert.equal(
      execFileSync('git', ['config', '--bool', 'core.safecrlf'], { cwd: target, encoding: 'utf8' }),
      'true\n',
    );
  }));
