// The foundation of durable roots: durations, the retention rules, pin and drop markers read back
// from hostile refs, marking over real repositories, and the objects lock between real processes.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { isXetError } from '../src/errors';
import { GitConfig } from '../src/git/config';
import { findRepo, repoOpts } from '../src/git/repo';
import { formatDuration, parseDuration, parseUntil } from '../src/gc/duration';
import { isoSeconds, readMarkers, writeMarker } from '../src/gc/markers';
import { holdObjectsExclusive, holdObjectsShared } from '../src/gc/objects-lock';
import { applyRetention, readRetentionPolicy } from '../src/gc/retention';
import { markRoots, rootsOf } from '../src/gc/roots';
import { resolveGrace } from '../src/gc/collect';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';
import { capture, parseJson, restore, xet } from './support/xet';
import { codeOf } from './support/errors';

test('durations: units, sums, git approxidate, now and never; bad text is a typed error', () => {
  assert.equal(parseDuration('90s'), 90);
  assert.equal(parseDuration('15m'), 900);
  assert.equal(parseDuration('1d12h'), 129600);
  assert.equal(parseDuration('2w'), 14 * 86400);
  assert.equal(parseDuration('2.weeks.ago'), 14 * 86400);
  assert.equal(parseDuration('3 days'), 3 * 86400);
  assert.equal(parseDuration('1.month'), 30 * 86400);
  assert.equal(parseDuration('now'), 0);
  assert.equal(parseDuration('0'), 0);
  assert.equal(parseDuration('never'), Infinity);
  for (const bad of ['', 'soon', '-1d', '1.5d', '3x', '2 fortnights', 'd']) {
    assert.equal(
      codeOf(() => parseDuration(bad)),
      'USAGE',
      bad,
    );
  }
  assert.equal(
    codeOf(() => parseDuration('forever', 'grace', 'CONFIG_INVALID')),
    'CONFIG_INVALID',
  );
  const now = new Date('2026-12-01T10:00:00Z');
  assert.equal(parseUntil('2d', now)?.toISOString(), '2026-12-03T10:00:00.000Z');
  assert.equal(parseUntil('2027-01-31', now)?.toISOString(), '2027-01-31T00:00:00.000Z');
  assert.equal(parseUntil('2027-01-31T12:30:00Z', now)?.toISOString(), '2027-01-31T12:30:00.000Z');
  assert.equal(parseUntil('never', now), null);
  assert.equal(formatDuration(14 * 86400), '2w');
  assert.equal(formatDuration(36 * 3600), '36h');
  assert.equal(formatDuration(Infinity), 'never');
});

test('retention: keepLast, keepWithin, keepDaily and keepWeekly as restic counts them', () => {
  const prevTz = process.env.TZ;
  process.env.TZ = 'UTC';
  try {
    const day = 86400;
    const t0 = Date.parse('2026-11-30T18:00:00Z') / 1000; // a Monday
    // two snapshots a day for 20 days, newest first: s0 (t0), s1 (t0-6h), s2 (t0-1d) ...
    const snaps = Array.from({ length: 40 }, (_, n) => ({
      oid: `s${n}`,
      time: t0 - Math.floor(n / 2) * day - (n % 2) * 6 * 3600,
    }));
    const last = applyRetention(snaps, { keepLast: 3 });
    assert.deepEqual([...last.keys()].sort(), ['s0', 's1', 's2']);
    const within = applyRetention(snaps, { keepWithinSeconds: 1 * day });
    assert.deepEqual([...within.keys()].sort(), ['s0', 's1', 's2']); // s2 is exactly one day older
    const daily = applyRetention(snaps, { keepDaily: 3 });
    assert.deepEqual([...daily.keys()].sort(), ['s0', 's2', 's4']);
    assert.deepEqual(daily.get('s0'), ['keepDaily 3 (2026-11-30)']);
    // ISO weeks: Mon 2026-11-30 is week 49; Sun 2026-11-29 .. Mon 2026-11-23 week 48; earlier week 47
    const weekly = applyRetention(snaps, { keepWeekly: 3 });
    assert.deepEqual([...weekly.keys()].sort(), ['s0', 's16', 's2']);
    assert.deepEqual(weekly.get('s2'), ['keepWeekly 3 (2026-W48)']);
    const both = applyRetention(snaps, { keepLast: 1, keepDaily: 1 });
    assert.deepEqual(both.get('s0'), ['keepLast 1', 'keepDaily 1 (2026-11-30)']);
    // ties in time are ordered the same way every run
    const tied = [
      { oid: 'b', time: 5 },
      { oid: 'a', time: 5 },
    ];
    assert.deepEqual(
      [...applyRetention(tied, { keepLast: 1 }).keys()],
      [...applyRetention([...tied].reverse(), { keepLast: 1 }).keys()],
    );
  } finally {
    if (prevTz === undefined) delete process.env.TZ;
    else process.env.TZ = prevTz;
  }
});

