// Store gc under kills and races, with real processes: a SIGKILL at every store-gc fault point,
// then a converging run; store gc with --grace 0 against 4 concurrent pushers; a push paused
// (fault points) across a whole gc, whose pack was built against refs the gc then dropped; a push
// whose pack a gc trashed while it published re-links it.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { gitTry, initRepo, type Repo } from '../support/git';
import { lsRemote, readStateLog, runAsync } from '../support/remote';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { assertStoreWhole, describeTool, gcOk, packFiles, tool, toolAsync } from '../support/store-gc';
import { capture, expectExit, parseJson, verify, xet } from '../support/xet';
import { DIE_AT_ENV, PAUSE_AT_ENV, PAUSE_DIR_ENV } from '../../src/testing/fault-points';

const GC_POINTS = ['gc-store:after-pack', 'gc-store:after-state', 'gc-store:after-trash'] as const;

function pushOk(sb: Sandbox, r: Repo, args: string[]): void {
  const res = gitTry(sb, r.dir, ['push', ...args]);
  assert.equal(res.status, 0, `git push ${args.join(' ')}: ${res.stderr.toString()}`);
}

const newest = (store: string) => {
  const log = readStateLog(store);
  return log[log.length - 1].outer.state;
};

async function waitFor(file: string, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  while (!fs.existsSync(file)) {
    if (Date.now() > until) throw new Error(`${file} never appeared`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A store with main, a deleted snapshot (garbage for the gc) and a kept one, in several packs. */
function seeded(sb: Sandbox, name: string): { r: Repo; store: string; kept: string } {
  const r = initRepo(sb, `${name}-src`, ['-b', 'main']);
  r.commit('one', { 'a.txt': 'a\n' });
  const store = sb.path(name);
  r.git('remote', 'add', 'st', `xet::${store}`);
  pushOk(sb, r, ['-q', 'st', 'main']);
  r.write('gone.txt', 'only the dropped snapshot has this\n');
  const gone = capture(sb, r.dir);
  r.rm('gone.txt');
  r.write('kept.txt', 'the kept snapshot has this\n');
  const kept = capture(sb, r.dir);
  expectExit(xet(sb, r.dir, ['push', 'st', gone, kept, '--json']), 0);
  r.rm('kept.txt'); // only the snapshot holds it
  r.commit('two', { 'b.txt': 'b\n' });
  pushOk(sb, r, ['-q', 'st', 'main']);
  pushOk(sb, r, ['-q', 'st', `:refs/xet/snapshots/${gone}`]);
  return { r, store, kept };
}

/** A clone of the store has every ref of its newest state, git fsck is clean, `snapshot` restores
 * and verifies. */
function cloneChecks(sb: Sandbox, store: string, name: string, snapshot: string): void {
  const c = sb.path(name);
  assert.equal(gitTry(sb, sb.root, ['clone', '-q', `xet::${store}`, c]).status, 0);
  expectExit(xet(sb, c, ['fetch', 'origin', '--json']), 0);
  for (const [ref, oid] of Object.entries(newest(store).refs)) {
    assert.equal(gitTry(sb, c, ['cat-file', '-e', oid]).status, 0, `${ref} (${oid}) arrived`);
  }
  assert.equal(gitTry(sb, c, ['fsck', '--no-dangling']).status, 0);
  const target = sb.path(`${name}-restored`);
  expectExit(xet(sb, c, ['restore', snapshot, target, '--json']), 0);
  const v = verify(sb, c, snapshot, target);
  expectExit(v, 0);
  assert.equal(parseJson(v).ok, true);
}

test('a store gc SIGKILLed at every fault point leaves a whole store, and the next gc converges', () =>
  withSandbox((sb) => {
    for (const point of GC_POINTS) {
      const tag = point.replace(/[^a-z]/g, '-');
      const { r, store, kept } = seeded(sb, `st-${tag}`);
      const dir = sb.path(`faults-${tag}`);
      fs.mkdirSync(dir);
      // Its own temporary directory: the scratch (copies of the store's packs) a SIGKILL leaves.
      const tmp = sb.path(`tmp-${tag}`);
      fs.mkdirSync(tmp);
      const killed = tool(sb, r.dir, ['gc', store, '--grace', '0'], {
        [DIE_AT_ENV]: point,
        [PAUSE_DIR_ENV]: dir,
        TMPDIR: tmp,
      });
      assert.equal(killed.signal, 'SIGKILL', `killed at ${point}: ${describeTool(killed)}`);
      assert.deepEqual(fs.readdirSync(dir), [`${point}.reached`]);
      const left = fs.readdirSync(tmp);
      assert.equal(left.length, 1, `${point}: the dead gc's scratch is there: ${left.join(' ')}`);
      assert.match(left[0], /^xet-store-gc-/);
      // Two minutes old: past the age below which a scratch is never judged.
      const old = new Date(Date.now() - 120_000);
      fs.utimesSync(path.join(tmp, left[0]), old, old);
      // Whatever the point, readers see a whole store (a trashed pack is found in trash/).
      const mid = xet(sb, r.dir, ['fsck', '--store', store, '--json']);
      assert.deepEqual(parseJson(mid).problems, [], `${point}: ${mid.stdout}`);
      const again = gcOk(sb, r.dir, store, ['--grace', '0'], { TMPDIR: tmp });
      assert.deepEqual(again.problems, []);
      assert.deepEqual(fs.readdirSync(tmp), [], `${point}: the next gc removed the dead one's scratch and its own`);
      const check = assertStoreWhole(sb, r.dir, store);
      assert.deepEqual([check.unreferencedPacks, check.trashedPacks], [[], []], `${point}: nothing left over`);
      assert.deepEqual(packFiles(store), newest(store).packs, `${point}: only the compacted pack remains`);
      assert.deepEqual(fs.readdirSync(path.join(store, 'pushing')), [], `${point}: the dead gc's intent is gone`);
      assert.match(newest(store).pushId, /^gc-/);
      cloneChecks(sb, store, `clone-${tag}`, kept);
      pushOk(sb, r, ['-q', 'st', `${r.git('rev-parse', 'main').trim()}:refs/heads/after-${tag}`]);
      assertStoreWhole(sb, r.dir, store);
    }
  }));

test('store gc --grace 0 against 4 concurrent pushers: every acknowledged push is kept, every newest state names packs that exist', () =>
  withSandbox(async (sb) => {
    const { r, store, kept } = seeded(sb, 'store');
    const pushers: Repo[] = [];
    for (let i = 0; i < 4; i++) {
      const dir = sb.path(`pusher-${i}`);
      assert.equal(gitTry(sb, sb.root, ['clone', '-q', `xet::${store}`, dir]).status, 0);
      pushers.push(new (r.constructor as typeof Repo)(sb, dir));
    }
    const acknowledged = new Map<string, string>();
    const failures: string[] = [];
    let done = false;
    const pushing = pushers.map(async (p, i) => {
      for (let k = 0; k < 5; k++) {
        const oid = p.commit(`p${i} ${k}`, { [`p${i}/f${k}.txt`]: `pusher ${i} push ${k}\n`.repeat(50) });
        const ref = `refs/heads/p${i}-${k}`;
        const res = await runAsync(sb, p.dir, 'git', ['push', '-q', 'origin', `HEAD:${ref}`]);
        if (res.status === 0) acknowledged.set(ref, oid);
        else failures.push(`${ref}: ${res.stderr}`);
      }
    });
    const gcs: unknown[] = [];
    const collecting = (async () => {
      while (!done) {
        const g = await toolAsync(sb, r.dir, ['gc', store, '--grace', '0']);
        assert.equal(g.status, 0, describeTool(g));
        gcs.push(g.json);
        // No gc runs now: nothing is deleted until the next one, so the newest state's packs must exist.
        const present = new Set(packFiles(store));
        for (const pk of newest(store).packs) assert.ok(present.has(pk), `the newest state names ${pk}, present`);
      }
    })();
    await Promise.all(pushing);
    done = true;
    await collecting;
    assert.deepEqual(failures, [], 'every push succeeded (a lost race is retried by the helper)');
    assert.equal(acknowledged.size, 20);
    assert.ok(gcs.length >= 1);
    gcOk(sb, r.dir, store, ['--grace', '0']);
    const refs = lsRemote(sb, r.dir, `xet::${store}`);
    for (const [ref, oid] of acknowledged) assert.equal(refs.get(ref), oid, `${ref} is published as acknowledged`);
    assertStoreWhole(sb, r.dir, store);
    cloneChecks(sb, store, 'after-race', kept);
  }));

test('a push paused across a whole store gc, built against a ref the gc dropped, rebuilds its pack and names only packs that exist', () =>
  withSandbox(async (sb) => {
    const { r, store, kept } = seeded(sb, 'store');
    // The new commit's file is the kept snapshot's untracked file: its blob is left out of the
    // push's pack (the store's snapshot trees bound it).
    const w = initRepo(sb, 'writer', ['-b', 'main']);
    w.git('remote', 'add', 'st', `xet::${store}`);
    w.git('fetch', '-q', 'st', 'main');
    w.git('reset', '-q', '--hard', 'st/main');
    expectExit(xet(sb, w.dir, ['fetch', 'st', '--json']), 0);
    const oid = w.commit('reuse', { 'kept.txt': 'the kept snapshot has this\n' });
    const dir = sb.path('pause');
    fs.mkdirSync(dir);
    const push = runAsync(sb, w.dir, 'git', ['push', 'st', 'HEAD:refs/heads/late'], {
      [PAUSE_AT_ENV]: 'after-pack',
      [PAUSE_DIR_ENV]: dir,
    });
    await waitFor(path.join(dir, 'after-pack.reached'));
    const own = packFiles(store).filter((p) => !newest(store).packs.includes(p));
    assert.equal(own.length, 1, 'the paused push uploaded its pack');
    // Meanwhile the snapshot goes and a gc collects its objects, deleting every old pack.
    pushOk(sb, r, ['-q', 'st', `:refs/xet/snapshots/${kept}`]);
    const g = gcOk(sb, r.dir, store, ['--grace', '0']);
    assert.notEqual(g.published, null);
    assert.ok(
      g.packs.kept.some((k: { name: string; reason: string }) => k.name === own[0] && k.reason === 'in-flight'),
      `the in-flight push's pack is kept: ${JSON.stringify(g.packs.kept)}`,
    );
    fs.writeFileSync(path.join(dir, 'after-pack.go'), '');
    const res = await push;
    assert.equal(res.status, 0, res.stderr);
    assert.equal(lsRemote(sb, r.dir, `xet::${store}`).get('refs/heads/late'), oid);
    // Its state follows the gc's and names only packs that exist; the blob it left out is there.
    const log = readStateLog(store);
    const mine = log[log.length - 1].outer.state;
    assert.equal(log[log.length - 2].outer.state.pushId, g.id);
    for (const pk of mine.packs) assert.ok(packFiles(store).includes(pk), `${pk} exists`);
    assertStoreWhole(sb, r.dir, store);
    const c = sb.path('check');
    assert.equal(gitTry(sb, sb.root, ['clone', '-q', '-b', 'late', `xet::${store}`, c]).status, 0);
    assert.equal(fs.readFileSync(path.join(c, 'kept.txt'), 'utf8'), 'the kept snapshot has this\n');
    // The pack of its first attempt is an orphan now: the next gc removes it.
    gcOk(sb, r.dir, store, ['--grace', '0']);
    assert.equal(packFiles(store).includes(own[0]), false);
    assertStoreWhole(sb, r.dir, store);
  }));

test('a pack a store gc trashed while its push was publishing is re-linked by the pusher', () =>
  withSandbox(async (sb) => {
    const { r, store } = seeded(sb, 'store');
    gcOk(sb, r.dir, store, ['--grace', '0']); // one pack, nothing to compact any more
    const oid = r.commit('three', { 'c.txt': 'c\n' });
    const dir = sb.path('pause');
    fs.mkdirSync(dir);
    const push = runAsync(sb, r.dir, 'git', ['push', 'st', 'HEAD:refs/heads/relinked'], {
      [PAUSE_AT_ENV]: 'after-pack',
      [PAUSE_DIR_ENV]: dir,
    });
    await waitFor(path.join(dir, 'after-pack.reached'));
    const own = packFiles(store).filter((p) => !newest(store).packs.includes(p));
    assert.equal(own.length, 1);
    // An intent lost (an older client writes none): the gc dooms the pack and dies with it in trash.
    for (const f of fs.readdirSync(path.join(store, 'pushing'))) fs.rmSync(path.join(store, 'pushing', f));
    const gdir = sb.path('gc-faults');
    fs.mkdirSync(gdir);
    const killed = tool(sb, r.dir, ['gc', store, '--grace', '0'], {
      [DIE_AT_ENV]: 'gc-store:after-trash',
      [PAUSE_DIR_ENV]: gdir,
    });
    assert.equal(killed.signal, 'SIGKILL', describeTool(killed));
    assert.equal(packFiles(store).includes(own[0]), false, 'the pack is in trash/');
    assert.ok(fs.existsSync(path.join(store, 'trash', `${own[0]}.pack`)));
    fs.writeFileSync(path.join(dir, 'after-pack.go'), '');
    const res = await push;
    assert.equal(res.status, 0, res.stderr);
    assert.ok(newest(store).packs.includes(own[0]), 'its state names the pack');
    assert.ok(packFiles(store).includes(own[0]), 'and the pusher linked it back into packs/');
    assert.equal(lsRemote(sb, r.dir, `xet::${store}`).get('refs/heads/relinked'), oid);
    assertStoreWhole(sb, r.dir, store);
    // The next gc removes the redundant trash entry.
    gcOk(sb, r.dir, store, ['--grace', '0']);
    assert.deepEqual(fs.readdirSync(path.join(store, 'trash')), []);
    assertStoreWhole(sb, r.dir, store);
  }));
