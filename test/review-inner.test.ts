// Regressions from a review of inner repositories: a "repository" inside the tree that is the outer
// repository itself (a `.git` file naming its git dir, a linked worktree of it) is not an inner
// repository.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { Repo, initRepo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, restore, showManifest, xet } from './support/xet';

function captureJson(sb: Sandbox, cwd: string, timeoutMs?: number) {
  const r = xet(sb, cwd, ['capture', '--json'], { timeoutMs });
  expectExit(r, 0);
  return parseJson(r) as {
    snapshot: string;
    skipped: { path: string; reason: string }[];
    repositories: { path: string }[];
  };
}

test('a .git file naming the repository’s own git dir is skipped at once, not captured (no false BUSY)', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    fs.mkdirSync(src.p('sub'));
    fs.writeFileSync(src.p('sub/.git'), `gitdir: ${path.join(src.dir, '.git')}\n`);
    fs.writeFileSync(src.p('sub/s'), 's\n');
    const t0 = Date.now();
    // Before the fix the inner capture queued 30 s on the outer capture's own lock, then said BUSY.
    const out = captureJson(sb, src.dir, 20_000);
    assert.ok(Date.now() - t0 < 15_000, `capture took ${Date.now() - t0} ms`);
    assert.deepEqual(out.skipped, [{ path: 'sub', reason: 'nested-repository' }]);
    assert.deepEqual(out.repositories, []);
    assert.deepEqual(showManifest(sb, src.dir, out.snapshot).skipped, [{ path: 'sub', reason: 'nested-repository' }]);
  } finally {
    sb.cleanup();
  }
});

test('a linked worktree of the repository inside its tree is named in skipped, not captured as a nested repository', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    src.git('worktree', 'add', '-q', '.worktrees/feat', '-b', 'feat');
    fs.writeFileSync(src.p('.worktrees/feat/wip.txt'), 'wip\n');
    const out = captureJson(sb, src.dir);
    assert.deepEqual(out.skipped, [{ path: '.worktrees/feat', reason: 'nested-repository' }]);
    assert.deepEqual(out.repositories, []);
    const m = showManifest(sb, src.dir, out.snapshot);
    assert.deepEqual(m.repositories ?? [], []);
    // The copy holds no independent repository with a copy of the refs where the worktree was.
    const copy = sb.path('copy');
    restore(sb, src.dir, out.snapshot, copy);
    assert.equal(fs.existsSync(path.join(copy, '.worktrees', 'feat', '.git')), false);
    assert.equal(fs.existsSync(path.join(copy, '.worktrees', 'feat', 'wip.txt')), false);
    // The source keeps both worktrees.
    assert.equal(src.git('worktree', 'list', '--porcelain').match(/^worktree /gm)?.length, 2);
  } finally {
    sb.cleanup();
  }
});

test('discard refuses (WORK_NOT_KEPT) to delete a fork holding a linked worktree of the repository', () => {
  const sb = createSandbox();
  try {
    const src = initRepo(sb, 'src');
    src.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, src.dir);
    const f = sb.path('fork');
    expectExit(xet(sb, src.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 0);
    const fr = new Repo(sb, f);
    fr.git('worktree', 'add', '-q', '.worktrees/feat', '-b', 'feat');
    fs.writeFileSync(path.join(f, '.worktrees', 'feat', 'wip.txt'), 'precious\n');
    const err = expectError(xet(sb, src.dir, ['discard', f, '--json']), 'WORK_NOT_KEPT');
    assert.deepEqual(err.details.paths, ['.worktrees/feat']);
    assert.equal(fs.readFileSync(path.join(f, '.worktrees', 'feat', 'wip.txt'), 'utf8'), 'precious\n');
  } finally {
    sb.cleanup();
  }
});