test('retention policy from git config: nothing set is no policy; bad values are CONFIG_INVALID', () => {
  assert.equal(readRetentionPolicy(new GitConfig([])), null);
  assert.deepEqual(
    readRetentionPolicy(
      new GitConfig([
        { key: 'xet.retention.keeplast', value: '5' },
        { key: 'xet.retention.keepwithin', value: '2.weeks' },
      ]),
    ),
    { keepLast: 5, keepWithinSeconds: 14 * 86400 },
  );
  // Rules that keep nothing are no policy (restic), never "release everything".
  assert.equal(
    readRetentionPolicy(
      new GitConfig([
        { key: 'xet.retention.keeplast', value: '0' },
        { key: 'xet.retention.keepdaily', value: '0' },
        { key: 'xet.retention.keepwithin', value: '0' },
      ]),
    ),
    null,
  );
  for (const [key, value] of [
    ['xet.retention.keeplast', '-1'],
    ['xet.retention.keepdaily', 'seven'],
    ['xet.retention.keepwithin', 'a while'],
  ]) {
    assert.equal(
      codeOf(() => readRetentionPolicy(new GitConfig([{ key, value }]))),
      'CONFIG_INVALID',
      `${key}=${value}`,
    );
  }
});

test('markers: a pin reads back; forged pin refs are reported and their snapshot is kept, not dropped', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { a: '1' });
    r.git('config', 'xet.retention.keepLast', '1');
    r.git('config', 'xet.gc.keepUnpushed', 'false');
    const old = capture(sb, r.dir);
    r.write('a', '2');
    const mid = capture(sb, r.dir);
    r.write('a', '3');
    const newest = capture(sb, r.dir);
    const repo = await findRepo(r.dir);
    const opts = { ...repoOpts(repo), env: { ...repoOpts(repo).env, HOME: sb.home } };
    const now = new Date();
    const pin = await writeMarker(
      'pin',
      { schema: 'xet.pin/v1', snapshot: mid, reason: 'keep me', until: null, createdAt: isoSeconds(now) },
      repo.objectFormat,
      opts,
    );
    r.git('update-ref', `refs/xet/pins/${mid}`, pin);
    // A forged pin: the ref names `old` but points at a commit whose parent is `newest`.
    const forged = await writeMarker(
      'pin',
      { schema: 'xet.pin/v1', snapshot: newest, reason: 'x', until: null, createdAt: isoSeconds(now) },
      repo.objectFormat,
      opts,
    );
    r.git('update-ref', `refs/xet/pins/${old}`, forged);
    // An expired pin on nothing in particular, and a pin ref that points at a blob.
    const blob = r.gitInput('not a pin', 'hash-object', '-w', '--stdin').trim();
    r.git('update-ref', `refs/xet/pins/${'e'.repeat(40)}`, blob);

    const pins = await readMarkers('pin', opts);
    const good = pins.find((p) => p.snapshot === mid);
    assert.equal(good?.record?.reason, 'keep me');
    assert.match(pins.find((p) => p.snapshot === old)?.problem ?? '', /parent/);
    assert.match(pins.find((p) => p.snapshot === 'e'.repeat(40))?.problem ?? '', /not a marker commit/);

    const m = await markRoots(repo, now);
    assert.deepEqual(
      m.kept.get(mid)?.map((k) => k.kind),
      ['pin'],
    );
    // keepLast 1 would release `old`, but its (unreadable) pin keeps it on the safe side.
    assert.equal(m.kept.get(old)?.[0].kind, 'pin');
    assert.equal(m.kept.get(newest)?.[0].kind, 'retention');
    assert.deepEqual(m.released, []);
    assert.equal(m.problems.length, 2, m.problems.join('\n'));
    assert.deepEqual(
      (await rootsOf(repo, mid, now)).map((k) => k.name),
      ['keep me'],
    );
    assert.deepEqual(await rootsOf(repo, newest, now), []);

    // An expired pin is no root; the snapshot falls to the policy.
    const expired = await writeMarker(
      'pin',
      {
        schema: 'xet.pin/v1',
        snapshot: mid,
        reason: 'short',
        until: isoSeconds(new Date(now.getTime() - 1000)),
        createdAt: isoSeconds(new Date(now.getTime() - 60_000)),
      },
      repo.objectFormat,
      opts,
    );
    r.git('update-ref', `refs/xet/pins/${mid}`, expired);
    r.git('update-ref', '-d', `refs/xet/pins/${old}`);
    const m2 = await markRoots(repo, now);
    assert.deepEqual(
      m2.expiredPins.map((p) => p.snapshot),
      [mid],
    );
    assert.deepEqual(m2.released.map((x) => x.oid).sort(), [old, mid].sort());
  } finally {
    sb.cleanup();
  }
});

