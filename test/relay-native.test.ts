// The native thin client (native/git-xet-relay.c, run by bin/git-xet as a shell script): a line it
// relays is the line node's client relays, byte for byte in what it prints and how it exits, with no
// node started; whatever it does not relay still runs, through node, once. Every run here executes
// bin/git-xet as git does (the kernel reads its #! line), with a `node` first on PATH that notes each
// start, so whether node ran is seen, not inferred.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alive, waitGone } from './support/mcp';
import { stoppedClientRunsOnce } from './support/daemon-race';
import { publications } from './support/remote';

const BIN = path.resolve(__dirname, '..', '..', 'bin', 'git-xet');
const RELAY = path.resolve(__dirname, '..', 'native', 'git-xet-relay');
const built = fs.existsSync(RELAY);

let probeDir = '';
let nodeLog = '';
let ENV: NodeJS.ProcessEnv = {};

before(() => {
  probeDir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-native-'));
  nodeLog = path.join(probeDir, 'node.log');
  const bin = path.join(probeDir, 'bin');
  fs.mkdirSync(bin);
  // NODE_PROBE_LOG: neither GIT_ nor XET_, so not part of the environment client and daemon compare.
  fs.writeFileSync(
    path.join(bin, 'node'),
    `#!/bin/sh\nprintf 'node tried=%s\\n' "\${GIT_XET_DAEMON_TRIED-}" >> "$NODE_PROBE_LOG"\nexec ${JSON.stringify(process.execPath)} "$@"\n`,
    { mode: 0o755 },
  );
  ENV = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    NODE_PROBE_LOG: nodeLog,
    GIT_XET_DAEMON_IDLE_MS: '60000',
  };
  delete ENV.GIT_XET_NO_DAEMON;
  delete ENV.GIT_XET_PROGRESS;
  delete ENV.GIT_XET_DAEMON_TRIED;
});
after(() => {
  if (probeDir) fs.rmSync(probeDir, { recursive: true, force: true });
});

/** Skips (saying why) where the client was not built; in CI it must have been. */
function needsClient(t: { skip: (why: string) => void }): boolean {
  if (built) return true;
  assert.ok(!process.env.CI, `CI must build the native thin client (${RELAY}): see npm run build's output`);
  t.skip(`the native thin client was not built (${RELAY}): npm run build says why`);
  return false;
}

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', env: ENV });
}
function repo(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-native-repo-'));
  git(d, 'init', '-q');
  for (let i = 0; i < 20; i++) fs.writeFileSync(path.join(d, `f${i}.txt`), `file ${i}\n`);
  fs.mkdirSync(path.join(d, 'sub'));
  fs.writeFileSync(path.join(d, 'sub', 'a'), 'a\n');
  git(d, 'add', '.');
  git(d, '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-qm', 'init');
  return d;
}
function snapshotRefs(d: string): string[] {
  return git(d, 'for-each-ref', '--format=%(objectname)', 'refs/xet/snapshots/').split('\n').filter(Boolean);
}
/** The CLI through node, as the other suites run it (the daemon is started this way). */
function nodeXet(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Record<string, unknown> {
  const out = execFileSync(process.execPath, [BIN, '--json', ...args], {
    cwd,
    encoding: 'utf8',
    env: { ...ENV, ...env },
  });
  return JSON.parse(out) as Record<string, unknown>;
}

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
  /** The node starts this run made, each with the GIT_XET_DAEMON_TRIED it was given. */
  nodes: string[];
}

/** bin/git-xet executed as a program (or through `git xet` when viaGit), as a user's shell runs it;
 * `input` on its stdin (else an empty one). */
function run(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}, viaGit = false, input = ''): Run {
  fs.rmSync(nodeLog, { force: true });
  const e = { ...ENV, ...env };
  if (viaGit) e.PATH = `${path.dirname(BIN)}:${e.PATH}`;
  const o = { cwd, env: e, encoding: 'utf8', timeout: 120_000, input } as const;
  const r = viaGit ? spawnSync('git', ['xet', ...args], o) : spawnSync(BIN, args, o);
  const nodes = fs.existsSync(nodeLog) ? fs.readFileSync(nodeLog, 'utf8').split('\n').filter(Boolean) : [];
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, nodes };
}

