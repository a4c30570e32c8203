// SIGKILL the task runner at each of its fault points (src/testing/fault-points.ts, task:*) with a
// command that appends one line to a file outside the worktree; then: `git commit` there is refused
// while the guard stands (the hooks git xet init installs), git xet refuses to write the slot,
// `task recover` classifies the task, the guard goes where it should, `git commit` works again, and
// the append file proves the command ran at most once: nothing re-runs.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { openSidecar } from '../../src/sidecar/db';
import { workspaceId } from '../../src/sidecar/workspaces';
import { taskFile } from '../../src/tasks/paths';
import { assertSlotWritable, readGuardFile, type Slot } from '../../src/tasks/slot';
import { getTask, listEvents, updateTask } from '../../src/tasks/store';
import { codeOf } from '../support/errors';
import { FAULT_POINTS, killAt } from '../support/faults';
import { git, initRepo, type Repo } from '../support/git';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { XET_BIN, expectExit, parseJson, xet } from '../support/xet';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(sb: Sandbox, cwd: string, args: string[]): any {
  const r = xet(sb, cwd, [...args, '--json']);
  expectExit(r, 0);
  return parseJson(r);
}

function setup(sb: Sandbox): { r: Repo; slot: Slot; append: string } {
  const r = initRepo(sb, 'src');
  r.commit('c', { 'a.txt': 'a\n' });
  json(sb, r.dir, ['init']); // installs the hooks
  const gitDir = fs.realpathSync(r.gitPath('.').replace(/\/\.$/, ''));
  const slot = { id: workspaceId(gitDir), worktree: r.dir, gitDir, commonDir: fs.realpathSync(r.commonDir()) };
  return { r, slot, append: sb.path('append.log') };
}

const lines = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);

/** The one task a killed `task run` left (its id never reached stdout). */
function onlyTask(slot: Slot): string {
  const db = openSidecar(slot.commonDir);
  try {
    const ids = db.prepare('SELECT id FROM tasks').all() as { id: string }[];
    assert.equal(ids.length, 1);
    return ids[0].id;
  } finally {
    db.close();
  }
}

function row(slot: Slot, id: string) {
  const db = openSidecar(slot.commonDir);
  try {
    return { task: getTask(db, id)!, events: listEvents(db, id).map((e) => e.eventType) };
  } finally {
    db.close();
  }
}

function commit(r: Repo, name: string) {
  r.write(name, `${name}\n`);
  r.git('add', name);
  return r.gitTry('commit', '-q', '-m', name);
}

function assertRefused(r: Repo, slot: Slot): void {
  const c = commit(r, 'during.txt');
  assert.notEqual(c.status, 0, 'git commit is refused while the stale guard stands');
  assert.match(c.stderr.toString('utf8'), /WORKDIR_RECOVERY_REQUIRED/);
  assert.equal(
    codeOf(() => assertSlotWritable(slot, 'test')),
    'WORKDIR_RECOVERY_REQUIRED',
  );
}

function assertCommits(r: Repo): void {
  const c = commit(r, 'after.txt');
  assert.equal(c.status, 0, `git commit works again: ${c.stderr.toString('utf8')}`);
}

