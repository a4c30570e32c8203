// Forks end to end: kernel overlayfs, reflink clones on a loop-mounted XFS image, plain copies, and
// the real git in each fork. Runs as root (CI does); fixtures live on tmpfs.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildIgnoredFixture, treeFingerprint } from '../support/fixtures';
import { git, gitTry, initRepo, type Repo } from '../support/git';
import { mountTmpfs, mountXfs, mountsUnder, withMountSandbox, xfsUnavailable } from '../support/mounts';
import { killAt, type FaultPoint } from '../support/faults';
import type { Sandbox } from '../support/sandbox';
import { collectGitState, compareGitStates, compareTrees, walkTree } from '../support/state';
import { capture, expectError, expectExit, parseJson, restore, verify, xet, XET_BIN } from '../support/xet';
import { FORK_STATE, fork, forks, richSource } from '../support/forks';

const NO_MOUNT = ['setpriv', '--inh-caps=-sys_admin', '--bounding-set=-sys_admin'];
const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'forks need root for mounts (CI runs as root)';
const xfsWhy = xfsUnavailable();
if (xfsWhy && process.env.CI) throw new Error(`CI must run the reflink tests: ${xfsWhy}`);
if (!isRoot) process.stderr.write(`# skipping fork tests: ${rootOnly}\n`);
else if (xfsWhy) process.stderr.write(`# skipping reflink tests: ${xfsWhy}\n`);

function changes(sb: Sandbox, cwd: string, dir: string) {
  const r = xet(sb, cwd, ['changes', dir, '--json']);
  expectExit(r, 0);
  return parseJson(r) as {
    added: string[];
    modified: string[];
    deleted: string[];
    addedEmptyDirs: string[];
    removedEmptyDirs: string[];
    method: string;
  };
}

function assertSameWorktreeState(sb: Sandbox, source: string, copy: string): void {
  const diffs = [
    ...compareTrees(walkTree(source), walkTree(copy)),
    ...compareGitStates(collectGitState(sb, source, FORK_STATE), collectGitState(sb, copy, FORK_STATE)),
  ];
  assert.deepEqual(diffs, [], `fork differs from its source:\n${diffs.join('\n')}`);
}

function assertVerifiesAsFork(sb: Sandbox, cwd: string, snapshot: string, dir: string): void {
  const r = verify(sb, cwd, snapshot, dir);
  expectExit(r, 0);
  assert.equal(parseJson(r).scope, 'fork');
}

/** Of the given index entries, those with no stat data recorded (git would have to hash them). */
function entriesWithoutStat(sb: Sandbox, dir: string, paths: string[]): string[] {
  const out = git(sb, dir, ['ls-files', '--debug', '--', ...paths]);
  const missing: string[] = [];
  let current = '';
  for (const line of out.split('\n')) {
    if (!line.startsWith(' ')) current = line;
    else if (/^\s+mtime: 0:0/.test(line)) missing.push(current);
  }
  assert.equal(out.split('\n').filter((l) => l && !l.startsWith(' ')).length, paths.length, out);
  return missing;
}

/** A repository of 8,000 small files: big enough that a fork or discard can be killed half way. */
function manyFilesSource(sb: Sandbox): Repo {
  const src = initRepo(sb, 'src');
  const files: Record<string, string> = {};
  for (let i = 0; i < 8000; i++) files[`d${i % 40}/f${i}.txt`] = `${i}\n`;
  src.commit('many', files);
  return src;
}

test('an overlay fork is a working git worktree in exactly the snapshot state', { skip: rootOnly }, async () => {
  await withMountSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const headBefore = src.git('rev-parse', 'HEAD').trim();
    const out = fork(sb, src.dir, snap, sb.path('f1'));
    assert.equal(out.mode, 'overlay');
    assert.equal(out.dir, sb.path('f1'));
    assert.deepEqual(out.notAvailable, {});
    assert.equal(out.head, headBefore);
    assert.equal(out.branch, 'refs/heads/main');
    assert.ok(mountsUnder(sb.path('f1')).length === 1, 'the fork is a mount point');
    assertVerifiesAsFork(sb, src.dir, snap, sb.path('f1'));
    assertSameWorktreeState(sb, src.dir, sb.path('f1'));
    // The index came with stat data: entries whose file matches the staged blob are not hashed again.
    const f = sb.path('f1');
    assert.deepEqual(entriesWithoutStat(sb, f, ['b.txt', '.gitignore']), []);
    assert.equal(gitTry(sb, f, ['symbolic-ref', '-q', 'HEAD']).status, 1, 'HEAD is detached');
    // Git works inside: stage, commit; the source branch does not move.
    fs.writeFileSync(path.join(f, 'from-fork.txt'), 'fork\n');
    git(sb, f, ['add', 'from-fork.txt', 'a.txt']);
    git(sb, f, ['commit', '-q', '-m', 'in fork']);
    assert.match(git(sb, f, ['log', '-1', '--format=%s']), /in fork/);
    assert.equal(src.git('rev-parse', 'HEAD').trim(), headBefore);
    assert.equal(src.git('status', '--porcelain', '--', 'from-fork.txt'), '');
    const listed = forks(sb, src.dir);
    assert.equal(listed.length, 1);
    assert.equal(listed[0].state, 'active');
    assert.equal(listed[0].mode, 'overlay');
    assert.ok((listed[0].bytes ?? 0) > 0 && (listed[0].bytes ?? 0) < 1024 * 1024, 'bytes of the upper layer');
    // The linked worktree is locked: prune never drops it while it is unmounted.
    assert.match(src.git('worktree', 'list', '--porcelain'), /locked git xet fork/);
  });
});

