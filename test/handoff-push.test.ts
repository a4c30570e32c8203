// `handoff create --push` and the in-process push to directory stores, end to end with the real git:
// a directory store and a bare repository as remotes, the same pushes through `git push` and
// git-remote-xet (GIT_XET_PUSH_THROUGH_GIT=1) for comparison, the tree comparison that chooses a
// push's objects checked against git's own walk, a push racing another, pushes SIGKILLed at each
// step and resolved by their publication id, a store that has most objects already, and stores
// whose content is hostile. Fixtures live on tmpfs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, Repo } from './support/git';
import { withMountSandbox } from './support/mounts';
import { appendCraftedState, assertLinearLog, lsRemote, publications, readStateLog } from './support/remote';
import { REMOTE_HELPER_DIR, type Sandbox } from './support/sandbox';
import { capture, describeRun, expectError, expectExit, parseJson, xet } from './support/xet';
import { killAt, pausedAt } from './support/faults';
import { objectsToPush } from '../src/remote/push-objects';
import { pushExcludes } from '../src/remote/transfer';

const THROUGH_GIT = { GIT_XET_PUSH_THROUGH_GIT: '1' };

const pushIdCount = (store: string, id: string) =>
  readStateLog(store).filter((s) => s.outer.state.pushId === id).length;

function assertStoreOk(sb: Sandbox, store: string): void {
  const r = xet(sb, sb.root, ['fsck', '--store', store, '--json']);
  assert.equal(r.status, 0, describeRun(r));
  assert.equal(parseJson(r).ok, true);
  assertLinearLog(store);
}

/** A repository with history, work in progress, untracked and ignored files (a dependency tree). */
function workRepo(sb: Sandbox, name: string): Repo {
  const a = initRepo(sb, name, ['-b', 'main']);
  a.commit('base', {
    '.gitignore': 'deps/\n',
    'src/app.js': 'one\n',
    'src/lib/util.js': 'util\n',
    'README.md': 'readme\n',
  });
  for (let i = 0; i < 6; i++) {
    a.write(`deps/pkg${i}/index.js`, `module.exports = ${i};\n`);
    a.write(`deps/pkg${i}/data.bin`, crypto.createHash('sha256').update(`d${i}`).digest().toString('hex').repeat(400));
  }
  a.write('notes.txt', 'untracked\n');
  a.write('src/app.js', 'one, edited\n');
  return a;
}

/** workRepo 'a' with remote `store` (a xet directory store) holding a first capture of it. */
function pushedWorkRepo(sb: Sandbox): { a: Repo; store: string } {
  const a = workRepo(sb, 'a');
  const store = sb.path('store');
  a.git('remote', 'add', 'store', `xet::${store}`);
  capture(sb, a.dir);
  expectExit(xet(sb, a.dir, ['push', 'store', '--json']), 0);
  return { a, store };
}

/** Every object reachable from the store's refs is in a repository that fetched the store. */
function assertFetchable(sb: Sandbox, store: string, name: string): Repo {
  const b = initRepo(sb, name);
  b.git('remote', 'add', 'store', `xet::${store}`);
  expectExit(xet(sb, b.dir, ['fetch', 'store', '--json']), 0);
  const fsck = spawnSync('git', ['fsck', '--connectivity-only', '--no-dangling'], { cwd: b.dir, env: sb.env });
  assert.equal(fsck.status, 0, `git fsck after fetching ${store}: ${fsck.stderr}`);
  return b;
}

