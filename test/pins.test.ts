// Pins, drop and undrop through the real CLI: pins live in refs (the sidecar is a cache, and losing
// it loses no pin), drop refuses every kind of root by name and writes nothing then, drop and undrop
// move one snapshot's refs in one transaction, undrop works from gc's record while every object is
// still here and says SNAPSHOT_RECLAIMED once they are gone.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { pausedAt } from './support/faults';
import { git, gitTry, initRepo, type Repo } from './support/git';
import { assertVerifies } from './support/roundtrip';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, restore, xet } from './support/xet';

function source(sb: Sandbox, name = 'src'): { r: Repo; snap: string } {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n' });
  r.write('untracked.txt', `only in the snapshot ${name}\n`);
  return { r, snap: capture(sb, r.dir) };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(sb: Sandbox, cwd: string, args: string[], exit = 0): any {
  const res = xet(sb, cwd, [...args, '--json']);
  expectExit(res, exit);
  return parseJson(res);
}

const xetRefs = (r: Repo) => r.git('for-each-ref', '--format=%(refname) %(objectname)', 'refs/xet/');
const looseObjects = (r: Repo) => /^count: (\d+)/m.exec(r.git('count-objects', '-v'))?.[1];
const sidecar = (r: Repo) => path.join(r.commonDir(), 'xet', 'xet.db');

function fsckClean(r: Repo): void {
  const res = gitTry(r.sb, r.dir, ['fsck', '--no-dangling', '--no-progress']);
  assert.equal(res.status, 0, `git fsck: ${res.stdout}${res.stderr}`);
}

/** What gc does to a dropped snapshot after the grace: delete its dropped ref, record the deletion. */
let gcRuns = 0;
function gcDeletesDroppedRef(r: Repo, snap: string): void {
  r.git('update-ref', '-d', `refs/xet/dropped/${snap}`);
  const db = new Database(sidecar(r));
  const run = `run-${++gcRuns}`;
  try {
    db.prepare(
      `INSERT INTO gc_runs(id, target, pid, started_at, state) VALUES (?, 'repository', 1, '2026-01-01T00:00:00Z', 'done')`,
    ).run(run);
    db.prepare('INSERT INTO gc_deleted_refs(run_id, ref, oid, deleted_at) VALUES (?, ?, ?, ?)').run(
      run,
      `refs/xet/dropped/${snap}`,
      snap,
      new Date().toISOString(),
    );
  } finally {
    db.close();
  }
}

test('pin, re-pin, unpin, pins: the ref is the pin, an identical pin is not rewritten, the sidecar follows', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    const ref = `refs/xet/pins/${snap}`;
    const p1 = json(sb, r.dir, ['pin', snap.slice(0, 7), '--reason', 'release 1', '--until', '2099-01-01']);
    assert.deepEqual(
      [p1.snapshot, p1.ref, p1.reason, p1.until, p1.created, p1.undropped],
      [snap, ref, 'release 1', '2099-01-01T00:00:00Z', true, false],
    );
    assert.equal(r.git('rev-parse', ref).trim(), p1.commit);
    // The marker: one parent (the snapshot), exactly pin.json in its tree.
    assert.equal(r.git('rev-parse', `${ref}^`).trim(), snap);
    assert.equal(r.git('ls-tree', '--name-only', ref).trim(), 'pin.json');
    const record = JSON.parse(r.git('cat-file', 'blob', `${ref}:pin.json`));
    assert.deepEqual(record, {
      createdAt: p1.createdAt,
      reason: 'release 1',
      schema: 'xet.pin/v1',
      snapshot: snap,
      until: '2099-01-01T00:00:00Z',
    });
    // The same pin again: nothing rewritten.
    const p2 = json(sb, r.dir, ['pin', snap, '--reason', 'release 1', '--until', '2099-01-01']);
    assert.deepEqual([p2.created, p2.commit], [false, p1.commit]);
    // Another reason and no expiry: the ref is replaced (old value checked), still one pin.
    const p3 = json(sb, r.dir, ['pin', snap, '--reason', 'keep for ever']);
    assert.equal(p3.created, true);
    assert.notEqual(p3.commit, p1.commit);
    assert.equal(p3.until, null);
    const listed = json(sb, r.dir, ['pins']);
    assert.deepEqual(listed.sidecarOnly, []);
    assert.deepEqual(
      listed.pins.map((p: Record<string, unknown>) => [
        p.snapshot,
        p.commit,
        p.reason,
        p.until,
        p.expired,
        p.problem,
        p.sidecar,
      ]),
      [[snap, p3.commit, 'keep for ever', null, false, null, 'same']],
    );
    const snaps = json(sb, r.dir, ['snapshots']).snapshots;
    assert.deepEqual(
      snaps.map((s: { snapshot: string; pinned: boolean }) => [s.snapshot, s.pinned]),
      [[snap, true]],
    );
    assert.match(xet(sb, r.dir, ['snapshots']).stdout, new RegExp(`^${snap.slice(0, 12)} P `, 'm'));
    // status: the pins of this worktree's snapshots.
    const st = json(sb, r.dir, ['status']);
    assert.deepEqual(st.pins, [{ snapshot: snap, reason: 'keep for ever', until: null, expired: false }]);
    const un = json(sb, r.dir, ['unpin', snap.slice(0, 6)]);
    assert.deepEqual([un.snapshot, un.ref, un.commit, un.reason], [snap, ref, p3.commit, 'keep for ever']);
    assert.equal(gitTry(sb, r.dir, ['rev-parse', '-q', '--verify', ref]).status, 1, 'the pin ref is gone');
    assert.deepEqual(json(sb, r.dir, ['pins']), { pins: [], sidecarOnly: [] });
    const again = expectError(xet(sb, r.dir, ['unpin', snap, '--json']), 'NOT_PINNED');
    assert.equal(again.details.snapshot, snap);
    assert.equal(json(sb, r.dir, ['snapshots']).snapshots[0].pinned, false);
    fsckClean(r);
  }));

