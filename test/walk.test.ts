// The walk of a worktree (src/snapshot/walk.ts) with its directories read ahead by the native
// module (readDirs, native/xet-native.c) against the same walk reading each one with node's
// readdirSync: the same paths in the same order, the same counts, skips, repositories and refusals,
// on trees shaped to meet every branch of the walk (names that sort differently by bytes and by
// UTF-16, every kind of entry, nested repositories, ignored and pruned directories, git's own
// directories, a directory too large for one getdents64, names that are not UTF-8).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { GitConfig } from '../src/git/config';
import { native, nativeMissing } from '../src/native';
import { resolvePolicy } from '../src/snapshot/policy';
import { readListings, walkWorktree, type DirRecord, type WalkInput, type WalkMemo } from '../src/snapshot/walk';
import { withSandbox } from './support/sandbox';
import { codeOf } from './support/errors';
import { withMountSandbox } from './support/mounts';
import { prng, randomTree } from './support/random-tree';

function skipWithoutNative(t: { diagnostic(m: string): void }): boolean {
  if (native) return false;
  t.diagnostic(`skipped: the native module is not loaded (${nativeMissing}); the walk reads with node alone`);
  return true;
}

/** Both walks, held to one result. */
function bothWalks(input: Omit<WalkInput, 'listing'>): ReturnType<typeof walkWorktree> {
  const ahead = walkWorktree({ ...input, listing: 'auto' });
  const plain = walkWorktree({ ...input, listing: 'js' });
  assert.deepEqual(ahead, plain);
  return ahead;
}

test('readDirs lists what readdirSync lists, in its order, with its kinds', async (t) => {
  if (skipWithoutNative(t)) return;
  await withSandbox(async (sb) => {
    const root = path.join(sb.root, 't');
    fs.mkdirSync(root);
    randomTree(root, 7);
    // A directory larger than one 32 KiB getdents64 buffer.
    fs.mkdirSync(path.join(root, 'many'));
    for (let i = 0; i < 1500; i++) fs.writeFileSync(path.join(root, 'many', `file-with-a-long-name-${i}.txt`), '');
    // Every kind an entry can have.
    spawnSync('mkfifo', [path.join(root, 'fifo')]);
    const server = net.createServer().listen(path.join(root, 'sock'));
    await new Promise((r) => server.once('listening', r));
    try {
      const l = readListings(root, []);
      assert.ok(l);
      let checked = 0;
      const kindOf = (d: fs.Dirent): number =>
        d.isFile() ? 1 : d.isDirectory() ? 2 : d.isSymbolicLink() ? 3 : d.isFIFO() ? 4 : d.isSocket() ? 5 : 0;
      const visit = (at: number, rel: string): void => {
        const want = fs.readdirSync(path.join(root, rel), { withFileTypes: true });
        const from = l.dirs[3 * at];
        assert.equal(l.dirs[3 * at + 2], 0, `${rel}: no error`);
        assert.equal(l.dirs[3 * at + 1], want.length, `${rel}: entry count`);
        for (let i = 0; i < want.length; i++) {
          assert.equal(l.names[from + i], want[i].name, `${rel}: entry ${i}`);
          assert.equal(l.kinds[from + i], kindOf(want[i]), `${rel}/${want[i].name}: kind`);
          const c: number = l.child[from + i];
          if (want[i].isDirectory()) {
            assert.ok(c > 0, `${rel}/${want[i].name} was read ahead`);
            visit(c, path.join(rel, want[i].name));
          } else assert.equal(c, -1);
        }
        checked++;
      };
      visit(0, '');
      assert.equal(checked, l.dirs.length / 3, 'every listing is reachable from the root');
    } finally {
      server.close();
    }
  });
});