test('handoff create --push to a directory store and to a bare repository; the receiver accepts it', async () => {
  await withMountSandbox((sb) => {
    const a = workRepo(sb, 'a');
    const store = sb.path('store');
    const alt = sb.path('alt.git');
    spawnSync('git', ['init', '-q', '--bare', alt], { env: sb.env });
    a.git('remote', 'add', 'store', `xet::${store}`);
    a.git('remote', 'add', 'alt', alt);
    const s1 = capture(sb, a.dir);
    for (const remote of ['store', 'alt']) {
      const r = xet(sb, a.dir, [
        'handoff',
        'create',
        s1,
        '--to',
        'b',
        '--from',
        'a',
        '--title',
        `to ${remote}`,
        '--push',
        remote,
        '--json',
      ]);
      expectExit(r, 0);
      const out = parseJson(r);
      assert.equal(out.created, true);
      assert.equal(out.push.kind, remote === 'store' ? 'xet' : 'git');
      assert.equal(out.push.remote, remote);
      assert.deepEqual(
        out.push.refs.map((x: { ref: string; status: string }) => `${x.ref} ${x.status}`).sort(),
        remote === 'store'
          ? [`refs/xet/handoffs/${out.id} new`, `refs/xet/snapshots/${s1} new`]
          : [`refs/xet/handoffs/${out.id} new`, `refs/xet/snapshots/${s1} new`],
      );
      assert.deepEqual(publications(a.commonDir()).at(-1), { id: out.push.publication, state: 'published' });
      // The receiver fetches and accepts it as from any push.
      const b = initRepo(sb, `b-${remote}`);
      b.git('remote', 'add', remote, remote === 'store' ? `xet::${store}` : alt);
      expectExit(xet(sb, b.dir, ['fetch', remote, '--json']), 0);
      const dir = sb.path(`accepted-${remote}`);
      const acc = xet(sb, b.dir, ['handoff', 'accept', out.id, dir, '--json']);
      expectExit(acc, 0);
      assert.equal(fs.readFileSync(path.join(dir, 'src/app.js'), 'utf8'), 'one, edited\n');
      assert.equal(fs.readFileSync(path.join(dir, 'deps/pkg3/index.js'), 'utf8'), 'module.exports = 3;\n');
      const v = xet(sb, b.dir, ['verify', s1, dir, '--json']);
      expectExit(v, 0);
    }
    assertStoreOk(sb, store);

    // Without --json the id alone is on stdout (scripts read it); the push is a note on stderr.
    a.write('src/app.js', 'two\n');
    const s2 = capture(sb, a.dir);
    const plain = xet(sb, a.dir, [
      'handoff',
      'create',
      s2,
      '--to',
      'b',
      '--from',
      'a',
      '--title',
      't',
      '--push',
      'store',
    ]);
    expectExit(plain, 0);
    assert.match(plain.stdout, /^[0-9a-f]{64}\n$/);
    assert.equal(lsRemote(sb, a.dir, `xet::${store}`).get(`refs/xet/handoffs/${plain.stdout.trim()}`)?.length, 40);

    // A push that fails after the handoff was made names the handoff; a later push publishes it.
    a.write('src/app.js', 'three\n');
    const s3 = capture(sb, a.dir);
    // The store's path is a file for a moment (an unmounted or replaced path).
    fs.renameSync(store, `${store}.away`);
    fs.writeFileSync(store, 'not a store\n');
    const failed = xet(sb, a.dir, [
      'handoff',
      'create',
      s3,
      '--to',
      'b',
      '--from',
      'a',
      '--title',
      't',
      '--push',
      'store',
      '--json',
    ]);
    fs.rmSync(store);
    fs.renameSync(`${store}.away`, store);
    const failure = expectError(failed, 'STORE_UNAVAILABLE');
    assert.match(failure.details.handoff.id, /^[0-9a-f]{64}$/);
    assert.equal(
      a.git('rev-parse', `refs/xet/handoffs/${failure.details.handoff.id}`).trim(),
      failure.details.handoff.commit,
    );
    expectExit(xet(sb, a.dir, ['push', 'store', '--json']), 0);
    assert.equal(lsRemote(sb, a.dir, `xet::${store}`).get(`refs/xet/snapshots/${s3}`), s3);
    const noRemote = xet(sb, a.dir, [
      'handoff',
      'create',
      s3,
      '--to',
      'c',
      '--from',
      'a',
      '--title',
      'x',
      '--push',
      'nowhere',
      '--json',
    ]);
    const err = expectError(noRemote, 'USAGE', 2);
    assert.match(err.details.handoff.id, /^[0-9a-f]{64}$/);
    assertStoreOk(sb, store);
    assertFetchable(sb, store, 'fresh');
  });
});

