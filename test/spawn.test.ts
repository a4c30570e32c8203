// Starting git (src/git/spawn.ts): posix_spawn through the native module and node's spawn must be
// the same to the program started and to the caller. Each case runs both routes and compares what
// the child saw (argv, environment, working directory, signal dispositions and mask, open
// descriptors) and what the caller got (stdout, stderr, exit code or signal), with real programs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { native } from '../src/native';
import { startProcess, startProcessVia, type Started } from '../src/git/spawn';
import { git } from '../src/git/exec';
import { XetError } from '../src/errors';
import { createSandbox } from './support/sandbox';
import { initRepo, pseudoRandomBytes } from './support/git';
import { ObjectReader, TooBig } from '../src/git/object-reader';

interface Outcome {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: string | null;
}

async function finish(p: Started, input?: Buffer | string): Promise<Outcome> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  p.stdout.on('data', (b: Buffer) => out.push(b));
  p.stderr.on('data', (b: Buffer) => err.push(b));
  p.stdin.end(input ?? '');
  const { code, signal } = await p.exited;
  return { stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8'), code, signal };
}

function both(
  t: { skip: (why: string) => void },
  file: string,
  args: string[],
  opts: { cwd?: string; env: NodeJS.ProcessEnv },
  input?: Buffer | string,
): Promise<[Outcome, Outcome]> | null {
  const posix = startProcessVia('posix', file, args, opts);
  if (!posix) {
    t.skip('posix_spawn is not available: the native module did not load');
    return null;
  }
  const node = startProcessVia('node', file, args, opts) as Started;
  return Promise.all([finish(posix, input), finish(node, input)]);
}

/** A new directory of this test's own, removed after it. */
function scratch(t: { after: (fn: () => void) => void }, name: string): string {
  const sb = createSandbox('xet-spawn-');
  t.after(() => sb.cleanup());
  const dir = sb.path(name);
  fs.mkdirSync(dir);
  return dir;
}

const env = (): NodeJS.ProcessEnv => ({ PATH: process.env.PATH, LC_ALL: 'C', XET_SPAWN_PROBE: 'a b\nc' });

test('posix_spawn is used where the native module loaded (CI builds it)', (t) => {
  if (!native) {
    if (process.env.CI) assert.fail('CI must build the native module');
    t.diagnostic('the native module did not load: only node spawn is exercised');
    return;
  }
  assert.equal(typeof native.spawnPiped, 'function');
  assert.notEqual(startProcessVia('posix', 'true', [], { env: env() }), null);
});

test('both routes give the child the same argv, environment, directory, signals and descriptors', async (t) => {
  const dir = scratch(t, 'here');
  // SigIgn/SigBlk: node ignores SIGPIPE, and an ignored signal would stay ignored across exec.
  const script =
    'printf "%s\\0" "$0" "$@"; echo; env -0 | sort -z; echo; pwd; grep -E "^Sig(Ign|Blk)" /proc/self/status; ls /proc/self/fd | sort -n | tr "\\n" " "';
  const r = await both(t, 'sh', ['-c', script, 'argv0', 'x y', '', 'ü'], { cwd: dir, env: env() });
  if (!r) return;
  const [posix, node] = r;
  assert.equal(posix.code, 0, posix.stderr);
  assert.deepEqual(posix, node);
  assert.match(posix.stdout, /SigIgn:\s+0+\n/);
  assert.match(posix.stdout, /SigBlk:\s+0+\n/);
  assert.ok(posix.stdout.includes(`\n${dir}\n`), posix.stdout);
  assert.ok(posix.stdout.includes('XET_SPAWN_PROBE=a b\nc\0'));
  // The descriptors are in the deepEqual: whatever node's spawn lets through (0-2, the one ls
  // reads, any the test runner left inheritable), and no pipe end of this process's.
  assert.match(posix.stdout, /^0 1 2 3\b/m);
});

