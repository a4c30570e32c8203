// git xet gc under fire, with real processes: a SIGKILL at every gc fault point and the runs that
// converge after it; gc racing a capture that is writing its pack and ref, a pin of a snapshot it is
// about to drop, a fork, a handoff accept and a `git xet fetch` bringing a new ref (nothing created
// during a gc is collected by it); and a full disk during the repack (DISK_FULL, nothing retained
// lost). Runs as root (mounts), as CI does.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { FAULT_POINTS, killAt, pausedAt, type FaultPoint } from '../support/faults';
import { initRepo, pseudoRandomBytes, type Repo } from '../support/git';
import { mountTmpfs, withMountSandbox } from '../support/mounts';
import { runAsync } from '../support/remote';
import type { Sandbox } from '../support/sandbox';
import { capture, expectError, expectExit, parseJson, restore, verify, xet, XET_BIN } from '../support/xet';

const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'needs root for mounts (CI runs as root)';
const GC_POINTS: FaultPoint[] = [
  'gc:after-plan',
  'gc:after-refs',
  'gc:after-bases',
  'gc:before-repack',
  'gc:after-repack',
];
assert.deepEqual(
  GC_POINTS,
  FAULT_POINTS.filter((p) => p.startsWith('gc:')),
  'every gc fault point is killed at',
);

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function gc(sb: Sandbox, cwd: string, extra: string[] = []): any {
  const r = xet(sb, cwd, ['gc', ...extra, '--json']);
  expectExit(r, 0);
  return parseJson(r);
}

function xetAsync(sb: Sandbox, cwd: string, args: string[]) {
  return runAsync(sb, cwd, process.execPath, [XET_BIN, ...args], {}, 180_000);
}

function snapshotRefs(r: Repo): string[] {
  return r
    .git('for-each-ref', '--format=%(refname:lstrip=3)', 'refs/xet/snapshots/')
    .split('\n')
    .filter(Boolean)
    .sort();
}

function gcRuns(r: Repo): { id: string; state: string }[] {
  const file = path.join(r.commonDir(), 'xet', 'xet.db');
  if (!fs.existsSync(file)) return [];
  const d = new Database(file, { readonly: true });
  try {
    return d.prepare('SELECT id, state FROM gc_runs ORDER BY started_at').all() as { id: string; state: string }[];
  } finally {
    d.close();
  }
}

function assertWhole(sb: Sandbox, r: Repo, snapshots: string[]): void {
  const f = r.gitTry('fsck', '--no-dangling', '--no-progress');
  assert.equal(f.status, 0, `git fsck: ${f.stderr.toString()}`);
  for (const s of snapshots) {
    const dir = sb.path(`check-${s.slice(0, 8)}-${Math.random().toString(36).slice(2, 8)}`);
    restore(sb, r.dir, s, dir);
    expectExit(verify(sb, r.dir, s, dir), 0);
  }
}

/** A repository with 4 snapshots, keepLast 1 without keepUnpushed, and a discarded overlay fork
 * (its base is garbage) and a removed worktree (its stat cache is garbage). */
function garbageRepo(sb: Sandbox): { r: Repo; snaps: string[] } {
  const r = initRepo(sb, 'src');
  r.commit('one', { 'a.txt': 'a\n' });
  const snaps: string[] = [];
  for (let i = 0; i < 4; i++) {
    r.write('data.bin', pseudoRandomBytes(64 * 1024, i + 1));
    snaps.push(capture(sb, r.dir));
  }
  r.git('config', 'xet.retention.keepLast', '1');
  r.git('config', 'xet.gc.keepUnpushed', 'false');
  const f = sb.path('f');
  expectExit(xet(sb, r.dir, ['fork', snaps[3], f, '--mode', 'overlay', '--json']), 0);
  expectExit(xet(sb, r.dir, ['discard', f, '--no-capture', '--json']), 0);
  const wt = sb.path('wt');
  r.git('worktree', 'add', '-q', '--detach', wt);
  capture(sb, wt);
  r.git('worktree', 'remove', '--force', wt);
  return { r, snaps };
}

