// Store gc and deleting on a store: snapshot refs deleted by a plain `git push :<ref>` and by
// dropOnRemote (refused while the store pins them), pins that move, handoffs that stay; orphan
// packs of a killed push removed only after the grace; compaction into one pack; a fetch from a
// collected store gets every retained ref and restores and verifies; fsck --store stays clean; a dry
// run changes nothing. Store gc and drop --remote run as processes (test/support/store-gc-run.ts).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { once } from 'node:events';
import { test } from 'node:test';
import { gitTry, initRepo, type Repo } from './support/git';
import { dirSnapshot, lsRemote, readStateLog } from './support/remote';
import { withSandbox, type Sandbox } from './support/sandbox';
import { assertStoreWhole, describeTool, gcOk, packFiles, tool } from './support/store-gc';
import { capture, expectExit, parseJson, verify, xet } from './support/xet';

const DAY = 86400_000;

function pushOk(sb: Sandbox, r: Repo, args: string[], env: NodeJS.ProcessEnv = {}): string {
  const res = gitTry(sb, r.dir, ['push', ...args], { env });
  assert.equal(res.status, 0, `git push ${args.join(' ')}: ${res.stderr.toString()}`);
  return res.stderr.toString();
}

function pushFails(sb: Sandbox, r: Repo, args: string[]): string {
  const res = gitTry(sb, r.dir, ['push', ...args]);
  assert.notEqual(res.status, 0, `git push ${args.join(' ')} should fail`);
  return res.stderr.toString();
}

/** A repository with remote `st` = a xet store holding main and two snapshots (each pushed on its
 * own: several packs). */
function seeded(sb: Sandbox): { r: Repo; store: string; s1: string; s2: string } {
  const r = initRepo(sb, 'src', ['-b', 'main']);
  r.commit('one', { 'a.txt': 'a\n', 'big.txt': 'x'.repeat(5000) });
  const store = sb.path('store');
  r.git('remote', 'add', 'st', `xet::${store}`);
  pushOk(sb, r, ['-q', 'st', 'main']);
  r.write('scratch-1.txt', 'first untracked\n');
  const s1 = capture(sb, r.dir);
  expectExit(xet(sb, r.dir, ['push', 'st', s1, '--json']), 0);
  r.write('scratch-2.txt', 'second untracked\n');
  const s2 = capture(sb, r.dir);
  expectExit(xet(sb, r.dir, ['push', 'st', s2, '--json']), 0);
  return { r, store, s1, s2 };
}

const newest = (store: string) => {
  const log = readStateLog(store);
  return log[log.length - 1].outer.state;
};

test('a plain git push deletes a snapshot ref on a store, never a handoff ref, and not a pinned snapshot', () =>
  withSandbox((sb) => {
    const { r, store, s1, s2 } = seeded(sb);
    const url = `xet::${store}`;
    pushOk(sb, r, ['-q', url, `:refs/xet/snapshots/${s1}`]);
    assert.equal(lsRemote(sb, r.dir, url).has(`refs/xet/snapshots/${s1}`), false);
    assert.equal(lsRemote(sb, r.dir, url).get(`refs/xet/snapshots/${s2}`), s2);
    // Still create-once: never moved to another commit.
    assert.match(pushFails(sb, r, [url, `+main:refs/xet/snapshots/${s2}`]), /already exists/);
    // A handoff ref is create-once and never deleted by a push.
    const main = r.git('rev-parse', 'main').trim();
    pushOk(sb, r, ['-q', url, `main:refs/xet/handoffs/${'ab'.repeat(32)}`]);
    assert.match(pushFails(sb, r, [url, `:refs/xet/handoffs/${'ab'.repeat(32)}`]), /create-once ref cannot be deleted/);
    // A pin keeps its snapshot: deleting the snapshot alone is refused, with the pin it is not.
    pushOk(sb, r, ['-q', url, `${s2}:refs/xet/pins/${s2}`]);
    assert.match(pushFails(sb, r, [url, `:refs/xet/snapshots/${s2}`]), /snapshot is pinned on the store/);
    assert.equal(lsRemote(sb, r.dir, url).get(`refs/xet/snapshots/${s2}`), s2);
    pushOk(sb, r, ['-q', url, `:refs/xet/pins/${s2}`, `:refs/xet/snapshots/${s2}`]);
    const left = lsRemote(sb, r.dir, url);
    assert.equal(left.has(`refs/xet/snapshots/${s2}`), false);
    assert.equal(left.get(`refs/xet/handoffs/${'ab'.repeat(32)}`), main);
  }));