test('both routes: exit codes, stderr, a large stdin and a large stdout without deadlock', async (t) => {
  const big = Buffer.alloc(3 << 20, 'xyz');
  const r = await both(
    t,
    'sh',
    ['-c', 'wc -c; head -c 2000000 /dev/zero | tr "\\0" a; echo oops >&2; exit 7'],
    { env: env() },
    big,
  );
  if (!r) return;
  const [posix, node] = r;
  assert.equal(posix.code, 7);
  assert.equal(posix.stderr, 'oops\n');
  assert.equal(posix.stdout.length, String(big.length).length + 1 + 2_000_000);
  assert.deepEqual(posix, node);
});

test('both routes: a killed child reports its signal, and one that died of a signal too', async (t) => {
  const posix = startProcessVia('posix', 'sleep', ['30'], { env: env() });
  if (!posix) return t.skip('posix_spawn is not available');
  posix.kill('SIGKILL');
  assert.deepEqual(await finish(posix), { stdout: '', stderr: '', code: null, signal: 'SIGKILL' });
  posix.kill('SIGKILL'); // reaped: a no-op, never a signal to whoever has the pid now
  const r = await both(t, 'sh', ['-c', 'kill -TERM $$'], { env: env() });
  if (!r) return;
  assert.deepEqual(r[0], { stdout: '', stderr: '', code: null, signal: 'SIGTERM' });
  assert.deepEqual(r[0], r[1]);
});

test('the program is found on the child PATH as execvp finds it', async (t) => {
  const notExec = scratch(t, 'a');
  const shim = scratch(t, 'b');
  fs.writeFileSync(path.join(notExec, 'git'), '#!/bin/sh\necho wrong\n', { mode: 0o644 });
  fs.mkdirSync(path.join(notExec, 'sub'));
  fs.writeFileSync(path.join(shim, 'git'), '#!/bin/sh\necho "shim $*"\n', { mode: 0o755 });
  // A file on PATH (ENOTDIR below it) and, for a user other than root, a directory it may not
  // search (EACCES): execvp goes past both, and so must the lookup.
  const closed = scratch(t, 'c');
  fs.writeFileSync(path.join(closed, 'git'), '#!/bin/sh\necho closed\n', { mode: 0o644 });
  fs.chmodSync(closed, 0o000);
  const aFile = path.join(notExec, 'git');
  const opts = { env: { ...env(), PATH: `${aFile}:${closed}:${notExec}:${shim}:${process.env.PATH}` } };
  const r = await both(t, 'git', ['--version'], opts);
  fs.chmodSync(closed, 0o755);
  if (!r) return;
  assert.deepEqual(r[0], { stdout: 'shim --version\n', stderr: '', code: 0, signal: null });
  assert.deepEqual(r[0], r[1]);
  // Not on PATH at all: posix_spawn declines, and node's spawn reports it.
  assert.equal(startProcessVia('posix', 'no-such-program-xet', [], { env: env() }), null);
  await assert.rejects(startProcessVia('node', 'no-such-program-xet', [], { env: env() })!.exited, /ENOENT/);
});

test('a program found on PATH is remembered, and one gone since is started the way node finds it', async (t) => {
  if (!native?.spawnPiped) return t.diagnostic('skipped: posix_spawn needs the native module');
  const shim = scratch(t, 'remembered');
  const program = path.join(shim, 'git');
  fs.writeFileSync(program, '#!/bin/sh\necho "shim $*"\n', { mode: 0o755 });
  const opts = { env: { ...env(), PATH: `${shim}:${process.env.PATH}` } };
  const out = async (s: Started | null) => {
    assert.ok(s, 'started');
    const chunks: Buffer[] = [];
    s.stdout.on('data', (c: Buffer) => chunks.push(c));
    s.stderr.resume();
    s.stdin.end();
    await s.exited;
    return Buffer.concat(chunks).toString();
  };
  assert.equal(await out(startProcessVia('posix', 'git', ['x'], opts)), 'shim x\n');
  // Removed: the remembered path no longer starts (posix_spawn declines), and startProcess's
  // fallback runs the git that is on PATH now.
  fs.rmSync(program);
  assert.equal(startProcessVia('posix', 'git', ['--version'], opts), null);
  assert.match(await out(startProcess('git', ['--version'], opts)), /^git version /);
});