test('git xet push publishes to a store in its own process what git push through the helper publishes', async () => {
  await withMountSandbox((sb) => {
    const a = workRepo(sb, 'a');
    const a2 = sb.path('a2');
    fs.cpSync(a.dir, a2, { recursive: true, verbatimSymlinks: true });
    const sides = [
      { repo: a, store: sb.path('store-direct'), env: {} },
      { repo: new Repo(sb, a2), store: sb.path('store-git'), env: THROUGH_GIT },
    ];
    // A shim in front of the real helper records every time git runs it.
    const shim = sb.path('shim');
    fs.mkdirSync(shim);
    const log = sb.path('helper-runs');
    fs.writeFileSync(
      path.join(shim, 'git-remote-xet'),
      `#!/bin/sh\necho run >> ${JSON.stringify(log)}\nexec ${JSON.stringify(path.join(REMOTE_HELPER_DIR, 'git-remote-xet'))} "$@"\n`,
      { mode: 0o755 },
    );
    const env = (extra: NodeJS.ProcessEnv) => ({ ...extra, PATH: `${shim}${path.delimiter}${sb.env.PATH}` });
    const runs = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).length : 0);
    for (const s of sides) s.repo.git('remote', 'add', 'store', `xet::${s.store}`);
    const outs: unknown[][] = [[], []];
    for (let round = 0; round < 3; round++) {
      sides.forEach((s, i) => {
        s.repo.write('src/app.js', `round ${round}\n`);
        if (round === 1) s.repo.write(`deps/new${round}/x.js`, 'new dependency\n');
        if (round === 2) s.repo.rm('deps/pkg2');
        const snap = capture(sb, s.repo.dir);
        const before = runs();
        const r = xet(sb, s.repo.dir, ['push', 'store', '--json'], { env: env(s.env) });
        expectExit(r, 0);
        assert.equal(runs() > before, i === 1, i === 1 ? 'through git: the helper ran' : 'in process: no helper ran');
        const out = parseJson(r);
        outs[i].push(
          out.refs.map((x: { status: string; ref: string }) => [
            x.status,
            x.ref.startsWith('refs/xet/snapshots/') ? 'snapshot' : x.ref,
          ]),
        );
        assert.equal(lsRemote(sb, s.repo.dir, `xet::${s.store}`).get(`refs/xet/snapshots/${snap}`), snap);
        if (round === 0) {
          // git xet fetch adds the refspec: from then on a push updates the remote-tracking refs, as git push does.
          expectExit(xet(sb, s.repo.dir, ['fetch', 'store', '--json']), 0);
        } else {
          assert.equal(s.repo.git('rev-parse', `refs/remotes/store/xet/snapshots/${snap}`).trim(), snap);
        }
      });
    }
    assert.deepEqual(outs[0], outs[1]);
    // The same states (refs, head) and the same objects in both stores.
    const states = sides.map((s) =>
      readStateLog(s.store).map((x) => ({ refs: Object.keys(x.outer.state.refs).length, head: x.outer.state.head })),
    );
    assert.deepEqual(states[0], states[1]);
    const objects = sides.map((s, i) => {
      const b = assertFetchable(sb, s.store, `fetch-${i}`);
      return b.git('cat-file', '--batch-all-objects', '--batch-check=%(objecttype)').split('\n').sort().join(',');
    });
    assert.equal(objects[0].split(',').length, objects[1].split(',').length);
    for (const s of sides) assertStoreOk(sb, s.store);

    // Whatever git push would do besides the helper sends the push through git: a pre-push hook runs.
    a.write('hooks-were-here.txt', 'x\n');
    capture(sb, a.dir);
    const marker = sb.path('pre-push-ran');
    fs.writeFileSync(path.join(a.commonDir(), 'hooks', 'pre-push'), `#!/bin/sh\ntouch ${JSON.stringify(marker)}\n`, {
      mode: 0o755,
    });
    const before = runs();
    expectExit(xet(sb, a.dir, ['push', 'store', '--json'], { env: env({}) }), 0);
    assert.ok(fs.existsSync(marker), 'the pre-push hook ran');
    assert.ok(runs() > before, 'through git push');
  });
});

