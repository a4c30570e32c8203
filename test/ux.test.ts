// What a user expects of the command line (issue 8): verify under the snapshot's own policy, no new
// snapshot for an unchanged worktree, idempotent handoff retries, pushing only what is named, a
// restored copy that knows where it came from, one error code per condition, CLI habits (usage, help,
// version, --quiet, a moving progress line on a terminal), `status`, and the CI recipe's own script
// run as README quotes it, against a bare repository, from a fresh HOME.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, run, type Repo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { capture, describeRun, expectError, expectExit, parseJson, verify, XET_BIN, xet } from './support/xet';
import { withoutPassword } from '../src/snapshot/origin';

const ROOT = path.resolve(__dirname, '..', '..');

function sandboxed(fn: (sb: Sandbox) => void): () => void {
  return () => {
    const sb = createSandbox();
    try {
      fn(sb);
    } finally {
      sb.cleanup();
    }
  };
}

const snapshotRefs = (r: Repo) =>
  r.git('for-each-ref', '--format=%(refname)', 'refs/xet/snapshots/').trim().split('\n').filter(Boolean);
const packs = (r: Repo) =>
  fs
    .readdirSync(r.p('.git/objects/pack'))
    .filter((n) => n.endsWith('.pack'))
    .sort();

/** Runs the CLI under a pseudo-terminal (util-linux script), so stderr is a TTY; returns the raw bytes. */
function onTerminal(sb: Sandbox, cwd: string, args: string[], tickMs = 250): { status: number | null; out: string } {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const cmd = [process.execPath, XET_BIN, ...args].map(q).join(' ');
  const r = run(sb, cwd, 'script', ['-qfec', cmd, '/dev/null'], {
    env: { COLUMNS: '200', TERM: 'xterm', GIT_XET_TEST_PROGRESS_TICK_MS: String(tickMs) },
  });
  return { status: r.status, out: r.stdout.toString('utf8') };
}

test(
  'verify right after capture applies the snapshot policy: secrets left out are excludedByPolicy, not differences',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', '.gitignore': 'node_modules/\n' });
    r.write('.env', 'TOKEN=secret\n');
    r.write('config/server.key', 'key\n');
    r.write('scratch/big.bin', 'left out by pattern\n');
    r.write('node_modules/dep/index.js', 'ignored\n');
    r.write('notes.txt', 'untracked\n');
    const snap = capture(sb, r.dir, ['--exclude', 'scratch/', '--ignored', 'none']);
    const v = verify(sb, r.dir, snap, r.dir);
    expectExit(v, 0);
    const out = parseJson(v);
    assert.equal(out.ok, true, describeRun(v));
    assert.deepEqual(out.differences, []);
    assert.deepEqual(out.excludedByPolicy, { secrets: ['.env', 'config/server.key'], byPattern: 1, ignored: 1 });
    assert.equal(parseJson(xet(sb, r.dir, ['diff', snap, '--json'])).identical, true, 'diff and verify agree');

    // A copy: what the policy leaves out is still not a difference; anything else is.
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snap, copy]), 0);
    fs.writeFileSync(path.join(copy, '.env'), 'TOKEN=the copy has its own\n');
    const again = parseJson(verify(sb, r.dir, snap, copy));
    assert.equal(again.ok, true, JSON.stringify(again));
    assert.deepEqual(again.excludedByPolicy.secrets, ['.env']);
    fs.writeFileSync(path.join(copy, 'extra.txt'), 'x\n');
    const bad = verify(sb, r.dir, snap, copy);
    expectExit(bad, 1);
    assert.deepEqual(parseJson(bad).differences, [{ kind: 'file-extra', path: 'extra.txt' }]);
    // The snapshot's recorded policy rules, not today's config: a new secret pattern changes nothing.
    r.git('config', 'xet.capture.secret', 'notes.txt');
    assert.equal(parseJson(verify(sb, r.dir, snap, r.dir)).ok, true);
    assert.equal(parseJson(xet(sb, r.dir, ['diff', snap, '--json'])).identical, true, 'diff too');
  }),
);