test('git() through posix_spawn: output, input, failures as GIT_FAILED', async (t) => {
  const repo = scratch(t, 'r');
  await git(['init', '-q', repo]);
  const oid = (await git(['hash-object', '-w', '--stdin'], { cwd: repo, input: 'hello\n' })).stdout.toString().trim();
  assert.equal(oid, 'ce013625030ba8dba906f756967f9e9ca394464a');
  const e = await git(['cat-file', '-p', 'f'.repeat(40)], { cwd: repo }).catch((x: unknown) => x);
  assert.ok(e instanceof XetError && e.code === 'GIT_FAILED', String(e));
  assert.equal((e as XetError).details?.exitCode, 128);
  const gone = await git(['status'], { cwd: path.join(repo, 'missing') }).catch((x: unknown) => x);
  assert.ok(gone instanceof XetError && gone.code === 'GIT_FAILED', String(gone));
});

test('both routes: stdout into an open file (gitToFile), the rest as usual', async (t) => {
  const dir = scratch(t, 'f');
  const results: Outcome[] = [];
  for (const route of ['posix', 'node'] as const) {
    const file = path.join(dir, route);
    const fd = fs.openSync(file, 'wx');
    const p = startProcessVia(route, 'sh', ['-c', 'head -c 300000 /dev/zero | tr "\\0" b; cat; echo done >&2'], {
      env: env(),
      stdoutFd: fd,
    });
    fs.closeSync(fd);
    if (!p) return t.skip('posix_spawn is not available');
    const o = await finish(p, 'tail\n');
    results.push({ ...o, stdout: fs.readFileSync(file, 'utf8') });
  }
  assert.deepEqual(results[0], { stdout: `${'b'.repeat(300000)}tail\n`, stderr: 'done\n', code: 0, signal: null });
  assert.deepEqual(results[0], results[1]);
});

test('both routes: a killed child that was writing ends its reader (the end arrives, exited settles)', async (t) => {
  for (const route of ['posix', 'node'] as const) {
    const p = startProcessVia(route, 'sh', ['-c', 'while :; do echo yyyyyyyyyyyyyyyy; done'], { env: env() });
    if (!p) return t.skip('posix_spawn is not available');
    p.stdin.end();
    p.stderr.resume();
    // A reader that waits for the end of the output, as the chunk reader's prefetch does.
    const ended = new Promise<number>((resolve) => {
      let n = 0;
      p.stdout.on('data', (b: Buffer) => {
        n += b.length;
        if (n > 1 << 16) p.kill('SIGKILL');
      });
      p.stdout.on('end', () => resolve(n));
    });
    assert.ok((await ended) > 1 << 16, `${route}: the reader saw the end`);
    assert.deepEqual(await p.exited, { code: null, signal: 'SIGKILL' }, route);
  }
});