test('a pin with --until expires: flagged in pins, no longer a root, so drop is allowed', async () =>
  withSandbox(async (sb) => {
    const { r, snap } = source(sb);
    // Long enough for a drop on a loaded machine to start before it expires.
    const p = json(sb, r.dir, ['pin', snap, '--until', '10s', '--reason', 'briefly']);
    assert.ok(Date.parse(p.until) - Date.now() <= 10_000, `until is at most 10 s away: ${p.until}`);
    expectError(xet(sb, r.dir, ['drop', snap, '--json']), 'SNAPSHOT_RETAINED');
    await new Promise((res) => setTimeout(res, Math.max(0, Date.parse(p.until) - Date.now()) + 50));
    const listed = json(sb, r.dir, ['pins']).pins;
    assert.deepEqual(
      listed.map((x: { expired: boolean; reason: string }) => [x.expired, x.reason]),
      [[true, 'briefly']],
    );
    assert.equal(json(sb, r.dir, ['snapshots']).snapshots[0].pinned, false);
    assert.equal(json(sb, r.dir, ['drop', snap]).dropped[0].created, true);
    // The dropped ref gone and the sidecar with it: the expired pin still names the snapshot and
    // keeps its objects, so undrop can bring it back.
    r.git('update-ref', '-d', `refs/xet/dropped/${snap}`);
    fs.rmSync(path.dirname(sidecar(r)), { recursive: true, force: true });
    const u = json(sb, r.dir, ['undrop', snap.slice(0, 10)]).undropped[0];
    assert.deepEqual([u.snapshot, u.from, u.created], [snap, 'collected', true]);
  }));

test('drop refuses a root and names it (a pin, a live fork, an unexpired handoff), writing nothing', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    r.write('second.txt', '2\n');
    const forked = capture(sb, r.dir);
    r.write('third.txt', '3\n');
    const handed = capture(sb, r.dir);
    r.write('fourth.txt', '4\n');
    const free = capture(sb, r.dir);
    json(sb, r.dir, ['pin', snap, '--reason', 'the release']);
    json(sb, r.dir, ['fork', forked, sb.path('fork'), '--mode', 'copy']);
    json(sb, r.dir, ['handoff', 'create', handed, '--to', 'B', '--from', 'A', '--title', 'T', '--expires', '7d']);
    const before = xetRefs(r);
    const loose = looseObjects(r);
    const cases: [string, string, RegExp][] = [
      [snap, 'pin', /the release/],
      [forked, 'fork', /^[0-9a-f]+ at .*fork$/],
      [handed, 'handoff', /^[0-9a-f]{12} "T"$/],
    ];
    for (const [id, kind, name] of cases) {
      // With a free snapshot first: every id is checked before anything happens.
      const e = expectError(xet(sb, r.dir, ['drop', free, id.slice(0, 8), '--json']), 'SNAPSHOT_RETAINED');
      assert.equal(e.details.snapshot, id);
      assert.deepEqual(
        e.details.roots.map((k: { kind: string }) => k.kind),
        [kind],
        JSON.stringify(e.details),
      );
      assert.match(e.details.roots[0].name, name);
      // The message says the kind once, then the name: `fork <id> at <dir>`.
      assert.match(e.message, new RegExp(`\\(${kind} `));
      assert.doesNotMatch(e.message, new RegExp(`${kind} ${kind}`));
    }
    assert.equal(xetRefs(r), before, 'no ref changed');
    assert.equal(looseObjects(r), loose, 'no object written');
    // The free one alone goes.
    assert.equal(json(sb, r.dir, ['drop', free]).dropped[0].snapshot, free);
  }));