test(
  'a capture of an unchanged worktree returns its last snapshot (no ref, no pack) unless --always; any change makes a new one',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    r.write('u.txt', 'untracked\n');
    const first = parseJson(xet(sb, r.dir, ['capture', '-m', 'step 1', '--json']));
    assert.equal(first.unchanged, false);
    const refs = snapshotRefs(r);
    const packsBefore = packs(r);
    const objectsBefore = r.git('count-objects', '-v');
    const again = parseJson(xet(sb, r.dir, ['capture', '-m', 'step 2', '--json']));
    assert.equal(again.unchanged, true);
    assert.equal(again.snapshot, first.snapshot);
    assert.equal(again.files, first.files);
    assert.deepEqual(snapshotRefs(r), refs, 'no new ref');
    assert.deepEqual(packs(r), packsBefore, 'no new pack');
    assert.equal(r.git('count-objects', '-v'), objectsBefore, 'no new loose object either');
    // The existing snapshot keeps its own message (a checkpoint message does not make a snapshot).
    assert.equal(parseJson(xet(sb, r.dir, ['show', first.snapshot, '--json'])).message, 'step 1');
    const forced = parseJson(xet(sb, r.dir, ['capture', '--always', '--json']));
    assert.equal(forced.unchanged, false);
    assert.notEqual(forced.snapshot, first.snapshot);

    // Each kind of state a snapshot holds, changed alone, makes a new snapshot.
    const changes: [string, () => void][] = [
      ['a file', () => r.write('a.txt', 'edited\n')],
      ['the index', () => r.git('add', 'a.txt')],
      ['an index flag', () => r.git('update-index', '--assume-unchanged', 'b.txt')],
      ['an empty directory', () => r.mkdir('empty')],
      ['a ref', () => r.git('branch', 'topic')],
      ['HEAD', () => r.git('checkout', '-q', 'topic')],
      ['config', () => r.git('config', 'branch.topic.description', 'a topic')],
      ['info/exclude', () => fs.appendFileSync(r.gitPath('info/exclude'), 'local-only\n')],
      ['the stash', () => r.git('stash', 'push', '-q', '--keep-index')],
    ];
    let last = forced.snapshot as string;
    for (const [what, change] of changes) {
      change();
      const c = parseJson(xet(sb, r.dir, ['capture', '--json']));
      assert.equal(c.unchanged, false, `${what} changed: a new snapshot`);
      assert.notEqual(c.snapshot, last, what);
      last = c.snapshot;
      assert.equal(parseJson(xet(sb, r.dir, ['capture', '--json'])).snapshot, last, `${what}: then unchanged`);
    }
    // The policy is part of what a snapshot holds.
    const narrower = parseJson(xet(sb, r.dir, ['capture', '--exclude', 'u.txt', '--json']));
    assert.equal(narrower.unchanged, false);
  }),
);

test(
  'handoff create --request-id: a retry returns the same handoff, other inputs are REQUEST_ID_REUSED',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const create = (extra: string[]) =>
      xet(sb, r.dir, ['handoff', 'create', snap.slice(0, 10), '--to', 'bob', '--from', 'al', '--json', ...extra]);
    // A refused call (bad artifact) leaves the request id unused.
    expectError(
      create(['--title', 'work', '--artifact', 'nope.txt', '--request-id', 'run-7.step-3']),
      'HANDOFF_INVALID',
    );
    const a = parseJson(create(['--title', 'work', '--request-id', 'run-7.step-3']));
    assert.equal(a.created, true);
    spawnSync('sleep', ['1.1']); // the creation time is part of the id; a retry must not take a new one
    const b = parseJson(create(['--title', 'work', '--request-id', 'run-7.step-3']));
    assert.deepEqual(b, { ...a, created: false });
    // Without a request id, the same call a second later is a second handoff.
    const c = parseJson(create(['--title', 'work']));
    assert.notEqual(c.id, a.id);
    // The first call died after reserving but before its ref: the retry makes exactly that handoff.
    r.git('update-ref', '-d', a.ref);
    const d = parseJson(create(['--title', 'work', '--request-id', 'run-7.step-3']));
    assert.equal(d.id, a.id);
    assert.equal(d.created, true);
    const reused = expectError(create(['--title', 'other work', '--request-id', 'run-7.step-3']), 'REQUEST_ID_REUSED');
    assert.equal(reused.details.requestId, 'run-7.step-3');
    expectError(create(['--title', 'work', '--request-id', 'has space']), 'USAGE', 2);
    assert.equal(r.git('for-each-ref', 'refs/xet/handoffs/').trim().split('\n').length, 2);
  }),
);