test(
  'copy and clone forks verify and match the source; auto picks clone on XFS',
  { skip: rootOnly || xfsWhy || false },
  async () => {
    await withMountSandbox((sb) => {
      const xfs = mountXfs(sb, 'xfs');
      const src = initRepo(sb, 'xfs/src');
      buildIgnoredFixture(src);
      fs.writeFileSync(src.p('big.bin'), Buffer.alloc(4 << 20, 7));
      const snap = capture(sb, src.dir);
      for (const mode of ['copy', 'clone']) {
        const dir = path.join(xfs, mode);
        const out = fork(sb, src.dir, snap, dir, ['--mode', mode]);
        assert.equal(out.mode, mode);
        assertVerifiesAsFork(sb, src.dir, snap, dir);
        assertSameWorktreeState(sb, src.dir, dir);
      }
      // Without mount permission, auto falls back to clone here and says why not overlay.
      const auto = fork(sb, src.dir, snap, path.join(xfs, 'auto'), [], NO_MOUNT);
      assert.equal(auto.mode, 'clone');
      assert.match(auto.notAvailable.overlay, /may not mount/);
      assertVerifiesAsFork(sb, src.dir, snap, path.join(xfs, 'auto'));
      // Four clone forks share extents with the base: the filesystem grows far less than four copies.
      const used = () => {
        spawnSync('sync');
        return fs.statfsSync(xfs).blocks - fs.statfsSync(xfs).bfree;
      };
      const before = used();
      for (let i = 0; i < 4; i++) fork(sb, src.dir, snap, path.join(xfs, `c${i}`), ['--mode', 'clone']);
      const grown = (used() - before) * fs.statfsSync(xfs).bsize;
      assert.ok(grown < 4 << 20, `4 clone forks of a tree with a 4 MiB file grew the filesystem by ${grown} bytes`);
    });
  },
);

test(
  'when mounting is not permitted: auto falls back and says so, --mode overlay is refused cleanly',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const out = fork(sb, src.dir, snap, sb.path('f'), [], NO_MOUNT);
      assert.equal(out.mode, 'copy', 'tmpfs has no reflink, so copy');
      assert.match(out.notAvailable.overlay, /may not mount/);
      assert.match(out.notAvailable.clone, /reflink/);
      assertVerifiesAsFork(sb, src.dir, snap, sb.path('f'));
      assertSameWorktreeState(sb, src.dir, sb.path('f'));
      const worktreesBefore = src.git('worktree', 'list', '--porcelain');
      const r = xet(sb, src.dir, ['fork', snap, sb.path('g'), '--mode', 'overlay', '--json'], { wrap: NO_MOUNT });
      expectError(r, 'FORK_MODE_UNAVAILABLE');
      assert.equal(fs.existsSync(sb.path('g')), false, 'no target left behind');
      assert.equal(src.git('worktree', 'list', '--porcelain'), worktreesBefore);
      assert.equal(forks(sb, src.dir).length, 1);
      expectError(xet(sb, src.dir, ['fork', snap, sb.path('h'), '--mode', 'clone', '--json']), 'FORK_MODE_UNAVAILABLE');
    });
  },
);

