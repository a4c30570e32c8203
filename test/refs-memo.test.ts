// The daemon's memo of the ref listing (src/daemon/refs-memo.ts) against the real git: after every
// kind of ref change git makes (and a loose ref rewritten in place by hand) its answer is git's
// listing of that moment, git is asked again only when something changed, and a listing taken
// within the clock's margin of a change is never kept.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { refListingMemo } from '../src/daemon/refs-memo';
import { listRefs } from '../src/git/plumbing';
import { configMemo } from '../src/daemon/config-memo';
import { findRepo } from '../src/git/repo';
import { CAPTURED_REF_PATTERNS } from '../src/snapshot/recorded';

const PATTERNS = [...CAPTURED_REF_PATTERNS, 'refs/stash'];
const ID = ['-c', 'user.email=a@b', '-c', 'user.name=a'];

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', [...ID, ...args], { cwd, encoding: 'utf8' }).trim();
}
const settle = () => new Promise((r) => setTimeout(r, 150));

test('the ref listing memo answers as git does after every kind of ref change, and asks git only then', async (t) => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-refsmemo-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  git(d, 'init', '-q', '-b', 'main');
  git(d, 'commit', '-q', '--allow-empty', '-m', 'one');
  let asked = 0;
  const memo = refListingMemo(path.join(d, '.git'), configMemo(await findRepo(d)), (p, o) => {
    asked++;
    return listRefs(p, o);
  });
  const opts = { cwd: d };
  const check = async (what: string): Promise<void> => {
    const truth = await listRefs(PATTERNS, opts);
    // A change: git is asked at once.
    const n = asked;
    assert.deepEqual(await memo(PATTERNS, opts), truth, what);
    assert.equal(asked, n + 1, `${what}: asked at once after the change`);
    // Once everything is older than the margin, what git says is kept (the call above may have been
    // within it: asked once more at most).
    await settle();
    assert.deepEqual(await memo(PATTERNS, opts), truth, what);
    const m = asked;
    assert.ok(m <= n + 2, `${what}: asked ${m - n} times`);
    assert.deepEqual(await memo(PATTERNS, opts), truth, what);
    assert.deepEqual(await memo(PATTERNS, opts), truth, what);
    assert.equal(asked, m, `${what}: kept once older than the margin`);
  };
  await check('a first branch');
  git(d, 'commit', '-q', '--allow-empty', '-m', 'two');
  await check('a commit');
  git(d, 'tag', '-a', '-m', 'a tag', 'v1');
  await check('an annotated tag');
  git(d, 'branch', 'feature/deep/er');
  await check('a branch in new directories');
  git(d, 'update-ref', 'refs/remotes/origin/main', 'HEAD~1');
  git(d, 'symbolic-ref', 'refs/remotes/origin/HEAD', 'refs/remotes/origin/main');
  await check('a remote branch and its symbolic HEAD');
  git(d, 'pack-refs', '--all', '--prune');
  await check('refs packed');
  git(d, 'update-ref', 'refs/remotes/origin/main', 'HEAD');
  await check('a packed ref updated (the loose file is back)');
  git(d, 'update-ref', '-d', 'refs/remotes/origin/main');
  await check('a packed ref deleted, the symbolic ref left dangling');
  git(d, 'update-ref', 'refs/remotes/origin/main', 'HEAD');
  git(d, 'pack-refs', '--all', '--prune');
  git(d, 'notes', 'add', '-m', 'a note');
  await check('a note');
  fs.writeFileSync(path.join(d, 'f'), 'x');
  git(d, 'add', 'f');
  git(d, 'stash', '-q');
  await check('a stash');
  // A loose ref rewritten in place by hand (same size, its old mtime put back: ctime still moves).
  git(d, 'branch', 'by-hand');
  await settle();
  await memo(PATTERNS, opts);
  const file = path.join(d, '.git', 'refs', 'heads', 'by-hand');
  const { atime, mtime } = fs.statSync(file);
  fs.writeFileSync(file, `${git(d, 'rev-parse', 'HEAD~1')}\n`);
  fs.utimesSync(file, atime, mtime);
  await check('a loose ref rewritten in place');
  // What a replacement changes is an object's type as listed: refs/replace is stamped too.
  const blob = git(d, 'hash-object', '-w', '--stdin');
  git(d, 'tag', 'plain', 'HEAD');
  await settle();
  await memo(PATTERNS, opts);
  git(d, 'replace', '-f', git(d, 'rev-parse', 'HEAD~1'), blob);
  await check('a replace ref');
  // Whether a type follows the replacement is config (core.useReplaceRefs): a config change alone
  // (no ref file changed: asked once, once the config is read and kept).
  for (const [what, args] of [
    ['replacements turned off', ['config', 'core.useReplaceRefs', 'false']],
    ['and on again', ['config', '--unset', 'core.useReplaceRefs']],
  ] as const) {
    git(d, ...args);
    await settle(); // the config memo's own margin (file-stamps.ts)
    const n = asked;
    assert.deepEqual(await memo(PATTERNS, opts), await listRefs(PATTERNS, opts), what);
    assert.deepEqual(await memo(PATTERNS, opts), await listRefs(PATTERNS, opts), what);
    assert.equal(asked, n + 1, `${what}: asked once`);
  }
  // A stamped time within the margin (here, ahead of the clock): nothing is kept while it is.
  {
    const head = path.join(d, '.git', 'refs', 'heads', 'by-hand');
    const ahead = new Date(Date.now() + 20_000);
    fs.utimesSync(head, ahead, ahead);
    const n = asked;
    for (let i = 0; i < 3; i++) assert.deepEqual(await memo(PATTERNS, opts), await listRefs(PATTERNS, opts));
    assert.equal(asked, n + 3, 'a listing taken within the margin is never kept');
    fs.utimesSync(head, new Date(Date.now() - 5000), new Date(Date.now() - 5000));
    await settle();
  }
  // A symbolic ref to a ref outside the listed namespaces: never kept.
  git(d, 'update-ref', 'refs/other/x', 'HEAD');
  git(d, 'symbolic-ref', 'refs/heads/elsewhere', 'refs/other/x');
  await settle();
  const n = asked;
  await memo(PATTERNS, opts);
  await memo(PATTERNS, opts);
  assert.equal(asked, n + 2, 'a symbolic ref out of the stamped namespaces: asked every time');
});