for (const point of GC_POINTS) {
  test(
    `gc killed at ${point}: the next runs converge, every retained snapshot restores and verifies`,
    { skip: rootOnly },
    () =>
      withMountSandbox((sb) => {
        const { r, snaps } = garbageRepo(sb);
        // The wt worktree's snapshot is the newest of its own group (keepLast 1 there too).
        const retained = snapshotRefs(r).filter((s) => !snaps.slice(0, 3).includes(s));
        killAt(sb, r.dir, ['gc', '--grace', '0', '--json'], point);
        const killed = gcRuns(r);
        assert.equal(killed.length, 1);
        assert.notEqual(killed[0].state, 'done');
        const f = parseJson(xet(sb, r.dir, ['fsck', '--json']));
        assert.deepEqual(
          f.problems.map((p: { kind: string }) => p.kind),
          ['gc-unfinished'],
        );
        const first = gc(sb, r.dir, ['--grace', '0']);
        assert.deepEqual(first.interrupted, [killed[0].id], 'the next run marks the killed one interrupted');
        gc(sb, r.dir, ['--grace', '0']);
        const last = gc(sb, r.dir, ['--grace', '0']);
        assert.deepEqual(
          [last.refs.released, last.refs.deleted, last.bases, last.caches],
          [[], [], [], []],
          'converged',
        );
        assert.deepEqual(snapshotRefs(r), [...retained].sort());
        assert.deepEqual(
          r.git('for-each-ref', '--format=%(refname)', 'refs/xet/dropped/').trim(),
          '',
          'every drop was reclaimed',
        );
        assert.deepEqual(fs.readdirSync(path.join(r.commonDir(), 'xet', 'bases')), [], 'the unused base went');
        for (const s of snaps.slice(0, 3)) assert.notEqual(r.gitTry('cat-file', '-e', s).status, 0, `${s} reclaimed`);
        assert.deepEqual(
          gcRuns(r).map((x) => x.state),
          ['interrupted', 'done', 'done', 'done'],
        );
        assert.equal(parseJson(xet(sb, r.dir, ['fsck', '--json'])).ok, true);
        assertWhole(sb, r, retained);
      }),
  );
}

test(
  'gc waits for a capture writing its pack and ref, and keeps what it made; a capture waits for a running gc',
  { skip: rootOnly },
  () =>
    withMountSandbox(async (sb) => {
      const { r } = garbageRepo(sb);
      r.write('new.bin', pseudoRandomBytes(128 * 1024, 99));
      // The capture has written its pack: objects nothing references yet, the ref still to come.
      const cap = await pausedAt(sb, r.dir, ['capture', '--json'], 'capture:after-pack');
      const g = xetAsync(sb, r.dir, ['gc', '--grace', '0', '--json']);
      await new Promise((res) => setTimeout(res, 1500));
      assert.deepEqual(gcRuns(r), [], 'gc has not started marking while the capture runs');
      cap.go();
      const c = await cap.done;
      assert.equal(c.code, 0, c.stdout);
      const made = JSON.parse(c.stdout).snapshot as string;
      const res = await g;
      assert.equal(res.status, 0, res.stdout + res.stderr);
      const out = JSON.parse(res.stdout);
      assert.ok(!out.refs.released.some((x: { snapshot: string }) => x.snapshot === made), 'the new snapshot is kept');
      assertWhole(sb, r, [made]);

      // The other order: gc holds the lock (paused after its plan); a capture waits, then completes.
      r.write('later.bin', pseudoRandomBytes(96 * 1024, 5));
      const held = await pausedAt(sb, r.dir, ['gc', '--grace', '0', '--json'], 'gc:after-plan');
      const count = snapshotRefs(r).length;
      const c2 = xetAsync(sb, r.dir, ['capture', '--json']);
      await new Promise((res) => setTimeout(res, 1500));
      assert.equal(snapshotRefs(r).length, count, 'the capture waits for the gc');
      held.go();
      assert.equal((await held.done).code, 0);
      const r2 = await c2;
      assert.equal(r2.status, 0, r2.stdout + r2.stderr);
      const later = JSON.parse(r2.stdout).snapshot as string;
      // A gc after it keeps it (it is the newest) and the repository is whole.
      gc(sb, r.dir, ['--grace', '0']);
      assert.ok(snapshotRefs(r).includes(later));
      assertWhole(sb, r, [later]);
    }),
);