test('capture and fork relayed by the native client: no node started, the output and exit code the CLI gives', (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  const forks = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-native-forks-'));
  try {
    nodeXet(d, ['daemon', 'start']);
    // A message with every kind of character the request must escape as JSON.stringify does.
    const message = 'quote " backslash \\ tab \t newline \n bell \u0007 del \u007f é 😀 \u2028 end';
    fs.appendFileSync(path.join(d, 'f0.txt'), 'edit\n');
    const cap = run(path.join(d, 'sub'), ['capture', '-m', message]);
    assert.deepEqual(cap.nodes, [], 'relayed without node');
    assert.equal(cap.status, 0, cap.stderr);
    assert.match(cap.stdout, /^[0-9a-f]{40}\n$/);
    const snap = cap.stdout.trim();
    fs.appendFileSync(path.join(d, 'f0.txt'), 'edit again\n');
    const own = run(d, ['capture', '-m', message], { GIT_XET_NO_DAEMON: '1' });
    assert.equal(own.status, 0, own.stderr);
    const messageOf = (s: string) => git(d, 'cat-file', 'commit', s).split('\n\n').slice(1).join('\n\n');
    assert.equal(messageOf(snap), messageOf(own.stdout.trim()), 'the message arrived byte for byte');
    assert.ok(messageOf(snap).includes('é 😀'));
    // Through git (which sets GIT_EXEC_PATH; the daemon was started without it): still relayed.
    fs.appendFileSync(path.join(d, 'f1.txt'), 'edit\n');
    const viaGit = run(d, ['--json', 'capture', '-m', 'through git'], {}, true);
    assert.deepEqual(viaGit.nodes, [], 'git xet capture relayed without node');
    assert.equal(viaGit.status, 0, viaGit.stderr);
    assert.ok(snapshotRefs(d).includes((JSON.parse(viaGit.stdout) as { snapshot: string }).snapshot));
    // Output with characters the reply escapes (a fork's directory), and errors on stderr with
    // their exit codes: the same bytes as the CLI's own run.
    const odd = path.join(forks, 'odd "dir" \\ é 😀');
    const dotGit = path.join(d, '.git');
    for (const [cwd, args] of [
      [d, ['--json', 'fork', snap, odd, '--mode', 'copy']],
      [d, ['--json', 'fork', snap, odd, '--mode', 'copy']],
      [d, ['fork', snap, odd]],
      [d, ['capture', '--bogus']],
      [d, ['--json', 'capture', '--bogus']],
      [d, ['--json', 'fork', 'no-such-snapshot', path.join(forks, 'f2')]],
      [dotGit, ['fork', snap, path.join(forks, 'f3')]],
    ] as [string, string[]][]) {
      const via = run(cwd, args);
      assert.deepEqual(via.nodes, [], `${args.join(' ')}: relayed without node`);
      const own = run(cwd, args, { GIT_XET_NO_DAEMON: '1' });
      assert.deepEqual(own.nodes, ['node tried='], `${args.join(' ')}: run by node`);
      // The first fork made the directory; the CLI's own run then refuses it, as the relayed one
      // does on the second line.
      if (args[1] === 'fork' && args[0] === '--json' && via.status === 0) {
        assert.equal((JSON.parse(via.stdout) as { dir: string }).dir, odd);
        continue;
      }
      assert.deepEqual(
        { status: via.status, stdout: via.stdout, stderr: via.stderr },
        { status: own.status, stdout: own.stdout, stderr: own.stderr },
        args.join(' '),
      );
      assert.notEqual(via.status, 0, args.join(' '));
    }
    assert.ok(fs.existsSync(path.join(odd, 'f0.txt')), 'the fork was made');
    assert.ok(!fs.existsSync(path.join(forks, 'f3')), 'no fork from inside .git');
    // Lines the client leaves to node, which runs them once: other commands, help, --remount, an
    // argument that is not UTF-8 (node would read U+FFFD), another environment than the daemon's
    // (refused for it, the line is node's to ask again: node prints its environment itself).
    for (const [args, env, tried] of [
      [['snapshots'], {}, ''],
      [['capture', '--help'], {}, ''],
      [['fork', '--remount', odd], {}, ''],
      [['capture', '-m', 'another TZ'], { TZ: process.env.TZ === 'Asia/Tokyo' ? 'America/Lima' : 'Asia/Tokyo' }, ''],
      [['capture', '-m', 'other tuning'], { XET_PACK_WORKERS: '1' }, ''],
      [['capture', '-m', 'no daemon asked'], { GIT_XET_NO_DAEMON: '1' }, ''],
    ] as [string[], NodeJS.ProcessEnv, string][]) {
      const r = run(d, args, env);
      assert.deepEqual(r.nodes, [`node tried=${tried}`], `${args.join(' ')}: node, once`);
    }
    // An argument that is not UTF-8 (node would read U+FFFD): only the process with the raw bytes
    // can tell, so node runs the line (as relay.ts leaves it to the CLI).
    fs.rmSync(nodeLog, { force: true });
    const raw = spawnSync('sh', ['-c', 'exec "$0" capture -m "$(printf \'f\\377f\')"', BIN], {
      cwd: d,
      env: ENV,
      encoding: 'utf8',
    });
    assert.equal(raw.status, 0, raw.stderr);
    assert.deepEqual(fs.readFileSync(nodeLog, 'utf8').split('\n').filter(Boolean), ['node tried=']);
  } finally {
    nodeXet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(forks, { recursive: true, force: true });
  }
});

