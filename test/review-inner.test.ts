// Regressions from a review of inner repositories: a "repository" inside the tree that is the outer
// repository itself (a `.git` file naming its git dir, a linked worktree of it) is not an inner
// repository; an overlay fork's `changes` treats a nested repository the way a copy fork's does.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { Repo, initRepo } from './support/git';
import { withMountSandbox } from './support/mounts';
import { createSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, restore, showManifest, xet } from './support/xet';

const notRoot = process.getuid?.() === 0 ? false : 'overlay forks need root for mounts';

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

test(
  'overlay changes reports a nested repository made in the fork as a copy fork does, and discard keeps it',
  { skip: notRoot },
  () =>
    withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('init', { 'a.txt': 'a\n', 'base/b.txt': 'b\n' });
      const snap = capture(sb, src.dir);
      const report = (mode: string) => {
        const f = sb.path(`fork-${mode}`);
        expectExit(xet(sb, src.dir, ['fork', snap, f, '--mode', mode, '--json']), 0);
        const lib = new Repo(sb, path.join(f, 'lib'));
        fs.mkdirSync(lib.dir);
        lib.git('init', '-q');
        lib.git('commit', '-q', '--allow-empty', '-m', 'x');
        // A `git init` inside a directory of the base: only that .git is not the fork's.
        new Repo(sb, path.join(f, 'base')).git('init', '-q');
        const r = xet(sb, src.dir, ['changes', f, '--json']);
        expectExit(r, 0);
        const c = parseJson(r);
        return {
          f,
          lib,
          got: {
            added: c.added,
            modified: c.modified,
            deleted: c.deleted,
            addedEmptyDirs: c.addedEmptyDirs,
            removedEmptyDirs: c.removedEmptyDirs,
            repositories: c.repositories,
            skipped: c.skipped,
          },
        };
      };
      const copy = report('copy');
      const overlay = report('overlay');
      assert.deepEqual(copy.got.repositories, ['lib']);
      assert.deepEqual(copy.got.added, []);
      assert.deepEqual(overlay.got, copy.got);

      // Discard of the overlay fork still captures the nested repository (and the stray base/.git
      // makes it refuse first, as a copy fork's capture would).
      expectError(xet(sb, src.dir, ['discard', overlay.f, '--json']), 'WORK_NOT_KEPT');
      fs.rmSync(path.join(overlay.f, 'base', '.git'), { recursive: true });
      const head = overlay.lib.git('rev-parse', 'HEAD').trim();
      const d = xet(sb, src.dir, ['discard', overlay.f, '--json']);
      expectExit(d, 0);
      const kept = parseJson(d).snapshot as string;
      assert.match(kept ?? '', /^[0-9a-f]{40}$/, `the fork was dirty: ${d.stdout}`);
      assert.deepEqual(
        (showManifest(sb, src.dir, kept).repositories ?? []).map((r: { path: string }) => r.path),
        ['lib'],
      );
      const back = sb.path('back');
      restore(sb, src.dir, kept, back);
      assert.equal(new Repo(sb, path.join(back, 'lib')).git('rev-parse', 'HEAD').trim(), head);
    }),
);