test('a pin made while a drop is between its check and its transaction fails the whole drop, naming the pin', async () =>
  withSandbox(async (sb) => {
    const { r, snap } = source(sb);
    r.write('o.txt', 'o\n');
    const other = capture(sb, r.dir);
    const before = xetRefs(r);
    const drop = await pausedAt(sb, r.dir, ['drop', other, snap, '--json'], 'drop:after-check');
    const pin = json(sb, r.dir, ['pin', snap, '--reason', 'just in time']);
    drop.go();
    const { code, stdout } = await drop.done;
    assert.equal(code, 3, stdout);
    const e = JSON.parse(stdout).error;
    assert.deepEqual(
      [e.code, e.details.snapshot, e.details.roots],
      ['SNAPSHOT_RETAINED', snap, [{ kind: 'pin', name: 'just in time' }]],
    );
    const lines = (t: string) => t.split('\n').filter(Boolean).sort();
    assert.deepEqual(lines(xetRefs(r)), lines(`${before}\nrefs/xet/pins/${snap} ${pin.commit}`), 'only the pin is new');
  }));

test('drop then undrop: one transaction each way, the snapshot restores and verifies', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    r.write('more.txt', 'more\n');
    const other = capture(sb, r.dir);
    const d = json(sb, r.dir, ['drop', snap.slice(0, 5), other]);
    assert.deepEqual(
      d.dropped.map((x: Record<string, unknown>) => [x.snapshot, x.ref, x.created]),
      [
        [snap, `refs/xet/dropped/${snap}`, true],
        [other, `refs/xet/dropped/${other}`, true],
      ],
    );
    assert.doesNotMatch(xetRefs(r), /refs\/xet\/snapshots\//, 'no snapshot ref left');
    assert.equal(r.git('rev-parse', `refs/xet/dropped/${snap}^`).trim(), snap);
    assert.deepEqual(JSON.parse(r.git('cat-file', 'blob', `refs/xet/dropped/${snap}:drop.json`)), {
      droppedAt: d.dropped[0].droppedAt,
      reason: 'explicit',
      schema: 'xet.drop/v1',
      snapshot: snap,
    });
    assert.deepEqual(json(sb, r.dir, ['snapshots']).snapshots, []);
    // Dropping again: reported, not rewritten.
    const d2 = json(sb, r.dir, ['drop', snap]);
    assert.deepEqual([d2.dropped[0].created, d2.dropped[0].commit], [false, d.dropped[0].commit]);
    fsckClean(r);
    const u = json(sb, r.dir, ['undrop', snap.slice(0, 6), other]);
    assert.deepEqual(
      u.undropped.map((x: Record<string, unknown>) => [x.snapshot, x.ref, x.from, x.created]),
      [
        [snap, `refs/xet/snapshots/${snap}`, 'dropped', true],
        [other, `refs/xet/snapshots/${other}`, 'dropped', true],
      ],
    );
    assert.doesNotMatch(xetRefs(r), /refs\/xet\/dropped\//);
    assert.equal(json(sb, r.dir, ['undrop', snap]).undropped[0].from, 'retained');
    const copy = sb.path('copy');
    restore(sb, r.dir, snap, copy);
    assertVerifies(sb, r.dir, snap, copy);
    fsckClean(r);
  }));

test('pin of a dropped snapshot brings it back and pins it in one transaction', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    json(sb, r.dir, ['drop', snap]);
    const p = json(sb, r.dir, ['pin', snap.slice(0, 9), '--reason', 'after all']);
    assert.deepEqual([p.created, p.undropped], [true, true]);
    const refs = xetRefs(r);
    assert.match(refs, new RegExp(`refs/xet/snapshots/${snap} ${snap}`));
    assert.match(refs, new RegExp(`refs/xet/pins/${snap} ${p.commit}`));
    assert.doesNotMatch(refs, /refs\/xet\/dropped\//);
    expectError(xet(sb, r.dir, ['drop', snap, '--json']), 'SNAPSHOT_RETAINED');
  }));