test('push and handoff create relayed when all of it runs in the daemon; else declined, and node runs them once', (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  const sub = path.join(d, 'sub');
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-native-remotes-'));
  const store = path.join(elsewhere, 'store');
  const bare = path.join(elsewhere, 'bare.git');
  type Created = { id: string; created: boolean; push?: { kind: string; refs: { ref: string; status: string }[] } };
  const created = (r: Run): Created => {
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    return JSON.parse(r.stdout) as Created;
  };
  const fresh = (c: Created) =>
    (c.push?.refs ?? [])
      .filter((x) => x.status === 'new')
      .map((x) => x.ref)
      .sort();
  try {
    git(d, 'remote', 'add', 'store', `xet::${store}`);
    execFileSync('git', ['init', '-q', '--bare', bare], { env: ENV });
    git(d, 'remote', 'add', 'bare', bare);
    nodeXet(d, ['daemon', 'start']);
    const snap = run(d, ['capture', '-m', 'to hand off']).stdout.trim();
    assert.match(snap, /^[0-9a-f]{40}$/);
    const line = (title: string, ...more: string[]) => [
      '--json',
      'handoff',
      'create',
      snap,
      '--to',
      'B',
      '--from',
      'A',
      '--title',
      title,
      ...more,
    ];

    // A directory store, written in the daemon: no node, the handoff and its snapshot published.
    const toStore = run(sub, line('to the store', '--push', 'store'));
    assert.deepEqual(toStore.nodes, [], 'handoff create --push store: relayed');
    const one = created(toStore);
    assert.equal(one.push?.kind, 'xet');
    assert.deepEqual(fresh(one), [`refs/xet/handoffs/${one.id}`, `refs/xet/snapshots/${snap}`]);
    // What the store holds, as git lists it through git-remote-xet.
    const helper = { ...ENV, PATH: `${path.resolve(__dirname, '..', '..', 'remote-helper')}:${ENV.PATH}` };
    const listed = execFileSync('git', ['ls-remote', 'store', 'refs/xet/*'], { cwd: d, env: helper, encoding: 'utf8' });
    assert.match(
      listed,
      new RegExp(`^${git(d, 'rev-parse', `refs/xet/handoffs/${one.id}`).trim()}\trefs/xet/handoffs/${one.id}$`, 'm'),
    );

    // Its descriptor again, by a path relative to the client's directory: a file of the caller's
    // (it may be a pipe, its stdin, a /proc path), so node reads it. The same handoff, nothing new.
    const descriptor = execFileSync('git', ['cat-file', 'blob', `refs/xet/handoffs/${one.id}:descriptor.json`], {
      cwd: d,
      env: ENV,
    });
    fs.writeFileSync(path.join(d, 'descriptor.json'), descriptor);
    const again = run(sub, ['--json', 'handoff', 'create', '--descriptor', '../descriptor.json']);
    assert.deepEqual(again.nodes, ['node tried=1'], '--descriptor FILE: node');
    assert.deepEqual([created(again).id, created(again).created], [one.id, false]);

    // git xet push to the store: relayed.
    const two = created(run(d, line('pushed apart')));
    const pushed = run(d, ['--json', 'push', 'store']);
    assert.deepEqual(pushed.nodes, [], 'push store: relayed');
    assert.equal(pushed.status, 0, pushed.stderr);
    const pushedRefs = (JSON.parse(pushed.stdout) as { refs: { ref: string; status: string }[] }).refs;
    assert.deepEqual(
      pushedRefs.filter((x) => x.status === 'new').map((x) => x.ref),
      [`refs/xet/handoffs/${two.id}`],
    );

    // The same errors, byte for byte, as the CLI's own run.
    for (const args of [
      ['handoff', 'create', 'no-such-snapshot', '--to', 'B', '--push', 'store'],
      ['--json', 'handoff', 'create', snap],
      ['push', 'no-such-remote'],
    ]) {
      const via = run(d, args);
      const own = run(d, args, { GIT_XET_NO_DAEMON: '1' });
      assert.notEqual(own.status, 0, args.join(' '));
      assert.deepEqual(
        [via.status, via.stdout, via.stderr],
        [own.status, own.stdout, own.stderr],
        `${args.join(' ')}: the CLI's own output`,
      );
    }

    // What needs the client's own stdin, credentials, agent or hooks is declined: node runs it
    // (told the daemon was asked), once, and it does what it always did.
    const toBare = run(d, line('through git', '--push', 'bare'));
    assert.deepEqual(toBare.nodes, ['node tried=1'], 'a push through git: node');
    assert.equal(created(toBare).push?.kind, 'git');
    assert.ok(git(bare, 'for-each-ref', '--format=%(refname)').includes(`refs/xet/handoffs/${created(toBare).id}`));
    const stdin = run(d, ['--json', 'handoff', 'create', '--descriptor', '-'], {}, false, descriptor.toString('utf8'));
    assert.deepEqual(stdin.nodes, ['node tried=1'], '--descriptor -: node reads its own stdin');
    assert.deepEqual([created(stdin).id, created(stdin).created], [one.id, false]);
    git(d, 'config', 'xet.handoff.sign', 'true');
    git(d, 'config', 'user.signingKey', path.join(elsewhere, 'no-such-key'));
    git(d, 'config', 'gpg.format', 'ssh');
    const signed = run(d, line('signed'));
    assert.deepEqual(signed.nodes, ['node tried=1'], 'a signed handoff: node');
    assert.match(signed.stdout, /SIGNING_FAILED/);
    git(d, 'config', '--unset', 'xet.handoff.sign');
    const hookRan = path.join(elsewhere, 'pre-push-ran');
    fs.writeFileSync(path.join(d, '.git', 'hooks', 'pre-push'), `#!/bin/sh\ntouch ${JSON.stringify(hookRan)}\n`, {
      mode: 0o755,
    });
    created(run(d, line('a hook to run')));
    // git push runs the hook, then git-remote-xet (node again, not told anything).
    const hooked = run(d, ['--json', 'push', 'store'], { PATH: helper.PATH });
    assert.equal(hooked.nodes[0], 'node tried=1', 'a pre-push hook to run: node');
    assert.ok(
      hooked.nodes.slice(1).length > 0 && hooked.nodes.slice(1).every((n) => n === 'node tried='),
      'then the helper',
    );
    assert.equal(hooked.status, 0, `${hooked.stdout}${hooked.stderr}`);
    assert.ok(fs.existsSync(hookRan), 'the pre-push hook ran');
    fs.rmSync(path.join(d, '.git', 'hooks', 'pre-push'));

    // A reference-transaction hook of the user's runs when a handoff ref or a tracking ref is
    // written: with the caller's environment, so node writes them.
    const hookLog = path.join(elsewhere, 'reference-transaction.log');
    const refHook = path.join(d, '.git', 'hooks', 'reference-transaction');
    fs.writeFileSync(refHook, `#!/bin/sh\necho "$MARK" >> ${JSON.stringify(hookLog)}\n`, { mode: 0o755 });
    const withHook = run(d, line('a reference-transaction hook'), { MARK: 'the caller' });
    assert.deepEqual(withHook.nodes, ['node tried=1'], 'handoff create with a reference-transaction hook: node');
    created(withHook);
    const pushWithHook = run(d, ['--json', 'push', 'store'], { MARK: 'the caller' });
    assert.deepEqual(pushWithHook.nodes, ['node tried=1'], 'push with a reference-transaction hook: node');
    assert.equal(pushWithHook.status, 0, pushWithHook.stderr);
    // A capture writes its snapshot's ref: the same.
    fs.appendFileSync(path.join(d, 'f2.txt'), 'hooked\n');
    const captureWithHook = run(sub, ['capture'], { MARK: 'the caller' });
    assert.deepEqual(captureWithHook.nodes, ['node tried=1'], 'capture with a reference-transaction hook: node');
    assert.equal(captureWithHook.status, 0, captureWithHook.stderr);
    assert.ok(snapshotRefs(d).includes(captureWithHook.stdout.trim()));
    const marks = fs.readFileSync(hookLog, 'utf8').split('\n').filter(Boolean);
    assert.ok(
      marks.length > 0 && marks.every((m) => m === 'the caller'),
      `the hook ran as the caller: ${marks.join(',')}`,
    );
    // Not executable: git does not run it, and neither declines.
    fs.chmodSync(refHook, 0o644);
    created(run(d, line('a hook git does not run')));
    assert.deepEqual(run(d, ['--json', 'push', 'store']).nodes, [], 'a hook that is not executable: relayed');
    fs.rmSync(refHook);
    // git xet's own guard wrappers chain nothing of the user's: still relayed.
    nodeXet(d, ['hooks', 'install']);
    assert.ok(fs.existsSync(refHook));
    const guarded = run(d, line('guarded', '--push', 'store'));
    assert.deepEqual(guarded.nodes, [], "with git xet's own hooks: relayed");
    assert.equal(created(guarded).push?.kind, 'xet');
    fs.appendFileSync(path.join(d, 'f2.txt'), 'guarded\n');
    assert.deepEqual(run(d, ['capture']).nodes, [], "a capture with git xet's own hooks: relayed");
    nodeXet(d, ['hooks', 'uninstall']);

    // core.hooksPath in the home directory, as git reads it: its pre-push is found, so the push goes
    // through git (which runs it: this one refuses), in the CLI and through the daemon alike.
    const home = path.join(elsewhere, 'home');
    fs.mkdirSync(path.join(home, 'hooks'), { recursive: true });
    fs.writeFileSync(path.join(home, 'hooks', 'pre-push'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    git(d, 'config', 'core.hooksPath', '~/hooks');
    created(run(d, line('refused by a hook in ~')));
    const refusedHere = run(d, ['--json', 'push', 'store'], { HOME: home, GIT_XET_NO_DAEMON: '1', PATH: helper.PATH });
    assert.notEqual(refusedHere.status, 0, `the pre-push hook in ~/hooks refused the push: ${refusedHere.stdout}`);
    git(d, 'config', '--unset', 'core.hooksPath');
  } finally {
    nodeXet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(elsewhere, { recursive: true, force: true });
  }
});

test('a relayed push whose client is interrupted before it publishes publishes nothing, as the CLI would not', async (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-native-interrupted-'));
  const pauses = path.join(elsewhere, 'pauses');
  fs.mkdirSync(pauses);
  const store = path.join(elsewhere, 'store');
  // The daemon and its clients share the environment (the daemon refuses another): the daemon
  // waits once at each: the last point before a publication is recorded, just before the store's
  // pack is written, and with the pack written but no state naming it yet.
  const paused = {
    GIT_XET_TEST_PAUSE_AT: 'push:before-record,push:before-pack,after-pack',
    GIT_XET_TEST_PAUSE_DIR: pauses,
  };
  const helper = { ...ENV, PATH: `${path.resolve(__dirname, '..', '..', 'remote-helper')}:${ENV.PATH}` };
  // No store yet (the first push creates it) lists nothing.
  const storeRefs = () =>
    fs.existsSync(store)
      ? execFileSync('git', ['ls-remote', 'store', 'refs/xet/*'], { cwd: d, env: helper, encoding: 'utf8' })
      : '';
  try {
    git(d, 'remote', 'add', 'store', `xet::${store}`);
    nodeXet(d, ['daemon', 'start'], paused);
    const snap = run(d, ['capture'], paused).stdout.trim();
    const made = run(
      d,
      ['--json', 'handoff', 'create', snap, '--to', 'B', '--from', 'A', '--title', 'interrupted'],
      paused,
    );
    assert.deepEqual(made.nodes, [], 'relayed');
    const id = (JSON.parse(made.stdout) as { id: string }).id;

    // The push's client, run as a user's shell runs it, interrupted (SIGINT) while the daemon holds
    // it at `point`; then a line queued behind the push returns once the daemon is done with it.
    const interrupted = async (point: string, round: string) => {
      const client = spawn(BIN, ['push', 'store'], { cwd: d, env: { ...ENV, ...paused } });
      const ended = new Promise<NodeJS.Signals | number | null>((r) =>
        client.on('close', (code, sig) => r(sig ?? code)),
      );
      const reached = path.join(pauses, `${point}.reached`);
      for (let i = 0; i < 1000 && !fs.existsSync(reached); i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(fs.existsSync(reached), `the daemon reached ${point}`);
      client.kill('SIGINT');
      assert.equal(await ended, 'SIGINT');
      fs.writeFileSync(path.join(pauses, `${point}.go`), '');
      fs.appendFileSync(path.join(d, 'f0.txt'), `${round}\n`);
      const after = run(d, ['capture'], paused);
      assert.deepEqual(after.nodes, [], 'the daemon still serves');
      assert.equal(after.status, 0, after.stderr);
      assert.ok(!storeRefs().includes(`refs/xet/handoffs/${id}`), `interrupted at ${point}: nothing was published`);
    };
    // Before its publication is recorded: none is.
    await interrupted('push:before-record', 'one');
    assert.deepEqual(publications(path.join(d, '.git')), []);
    // About to write its pack: git is stopped, no pack is written, the publication is resolved.
    await interrupted('push:before-pack', 'two');
    assert.deepEqual(
      publications(path.join(d, '.git')).map((p) => p.state),
      ['not-published'],
    );
    const packs = () => fs.readdirSync(path.join(store, 'packs')).filter((n) => n.endsWith('.pack'));
    assert.deepEqual(packs(), [], 'no pack written');
    assert.deepEqual(fs.readdirSync(path.join(store, 'tmp')), [], 'no temporary file left');
    // With its pack in the store and no state naming it: the publication is resolved, unpublished
    // (the pack is the store gc's, as after a killed push).
    await interrupted('after-pack', 'three');
    assert.deepEqual(
      publications(path.join(d, '.git')).map((p) => p.state),
      ['not-published', 'not-published'],
    );
    assert.equal(packs().length, 1);

    // The next push publishes it, with nothing earlier left to resolve.
    const again = run(d, ['--json', 'push', 'store'], paused);
    assert.deepEqual(again.nodes, [], 'relayed');
    assert.equal(again.status, 0, again.stderr);
    const r = JSON.parse(again.stdout) as { refs: { ref: string; status: string }[]; resolved: unknown[] };
    assert.deepEqual(r.resolved, []);
    assert.ok(
      r.refs.some((x) => x.ref === `refs/xet/handoffs/${id}` && x.status === 'new'),
      again.stdout,
    );
    assert.ok(storeRefs().includes(`refs/xet/handoffs/${id}`));
  } finally {
    nodeXet(d, ['daemon', 'stop'], paused);
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(elsewhere, { recursive: true, force: true });
  }
});

test('the native client finds the daemon of a linked worktree (.git a file) and of the top from below', (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  const wt = `${d}-linked`;
  try {
    git(d, 'worktree', 'add', '-q', wt);
    nodeXet(wt, ['daemon', 'start']);
    fs.appendFileSync(path.join(wt, 'sub', 'a'), 'edit\n');
    const r = run(path.join(wt, 'sub'), ['--json', 'capture', '-m', 'linked']);
    assert.deepEqual(r.nodes, [], 'relayed without node');
    assert.equal(r.status, 0, r.stderr);
    const snap = (JSON.parse(r.stdout) as { snapshot: string }).snapshot;
    assert.match(git(wt, 'cat-file', 'commit', snap), /linked/);
    // Through a symlink to bin/git-xet, as npm installs it: the client found from the link's target.
    const link = path.join(probeDir, 'git-xet-link');
    fs.rmSync(link, { force: true });
    fs.symlinkSync(BIN, link);
    fs.appendFileSync(path.join(wt, 'sub', 'a'), 'edit again\n');
    fs.rmSync(nodeLog, { force: true });
    const linked = spawnSync(link, ['--json', 'capture'], { cwd: wt, env: ENV, encoding: 'utf8' });
    assert.equal(linked.status, 0, linked.stderr);
    assert.ok(!fs.existsSync(nodeLog), 'relayed through the link without node');
    // The main worktree has no daemon of its own: its line runs in node, which asks nobody.
    fs.appendFileSync(path.join(d, 'f2.txt'), 'edit\n');
    const main = run(d, ['--json', 'capture']);
    assert.deepEqual(main.nodes, ['node tried='], 'no daemon there: node');
    assert.equal(main.status, 0, main.stderr);
  } finally {
    try {
      nodeXet(wt, ['daemon', 'stop']);
    } catch {
      // not started
    }
    fs.rmSync(wt, { recursive: true, force: true });
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test("git's own exec path in GIT_EXEC_PATH is the same environment as none; another one is not", (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  try {
    // Started through git: the daemon's environment has GIT_EXEC_PATH (git sets it for git-xet).
    const started = run(d, ['--json', 'daemon', 'start'], {}, true);
    assert.equal(started.status, 0, started.stderr);
    fs.appendFileSync(path.join(d, 'f6.txt'), 'edit\n');
    const plain = run(d, ['--json', 'capture', '-m', 'without GIT_EXEC_PATH']);
    assert.deepEqual(plain.nodes, [], 'relayed without node');
    assert.equal(plain.status, 0, plain.stderr);
    const own = execFileSync('git', ['--exec-path'], { encoding: 'utf8', env: ENV }).trim();
    fs.appendFileSync(path.join(d, 'f6.txt'), 'edit\n');
    assert.deepEqual(run(d, ['capture'], { GIT_EXEC_PATH: own }).nodes, [], 'the built-in one, set: relayed');
    fs.appendFileSync(path.join(d, 'f6.txt'), 'edit\n');
    const other = run(d, ['capture'], { GIT_EXEC_PATH: `${own}/../elsewhere` });
    // Refused for its environment, the line goes to node, which asks again with its own print.
    assert.deepEqual(other.nodes, ['node tried='], 'another exec path: not relayed');
  } finally {
    nodeXet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a suspended daemon: the native client gives up once, node captures without asking again, the late line never runs', async (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  let pid = 0;
  try {
    pid = nodeXet(d, ['daemon', 'start']).pid as number;
    process.kill(pid, 'SIGSTOP');
    fs.appendFileSync(path.join(d, 'f3.txt'), 'edit\n');
    const cap = run(d, ['--json', 'capture']);
    assert.equal(cap.status, 0, cap.stderr);
    // Told the daemon was asked, node runs the line itself (asking again would wait 3 s more).
    assert.deepEqual(cap.nodes, ['node tried=1']);
    const taken = snapshotRefs(d);
    assert.ok(taken.includes((JSON.parse(cap.stdout) as { snapshot: string }).snapshot));
    process.kill(pid, 'SIGCONT');
    nodeXet(d, ['daemon', 'stop']);
    await waitGone(pid, 5000, 'the daemon');
    assert.deepEqual(snapshotRefs(d), taken, 'the late line made no second snapshot');
  } finally {
    if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a native client stopped (Ctrl-Z) past its deadline after the daemon took its line: the line runs once', async (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  let pid = 0;
  try {
    pid = nodeXet(d, ['daemon', 'start']).pid as number;
    fs.appendFileSync(path.join(d, 'f4.txt'), 'edit\n');
    fs.rmSync(nodeLog, { force: true });
    await stoppedClientRunsOnce({
      dir: d,
      daemonPid: pid,
      command: [BIN, '--json', 'capture'],
      env: ENV,
      snapshotRefs,
    });
    assert.ok(!fs.existsSync(nodeLog), 'no node started');
  } finally {
    if (pid && alive(pid)) {
      process.kill(pid, 'SIGCONT');
      nodeXet(d, ['daemon', 'stop']);
    }
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('without a daemon every line runs in node once, and the native client needs no arguments to say its use', (t) => {
  if (!needsClient(t)) return;
  const d = repo();
  try {
    fs.appendFileSync(path.join(d, 'f5.txt'), 'edit\n');
    const r = run(d, ['--json', 'capture']);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(r.nodes, ['node tried=']);
    const usage = spawnSync(RELAY, [], { encoding: 'utf8' });
    assert.equal(usage.status, 70);
    assert.match(usage.stderr, /usage: git-xet-relay/);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a reply is read as node reads it: the same bytes printed, the same exit, the same fallbacks', async (t) => {
  if (!needsClient(t)) return;
  const net = await import('node:net');
  const d = repo();
  const sockDir = path.join(d, '.git', 'xet', 'daemon');
  fs.mkdirSync(sockDir, { recursive: true });
  // A scripted daemon: what it sends once a request line came (the acknowledgement or not, then a
  // reply, or nothing at all), and how many connections it took.
  let script: { ack: boolean; reply: Buffer | null } = { ack: true, reply: null };
  let connections = 0;
  let request = '';
  const open = new Set<import('node:net').Socket>();
  const server = net.createServer((sock) => {
    connections++;
    open.add(sock);
    sock.on('close', () => open.delete(sock));
    sock.on('error', () => undefined);
    let line = '';
    sock.on('data', (b: Buffer) => {
      if (line.includes('\n')) return;
      line += b.toString('latin1');
      if (!line.includes('\n')) return;
      request = Buffer.from(line.slice(0, line.indexOf('\n')), 'latin1').toString('utf8');
      if (script.ack) sock.write('{"accepted":true}\n');
      if (script.reply) sock.end(Buffer.concat([script.reply, Buffer.from('\n')]));
    });
  });
  await new Promise<void>((r) => server.listen(path.join(sockDir, 'sock'), r));
  const runAsync = (cmd: string, args: string[], cwd = d, env = ENV, readAfterMs = 0) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const c = spawn(cmd, args, { cwd, env });
      if (readAfterMs) {
        c.stdout.pause();
        setTimeout(() => c.stdout.resume(), readAfterMs);
      }
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      c.stdout.on('data', (b: Buffer) => out.push(b));
      c.stderr.on('data', (b: Buffer) => err.push(b));
      c.on('close', (status) =>
        resolve({ status, stdout: Buffer.concat(out).toString('hex'), stderr: Buffer.concat(err).toString('hex') }),
      );
    });
  const result = (extra = '') =>
    `"result":{"exitCode":5,"stdout":"FAKE \u00e9 \\ud83d\\ude00\\n","stderr":"warned\\n"${extra}}`;
  const bytes = (...parts: (string | number[])[]) =>
    Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
  // Deeper than any recursion would go: JSON.parse takes it, so must the client (review 33).
  const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
  const deepObjects = `${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`;
  // [what, the reply (null: none), acknowledged, printed by the client (else run by the CLI: a
  // usage error, exit 2), connections the native client's run makes (its own, and node's after it)]
  const cases: [string, Buffer | null, boolean, boolean, number][] = [
    ['a reply', bytes(`{"ok":true,${result()}}`), true, true, 1],
    ['not ok', bytes(`{"ok":false,${result()}}`), true, false, 1],
    ['"ok" with a NUL', bytes(`{"ok\\u0000":true,${result()}}`), true, false, 1],
    ['ok 1', bytes(`{"ok":1,${result()}}`), true, true, 1],
    ['ok "yes"', bytes(`{"ok":"yes",${result()}}`), true, true, 1],
    ['ok ""', bytes(`{"ok":"",${result()}}`), true, false, 1],
    ['ok, then not', bytes(`{"ok":true,"ok":false,${result()}}`), true, false, 1],
    ['not ok, then ok', bytes(`{"ok":false,"ok":true,${result()}}`), true, true, 1],
    ['exit 1.0', bytes('{"ok":true,"result":{"exitCode":1.0,"stdout":"a","stderr":""}}'), true, true, 1],
    ['exit -0', bytes('{"ok":true,"result":{"exitCode":-0,"stdout":"a","stderr":""}}'), true, true, 1],
    ['exit 2e0', bytes('{"ok":true,"result":{"exitCode":2e0,"stdout":"a","stderr":""}}'), true, true, 1],
    ['exit "1"', bytes('{"ok":true,"result":{"exitCode":"1","stdout":"a","stderr":""}}'), true, false, 1],
    ['exit 256', bytes('{"ok":true,"result":{"exitCode":256,"stdout":"a","stderr":""}}'), true, false, 1],
    ['exit 1.5', bytes('{"ok":true,"result":{"exitCode":1.5,"stdout":"a","stderr":""}}'), true, false, 1],
    ['stdout not a string', bytes('{"ok":true,"result":{"exitCode":1,"stdout":7,"stderr":""}}'), true, false, 1],
    [
      'keys with a NUL',
      bytes('{"ok":true,"result":{"exitCode\\u0000":5,"exitCode":3,"stdout":"o","stderr":"","stdout\\u0000":"X"}}'),
      true,
      true,
      1,
    ],
    [
      'bytes that are not UTF-8',
      bytes(
        '{"ok":true,"result":{"exitCode":4,"stdout":"a',
        [0xff, 0xed, 0xa0, 0x80],
        'b',
        [0xc3],
        '","stderr":"',
        [0xf0, 0x9f, 0x98],
        '"}}',
      ),
      true,
      true,
      1,
    ],
    [
      'a lone surrogate',
      bytes('{"ok":true,"result":{"exitCode":0,"stdout":"x\\ud800y\\udc00","stderr":""}}'),
      true,
      true,
      1,
    ],
    ['deep nesting', bytes(`{"x":${deep},"ok":true,${result()}}`), true, true, 1],
    ['deep objects', bytes(`{"x":${deepObjects},"ok":true,${result()}}`), true, true, 1],
    ['deep and unclosed', bytes(`{"x":${deep.slice(0, 20_010)},"ok":true,${result()}}`), true, false, 1],
    ['not JSON', bytes('this is not JSON'), true, false, 1],
    ['an array', bytes(`[{"ok":true,${result()}}]`), true, false, 1],
    ['a second acknowledgement', bytes('{"accepted":true}'), true, false, 1],
    // Refused for its build or environment: node asks again with its own (and is refused again).
    ['refused: version', bytes('{"ok":false,"refused":"version"}'), true, false, 2],
    ['refused: environment', bytes('{"ok":false,"refused":"environment"}'), true, false, 2],
    // Refused as late: node runs the line without asking again.
    ['refused: late', bytes('{"ok":false,"refused":"late"}'), true, false, 1],
    // Declined by the command (a push through git, a signed handoff): node runs it, asking no one.
    [
      'refused: declined',
      bytes('{"ok":false,"refused":"declined","reason":"the push goes through git"}'),
      true,
      false,
      1,
    ],
    ['closed without a reply', bytes(''), true, false, 1],
    // Never acknowledged: both clients wait 3 s, then the CLI runs the line, asking no one again.
    ['no acknowledgement', null, false, false, 1],
  ];
  try {
    const line = ['capture', '--bogus'];
    for (const [what, reply, ack, printed, nativeConnections] of cases) {
      script = { ack, reply };
      connections = 0;
      const native = await runAsync(BIN, line);
      const seenNative = connections;
      for (const s of open) s.destroy();
      connections = 0;
      const node = await runAsync(process.execPath, [BIN, ...line]);
      for (const s of open) s.destroy();
      assert.deepEqual(native, node, `${what}: the native client and node's print and exit the same`);
      assert.equal(seenNative, nativeConnections, `${what}: connections`);
      assert.equal(
        native.status === 2 && native.stderr.length > 0,
        !printed,
        `${what}: ${printed ? 'printed' : 'run by the CLI'}`,
      );
    }
    // Which lines are relayed: both clients on the same words (a relayed one prints the scripted
    // reply; another is the CLI's usage error, with no connection).
    script = { ack: true, reply: bytes(`{"ok":true,${result()}}`) };
    for (const [words, relayed] of [
      [['push', '--bogus'], true],
      [['--json', 'push', '--bogus'], true],
      [['handoff', 'create', '--bogus'], true],
      [['-q', 'handoff', 'create', '--bogus'], true],
      [['handoff', 'list', '--bogus'], false],
      [['handoff', '--bogus', 'create'], false],
      [['handoff'], false],
      [['push', '--help'], false],
      [['handoff', 'create', 'help'], false],
    ] as [string[], boolean][]) {
      connections = 0;
      const native = await runAsync(BIN, words);
      const seenNative = connections;
      for (const s of open) s.destroy();
      connections = 0;
      const node = await runAsync(process.execPath, [BIN, ...words]);
      for (const s of open) s.destroy();
      assert.deepEqual(native, node, `${words.join(' ')}: the native client and node's print and exit the same`);
      assert.equal(seenNative, relayed ? 1 : 0, `${words.join(' ')}: ${relayed ? 'relayed' : 'not relayed'}`);
      assert.equal(native.status === 5, relayed, `${words.join(' ')}: the scripted reply's exit`);
    }
    // The request itself: what node's client sends, but for its deadline, from a directory below the
    // top with characters to escape, with environment values to escape, and from a terminal (where
    // the line says so, and how wide it is).
    const odd = path.join(d, 'sub dir "é" \\ 😀');
    fs.mkdirSync(odd);
    const envOdd = { ...ENV, XET_ODD: 'tab\tquote"back\\slash\u0001 é 😀 \u2028', GIT_XET_ODD: '' };
    script = { ack: true, reply: bytes(`{"ok":true,${result()}}`) };
    const asked = (r: string) => {
      const q = JSON.parse(r) as Record<string, unknown>;
      assert.equal(typeof q.deadline, 'number');
      assert.ok(Math.abs((q.deadline as number) - Date.now()) < 60_000, 'a deadline in milliseconds since 1970');
      delete q.deadline;
      return q;
    };
    await runAsync(BIN, ['capture', '-m', 'm "é"'], odd, envOdd);
    const fromNative = asked(request);
    await runAsync(process.execPath, [BIN, 'capture', '-m', 'm "é"'], odd, envOdd);
    assert.deepEqual(fromNative, asked(request), 'the same request');
    assert.equal(fromNative.stderrTTY, false);
    // script(1) gives the line a terminal (util-linux; CI installs it).
    const inTerminal = (cmd: string) => runAsync('script', ['-qec', cmd, '/dev/null']);
    await inTerminal(`${JSON.stringify(BIN)} capture`);
    const ttyNative = asked(request);
    await inTerminal(`${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} capture`);
    assert.deepEqual(ttyNative, asked(request), 'the same request from a terminal');
    assert.equal(ttyNative.stderrTTY, true);
    // Output larger than a pipe holds, to a standard output left non-blocking by the caller and read
    // late: written whole, as node writes it.
    const big = 'x'.repeat(10_000_000);
    script = { ack: true, reply: bytes(`{"ok":true,"result":{"exitCode":4,"stdout":"${big}","stderr":""}}`) };
    const nonBlocking = ['-c', 'import os, sys; os.set_blocking(1, False); os.execv(sys.argv[1], sys.argv[1:])'];
    const late = await runAsync('python3', [...nonBlocking, BIN, 'capture'], d, ENV, 1000);
    assert.equal(late.status, 4);
    assert.equal(late.stdout.length / 2, big.length, 'all of stdout');
  } finally {
    for (const s of open) s.destroy();
    await new Promise((r) => server.close(r));
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a daemon that takes no connection (its queue full): the native client does not wait for it', async (t) => {
  if (!needsClient(t)) return;
  const net = await import('node:net');
  const d = repo();
  const sock = path.join(d, '.git', 'xet', 'daemon', 'sock');
  fs.mkdirSync(path.dirname(sock), { recursive: true });
  // A listener that never accepts, its queue one connection long (python3: node's listen accepts).
  const listener = spawn('python3', [
    '-c',
    'import socket, sys, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(0)\nprint("ready", flush=True)\ntime.sleep(600)',
    sock,
  ]);
  const held: import('node:net').Socket[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      listener.stdout.once('data', () => resolve());
      listener.once('exit', (c) => reject(new Error(`the listener exited ${c}`)));
    });
    // Fill its queue: connect until the kernel refuses (EAGAIN).
    for (let i = 0; i < 16; i++) {
      const full = await new Promise<boolean>((resolve) => {
        const c = net.createConnection(sock);
        held.push(c);
        c.once('connect', () => resolve(false));
        c.once('error', () => resolve(true));
      });
      if (full) break;
    }
    const r = run(d, ['capture', '--bogus']);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /bogus/);
    assert.deepEqual(r.nodes, ['node tried='], 'left to node, which found the queue full too');
  } finally {
    for (const c of held) c.destroy();
    listener.kill('SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('bin/git-xet without a build: run as a program or by node, it says to build, exit 70', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-unbuilt-'));
  try {
    fs.mkdirSync(path.join(dir, 'bin'));
    fs.copyFileSync(BIN, path.join(dir, 'bin', 'git-xet'));
    fs.chmodSync(path.join(dir, 'bin', 'git-xet'), 0o755);
    for (const [cmd, args] of [
      [path.join(dir, 'bin', 'git-xet'), ['capture']],
      [process.execPath, [path.join(dir, 'bin', 'git-xet'), 'capture']],
    ] as [string, string[]][]) {
      const r = spawnSync(cmd, args, { cwd: dir, env: ENV, encoding: 'utf8' });
      assert.equal(r.status, 70, r.stderr);
      assert.match(r.stderr, /not built yet; run `npm run build`/);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a native client that cannot run here (dist/ from another machine): every line runs in node', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-foreign-client-'));
  try {
    fs.mkdirSync(path.join(dir, 'bin'));
    fs.mkdirSync(path.join(dir, 'dist', 'native'), { recursive: true });
    fs.copyFileSync(BIN, path.join(dir, 'bin', 'git-xet'));
    fs.chmodSync(path.join(dir, 'bin', 'git-xet'), 0o755);
    fs.symlinkSync(path.resolve(__dirname, '..', 'src'), path.join(dir, 'dist', 'src'));
    // An executable the kernel will not run (not an ELF for this machine).
    fs.writeFileSync(path.join(dir, 'dist', 'native', 'git-xet-relay'), Buffer.from('\x7fELF\x02\x01\x01garbage'), {
      mode: 0o755,
    });
    fs.rmSync(nodeLog, { force: true });
    const r = spawnSync(path.join(dir, 'bin', 'git-xet'), ['--version'], { cwd: dir, env: ENV, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^\d+\.\d+\.\d+/);
    assert.equal(r.stderr, '');
    assert.deepEqual(fs.readFileSync(nodeLog, 'utf8').split('\n').filter(Boolean), ['node tried=']);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a package.json whose version is empty: the build id is still node's, and the line is relayed", (t) => {
  if (!needsClient(t)) return;
  const root = path.resolve(__dirname, '..', '..');
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-empty-version-'));
  const d = repo();
  try {
    for (const dir of ['bin', 'dist']) fs.cpSync(path.join(root, dir), path.join(copy, dir), { recursive: true });
    fs.symlinkSync(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as Record<string, unknown>;
    fs.writeFileSync(path.join(copy, 'package.json'), JSON.stringify({ ...pkg, version: '' }));
    const bin = path.join(copy, 'bin', 'git-xet');
    execFileSync(process.execPath, [bin, 'daemon', 'start'], { cwd: d, env: ENV });
    fs.appendFileSync(path.join(d, 'f7.txt'), 'edit\n');
    fs.rmSync(nodeLog, { force: true });
    const r = spawnSync(bin, ['--json', 'capture'], { cwd: d, env: ENV, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(!fs.existsSync(nodeLog), 'relayed without node');
    assert.match((JSON.parse(r.stdout) as { snapshot: string }).snapshot, /^[0-9a-f]{40}$/);
  } finally {
    try {
      execFileSync(process.execPath, [path.join(copy, 'bin', 'git-xet'), 'daemon', 'stop'], { cwd: d, env: ENV });
    } catch {
      // not started
    }
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(copy, { recursive: true, force: true });
  }
});