test('readDirs leaves out what it is told to, .git in any case, and the inside of a nested repository', async (t) => {
  if (skipWithoutNative(t)) return;
  await withSandbox(async (sb) => {
    const root = path.join(sb.root, 'w');
    for (const d of ['.git/objects', 'build/out', 'keep/.GIT/x', 'nested/.git', 'nested/sub/deep', 'ok/x'])
      fs.mkdirSync(path.join(root, d), { recursive: true });
    const l = readListings(root, ['build', 'ok/x']);
    assert.ok(l);
    const childOf = (at: number, name: string): number => {
      const from = l.dirs[3 * at];
      for (let i = from; i < from + l.dirs[3 * at + 1]; i++) if (l.names[i] === name) return l.child[i];
      throw new Error(`${name} not listed`);
    };
    assert.equal(childOf(0, '.git'), -1);
    assert.equal(childOf(0, 'build'), -1);
    const keep = childOf(0, 'keep');
    assert.equal(childOf(keep, '.GIT'), -1);
    const nested = childOf(0, 'nested');
    assert.ok(nested > 0, 'a nested repository is listed');
    assert.equal(childOf(nested, 'sub'), -1, 'but not its subdirectories');
    const ok = childOf(0, 'ok');
    assert.equal(childOf(ok, 'x'), -1);
    // Not a directory, gone, or a NUL in a name: refused before anything is read.
    assert.throws(() => native?.readDirs(path.join(root, 'nope'), Buffer.alloc(0)), /could not open its root/);
    assert.throws(() => native?.readDirs(root, Buffer.from('build')), TypeError);
    assert.throws(() => native?.readDirs(`${root}\0x`, Buffer.alloc(0)), TypeError);
  });
});