test('the objects a push chooses by comparing trees cover what git walks to, and the store stays whole', async () => {
  await withMountSandbox(async (sb) => {
    const a = workRepo(sb, 'a');
    const store = sb.path('store');
    a.git('remote', 'add', 'store', `xet::${store}`);
    const o = { cwd: a.dir, env: {} };
    const storeRefs = () => (fs.existsSync(store) ? Object.fromEntries(lsRemote(sb, a.dir, `xet::${store}`)) : {});
    /** The fast answer against git's walk (tips, not the store's tips nor their trees). */
    const check = async (tips: string[], expectFast: boolean) => {
      const refs = storeRefs();
      const listed = await objectsToPush(o, tips, refs, 16, 'sha1');
      // Read in this process first (local-object-reader.ts): the same list.
      const objectsDir = path.join(a.commonDir(), 'objects');
      assert.deepEqual(await objectsToPush(o, tips, refs, 16, 'sha1', objectsDir), listed, 'read in-process');
      if (!expectFast) {
        assert.equal(listed, null, 'this push is walked');
        return;
      }
      assert.ok(listed, 'this push is compared by trees');
      const exclude = await pushExcludes(o, refs);
      const walked = spawnSync('git', ['rev-list', '--objects', '--no-object-names', '--stdin'], {
        cwd: a.dir,
        input: [...tips, ...exclude.map((x) => `^${x}`)].join('\n') + '\n',
        env: sb.env,
      })
        .stdout.toString()
        .split('\n')
        .filter(Boolean);
      const mine = new Set(listed.map((x) => x.oid));
      const lacking = walked.filter((x) => !mine.has(x));
      assert.deepEqual(lacking, [], 'every object git walks to is in the pack');
      assert.ok(listed.length <= walked.length + 8, `${listed.length} listed, git walks to ${walked.length}`);
    };
    const push = () => {
      const r = xet(sb, a.dir, ['push', 'store', '--json']);
      expectExit(r, 0);
      return parseJson(r);
    };
    const s1 = capture(sb, a.dir);
    await check([s1], false); // an empty store: nothing to compare with
    push();
    // Edits, a new directory, a deletion, a move, a mode change, a symlink.
    a.write('src/app.js', 'two\n');
    a.write('deps/added/a.js', 'added\n');
    a.rm('deps/pkg1');
    fs.renameSync(a.p('deps/pkg2/index.js'), a.p('deps/pkg0/moved.js'));
    a.chmod('src/lib/util.js', 0o755);
    a.symlink('src/app.js', 'link');
    const s2 = capture(sb, a.dir);
    await check([s2], true);
    push();
    // A handoff of it, and one of the older snapshot the store has.
    const h = parseJson(
      xet(sb, a.dir, ['handoff', 'create', s2, '--to', 'b', '--from', 'a', '--title', 't', '--json']),
    );
    const h1 = parseJson(
      xet(sb, a.dir, ['handoff', 'create', s1, '--to', 'b', '--from', 'a', '--title', 'old', '--json']),
    );
    await check([h.commit, h1.commit], true);
    push();
    // A staged change: index/ differs too.
    a.write('src/staged.js', 'staged\n');
    a.git('add', 'src/staged.js');
    const s3 = capture(sb, a.dir);
    await check([s3], true);
    push();
    // A new commit on the branch: the snapshot's parent is new to the store, so this push walks.
    a.commit('next', { 'src/next.js': 'next\n' });
    const s4 = capture(sb, a.dir);
    await check([s4], false);
    push();
    a.write('src/app.js', 'after the commit\n');
    const s5 = capture(sb, a.dir);
    await check([s5], true);
    const out = push();
    assert.deepEqual(out.refs.find((x: { ref: string }) => x.ref === `refs/xet/snapshots/${s5}`)?.status, 'new');
    assertStoreOk(sb, store);
    const b = assertFetchable(sb, store, 'b');
    const dir = sb.path('restored');
    expectExit(xet(sb, b.dir, ['restore', s5, dir, '--json']), 0);
    expectExit(xet(sb, b.dir, ['verify', s5, dir, '--json']), 0);

    // Two staged names that differ only in bytes that are not UTF-8 (n\xff, n\xfe, in a new
    // directory and in one the store has): decoded, they were one name, and the other's blob was
    // never sent (review 39).
    const blobs = ['one\n', 'two\n', 'three\n', 'four\n'].map((t) =>
      spawnSync('git', ['hash-object', '-w', '--stdin'], { cwd: a.dir, input: t, env: sb.env })
        .stdout.toString()
        .trim(),
    );
    const info = Buffer.concat(
      [
        ['odd/n', 0xff, blobs[0]],
        ['odd/n', 0xfe, blobs[1]],
        ['src/n', 0xff, blobs[2]],
        ['src/n', 0xfe, blobs[3]],
      ].map(([p, b, oid]) =>
        Buffer.concat([Buffer.from(`100644 ${oid}\t${p}`), Buffer.from([b as number]), Buffer.from('\n')]),
      ),
    );
    const staged = spawnSync('git', ['update-index', '--index-info'], { cwd: a.dir, input: info, env: sb.env });
    assert.equal(staged.status, 0, staged.stderr.toString());
    const s6 = capture(sb, a.dir);
    await check([s6], true);
    push();
    assertStoreOk(sb, store);
    const c = assertFetchable(sb, store, 'c');
    for (const blob of blobs) assert.equal(c.git('cat-file', '-t', blob).trim(), 'blob', `${blob} reached the store`);
  });
});