test('marking groups snapshots by worktree and reads each worktree its own retention policy', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { a: '1' });
    r.git('config', 'extensions.worktreeConfig', 'true');
    r.git('worktree', 'add', '-q', sb.path('wt'));
    r.git('config', 'xet.gc.keepUnpushed', 'false');
    r.git('config', '--worktree', 'xet.retention.keepLast', '1');
    const main = [capture(sb, r.dir), (r.write('a', '2'), capture(sb, r.dir))];
    fs.writeFileSync(sb.path('wt', 'b'), 'b');
    const wt = [capture(sb, sb.path('wt')), (fs.writeFileSync(sb.path('wt', 'b'), 'c'), capture(sb, sb.path('wt')))];
    const repo = await findRepo(r.dir);
    // The linked worktree has no policy of its own (per-worktree config): nothing of it is released.
    const m = await markRoots(repo, new Date());
    assert.deepEqual(
      m.released.map((x) => x.oid),
      [main[0]],
    );
    assert.equal(m.kept.get(main[1])?.[0].name, 'keepLast 1');
    for (const s of wt) assert.equal(m.kept.get(s)?.[0].kind, 'no-policy');
    // With keepUnpushed (the default) an unpushed snapshot is kept by that rule instead.
    r.git('config', '--unset', 'xet.gc.keepUnpushed');
    const m2 = await markRoots(repo, new Date());
    assert.deepEqual(m2.released, []);
    assert.equal(m2.kept.get(main[0])?.[0].kind, 'unpushed');
    // A tracking ref from a remote counts as pushed.
    r.git('update-ref', `refs/remotes/origin/xet/snapshots/${main[0]}`, main[0]);
    const m3 = await markRoots(repo, new Date());
    assert.deepEqual(
      m3.released.map((x) => x.oid),
      [main[0]],
    );
    // Losing the sidecar loses no group: the manifests say where each snapshot was captured.
    fs.rmSync(path.join(r.commonDir(), 'xet', 'xet.db'));
    const m4 = await markRoots(repo, new Date());
    assert.deepEqual(
      m4.released.map((x) => x.oid),
      [main[0]],
    );
  } finally {
    sb.cleanup();
  }
});

test('objects lock: shared holders exclude gc, gc excludes them, and a SIGKILLed holder frees it', async () => {
  const sb = createSandbox();
  const children: import('node:child_process').ChildProcess[] = [];
  try {
    const common = sb.path('common');
    fs.mkdirSync(common);
    const a = holdObjectsShared(common);
    const b = holdObjectsShared(common); // re-entrant in one process
    a.release();
    const lockModule = path.resolve(__dirname, '..', 'src', 'gc', 'objects-lock.js');
    const holder = (fn: string) => {
      const child = spawn(process.execPath, [
        '-e',
        // keep a reference: an unreachable lock is closed (and released) by the garbage collector
        `globalThis.lock = require(${JSON.stringify(lockModule)}).${fn}(${JSON.stringify(common)}); console.log('held'); setTimeout(() => {}, 60000)`,
      ]);
      children.push(child);
      return {
        child,
        held: new Promise<void>((res) => child.stdout.once('data', () => res())),
        exited: new Promise((r) => child.once('exit', r)),
      };
    };
    // This process still holds it shared (b): another process's gc must wait, then give up.
    const other = holder('holdObjectsShared');
    await other.held;
    b.release();
    let waited = false;
    assert.equal(
      codeOf(() =>
        holdObjectsExclusive(
          common,
          () => {
            waited = true;
          },
          300,
        ),
      ),
      'BUSY',
    );
    assert.ok(waited, 'the exclusive taker says it waits');
    other.child.kill('SIGKILL');
    await other.exited;
    holdObjectsExclusive(common, undefined, 2000).release();
    // A gc in another process holds it: a capture (shared) waits and gives up; after its death, goes.
    const gc = holder('holdObjectsExclusive');
    await gc.held;
    assert.equal(
      codeOf(() => holdObjectsShared(common, undefined, 300)),
      'BUSY',
    );
    gc.child.kill('SIGKILL');
    await gc.exited;
    holdObjectsShared(common, undefined, 2000).release();
  } finally {
    for (const c of children) c.kill('SIGKILL');
    sb.cleanup();
  }
});