test(
  'changes lists what an overlay fork did, read from the upper layer, and agrees with a scan',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('base', {
        'keep.txt': 'keep\n',
        'edit.txt': 'edit\n',
        'gone.txt': 'gone\n',
        'same.txt': 'same\n',
        'dir/a.txt': 'a\n',
        'dir/sub/b.txt': 'b\n',
        'moved/x.txt': 'x\n',
        'moved/y/z.txt': 'z\n',
        'opaque/old1.txt': '1\n',
        'opaque/old2.txt': '2\n',
        'file-to-dir': 'f\n',
        'dir-to-file/inner.txt': 'i\n',
        'tool.sh': '#!/bin/sh\n',
        'swap1/f.txt': 'one\n',
        'swap2/f.txt': 'two\n',
        'repl/a.txt': 'old\n',
        'repl2/a.txt': 'new\n',
      });
      src.mkdir('was-empty');
      const snap = capture(sb, src.dir);
      const edit = (dir: string) => {
        const p = (rel: string) => path.join(dir, rel);
        fs.appendFileSync(p('edit.txt'), 'more\n');
        fs.rmSync(p('gone.txt'));
        fs.writeFileSync(p('same.txt'), 'same\n'); // rewritten with identical bytes: no change
        fs.writeFileSync(p('dir/new.txt'), 'new\n');
        fs.renameSync(p('moved'), p('renamed')); // a directory rename (overlay redirect)
        fs.rmSync(p('opaque'), { recursive: true });
        fs.mkdirSync(p('opaque'));
        fs.writeFileSync(p('opaque/fresh.txt'), 'fresh\n'); // an opaque directory
        fs.rmSync(p('file-to-dir'));
        fs.mkdirSync(p('file-to-dir'));
        fs.writeFileSync(p('file-to-dir/in.txt'), 'in\n');
        fs.rmSync(p('dir-to-file'), { recursive: true });
        fs.writeFileSync(p('dir-to-file'), 'now a file\n');
        fs.chmodSync(p('tool.sh'), 0o755);
        // Directories swapped, and one replaced by another: same names, other contents.
        fs.renameSync(p('swap1'), p('swap-tmp'));
        fs.renameSync(p('swap2'), p('swap1'));
        fs.renameSync(p('swap-tmp'), p('swap2'));
        fs.rmSync(p('repl'), { recursive: true });
        fs.renameSync(p('repl2'), p('repl'));
        fs.mkdirSync(p('new-empty'));
        fs.writeFileSync(p('was-empty/now-full.txt'), 'x\n');
      };
      const expected = {
        added: [
          'dir-to-file',
          'dir/new.txt',
          'file-to-dir/in.txt',
          'opaque/fresh.txt',
          'renamed/x.txt',
          'renamed/y/z.txt',
          'was-empty/now-full.txt',
        ],
        modified: ['edit.txt', 'repl/a.txt', 'swap1/f.txt', 'swap2/f.txt', 'tool.sh'],
        deleted: [
          'dir-to-file/inner.txt',
          'file-to-dir',
          'gone.txt',
          'moved/x.txt',
          'moved/y/z.txt',
          'opaque/old1.txt',
          'opaque/old2.txt',
          'repl2/a.txt',
        ],
      };
      fork(sb, src.dir, snap, sb.path('over'));
      const clean = changes(sb, src.dir, sb.path('over'));
      assert.deepEqual([clean.added, clean.modified, clean.deleted], [[], [], []]);
      edit(sb.path('over'));
      const fromUpper = changes(sb, src.dir, sb.path('over'));
      assert.equal(fromUpper.method, 'upper');
      assert.deepEqual({ added: fromUpper.added, modified: fromUpper.modified, deleted: fromUpper.deleted }, expected);
      assert.deepEqual([fromUpper.addedEmptyDirs, fromUpper.removedEmptyDirs], [['new-empty'], ['was-empty']]);

      fork(sb, src.dir, snap, sb.path('copy'), ['--mode', 'copy']);
      edit(sb.path('copy'));
      const scanned = changes(sb, src.dir, sb.path('copy'));
      assert.equal(scanned.method, 'scan');
      const sorted = (l: string[]) => [...l].sort();
      assert.deepEqual(
        { added: sorted(scanned.added), modified: sorted(scanned.modified), deleted: sorted(scanned.deleted) },
        expected,
      );
      assert.deepEqual([scanned.addedEmptyDirs, scanned.removedEmptyDirs], [['new-empty'], ['was-empty']]);
      // Run from inside the fork, too.
      assert.deepEqual(changes(sb, sb.path('over'), '.').added, expected.added);
    });
  },
);

test(
  '8 forks edit the same file in parallel: none sees another, base and source never change',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      fs.writeFileSync(src.p('shared.txt'), 'original\n');
      const snap = capture(sb, src.dir);
      const srcBefore = treeFingerprint(src.dir);
      const dirs = Array.from({ length: 8 }, (_, i) => sb.path(`f${i}`));
      for (const d of dirs) fork(sb, src.dir, snap, d);
      const base = path.join(src.commonDir(), 'xet', 'bases', snap, 'tree');
      const baseBefore = treeFingerprint(base);
      // Eight processes at once, each rewriting shared.txt many times and committing in its fork.
      const script =
        'const fs=require("fs");for(let i=0;i<200;i++)fs.writeFileSync("shared.txt",process.argv[1]+" "+i+"\\n");' +
        'fs.writeFileSync("shared.txt","final "+process.argv[1]+"\\n");' +
        'require("child_process").execFileSync("git",["commit","-q","-am","fork "+process.argv[1]]);';
      await Promise.all(
        dirs.map(
          (d, i) =>
            new Promise<void>((resolve, reject) => {
              const child = spawn(process.execPath, ['-e', script, String(i)], {
                cwd: d,
                env: sb.env,
                stdio: 'ignore',
              });
              child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`writer ${i} exited ${code}`))));
            }),
        ),
      );
      for (const [i, d] of dirs.entries()) {
        assert.equal(fs.readFileSync(path.join(d, 'shared.txt'), 'utf8'), `final ${i}\n`);
        assert.match(git(sb, d, ['log', '-1', '--format=%s']), new RegExp(`^fork ${i}$`, 'm'));
        assert.deepEqual(changes(sb, src.dir, d).modified, ['shared.txt']);
      }
      assert.equal(treeFingerprint(base), baseBefore, 'the base is never written');
      assert.equal(treeFingerprint(src.dir), srcBefore, 'the source worktree is never written');
      assert.equal(fs.readFileSync(src.p('shared.txt'), 'utf8'), 'original\n');
    });
  },
);

