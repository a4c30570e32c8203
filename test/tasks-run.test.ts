// git xet task run / task cancel through the real CLI, with real processes: the exit status passed
// through, --detach, a deadline on a command that ignores SIGTERM and has children outside its
// process group, cancellation (signal and the polled request), --no-capture, results at the size
// limits from stdout and from $XET_TASK_RESULT, a busy slot refused before anything starts, a fork
// made for the task, --continue, and the correlation id carried into the manifest and every event.
// Rows and events are read with the store API (the sidecar is real SQLite; nothing is mocked).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { describeRun, expectError, expectExit, parseJson, xet, XET_BIN, capture } from './support/xet';
import { openSidecar } from '../src/sidecar/db';
import { RESULT_INLINE_MAX, RESULT_MAX, isTerminal } from '../src/tasks/model';
import { PAUSE_AT_ENV, PAUSE_DIR_ENV } from '../src/testing/fault-points';
import { tryAcquireLease } from '../src/tasks/slot';
import { getTask, listEvents, listTasks, updateTask, type TaskEvent, type TaskRow } from '../src/tasks/store';

function repo(sb: Sandbox, name = 'src'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

function task(r: Repo, id: string): TaskRow {
  const db = openSidecar(r.commonDir());
  try {
    const t = getTask(db, id);
    assert.ok(t, `task ${id} exists`);
    return t;
  } finally {
    db.close();
  }
}

function events(r: Repo, id: string): TaskEvent[] {
  const db = openSidecar(r.commonDir());
  try {
    return listEvents(db, id);
  } finally {
    db.close();
  }
}

function allTasks(r: Repo): TaskRow[] {
  if (!fs.existsSync(path.join(r.commonDir(), 'xet', 'xet.db'))) return [];
  const db = openSidecar(r.commonDir());
  try {
    return listTasks(db);
  } finally {
    db.close();
  }
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

async function until<T>(what: string, fn: () => T | null | undefined | false, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    assert.ok(Date.now() < end, `timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** `git xet <args>` in the background: its exit status and output once it ends. */
function xetBackground(sb: Sandbox, cwd: string, args: string[]) {
  const child = spawn(process.execPath, [XET_BIN, ...args], { cwd, env: sb.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  const done = new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once('close', (status) => resolve({ status, stdout, stderr })),
  );
  return { child, done };
}

/** A process is gone when /proc has no entry for it or it is a zombie nobody reaped. */
function gone(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** The running task of this repository, once its command has started. */
async function runningTask(r: Repo): Promise<TaskRow> {
  return until('a running task', () => allTasks(r).find((t) => t.status === 'running' && t.pid !== null));
}

const types = (evs: TaskEvent[]) => evs.map((e) => e.eventType);

test('task run passes the exit status through, forwards stdout and stderr, gives the command its environment and copies the correlation id into the manifest and every event', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const envFile = sb.path('env.txt');
    const cid = 'ticket-42 ünïcode';
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--correlation-id',
      cid,
      '--',
      'sh',
      '-c',
      `echo out; echo err >&2; env | grep '^XET_' | sort > '${envFile}'; exit 7`,
    ]);
    expectExit(res, 7);
    assert.equal(res.stdout, 'out\n');
    assert.match(res.stderr, /^err$/m);
    const t = allTasks(r)[0];
    assert.equal(t.status, 'failed');
    assert.equal(t.exitCode, 7);
    assert.equal(t.errorCode, null);
    assert.equal(t.correlationId, cid);
    assert.equal(t.command, 'sh');
    assert.equal(t.mode, 'worktree');
    assert.match(t.resultSnapshot ?? '', /^[0-9a-f]{40}$/, 'the workspace was captured');
    const manifest = JSON.parse(t.manifestJson);
    assert.equal(manifest.correlationId, cid);
    assert.equal(manifest.workspace.cwd, '.');
    assert.equal(manifest.deadlineAt, t.deadlineAt);
    const evs = events(r, t.id);
    assert.deepEqual(
      types(evs).filter((e) => e !== 'task.result_spooled'),
      ['task.created', 'task.started', 'task.captured', 'task.failed'],
    );
    for (const e of evs) assert.equal(e.correlationId, cid, `${e.eventType} carries the correlation id`);
    const env = Object.fromEntries(
      fs
        .readFileSync(envFile, 'utf8')
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    assert.equal(env.XET_TASK_ID, t.id);
    assert.equal(env.XET_TASK_MARK, t.mark);
    assert.equal(env.XET_CORRELATION_ID, cid);
    assert.equal(env.XET_TASK_RESULT, path.join(r.commonDir(), 'xet', 'tasks', t.id, 'result'));
    assert.equal(env.XET_SESSION_ID, undefined, 'no session id was declared');
    assert.ok(!fs.existsSync(r.gitPath('xet-guard')), 'the guard is gone');

    // Success is 0, and the command runs in the caller's directory inside the worktree.
    r.mkdir('sub');
    const ok = xet(sb, r.p('sub'), ['task', 'run', '--json', '--', 'sh', '-c', 'pwd']);
    expectExit(ok, 0);
    const out = parseJson(ok);
    assert.equal(out.status, 'succeeded');
    assert.equal(out.exitCode, 0);
    assert.equal(JSON.parse(task(r, out.task).manifestJson).workspace.cwd, 'sub');
    assert.equal(out.result.preview, `${fs.realpathSync(r.p('sub'))}\n`);
  }));

test('task run refuses bad input with USAGE before anything is created or started', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const marker = sb.path('marker');
    const cmd = ['--', 'sh', '-c', `touch '${marker}'`];
    for (const bad of [
      ['--correlation-id', 'a\u0007b'],
      ['--correlation-id', 'x'.repeat(257)],
      ['--correlation-id', ''],
      ['--session-id', 'line\nbreak'],
      ['--timeout', '0'],
      ['--timeout', 'soon'],
      // Beyond what a deadline can be (R15): USAGE with the range, not an internal error.
      ['--timeout', '1000000000d'],
      ['--timeout', '99999999999999d'],
      ['--timeout', '101y'],
      ['--mode', 'copy'],
      ['--in', sb.path('nowhere')],
      ['--in', r.dir, '--fork', 'HEAD'],
    ]) {
      expectError(xet(sb, r.dir, ['task', 'run', ...bad, '--json', ...cmd]), 'USAGE', 2);
    }
    expectError(xet(sb, r.dir, ['task', 'run', '--json', '--', '']), 'USAGE', 2);
    // argv[0] that names no command at all.
    expectError(xet(sb, r.dir, ['task', 'run', '--json', '--', '/']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['task', 'run', '--json', '--', '  ']), 'USAGE', 2);
    const long = expectError(xet(sb, r.dir, ['task', 'run', '--json', '--timeout', '200y', ...cmd]), 'USAGE', 2);
    assert.match(long.message, /1s to 100y/);
    const other = repo(sb, 'other');
    expectError(xet(sb, r.dir, ['task', 'run', '--in', other.dir, '--json', ...cmd]), 'USAGE', 2);
    assert.ok(!fs.existsSync(marker), 'nothing ran');
    assert.deepEqual(allTasks(r), [], 'no task was created');
  }));

test('--detach prints the task id at once; the detached runner runs the command, captures and clears the guard', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const gate = sb.path('gate');
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--detach',
      '--',
      'sh',
      '-c',
      `while [ ! -e '${gate}' ]; do sleep 0.05; done; echo made > made.txt; echo result`,
    ]);
    expectExit(res, 0);
    const id = res.stdout.trim();
    assert.match(id, /^[0-9a-f]{16}$/);
    // The command waits for the gate, so the id cannot have come after its end.
    assert.notEqual(task(r, id).status, 'succeeded');
    const running = await runningTask(r);
    assert.equal(running.id, id);
    assert.ok(running.detached);
    assert.ok(fs.existsSync(r.gitPath('xet-guard')), 'the guard stands while the task runs');
    fs.writeFileSync(gate, '');
    const t = await until('the detached task to end', () => {
      const x = task(r, id);
      return x.status !== 'running' && x.status !== 'created' && x;
    });
    assert.equal(t.status, 'succeeded');
    assert.equal(t.exitCode, 0);
    assert.notEqual(t.runnerPid, process.pid);
    assert.match(t.resultSnapshot ?? '', /^[0-9a-f]{40}$/);
    assert.equal(r.git('cat-file', 'blob', `${t.resultSnapshot}:files/made.txt`), 'made\n');
    const show = xet(sb, r.dir, ['task', 'result', id]);
    expectExit(show, 0);
    assert.equal(show.stdout, 'result\n');
    await until('the guard to go', () => !fs.existsSync(r.gitPath('xet-guard')));
  }));

test('a 2 s --timeout ends a command that ignores SIGTERM and its children outside the group (setsid, double fork): interrupted TASK_TIMED_OUT, exit 124, workspace captured', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    r.git('config', 'xet.task.killGrace', '1s');
    const pids = sb.path('pids');
    fs.mkdirSync(pids);
    const script = [
      "trap '' TERM",
      `setsid sh -c 'echo $$ > ${pids}/setsid; while :; do sleep 1; done' &`,
      `( sh -c 'echo $$ > ${pids}/double; while :; do sleep 1; done' & )`,
      `echo $$ > ${pids}/main`,
      'echo partial > work.txt',
      'while :; do sleep 1; done',
    ].join('\n');
    const started = Date.now();
    const res = xet(sb, r.dir, ['task', 'run', '--timeout', '2s', '--json', '--', 'sh', '-c', script]);
    expectExit(res, 124);
    const out = parseJson(res);
    assert.equal(out.status, 'interrupted');
    assert.equal(out.errorCode, 'TASK_TIMED_OUT');
    assert.ok(Date.now() - started >= 2000, 'not before the deadline');
    const names = fs.readdirSync(pids).sort();
    assert.deepEqual(names, ['double', 'main', 'setsid']);
    for (const n of names) {
      const pid = Number(fs.readFileSync(path.join(pids, n), 'utf8'));
      assert.ok(gone(pid), `the ${n} process (${pid}) was ended`);
    }
    const t = task(r, out.task);
    assert.equal(t.status, 'interrupted');
    assert.equal(t.errorCode, 'TASK_TIMED_OUT');
    assert.equal(JSON.parse(t.manifestJson).policy.killGraceMs, 1000, 'the grace was frozen from config');
    assert.equal(r.git('cat-file', 'blob', `${t.resultSnapshot}:files/work.txt`), 'partial\n');
    const evs = events(r, t.id);
    assert.ok(types(evs).includes('task.captured'));
    const timedOut = evs.find((e) => e.eventType === 'task.timed_out');
    assert.ok(timedOut, 'task.timed_out recorded');
    assert.ok((timedOut.payload.killed as number) >= 1, 'something outlived SIGTERM and was killed');
    assert.equal(timedOut.payload.survivors, 0);
    assert.ok(!fs.existsSync(r.gitPath('xet-guard')));
  }));

test('task cancel: SIGTERM to a live runner ends the task (cancelled TASK_CANCELLED, exit 130); a request alone is seen by a detached runner', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const bg = xetBackground(sb, r.dir, ['task', 'run', '--', 'sh', '-c', 'sleep 30']);
    const t = await runningTask(r);
    const c = xet(sb, r.dir, ['task', 'cancel', t.id.slice(0, 6), '--json']);
    expectExit(c, 0);
    assert.deepEqual(parseJson(c), { task: t.id, status: 'running', cancelRequested: true, signalled: true });
    const end = await bg.done;
    assert.equal(end.status, 130, end.stderr);
    assert.match(end.stderr, /TASK_CANCELLED/);
    const after = task(r, t.id);
    assert.equal(after.status, 'cancelled');
    assert.equal(after.errorCode, 'TASK_CANCELLED');
    assert.ok(gone(after.pid as number));
    assert.deepEqual(
      types(events(r, t.id)).filter((e) => e === 'task.cancel_requested' || e === 'task.cancelled'),
      ['task.cancel_requested', 'task.cancelled'],
    );
    const again = xet(sb, r.dir, ['task', 'cancel', t.id, '--json']);
    expectExit(again, 0);
    assert.equal(parseJson(again).cancelRequested, false, 'an ended task is left as it is');
    expectError(xet(sb, r.dir, ['task', 'cancel', 'ffffffffffffffff', '--json']), 'TASK_NOT_FOUND');

    // The runner polls cancelRequestedAt: a request written without any signal ends it too.
    const d = xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--', 'sleep', '30']);
    expectExit(d, 0);
    const id = d.stdout.trim();
    await until('the detached task to run', () => task(r, id).status === 'running');
    const db = openSidecar(r.commonDir());
    try {
      updateTask(db, id, { cancelRequestedAt: new Date().toISOString() });
    } finally {
      db.close();
    }
    const x = await until('the polled cancel', () => task(r, id).status === 'cancelled' && task(r, id), 10_000);
    assert.equal(x.errorCode, 'TASK_CANCELLED');
  }));

test('task cancel right after task run --detach: a runner still starting is not signalled and ends cancelled, not interrupted', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    // The runner stops before it has trapped SIGTERM (the window every detach has while node loads).
    const dir = sb.path('faults-runner');
    fs.mkdirSync(dir);
    const d = xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--', 'sleep', '30'], {
      env: { [PAUSE_AT_ENV]: 'runner-main:start', [PAUSE_DIR_ENV]: dir },
    });
    expectExit(d, 0);
    const id = d.stdout.trim();
    await until('the runner at its start', () => fs.existsSync(path.join(dir, 'runner-main:start.reached')));
    const c = parseJson(xet(sb, r.dir, ['task', 'cancel', id, '--json']));
    assert.equal(c.cancelRequested, true);
    assert.equal(c.signalled, false, 'a runner that has not published its guard is not signalled');
    fs.writeFileSync(path.join(dir, 'runner-main:start.go'), '');
    const x = await until('the cancelled end', () => isTerminal(task(r, id).status) && task(r, id));
    assert.equal(x.status, 'cancelled', `ended ${x.status} (${x.errorCode})`);
    assert.equal(x.errorCode, 'TASK_CANCELLED');
    assert.equal(x.pid, null, 'the command never started');
  }));

test('--no-capture: the task ends without a snapshot', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const before = r.git('for-each-ref', 'refs/xet/snapshots/');
    const out = parseJson(
      xet(sb, r.dir, ['task', 'run', '--no-capture', '--json', '--', 'sh', '-c', 'echo x > new.txt']),
    );
    assert.equal(out.status, 'succeeded');
    assert.equal(out.resultSnapshot, null);
    const t = task(r, out.task);
    assert.equal(t.capture, false);
    assert.equal(t.resultSnapshot, null);
    assert.equal(JSON.parse(t.manifestJson).policy.capture, false);
    assert.ok(!types(events(r, t.id)).includes('task.captured'));
    assert.equal(r.git('for-each-ref', 'refs/xet/snapshots/'), before);
  }));

test('results from stdout and from $XET_TASK_RESULT at 256 KiB-1, 256 KiB+1, 8 MiB and 8 MiB+1 bytes', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const sizes: [number, 'inline' | 'spool' | null][] = [
      [RESULT_INLINE_MAX - 1, 'inline'],
      [RESULT_INLINE_MAX + 1, 'spool'],
      [RESULT_MAX, 'spool'],
      [RESULT_MAX + 1, null],
    ];
    for (const via of ['stdout', 'file'] as const) {
      for (const [size, storage] of sizes) {
        const gen = `head -c ${size} /dev/zero | tr '\\0' ${via === 'stdout' ? 'a' : 'b'}`;
        const script = via === 'stdout' ? gen : `${gen} > "$XET_TASK_RESULT"; echo not the result`;
        // The refused size keeps its capture: the workspace capture stands whatever the result.
        const flags = storage === null ? [] : ['--no-capture'];
        const res = xet(sb, r.dir, ['task', 'run', ...flags, '--json', '--', 'sh', '-c', script]);
        const what = `${via} ${size}`;
        if (storage === null) {
          const err = expectError(res, 'RESULT_TOO_LARGE');
          const t = task(r, err.details.task);
          assert.equal(t.status, 'failed', what);
          assert.equal(t.errorCode, 'RESULT_TOO_LARGE', what);
          assert.equal(t.exitCode, 0, `${what}: the command itself succeeded`);
          assert.match(t.resultSnapshot ?? '', /^[0-9a-f]{40}$/, `${what}: captured all the same`);
          continue;
        }
        expectExit(res, 0);
        const out = parseJson(res);
        assert.equal(out.result.storage, storage, what);
        assert.equal(out.result.source, via, what);
        assert.equal(out.result.sizeBytes, size, what);
        const bytes = Buffer.alloc(size, via === 'stdout' ? 'a' : 'b');
        assert.equal(out.result.sha256, crypto.createHash('sha256').update(bytes).digest('hex'), what);
        const t = task(r, out.task);
        assert.equal(t.resultSizeBytes, size, what);
        assert.equal(t.status, 'succeeded', what);
      }
    }
  }));

test('a task in a busy slot is WORKDIR_BUSY and starts nothing: refused at once while a guard stands, failed when only the lease is held', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const marker = sb.path('marker');
    const bg = xetBackground(sb, r.dir, ['task', 'run', '--no-capture', '--', 'sleep', '30']);
    const first = await runningTask(r);
    const second = xet(sb, r.dir, ['task', 'run', '--json', '--', 'sh', '-c', `touch '${marker}'`]);
    expectError(second, 'WORKDIR_BUSY');
    assert.ok(!fs.existsSync(marker), 'the second command never ran');
    assert.deepEqual(
      allTasks(r).map((t) => t.id),
      [first.id],
      'refused before a task was made',
    );
    expectExit(xet(sb, r.dir, ['task', 'cancel', first.id]), 0);
    assert.equal((await bg.done).status, 130);

    // The lease without a guard (another runner between its lease and its guard): the task is made
    // and fails WORKDIR_BUSY, its command never started.
    const lease = tryAcquireLease({ id: 'x', worktree: r.dir, gitDir: r.gitPath('.'), commonDir: r.commonDir() });
    assert.ok(lease);
    try {
      const res = xet(sb, r.dir, ['task', 'run', '--json', '--', 'sh', '-c', `touch '${marker}'`]);
      const err = expectError(res, 'WORKDIR_BUSY');
      const t = task(r, err.details.task);
      assert.equal(t.status, 'failed');
      assert.equal(t.errorCode, 'WORKDIR_BUSY');
      assert.equal(t.pid, null);
      assert.ok(!fs.existsSync(marker), 'the command never ran');
      assert.ok(!fs.existsSync(r.gitPath('xet-guard')), 'no guard was published');
    } finally {
      lease.release();
    }
  }));

test('--fork SNAPSHOT makes a fork (default directory beside the main worktree) and runs the task there', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    r.write('dirty.txt', 'in the snapshot\n');
    const snap = capture(sb, r.dir);
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--fork',
      snap,
      '--mode',
      'copy',
      '--json',
      '--',
      'sh',
      '-c',
      'cat dirty.txt; echo forked > made.txt; git rev-parse --show-toplevel >&2',
    ]);
    expectExit(res, 0);
    const out = parseJson(res);
    const t = task(r, out.task);
    const dir = path.join(path.dirname(r.dir), `${path.basename(r.dir)}.tasks`, t.id);
    assert.equal(t.worktree, fs.realpathSync(dir));
    assert.equal(t.mode, 'copy');
    assert.equal(t.baseSnapshot, snap);
    assert.match(t.forkId ?? '', /^[0-9a-f]+$/);
    assert.equal(out.result.preview, 'in the snapshot\n');
    assert.equal(fs.readFileSync(path.join(dir, 'made.txt'), 'utf8'), 'forked\n');
    assert.ok(!fs.existsSync(r.p('made.txt')), 'the source worktree is untouched');
    const m = JSON.parse(t.manifestJson);
    assert.deepEqual(
      { mode: m.workspace.mode, alias: m.workspace.alias, base: m.baseSnapshot },
      { mode: 'copy', alias: t.forkId, base: snap },
    );
    assert.equal(r.git('cat-file', 'blob', `${t.resultSnapshot}:files/made.txt`), 'forked\n');
    const forks = parseJson(xet(sb, r.dir, ['forks', '--json'])).forks as { id: string }[];
    assert.ok(forks.some((f) => f.id === t.forkId));

    // --in the fork's directory: the same slot, known as that fork.
    const again = parseJson(
      xet(sb, r.dir, ['task', 'run', '--in', dir, '--no-capture', '--json', '--', 'cat', 'made.txt']),
    );
    assert.equal(again.result.preview, 'forked\n');
    const t2 = task(r, again.task);
    assert.deepEqual([t2.slot, t2.mode, t2.forkId], [t.slot, 'copy', t.forkId]);
  }));

test('--continue runs in the continued task’s workspace with its session; TASK_NOT_RESUMABLE without a session', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const plain = parseJson(xet(sb, r.dir, ['task', 'run', '--no-capture', '--json', '--', 'true']));
    expectError(
      xet(sb, r.dir, ['task', 'run', '--continue', plain.task, '--json', '--', 'true']),
      'TASK_NOT_RESUMABLE',
    );
    const first = parseJson(
      xet(sb, r.dir, ['task', 'run', '--session-id', 'sess-1', '--no-capture', '--json', '--', 'true']),
    );
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--continue',
      first.task,
      '--no-capture',
      '--json',
      '--',
      'sh',
      '-c',
      'printf %s "$XET_SESSION_ID"',
    ]);
    expectExit(res, 0);
    const out = parseJson(res);
    assert.equal(out.result.preview, 'sess-1');
    const t = task(r, out.task);
    assert.equal(t.sessionId, 'sess-1');
    assert.equal(t.continuesTask, first.task);
    assert.deepEqual(JSON.parse(t.manifestJson).continuation, { sessionId: 'sess-1', continuesTask: first.task });
    expectError(
      xet(sb, r.dir, ['task', 'run', '--continue', first.task, '--session-id', 'other', '--json', '--', 'true']),
      'USAGE',
      2,
    );
  }));

test('a guard whose runner died refuses task run with WORKDIR_RECOVERY_REQUIRED before anything starts', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const marker = sb.path('marker');
    // A runner that is gone (pid 1 with another start time) and a command that is this test process:
    // recovery cannot call it finished, so the guard stays and the slot fails closed.
    const self = fs.readFileSync(`/proc/${process.pid}/stat`, 'utf8');
    const start = self.slice(self.lastIndexOf(')') + 2).split(' ')[19];
    const boot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const id = 'abcdefabcdefabcd';
    const g = {
      command: { pid: process.pid, start, boot },
      createdAt: new Date().toISOString(),
      runner: { pid: 1, start: '1', boot },
      schema: 'xet.guard/v1',
      slot: 'x',
      task: id,
    };
    fs.writeFileSync(r.gitPath('xet-guard'), `xet-guard 1 ${id} 1 1 ${boot}\n${JSON.stringify(g)}\n`);
    const res = xet(sb, r.dir, ['task', 'run', '--json', '--', 'sh', '-c', `touch '${marker}'`]);
    expectError(res, 'WORKDIR_RECOVERY_REQUIRED');
    assert.ok(!fs.existsSync(marker));
    assert.ok(fs.existsSync(r.gitPath('xet-guard')), 'the guard stays');
    assert.equal(describeRun(res).includes('task recover'), true);
  }));

test('a reader that closes the pipe early (task run … | head) ends the copying, not the runner: the task finishes and its guard goes', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const child = spawn(
      process.execPath,
      [XET_BIN, 'task', 'run', '--no-capture', '--', 'sh', '-c', 'yes | head -c 3000000'],
      {
        cwd: r.dir,
        env: sb.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.stdout.once('data', () => child.stdout.destroy());
    const status = await new Promise<number | null>((resolve) => child.once('close', resolve));
    assert.equal(status, 0, stderr);
    const t = allTasks(r)[0];
    assert.equal(t.status, 'succeeded');
    assert.equal(t.resultSizeBytes, 3000000, 'the result was kept whole');
    assert.ok(!fs.existsSync(r.gitPath('xet-guard')), 'the guard is gone');
  }));

test('the command is recorded by its name only: a whole command line given as one string leaves no prompt or secret in the row, the manifest or the events', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const cases: [string, string][] = [
      ['claude -p Refactor billing; key sk-LIVE-123', 'claude'],
      ['/usr/local/bin/agent\t--token=sk-LIVE-123', 'agent'],
      ['  ./bin/run\nsk-LIVE-123', 'run'],
      // The basename is taken after the cut: a slash inside the prompt does not pick the name.
      ['tool --out a/sk-LIVE-123', 'tool'],
      ['x'.repeat(200), 'x'.repeat(64)],
      ['ü'.repeat(40), 'ü'.repeat(32)],
    ];
    for (const [argv0, name] of cases) {
      const res = xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', argv0]);
      expectExit(res, 127);
      const t = task(r, parseJson(res).task);
      assert.equal(t.command, name, JSON.stringify(argv0));
      assert.equal(JSON.parse(t.manifestJson).runtime.command, name);
      const recorded = JSON.stringify([t, events(r, t.id)]);
      assert.ok(!recorded.includes('sk-LIVE'), `no secret recorded for ${JSON.stringify(argv0)}`);
      assert.ok(!recorded.includes('Refactor'), 'no prompt recorded');
      const ev = xet(sb, r.dir, ['task', 'events', t.id, '--json']);
      expectExit(ev, 0);
      assert.ok(!ev.stdout.includes('sk-LIVE'));
    }
  }));

/** Runs the CLI through sh so that BAD in `args` becomes bytes that are not UTF-8 (ED A0 80, a surrogate). */
const NOT_UTF8_WRAP = [
  'sh',
  '-c',
  `bad=$(printf '\\355\\240\\200'); for a; do shift; if [ "$a" = BAD ]; then a=$bad; elif [ "$a" = --correlation-id=BAD ]; then a="--correlation-id=$bad"; fi; set -- "$@" "$a"; done; exec "$@"`,
  'sh',
];

test('a correlation or session id that is not UTF-8 on the command line is USAGE, never stored as U+FFFD; a real U+FFFD is kept', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const marker = sb.path('marker');
    const cmd = ['--', 'sh', '-c', `touch '${marker}'`];
    for (const bad of [['--correlation-id', 'BAD'], ['--correlation-id=BAD'], ['--session-id', 'BAD']]) {
      const e = expectError(
        xet(sb, r.dir, ['task', 'run', '--no-capture', '--json', ...bad, ...cmd], { wrap: NOT_UTF8_WRAP }),
        'USAGE',
        2,
      );
      assert.match(e.message, /not valid UTF-8/);
    }
    assert.ok(!fs.existsSync(marker), 'nothing ran');
    assert.deepEqual(allTasks(r), [], 'no task was created');
    // U+FFFD given as its own UTF-8 bytes is an ordinary character.
    const ok = xet(sb, r.dir, ['task', 'run', '--no-capture', '--json', '--correlation-id', 'a\uFFFDb', ...cmd], {
      wrap: NOT_UTF8_WRAP,
    });
    expectExit(ok, 0);
    assert.equal(task(r, parseJson(ok).task).correlationId, 'a\uFFFDb');
  }));

test('runtime versions are measured once per executable: a second task with the same node asks the cache; a changed file is measured again', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const bin = sb.path('fakebin');
    fs.mkdirSync(bin);
    const log = sb.path('version-calls.log');
    const node = path.join(bin, 'node');
    const script = (v: string) =>
      `#!/bin/sh\nif [ "$1" = --version ]; then echo asked >> '${log}'; echo v${v}; fi\nexit 0\n`;
    fs.writeFileSync(node, script('21.1.0'), { mode: 0o755 });
    const env = { ...sb.env, PATH: `${bin}:${sb.env.PATH ?? process.env.PATH}` };
    const runNode = () => {
      const res = xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', 'node', 'x.js'], { env });
      expectExit(res, 0);
      return JSON.parse(task(r, parseJson(res).task).manifestJson).runtime;
    };
    const calls = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).length : 0);
    const first = runNode();
    assert.deepEqual([first.version, first.versionSource, first.versionCached], ['21.1.0', 'measured', false]);
    assert.equal(calls(), 1);
    const second = runNode();
    assert.deepEqual([second.version, second.versionSource, second.versionCached], ['21.1.0', 'measured', true]);
    assert.equal(second.versionMeasuredAt, first.versionMeasuredAt, 'the measurement it reuses');
    assert.equal(calls(), 1, 'no second --version');
    assert.ok(fs.existsSync(path.join(r.commonDir(), 'xet', 'runtime-versions.json')));
    // Another binary at the same path (upgraded in place): measured again.
    fs.writeFileSync(node, script('22.0.0') + '\n', { mode: 0o755 });
    const third = runNode();
    assert.deepEqual([third.version, third.versionCached], ['22.0.0', false]);
    assert.equal(calls(), 2);
    // A cache file that is not ours is ignored, not trusted.
    fs.writeFileSync(path.join(r.commonDir(), 'xet', 'runtime-versions.json'), '{"schema":"x","entries":[]}');
    assert.equal(runNode().versionCached, false);
    assert.equal(calls(), 3);
  }));