test('a store that already has most objects: a receiver pushes its edit of an accepted handoff, only the edit travels', async () => {
  await withMountSandbox((sb) => {
    const a = workRepo(sb, 'a');
    const store = sb.path('store');
    a.git('remote', 'add', 'store', `xet::${store}`);
    const s1 = capture(sb, a.dir);
    const h = parseJson(
      xet(sb, a.dir, [
        'handoff',
        'create',
        s1,
        '--to',
        'b',
        '--from',
        'a',
        '--title',
        't',
        '--push',
        'store',
        '--json',
      ]),
    );
    const b = initRepo(sb, 'b');
    b.git('remote', 'add', 'store', `xet::${store}`);
    expectExit(xet(sb, b.dir, ['fetch', 'store', '--json']), 0);
    const work = sb.path('work');
    expectExit(xet(sb, b.dir, ['handoff', 'accept', h.id, work, '--json']), 0);
    const w = new Repo(sb, work);
    // The accepted repository has a's remotes, the store among them.
    assert.equal(w.git('remote', 'get-url', 'store').trim(), `xet::${store}`);
    expectExit(xet(sb, w.dir, ['fetch', 'store', '--json']), 0);
    w.write('src/app.js', 'b was here\n');
    const s2 = capture(sb, w.dir);
    const packs = () => fs.readdirSync(path.join(store, 'packs')).filter((n) => n.endsWith('.pack'));
    const before = new Set(packs());
    const back = parseJson(
      xet(sb, w.dir, [
        'handoff',
        'create',
        s2,
        '--to',
        'a',
        '--from',
        'b',
        '--title',
        'back',
        '--push',
        'store',
        '--json',
      ]),
    );
    assert.equal(back.push.refs.filter((x: { status: string }) => x.status === 'new').length, 2);
    const added = packs().filter((n) => !before.has(n));
    assert.equal(added.length, 1);
    const size = fs.statSync(path.join(store, 'packs', added[0])).size;
    assert.ok(size < 16 << 10, `the pack of one edit is ${size} bytes`);
    // Everything is there already: nothing new, no new state.
    const states = readStateLog(store).length;
    const again = parseJson(xet(sb, w.dir, ['push', 'store', `${back.id}`, '--json']));
    assert.ok(again.refs.every((x: { status: string }) => x.status === 'up-to-date'));
    assert.equal(readStateLog(store).length, states);
    assertStoreOk(sb, store);
    const fresh = assertFetchable(sb, store, 'fresh');
    const dir = sb.path('accepted-back');
    expectExit(xet(sb, fresh.dir, ['handoff', 'accept', back.id, dir, '--json']), 0);
    assert.equal(fs.readFileSync(path.join(dir, 'src/app.js'), 'utf8'), 'b was here\n');
  });
});

