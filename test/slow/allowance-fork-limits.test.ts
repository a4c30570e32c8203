// Forks under the storage allowance (issue 11): an overlay fork with an allowance has its upper and
// work dirs on a filesystem of that size, so a child process writing past it gets ENOSPC while the
// repository, other forks and the fork's own files keep working, and the fork still exports,
// discards and reclaims; a copy fork whose files do not fit, and a base that does not fit the
// repository's allowance, are refused with nothing changed; XFS project quotas are detected at run
// time (on this kernel a prjquota mount fails: the test says so). Runs as root (mounts, loop devices).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { measureFork, type ForkUsage } from '../../src/allowance/fork-root';
import { findRepo } from '../../src/git/repo';
import { withSidecar } from '../../src/sidecar/db';
import { liveForkAt } from '../../src/sidecar/forks';
import { chooseRoute, projectQuotaUnavailable } from '../../src/workspace/layer';
import { fork, forks } from '../support/forks';
import { initRepo, type Repo } from '../support/git';
import { mountsUnder, mountXfs, withMountSandbox, xfsUnavailable } from '../support/mounts';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { walkTree, compareTrees } from '../support/state';
import { writeLargeFile } from '../support/fixtures';
import { capture, expectError, expectExit, parseJson, xet } from '../support/xet';

const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'fork layers need root for mounts and loop devices (CI runs as root)';

/** A repository with a few files of `kib` KiB each, captured. */
function source(sb: Sandbox, name = 'src', kib = 64, n = 4): { r: Repo; snap: string } {
  const r = initRepo(sb, name);
  for (let i = 0; i < n; i++) writeLargeFile(r.p(`data/f${i}.bin`), kib * 1024, i + 1);
  r.write('README', 'hello\n');
  r.commit('files');
  return { r, snap: capture(sb, r.dir) };
}

