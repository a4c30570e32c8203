// Working-tree states at the edges of what git allows, each round-tripped and verified.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { setRecordedSizes } from '../src/git/index-file';
import { Repo, initRepo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { capture, expectExit, parseJson, verify, xet } from './support/xet';

/** Capture, restore, verify; then git itself must see the same status and index in both.
 * `skip` drops status lines of paths the snapshot names as skipped. */
function roundTrip(sb: Sandbox, r: Repo, name: string, skip?: RegExp): string {
  const snap = capture(sb, r.dir);
  const copy = sb.path(name);
  expectExit(xet(sb, r.dir, ['restore', snap, copy]), 0);
  const v = verify(sb, r.dir, snap, copy);
  assert.equal(v.status, 0, v.stdout);
  const c = new Repo(sb, copy);
  for (const args of [
    ['status', '--porcelain=v2', '--untracked-files=all', '--ignored=matching'],
    ['ls-files', '-s', '-v', '-t'],
  ]) {
    const view = (repo: Repo) =>
      repo
        .git(...args)
        .split('\n')
        .filter((l) => !skip || !skip.test(l))
        .join('\n');
    assert.equal(view(c), view(r), `git ${args.join(' ')}`);
  }
  return copy;
}

test('tracked files inside a directory that holds its own .git are captured, untracked ones too', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'sub/a.txt': 'a\n', 'top.txt': 't\n' });
    new Repo(sb, r.p('sub')).git('init', '-q');
    r.write('sub/a.txt', 'changed\n');
    r.write('sub/untracked.txt', 'u\n');
    r.write('sub/.git/junk', 'x'); // inside the inner repository: never ours
    r.write('nested/x.txt', 'x\n');
    new Repo(sb, r.p('nested')).git('init', '-q'); // a real nested repository: captured as its own
    const copy = roundTrip(sb, r, 'copy');
    assert.equal(fs.readFileSync(`${copy}/sub/a.txt`, 'utf8'), 'changed\n');
    assert.ok(fs.existsSync(`${copy}/sub/untracked.txt`));
    assert.ok(!fs.existsSync(`${copy}/sub/.git`));
    assert.equal(fs.readFileSync(`${copy}/nested/x.txt`, 'utf8'), 'x\n');
    assert.ok(fs.statSync(`${copy}/nested/.git`).isDirectory());
  } finally {
    sb.cleanup();
  }
});

test('intent-to-add entries whose files are gone, replaced by a directory, or by a file in their place', () => {
  const cases: [string, (r: Repo) => void][] = [
    [
      'deleted with its directory',
      (r) => {
        r.write('dir/new.txt', 'x\n');
        r.git('add', '-N', 'dir/new.txt');
        r.rm('dir');
      },
    ],
    [
      'replaced by a directory',
      (r) => {
        r.write('x', 'n\n');
        r.git('add', '-N', 'x');
        r.rm('x');
        r.write('x/y', 'y\n');
      },
    ],
    [
      'its directory replaced by a file',
      (r) => {
        r.write('q/h', 'z\n');
        r.git('add', '-N', 'q/h');
        r.rm('q');
        r.write('q', 'file\n');
      },
    ],
  ];
  for (const [name, setup] of cases) {
    const sb = createSandbox();
    try {
      const r = initRepo(sb, 'src');
      r.commit('init', { 'a.txt': 'a\n' });
      setup(r);
      roundTrip(sb, r, 'copy');
    } catch (e) {
      throw new Error(`${name}: ${(e as Error).message}`, { cause: e });
    } finally {
      sb.cleanup();
    }
  }
});

test('tracked files whose directory became a file, and a tracked file that became a directory, after a capture', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a/b.txt': 'b\n', 'a/c/d.txt': 'd\n', 'f.txt': 'f\n' });
    capture(sb, r.dir);
    // git diff-files names a/b.txt and a/c/d.txt; their lstat meets a file where `a/` was (ENOTDIR).
    r.rm('a');
    r.write('a', 'now a file\n');
    r.rm('f.txt');
    r.write('f.txt/inside.txt', 'now a directory\n');
    const copy = roundTrip(sb, r, 'copy');
    assert.equal(fs.readFileSync(`${copy}/a`, 'utf8'), 'now a file\n');
    assert.equal(fs.readFileSync(`${copy}/f.txt/inside.txt`, 'utf8'), 'now a directory\n');
  } finally {
    sb.cleanup();
  }
});