test("undrop after gc deleted the dropped ref: from gc's record while every object is here, else SNAPSHOT_RECLAIMED", () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    json(sb, r.dir, ['drop', snap]);
    gcDeletesDroppedRef(r, snap);
    // Known only to the sidecar now: an abbreviated id still finds it.
    const u = json(sb, r.dir, ['undrop', snap.slice(0, 8)]);
    assert.deepEqual([u.undropped[0].snapshot, u.undropped[0].from, u.undropped[0].created], [snap, 'collected', true]);
    const copy = sb.path('copy');
    restore(sb, r.dir, snap, copy);
    assertVerifies(sb, r.dir, snap, copy);
    // Now let Git reclaim it for real.
    json(sb, r.dir, ['drop', snap]);
    gcDeletesDroppedRef(r, snap);
    r.git('gc', '-q', '--prune=now');
    assert.notEqual(gitTry(sb, r.dir, ['cat-file', '-e', snap]).status, 0, 'the snapshot commit is gone');
    const before = xetRefs(r);
    const e = expectError(xet(sb, r.dir, ['undrop', snap, '--json']), 'SNAPSHOT_RECLAIMED');
    assert.equal(e.details.snapshot, snap);
    expectError(xet(sb, r.dir, ['pin', snap, '--json']), 'SNAPSHOT_RECLAIMED');
    assert.equal(xetRefs(r), before, 'nothing written');
    // An id never known here.
    expectError(xet(sb, r.dir, ['undrop', 'deadbeef', '--json']), 'SNAPSHOT_NOT_FOUND');
    fsckClean(r);
  }));

test('bad input: a typed error before anything is written', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    const before = xetRefs(r);
    const loose = looseObjects(r);
    const cases: [string[], string][] = [
      [['pin', snap, '--until', 'tomorrowish'], 'USAGE'],
      [['pin', snap, '--until', '2001-01-01'], 'USAGE'],
      [['pin', snap, '--reason', 'x'.repeat(5000)], 'USAGE'],
      [['pin', 'deadbeef'], 'SNAPSHOT_NOT_FOUND'],
      [['pin', 'main'], 'SNAPSHOT_NOT_FOUND'],
      [['pin', 'zz'], 'SNAPSHOT_NOT_FOUND'],
      [['unpin', snap], 'NOT_PINNED'],
      [['unpin', 'cafe'], 'SNAPSHOT_NOT_FOUND'],
      [['drop'], 'USAGE'],
      [['drop', snap, 'beef'], 'SNAPSHOT_NOT_FOUND'],
      [['undrop'], 'USAGE'],
    ];
    for (const [args, code] of cases) {
      expectError(xet(sb, r.dir, [...args, '--json']), code, code === 'USAGE' ? 2 : 3);
    }
    assert.equal(xetRefs(r), before, 'no ref changed');
    assert.equal(looseObjects(r), loose, 'no object written');
    // A snapshot ref that does not name its own commit is refused by name, as everywhere.
    r.git('update-ref', `refs/xet/snapshots/${'1'.repeat(40)}`, snap);
    expectError(xet(sb, r.dir, ['drop', '1111', '--json']), 'INTEGRITY_MISMATCH');
    // A dropped ref on a commit that is no snapshot (not made by git xet) brings nothing back.
    const head = r.git('rev-parse', 'HEAD').trim();
    r.git('update-ref', `refs/xet/dropped/${head}`, head);
    const refs = xetRefs(r);
    expectError(xet(sb, r.dir, ['undrop', head, '--json']), 'SNAPSHOT_INVALID');
    expectError(xet(sb, r.dir, ['pin', head, '--json']), 'SNAPSHOT_INVALID');
    assert.equal(xetRefs(r), refs, 'nothing written');
  }));