/** Run a shell command in `cwd` as a child process (what a task's descendants do). */
function sh(cwd: string, script: string): { status: number | null; stderr: string } {
  const r = spawnSync('sh', ['-c', script], { cwd, encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

function loopDevices(): string {
  return spawnSync('losetup', ['-a'], { encoding: 'utf8' }).stdout;
}

async function usage(repoDir: string, forkDir: string, recount = false): Promise<ForkUsage> {
  const repo = await findRepo(repoDir, true);
  return withSidecar(repo.commonDir, (db) => {
    const row = liveForkAt(db, fs.realpathSync(forkDir));
    assert.ok(row, `${forkDir} is a live fork`);
    return measureFork(repo, db, row, recount);
  });
}

/** The repository's git xet state, as a listing (sizes and hashes) for before/after comparisons. */
function xetState(r: Repo): ReturnType<typeof walkTree> {
  return walkTree(path.join(r.commonDir(), 'xet'));
}

/** A root-only test in a mount sandbox with a captured source repository. */
function sourceTest(name: string, body: (sb: Sandbox, r: Repo, snap: string) => Promise<void>): void {
  test(name, { skip: rootOnly }, () =>
    withMountSandbox((sb) => {
      const { r, snap } = source(sb);
      return body(sb, r, snap);
    }),
  );
}

sourceTest(
  'an overlay fork with an allowance: a child writing past it gets ENOSPC, everything else keeps working; it exports, discards and reclaims',
  async (sb, r, snap) => {
    const a = sb.path('a');
    const b = sb.path('b');
    const made = fork(sb, r.dir, snap, a, ['--mode', 'overlay', '--allowance', '2M,100']);
    assert.deepEqual(made.allowance, { bytes: 2 * 1024 * 1024, files: 100 });
    assert.equal(made.route, 'image');
    fork(sb, r.dir, snap, b, ['--mode', 'overlay']);
    const own = path.join(r.commonDir(), 'xet', 'forks', made.id);
    assert.match(loopDevices(), new RegExp(`${own}/layer.img`), 'the layer image is loop-mounted');
    // What the fork may write: at least the allowance (the image is sized for it), not much more.
    const st = fs.statfsSync(path.join(own, 'layer'));
    const avail = st.bavail * st.bsize;
    assert.ok(avail >= 2 * 1024 * 1024 && avail <= 2 * 1024 * 1024 + (512 << 10), `available: ${avail}`);

    const before = await usage(r.dir, a);
    assert.deepEqual(before.route.kind, 'image');
    assert.equal(before.route.covered, true);
    assert.deepEqual(before.limits, { bytes: 2097152, files: 100, headroomBytes: 0, headroomFiles: 0 });

    // A descendant writing 4 MiB: the kernel stops it at the layer's size.
    const big = sh(a, 'head -c 4194304 /dev/zero > big.bin');
    assert.notEqual(big.status, 0, 'the write past the allowance fails');
    assert.match(big.stderr, /No space left on device|Disk quota exceeded/);
    const full = await usage(r.dir, a);
    assert.ok(full.used.bytes >= 2 * 1024 * 1024 - (64 << 10), `the fork's usage is its layer's: ${full.used.bytes}`);
    // Too many files: the layer's inodes are the files limit (directories count, as the kernel counts).
    fs.rmSync(path.join(a, 'big.bin'));
    const many = sh(a, 'mkdir many && cd many && i=0; while [ $i -lt 200 ]; do : > f$i || exit 1; i=$((i+1)); done');
    assert.notEqual(many.status, 0, 'creating files past the files limit fails');
    assert.match(many.stderr, /No space left on device/);
    // ENOSPC at the allowance: the fork's .git file, the dir and the files made fill its 100.
    assert.equal(fs.readdirSync(path.join(a, 'many')).length, 100 - 2, 'files made before ENOSPC');
    fs.rmSync(path.join(a, 'many'), { recursive: true, force: true });

    // Everything else works: the fork's own files, the other fork, the repository.
    assert.equal(fs.readFileSync(path.join(a, 'data/f0.bin')).length, 64 * 1024);
    fs.writeFileSync(path.join(a, 'note.txt'), 'fits\n');
    fs.writeFileSync(path.join(b, 'big.bin'), Buffer.alloc(4 * 1024 * 1024));
    r.write('more.txt', 'repository keeps working\n');
    capture(sb, r.dir);
    expectExit(xet(sb, a, ['status', '--json']), 0);

    // The fork's work still leaves it: export, then discard (its work kept), no loop device left.
    const ex = xet(sb, r.dir, ['export', a, '--branch', 'from-a', '-m', 'a', '--json']);
    expectExit(ex, 0);
    assert.match(r.git('show', 'from-a:note.txt'), /fits/);
    const d = xet(sb, r.dir, ['discard', a, '--json']);
    expectExit(d, 0);
    assert.match(parseJson(d).snapshot, /^[0-9a-f]{40}$/);
    assert.equal(fs.existsSync(own), false, "the fork's layer is gone");
    assert.doesNotMatch(loopDevices(), new RegExp(own), 'no loop device left attached');

    // Reclaim: unmounted, captured from its view, its layer taken down.
    const c = sb.path('c');
    const cf = fork(sb, r.dir, snap, c, ['--mode', 'overlay', '--allowance', '1M']);
    fs.writeFileSync(path.join(c, 'work.txt'), 'kept\n');
    const rc = xet(sb, r.dir, ['reclaim', c, '--json']);
    expectExit(rc, 0);
    const cown = path.join(r.commonDir(), 'xet', 'forks', cf.id);
    assert.equal(fs.existsSync(cown), false);
    assert.doesNotMatch(loopDevices(), new RegExp(cown), 'no loop device left attached');
    expectExit(xet(sb, r.dir, ['discard', b, '--json']), 0);
    assert.deepEqual(mountsUnder(sb.root), []);
  },
);

sourceTest(
  'after an unmount (a reboot), the layer is mounted before the overlay; a tmpfs layer (xet.fork.layer=tmpfs) is bounded and lost',
  async (sb, r, snap) => {
    const a = sb.path('a');
    const made = fork(sb, r.dir, snap, a, ['--mode', 'overlay', '--allowance', '1M']);
    fs.writeFileSync(path.join(a, 'mine.txt'), 'survives\n');
    writeLargeFile(path.join(a, 'work.bin'), 300 * 1024, 3);
    fs.mkdirSync(path.join(a, 'sub'));
    fs.writeFileSync(path.join(a, 'sub', 'x'), 'x\n');
    spawnSync('sync');
    const mountedUse = await usage(r.dir, a);
    assert.ok(mountedUse.used.bytes >= 300 * 1024, `measured mounted: ${mountedUse.used.bytes}`);
    const layer = path.join(r.commonDir(), 'xet', 'forks', made.id, 'layer');
    // A reboot: both mounts gone.
    assert.equal(spawnSync('umount', [a]).status, 0);
    assert.equal(spawnSync('umount', [layer]).status, 0);
    assert.deepEqual(mountsUnder(sb.root), []);
    const u = await usage(r.dir, a);
    assert.equal(u.route.covered, true, 'an unmounted image still bounds the fork once mounted');
    // Unmounted, the image's superblock says what the fork holds: the figure measured mounted.
    assert.deepEqual(u.used, mountedUse.used, 'the last measure of an unmounted image, not 0');
    const listed = parseJson(xet(sb, r.dir, ['allowance', '--json'])).roots.find(
      (x: { root: string }) => x.root === `fork:${made.id}`,
    );
    assert.deepEqual(listed.used, mountedUse.used, 'git xet allowance reports it too');
    assert.equal(forks(sb, r.dir)[0].state, 'unmounted', 'listed as unmounted, not broken');
    const re = xet(sb, r.dir, ['fork', '--remount', a, '--json']);
    expectExit(re, 0);
    assert.equal(parseJson(re).mounted, true);
    assert.deepEqual(mountsUnder(sb.root).sort(), [a, layer].sort(), 'the layer, then the overlay');
    assert.equal(fs.readFileSync(path.join(a, 'mine.txt'), 'utf8'), 'survives\n');
    // A task run in the fork after another reboot mounts it (the layer first) before it runs.
    assert.equal(spawnSync('umount', [a]).status, 0);
    assert.equal(spawnSync('umount', [layer]).status, 0);
    const task = xet(sb, r.dir, ['task', 'run', '--in', a, '--no-capture', '--json', '--', 'cat', 'mine.txt']);
    expectExit(task, 0);
    assert.match(task.stdout, /survives/);
    assert.deepEqual(mountsUnder(sb.root).sort(), [a, layer].sort(), 'the task mounted the layer, then the overlay');
    // The database lost: fsck --rebuild gives the fork its route and allowance back from layer.json.
    for (const f of ['xet.db', 'xet.db-wal', 'xet.db-shm'])
      fs.rmSync(path.join(r.commonDir(), 'xet', f), { force: true });
    expectExit(xet(sb, r.dir, ['fsck', '--rebuild', '--json']), 0);
    const rebuilt = await usage(r.dir, a);
    assert.equal(rebuilt.route.kind, 'image');
    assert.equal(rebuilt.limits.bytes, 1048576);
    expectExit(xet(sb, r.dir, ['discard', a, '--json']), 0);

    r.git('config', 'xet.fork.layer', 'tmpfs');
    const t = fork(sb, r.dir, snap, a, ['--mode', 'overlay', '--allowance', '1M,50']);
    assert.equal(t.route, 'tmpfs');
    const tl = path.join(r.commonDir(), 'xet', 'forks', t.id, 'layer');
    const w = sh(a, 'head -c 2097152 /dev/zero > big.bin');
    assert.notEqual(w.status, 0);
    assert.match(w.stderr, /No space left on device/);
    fs.rmSync(path.join(a, 'big.bin'));
    const tm = sh(a, 'i=0; while [ $i -lt 100 ]; do : > t$i || exit 1; i=$((i+1)); done');
    assert.match(tm.stderr, /No space left on device/);
    // The .git file and the files made: 50 (files made, t0…, are those before the first refusal).
    assert.equal(fs.readdirSync(a).filter((n) => /^t\d+$/.test(n)).length, 50 - 1, 'tmpfs: files before ENOSPC');
    // Unmounted, a tmpfs layer's work is gone: said so, and discard --no-capture removes the fork.
    spawnSync('umount', [a]);
    spawnSync('umount', [tl]);
    const tu = await usage(r.dir, a);
    assert.equal(tu.route.covered, false);
    assert.match(tu.route.reason, /tmpfs/);
    const broken = xet(sb, r.dir, ['fork', '--remount', a, '--json']);
    assert.match(expectError(broken, 'FORK_BROKEN').message, /tmpfs layer .* is gone/);
    expectExit(xet(sb, r.dir, ['discard', a, '--no-capture', '--json']), 0);
    assert.deepEqual(forks(sb, r.dir), []);
    assert.deepEqual(mountsUnder(sb.root), []);
  },
);

sourceTest(
  'a copy fork whose files do not fit its allowance is refused before anything is made; one that fits records its files',
  async (sb, r, snap) => {
    // A first fork (discarded) leaves the probe memo and the writers' dir behind: later states
    // compare without them.
    fork(sb, r.dir, snap, sb.path('warm'), ['--mode', 'copy']);
    expectExit(xet(sb, r.dir, ['discard', sb.path('warm'), '--json']), 0);
    const worktrees = r.git('worktree', 'list', '--porcelain');
    const state = xetState(r);
    const f = sb.path('f');
    const e = expectError(
      xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--allowance', '100K', '--json']),
      'ALLOWANCE_EXCEEDED',
    );
    assert.equal(e.details.dimension, 'bytes');
    assert.match(e.details.root, /^fork:[0-9a-f]{12}$/);
    assert.equal(fs.existsSync(f), false, 'no fork directory');
    assert.equal(r.git('worktree', 'list', '--porcelain'), worktrees, 'no worktree');
    assert.equal(forks(sb, r.dir, true).length, 1, 'no fork row (only the discarded warm-up)');
    assert.deepEqual(compareTrees(state, xetState(r)), [], 'the sidecar dir is as it was');
    // xet.fork.allowance is the default; --allowance overrides it.
    r.git('config', 'xet.fork.allowance', '100K');
    expectError(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 'ALLOWANCE_EXCEEDED');
    expectError(
      xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--allowance', '300K,3', '--json']),
      'ALLOWANCE_EXCEEDED',
    );
    assert.equal(fs.existsSync(f), false);
    const ok = fork(sb, r.dir, snap, f, ['--mode', 'copy', '--allowance', '1M']);
    assert.deepEqual(ok.allowance, { bytes: 1048576, files: null });
    assert.equal(ok.route, null);
    const u = await usage(r.dir, f);
    assert.equal(u.route.covered, false);
    assert.match(u.route.reason, /copy fork's files are ordinary files/);
    assert.ok(u.used.bytes >= 4 * 64 * 1024 + 6 && u.used.bytes <= 1048576, `used ${u.used.bytes}`);
    // Files written past the figure are seen by a recount (nothing in the kernel stopped them).
    writeLargeFile(path.join(f, 'extra.bin'), 2 * 1024 * 1024);
    assert.equal((await usage(r.dir, f)).used.bytes, u.used.bytes, 'a check reads the ledger');
    assert.ok((await usage(r.dir, f, true)).used.bytes > 2 * 1024 * 1024, 'a recount walks the tree');
    expectExit(xet(sb, r.dir, ['discard', f, '--no-capture', '--json']), 0);
    const bad = xet(sb, r.dir, ['fork', snap, f, '--allowance', 'lots', '--json']);
    expectError(bad, 'USAGE', 2);
    // An overlay fork with an allowance but no route (xet.fork.layer=none): made, and said to be uncovered.
    r.git('config', 'xet.fork.layer', 'none');
    const o = fork(sb, r.dir, snap, f, ['--mode', 'overlay', '--allowance', '1M']);
    assert.equal(o.route, null);
    const ou = await usage(r.dir, f);
    assert.deepEqual([ou.route.kind, ou.route.covered], [null, false]);
    assert.match(ou.route.reason, /no kernel route/);
    expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
  },
);

test(
  "a new base is admitted against the repository's allowance: refused with nothing changed, then built and recorded",
  { skip: rootOnly },
  () =>
    withMountSandbox(async (sb) => {
      const { r } = source(sb, 'src', 1);
      const small = capture(sb, r.dir);
      // Warm-up: the overlay probe's memo and the writers' dir exist from here on.
      fork(sb, r.dir, small, sb.path('warm'), ['--mode', 'overlay']);
      expectExit(xet(sb, r.dir, ['discard', sb.path('warm'), '--json']), 0);
      writeLargeFile(r.p('data/big.bin'), 3 * 1024 * 1024, 9);
      r.commit('big');
      const snap = capture(sb, r.dir);
      r.git('config', 'xet.allowance.bytes', '3M');
      r.git('config', 'xet.allowance.headroom', '0');
      const state = xetState(r);
      const f = sb.path('f');
      const e = expectError(xet(sb, r.dir, ['fork', snap, f, '--mode', 'overlay', '--json']), 'ALLOWANCE_EXCEEDED');
      assert.equal(e.details.root, 'repository');
      assert.ok(e.details.adding > 3 * 1024 * 1024, `the base's bytes are admitted: ${e.details.adding}`);
      assert.equal(fs.existsSync(f), false);
      assert.deepEqual(compareTrees(state, xetState(r)), [], 'nothing written: no base, no temporary, no fork');
      assert.deepEqual(forks(sb, r.dir), []);
      r.git('config', 'xet.allowance.bytes', '64M');
      const ok = fork(sb, r.dir, snap, f, ['--mode', 'overlay']);
      assert.equal(ok.baseBuilt, true);
      const db = new Database(path.join(r.commonDir(), 'xet', 'xet.db'), { readonly: true });
      const part = db
        .prepare('SELECT bytes FROM allowance_parts WHERE root = ? AND part = ?')
        .get('repository', `base:${snap}`) as { bytes: number } | undefined;
      db.close();
      const walked = walkTree(path.join(r.commonDir(), 'xet', 'bases', snap));
      let bytes = 0;
      for (const en of walked.entries.values()) bytes += en.type === 'file' ? (en.size ?? 0) : 0;
      assert.ok(part && part.bytes > 3 * 1024 * 1024, 'the base is in the ledger');
      assert.equal(part?.bytes, bytes, 'recorded as built: the files, the index and the files index');
      expectExit(xet(sb, r.dir, ['discard', f, '--json']), 0);
    }),
);

test(
  'XFS project quotas are detected at run time: a prjquota mount is tried on a real XFS image',
  { skip: rootOnly || xfsUnavailable() || false },
  (t) =>
    withMountSandbox(async (sb) => {
      const img = sb.path('pq.img');
      const mp = sb.path('pq');
      fs.mkdirSync(mp);
      fs.closeSync(fs.openSync(img, 'w'));
      fs.truncateSync(img, 512 * 1024 * 1024);
      assert.equal(spawnSync('mkfs.xfs', ['-q', img]).status, 0);
      const m = spawnSync('mount', ['-o', 'loop,prjquota', img, mp], { encoding: 'utf8' });
      if (m.status !== 0) {
        // This kernel (no CONFIG_XFS_QUOTA) refuses the mount: detection must say the route is not there.
        t.diagnostic(`the XFS project quota path could not be exercised: mount -o prjquota failed: ${m.stderr.trim()}`);
        const xfs = mountXfs(sb, 'plain', 512);
        const why = await projectQuotaUnavailable(xfs);
        assert.match(why ?? '', /not mounted with prjquota/);
        t.diagnostic(`detection on an XFS mount without prjquota: ${why}`);
        assert.equal((await chooseRoute('auto', xfs)).route, 'image', 'auto falls back to an image');
        assert.match((await projectQuotaUnavailable(sb.root)) ?? '', /not XFS/);
        return;
      }
      // A kernel with XFS quotas: the route is offered, and a child writing past it gets EDQUOT.
      assert.equal(await projectQuotaUnavailable(mp), null);
      const repoSb = { ...sb, path: (...p: string[]) => path.join(mp, ...p) } as Sandbox;
      const { r, snap } = source(repoSb);
      const a = path.join(mp, 'a');
      const made = fork(sb, r.dir, snap, a, ['--mode', 'overlay', '--allowance', '1M']);
      assert.equal(made.route, 'project-quota');
      const w = sh(a, 'head -c 4194304 /dev/zero > big.bin');
      assert.notEqual(w.status, 0);
      assert.match(w.stderr, /Disk quota exceeded/);
      expectExit(xet(sb, r.dir, ['discard', a, '--no-capture', '--json']), 0);
    }),
);

test('an allowance of 0 bytes or 0 files is refused (USAGE; CONFIG_INVALID from xet.fork.allowance) before any effect', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb, 'src', 1, 1);
    const state = xetState(r);
    const f = sb.path('f');
    for (const a of ['0', '0,0', '1M,0', '0,10']) {
      const e = expectError(
        xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--allowance', a, '--json']),
        'USAGE',
        2,
      );
      assert.match(e.message, /more than 0/);
    }
    r.git('config', 'xet.fork.allowance', '0');
    expectError(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 'CONFIG_INVALID');
    r.git('config', 'xet.fork.allowance', '1M,0');
    const c = expectError(xet(sb, r.dir, ['fork', snap, f, '--mode', 'copy', '--json']), 'CONFIG_INVALID');
    assert.match(c.message, /xet\.fork\.allowance/);
    assert.equal(fs.existsSync(f), false, 'no fork directory');
    assert.deepEqual(compareTrees(state, xetState(r)), [], 'the sidecar dir is as it was');
  }));

test("a copy fork's recorded files figure is what a recount finds right after creation (symlinks once, its .git file counted)", () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.write('README', 'hello\n');
    r.write('dir/a.txt', 'a\n');
    fs.symlinkSync('README', r.p('link'));
    fs.symlinkSync('../README', r.p('dir/up'));
    r.commit('files and symlinks');
    const snap = capture(sb, r.dir);
    const f = sb.path('f');
    fork(sb, r.dir, snap, f, ['--mode', 'copy', '--allowance', '1M,100']);
    const cheap = await usage(r.dir, f);
    const recount = await usage(r.dir, f, true);
    assert.deepEqual(cheap.used, recount.used);
    expectExit(xet(sb, r.dir, ['discard', f, '--no-capture', '--json']), 0);
  }));