test('a capture never stores against a files tree whose snapshot nothing holds any more (its blobs may be gone)', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { 'tracked.txt': 'tracked\n' });
    r.write('untracked.txt', 'first\n');
    capture(sb, r.dir);
    r.write('untracked.txt', 'second\n');
    const s2 = capture(sb, r.dir);
    const filesTree = r.git('rev-parse', `${s2}:files`).trim();
    const rawTree = execFileSync('git', ['cat-file', 'tree', filesTree], { cwd: r.dir, env: sb.env });
    // What a collector can leave behind: the snapshot refs gone, what they alone reached pruned,
    // except the files tree itself (objects expire by their own age, not as a set).
    for (const ref of r.git('for-each-ref', '--format=%(refname)', 'refs/xet/').trim().split('\n')) {
      r.git('update-ref', '-d', ref);
    }
    r.git('repack', '-a', '-d', '-q');
    r.git('prune', '--expire=now');
    assert.notEqual(r.gitTry('cat-file', '-e', filesTree).status, 0, 'fixture: the tree is pruned');
    const back = execFileSync('git', ['hash-object', '-t', 'tree', '-w', '--stdin'], {
      cwd: r.dir,
      env: sb.env,
      input: rawTree,
    })
      .toString()
      .trim();
    assert.equal(back, filesTree);
    assert.notEqual(r.gitTry('rev-list', '--objects', filesTree).status, 0, 'fixture: its blobs are gone');
    // Nothing changed on disk: the stat cache knows every file, the sidecar names that tree.
    const s3 = capture(sb, r.dir);
    assert.equal(r.gitTry('rev-list', '--objects', s3).status, 0, 'every object the new snapshot names exists');
    assert.equal(r.gitTry('fsck', '--no-dangling', '--connectivity-only').status, 0);
    restore(sb, r.dir, s3, sb.path('copy'));
    assert.equal(fs.readFileSync(sb.path('copy', 'untracked.txt'), 'utf8'), 'second\n');
  } finally {
    sb.cleanup();
  }
});

test('a fork made of a dropped snapshot keeps it: gc never reclaims a root, even one only a fork holds', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { 'a.txt': 'a\n' });
    r.write('work.txt', 'untracked work\n');
    const snap = capture(sb, r.dir);
    const drop = xet(sb, r.dir, ['drop', snap, '--json']);
    assert.equal(drop.status, 0, drop.stderr);
    const fork = xet(sb, r.dir, ['fork', snap, sb.path('fork'), '--mode', 'copy', '--json']);
    assert.equal(fork.status, 0, fork.stderr);
    for (let i = 0; i < 2; i++) {
      const gc = xet(sb, r.dir, ['gc', '--grace', '0', '--json']);
      assert.equal(gc.status, 0, gc.stderr);
      const out = parseJson(gc);
      assert.ok(!out.refs.deleted.some((d: { snapshot: string }) => d.snapshot === snap), JSON.stringify(out.refs));
      assert.deepEqual(
        out.kept.find((k: { snapshot: string }) => k.snapshot === snap)?.keepers.map((k: { kind: string }) => k.kind),
        ['fork'],
      );
    }
    assert.equal(r.gitTry('rev-list', '--objects', snap).status, 0, 'every object of the fork snapshot is here');
    const changes = xet(sb, r.dir, ['changes', sb.path('fork'), '--json']);
    assert.equal(changes.status, 0, changes.stderr);
  } finally {
    sb.cleanup();
  }
});

test("the grace follows gc.pruneExpire in any form git accepts (a date, 'yesterday'), and refuses what git refuses", async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    const repo = await findRepo(r.dir);
    r.git('config', 'gc.pruneExpire', 'yesterday');
    const y = await resolveGrace(repo, undefined);
    assert.equal(y.from, 'gc.pruneExpire');
    assert.ok(Math.abs(y.seconds - 86400) < 120, String(y.seconds));
    r.git('config', 'gc.pruneExpire', '3.days.ago');
    assert.equal((await resolveGrace(repo, undefined)).seconds, 3 * 86400);
    r.git('config', 'gc.pruneExpire', 'no such time');
    await assert.rejects(resolveGrace(repo, undefined), (e: unknown) => isXetError(e, 'CONFIG_INVALID'));
    r.git('config', 'xet.gc.grace', '1h');
    assert.deepEqual(await resolveGrace(repo, undefined), { seconds: 3600, from: 'xet.gc.grace' });
  } finally {
    sb.cleanup();
  }
});