test(
  'push <remote> <id>… publishes only what is named; a handoff brings its snapshot',
  sandboxed((sb) => {
    const bare = sb.path('bare.git');
    spawnSync('git', ['init', '-q', '--bare', bare], { env: sb.env });
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    r.git('remote', 'add', 'origin', bare);
    const s1 = capture(sb, r.dir);
    r.write('b.txt', 'b\n');
    const s2 = capture(sb, r.dir);
    r.write('c.txt', 'c\n');
    const s3 = capture(sb, r.dir);
    const h = parseJson(
      xet(sb, r.dir, ['handoff', 'create', s2, '--to', 'bob', '--from', 'al', '--title', 't', '--json']),
    );
    const remoteRefs = () =>
      run(sb, r.dir, 'git', ['ls-remote', bare, 'refs/xet/*'])
        .stdout.toString('utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split('\t')[1])
        .sort();
    expectError(xet(sb, r.dir, ['push', 'origin', 'beef00', '--json']), 'SNAPSHOT_NOT_FOUND');
    expectError(xet(sb, r.dir, ['push', 'origin', s1.slice(0, 8), 'not-an-id', '--json']), 'USAGE', 2);
    assert.deepEqual(remoteRefs(), [], 'a bad id is refused before anything is sent');
    const p1 = parseJson(xet(sb, r.dir, ['push', 'origin', s1.slice(0, 8), '--json']));
    assert.deepEqual(p1.refs, [{ ref: `refs/xet/snapshots/${s1}`, status: 'new' }]);
    assert.deepEqual(remoteRefs(), [`refs/xet/snapshots/${s1}`]);
    const p2 = parseJson(xet(sb, r.dir, ['push', 'origin', h.id.slice(0, 8), '--json']));
    assert.deepEqual(p2.refs.map((x: { ref: string }) => x.ref).sort(), [h.ref, `refs/xet/snapshots/${s2}`].sort());
    assert.deepEqual(remoteRefs(), [h.ref, `refs/xet/snapshots/${s1}`, `refs/xet/snapshots/${s2}`].sort());
    assert.ok(!remoteRefs().includes(`refs/xet/snapshots/${s3}`));
    // Without ids, everything that is missing goes.
    parseJson(xet(sb, r.dir, ['push', 'origin', '--json']));
    assert.ok(remoteRefs().includes(`refs/xet/snapshots/${s3}`));
  }),
);

test(
  'restore --from records xet-origin, so git fetch and git xet fetch in the copy reach the source',
  sandboxed((sb) => {
    const bare = sb.path('bare.git');
    spawnSync('git', ['init', '-q', '--bare', bare], { env: sb.env });
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    // The captured origin is a path only the producer has.
    r.git('remote', 'add', 'origin', sb.path('only-on-the-producer.git'));
    r.git('remote', 'add', 'pub', bare);
    const s1 = capture(sb, r.dir);
    expectExit(xet(sb, r.dir, ['push', 'pub', s1]), 0);
    const copy = sb.path('copy');
    const res = parseJson(xet(sb, sb.root, ['restore', s1.slice(0, 10), copy, '--from', `file://${bare}`, '--json']));
    assert.deepEqual(res.origin, { name: 'xet-origin', url: `file://${bare}` });
    const cfg = (k: string) => run(sb, copy, 'git', ['config', '--get-all', k]).stdout.toString('utf8').trim();
    assert.equal(cfg('remote.xet-origin.url'), `file://${bare}`);
    assert.equal(cfg('remote.origin.url'), sb.path('only-on-the-producer.git'), 'the captured origin is kept');
    // verify compares what was captured; where the copy came from is not part of it.
    expectExit(verify(sb, copy, s1, copy), 0);
    // status in the copy measures from the snapshot it was restored from.
    const st = parseJson(xet(sb, copy, ['status', '--json']));
    assert.deepEqual([st.lastSnapshot, st.base, st.changed], [null, { snapshot: s1, kind: 'restored' }, false]);
    fs.writeFileSync(path.join(copy, 'a.txt'), 'edited in the copy\n');
    assert.deepEqual(parseJson(xet(sb, copy, ['status', '--json'])).changes, [
      { kind: 'file-modified', path: 'a.txt' },
    ]);
    fs.writeFileSync(path.join(copy, 'a.txt'), 'a\n');

    r.commit('more', { 'b.txt': 'b\n' });
    r.git('push', '-q', 'pub', 'HEAD:refs/heads/main');
    const s2 = capture(sb, r.dir);
    expectExit(xet(sb, r.dir, ['push', 'pub', s2]), 0);
    const plain = run(sb, copy, 'git', ['fetch', '-q', 'xet-origin']);
    assert.equal(plain.status, 0, plain.stderr.toString());
    assert.equal(run(sb, copy, 'git', ['rev-parse', 'refs/remotes/xet-origin/main']).status, 0);
    const f = parseJson(xet(sb, copy, ['fetch', 'xet-origin', '--json']));
    assert.ok(
      f.fetched.some((x: { ref: string }) => x.ref === `refs/xet/snapshots/${s2}`),
      JSON.stringify(f),
    );
    expectExit(xet(sb, copy, ['restore', s2, sb.path('copy2')]), 0);

    assert.equal(withoutPassword('https://ci:ghp_token@github.com/o/r.git'), 'https://ci@github.com/o/r.git');
    assert.equal(withoutPassword('https://github.com/o/r.git'), 'https://github.com/o/r.git');
  }),
);

test(
  'errors: one code for an unreachable remote everywhere, a missing remote is named, swapped verify arguments get a hint',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const gone = sb.path('no-such-repo.git');
    expectError(xet(sb, r.dir, ['restore', snap, sb.path('c1'), '--from', gone, '--json']), 'REMOTE_UNAVAILABLE');
    expectError(
      xet(sb, sb.root, ['restore', snap, sb.path('c2'), '--from', `file://${gone}`, '--json']),
      'REMOTE_UNAVAILABLE',
    );
    expectError(xet(sb, r.dir, ['fetch', gone, '--json']), 'REMOTE_UNAVAILABLE');
    expectError(xet(sb, r.dir, ['push', gone, '--json']), 'REMOTE_UNAVAILABLE');
    assert.ok(!fs.existsSync(sb.path('c1')) && !fs.existsSync(sb.path('c2')));

    const noRemote = xet(sb, r.dir, ['push']);
    expectExit(noRemote, 2);
    assert.match(noRemote.stderr, /no remote named "origin"/);
    assert.doesNotMatch(noRemote.stderr, /and the repository exists/);
    const idFirst = expectError(xet(sb, r.dir, ['push', snap.slice(0, 8), '--json']), 'USAGE', 2);
    assert.match(idFirst.message, /give the remote first: git xet push <remote> <id>/);
    const typo = expectError(xet(sb, r.dir, ['fetch', 'orgin', '--json']), 'USAGE', 2);
    assert.equal(typo.details.remote, 'orgin');

    const swapped = expectError(xet(sb, r.dir, ['verify', '.', snap.slice(0, 12), '--json']), 'USAGE', 2);
    assert.match(swapped.message, new RegExp(`did you mean: git xet verify ${snap.slice(0, 12)} \\.`));
  }),
);