test('a push racing another for the same state number decides again and both are published', async () => {
  await withMountSandbox(async (sb) => {
    const { a, store } = pushedWorkRepo(sb);
    const other = sb.path('other');
    fs.cpSync(a.dir, other, { recursive: true, verbatimSymlinks: true });
    const o = new Repo(sb, other);
    a.write('src/app.js', 'a\n');
    const sa = capture(sb, a.dir);
    o.write('src/app.js', 'other\n');
    const so = capture(sb, o.dir);
    // a stops with its pack written and its state not yet; the other pusher takes that state number.
    const paused = await pausedAt(
      sb,
      a.dir,
      ['handoff', 'create', sa, '--to', 'b', '--from', 'a', '--title', 'race', '--push', 'store', '--json'],
      'after-pack',
    );
    const seq = readStateLog(store).length;
    const won = xet(sb, o.dir, ['push', 'store', '--json']);
    expectExit(won, 0);
    assert.equal(readStateLog(store).length, seq + 1);
    paused.go();
    const done = await paused.done;
    assert.equal(done.code, 0, done.stdout);
    const out = JSON.parse(done.stdout);
    assert.deepEqual(
      out.push.refs.map((x: { status: string }) => x.status),
      ['new', 'new'],
    );
    const log = assertLinearLog(store);
    assert.equal(log.length, seq + 2);
    assert.equal(pushIdCount(store, out.push.publication), 1);
    const refs = lsRemote(sb, a.dir, `xet::${store}`);
    assert.equal(refs.get(`refs/xet/snapshots/${sa}`), sa);
    assert.equal(refs.get(`refs/xet/snapshots/${so}`), so);
    assert.equal(refs.get(`refs/xet/handoffs/${out.id}`), out.commit);
    assertStoreOk(sb, store);
    assertFetchable(sb, store, 'fresh');
  });
});

test('two pushes of the same snapshot racing: both succeed, and the one content-named pack the winner state names stays', async () => {
  await withMountSandbox(async (sb) => {
    const { a, store } = pushedWorkRepo(sb);
    a.write('src/app.js', 'same in both\n');
    const snap = capture(sb, a.dir);
    // The other repository has the very same snapshot: its push makes the same pack, byte for byte.
    const other = sb.path('other');
    fs.cpSync(a.dir, other, { recursive: true, verbatimSymlinks: true });
    const packs = () => fs.readdirSync(path.join(store, 'packs')).filter((f) => f.endsWith('.pack'));
    const before = new Set(packs());
    const paused = await pausedAt(sb, a.dir, ['push', 'store', '--json'], 'after-pack');
    const mine = packs().filter((p) => !before.has(p));
    assert.equal(mine.length, 1, 'the paused push published its pack');
    expectExit(xet(sb, other, ['push', 'store', '--json']), 0);
    assert.deepEqual(
      packs().filter((p) => !before.has(p)),
      mine,
      'the other push made the same content-named pack, and its state names it',
    );
    paused.go();
    const done = await paused.done;
    assert.equal(done.code, 0, done.stdout);
    // The paused push found its ref published and published no state; the pack both made is the one
    // the winner's state names, and it must stay (a push never removes a pack it published).
    assert.deepEqual(
      packs().filter((p) => !before.has(p)),
      mine,
      'the pack the winner named is still there',
    );
    assert.equal(lsRemote(sb, a.dir, `xet::${store}`).get(`refs/xet/snapshots/${snap}`), snap);
    assertStoreOk(sb, store);
    assertFetchable(sb, store, 'fresh');
  });
});

test('a push SIGKILLed at each step is resolved by its publication id: published once or not at all', async () => {
  await withMountSandbox((sb) => {
    const { a, store } = pushedWorkRepo(sb);
    const cases: [string, 'published' | 'not-published'][] = [
      ['push:after-record', 'not-published'],
      ['before-decide', 'not-published'],
      ['after-pack', 'not-published'],
      ['after-state', 'published'],
    ];
    for (const [point, state] of cases) {
      a.write('src/app.js', `${point}\n`);
      const s = capture(sb, a.dir);
      killAt(
        sb,
        a.dir,
        ['handoff', 'create', s, '--to', 'b', '--from', 'a', '--title', point, '--push', 'store', '--json'],
        point as never,
      );
      const pending = publications(a.commonDir()).filter((p) => p.state === 'pending');
      assert.equal(pending.length, 1, `${point}: one pending publication`);
      const id = pending[0].id;
      assert.equal(pushIdCount(store, id), state === 'published' ? 1 : 0);
      const r = xet(sb, a.dir, ['push', 'store', '--json']);
      expectExit(r, 0);
      const out = parseJson(r);
      assert.deepEqual(out.resolved, [{ id, state }], point);
      const mine = out.refs.find((x: { ref: string }) => x.ref === `refs/xet/snapshots/${s}`);
      assert.equal(mine?.status, state === 'published' ? 'up-to-date' : 'new', `${point}: ${JSON.stringify(out.refs)}`);
      assert.equal(pushIdCount(store, id), state === 'published' ? 1 : 0, `${point}: never twice`);
      assert.deepEqual(
        publications(a.commonDir()).filter((p) => p.state === 'pending'),
        [],
      );
      assertStoreOk(sb, store);
    }
    // Nothing is left behind in the lock directory.
    assert.deepEqual(
      fs.readdirSync(path.join(a.commonDir(), 'xet', 'locks')).filter((n) => n.startsWith('publication-')),
      [],
    );
    assertFetchable(sb, store, 'fresh');
  });
});