test('both routes: exited settles for a reader that paused and gave up, and for output nobody read', async (t) => {
  const within = <T>(p: Promise<T>, what: string): Promise<T> =>
    Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no end`)), 5000))]);
  for (const route of ['posix', 'node'] as const) {
    // Paused once (backpressure), then killed: what the chunk reader's prefetch does on an error.
    const p = startProcessVia(route, 'sh', ['-c', 'exec head -c 4000000 /dev/zero'], { env: env() });
    if (!p) return t.skip('posix_spawn is not available');
    p.stdin.end();
    p.stderr.resume();
    await new Promise<void>((resolve) =>
      p.stdout.once('data', () => {
        p.stdout.pause();
        resolve();
      }),
    );
    p.kill('SIGKILL');
    assert.deepEqual(await within(p.exited, `${route}: paused, killed`), { code: null, signal: 'SIGKILL' });
    // Never read at all; it exits by itself.
    const q = startProcessVia(route, 'sh', ['-c', 'echo out; echo err >&2'], { env: env() }) as Started;
    q.stdin.end();
    assert.deepEqual(await within(q.exited, `${route}: unread`), { code: 0, signal: null });
  }
});

test('both routes: a child that exits leaves no descriptor of its pipes behind', async (t) => {
  const fds = (): number => fs.readdirSync('/proc/self/fd').length;
  for (const route of ['posix', 'node'] as const) {
    const before = fds();
    for (let i = 0; i < 20; i++) {
      // stdin never ended by the caller: the child goes without reading it.
      const p = startProcessVia(route, 'true', [], { env: env() });
      if (!p) return t.skip('posix_spawn is not available');
      p.stdout.resume();
      p.stderr.resume();
      await p.exited;
    }
    await new Promise((r) => setTimeout(r, 50));
    assert.ok(fds() - before <= 1, `${route}: ${fds() - before} descriptors left after 20 children`);
  }
});

test('both routes, in a process of their own: a paused reader does not let node exit before exited settles', (t) => {
  // In the test runner something else always keeps the loop alive; a bare process is where it
  // showed (review helper 15): the reader pauses, the pipe fills, and nothing but the exit watch
  // keeps node running. 70,000 bytes fit in the pipe and the paused reader's buffer, so the child
  // can end by itself (more would block it, on both routes, as it would block git).
  if (!native) return t.skip('posix_spawn is not available');
  const spawnJs = JSON.stringify(path.resolve(__dirname, '../src/git/spawn.js'));
  for (const route of ['posix', 'node']) {
    for (const how of ['exits by itself', 'killed']) {
      const cmd = how === 'killed' ? 'exec yes' : 'exec head -c 70000 /dev/zero';
      const script = `
        const { startProcessVia } = require(${spawnJs});
        const p = startProcessVia(${JSON.stringify(route)}, 'sh', ['-c', ${JSON.stringify(cmd)}], { env: process.env });
        p.stdin.end();
        p.stderr.resume();
        let settled = false;
        p.stdout.once('data', () => {
          p.stdout.pause();
          if (${JSON.stringify(how)} === 'killed') setTimeout(() => p.kill('SIGKILL'), 50);
        });
        p.exited.then((r) => { settled = true; process.stdout.write(JSON.stringify(r)); });
        process.on('beforeExit', () => { if (!settled) process.stdout.write('PENDING'); });`;
      const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 });
      const want = how === 'killed' ? { code: null, signal: 'SIGKILL' } : { code: 0, signal: null };
      assert.equal(r.stdout, JSON.stringify(want), `${route}, ${how}: ${r.stderr}`);
    }
  }
});

test('one cat-file --batch-command reader: contents over many pipe chunks, interleaved with info, missing and TooBig', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'objects');
    // Larger than a pipe's 64 KiB many times over: the reader copies each chunk once (review 24:
    // joining every chunk to what came before was quadratic).
    const big = pseudoRandomBytes(6 * 1024 * 1024 + 7, 3);
    const small = Buffer.from('small\n');
    const ids = [big, small, Buffer.alloc(0)].map((b) => r.gitInput(b, 'hash-object', '-w', '--stdin').trim());
    const missing = '0'.repeat(40);
    const reader = new ObjectReader({ cwd: r.dir });
    try {
      const [infos, got] = await Promise.all([
        reader.info([ids[0], missing, ids[1]]),
        reader.contents([ids[0], ids[1], ids[2], missing, ids[0]], big.length),
      ]);
      assert.deepEqual(
        infos.map((i) => i && [i.type, i.size]),
        [['blob', big.length], null, ['blob', small.length]],
      );
      assert.ok(got[0]?.data.equals(big), 'the large blob, every byte');
      assert.ok(got[1]?.data.equals(small));
      assert.equal(got[2]?.data.length, 0);
      assert.equal(got[3], null);
      assert.ok(got[4]?.data.equals(big), 'the same blob again after the others');
      await assert.rejects(reader.contents([ids[0]], big.length - 1), TooBig);
      await assert.rejects(reader.info([ids[1]]), (e: unknown) => e instanceof XetError, 'a reader closed by TooBig');
    } finally {
      reader.close();
    }
  } finally {
    sb.cleanup();
  }
});