test(
  'capture in a fork is incremental; discard keeps a dirty fork’s work in a snapshot that restores it exactly',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      fork(sb, src.dir, snap, f);
      fs.writeFileSync(path.join(f, 'a.txt'), 'edited in the fork\n');
      fs.writeFileSync(path.join(f, 'ignored/new.bin'), Buffer.from([9, 9, 9]));
      fs.rmSync(path.join(f, 'b.txt'));
      git(sb, f, ['add', 'a.txt']);
      const r = xet(sb, f, ['capture', '--json']);
      expectExit(r, 0);
      assert.equal(parseJson(r).incremental, true, 'the fork starts with the stat cache of its base');
      fs.appendFileSync(path.join(f, 'untracked/deep/file.txt'), 'more\n');
      const listing = walkTree(f);
      const state = collectGitState(sb, f, FORK_STATE);
      const d = xet(sb, src.dir, ['discard', f, '--json']);
      expectExit(d, 0);
      const kept = parseJson(d).snapshot as string;
      assert.match(kept, /^[0-9a-f]{40}$/);
      assert.equal(fs.existsSync(f), false, 'the fork is gone');
      assert.deepEqual(mountsUnder(f), []);
      assert.doesNotMatch(src.git('worktree', 'list', '--porcelain'), /xet fork/);
      assert.equal(forks(sb, src.dir).length, 0);
      assert.equal(forks(sb, src.dir, true)[0].state, 'discarded');
      // The printed snapshot brings the fork's work back, byte for byte and in git's eyes.
      restore(sb, src.dir, kept, sb.path('back'));
      assert.deepEqual(compareTrees(listing, walkTree(sb.path('back'))), []);
      assert.deepEqual(compareGitStates(state, collectGitState(sb, sb.path('back'), FORK_STATE)), []);
    });
  },
);

test(
  'discard: a clean fork needs no snapshot, --no-capture drops work, and only registered forks are removed',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      fork(sb, src.dir, snap, sb.path('clean'));
      const c = xet(sb, src.dir, ['discard', sb.path('clean'), '--json']);
      expectExit(c, 0);
      assert.equal(parseJson(c).snapshot, null);
      fork(sb, src.dir, snap, sb.path('dirty'), ['--mode', 'copy']);
      fs.writeFileSync(sb.path('dirty', 'a.txt'), 'dropped\n');
      const before = src.git('for-each-ref', 'refs/xet/snapshots');
      const n = xet(sb, src.dir, ['discard', sb.path('dirty'), '--no-capture', '--json']);
      expectExit(n, 0);
      assert.equal(parseJson(n).snapshot, null);
      assert.equal(src.git('for-each-ref', 'refs/xet/snapshots'), before, 'no snapshot was made');
      assert.equal(fs.existsSync(sb.path('dirty')), false);
      // Not forks: a plain directory, the source worktree, a linked worktree made by git itself.
      fs.mkdirSync(sb.path('plain'));
      fs.writeFileSync(sb.path('plain', 'precious.txt'), 'keep me\n');
      src.git('worktree', 'add', '-q', sb.path('wt'));
      for (const dir of [sb.path('plain'), src.dir, sb.path('wt'), sb.path('nowhere')]) {
        expectError(xet(sb, src.dir, ['discard', dir, '--no-capture', '--json']), 'FORK_NOT_FOUND');
      }
      assert.equal(fs.readFileSync(sb.path('plain', 'precious.txt'), 'utf8'), 'keep me\n');
      assert.ok(fs.existsSync(sb.path('wt', 'a.txt')));
      assert.ok(fs.existsSync(src.p('a.txt')));
    });
  },
);

test(
  'a busy overlay fork is refused with FORK_BUSY and stays whole; it is discarded once freed',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      fork(sb, src.dir, snap, f);
      const holder = spawn('sleep', ['60'], { cwd: f, stdio: 'ignore' });
      try {
        await new Promise((r) => setTimeout(r, 100));
        const err = expectError(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 'FORK_BUSY');
        assert.ok((err.details.pids as number[]).includes(holder.pid as number), 'names the process');
        assert.equal(forks(sb, src.dir)[0].state, 'active');
        assertVerifiesAsFork(sb, src.dir, snap, f);
      } finally {
        holder.kill('SIGKILL');
        await new Promise((r) => holder.once('exit', r));
      }
      expectExit(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 0);
      assert.equal(fs.existsSync(f), false);
    });
  },
);

test(
  'an unmounted overlay fork (a reboot) is re-mounted on use or with fork --remount; a lost upper is FORK_BROKEN',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      const out = fork(sb, src.dir, snap, f);
      fs.writeFileSync(path.join(f, 'a.txt'), 'work before the reboot\n');
      const umount = () => assert.equal(spawnSync('umount', [f]).status, 0);
      umount();
      assert.equal(forks(sb, src.dir)[0].state, 'unmounted');
      assert.equal(src.git('worktree', 'prune', '-n', '-v'), '', 'locked: prune leaves it alone');
      // Next use mounts it again.
      assert.deepEqual(changes(sb, src.dir, f).modified, ['a.txt']);
      assert.equal(forks(sb, src.dir)[0].state, 'active');
      umount();
      const r = xet(sb, src.dir, ['fork', '--remount', f, '--json']);
      expectExit(r, 0);
      assert.equal(parseJson(r).mounted, true);
      assert.equal(fs.readFileSync(path.join(f, 'a.txt'), 'utf8'), 'work before the reboot\n');
      // The base is derived data: rebuilt from the snapshot if it went missing.
      umount();
      fs.rmSync(path.join(src.commonDir(), 'xet', 'bases', snap), { recursive: true });
      expectExit(xet(sb, src.dir, ['fork', '--remount', f, '--json']), 0);
      assert.equal(fs.readFileSync(path.join(f, 'a.txt'), 'utf8'), 'work before the reboot\n');
      // A missing upper dir cannot be repaired: typed error, registry unchanged.
      umount();
      fs.rmSync(path.join(src.commonDir(), 'xet', 'forks', out.id, 'upper'), { recursive: true });
      expectError(xet(sb, src.dir, ['fork', '--remount', f, '--json']), 'FORK_BROKEN');
      expectError(xet(sb, src.dir, ['changes', f, '--json']), 'FORK_BROKEN');
      assert.equal(forks(sb, src.dir)[0].state, 'broken');
      expectError(xet(sb, src.dir, ['discard', f, '--json']), 'FORK_BROKEN');
      expectExit(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 0);
      assert.equal(forks(sb, src.dir).length, 0);
    });
  },
);