test('pins on a store are mutable: moved to an unrelated commit (a new marker), then deleted', () =>
  withSandbox((sb) => {
    const { r, store, s1, s2 } = seeded(sb);
    const url = `xet::${store}`;
    const pin = `refs/xet/pins/${s1}`;
    pushOk(sb, r, ['-q', url, `${s1}:${pin}`]);
    // s2 is no descendant of s1 (snapshots are siblings): git and the helper both let the pin move.
    assert.notEqual(gitTry(sb, r.dir, ['merge-base', '--is-ancestor', s1, s2]).status, 0);
    pushOk(sb, r, ['-q', url, `+${s2}:${pin}`]);
    assert.equal(lsRemote(sb, r.dir, url).get(pin), s2);
    // A lease still applies: a stale expectation is refused.
    const stale = gitTry(sb, r.dir, ['push', `--force-with-lease=${pin}:${s1}`, url, `+${s1}:${pin}`]);
    assert.notEqual(stale.status, 0, 'a stale lease on a pin is refused');
    assert.match(stale.stderr.toString(), /stale info/);
    pushOk(sb, r, ['-q', url, `:${pin}`]);
    assert.equal(lsRemote(sb, r.dir, url).has(pin), false);
  }));

test('dropOnRemote deletes snapshot refs on a store and on a Git server, refuses a pinned one (SNAPSHOT_RETAINED)', () =>
  withSandbox((sb) => {
    const { r, store, s1, s2 } = seeded(sb);
    // git xet fetch tracks the store's refs under refs/remotes/st/xet/.
    expectExit(xet(sb, r.dir, ['fetch', 'st', '--json']), 0);
    assert.equal(r.git('rev-parse', `refs/remotes/st/xet/snapshots/${s1}`).trim(), s1);
    pushOk(sb, r, ['-q', 'st', `${s2}:refs/xet/pins/${s2}`]);
    const before = dirSnapshot(store);
    const refused = tool(sb, r.dir, ['drop', 'st', s1.slice(0, 8), s2.slice(0, 8)]);
    assert.equal(refused.status, 3, describeTool(refused));
    assert.equal(refused.json.error.code, 'SNAPSHOT_RETAINED');
    assert.deepEqual(refused.json.error.details.roots, [{ kind: 'pin', name: `refs/xet/pins/${s2}` }]);
    assert.deepEqual(dirSnapshot(store), before, 'nothing was dropped: all ids are checked first');
    const unknown = tool(sb, r.dir, ['drop', 'st', 'dead']);
    assert.equal(unknown.json?.error?.code, 'SNAPSHOT_NOT_FOUND', describeTool(unknown));

    const done = tool(sb, r.dir, ['drop', 'st', s1.slice(0, 10)]);
    assert.equal(done.status, 0, describeTool(done));
    assert.deepEqual(done.json.dropped, [{ snapshot: s1, ref: `refs/xet/snapshots/${s1}` }]);
    assert.equal(done.json.kind, 'xet');
    assert.equal(lsRemote(sb, r.dir, `xet::${store}`).has(`refs/xet/snapshots/${s1}`), false);
    assert.equal(
      gitTry(sb, r.dir, ['rev-parse', '-q', '--verify', `refs/remotes/st/xet/snapshots/${s1}`]).status,
      1,
      'the tracking ref went too: the snapshot is no longer pushed there',
    );
    assert.equal(r.git('rev-parse', `refs/xet/snapshots/${s1}`).trim(), s1, 'the local snapshot stays');
    // A re-run (a lost reply) finds it gone: reported, not an error.
    const again = tool(sb, r.dir, ['drop', 'st', s1]);
    assert.equal(again.status, 0, describeTool(again));
    assert.deepEqual([again.json.dropped, again.json.absent], [[], [s1]]);

    // A Git server: the same, under a lease.
    const bare = sb.path('server.git');
    gitTry(sb, sb.root, ['init', '-q', '--bare', bare]);
    r.git('remote', 'add', 'srv', bare);
    expectExit(xet(sb, r.dir, ['push', 'srv', '--json']), 0);
    const onServer = tool(sb, r.dir, ['drop', 'srv', s1]);
    assert.equal(onServer.status, 0, describeTool(onServer));
    assert.equal(onServer.json.kind, 'git');
    assert.equal(gitTry(sb, bare, ['rev-parse', '-q', '--verify', `refs/xet/snapshots/${s1}`]).status, 1);
    assert.equal(gitTry(sb, bare, ['rev-parse', '-q', '--verify', `refs/xet/snapshots/${s2}`]).status, 0);
  }));