test('the walk read ahead is the walk node reads: random trees, policies and ignored sets', async (t) => {
  if (skipWithoutNative(t)) return;
  await withSandbox(async (sb) => {
    for (let seed = 1; seed <= 40; seed++) {
      const root = path.join(sb.root, `t${seed}`);
      fs.mkdirSync(root);
      const files = randomTree(root, seed);
      const rnd = prng(seed * 31);
      const dirs = fs
        .readdirSync(root, { recursive: true, withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => path.relative(root, path.join(d.parentPath ?? d.path, d.name)));
      const tracked = new Set(files.filter(() => rnd() < 0.4));
      const ignored = new Set<string>([
        ...dirs.filter(() => rnd() < 0.2).map((d) => `${d}/`),
        ...files.filter(() => rnd() < 0.1),
      ]);
      const cfg = new GitConfig(rnd() < 0.5 ? [] : [{ key: 'xet.capture.include', value: '*é*' }]);
      const policy = resolvePolicy(cfg, { ignored: rnd() < 0.5 ? 'all' : 'none', exclude: rnd() < 0.5 ? ['*-*'] : [] });
      const gitDirs = dirs.length && rnd() < 0.3 ? [path.join(root, dirs[0])] : [];
      const w = bothWalks({ root, tracked, ignored, policy, gitDirs });
      assert.ok(w.paths.length + w.emptyDirs.length + w.ignoredNotCaptured + w.excludedByPattern > 0, `seed ${seed}`);
    }
  });
});

test('the walk read ahead: repositories, stray .git, refused names and a name that is not UTF-8', async (t) => {
  if (skipWithoutNative(t)) return;
  await withSandbox(async (sb) => {
    const root = path.join(sb.root, 'w');
    const mk = (p: string, body = 'x') => {
      fs.mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
      fs.writeFileSync(path.join(root, p), body);
    };
    fs.mkdirSync(path.join(root, '.git/objects'), { recursive: true });
    mk('src/a.js');
    mk('sub/.git', 'gitdir: ../.git/modules/sub'); // a submodule's gitfile
    mk('sub/file');
    mk('nested/.git/HEAD');
    mk('nested/inner/x');
    mk('tracked-repo/.git/HEAD'); // a stray .git where this index tracks files below
    mk('tracked-repo/lib/t.js');
    mk('tracked-repo/lib/deep/u.js');
    mk('odd/.GIT/config');
    mk('node_modules/pkg/index.js');
    mk('node_modules/pkg/lib/deep.js');
    mk('build/keep.txt');
    mk('build/out/o.bin');
    fs.mkdirSync(path.join(root, 'empty/also'), { recursive: true });
    fs.mkdirSync(path.join(root, 'inside-git-dir/objects'), { recursive: true });
    fs.symlinkSync('src', path.join(root, 'link-to-dir'));
    fs.symlinkSync('x', path.join(root, '.gitmodules'));
    const base = {
      root,
      tracked: new Set(['src/a.js', 'sub', 'tracked-repo/lib/t.js', 'build/keep.txt']),
      ignored: new Set(['node_modules/', 'build/', 'build/out/']),
      gitDirs: [path.join(root, '.git'), path.join(root, 'inside-git-dir')],
    };
    for (const ignoredPolicy of ['all', 'none'] as const) {
      const w = bothWalks({ ...base, policy: resolvePolicy(new GitConfig([]), { ignored: ignoredPolicy }) });
      assert.deepEqual(
        w.repositories.map((r) => `${r.kind}:${r.path}`),
        ['nested:nested', 'submodule:sub'],
      );
      assert.ok(w.paths.includes('tracked-repo/lib/deep/u.js'), 'files under a stray .git are captured');
      assert.ok(w.skipped.some((s) => s.path === 'odd/.GIT' && s.reason === 'git-refuses-path'));
      assert.ok(w.skipped.some((s) => s.path === '.gitmodules' && s.reason === 'git-refuses-path'));
      assert.ok(!w.paths.some((p) => p.startsWith('inside-git-dir')));
      assert.equal(w.paths.includes('node_modules/pkg/lib/deep.js'), ignoredPolicy === 'all');
      assert.ok(w.paths.includes('build/keep.txt'), 'a tracked file in an ignored directory');
    }
    // A name that is not UTF-8: both walks refuse it the same way.
    const bad = Buffer.concat([Buffer.from(`${root}/src/`), Buffer.from([0x66, 0xff, 0x6f])]);
    fs.writeFileSync(bad, 'x');
    const policy = resolvePolicy(new GitConfig([]), {});
    assert.equal(
      codeOf(() => walkWorktree({ ...base, policy, listing: 'auto' })),
      'PATH_ENCODING',
    );
    assert.equal(
      codeOf(() => walkWorktree({ ...base, policy, listing: 'js' })),
      'PATH_ENCODING',
    );
  });
});

const rootOnly = process.getuid?.() === 0 ? false : 'loop mounts need root (CI runs as root)';

test(
  'a file system without entry types (DT_UNKNOWN): kinds from lstat, an unsearchable directory is unreadable',
  { skip: rootOnly },
  async (t) => {
    if (skipWithoutNative(t)) return;
    if (spawnSync('mkfs.ext4', ['-V']).status !== 0) {
      t.diagnostic('skipped: mkfs.ext4 is not installed (Debian package e2fsprogs)');
      return;
    }
    await withMountSandbox(async (sb) => {
      // The walk's root on the sandbox's file system, an ext4 without the filetype feature mounted
      // inside it: its parent's entry says DT_DIR, so readDirs reads it ahead, and every entry in it
      // comes back DT_UNKNOWN.
      const root = sb.path('w');
      const mnt = path.join(root, 'mnt');
      fs.mkdirSync(mnt, { recursive: true });
      fs.writeFileSync(path.join(root, 'top'), 'x');
      const img = sb.path('untyped.img');
      fs.closeSync(fs.openSync(img, 'w'));
      fs.truncateSync(img, 16 * 1024 * 1024);
      assert.equal(spawnSync('mkfs.ext4', ['-q', '-F', '-O', '^filetype', img]).status, 0);
      assert.equal(spawnSync('mount', ['-o', 'loop', img, mnt]).status, 0);
      fs.rmSync(path.join(mnt, 'lost+found'), { recursive: true, force: true });
      fs.mkdirSync(path.join(mnt, 'dir/sub'), { recursive: true });
      fs.writeFileSync(path.join(mnt, 'dir/sub/f'), 'f');
      fs.writeFileSync(path.join(mnt, 'file'), 'f');
      fs.symlinkSync('file', path.join(mnt, 'link'));
      spawnSync('mkfifo', [path.join(mnt, 'fifo')]);
      const l = readListings(root, []);
      assert.ok(l);
      const mntAt = l.child[l.names.indexOf('mnt', l.dirs[0])];
      assert.ok(mntAt > 0, 'the mount point was read ahead');
      const untyped = l.kinds.subarray(l.dirs[3 * mntAt], l.dirs[3 * mntAt] + l.dirs[3 * mntAt + 1]);
      if (!untyped.every((k) => k === 0)) {
        t.diagnostic('skipped: this kernel gives entry types on an ext4 without filetype');
        return;
      }
      const policy = resolvePolicy(new GitConfig([]), {});
      const w = bothWalks({ root, tracked: new Set(), ignored: new Set(), policy });
      assert.deepEqual(w.paths.sort(), ['mnt/dir/sub/f', 'mnt/file', 'mnt/link', 'top']);
      assert.deepEqual(w.skipped, [{ path: 'mnt/fifo', reason: 'fifo' }]);

      // A user who may list the mount's root but not enter it (r--): its entries' lstat fails with
      // EACCES, and the directory is unreadable, named, not an empty directory with its files gone.
      if (spawnSync('id', ['nobody']).status !== 0) {
        t.diagnostic('skipped the unprivileged half: this machine has no user nobody');
        return;
      }
      fs.chmodSync(sb.root, 0o755);
      fs.chmodSync(path.dirname(sb.root), fs.statSync(path.dirname(sb.root)).mode | 0o005);
      fs.chmodSync(root, 0o755);
      fs.chmodSync(mnt, 0o444);
      const walkJs = path.join(__dirname, '..', 'src', 'snapshot', 'walk.js');
      const policyJs = path.join(__dirname, '..', 'src', 'snapshot', 'policy.js');
      const configJs = path.join(__dirname, '..', 'src', 'git', 'config.js');
      const script = `
      const { walkWorktree } = require(${JSON.stringify(walkJs)});
      const { resolvePolicy } = require(${JSON.stringify(policyJs)});
      const { GitConfig } = require(${JSON.stringify(configJs)});
      const policy = resolvePolicy(new GitConfig([]), {});
      const input = { root: ${JSON.stringify(root)}, tracked: new Set(), ignored: new Set(), policy };
      const out = ['auto', 'js'].map((listing) => walkWorktree({ ...input, listing }));
      process.stdout.write(JSON.stringify(out));`;
      const r = spawnSync(
        'setpriv',
        ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '-e', script],
        {
          encoding: 'utf8',
          cwd: '/',
        },
      );
      if (r.status !== 0 && /EACCES|Cannot find module/.test(r.stderr)) {
        t.diagnostic(
          `skipped the unprivileged half: user nobody cannot load the build here (${r.stderr.split('\n')[0]})`,
        );
        return;
      }
      assert.equal(r.status, 0, r.stderr);
      const [ahead, plain] = JSON.parse(r.stdout);
      assert.deepEqual(ahead, plain);
      assert.deepEqual(ahead.skipped, [{ path: 'mnt', reason: 'unreadable' }]);
      assert.deepEqual(ahead.emptyDirs, []);
    });
  },
);