test(
  'a full disk gives DISK_FULL and leaves no fork, worktree or registry row behind',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('base', { 'small.txt': 'x\n' });
      fs.writeFileSync(src.p('big.bin'), Buffer.alloc(3 << 20, 1));
      const snap = capture(sb, src.dir);
      const small = mountTmpfs(sb, 'small', 1024);
      const worktrees = src.git('worktree', 'list', '--porcelain');
      const r = xet(sb, src.dir, ['fork', snap, path.join(small, 'f'), '--mode', 'copy', '--json']);
      expectError(r, 'DISK_FULL');
      assert.deepEqual(fs.readdirSync(small), [], 'nothing left on the full filesystem');
      assert.equal(src.git('worktree', 'list', '--porcelain'), worktrees);
      assert.equal(forks(sb, src.dir, true).length, 0);
      // The same fork where there is room works.
      fork(sb, src.dir, snap, sb.path('roomy'), ['--mode', 'copy']);
      assertVerifiesAsFork(sb, src.dir, snap, sb.path('roomy'));
    });
  },
);

test(
  'a fork creation killed at each of its fault points is listed as incomplete, never verifies, and discard cleans it',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = manyFilesSource(sb);
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      // What verify says: before the worktree shows in the directory there is no repository there.
      const kills: [FaultPoint, string, string][] = [
        ['fork:after-worktree', 'copy', 'incomplete'],
        ['fork:before-active', 'copy', 'incomplete'],
        ['fork:after-base', 'overlay', 'not-a-repository'],
        ['fork:before-mount', 'overlay', 'not-a-repository'],
        ['fork:before-active', 'overlay', 'incomplete'],
      ];
      for (const [point, mode, kind] of kills) {
        const what = `${mode} killed at ${point}`;
        killAt(sb, src.dir, ['fork', snap, f, '--mode', mode, '--json'], point);
        const listed = forks(sb, src.dir);
        assert.equal(listed.length, 1, what);
        assert.equal(listed[0].state, 'incomplete', what);
        if (point === 'fork:before-active' && mode === 'overlay') assert.equal(mountsUnder(f).length, 1, what);
        const v = verify(sb, src.dir, snap, f);
        expectExit(v, 1);
        assert.deepEqual(
          parseJson(v).differences.map((d: { kind: string }) => d.kind),
          [kind],
          `${what}: an incomplete fork never verifies`,
        );
        expectExit(xet(sb, src.dir, ['discard', f, '--json']), 0);
        assert.equal(fs.existsSync(f), false, what);
        assert.deepEqual(mountsUnder(sb.root), [], what);
        assert.doesNotMatch(src.git('worktree', 'list', '--porcelain'), /xet fork/, what);
        assert.deepEqual(forks(sb, src.dir), [], what);
      }
      // The base finished before the kill is kept and reused; a fork made afterwards at the same
      // place is whole, in either mode.
      const again = fork(sb, src.dir, snap, f, ['--mode', 'overlay']);
      assert.equal(again.baseBuilt, false, 'the base built before the kill is reused');
      assertVerifiesAsFork(sb, src.dir, snap, f);
      expectExit(xet(sb, src.dir, ['discard', f, '--json']), 0);
      fork(sb, src.dir, snap, f, ['--mode', 'copy']);
      assertVerifiesAsFork(sb, src.dir, snap, f);
    });
  },
);