test('index entries whose recorded size is not the file size come back with that size, and no others', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    const files = { 'same.txt': 'same\n', 'grown.txt': 'g\n', 'assumed.txt': 'a\n', 'skip.txt': 's\n' };
    r.commit('init', { ...files, 'gone.txt': 'x\n', 'dir.txt': 'd\n' });
    r.symlink('abc', 'link');
    r.git('add', 'link');
    r.git('update-index', '--add', '--cacheinfo', `160000,${r.git('rev-parse', 'HEAD').trim()},mod`);
    r.git('update-index', '--assume-unchanged', 'assumed.txt');
    r.git('update-index', '--skip-worktree', 'skip.txt');
    // The same bytes under a recorded size that is not theirs (git lists the file, reads nothing).
    setRecordedSizes(r.gitPath('index'), new Map([['same.txt', 99]]), 'sha1');
    for (const f of ['grown.txt', 'assumed.txt', 'skip.txt']) fs.appendFileSync(r.p(f), 'more\n');
    r.rm('gone.txt');
    r.rm('dir.txt');
    r.write('dir.txt/inside', 'i\n');
    r.rm('link');
    r.symlink('abcdef', 'link');
    const listed = r.git('diff-files', '--name-only');
    assert.equal(listed, ['dir.txt', 'gone.txt', 'grown.txt', 'link', 'mod', 'same.txt', ''].join('\n'));
    const snap = capture(sb, r.dir);
    const m = JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`));
    assert.deepEqual(m.index.staleSizes, [
      { path: 'grown.txt', size: 2 },
      { path: 'link', size: 3 },
      { path: 'same.txt', size: 99 },
    ]);
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snap, copy]), 0);
    assert.equal(new Repo(sb, copy).git('diff-files', '--name-only'), listed);

    // Names whose UTF-16 order is not their byte order (a surrogate pair against U+FFFD).
    const odd = initRepo(sb, 'odd');
    odd.commit('init', { 'x\u{1F642}.txt': '1\n', 'x\uFFFD.txt': '2\n', 'y.txt': '3\n' });
    for (const f of ['x\u{1F642}.txt', 'x\uFFFD.txt']) fs.appendFileSync(odd.p(f), 'more\n');
    const oddSnap = capture(sb, odd.dir);
    assert.deepEqual(JSON.parse(odd.git('cat-file', 'blob', `${oddSnap}:manifest.json`)).index.staleSizes, [
      { path: 'x\u{1F642}.txt', size: 2 },
      { path: 'x\uFFFD.txt', size: 2 },
    ]);
  } finally {
    sb.cleanup();
  }
});

test('a command left waiting on work that can never finish exits INTERNAL, never 0', () => {
  // The shape of a lost event (a reader waiting for an end that never comes): nothing keeps node's
  // loop alive, and node would exit with 0 as if the command had succeeded, its output unwritten.
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'r');
    r.commit('c1', { 'a.txt': 'a\n' });
    r.write('b.txt', 'b\n');
    const env = { GIT_XET_TEST_STALL_AT: 'capture:before-ref', GIT_XET_NO_DAEMON: '1' };
    const res = xet(sb, r.dir, ['capture', '--json'], { env });
    expectExit(res, 70);
    assert.equal(parseJson(res).error.code, 'INTERNAL');
    assert.equal(r.git('for-each-ref', 'refs/xet/snapshots/'), '', 'no snapshot was published');
    const human = xet(sb, r.dir, ['capture'], { env });
    expectExit(human, 70);
    assert.match(human.stderr, /waiting on work that could not finish/);
    // Without the stall the same capture succeeds.
    capture(sb, r.dir);
  } finally {
    sb.cleanup();
  }
});
