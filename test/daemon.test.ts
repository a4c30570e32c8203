// The resident process (src/daemon/): a real daemon process on a real socket. Captures through it
// are the captures the normal path makes; the CLI never depends on it (killed, stale, absent).
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alive, waitGone } from './support/mcp';
import { stoppedClientRunsOnce } from './support/daemon-race';

const BIN = path.resolve(__dirname, '..', '..', 'bin', 'git-xet');
const ENV: NodeJS.ProcessEnv = { ...process.env, GIT_XET_DAEMON_IDLE_MS: '60000' };
delete ENV.GIT_XET_NO_DAEMON;

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', env: ENV });
}
function xet(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Record<string, unknown> {
  const out = execFileSync(process.execPath, [BIN, '--json', ...args], {
    cwd,
    encoding: 'utf8',
    env: { ...ENV, ...env },
  });
  return JSON.parse(out) as Record<string, unknown>;
}
function repo(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-daemon-'));
  git(d, 'init', '-q');
  for (let i = 0; i < 30; i++) fs.writeFileSync(path.join(d, `f${i}.txt`), `file ${i}\n`);
  fs.mkdirSync(path.join(d, 'sub'));
  fs.writeFileSync(path.join(d, 'sub', 'a'), 'a\n');
  fs.writeFileSync(path.join(d, '.gitignore'), 'build/\n');
  git(d, 'add', '.');
  git(d, '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-qm', 'init');
  return d;
}
/** The snapshot's trees and filemeta, without the manifest (it holds times). */
function parts(cwd: string, snap: string): string {
  return git(cwd, 'ls-tree', snap)
    .split('\n')
    .filter((l) => l && !l.endsWith('\tmanifest.json'))
    .join('\n');
}
function snapshotRefs(d: string): string[] {
  return git(d, 'for-each-ref', '--format=%(objectname)', 'refs/xet/snapshots/').split('\n').filter(Boolean);
}
/** A fault point a capture waits at (once per process) until told to go on: the environment that
 * sets it (a daemon and its clients must share it), its reaching, and its release. */
function pausePoint(point: string): {
  env: NodeJS.ProcessEnv;
  reached: (what: string) => Promise<void>;
  go: () => void;
  remove: () => void;
} {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-daemon-pause-'));
  return {
    env: { GIT_XET_TEST_PAUSE_AT: point, GIT_XET_TEST_PAUSE_DIR: dir },
    reached: async (what) => {
      const file = path.join(dir, `${point}.reached`);
      for (const end = Date.now() + 30_000; !fs.existsSync(file);) {
        assert.ok(Date.now() < end, what);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    go: () => fs.writeFileSync(path.join(dir, `${point}.go`), ''),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
function edit(d: string, step: number): void {
  fs.appendFileSync(path.join(d, `f${step}.txt`), `edit ${step}\n`);
  fs.writeFileSync(path.join(d, `new${step}.txt`), `new ${step}\n`);
  fs.mkdirSync(path.join(d, 'build'), { recursive: true });
  fs.writeFileSync(path.join(d, 'build', `o${step}`), `obj ${step}\n`);
  if (step % 2) fs.rmSync(path.join(d, `f${step + 10}.txt`));
  if (step === 2) fs.renameSync(path.join(d, 'sub'), path.join(d, 'sub2'));
  if (step === 3) git(d, 'add', 'new1.txt');
  // Directories made, moved, replaced and removed (the daemon's watch reads only these again).
  if (step === 5) fs.mkdirSync(path.join(d, 'deep', 'er', 'est'), { recursive: true });
  if (step === 6) fs.writeFileSync(path.join(d, 'deep', 'er', 'est', 'x'), 'x\n');
  if (step === 7) fs.renameSync(path.join(d, 'deep', 'er'), path.join(d, 'sub2', 'er'));
  if (step === 8) {
    fs.mkdirSync(path.join(d, 'deep', 'er'));
    fs.writeFileSync(path.join(d, 'deep', 'er', 'y'), 'y\n');
  }
  if (step === 9) fs.rmSync(path.join(d, 'sub2'), { recursive: true });
  if (step === 10) fs.writeFileSync(path.join(d, '.gitignore'), 'build/\ndeep/\n');
}

test('daemon start|status|stop, and a second start finds the running one', () => {
  const d = repo();
  try {
    const a = xet(d, ['daemon', 'start']);
    assert.equal(a.running, true);
    assert.equal(typeof a.pid, 'number');
    assert.ok(fs.lstatSync(path.join(d, '.git', 'xet', 'daemon', 'sock')).isSocket());
    assert.equal(xet(d, ['daemon', 'start']).pid, a.pid);
    assert.equal(xet(d, ['daemon', 'status']).pid, a.pid);
    assert.equal(xet(d, ['daemon', 'stop']).pid, a.pid);
    assert.equal(xet(d, ['daemon', 'status']).running, false);
    assert.ok(!fs.existsSync(path.join(d, '.git', 'xet', 'daemon', 'pid')));
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('the same edits captured through the daemon and without it give the same snapshot', (t) => {
  const d = repo();
  try {
    const pid = xet(d, ['daemon', 'start']).pid as number;
    for (let step = 0; step < 12; step++) {
      edit(d, step);
      const via = xet(d, ['capture']);
      const direct = xet(d, ['capture', '--always'], { GIT_XET_NO_DAEMON: '1' });
      assert.notEqual(via.snapshot, direct.snapshot);
      assert.equal(parts(d, via.snapshot as string), parts(d, direct.snapshot as string), `step ${step}`);
      for (const k of ['files', 'bytes', 'tracked', 'untracked', 'ignored'])
        assert.equal(via[k], direct[k], `${k} at step ${step}`);
    }
    // The daemon made them: it is the same process, still running, and watching.
    const status = xet(d, ['daemon', 'status']);
    assert.equal(status.pid, pid);
    const watch = status.watch as { watching: boolean; dirs: number; reason: string | null };
    if (watch.reason?.startsWith('the native module')) return t.diagnostic(`watch not checked: ${watch.reason}`);
    assert.equal(watch.watching, true, String(watch.reason));
    assert.ok(watch.dirs >= 4, `${watch.dirs} directories watched`);
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('captures whose paths did not change take the lstat begun with their request, and miss no edit', (t) => {
  const d = repo();
  try {
    xet(d, ['daemon', 'start']);
    xet(d, ['capture']); // reads everything; the next ones begin from its paths
    for (let step = 0; step < 8; step++) {
      // Same paths, same sizes: only the content, and every other step the time put back as it
      // was (then only the change time tells).
      const name = `f${step % 3}.txt`;
      const f = path.join(d, name);
      const st = fs.statSync(f);
      const text = fs.readFileSync(f, 'utf8');
      fs.writeFileSync(f, `${String.fromCharCode(65 + step)}${text.slice(1)}`);
      if (step % 2) fs.utimesSync(f, st.atime, st.mtime);
      const via = xet(d, ['capture', '--always']);
      const direct = xet(d, ['capture', '--always'], { GIT_XET_NO_DAEMON: '1' });
      assert.equal(parts(d, via.snapshot as string), parts(d, direct.snapshot as string), `step ${step}`);
      assert.equal(
        git(d, 'cat-file', 'blob', `${via.snapshot}:files/${name}`),
        fs.readFileSync(f, 'utf8'),
        `step ${step}`,
      );
    }
    // A path added: that capture lstats its own paths (and the next one begins from those).
    fs.writeFileSync(path.join(d, 'added.txt'), 'added\n');
    const added = xet(d, ['capture', '--always']);
    assert.equal(git(d, 'cat-file', 'blob', `${added.snapshot}:files/added.txt`), 'added\n');
    const status = xet(d, ['daemon', 'status']);
    const counts = status.lstatHeadStart as { used: number; unused: number } | undefined;
    const reason = (status.watch as { reason: string | null } | undefined)?.reason;
    if (reason?.startsWith('the native module')) return t.diagnostic(`head start not checked: ${reason}`);
    assert.deepEqual(counts, { used: 8, unused: 2 }, JSON.stringify(status));
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a daemon killed with SIGKILL, a stale socket or a foreign file: capture still works', () => {
  const d = repo();
  try {
    const pid = xet(d, ['daemon', 'start']).pid as number;
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 100; i++) {
      try {
        process.kill(pid, 0);
      } catch {
        break;
      }
      execFileSync('sleep', ['0.02']);
    }
    edit(d, 0);
    const r = xet(d, ['capture']);
    assert.equal(typeof r.snapshot, 'string');
    assert.equal(xet(d, ['daemon', 'status']).running, false);
    // A new daemon replaces the stale pid file and socket.
    const again = xet(d, ['daemon', 'start']);
    assert.notEqual(again.pid, pid);
    xet(d, ['daemon', 'stop']);
    // A plain file where the socket belongs is ignored.
    fs.mkdirSync(path.join(d, '.git', 'xet', 'daemon'), { recursive: true });
    fs.writeFileSync(path.join(d, '.git', 'xet', 'daemon', 'sock'), 'not a socket');
    edit(d, 1);
    assert.equal(typeof xet(d, ['capture']).snapshot, 'string');
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a suspended daemon: capture runs itself, stop says it did not stop, and the late line is never run', async () => {
  const d = repo();
  let pid = 0;
  try {
    pid = xet(d, ['daemon', 'start']).pid as number;
    process.kill(pid, 'SIGSTOP');
    edit(d, 0);
    // The kernel still accepts connections on its socket: the client waits for an acknowledgement,
    // not for ever, then captures itself.
    const cap = cliRun(d, ['--json', 'capture']);
    assert.equal(cap.status, 0, cap.stderr);
    assert.equal(cap.loadedMain, true, 'the CLI captured itself');
    const taken = snapshotRefs(d);
    assert.ok(taken.includes((JSON.parse(cap.stdout) as { snapshot: string }).snapshot));
    // Asked, it says a daemon is there but does not answer; start does not make a second one.
    const st = xet(d, ['daemon', 'status']);
    assert.deepEqual([st.running, st.pid, st.answering], [true, pid, false]);
    const again = cliRun(d, ['--json', 'daemon', 'start']);
    assert.equal(again.status, 3, again.stdout + again.stderr);
    assert.match(again.stdout, /"BUSY"/);
    const stop = cliRun(d, ['--json', 'daemon', 'stop']);
    assert.equal(stop.status, 3, stop.stdout + stop.stderr);
    assert.equal((JSON.parse(stop.stdout) as { error: { code: string } }).error.code, 'BUSY');
    process.kill(pid, 0); // still there, as stop said
    // Resumed, it reads the line it was sent too late, refuses it and stops on the pending SIGTERM.
    process.kill(pid, 'SIGCONT');
    await waitGone(pid, 5000, 'the daemon');
    assert.deepEqual(snapshotRefs(d), taken, 'the late line made no second snapshot');
  } finally {
    if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a client stopped (Ctrl-Z) past its deadline after the daemon took its line: the line runs once', async () => {
  const d = repo();
  let pid = 0;
  try {
    pid = xet(d, ['daemon', 'start']).pid as number;
    edit(d, 0);
    await stoppedClientRunsOnce({
      dir: d,
      daemonPid: pid,
      command: [process.execPath, BIN, '--json', 'capture'],
      env: ENV,
      snapshotRefs,
    });
  } finally {
    if (pid && alive(pid)) {
      process.kill(pid, 'SIGCONT');
      xet(d, ['daemon', 'stop']);
    }
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a pid file naming another program (a pid reused) is stale: no daemon, and start replaces it', () => {
  const d = repo();
  const other = spawnSync('sh', ['-c', 'sleep 60 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' });
  const sleeper = Number(other.stdout.trim());
  try {
    fs.mkdirSync(path.join(d, '.git', 'xet', 'daemon'), { recursive: true });
    fs.writeFileSync(path.join(d, '.git', 'xet', 'daemon', 'pid'), `${sleeper}\n`);
    assert.deepEqual([xet(d, ['daemon', 'status']).running, xet(d, ['daemon', 'stop']).pid], [false, null]);
    const started = xet(d, ['daemon', 'start']);
    assert.equal(started.running, true);
    assert.notEqual(started.pid, sleeper);
    assert.ok(alive(sleeper), 'the other program was not signalled');
    xet(d, ['daemon', 'stop']);
  } finally {
    process.kill(sleeper, 'SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('daemon stop stops a daemon whose socket file is gone', async () => {
  const d = repo();
  let pid = 0;
  try {
    pid = xet(d, ['daemon', 'start']).pid as number;
    fs.rmSync(path.join(d, '.git', 'xet', 'daemon', 'sock'));
    const st = xet(d, ['daemon', 'status']);
    assert.deepEqual([st.running, st.answering], [true, false], 'there, not answering');
    assert.deepEqual(xet(d, ['daemon', 'stop']), { running: false, pid });
    await waitGone(pid, 5000, 'the daemon');
    assert.notEqual(xet(d, ['daemon', 'start']).pid, pid, 'and a new one starts');
    xet(d, ['daemon', 'stop']);
  } finally {
    if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a daemon whose compiled code changes under it (a rebuild in place) stops and relays nothing more', async () => {
  const d = repo();
  let pid = 0;
  // A new module in the tree it runs from, as `tsc -w` writes one; no test loads it.
  const probe = path.resolve(__dirname, '..', 'src', `xet-rebuild-probe-${process.pid}.js`);
  try {
    pid = xet(d, ['daemon', 'start']).pid as number;
    edit(d, 0);
    assert.equal(cliRun(d, ['capture']).loadedMain, false, 'relayed before the rebuild');
    fs.writeFileSync(probe, '// written by daemon.test.ts\n');
    edit(d, 1);
    const after = cliRun(d, ['capture']);
    assert.equal(after.status, 0, after.stderr);
    assert.equal(after.loadedMain, true, 'not relayed after it');
    await waitGone(pid, 5000, 'the daemon');
  } finally {
    fs.rmSync(probe, { force: true });
    if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a daemon killed mid-capture: the client falls back and captures', async () => {
  const d = repo();
  // The daemon's capture waits at a fault point, where it is killed (a timer after the request was
  // sent raced a fast VM's whole capture). The client shares the daemon's environment, so its own
  // capture waits at the same point, until told to go on.
  const pause = pausePoint('capture:after-pack');
  const env = pause.env;
  try {
    const pid = xet(d, ['daemon', 'start'], env).pid as number;
    edit(d, 0);
    const { spawn } = await import('node:child_process');
    const child = spawn(process.execPath, [BIN, '--json', 'capture'], { cwd: d, env: { ...ENV, ...env } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const closed = new Promise<number | null>((r) => child.on('close', r));
    await pause.reached("the daemon's capture reached its pause");
    process.kill(pid, 'SIGKILL');
    await waitGone(pid);
    pause.go();
    const code = await closed;
    assert.equal(code, 0, out);
    assert.equal(typeof (JSON.parse(out) as { snapshot: string }).snapshot, 'string');
  } finally {
    xet(d, ['daemon', 'stop'], env);
    fs.rmSync(d, { recursive: true, force: true });
    pause.remove();
  }
});

test('a fork through the daemon is the fork the CLI makes', () => {
  const d = repo();
  const forks = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-daemon-forks-'));
  try {
    fs.writeFileSync(path.join(d, 'f0.txt'), 'work in progress\n');
    fs.writeFileSync(path.join(d, 'untracked.txt'), 'new\n');
    const snap = xet(d, ['capture']).snapshot as string;
    const pid = xet(d, ['daemon', 'start']).pid as number;
    // No git on PATH: the CLI cannot make a fork itself (it would have to run git), the daemon can.
    const via = xet(d, ['fork', snap, path.join(forks, 'via'), '--mode', 'copy'], { PATH: '/nonexistent' });
    const direct = xet(d, ['fork', snap, path.join(forks, 'direct'), '--mode', 'copy'], { GIT_XET_NO_DAEMON: '1' });
    assert.equal(xet(d, ['daemon', 'status']).pid, pid);
    for (const k of ['mode', 'snapshot', 'head', 'branch', 'baseBuilt', 'allowance', 'route'])
      assert.deepEqual(via[k], direct[k], k);
    assert.notEqual(via.id, direct.id);
    const state = (dir: string) => ({
      status: git(dir, 'status', '--porcelain=v2', '-uall'),
      index: git(dir, 'ls-files', '-s'),
      head: git(dir, 'rev-parse', 'HEAD'),
      files: fs.readdirSync(dir).sort(),
      list: git(d, 'worktree', 'list', '--porcelain').includes(`worktree ${dir}\n`),
    });
    assert.deepEqual(state(path.join(forks, 'via')), state(path.join(forks, 'direct')));
    const listed = xet(d, ['forks']).forks as { id: string; state: string }[];
    assert.deepEqual(listed.map((f) => f.state).sort(), ['active', 'active']);
    // The daemon's config memo sees a change made after the first fork.
    git(d, 'config', 'xet.fork.allowance', '100000000');
    const later = xet(d, ['fork', snap, path.join(forks, 'later'), '--mode', 'copy'], { PATH: '/nonexistent' });
    assert.deepEqual(later.allowance, { bytes: 100000000, files: null });
    git(d, 'config', '--unset', 'xet.fork.allowance');
    // Errors come back typed, as the CLI's own would.
    const again = spawnSync(process.execPath, [BIN, '--json', 'fork', snap, path.join(forks, 'via')], {
      cwd: d,
      encoding: 'utf8',
      env: { ...ENV, PATH: '/nonexistent' },
    });
    assert.equal(again.status, 3, again.stderr);
    assert.equal((JSON.parse(again.stdout) as { error: { code: string } }).error.code, 'TARGET_NOT_EMPTY');
  } finally {
    xet(d, ['daemon', 'stop']);
    for (const f of ['via', 'direct', 'later']) {
      try {
        xet(d, ['discard', path.join(forks, f), '--no-capture'], { GIT_XET_NO_DAEMON: '1' });
      } catch {
        // the test failed before making it
      }
    }
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(forks, { recursive: true, force: true });
  }
});

let probeDir: string | null = null;
after(() => {
  if (probeDir) fs.rmSync(probeDir, { recursive: true, force: true });
});

/** The preload cliRun passes to node, written once per test file into its own directory. */
function relayProbe(): string {
  probeDir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'xet-relay-probe-'));
  const probe = path.join(probeDir, 'probe.js');
  if (!fs.existsSync(probe)) {
    fs.writeFileSync(
      probe,
      "process.on('exit', () => { if (Object.keys(require.cache).some((k) => k.endsWith('/cli/main.js'))) process.stderr.write('@@main-loaded@@\\n'); });\n",
    );
  }
  return probe;
}

/** Runs the CLI with a preload that reports, at exit, whether the CLI's own main module was loaded
 * (it is not when the thin client relayed the line to the daemon). */
function cliRun(
  cwd: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  umask?: string,
): { status: number | null; stdout: string; stderr: string; loadedMain: boolean } {
  const probe = relayProbe();
  const node = [process.execPath, '--require', probe, BIN, ...args];
  const r =
    umask === undefined
      ? spawnSync(node[0], node.slice(1), { cwd, encoding: 'utf8', env: { ...ENV, ...env } })
      : spawnSync('sh', ['-c', `umask ${umask} && exec "$@"`, 'sh', ...node], {
          cwd,
          encoding: 'utf8',
          env: { ...ENV, ...env },
        });
  const loadedMain = r.stderr.includes('@@main-loaded@@\n');
  return { status: r.status, stdout: r.stdout, stderr: r.stderr.replace('@@main-loaded@@\n', ''), loadedMain };
}

test('capture and fork lines go whole to the daemon: same output, exit codes and directory as the CLI', async () => {
  const d = repo();
  const forks = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-daemon-relay-'));
  try {
    xet(d, ['daemon', 'start']);
    const sub = path.join(d, 'sub');
    // From a subdirectory, human output: the snapshot id on stdout, nothing else (not a terminal).
    edit(d, 0);
    const cap = cliRun(sub, ['capture', '-m', 'relayed message'], { PATH: '/nonexistent' });
    assert.equal(cap.loadedMain, false, 'the thin client ran the line itself');
    assert.equal(cap.status, 0, cap.stderr);
    assert.match(cap.stdout, /^[0-9a-f]{40}\n$/);
    assert.equal(cap.stderr, '');
    const snap = cap.stdout.trim();
    assert.match(git(d, 'cat-file', 'commit', snap), /relayed message/);
    // A relative directory is the client's: sub/../<forks> from sub.
    const rel = path.relative(sub, path.join(forks, 'f1'));
    const fk = cliRun(sub, ['--json', 'fork', snap, rel, '--mode', 'copy'], { PATH: '/nonexistent' });
    assert.equal(fk.loadedMain, false);
    assert.equal(fk.status, 0, fk.stderr);
    assert.equal((JSON.parse(fk.stdout) as { dir: string }).dir, path.join(forks, 'f1'));
    assert.equal(fs.readFileSync(path.join(forks, 'f1', 'f0.txt'), 'utf8'), 'file 0\nedit 0\n');
    // Errors print and exit as the CLI's own do, through the daemon or not.
    // From inside the git directory git finds no working tree: the daemon must not lend its own.
    const dotGit = path.join(d, '.git');
    for (const [cwd, args] of [
      [d, ['capture', '--bogus']],
      [d, ['--json', 'capture', '--bogus']],
      [d, ['fork', snap, path.join(forks, 'f1')]],
      [d, ['--json', 'fork', 'no-such-snapshot', path.join(forks, 'f2')]],
      [dotGit, ['--json', 'fork', snap, path.join(forks, 'f3')]],
      [dotGit, ['fork', snap, path.join(forks, 'f3')]],
    ] as [string, string[]][]) {
      const via = cliRun(cwd, args);
      const own = cliRun(cwd, args, { GIT_XET_NO_DAEMON: '1' });
      assert.equal(via.loadedMain, false, args.join(' '));
      assert.equal(own.loadedMain, true);
      assert.deepEqual(
        { status: via.status, stdout: via.stdout, stderr: via.stderr },
        { status: own.status, stdout: own.stdout, stderr: own.stderr },
        args.join(' '),
      );
      assert.ok(via.status === 2 || via.status === 3, `${args.join(' ')}: ${via.status}`);
    }
    assert.ok(!fs.existsSync(path.join(forks, 'f3')), 'no fork was made from inside .git');
    // Another HOME (git's global config, its excludes file) or umask (a fork's file modes) than the
    // daemon's: the CLI runs the line itself.
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-other-home-'));
    try {
      edit(d, 1);
      const otherHome = cliRun(d, ['capture', '-m', 'another home'], { HOME: home });
      assert.equal(otherHome.status, 0, otherHome.stderr);
      assert.equal(otherHome.loadedMain, true, 'another HOME is not relayed');
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
    const mask = (process.umask() & 0o777) === 0o077 ? '022' : '077';
    edit(d, 2);
    const otherMask = cliRun(d, ['capture', '-m', 'another umask'], {}, mask);
    assert.equal(otherMask.status, 0, otherMask.stderr);
    assert.equal(otherMask.loadedMain, true, 'another umask is not relayed');
    edit(d, 3);
    const same = cliRun(d, ['capture', '-m', 'same umask'], {}, (process.umask() & 0o777).toString(8).padStart(3, '0'));
    assert.equal(same.loadedMain, false, 'the same umask set again is relayed');
    // Another time zone (the snapshot commit's offset) or capture tuning: not relayed either.
    edit(d, 4);
    const zone = process.env.TZ === 'Asia/Tokyo' ? 'America/Lima' : 'Asia/Tokyo';
    const otherZone = cliRun(d, ['capture', '-m', 'another zone'], { TZ: zone });
    assert.equal(otherZone.status, 0, otherZone.stderr);
    assert.equal(otherZone.loadedMain, true, 'another TZ is not relayed');
    edit(d, 5);
    const otherWorkers = cliRun(d, ['capture', '-m', 'other workers'], { XET_PACK_WORKERS: '1' });
    assert.equal(otherWorkers.loadedMain, true, 'other capture tuning is not relayed');
    // Help, --remount and anything but capture and fork run in the CLI's own process.
    for (const args of [['capture', '--help'], ['fork', '--remount', path.join(forks, 'f1')], ['snapshots']]) {
      assert.equal(cliRun(d, args).loadedMain, true, args.join(' '));
    }
    // The socket is a peer to check: a malformed or foreign line is refused, and the daemon runs on.
    const { sendToDaemon } = (await import('../src/daemon/client')) as typeof import('../src/daemon/client');
    const { locateDaemon } = (await import('../src/daemon/locate')) as typeof import('../src/daemon/locate');
    const place = locateDaemon(d);
    assert.ok(place);
    // The request carries this process's GIT_* environment, which must be the daemon's.
    for (const k of Object.keys(process.env)) if (k.startsWith('GIT_') && !(k in ENV)) delete process.env[k];
    for (const [k, v] of Object.entries(ENV)) if (k.startsWith('GIT_')) process.env[k] = v;
    for (const [req, why] of [
      [{ op: 'cli', cwd: d, argv: 'capture' }, 'argv'],
      [{ op: 'cli', cwd: d, argv: ['capture', 7] }, 'argv'],
      [{ op: 'cli', cwd: d, argv: ['gc', '--now'] }, 'op'],
      [{ op: 'cli', cwd: 'relative', argv: ['capture'] }, 'cwd'],
    ] as const) {
      const reply = await sendToDaemon(place, req as unknown as Parameters<typeof sendToDaemon>[1]);
      assert.deepEqual(reply, { ok: false, refused: why }, JSON.stringify(req));
    }
    assert.equal(xet(d, ['daemon', 'status']).running, true);
  } finally {
    xet(d, ['daemon', 'stop']);
    try {
      xet(d, ['discard', path.join(forks, 'f1'), '--no-capture'], { GIT_XET_NO_DAEMON: '1' });
    } catch {
      // the test failed before making it
    }
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(forks, { recursive: true, force: true });
  }
});

test('a stat cache kept in memory is read again when its file changed, even in place at the same size and mtime', async () => {
  const { keepStatCachesInMemory, loadStatCache } =
    (await import('../src/snapshot/stat-cache')) as typeof import('../src/snapshot/stat-cache');
  const d = repo();
  try {
    const indexOf = (name: string): Buffer => {
      const f = path.join(d, `.git/index-${name}`);
      const blob = git(d, 'hash-object', '-w', '--stdin').trim();
      execFileSync('git', ['update-index', '--add', '--cacheinfo', `100644,${blob},${name}`], {
        cwd: d,
        env: { ...ENV, GIT_INDEX_FILE: f },
      });
      return fs.readFileSync(f);
    };
    const a = indexOf('a');
    const b = indexOf('b');
    assert.equal(a.length, b.length);
    const file = path.join(d, '.git', 'cache-under-test');
    fs.writeFileSync(file, a);
    keepStatCachesInMemory();
    const first = loadStatCache(file, 'sha1');
    const has = (c: typeof first, p: string) => (c?.lookup([p], () => Buffer.from(`${p}\0`))[0] ?? -1) >= 0;
    assert.ok(has(first, 'a') && !has(first, 'b'));
    assert.equal(loadStatCache(file, 'sha1'), first, 'the same file: the cache in memory');
    const { mtime, atime } = fs.statSync(file);
    fs.writeFileSync(file, b); // the same inode and size
    fs.utimesSync(file, atime, mtime);
    const second = loadStatCache(file, 'sha1');
    assert.notEqual(second, first);
    assert.ok(has(second, 'b') && !has(second, 'a'));
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

// The daemon gives its memo of the repository only to a request from the top of its worktree: from
// a directory below, git's discovery may stop at a repository the daemon's own lookup does not see
// (review 25). The capture must be the one the CLI makes without the daemon.
test('through the daemon, a capture inside a nested repository git finds (a symlinked .git, a bare one) is that repository', () => {
  const d = repo();
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-daemon-gitdir-'));
  try {
    xet(d, ['daemon', 'start']);
    git(elsewhere, 'init', '-q', '--bare', '.');
    git(elsewhere, 'config', 'core.bare', 'false');
    const linked = path.join(d, 'linked');
    fs.mkdirSync(linked);
    fs.symlinkSync(elsewhere, path.join(linked, '.git'));
    fs.writeFileSync(path.join(linked, 'inner.txt'), 'inner\n');
    const before = snapshotRefs(d);
    const snap = xet(linked, ['capture']).snapshot as string;
    assert.equal(xet(linked, ['capture', '--always'], { GIT_XET_NO_DAEMON: '1' }).files, 1);
    assert.ok(git(elsewhere, 'for-each-ref', 'refs/xet/snapshots/').includes(snap), 'the snapshot is the nested one');
    assert.deepEqual(snapshotRefs(d), before, 'nothing captured in the outer repository');
    // A bare repository inside the worktree: git stops there, and the capture is refused as without
    // the daemon.
    const bare = path.join(d, 'vendor', 'mirror.git');
    fs.mkdirSync(bare, { recursive: true });
    git(bare, 'init', '-q', '--bare', '.');
    for (const env of [{}, { GIT_XET_NO_DAEMON: '1' }]) {
      const r = spawnSync(process.execPath, [BIN, '--json', 'capture'], {
        cwd: bare,
        encoding: 'utf8',
        env: { ...ENV, ...env },
      });
      assert.notEqual(r.status, 0, JSON.stringify(env));
      assert.match(r.stdout + r.stderr, /BARE_REPOSITORY/, JSON.stringify(env));
    }
    assert.deepEqual(snapshotRefs(d), before, 'still nothing captured in the outer repository');
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(elsewhere, { recursive: true, force: true });
  }
});

// The daemon writes its captures' refs through one resident update-ref (src/daemon/ref-writer.ts):
// a config change between two captures reaches the second one's ref, as it would a git started for it.
test('through the daemon, a snapshot ref is written under the config in force at its capture', () => {
  const d = repo();
  try {
    const pid = xet(d, ['daemon', 'start']).pid as number;
    const logOf = (snap: string) => path.join(d, '.git', 'logs', 'refs', 'xet', 'snapshots', snap);
    edit(d, 0);
    const first = xet(d, ['capture']).snapshot as string;
    assert.ok(!fs.existsSync(logOf(first)), 'no reflog for refs/xet/ by default');
    git(d, 'config', 'core.logAllRefUpdates', 'always');
    edit(d, 1);
    const second = xet(d, ['capture']).snapshot as string;
    assert.match(fs.readFileSync(logOf(second), 'utf8'), new RegExp(`^0{40} ${second} .*\\txet: capture\\n$`));
    git(d, 'config', '--unset', 'core.logAllRefUpdates');
    edit(d, 2);
    const third = xet(d, ['capture']).snapshot as string;
    assert.ok(!fs.existsSync(logOf(third)));
    assert.deepEqual(snapshotRefs(d).sort(), [first, second, third].sort());
    assert.equal(xet(d, ['daemon', 'status']).pid, pid, 'the daemon made all three');
    // The stat cache is written after the reply (capture.ts afterReply), under the capture's locks:
    // a capture without the daemon waits for them, and finds the cache of the daemon's last capture.
    const cacheDir = path.join(d, '.git', 'xet', 'cache');
    const record = fs.readdirSync(cacheDir).find((f) => f.endsWith('.index.xet.json')) as string;
    const cachedRoot = () =>
      (JSON.parse(fs.readFileSync(path.join(cacheDir, record), 'utf8')) as { root: string }).root;
    const thirdFiles = git(d, 'rev-parse', `${third}:files`).trim();
    const until = Date.now() + 10_000;
    while (cachedRoot() !== thirdFiles && Date.now() < until) spawnSync('sleep', ['0.05']);
    assert.equal(cachedRoot(), thirdFiles, "the daemon's last capture wrote the stat cache after its reply");
    const direct = xet(d, ['capture', '--always'], { GIT_XET_NO_DAEMON: '1' });
    assert.equal(direct.incremental, true);
    assert.equal(parts(d, direct.snapshot as string), parts(d, third));
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

// Review 42: `daemon stop` while a capture is still running. The capture finishes (its ref written
// by a git of its own: the resident updater is closed), the daemon then exits, and no git it
// started outlives it.
test('a daemon stopped during a capture finishes it, exits, and leaves no git process behind', async () => {
  const d = repo();
  const pause = pausePoint('capture:before-ref');
  const env = pause.env;
  const { spawn } = await import('node:child_process');
  const run = (args: string[]) => {
    const child = spawn(process.execPath, [BIN, '--json', ...args], { cwd: d, env: { ...ENV, ...env } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    return new Promise<{ code: number | null; out: string }>((r) => child.on('close', (code) => r({ code, out })));
  };
  const children = (pid: number): string[] =>
    fs
      .readdirSync('/proc')
      .filter((n) => /^\d+$/.test(n))
      .flatMap((n) => {
        try {
          const stat = fs.readFileSync(`/proc/${n}/stat`, 'utf8');
          return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid
            ? [fs.readFileSync(`/proc/${n}/cmdline`, 'utf8').replace(/\0/g, ' ')]
            : [];
        } catch {
          return [];
        }
      });
  try {
    const pid = xet(d, ['daemon', 'start'], env).pid as number;
    edit(d, 0);
    const capturing = run(['capture']);
    await pause.reached('the capture reached its pause in the daemon');
    const stopping = run(['daemon', 'stop']);
    await new Promise((r) => setTimeout(r, 300));
    pause.go();
    const captured = await capturing;
    assert.equal(captured.code, 0, captured.out);
    const snap = (JSON.parse(captured.out) as { snapshot: string }).snapshot;
    assert.deepEqual(snapshotRefs(d), [snap]);
    await stopping;
    let alive = true;
    for (const until = Date.now() + 20_000; alive && Date.now() < until;) {
      await new Promise((r) => setTimeout(r, 50));
      alive = fs.existsSync(`/proc/${pid}`) && !fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
    }
    assert.equal(alive, false, `the daemon still runs, with ${JSON.stringify(children(pid))}`);
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
    pause.remove();
  }
});

// Review 42: under `--ignored none` the walk leaves a directory git lists whole as ignored unread;
// a file that is not ignored made in it later is in the daemon's next capture as in the CLI's.
test('through the daemon under --ignored none, a file made in a directory git had listed whole is captured', () => {
  const d = repo();
  try {
    git(d, 'config', 'xet.capture.ignored', 'none');
    fs.writeFileSync(path.join(d, '.gitignore'), 'build/\n*.log\n');
    fs.mkdirSync(path.join(d, 'cache'));
    fs.writeFileSync(path.join(d, 'cache', 'run.log'), '1\n');
    xet(d, ['daemon', 'start']);
    for (let i = 0; i < 3; i++) xet(d, ['capture', '--always']);
    fs.writeFileSync(path.join(d, 'cache', 'notes.txt'), 'keep\n');
    spawnSync('sleep', ['0.2']);
    const via = xet(d, ['capture', '--always']).snapshot as string;
    const direct = xet(d, ['capture', '--always'], { GIT_XET_NO_DAEMON: '1' }).snapshot as string;
    assert.match(git(d, 'ls-tree', '-r', '--name-only', via), /^files\/cache\/notes\.txt$/m);
    assert.equal(parts(d, via), parts(d, direct));
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

// Review 43: a repository copied with its daemon running (`cp -a`) carries the pid file of the
// original's daemon; in the copy it is stale, and `stop` there must not stop the original's.
test('in a copy of a repository whose daemon runs, the pid file is stale: stop leaves the original daemon, start makes its own', () => {
  const d = repo();
  const copy = `${d}-copy`;
  try {
    const pid = xet(d, ['daemon', 'start']).pid as number;
    execFileSync('cp', ['-a', d, copy]);
    assert.equal(xet(copy, ['daemon', 'status']).running, false);
    xet(copy, ['daemon', 'stop']);
    assert.equal(xet(d, ['daemon', 'status']).pid, pid, "the original's daemon still runs");
    const own = xet(copy, ['daemon', 'start']).pid as number;
    assert.notEqual(own, pid);
    assert.equal(xet(copy, ['daemon', 'status']).pid, own);
    assert.equal(xet(d, ['daemon', 'status']).pid, pid);
  } finally {
    for (const dir of [copy, d]) if (fs.existsSync(dir)) xet(dir, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(copy, { recursive: true, force: true });
  }
});

test('xet.daemon.autoStart: a CLI capture or fork that ran without a daemon starts one, and the next goes through it', async () => {
  const d = repo();
  const forkDir = `${d}-fork`;
  const status = () => xet(d, ['daemon', 'status']);
  const served = () => {
    const h = status().lstatHeadStart as { used: number; unused: number } | undefined;
    return h ? h.used + h.unused : -1;
  };
  /** No daemon comes up within `ms` (a started one has its pid file within ~0.5 s). */
  const staysDown = async (ms: number) => {
    for (const end = Date.now() + ms; Date.now() < end;) {
      assert.equal(status().running, false, 'no daemon was to be started');
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const comesUp = async () => {
    for (const end = Date.now() + 20_000; Date.now() < end;) {
      const s = status();
      if (s.running && s.answering !== false && s.lstatHeadStart) return s.pid as number;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail('the daemon did not start');
  };
  try {
    // Unset: nothing starts.
    assert.deepEqual(xet(d, ['capture']).warnings, []);
    await staysDown(1500);
    // A value git does not take as a boolean: the capture stands, with a warning; nothing starts.
    git(d, 'config', 'xet.daemon.autoStart', 'maybe');
    edit(d, 1);
    const bad = xet(d, ['capture']);
    assert.equal(typeof bad.snapshot, 'string');
    assert.match(String(bad.warnings), /xet\.daemon\.autoStart is not a boolean .*no daemon was started/);
    await staysDown(1500);
    // Set, but GIT_XET_NO_DAEMON=1, or variables git sets for the command it runs (a hook's index, a
    // `git -c` line's config): nothing starts (such a daemon would serve no plain capture: review 44).
    git(d, 'config', 'xet.daemon.autoStart', 'true');
    edit(d, 2);
    assert.deepEqual(xet(d, ['capture'], { GIT_XET_NO_DAEMON: '1' }).warnings, []);
    await staysDown(1000);
    fs.appendFileSync(path.join(d, 'f2.txt'), 'hook\n');
    xet(d, ['capture'], { GIT_INDEX_FILE: path.join(d, '.git', 'index'), GIT_AUTHOR_DATE: '@1700000000 +0000' });
    await staysDown(1000);
    fs.appendFileSync(path.join(d, 'f2.txt'), 'dash c\n');
    xet(d, ['capture'], { GIT_CONFIG_PARAMETERS: "'core.quotepath'='false'" });
    await staysDown(1000);
    // Set: the capture, made in the CLI's own process, starts the daemon; the next one goes through it.
    edit(d, 3);
    const own = xet(d, ['capture']);
    assert.deepEqual(own.warnings, []);
    const pid = await comesUp();
    const before = served();
    edit(d, 4);
    const next = xet(d, ['capture']);
    assert.notEqual(next.snapshot, own.snapshot);
    assert.equal(served(), before + 1, 'the second capture went through the started daemon');
    assert.equal(status().pid, pid, 'a capture the daemon served starts no other');
    // A fork made without a daemon starts one too; a value that is not a boolean is its warning.
    xet(d, ['daemon', 'stop']);
    await waitGone(pid);
    git(d, 'config', 'xet.daemon.autoStart', 'maybe');
    const badFork = xet(d, ['fork', next.snapshot as string, `${forkDir}-bad`, '--mode', 'copy']);
    assert.match(String(badFork.warnings), /xet\.daemon\.autoStart is not a boolean/);
    await staysDown(1000);
    git(d, 'config', 'xet.daemon.autoStart', 'true');
    const goodFork = xet(d, ['fork', next.snapshot as string, forkDir, '--mode', 'copy']);
    assert.equal(goodFork.warnings, undefined);
    const again = await comesUp();
    assert.notEqual(again, pid);
  } finally {
    xet(d, ['daemon', 'stop']);
    for (const f of [forkDir, `${forkDir}-bad`]) {
      if (fs.existsSync(f)) xet(d, ['discard', f, '--no-capture']);
      fs.rmSync(f, { recursive: true, force: true });
    }
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a daemon that only refuses (another environment) goes when idle; one that serves stays', async () => {
  const d = repo();
  const short = { GIT_XET_DAEMON_IDLE_MS: '2000' };
  try {
    // Started with another environment than the captures' (their GIT_XET_DAEMON_IDLE_MS differs):
    // it refuses each of them, and its idle time runs on (review 44: every connection re-armed it).
    const refusing = xet(d, ['daemon', 'start'], short).pid as number;
    const asking = Date.now() + 5000;
    for (let i = 0; Date.now() < asking; i++) {
      fs.appendFileSync(path.join(d, `f${i % 30}.txt`), `r ${i}\n`);
      xet(d, ['capture']);
      await new Promise((r) => setTimeout(r, 200));
    }
    // Gone while it was still being asked, 2 s after its start, not 2 s after the last question.
    assert.ok(!alive(refusing), 'a daemon that served nobody went when its idle time ran out');
    // Started with the captures' own environment: each capture re-arms it, past its idle time.
    const serving = xet(d, ['daemon', 'start'], short).pid as number;
    const until = Date.now() + 3500;
    for (let i = 20; Date.now() < until; i++) {
      fs.appendFileSync(path.join(d, `f${i % 30}.txt`), `s ${i}\n`);
      xet(d, ['capture'], short);
      await new Promise((r) => setTimeout(r, 300));
    }
    assert.ok(alive(serving), 'a daemon serving captures outlives its idle time');
  } finally {
    xet(d, ['daemon', 'stop']);
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('the idle time running out in the middle of a request stops the daemon only after it, and not one that ran it', async () => {
  const d = repo();
  // The daemon and its client share this environment (a daemon serves only its own); the capture
  // waits at a fault point until told, past the daemon's idle time.
  const pause = pausePoint('capture:after-pack');
  const env = { GIT_XET_DAEMON_IDLE_MS: '1500', ...pause.env };
  try {
    const pid = xet(d, ['daemon', 'start'], env).pid as number;
    fs.appendFileSync(path.join(d, 'f1.txt'), 'long request\n');
    const client = new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [BIN, '--json', 'capture'], { cwd: d, env: { ...ENV, ...env } }, (e, out) =>
        e ? reject(e) : resolve(out),
      ),
    );
    await pause.reached('the capture reached its pause in the daemon');
    await new Promise((r) => setTimeout(r, 2000)); // the idle time runs out meanwhile
    assert.ok(alive(pid), 'the daemon runs its request to its end');
    pause.go();
    const snap = JSON.parse(await client) as { snapshot: string };
    assert.equal(typeof snap.snapshot, 'string');
    // It ran a request: its idle time starts again from the reply (review 45: it stopped here).
    assert.equal(xet(d, ['daemon', 'status'], env).pid, pid);
    assert.ok(fs.existsSync(path.join(d, '.git', 'xet', 'daemon', 'pid')));
    await waitGone(pid, 5000, 'the daemon, idle after its last request');
  } finally {
    xet(d, ['daemon', 'stop'], env);
    fs.rmSync(d, { recursive: true, force: true });
    pause.remove();
  }
});