test(
  'CLI habits: no command is a usage error, version, help <cmd> = <cmd> --help, --json keeps stderr empty',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const bare = xet(sb, r.dir, []);
    expectExit(bare, 2);
    assert.match(bare.stderr, /^Usage: git xet/);
    assert.equal(bare.stdout, '');
    const sub = xet(sb, r.dir, ['handoff']);
    expectExit(sub, 2);
    assert.match(sub.stderr, /Usage: git xet handoff/);
    for (const args of [
      ['--json'],
      ['frobnicate', '--json'],
      ['capture', '--bogus', '--json'],
      ['restore', '--json'],
    ]) {
      const u = xet(sb, r.dir, args);
      expectError(u, 'USAGE', 2);
      assert.equal(u.stderr, '', `nothing on stderr with --json: ${args.join(' ')}`);
    }
    const v = xet(sb, r.dir, ['version']);
    expectExit(v, 0);
    assert.equal(v.stdout, xet(sb, r.dir, ['--version']).stdout);
    assert.match(v.stdout, /^\d+\.\d+\.\d+\n$/);
    const vj = parseJson(xet(sb, r.dir, ['version', '--json']));
    assert.equal(`${vj.version}\n`, v.stdout);
    assert.match(vj.git, /^\d+\.\d+\.\d+$/);
    for (const cmd of ['capture', 'verify', 'push', 'status']) {
      const a = xet(sb, r.dir, ['help', cmd]);
      const b = xet(sb, r.dir, [cmd, '--help']);
      expectExit(a, 0);
      expectExit(b, 0);
      assert.equal(a.stdout, b.stdout, cmd);
      assert.match(a.stdout, new RegExp(`^Usage: git xet ${cmd}`));
    }
  }),
);