test('losing the sidecar loses no pin; a malformed pin ref is reported, not hidden, and still keeps its snapshot', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    r.write('x.txt', 'x\n');
    const second = capture(sb, r.dir);
    json(sb, r.dir, ['pin', snap, '--reason', 'survives']);
    for (const f of fs.readdirSync(path.dirname(sidecar(r)))) {
      if (f.startsWith('xet.db')) fs.rmSync(path.join(path.dirname(sidecar(r)), f));
    }
    const listed = json(sb, r.dir, ['pins']).pins;
    assert.deepEqual(
      listed.map((p: Record<string, unknown>) => [p.snapshot, p.reason, p.sidecar]),
      [[snap, 'survives', 'missing']],
    );
    const e = expectError(xet(sb, r.dir, ['drop', snap, '--json']), 'SNAPSHOT_RETAINED');
    assert.deepEqual(e.details.roots, [{ kind: 'pin', name: 'survives' }]);
    // Pinning again puts the row back.
    assert.equal(json(sb, r.dir, ['pin', snap, '--reason', 'survives']).created, false);
    assert.equal(json(sb, r.dir, ['pins']).pins[0].sidecar, 'same');
    // A pin ref that is no pin marker (it points at the snapshot itself).
    r.git('update-ref', `refs/xet/pins/${second}`, second);
    const bad = json(sb, r.dir, ['pins']).pins.find((p: { snapshot: string }) => p.snapshot === second);
    assert.ok(bad, 'the malformed pin is listed');
    assert.deepEqual([bad.reason, bad.sidecar], [null, 'missing']);
    assert.match(bad.problem, /parent/);
    assert.match(xet(sb, r.dir, ['pins']).stdout, /MALFORMED/);
    expectError(xet(sb, r.dir, ['drop', second, '--json']), 'SNAPSHOT_RETAINED');
    // unpin removes it like any pin.
    assert.equal(json(sb, r.dir, ['unpin', second]).reason, null);
    // A pin ref naming a snapshot this repository never had (it points at a blob).
    const ghost = 'e'.repeat(40);
    r.git('update-ref', `refs/xet/pins/${ghost}`, r.gitInput('not a pin', 'hash-object', '-w', '--stdin').trim());
    assert.match(
      json(sb, r.dir, ['pins']).pins.find((p: { snapshot: string }) => p.snapshot === ghost).problem,
      /not a marker/,
    );
    expectError(xet(sb, r.dir, ['pin', 'eeee', '--json']), 'SNAPSHOT_NOT_FOUND');
    expectError(xet(sb, r.dir, ['undrop', 'eeee', '--json']), 'SNAPSHOT_NOT_FOUND');
  }));

test('push <id> sends the pin with the snapshot; drop markers are never pushed', () =>
  withSandbox((sb) => {
    const { r, snap } = source(sb);
    r.write('y.txt', 'y\n');
    const dropped = capture(sb, r.dir);
    json(sb, r.dir, ['pin', snap, '--reason', 'on the server too']);
    json(sb, r.dir, ['drop', dropped]);
    const bare = sb.path('server.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    r.git('remote', 'add', 'server', bare);
    const pushed = json(sb, r.dir, ['push', 'server', snap.slice(0, 8)]);
    assert.deepEqual(pushed.refs.map((x: { ref: string }) => x.ref).sort(), [
      `refs/xet/pins/${snap}`,
      `refs/xet/snapshots/${snap}`,
    ]);
    json(sb, r.dir, ['push', 'server']);
    const there = git(sb, bare, ['for-each-ref', '--format=%(refname)', 'refs/xet/']);
    assert.match(there, new RegExp(`refs/xet/pins/${snap}`));
    assert.doesNotMatch(there, /refs\/xet\/dropped\//, 'no drop marker on the server');
    // A re-pin is an update of the remote's pin (the one mutable kind), on a Git server and a xet store.
    const store = sb.path('store');
    r.git('remote', 'add', 'store', `xet::${store}`);
    json(sb, r.dir, ['push', 'store', snap]);
    const repin = json(sb, r.dir, ['pin', snap, '--reason', 'a new reason']).commit;
    for (const remote of ['server', 'store']) {
      const up = json(sb, r.dir, ['push', remote, snap]);
      assert.deepEqual(
        up.refs.map((x: { ref: string; status: string }) => `${x.ref} ${x.status}`).sort(),
        [`refs/xet/pins/${snap} updated`, `refs/xet/snapshots/${snap} up-to-date`],
        remote,
      );
      assert.match(r.git('ls-remote', remote), new RegExp(`^${repin}\trefs/xet/pins/${snap}$`, 'm'));
    }
    // A pin ref that is not a pin of the snapshot its name says is refused before anything is sent.
    r.git('update-ref', `refs/xet/pins/${snap}`, snap);
    expectError(xet(sb, r.dir, ['push', 'server', snap, '--json']), 'INTEGRITY_MISMATCH');
  }));

test('a sha256 repository: pin, drop refused, unpin, drop, pin brings it back (64-hex ids, zero ids)', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'sha256', ['--object-format=sha256']);
    r.commit('c', { 'a.txt': 'a\n' });
    const snap: string = json(sb, r.dir, ['capture']).snapshot;
    assert.match(snap, /^[0-9a-f]{64}$/);
    json(sb, r.dir, ['pin', snap.slice(0, 6)]);
    expectError(xet(sb, r.dir, ['drop', snap, '--json']), 'SNAPSHOT_RETAINED');
    json(sb, r.dir, ['unpin', snap]);
    assert.equal(json(sb, r.dir, ['drop', snap]).dropped[0].created, true);
    assert.equal(json(sb, r.dir, ['pin', snap]).undropped, true);
    fsckClean(r);
  }));