test('orphan packs of a killed push stay within the grace and go after it; its intent is removed', () =>
  withSandbox((sb) => {
    const { r, store } = seeded(sb);
    r.commit('lost', { 'lost.txt': 'a push that never published\n' });
    const killed = gitTry(sb, r.dir, ['push', 'st', 'main'], { env: { GIT_XET_TEST_DIE_AT: 'after-pack' } });
    assert.notEqual(killed.status, 0);
    const named = new Set(newest(store).packs);
    const orphans = packFiles(store).filter((p) => !named.has(p));
    assert.equal(orphans.length, 1, 'the killed push left one pack no state names');
    assert.equal(fs.readdirSync(path.join(store, 'pushing')).length, 1, 'and its intent');

    const within = gcOk(sb, r.dir, store);
    assert.equal(within.graceSeconds, 28 * 86400, 'the default grace is 28 days');
    assert.deepEqual(within.packs.deleted, []);
    assert.deepEqual(
      within.packs.kept
        .filter((k: { why: string }) => k.why === 'orphan')
        .map((k: { name: string; reason: string; why: string }) => [k.name, k.reason, k.why]),
      [[orphans[0], 'grace', 'orphan']],
    );
    assert.equal(within.packs.kept.length, named.size + 1, 'the packs the compaction superseded stay too');
    assert.ok(packFiles(store).includes(orphans[0]));
    assert.equal(within.intents.removed, 1, "the dead push's intent goes at once (its process is gone)");

    const later = gcOk(sb, r.dir, store, ['--now', new Date(Date.now() + 29 * DAY).toISOString()]);
    assert.ok(
      later.packs.deleted.some((p: { name: string; why: string }) => p.name === orphans[0] && p.why === 'orphan'),
      JSON.stringify(later.packs),
    );
    assert.equal(packFiles(store).includes(orphans[0]), false);
    assert.ok(later.bytes.reclaimed > 0);
    assertStoreWhole(sb, r.dir, store);
    // A push after the gc works as before.
    pushOk(sb, r, ['-q', 'st', 'main']);
    assertStoreWhole(sb, r.dir, store);
  }));