test(
  'on a terminal the progress line ticks during a long phase; --quiet prints neither progress nor notes',
  { skip: spawnSync('script', ['--version']).status === 0 ? false : 'util-linux script is not installed' },
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    // Enough incompressible bytes that storing them lasts several ticks even on a fast machine.
    let seed = 1;
    for (let d = 0; d < 20; d++) {
      const buf = Buffer.alloc(1 << 20);
      for (let i = 0; i < buf.length; i += 4) buf.writeUInt32LE((seed = (seed * 1103515245 + 12345) >>> 0), i);
      r.write(`data/d${d}.bin`, buf);
      for (let i = 0; i < 50; i++) r.write(`small/d${d}/f${i}.txt`, `${d}.${i}\n`.repeat(100));
    }
    const t = onTerminal(sb, r.dir, ['capture'], 20);
    assert.equal(t.status, 0, t.out);
    const lines = t.out
      .split(/[\r\n]/)
      .map((l) => l.trim())
      .filter((l) => l.startsWith('git xet: '));
    // Each phase's line with its times, in the order drawn; one draw per phase is what did not move.
    const byPhase = new Map<string, number[]>();
    for (const l of lines) {
      const m = /^git xet: (.*)… \((\d+\.\d) s\)$/.exec(l);
      if (!m) continue;
      byPhase.set(m[1], [...(byPhase.get(m[1]) ?? []), Number(m[2])]);
    }
    assert.ok(byPhase.has('scanning the working tree') && [...byPhase.keys()].some((k) => k.startsWith('storing ')));
    for (const [phase, times] of byPhase) {
      assert.deepEqual(
        [...times].sort((a, b) => a - b),
        times,
        `${phase}: the elapsed time never goes back`,
      );
    }
    const ticked = [...byPhase.values()].some((times) => times.length >= 3);
    assert.ok(
      ticked,
      `some phase was redrawn with a later time: ${JSON.stringify([...byPhase].map(([k, v]) => [k, [...v]]))}`,
    );
    assert.match(t.out, /captured \d+ files/);
    const snap = /([0-9a-f]{40})/.exec(t.out)?.[1] as string;
    const rt = onTerminal(sb, r.dir, ['restore', snap, sb.path('copy')]);
    assert.equal(rt.status, 0, rt.out);
    for (const phase of ['linking objects', 'writing 1021 files', 'writing the index', 'moving the copy into place']) {
      assert.match(rt.out, new RegExp(`git xet: ${phase}… \\(\\d+\\.\\d s\\)`), `restore phase ${phase}`);
    }

    r.write('data/d0.bin', 'changed\n');
    const q = onTerminal(sb, r.dir, ['--quiet', 'capture']);
    assert.equal(q.status, 0, q.out);
    assert.doesNotMatch(q.out, /git xet: |captured /);
    assert.match(q.out.trim(), /^[0-9a-f]{40}$/, 'the result still prints');
  }),
);

test(
  'status: the last snapshot, whether anything changed since (nothing written), the forks, room for later issues',
  sandboxed((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const none = parseJson(xet(sb, r.dir, ['status', '--json']));
    assert.equal(none.lastSnapshot, null);
    assert.equal(none.changed, null);
    assert.deepEqual([none.pins, none.guards], [[], null]);
    // No allowance set: the repository root's usage, nothing limited (test/slow/allowance-report.test.ts has the rest).
    assert.deepEqual(none.allowance, {
      limits: { bytes: null, files: null },
      used: { bytes: 0, files: 0 },
      available: { bytes: null, files: null },
    });
    r.write('.env', 'S=1\n');
    const snap = capture(sb, r.dir, ['-m', 'first']);
    const same = parseJson(xet(sb, r.dir, ['status', '--json']));
    assert.deepEqual(same.lastSnapshot, {
      snapshot: snap,
      createdAt: parseJson(xet(sb, r.dir, ['show', snap, '--json'])).createdAt,
      message: 'first',
    });
    assert.equal(same.changed, false);
    assert.deepEqual(same.excludedByPolicy.secrets, ['.env']);
    const objects = r.git('count-objects', '-v');
    r.write('a.txt', 'edited\n');
    r.write('new.txt', 'n\n');
    r.git('branch', 'topic');
    const changed = parseJson(xet(sb, r.dir, ['status', '--json']));
    assert.equal(changed.changed, true);
    assert.deepEqual(
      changed.changes.map((c: { kind: string; path?: string }) => `${c.kind} ${c.path ?? ''}`.trim()).sort(),
      ['file-extra new.txt', 'file-modified a.txt', 'ref-extra refs/heads/topic'],
    );
    assert.equal(r.git('count-objects', '-v'), objects, 'status stores nothing');
    const human = xet(sb, r.dir, ['status']);
    expectExit(human, 0);
    assert.match(human.stdout, new RegExp(`last snapshot ${snap.slice(0, 12)}`));
    assert.match(human.stdout, /file-modified +a\.txt/);
    // A capture makes status clean again, and agrees with capture's own unchanged check.
    const s2 = capture(sb, r.dir);
    assert.equal(parseJson(xet(sb, r.dir, ['status', '--json'])).changed, false);
    assert.equal(parseJson(xet(sb, r.dir, ['capture', '--json'])).unchanged, true);

    const f = sb.path('fork');
    const made = parseJson(xet(sb, r.dir, ['fork', s2, f, '--mode', 'copy', '--json']));
    const st = parseJson(xet(sb, r.dir, ['status', '--json']));
    assert.deepEqual(
      st.forks.map((x: { id: string; state: string; ofThisWorktree: boolean }) => [x.id, x.state, x.ofThisWorktree]),
      [[made.id, 'active', true]],
    );
    const inFork = parseJson(xet(sb, f, ['status', '--json']));
    assert.deepEqual(inFork.fork, { id: made.id, snapshot: s2, mode: 'copy' });
    assert.deepEqual(inFork.base, { snapshot: s2, kind: 'fork' });
    assert.equal(inFork.changed, false, JSON.stringify(inFork.changes));
    fs.writeFileSync(path.join(f, 'a.txt'), 'fork work\n');
    assert.equal(parseJson(xet(sb, f, ['status', '--json'])).changed, true);
  }),
);