test('a directory removed or made a file between its listing and its read is WORKTREE_CHANGED, not a crash', async () => {
  await withSandbox((sb) => {
    const root = sb.path('tree');
    fs.mkdirSync(path.join(root, 'sub', 'deeper'), { recursive: true });
    fs.writeFileSync(path.join(root, 'sub', 'deeper', 'f.txt'), 'f');
    fs.writeFileSync(path.join(root, 'top.txt'), 't');
    const input = {
      root,
      tracked: new Set<string>(),
      ignored: new Set<string>(),
      policy: resolvePolicy(new GitConfig([]), {}),
      gitDirs: [path.join(root, '.git')],
    };
    // A first walk keeps its listings (a memo that vouches for nothing).
    const first: WalkMemo = {
      records: new Map(),
      sameInputs: false,
      unchanged: () => false,
      watch: () => 'now',
      readAhead: false,
    };
    walkWorktree({ ...input, memo: first });
    assert.ok(first.next?.get('')?.names.includes('sub'));
    // The window a live tree opens: the parent's listing (here replayed) names `sub` as a directory,
    // and by the time `sub` is read it is a file, or gone. The same as a package manager swapping a
    // directory while a capture lists it.
    for (const change of ['file', 'gone'] as const) {
      fs.rmSync(path.join(root, 'sub'), { recursive: true, force: true });
      if (change === 'file') fs.writeFileSync(path.join(root, 'sub'), 'now a file');
      const replay: WalkMemo = {
        records: first.next as Map<string, DirRecord>,
        sameInputs: true,
        unchanged: (rel) => rel === '',
        watch: () => 'now',
        readAhead: false,
      };
      assert.equal(
        codeOf(() => walkWorktree({ ...input, memo: replay })),
        'WORKTREE_CHANGED',
        change,
      );
      fs.rmSync(path.join(root, 'sub'), { force: true });
      fs.mkdirSync(path.join(root, 'sub', 'deeper'), { recursive: true });
    }
  });
});