test('compaction: one pack of what the refs reach, a gc state, old packs gone after the grace; a clone restores and verifies', () =>
  withSandbox((sb) => {
    const { r, store, s1, s2 } = seeded(sb);
    pushOk(sb, r, ['-q', 'st', `:refs/xet/snapshots/${s1}`]);
    const before = newest(store);
    assert.ok(before.packs.length >= 3, `several packs: ${before.packs.length}`);
    const refsBefore = lsRemote(sb, r.dir, `xet::${store}`);

    const out = gcOk(sb, r.dir, store, ['--grace', '0']);
    const after = newest(store);
    assert.equal(after.pushId, out.id);
    assert.match(out.id, /^gc-[0-9a-f]{16}$/);
    assert.deepEqual(after.packs, [out.packs.compacted]);
    assert.deepEqual(after.refs, before.refs, 'every ref stays');
    assert.deepEqual(packFiles(store), [out.packs.compacted], 'with --grace 0 the old packs are deleted at once');
    assert.ok(out.objects.after < out.objects.before, "the deleted snapshot's own objects went");
    assert.deepEqual(
      out.packs.deleted.map((p: { why: string }) => p.why),
      before.packs.map(() => 'superseded'),
    );
    const check = assertStoreWhole(sb, r.dir, store);
    assert.deepEqual(check.unreferencedPacks, []);
    assert.deepEqual(check.trashedPacks, []);
    assert.deepEqual(fs.readdirSync(path.join(store, 'trash')), []);

    // Nothing more to do the second time.
    const idle = gcOk(sb, r.dir, store, ['--grace', '0']);
    assert.equal(idle.published, null);
    assert.equal(readStateLog(store).length, after.seq);

    // A clone gets every retained ref; the snapshot restores and verifies.
    const c = sb.path('clone');
    assert.equal(gitTry(sb, sb.root, ['clone', '-q', `xet::${store}`, c]).status, 0);
    expectExit(xet(sb, c, ['fetch', 'origin', '--json']), 0);
    const refsAfter = lsRemote(sb, c, `xet::${store}`);
    assert.deepEqual([...refsAfter].sort(), [...refsBefore].sort());
    assert.equal(gitTry(sb, c, ['fsck', '--no-dangling']).status, 0);
    const target = sb.path('restored');
    expectExit(xet(sb, c, ['restore', s2, target, '--json']), 0);
    const v = verify(sb, c, s2, target);
    expectExit(v, 0);
    assert.equal(parseJson(v).ok, true);
    assert.equal(fs.readFileSync(path.join(target, 'scratch-2.txt'), 'utf8'), 'second untracked\n');
  }));

test('store gc keeps old packs within the grace after compaction, and a dry run lists what would go and changes nothing', () =>
  withSandbox((sb) => {
    const { r, store } = seeded(sb);
    const n = newest(store).packs.length;
    const frozen = dirSnapshot(store);
    const dry = gcOk(sb, r.dir, store, ['--dry-run', '--grace', '0']);
    assert.equal(dry.dryRun, true);
    assert.equal(dry.published, null);
    assert.deepEqual([dry.packs.before, dry.packs.after], [n, 1]);
    assert.equal(dry.packs.deleted.length, n, 'with --grace 0 every old pack would go after compaction');
    assert.ok(dry.bytes.reclaimed > 0);
    assert.deepEqual(dirSnapshot(store), frozen, 'a dry run writes nothing');

    const kept = gcOk(sb, r.dir, store); // default grace: compacts, deletes nothing yet
    assert.notEqual(kept.published, null);
    assert.deepEqual(kept.packs.deleted, []);
    assert.equal(kept.packs.kept.length, n);
    assert.equal(packFiles(store).length, n + 1);
    assertStoreWhole(sb, r.dir, store);
    const dryLater = gcOk(sb, r.dir, store, ['--dry-run', '--now', new Date(Date.now() + 29 * DAY).toISOString()]);
    assert.equal(dryLater.packs.deleted.length, n);
    assert.equal(packFiles(store).length, n + 1, 'still nothing deleted by the dry run');
    gcOk(sb, r.dir, store, ['--now', new Date(Date.now() + 29 * DAY).toISOString()]);
    assert.equal(packFiles(store).length, 1);
    assertStoreWhole(sb, r.dir, store);
  }));