test(
  'the CI recipe: docs/ci-restore.sh, as README quotes it, restores by id from a bare remote in a fresh HOME and runs the tests',
  sandboxed((sb) => {
    const script = fs.readFileSync(path.join(ROOT, 'docs', 'ci-restore.sh'), 'utf8');
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    assert.ok(readme.includes(script.trimEnd()), 'README.md quotes docs/ci-restore.sh verbatim');

    const bare = sb.path('server', 'project.git');
    fs.mkdirSync(path.dirname(bare));
    spawnSync('git', ['init', '-q', '--bare', bare], { env: sb.env });
    const r = initRepo(sb, 'producer');
    r.commit('init', {
      '.gitignore': 'node_modules/\nbuild/\n',
      'test.sh':
        '#!/bin/sh\nset -e\n. ./node_modules/dep/lib.sh\ncheck "$(cat build/out.txt)" "$(cat notes/wip.txt)"\n',
    });
    r.git('remote', 'add', 'origin', `file://${bare}`);
    r.git('push', '-q', 'origin', 'HEAD:refs/heads/main');
    r.write('node_modules/dep/lib.sh', 'check() { echo "tests ran: $1, $2"; }\n');
    r.write('build/out.txt', 'built');
    r.write('notes/wip.txt', 'unpushed work');
    const id = capture(sb, r.dir);
    // The producer publishes the snapshot ref with plain git.
    const push = run(sb, r.dir, 'git', ['push', '-q', 'origin', `refs/xet/snapshots/${id}`]);
    assert.equal(push.status, 0, push.stderr.toString());
    fs.rmSync(r.dir, { recursive: true, force: true }); // nothing of the producer is left

    const home = sb.path('ci-home');
    const ws = sb.path('ci-workspace');
    fs.mkdirSync(home);
    fs.mkdirSync(ws);
    const env = {
      PATH: `${path.dirname(XET_BIN)}${path.delimiter}${path.dirname(process.execPath)}${path.delimiter}/usr/bin:/bin`,
      HOME: home,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CEILING_DIRECTORIES: sb.root,
    };
    const ci = spawnSync(
      'sh',
      [path.join(ROOT, 'docs', 'ci-restore.sh'), `file://${bare}`, id.slice(0, 12), 'work', 'sh', './test.sh'],
      {
        cwd: ws,
        env,
        encoding: 'utf8',
      },
    );
    assert.equal(ci.status, 0, `ci-restore.sh failed:\n${ci.stdout}\n${ci.stderr}`);
    assert.match(ci.stdout, /tests ran: built, unpushed work/);
    assert.match(ci.stdout, /matches snapshot/);
    assert.deepEqual(fs.readdirSync(home), [], 'the CI run needs and leaves nothing in HOME');
    const url = spawnSync('git', ['-C', path.join(ws, 'work'), 'remote', 'get-url', 'xet-origin'], {
      env,
      encoding: 'utf8',
    });
    assert.equal(url.stdout.trim(), `file://${bare}`);
  }),
);