test('hostile store content: refs naming blobs, trees or nothing, a corrupt state, a FIFO for a state', async () => {
  await withMountSandbox((sb) => {
    const a = workRepo(sb, 'a');
    const store = sb.path('store');
    a.git('remote', 'add', 'store', `xet::${store}`);
    // A 2 MiB blob and a tree this repository has, named by the store as snapshots; an id nobody has.
    a.write('big.bin', crypto.randomBytes(2 << 20));
    const big = a.git('hash-object', '-w', 'big.bin').trim();
    a.rm('big.bin');
    const tree = a.git('rev-parse', 'HEAD^{tree}').trim();
    capture(sb, a.dir);
    expectExit(xet(sb, a.dir, ['push', 'store', '--json']), 0);
    appendCraftedState(store, (s) => ({
      ...s,
      refs: {
        ...s.refs,
        [`refs/xet/snapshots/${big}`]: big,
        [`refs/xet/snapshots/${tree}`]: tree,
        [`refs/xet/snapshots/${'e'.repeat(40)}`]: 'e'.repeat(40),
      },
    }));
    for (const env of [{}, THROUGH_GIT]) {
      a.write('src/app.js', `edit ${JSON.stringify(env)}\n`);
      const s = capture(sb, a.dir);
      const r = xet(sb, a.dir, ['push', 'store', '--json'], { env, timeoutMs: 60_000 });
      expectExit(r, 0);
      assert.equal(lsRemote(sb, a.dir, `xet::${store}`).get(`refs/xet/snapshots/${s}`), s);
    }
    // The crafted refs stay the store's business; what the pushes sent is whole.
    const b = initRepo(sb, 'b');
    b.git('remote', 'add', 'store', `xet::${store}`);
    const fetched = xet(sb, b.dir, ['fetch', 'store', '--json']);
    assert.notEqual(fetched.signal, 'SIGKILL');

    // A corrupt newest state: both paths refuse with the same code, nothing is written.
    const last = readStateLog(store).at(-1);
    assert.ok(last);
    const count = readStateLog(store).length;
    const bytes = fs.readFileSync(last.file);
    bytes[bytes.length - 10] ^= 1;
    fs.chmodSync(last.file, 0o644);
    fs.writeFileSync(last.file, bytes);
    a.write('src/app.js', 'after corruption\n');
    capture(sb, a.dir);
    const codes = [{}, THROUGH_GIT].map(
      (env) => parseJson(xet(sb, a.dir, ['push', 'store', '--json'], { env })).error?.code,
    );
    assert.deepEqual(codes, ['INTEGRITY_MISMATCH', 'INTEGRITY_MISMATCH']);
    assert.equal(fs.readdirSync(path.join(store, 'state')).length, count);

    // A FIFO where the next state would be read: refused, never a hang.
    fs.writeFileSync(last.file, Buffer.from(bytes.map((x, i) => (i === bytes.length - 10 ? x ^ 1 : x))));
    const fifo = path.join(store, 'state', `${String(count + 1).padStart(12, '0')}.json`);
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0);
    const r = xet(sb, a.dir, ['push', 'store', '--json'], { timeoutMs: 60_000 });
    assert.notEqual(r.signal, 'SIGKILL', 'no hang');
    expectError(r, 'INTEGRITY_MISMATCH');
  });
});