async function waitFor(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < end, `timed out waiting for ${what}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

const appendCmd = (file: string, tail = '') => ['sh', '-c', `echo ran >> '${file}'${tail}`];

test('the runner fault points are the ones this file kills at', () => {
  assert.deepEqual(
    FAULT_POINTS.filter((p) => p.startsWith('task:')),
    ['task:after-lease', 'task:after-guard', 'task:after-start', 'task:after-exit'],
  );
});

test('SIGKILL at task:after-lease: no guard, nothing ran; recover marks it NOT_RECOVERABLE and has nothing to clear', () =>
  withSandbox((sb) => {
    const { r, slot, append } = setup(sb);
    killAt(sb, r.dir, ['task', 'run', '--json', '--', ...appendCmd(append)], 'task:after-lease');
    const id = onlyTask(slot);
    assert.equal(readGuardFile(slot).state, 'none');
    const [t] = json(sb, r.dir, ['task', 'recover', '--all']).tasks;
    assert.deepEqual([t.task, t.classification, t.guardCleared, t.snapshot], [id, 'NOT_RECOVERABLE', false, null]);
    const { task } = row(slot, id);
    assert.deepEqual([task.status, task.errorCode], ['interrupted', 'TASK_INTERRUPTED']);
    assert.deepEqual(lines(append), [], 'the command never ran');
    assertCommits(r);
  }));

test('SIGKILL at task:after-guard: commits and git xet writes are refused; recover clears the guard, nothing ran', () =>
  withSandbox((sb) => {
    const { r, slot, append } = setup(sb);
    killAt(sb, r.dir, ['task', 'run', '--json', '--', ...appendCmd(append)], 'task:after-guard');
    const id = onlyTask(slot);
    assertRefused(r, slot);
    const [t] = json(sb, r.dir, ['task', 'recover', id]).tasks;
    assert.deepEqual([t.classification, t.guardCleared], ['NOT_RECOVERABLE', true]);
    assert.equal(readGuardFile(slot).state, 'none');
    const { task, events } = row(slot, id);
    assert.deepEqual(
      [task.status, task.errorCode, task.recovery],
      ['interrupted', 'TASK_INTERRUPTED', 'NOT_RECOVERABLE'],
    );
    assert.ok(events.includes('runtime.reconciliation_started') && events.includes('runtime.reconciliation_finished'));
    assert.deepEqual(lines(append), []);
    assertCommits(r);
    // The slot is usable again: a new task runs in it.
    const again = xet(sb, r.dir, ['task', 'run', '--json', '--', ...appendCmd(append)]);
    expectExit(again, 0);
    assert.deepEqual(lines(append), ['ran']);
  }));

test('SIGKILL at task:after-start while the command runs: REATTACHED, the supervisor finishes it, it ran once', async () =>
  withSandbox(async (sb) => {
    const { r, slot, append } = setup(sb);
    const go = sb.path('go');
    // The command waits for the test (so it is surely running when recovery looks), then ends.
    const cmd = appendCmd(append, `; while [ ! -e '${go}' ]; do sleep 0.1; done; echo out`);
    killAt(sb, r.dir, ['task', 'run', '--json', '--', ...cmd], 'task:after-start');
    const id = onlyTask(slot);
    await waitFor('the command to start', () => lines(append).length === 1);
    assertRefused(r, slot);
    // A second task in the slot: its own recovery pass reattaches the first and hands the lease to
    // the supervisor before it returns, so the slot check right after reads busy (not stale).
    const second = xet(sb, r.dir, ['task', 'run', '--json', '--', ...appendCmd(append)]);
    assert.equal(second.status, 3, second.stdout + second.stderr);
    assert.equal(parseJson(second).error.code, 'WORKDIR_BUSY', second.stdout);
    const { task: mid, events: midEvents } = row(slot, id);
    assert.equal(mid.recovery, 'REATTACHED');
    assert.equal(mid.status, 'running');
    assert.ok(midEvents.includes('task.reattached'));
    // An explicit recovery now finds a live supervisor: nothing to do.
    const again = json(sb, r.dir, ['task', 'recover', id]);
    assert.deepEqual(again.tasks, []);
    assert.equal(again.skipped[0].state, 'live');
    fs.writeFileSync(go, '');
    await waitFor('the supervisor to finish the task', () => row(slot, id).task.status !== 'running');
    const { task, events } = row(slot, id);
    assert.deepEqual([task.status, task.exitCode], ['succeeded', 0]);
    assert.match(task.resultSnapshot ?? '', /^[0-9a-f]{40}$/);
    assert.ok(events.includes('task.succeeded'));
    await waitFor('the guard to go', () => readGuardFile(slot).state === 'none');
    assert.equal(fs.readFileSync(taskFile(slot.commonDir, id, 'stdout'), 'utf8'), 'out\n');
    // The supervisor keeps the result as the runner would have.
    const res = xet(sb, r.dir, ['task', 'result', id]);
    expectExit(res, 0);
    assert.equal(res.stdout, 'out\n');
    assert.deepEqual(lines(append), ['ran'], 'ran exactly once');
    assertCommits(r);
  }));

test('SIGKILL at task:after-start with a session whose command ends: SESSION_RESUMABLE, task run --continue carries it', async () =>
  withSandbox(async (sb) => {
    const { r, slot, append } = setup(sb);
    killAt(
      sb,
      r.dir,
      ['task', 'run', '--session-id', 'sess-7', '--json', '--', ...appendCmd(append)],
      'task:after-start',
    );
    const id = onlyTask(slot);
    await waitFor('the command to end', () => fs.existsSync(taskFile(slot.commonDir, id, 'exit')));
    assertRefused(r, slot);
    const [t] = json(sb, r.dir, ['task', 'recover', '--all']).tasks;
    assert.deepEqual([t.task, t.classification, t.guardCleared, t.exitCode], [id, 'SESSION_RESUMABLE', true, 0]);
    assert.match(t.snapshot, /^[0-9a-f]{40}$/, 'the workspace captured as evidence');
    assertCommits(r);
    const next = xet(sb, r.dir, ['task', 'run', '--continue', id.slice(0, 8), '--json', '--', 'true']);
    expectExit(next, 0);
    const nextId: string = parseJson(next).task;
    const { task } = row(slot, nextId);
    assert.equal(task.sessionId, 'sess-7');
    assert.equal(task.continuesTask, id);
    const manifest = JSON.parse(task.manifestJson);
    assert.deepEqual(manifest.continuation, { sessionId: 'sess-7', continuesTask: id });
    assert.deepEqual(lines(append), ['ran'], 'the interrupted command was not re-run');
  }));

test('SIGKILL at task:after-exit: NOT_RECOVERABLE with the exit status kept; two concurrent recoveries capture once', async () =>
  withSandbox(async (sb) => {
    const { r, slot, append } = setup(sb);
    killAt(sb, r.dir, ['task', 'run', '--json', '--', ...appendCmd(append, '; echo out; exit 5')], 'task:after-exit');
    const id = onlyTask(slot);
    assertRefused(r, slot);
    const runOne = () =>
      new Promise<string>((resolve) => {
        const c = spawn(process.execPath, [XET_BIN, 'task', 'recover', '--all', '--json'], { cwd: r.dir, env: sb.env });
        let out = '';
        c.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
        c.on('close', () => resolve(out));
      });
    const outs = (await Promise.all([runOne(), runOne()])).map((o) => JSON.parse(o).tasks);
    const acted = outs.flat();
    assert.equal(acted.length, 1, JSON.stringify(outs));
    assert.deepEqual([acted[0].classification, acted[0].exitCode, acted[0].guardCleared], ['NOT_RECOVERABLE', 5, true]);
    const { task, events } = row(slot, id);
    assert.deepEqual([task.status, task.errorCode, task.exitCode], ['interrupted', 'TASK_INTERRUPTED', 5]);
    assert.equal(task.resultSnapshot, acted[0].snapshot);
    assert.equal(events.filter((e) => e === 'task.captured').length, 1);
    // The command's result was on disk: recovery kept it, task result reads it.
    assert.equal(acted[0].result, 'inline');
    const res = xet(sb, r.dir, ['task', 'result', id]);
    expectExit(res, 0);
    assert.equal(res.stdout, 'out\n');
    assert.deepEqual(lines(append), ['ran']);
    assertCommits(r);
  }));

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return !fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
};

test('a reattached task keeps its frozen deadline: the supervisor ends a command that ignores SIGTERM, TASK_TIMED_OUT', async () =>
  withSandbox(async (sb) => {
    const { r, slot, append } = setup(sb);
    // The command ignores SIGTERM and has a child: the group is killed after the grace.
    const cmd = appendCmd(append, "; trap '' TERM; sleep 60 & sleep 60");
    killAt(sb, r.dir, ['task', 'run', '--timeout', '4s', '--json', '--', ...cmd], 'task:after-start');
    const id = onlyTask(slot);
    await waitFor('the command to start', () => lines(append).length === 1);
    const pid = row(slot, id).task.pid!;
    const [t] = json(sb, r.dir, ['task', 'recover', '--all']).tasks;
    assert.equal(t.classification, 'REATTACHED');
    await waitFor('the deadline to end the task', () => row(slot, id).task.status !== 'running', 40_000);
    const { task, events } = row(slot, id);
    assert.deepEqual([task.status, task.errorCode], ['interrupted', 'TASK_TIMED_OUT']);
    assert.ok(events.includes('task.timed_out'));
    assert.ok(!alive(pid), 'the command was ended');
    await waitFor('the guard to go', () => readGuardFile(slot).state === 'none');
    assert.deepEqual(lines(append), ['ran']);
    assertCommits(r);
  }));

test('a supervisor that dies is replaced by the next recovery; task cancel reaches the new one; nothing re-runs', async () =>
  withSandbox(async (sb) => {
    const { r, slot, append } = setup(sb);
    const cmd = appendCmd(append, '; sleep 60');
    killAt(sb, r.dir, ['task', 'run', '--json', '--', ...cmd], 'task:after-start');
    const id = onlyTask(slot);
    await waitFor('the command to start', () => lines(append).length === 1);
    assert.equal(json(sb, r.dir, ['task', 'recover', id]).tasks[0].classification, 'REATTACHED');
    const first = row(slot, id).task.runnerPid!;
    await waitFor('the supervisor to take the lease', () => {
      const g = readGuardFile(slot);
      return g.state === 'guard' && g.guard.runner.pid === first;
    });
    process.kill(first, 'SIGKILL');
    await waitFor('the supervisor to die', () => !alive(first));
    assertRefused(r, slot);
    const [again] = json(sb, r.dir, ['task', 'recover', '--all']).tasks;
    assert.equal(again.classification, 'REATTACHED');
    const second = row(slot, id).task.runnerPid!;
    assert.notEqual(second, first);
    await waitFor('the new supervisor to take the lease', () => {
      const g = readGuardFile(slot);
      return g.state === 'guard' && g.guard.runner.pid === second;
    });
    const cancel = json(sb, r.dir, ['task', 'cancel', id]);
    assert.equal(cancel.cancelRequested, true);
    await waitFor('the cancel to end the task', () => row(slot, id).task.status !== 'running');
    const { task, events } = row(slot, id);
    assert.deepEqual([task.status, task.errorCode], ['cancelled', 'TASK_CANCELLED']);
    assert.equal(events.filter((e) => e === 'task.reattached').length, 2);
    await waitFor('the guard to go', () => readGuardFile(slot).state === 'none');
    assert.deepEqual(lines(append), ['ran'], 'ran exactly once across two supervisors');
    assertCommits(r);
  }));

test('SIGKILL at task:after-guard of a task in a fork: git xet discard and export of it are refused until recover', () =>
  withSandbox((sb) => {
    const { r, append } = setup(sb);
    const snap = json(sb, r.dir, ['capture']).snapshot as string;
    const dir = sb.path('fork');
    killAt(
      sb,
      r.dir,
      ['task', 'run', '--fork', snap, '--mode', 'copy', '--dir', dir, '--json', '--', ...appendCmd(append)],
      'task:after-guard',
    );
    const gitDir = fs.realpathSync(git(sb, dir, ['rev-parse', '--absolute-git-dir']).trim());
    const slot = { id: workspaceId(gitDir), worktree: dir, gitDir, commonDir: fs.realpathSync(r.commonDir()) };
    const id = onlyTask(slot);
    for (const args of [
      ['discard', dir],
      ['export', dir, '--branch', 'from-task'],
    ]) {
      const refused = xet(sb, r.dir, [...args, '--json']);
      assert.equal(refused.status, 3, refused.stdout + refused.stderr);
      assert.equal(parseJson(refused).error.code, 'WORKDIR_RECOVERY_REQUIRED', args.join(' '));
    }
    const [t] = json(sb, r.dir, ['task', 'recover', '--all']).tasks;
    assert.deepEqual([t.task, t.classification, t.guardCleared], [id, 'NOT_RECOVERABLE', true]);
    json(sb, r.dir, ['discard', dir, '--no-capture']);
    assert.deepEqual(lines(append), []);
  }));

/** Start `task events <id> --follow --json`; resolves with its exit code and stdout lines. */
function follower(sb: Sandbox, cwd: string, id: string): Promise<{ code: number | null; lines: string[] }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [XET_BIN, 'task', 'events', id, '--follow', '--json'], { cwd, env: sb.env });
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
    const timer = setTimeout(() => c.kill('SIGKILL'), 40_000);
    c.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, lines: out.split('\n').filter(Boolean) });
    });
  });
}

async function detachedSleeper(sb: Sandbox, r: Repo, slot: Slot): Promise<{ id: string; runner: number; cmd: number }> {
  const run = xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--json', '--', 'sh', '-c', 'sleep 60']);
  expectExit(run, 0);
  const id = parseJson(run).task as string;
  await waitFor('the command to start', () => row(slot, id).task.status === 'running');
  const { task } = row(slot, id);
  return { id, runner: task.runnerPid!, cmd: task.pid! };
}

const killGroup = (pid: number) => {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // gone
  }
};

test('events --follow while the runner is SIGKILLed with its command: the follow reconciles and ends with task.interrupted', async () =>
  withSandbox(async (sb) => {
    const { r, slot } = setup(sb);
    const t = await detachedSleeper(sb, r, slot);
    try {
      const done = follower(sb, r.dir, t.id);
      await new Promise((res) => setTimeout(res, 1000));
      process.kill(t.runner, 'SIGKILL');
      killGroup(t.cmd);
      const f = await done;
      assert.equal(f.code, 0, f.lines.join('\n'));
      const types = f.lines.map((l) => JSON.parse(l).eventType);
      assert.ok(types.includes('task.interrupted'), types.join(' '));
      assert.equal(row(slot, t.id).task.status, 'interrupted');
    } finally {
      killGroup(t.cmd);
    }
  }));

test('events --follow while the runner is SIGKILLed and recovery can only say UNKNOWN: the follow ends, WORKDIR_RECOVERY_REQUIRED', async () =>
  withSandbox(async (sb) => {
    const { r, slot } = setup(sb);
    const t = await detachedSleeper(sb, r, slot);
    try {
      const done = follower(sb, r.dir, t.id);
      await new Promise((res) => setTimeout(res, 1000));
      // The command's start time lost from the row: its pid alone proves nothing, so UNKNOWN.
      const db = openSidecar(slot.commonDir);
      try {
        updateTask(db, t.id, { pidStart: null });
      } finally {
        db.close();
      }
      process.kill(t.runner, 'SIGKILL');
      const f = await done;
      assert.equal(f.code, 3, f.lines.join('\n'));
      const last = JSON.parse(f.lines[f.lines.length - 1]);
      assert.equal(last.error.code, 'WORKDIR_RECOVERY_REQUIRED');
      assert.equal(last.error.details.classification, 'UNKNOWN');
      const finished = f.lines
        .slice(0, -1)
        .map((l) => JSON.parse(l))
        .filter((e) => e.eventType === 'runtime.reconciliation_finished');
      assert.equal(finished.at(-1)?.payload.classification, 'UNKNOWN');
      assert.equal(row(slot, t.id).task.status, 'running', 'nothing changed');
    } finally {
      killGroup(t.cmd);
    }
  }));