test('store gc removes a handoff ref once its expiry is older than the grace, and keeps an unexpired one', () =>
  withSandbox((sb) => {
    const { r, store, s2 } = seeded(sb);
    const mk = (expires: string[]) => {
      const res = xet(sb, r.dir, [
        'handoff',
        'create',
        s2,
        '--from',
        'a',
        '--to',
        'b',
        '--title',
        `t ${expires.join('')}`,
        ...expires,
        '--json',
      ]);
      expectExit(res, 0);
      return parseJson(res).id as string;
    };
    const short = mk(['--expires', '1h']);
    const forever = mk([]);
    expectExit(xet(sb, r.dir, ['push', 'st', '--json']), 0);
    const refs = () => Object.keys(newest(store).refs);
    assert.ok(refs().includes(`refs/xet/handoffs/${short}`));
    const soon = gcOk(sb, r.dir, store, ['--now', new Date(Date.now() + 2 * DAY).toISOString()]);
    assert.deepEqual(soon.refs.removed, [], 'expired, but not for longer than the 28-day grace');
    const later = gcOk(sb, r.dir, store, ['--now', new Date(Date.now() + 30 * DAY).toISOString()]);
    assert.deepEqual(
      later.refs.removed.map((x: { ref: string }) => x.ref),
      [`refs/xet/handoffs/${short}`],
    );
    assert.equal(refs().includes(`refs/xet/handoffs/${short}`), false);
    assert.ok(refs().includes(`refs/xet/handoffs/${forever}`));
    assert.ok(refs().includes(`refs/xet/snapshots/${s2}`), 'its snapshot is a ref of its own and stays');
    assertStoreWhole(sb, r.dir, store);
  }));

test("store gc removes a dead gc's scratch from the temporary directory, never a live one's, a young one or an unowned one under a day old", () =>
  withSandbox(async (sb) => {
    const { r, store } = seeded(sb);
    const tmp = sb.path('tmp');
    fs.mkdirSync(tmp);
    const scratch = (name: string, owner: boolean, ageMs: number): string => {
      const dir = path.join(tmp, `xet-store-gc-${name}`);
      fs.mkdirSync(path.join(dir, 'objects', 'pack'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'objects', 'pack', 'pack-copy.pack'), 'a copy of a store pack');
      if (owner) fs.writeFileSync(path.join(dir, 'owner.lockdb'), '');
      const t = new Date(Date.now() - ageMs);
      fs.utimesSync(dir, t, t);
      return dir;
    };
    const dead = scratch('dead', true, 3600_000);
    // Without an owner lock (an older build's): taken for dead only a day old.
    const bare = scratch('bare', false, 25 * 3600_000);
    const unowned = scratch('unowned', false, 3600_000);
    const young = scratch('young', true, 0);
    const live = scratch('live', true, 3600_000);
    // Another process holds the live one's lock, as its gc would (a SQLite write transaction).
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require(${JSON.stringify(require.resolve('better-sqlite3'))}))(process.argv[1]);
         db.pragma('journal_mode = DELETE'); db.exec('BEGIN IMMEDIATE'); process.stdout.write('held\\n');
         process.stdin.resume(); process.stdin.on('end', () => process.exit(0));`,
        path.join(live, 'owner.lockdb'),
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      const first = await Promise.race([
        once(holder.stdout!, 'data').then(([d]) => String(d)),
        once(holder, 'exit').then(([code]) => `exited with ${code}`),
      ]);
      assert.equal(first, 'held\n');
      const t = new Date(Date.now() - 3600_000);
      fs.utimesSync(live, t, t);
      // A dry run changes nothing, here either.
      gcOk(sb, r.dir, store, ['--dry-run'], { TMPDIR: tmp });
      assert.equal(fs.readdirSync(tmp).length, 5);
      gcOk(sb, r.dir, store, [], { TMPDIR: tmp });
      assert.deepEqual(fs.readdirSync(tmp).sort(), ['xet-store-gc-live', 'xet-store-gc-unowned', 'xet-store-gc-young']);
      assert.ok(!fs.existsSync(dead) && !fs.existsSync(bare) && fs.existsSync(unowned));
      assert.ok(fs.existsSync(path.join(young, 'objects', 'pack', 'pack-copy.pack')));
      assert.ok(fs.existsSync(path.join(live, 'objects', 'pack', 'pack-copy.pack')));
    } finally {
      holder.stdin!.end();
      await once(holder, 'exit');
    }
    // Once its holder has gone, the next gc takes it.
    const t = new Date(Date.now() - 3600_000);
    fs.utimesSync(live, t, t);
    gcOk(sb, r.dir, store, [], { TMPDIR: tmp });
    assert.deepEqual(fs.readdirSync(tmp).sort(), ['xet-store-gc-unowned', 'xet-store-gc-young']);
  }));