test(
  'export: a fork’s work as one commit on its base commit, on a branch or as a patch',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      buildIgnoredFixture(src);
      const base = src.git('rev-parse', 'HEAD').trim();
      const snap = capture(sb, src.dir);
      const f = sb.path('f');
      const out = fork(sb, src.dir, snap, f);
      fs.writeFileSync(path.join(f, 'src/index.js'), 'console.log(3);\n');
      fs.writeFileSync(path.join(f, 'added.txt'), 'new and untracked\n');
      fs.writeFileSync(path.join(f, 'node_modules/pkg/extra.js'), 'ignored\n');
      fs.rmSync(path.join(f, 'package.json'));
      const r = xet(sb, src.dir, ['export', f, '--branch', 'agent/work', '-m', 'Agent work', '--json']);
      expectExit(r, 0);
      const e = parseJson(r);
      assert.equal(e.parent, base);
      assert.equal(src.git('rev-parse', 'agent/work').trim(), e.commit);
      assert.equal(src.git('rev-parse', 'agent/work^').trim(), base);
      const msg = src.git('log', '-1', '--format=%B', 'agent/work');
      assert.match(msg, /^Agent work\n\nXet-Snapshot: [0-9a-f]{40}\nXet-Base-Snapshot: /);
      assert.match(msg, new RegExp(`Xet-Base-Snapshot: ${snap}\nXet-Fork: ${out.id}`));
      const names = src.git('diff', '--name-status', base, 'agent/work').trim().split('\n').sort();
      // Tracked and untracked changes (the source's own unstaged edits and untracked files included);
      // nothing ignored.
      for (const want of ['A\tadded.txt', 'D\tpackage.json', 'M\tsrc/index.js', 'A\tuntracked.txt', 'A\tkeep.log']) {
        assert.ok(names.includes(want), `export has ${want}: ${names.join(', ')}`);
      }
      assert.ok(!names.some((n) => n.includes('node_modules') || n.includes('debug.log')), names.join(', '));
      // An existing branch is not moved without --force; the fork's own index is untouched.
      expectError(xet(sb, src.dir, ['export', f, '--branch', 'agent/work', '--json']), 'BRANCH_EXISTS');
      expectError(xet(sb, src.dir, ['export', f, '--branch', 'main', '--force', '--json']), 'BRANCH_EXISTS');
      expectError(xet(sb, src.dir, ['export', f, '--branch', 'bad..name', '--json']), 'USAGE', 2);
      assert.equal(src.git('rev-parse', 'agent/work').trim(), e.commit);
      assert.match(git(sb, f, ['status', '--porcelain']), /^ D package.json/m);
      fs.writeFileSync(path.join(f, 'added.txt'), 'changed again\n');
      const forced = parseJson(xet(sb, src.dir, ['export', f, '--branch', 'agent/work', '--force', '--json']));
      assert.equal(src.git('rev-parse', 'agent/work').trim(), forced.commit);
      assert.notEqual(forced.commit, e.commit);
      // The patch applies to the base commit and gives the same tree as the branch.
      const patch = sb.path('work.patch');
      expectExit(xet(sb, src.dir, ['export', f, '--patch', patch, '--json']), 0);
      src.git('worktree', 'add', '-q', '--detach', sb.path('apply'), base);
      git(sb, sb.path('apply'), ['am', '-q', patch]);
      assert.equal(git(sb, sb.path('apply'), ['rev-parse', 'HEAD^{tree}']), src.git('rev-parse', 'agent/work^{tree}'));
      // A snapshot (no fork) exports the same way: its unstaged and untracked work, nothing ignored.
      const s = parseJson(xet(sb, src.dir, ['export', snap, '--branch', 'from-snapshot', '--json']));
      const snapNames = src.git('diff', '--name-only', base, s.commit).trim().split('\n').sort();
      assert.deepEqual(
        snapNames,
        [
          'build/tracked-in-ignored-dir.txt',
          'keep.log',
          'local.cfg',
          'src/index.js',
          'src/rooted.txt',
          'untracked.txt',
          'vendor.log',
        ].sort(),
      );
    });
  },
);

// Regressions from the review of the first version (each of these once lost work or misreported).

/** Start the CLI without waiting; resolves with its exit code and stdout. */
function spawnXet(
  sb: Sandbox,
  cwd: string,
  args: string[],
): { done: Promise<{ code: number | null; stdout: string }>; kill: () => void } {
  const child = spawn(process.execPath, [XET_BIN, ...args], { cwd, env: sb.env, stdio: ['ignore', 'pipe', 'ignore'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  const done = new Promise<{ code: number | null; stdout: string }>((resolve) =>
    child.once('close', (code) => resolve({ code, stdout })),
  );
  return { done, kill: () => child.kill('SIGKILL') };
}

test(
  'two forks racing for one directory: one wins and stays whole, the other is refused',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = richSource(sb);
      const snap = capture(sb, src.dir);
      for (let round = 0; round < 3; round++) {
        const dir = sb.path(`race${round}`);
        const runs = [0, 1].map(() =>
          spawnXet(sb, src.dir, ['fork', snap, dir, '--mode', round === 1 ? 'copy' : 'auto', '--json']),
        );
        const results = await Promise.all(runs.map((r) => r.done));
        const won = results.filter((r) => r.code === 0);
        assert.equal(won.length, 1, `exactly one fork wins: ${JSON.stringify(results)}`);
        const lost = results.find((r) => r.code !== 0);
        // BUSY would take a lock held for 15 s or more; the loser is refused for the directory.
        assert.equal(JSON.parse(lost?.stdout ?? '{}').error?.code, 'TARGET_NOT_EMPTY', lost?.stdout);
        assertVerifiesAsFork(sb, src.dir, snap, dir);
      }
    });
  },
);

test(
  'discard keeps everything: ignored files under ignored=none, a lost .git link, an empty directory',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      src.git('config', 'xet.capture.ignored', 'none');
      const snap = capture(sb, src.dir, ['--ignored', 'all']);
      const keeps = (prepare: (f: string) => void, check: (back: string) => void, mode = 'overlay') => {
        const f = sb.path(`f-${mode}`);
        fork(sb, src.dir, snap, f, ['--mode', mode]);
        prepare(f);
        const d = xet(sb, src.dir, ['discard', f, '--json']);
        expectExit(d, 0);
        const kept = parseJson(d).snapshot;
        assert.match(kept ?? '', /^[0-9a-f]{40}$/, `discard kept the work: ${d.stdout}`);
        const back = sb.path(`back-${kept}`);
        restore(sb, src.dir, kept, back);
        check(back);
      };
      keeps(
        (f) => fs.writeFileSync(path.join(f, 'ignored/new.bin'), 'ignored work\n'),
        (back) => assert.equal(fs.readFileSync(path.join(back, 'ignored/new.bin'), 'utf8'), 'ignored work\n'),
      );
      keeps(
        (f) => {
          fs.writeFileSync(path.join(f, 'work.txt'), 'important\n');
          fs.rmSync(path.join(f, '.git'));
        },
        (back) => assert.equal(fs.readFileSync(path.join(back, 'work.txt'), 'utf8'), 'important\n'),
      );
      for (const mode of ['overlay', 'copy']) {
        keeps(
          (f) => fs.mkdirSync(path.join(f, 'brand-new-empty')),
          (back) => assert.ok(fs.statSync(path.join(back, 'brand-new-empty')).isDirectory()),
          mode,
        );
      }
    });
  },
);