test(
  'gc vs fork and handoff accept: each waits for the gc or the gc for it; what they made survives',
  { skip: rootOnly },
  () =>
    withMountSandbox(async (sb) => {
      const { r, snaps } = garbageRepo(sb);
      // A handoff of snaps[2]: a root from now on.
      const h = parseJson(
        xet(sb, r.dir, ['handoff', 'create', snaps[2], '--to', 'B', '--from', 'A', '--title', 'T', '--json']),
      ).id as string;
      // A fork paused after building its base: gc waits, then keeps the base and the snapshot.
      const fdir = sb.path('fork1');
      const fk = await pausedAt(sb, r.dir, ['fork', snaps[1], fdir, '--mode', 'overlay', '--json'], 'fork:after-base');
      const g = xetAsync(sb, r.dir, ['gc', '--grace', '0', '--json']);
      await new Promise((res) => setTimeout(res, 1500));
      assert.deepEqual(gcRuns(r), [], 'gc waits for the fork');
      fk.go();
      assert.equal((await fk.done).code, 0);
      const out = JSON.parse((await g).stdout);
      assert.ok(!out.bases.includes(snaps[1]), "the new fork's base is kept");
      assert.ok(snapshotRefs(r).includes(snaps[1]), "the fork's snapshot is kept");
      assert.equal(fs.readFileSync(path.join(fdir, 'data.bin')).length, 64 * 1024);

      // gc paused after its plan; a fork and a handoff accept (of a snapshot the handoff keeps) wait.
      const held = await pausedAt(sb, r.dir, ['gc', '--grace', '0', '--json'], 'gc:after-plan');
      const fdir2 = sb.path('fork2');
      const adir = sb.path('accepted');
      const f2 = xetAsync(sb, r.dir, ['fork', snaps[3], fdir2, '--mode', 'copy', '--json']);
      const acc = xetAsync(sb, r.dir, ['handoff', 'accept', h, adir, '--json']);
      await new Promise((res) => setTimeout(res, 1500));
      assert.ok(!fs.existsSync(path.join(fdir2, '.git')), 'the fork waits for the gc');
      held.go();
      assert.equal((await held.done).code, 0);
      const [rf, ra] = [await f2, await acc];
      assert.equal(rf.status, 0, rf.stdout + rf.stderr);
      assert.equal(ra.status, 0, ra.stdout + ra.stderr);
      assert.ok(snapshotRefs(r).includes(snaps[2]), 'the unexpired handoff kept its snapshot');
      assert.ok(!snapshotRefs(r).includes(snaps[0]), 'the gc that ran first dropped the oldest');
      // A fork asked for after the gc dropped its snapshot is refused, typed, and makes nothing.
      expectError(xet(sb, r.dir, ['fork', snaps[0], sb.path('fork3'), '--json']), 'SNAPSHOT_NOT_FOUND');
      assert.ok(!fs.existsSync(sb.path('fork3')));
      gc(sb, r.dir, ['--grace', '0']);
      expectExit(verify(sb, r.dir, snaps[2], adir), 0);
      assertWhole(sb, r, [snaps[1], snaps[2], snaps[3]]);
      expectExit(xet(sb, r.dir, ['discard', fdir, '--no-capture', '--json']), 0);
    }),
);