test('gc of a partial clone (promisor packs) does what git gc does: the object store does not grow, the snapshots stay whole', () => {
  const sb = createSandbox();
  try {
    const up = initRepo(sb, 'upstream');
    for (let i = 0; i < 5; i++)
      up.commit(`c${i}`, { [`f${i}.bin`]: Buffer.alloc(200_000, i + 1), 'log.txt': `${i}\n` });
    up.git('config', 'uploadpack.allowFilter', 'true');
    execFileSync('git', ['clone', '-q', '--filter=blob:none', `file://${up.dir}`, sb.path('partial')], { env: sb.env });
    const dir = sb.path('partial');
    // Loose and packed, in KiB as git counts them.
    const packs = () => {
      const v = Object.fromEntries(
        execFileSync('git', ['count-objects', '-v'], { cwd: dir, env: sb.env })
          .toString()
          .trim()
          .split('\n')
          .map((l) => l.split(': ')),
      );
      return Number(v.size) + Number(v['size-pack']);
    };
    assert.ok(
      fs.readdirSync(path.join(dir, '.git', 'objects', 'pack')).some((n) => n.endsWith('.promisor')),
      'fixture: a promisor pack',
    );
    fs.writeFileSync(path.join(dir, 'work.txt'), 'one\n');
    const a = capture(sb, dir);
    fs.writeFileSync(path.join(dir, 'work.txt'), 'two\n');
    const b = capture(sb, dir);
    assert.equal(xet(sb, dir, ['drop', a, '--json']).status, 0);
    const before = packs();
    for (const grace of ['2w', '0']) {
      const gc = xet(sb, dir, ['gc', '--grace', grace, '--json']);
      assert.equal(gc.status, 0, gc.stderr);
    }
    assert.ok(packs() <= before * 1.1, `packs grew from ${before} to ${packs()} bytes`);
    assert.equal(
      execFileSync('git', ['rev-list', '--objects', '--missing=print', `${b}^{tree}`], { cwd: dir, env: sb.env })
        .toString()
        .includes('?'),
      false,
    );
    restore(sb, dir, b, sb.path('copy'));
    assert.equal(fs.readFileSync(sb.path('copy', 'work.txt'), 'utf8'), 'two\n');
  } finally {
    sb.cleanup();
  }
});

test('git xet fetch imports again what a local gc took, even when the snapshot commit itself survived', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { 'a.txt': 'a\n' });
    r.write('big.bin', Buffer.alloc(50_000, 7));
    const snap = capture(sb, r.dir);
    r.git('remote', 'add', 'st', `xet::${sb.path('store')}`);
    assert.equal(xet(sb, r.dir, ['push', 'st', snap, '--json']).status, 0);
    // A fetch records the store's packs as imported here.
    assert.equal(xet(sb, r.dir, ['fetch', 'st', '--json']).status, 0);
    const rawCommit = execFileSync('git', ['cat-file', 'commit', snap], { cwd: r.dir, env: sb.env });
    // A local gc took the snapshot and all it alone reached; only its commit object is left.
    for (const ref of r.git('for-each-ref', '--format=%(refname)', 'refs/xet/', 'refs/remotes/').trim().split('\n')) {
      if (ref) r.git('update-ref', '-d', ref);
    }
    r.git('repack', '-a', '-d', '-q');
    r.git('prune', '--expire=now');
    const back = execFileSync('git', ['hash-object', '-t', 'commit', '-w', '--stdin'], {
      cwd: r.dir,
      env: sb.env,
      input: rawCommit,
    })
      .toString()
      .trim();
    assert.equal(back, snap);
    assert.notEqual(r.gitTry('rev-list', '--objects', snap).status, 0, 'fixture: its tree is gone');
    const fetched = xet(sb, r.dir, ['fetch', 'st', '--json']);
    assert.equal(fetched.status, 0, fetched.stdout + fetched.stderr);
    assert.equal(r.gitTry('rev-list', '--objects', snap).status, 0, 'whole again');
    restore(sb, r.dir, snap, sb.path('copy'));
    assert.equal(fs.statSync(sb.path('copy', 'big.bin')).size, 50_000);
  } finally {
    sb.cleanup();
  }
});