test(
  'discard killed at each of its fault points: a retry finishes and keeps the work; racing discards are typed',
  { skip: rootOnly },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = manyFilesSource(sb);
      const snap = capture(sb, src.dir);
      const db = path.join(src.commonDir(), 'xet', 'xet.db');
      const state = (dir: string) => {
        const conn = new Database(db, { readonly: true, fileMustExist: true });
        try {
          const row = conn
            .prepare("SELECT state, kept_snapshot AS kept FROM forks WHERE dir = ? AND state != 'discarded'")
            .get(dir) as { state: string; kept: string | null } | undefined;
          return row ? `${row.state} ${row.kept ?? ''}`.trim() : 'gone';
        } finally {
          conn.close();
        }
      };
      const snapshotRefs = () => src.git('for-each-ref', '--format=%(objectname)', 'refs/xet/snapshots/').trim();
      for (const point of ['discard:after-capture', 'discard:after-mark', 'discard:mid-removal'] as const) {
        const f = sb.path(`f-${point.replace(':', '-')}`);
        fork(sb, src.dir, snap, f, ['--mode', 'copy']);
        fs.writeFileSync(path.join(f, 'work.txt'), `work at ${point}\n`);
        const refsBefore = snapshotRefs();
        killAt(sb, src.dir, ['discard', f, '--json'], point);
        assert.notEqual(snapshotRefs(), refsBefore, `${point}: the work was captured before the kill`);
        let kept: string | undefined;
        if (point === 'discard:after-capture') {
          // Captured but not recorded: the fork is still whole and active; the retry captures again.
          assert.equal(state(fs.realpathSync(f)), 'active');
          assert.equal(fs.readFileSync(path.join(f, 'work.txt'), 'utf8'), `work at ${point}\n`);
          assert.equal(verify(sb, src.dir, snap, f).status, 1, 'the fork holds its work still');
        } else {
          kept = /^discarding ([0-9a-f]{40})$/.exec(state(fs.realpathSync(f)))?.[1];
          assert.ok(kept, `${point}: the kept snapshot is recorded before removal starts: ${state(f)}`);
          if (point === 'discard:mid-removal') assert.deepEqual(fs.readdirSync(f), ['.git'], 'the link goes last');
        }
        const retry = xet(sb, src.dir, ['discard', f, '--json']);
        expectExit(retry, 0);
        const out = parseJson(retry);
        if (kept) assert.equal(out.snapshot, kept, `${point}: the retry reports the snapshot the first run kept`);
        assert.equal(fs.existsSync(f), false);
        const back = sb.path(`back-${point.replace(':', '-')}`);
        restore(sb, src.dir, out.snapshot, back);
        assert.equal(fs.readFileSync(path.join(back, 'work.txt'), 'utf8'), `work at ${point}\n`);
      }
      // Two discards at once: one removes the fork; the other waits for the lock, then finds it gone.
      const g = sb.path('g');
      fork(sb, src.dir, snap, g);
      fs.writeFileSync(path.join(g, 'more.txt'), 'more\n');
      const both = await Promise.all([0, 1].map(() => spawnXet(sb, src.dir, ['discard', g, '--json']).done));
      assert.equal(both.filter((r) => r.code === 0).length, 1, JSON.stringify(both));
      const loser = both.find((r) => r.code !== 0);
      assert.equal(loser?.code, 3, JSON.stringify(loser));
      assert.equal(JSON.parse(loser?.stdout ?? '{}').error?.code, 'FORK_NOT_FOUND', loser?.stdout);
    });
  },
);

test('a copy fork in use is FORK_BUSY too, and so is one with a mount inside', { skip: rootOnly }, async () => {
  await withMountSandbox(async (sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    fork(sb, src.dir, snap, f, ['--mode', 'copy']);
    const holder = spawn('sleep', ['60'], { cwd: path.join(f, 'untracked'), stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 100));
      expectError(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 'FORK_BUSY');
    } finally {
      holder.kill('SIGKILL');
      await new Promise((r) => holder.once('exit', r));
    }
    mountTmpfs(sb, 'f/ignored', 1024);
    fs.writeFileSync(sb.path('f/ignored/precious'), 'on another filesystem\n');
    expectError(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 'FORK_BUSY');
    assert.equal(fs.readFileSync(sb.path('f/ignored/precious'), 'utf8'), 'on another filesystem\n');
    assert.equal(spawnSync('umount', [sb.path('f/ignored')]).status, 0);
    expectExit(xet(sb, src.dir, ['discard', f, '--no-capture', '--json']), 0);
  });
});