test(
  'gc vs git xet fetch bringing a new snapshot ref, and vs pin of a snapshot it is about to drop',
  { skip: rootOnly },
  () =>
    withMountSandbox(async (sb) => {
      const { r, snaps } = garbageRepo(sb);
      const store = sb.path('store');
      const other = initRepo(sb, 'other');
      other.commit('o', { 'o.txt': 'o\n' });
      other.write('o.bin', pseudoRandomBytes(80 * 1024, 42));
      const theirs = capture(sb, other.dir);
      other.git('remote', 'add', 'origin', `xet::${store}`);
      expectExit(xet(sb, other.dir, ['push', '--json']), 0);
      r.git('remote', 'add', 'origin', `xet::${store}`);
      const held = await pausedAt(sb, r.dir, ['gc', '--grace', '0', '--json'], 'gc:after-plan');
      const fetch = xetAsync(sb, r.dir, ['fetch', '--json']);
      const pinSupported = /^\s+pin\b/m.test(xet(sb, r.dir, ['help']).stdout);
      const pin = pinSupported ? xetAsync(sb, r.dir, ['pin', snaps[0], '--reason', 'race', '--json']) : null;
      await new Promise((res) => setTimeout(res, 1500));
      held.go();
      assert.equal((await held.done).code, 0);
      const rf = await fetch;
      assert.equal(rf.status, 0, rf.stdout + rf.stderr);
      assert.ok(snapshotRefs(r).includes(theirs), 'the fetched snapshot is there');
      if (pin) {
        const rp = await pin;
        assert.equal(rp.status, 0, rp.stdout + rp.stderr);
      }
      // A gc afterwards: the fetched snapshot is on a remote (released only by retention of its own
      // group, which here has no policy) and the pinned one is a root.
      const out = gc(sb, r.dir, ['--grace', '0']);
      assert.ok(!out.refs.released.some((x: { snapshot: string }) => x.snapshot === theirs));
      const keep = [theirs, snaps[3], ...(pin ? [snaps[0]] : [])];
      assertWhole(sb, r, keep);
    }),
);

test(
  'a full disk during gc: DISK_FULL, nothing retained lost, the next gc with room completes',
  { skip: rootOnly },
  () =>
    withMountSandbox((sb) => {
      const disk = mountTmpfs(sb, 'disk', 12 * 1024);
      const r = initRepo(sb, path.relative(sb.root, path.join(disk, 'src')));
      r.commit('one', { 'a.txt': 'a\n' });
      const snaps: string[] = [];
      for (let i = 0; i < 3; i++) {
        r.write('data.bin', pseudoRandomBytes(1536 * 1024, i + 11));
        snaps.push(capture(sb, r.dir));
      }
      r.rm('data.bin');
      r.git('config', 'xet.retention.keepLast', '1');
      r.git('config', 'xet.gc.keepUnpushed', 'false');
      // Leave less room than a repack of everything reachable needs (the drops keep it all).
      const st = fs.statfsSync(disk);
      const free = Number(st.bavail) * Number(st.bsize);
      fs.writeFileSync(path.join(disk, 'filler'), Buffer.alloc(Math.max(0, free - 1024 * 1024)));
      // Both ways Git reclaims: the cruft repack (a grace) and the plain one (--grace 0).
      expectError(xet(sb, r.dir, ['gc', '--json']), 'DISK_FULL');
      expectError(xet(sb, r.dir, ['gc', '--grace', '0', '--json']), 'DISK_FULL');
      // Journaled as failed (or, if even that write found no room, left for the next run to mark).
      const states = gcRuns(r).map((x) => x.state);
      assert.equal(states.length, 2);
      assert.ok(
        states.every((x) => x === 'failed' || x === 'reclaiming'),
        states.join(),
      );
      fs.rmSync(path.join(disk, 'filler'));
      // Nothing retained was lost: every snapshot (released ones are only dropped) is whole.
      const f = r.gitTry('fsck', '--no-dangling', '--no-progress');
      assert.equal(f.status, 0, `git fsck: ${f.stderr.toString()}`);
      for (const s of snaps) {
        const dir = sb.path(`check-${s.slice(0, 8)}`);
        restore(sb, r.dir, s, dir);
        expectExit(verify(sb, r.dir, s, dir), 0);
      }
      assert.deepEqual(
        fs
          .readdirSync(path.join(r.commonDir(), 'objects', 'pack'))
          .filter((n) => n.startsWith('.tmp-') || n.startsWith('tmp_')),
        [],
        'no temporary pack of the failed repack is left',
      );
      // With room again, gc completes and marks nothing it cannot finish.
      gc(sb, r.dir, ['--grace', '0']);
      gc(sb, r.dir, ['--grace', '0']);
      assert.deepEqual(snapshotRefs(r), [snaps[2]]);
      assertWhole(sb, r, [snaps[2]]);
    }),
);