test(
  'export refuses to create an unborn branch a worktree is on, and keeps hidden (skip-worktree) edits out',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('c1', { 'a.txt': 'a\n', 'local.cfg': 'default\n' });
      src.git('update-index', '--skip-worktree', 'local.cfg');
      src.write('local.cfg', 'my secret local edit\n');
      src.write('a.txt', 'edited\n');
      const snap = capture(sb, src.dir);
      const e = parseJson(xet(sb, src.dir, ['export', snap, '--branch', 'exp', '--json']));
      assert.deepEqual(src.git('diff', '--name-only', 'main', e.commit).trim().split('\n'), ['a.txt']);
      // An unborn branch checked out in a worktree is taken.
      src.git('worktree', 'add', '-q', '--detach', sb.path('wt'));
      git(sb, sb.path('wt'), ['checkout', '-q', '--orphan', 'fresh']);
      expectError(xet(sb, src.dir, ['export', snap, '--branch', 'fresh', '--json']), 'BRANCH_EXISTS');
      assert.equal(src.gitTry('rev-parse', '--verify', '-q', 'refs/heads/fresh').status, 1);
    });
  },
);

test(
  'a base records its snapshot’s validation: later forks skip it; a record that does not check out is validated again',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const src = richSource(sb);
      const snapA = capture(sb, src.dir);
      src.write('more.txt', 'more\n');
      const snapB = capture(sb, src.dir);
      const bases = path.join(src.dir, '.git', 'xet', 'bases');
      const recordOf = (snap: string) => path.join(bases, snap, 'record.json');
      let n = 0;
      /** An overlay fork of snap; whether it validated the snapshot (listed its whole trees). */
      const forkValidating = (snap: string): boolean => {
        const trace = sb.path(`trace-${++n}`);
        const dir = sb.path(`f${n}`);
        const r = xet(sb, src.dir, ['fork', snap, dir, '--mode', 'overlay', '--json'], { env: { GIT_TRACE: trace } });
        expectExit(r, 0);
        assertVerifiesAsFork(sb, src.dir, snap, dir);
        return /ls-tree -r -z --full-tree -t/.test(fs.readFileSync(trace, 'utf8'));
      };
      /** The base's part in the allowance ledger equals what a recount of the base finds. */
      const assertLedgerMatches = (snap: string, when: string) => {
        const conn = new Database(path.join(src.dir, '.git', 'xet', 'xet.db'), { readonly: true });
        const part = conn
          .prepare("SELECT bytes, files FROM allowance_parts WHERE root = 'repository' AND part = ?")
          .get(`base:${snap}`) as { bytes: number; files: number } | undefined;
        conn.close();
        const walked = { bytes: 0, files: 0 };
        const walk = (d: string): void => {
          for (const e of fs.readdirSync(d, { withFileTypes: true })) {
            if (e.isDirectory()) walk(path.join(d, e.name));
            else {
              walked.bytes += fs.lstatSync(path.join(d, e.name)).size;
              walked.files++;
            }
          }
        };
        walk(path.join(bases, snap));
        assert.deepEqual(part && { bytes: Number(part.bytes), files: Number(part.files) }, walked, when);
      };
      assert.equal(forkValidating(snapA), true, 'the first fork validates and builds the base');
      assert.equal(JSON.parse(fs.readFileSync(recordOf(snapA), 'utf8')).snapshot, snapA);
      assertLedgerMatches(snapA, 'built with its record');
      assert.equal(forkValidating(snapA), false, 'the next one uses the record');
      // With its snapshot ref and record, the id is resolved and the snapshot read without git.
      assert.doesNotMatch(fs.readFileSync(sb.path(`trace-${n}`), 'utf8'), /rev-parse -q --verify|cat-file|ls-tree/);
      assert.equal(forkValidating(snapB), true);
      // Another snapshot's record: validated again, and the right record written.
      fs.copyFileSync(recordOf(snapB), recordOf(snapA));
      assert.equal(forkValidating(snapA), true);
      assert.equal(JSON.parse(fs.readFileSync(recordOf(snapA), 'utf8')).snapshot, snapA);
      assert.equal(forkValidating(snapA), false);
      // An altered record (its digest no longer matches): validated again, the true figure restored.
      const rec = JSON.parse(fs.readFileSync(recordOf(snapA), 'utf8')) as { longest: number };
      fs.writeFileSync(recordOf(snapA), JSON.stringify({ ...rec, longest: 1 }));
      assert.equal(forkValidating(snapA), true);
      assert.equal(JSON.parse(fs.readFileSync(recordOf(snapA), 'utf8')).longest, rec.longest);
      // A base made before records (none, and the ledger counting it without): validated once, then
      // recorded, the ledger kept exact.
      fs.rmSync(recordOf(snapA));
      expectExit(xet(sb, src.dir, ['allowance', '--recount', '--json']), 0);
      assertLedgerMatches(snapA, 'recounted without a record');
      assert.equal(forkValidating(snapA), true);
      assert.equal(forkValidating(snapA), false);
      assertLedgerMatches(snapA, 'recorded later');
      // The bases themselves never changed for any of this.
      assert.deepEqual(fs.readdirSync(path.join(bases, snapA)).sort(), ['files.index', 'index', 'record.json', 'tree']);
    });
  },
);
