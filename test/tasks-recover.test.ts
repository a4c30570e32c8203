// Reconciliation (src/tasks/recover.ts) driven by fabricated task rows and guards: no runner, real
// processes for the identities (a `sleep` we spawn is a live command; a reaped child is a dead one),
// the real CLI for `task recover`.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { openSidecar, type Db } from '../src/sidecar/db';
import { workspaceId } from '../src/sidecar/workspaces';
import { canonicalJson } from '../src/snapshot/canonical-json';
import { ensureTaskDir, taskFile } from '../src/tasks/paths';
import { bootId, identify, type ProcessIdentity } from '../src/tasks/proc';
import { continuationOf, reconcileAtStart } from '../src/tasks/recover';
import {
  GUARD_SCHEMA,
  assertSlotWritable,
  guardState,
  publishGuard,
  readGuardFile,
  tryAcquireLease,
  type Slot,
} from '../src/tasks/slot';
import { getTask, insertTask, listEvents, type TaskRow } from '../src/tasks/store';
import { codeOf } from './support/errors';
import { initRepo, Repo } from './support/git';
import { fork } from './support/forks';
import { withMountSandbox } from './support/mounts';
import { withSandbox, type Sandbox } from './support/sandbox';
import { XET_BIN, capture, expectError, expectExit, parseJson, xet } from './support/xet';
import { taskRow } from './support/tasks';

const hex16 = () => crypto.randomBytes(8).toString('hex');

/** An identity that names no running process: a child we reaped, with an impossible start. */
function deadIdentity(): ProcessIdentity {
  const r = spawnSync('true');
  return { pid: r.pid ?? 999_999, start: '0', boot: bootId()! };
}

const children: ChildProcess[] = [];
/** A live process with its real identity; `mark` puts it among a task's marked processes. */
async function liveProcess(mark?: string): Promise<ProcessIdentity> {
  const env = { ...process.env, ...(mark ? { XET_TASK_MARK: mark } : {}) };
  const child = spawn('sleep', ['30'], { stdio: 'ignore', env, detached: true });
  children.push(child);
  for (let i = 0; i < 100; i++) {
    const id = child.pid ? identify(child.pid) : null;
    // The environment is the one exec gave it once /proc/<pid>/environ shows the mark.
    if (id && (!mark || fs.readFileSync(`/proc/${child.pid}/environ`, 'latin1').includes(mark))) return id;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('sleep did not start');
}
function killAll(): void {
  for (const c of children.splice(0)) {
    try {
      process.kill(-c.pid!, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

function slotOf(r: Repo): Slot {
  const gitDir = fs.realpathSync(r.gitPath('.').replace(/\/\.$/, ''));
  return { id: workspaceId(gitDir), worktree: r.dir, gitDir, commonDir: fs.realpathSync(r.commonDir()) };
}

/** A repository with an overlay fork of its one snapshot, and the fork's slot. */
function overlayForkSlot(sb: Sandbox): { r: Repo; dir: string; slot: Slot } {
  const r = initRepo(sb, 'src');
  r.commit('c', { 'a.txt': 'a\n' });
  const snap = capture(sb, r.dir);
  const dir = sb.path('f');
  const out = fork(sb, r.dir, snap, dir, ['--mode', 'overlay']);
  assert.equal(out.mode, 'overlay');
  const gitDir = new Repo(sb, dir).git('rev-parse', '--absolute-git-dir').trim();
  return {
    r,
    dir,
    slot: { id: workspaceId(gitDir), worktree: dir, gitDir, commonDir: fs.realpathSync(r.commonDir()) },
  };
}

interface Fab {
  runner?: ProcessIdentity | null;
  command?: ProcessIdentity | null;
  status?: 'created' | 'running';
  sessionId?: string | null;
  guard?: boolean;
  exit?: number;
  mark?: string;
  mode?: TaskRow['mode'];
}

/** Insert a task row as a runner would have left it, with its guard and `exit` file. */
function fabricate(db: Db, slot: Slot, f: Fab = {}): TaskRow {
  const id = hex16();
  const runner = f.runner === undefined ? deadIdentity() : f.runner;
  const cmd = f.command ?? null;
  const manifestJson = canonicalJson({ schema: 'xet.task/v1', taskId: id, policy: { killGraceMs: 200 } });
  const row: TaskRow = taskRow({
    id,
    createdAt: new Date(Date.now() - 3600_000).toISOString(),
    startedAt: cmd ? new Date().toISOString() : null,
    status: f.status ?? (cmd ? 'running' : 'created'),
    command: 'sh',
    correlationId: 'corr-1',
    sessionId: f.sessionId ?? null,
    slot: slot.id,
    worktree: slot.worktree,
    gitDir: slot.gitDir,
    mode: f.mode ?? 'worktree',
    manifestJson,
    runnerPid: runner?.pid ?? null,
    runnerStart: runner?.start ?? null,
    pid: cmd?.pid ?? null,
    pidStart: cmd?.start ?? null,
    bootId: bootId(),
    mark: f.mark ?? hex16(),
  });
  insertTask(db, row);
  ensureTaskDir(slot.commonDir, id);
  if (f.exit !== undefined) fs.writeFileSync(taskFile(slot.commonDir, id, 'exit'), `${f.exit}\n`);
  if (f.guard !== false && runner) {
    publishGuard(slot, {
      schema: GUARD_SCHEMA,
      task: id,
      slot: slot.id,
      runner,
      command: cmd,
      createdAt: row.createdAt,
    });
  }
  return row;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function recover(sb: Sandbox, cwd: string, args: string[]): any {
  const r = xet(sb, cwd, ['task', 'recover', ...args, '--json']);
  expectExit(r, 0);
  return parseJson(r);
}

function setup(sb: Sandbox): { r: Repo; slot: Slot; db: Db } {
  const r = initRepo(sb, 'src');
  r.commit('c', { 'a.txt': 'a\n' });
  r.write('work.txt', 'what the task left\n');
  const slot = slotOf(r);
  return { r, slot, db: openSidecar(slot.commonDir) };
}

const types = (db: Db, id: string) => listEvents(db, id).map((e) => e.eventType);

test('a task whose runner died before the command started is NOT_RECOVERABLE: nothing ran, nothing captured', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const row = fabricate(db, slot, { guard: true });
      assert.equal(guardState(slot).state, 'stale');
      assert.equal(
        codeOf(() => assertSlotWritable(slot, 'test')),
        'WORKDIR_RECOVERY_REQUIRED',
      );
      const out = recover(sb, r.dir, [row.id.slice(0, 6)]);
      assert.deepEqual(
        out.tasks.map((t: Record<string, unknown>) => [t.task, t.classification, t.guardCleared, t.snapshot]),
        [[row.id, 'NOT_RECOVERABLE', true, null]],
      );
      const after = getTask(db, row.id)!;
      assert.deepEqual(
        [after.status, after.errorCode, after.recovery],
        ['interrupted', 'TASK_INTERRUPTED', 'NOT_RECOVERABLE'],
      );
      assert.equal(readGuardFile(slot).state, 'none');
      assertSlotWritable(slot, 'test');
      assert.deepEqual(types(db, row.id), [
        'task.created',
        'runtime.reconciliation_started',
        'runtime.reconciliation_finished',
        // The task's final event comes last: a follower that stops there has seen everything.
        'task.interrupted',
      ]);
      const fin = listEvents(db, row.id).find((e) => e.eventType === 'runtime.reconciliation_finished')!;
      assert.equal(fin.payload.classification, 'NOT_RECOVERABLE');
      assert.equal(fin.correlationId, 'corr-1');
      // Done once: a second recovery has nothing to do.
      assert.deepEqual(recover(sb, r.dir, ['--all']).tasks, []);
    } finally {
      db.close();
    }
  }));

test('a command that ended after its runner died: NOT_RECOVERABLE, exit status kept, workspace captured and linked', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const row = fabricate(db, slot, { command: deadIdentity(), exit: 7 });
      const [t] = recover(sb, r.dir, ['--all']).tasks;
      assert.equal(t.classification, 'NOT_RECOVERABLE');
      assert.equal(t.exitCode, 7);
      assert.equal(t.guardCleared, true);
      assert.match(t.snapshot, /^[0-9a-f]{40}$/);
      const after = getTask(db, row.id)!;
      assert.deepEqual(
        [after.status, after.errorCode, after.exitCode, after.resultSnapshot],
        ['interrupted', 'TASK_INTERRUPTED', 7, t.snapshot],
      );
      // The evidence holds what the task left in the worktree.
      const show = xet(sb, r.dir, ['show', t.snapshot, '--json']);
      expectExit(show, 0);
      assert.equal(parseJson(show).counts.untracked, 1);
      const interrupted = listEvents(db, row.id).find((e) => e.eventType === 'task.interrupted')!;
      assert.equal(interrupted.payload.exitCode, 7);
      assert.ok(types(db, row.id).includes('task.captured'));
      assert.equal(readGuardFile(slot).state, 'none');
    } finally {
      db.close();
    }
  }));

test('a declared session whose command is gone is SESSION_RESUMABLE; continuationOf gives it to task run --continue', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const resumable = fabricate(db, slot, { command: deadIdentity(), sessionId: 'sess-42' });
      // Before recovery the task has not ended: it cannot be continued beside itself.
      assert.equal(
        codeOf(() => continuationOf(db, resumable.id)),
        'TASK_NOT_RESUMABLE',
      );
      const [t] = recover(sb, r.dir, [resumable.id]).tasks;
      assert.equal(t.classification, 'SESSION_RESUMABLE');
      assert.equal(t.guardCleared, true);
      assert.equal(getTask(db, resumable.id)!.recovery, 'SESSION_RESUMABLE');
      assert.equal(getTask(db, resumable.id)!.status, 'interrupted');
      const c = continuationOf(db, resumable.id.slice(0, 8));
      assert.deepEqual(
        [c.sessionId, c.continuesTask, c.slot, c.worktree],
        ['sess-42', resumable.id, slot.id, slot.worktree],
      );
      // A task without a session cannot be continued, whatever became of it.
      const plain = fabricate(db, slot, { command: deadIdentity() });
      recover(sb, r.dir, [plain.id]);
      assert.equal(getTask(db, plain.id)!.recovery, 'NOT_RECOVERABLE');
      assert.equal(
        codeOf(() => continuationOf(db, plain.id)),
        'TASK_NOT_RESUMABLE',
      );
      assert.equal(
        codeOf(() => continuationOf(db, 'abcdabcdabcdabcd')),
        'TASK_NOT_FOUND',
      );
    } finally {
      db.close();
    }
  }));

test('a pid never recorded while processes carrying the mark run is UNKNOWN: the guard stays, the row stays, said once', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const mark = hex16();
      const marked = await liveProcess(mark);
      const row = fabricate(db, slot, { mark });
      const [t] = recover(sb, r.dir, ['--all']).tasks;
      assert.deepEqual([t.task, t.classification, t.guardCleared], [row.id, 'UNKNOWN', false]);
      assert.equal(getTask(db, row.id)!.status, 'created');
      assert.equal(guardState(slot).state, 'stale');
      assert.equal(
        codeOf(() => assertSlotWritable(slot, 'test')),
        'WORKDIR_RECOVERY_REQUIRED',
      );
      assert.ok(identify(marked.pid), 'the marked process was left alone');
      // The pass at the start of every task command does not repeat it.
      const before = listEvents(db, row.id).length;
      await reconcileAtStart({
        worktree: r.dir,
        gitDir: slot.gitDir,
        commonDir: slot.commonDir,
        objectsDir: path.join(slot.commonDir, 'objects'),
        objectFormat: 'sha1',
      });
      assert.equal(listEvents(db, row.id).length, before);
      // Once the marked process is gone, the task is NOT_RECOVERABLE and the guard goes.
      killAll();
      await new Promise((res) => setTimeout(res, 100));
      const [again] = recover(sb, r.dir, [row.id]).tasks;
      assert.deepEqual([again.classification, again.guardCleared], ['NOT_RECOVERABLE', true]);
    } finally {
      killAll();
      db.close();
    }
  }));

test('a task whose runner lives, or whose slot lease is held, is not touched', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const live = fabricate(db, slot, { runner: identify(process.pid)!, guard: false });
      const out = recover(sb, r.dir, [live.id]);
      assert.deepEqual(out.tasks, []);
      assert.equal(out.skipped[0].state, 'live');
      assert.equal(getTask(db, live.id)!.status, 'created');
      // A dead runner whose slot's lease someone holds: that someone's live work, not ours.
      const held = fabricate(db, slot, { command: deadIdentity(), guard: false });
      const lease = tryAcquireLease(slot)!;
      try {
        assert.deepEqual(recover(sb, r.dir, ['--all']).tasks, []);
        assert.equal(getTask(db, held.id)!.status, 'running');
        assert.deepEqual(types(db, held.id), ['task.created']);
      } finally {
        lease.release();
      }
      assert.deepEqual(
        recover(sb, r.dir, ['--all']).tasks.map((t: Record<string, unknown>) => t.task),
        [held.id],
      );
    } finally {
      db.close();
    }
  }));

test('stale guards whose task row is gone: cleared when the command they name is gone, kept while it runs', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      r.git('worktree', 'add', '-q', sb.path('wt2'));
      const wt2 = slotOf(new Repo(sb, sb.path('wt2')));
      const gone = hex16();
      publishGuard(slot, {
        schema: GUARD_SCHEMA,
        task: gone,
        slot: slot.id,
        runner: deadIdentity(),
        command: deadIdentity(),
        createdAt: new Date().toISOString(),
      });
      const orphan = hex16();
      const cmd = await liveProcess();
      publishGuard(wt2, {
        schema: GUARD_SCHEMA,
        task: orphan,
        slot: wt2.id,
        runner: deadIdentity(),
        command: cmd,
        createdAt: new Date().toISOString(),
      });
      const out = recover(sb, r.dir, ['--all']).tasks;
      const by = Object.fromEntries(out.map((t: Record<string, unknown>) => [t.task, t]));
      assert.equal(by[gone].classification, 'NOT_RECOVERABLE');
      assert.equal(by[gone].guardCleared, true);
      assert.match(by[gone].snapshot, /^[0-9a-f]{40}$/, 'captured as evidence');
      assert.equal(by[orphan].classification, 'UNKNOWN');
      assert.equal(readGuardFile(slot).state, 'none');
      assert.equal(readGuardFile(wt2).state, 'guard');
      assert.equal(
        codeOf(() => assertSlotWritable(wt2, 'test')),
        'WORKDIR_RECOVERY_REQUIRED',
      );
    } finally {
      killAll();
      db.close();
    }
  }));

test('two concurrent task recover --all: one of them captures, the other finds nothing left', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const row = fabricate(db, slot, { command: deadIdentity(), exit: 0 });
      const runOne = () =>
        new Promise<string>((resolve) => {
          const c = spawn(process.execPath, [XET_BIN, 'task', 'recover', '--all', '--json'], {
            cwd: r.dir,
            env: sb.env,
          });
          let out = '';
          c.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
          c.on('close', () => resolve(out));
        });
      const outs = (await Promise.all([runOne(), runOne()])).map((o) => JSON.parse(o).tasks as { task: string }[]);
      assert.deepEqual(outs.map((t) => t.length).sort(), [0, 1], `exactly one recovery acted: ${JSON.stringify(outs)}`);
      assert.equal(
        types(db, row.id).filter((t) => t === 'task.captured').length,
        1,
        JSON.stringify(listEvents(db, row.id)),
      );
      assert.equal(
        types(db, row.id).filter((t) => t === 'runtime.reconciliation_started').length,
        1,
        JSON.stringify(listEvents(db, row.id)),
      );
    } finally {
      db.close();
    }
  }));

test('the start pass spawns no git when nothing is stale', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      fabricate(db, slot, { runner: identify(process.pid)!, guard: false });
      const repo = {
        worktree: r.dir,
        gitDir: slot.gitDir,
        commonDir: slot.commonDir,
        objectsDir: path.join(slot.commonDir, 'objects'),
        objectFormat: 'sha1' as const,
      };
      const saved = process.env.PATH;
      process.env.PATH = sb.path('no-such-bin');
      try {
        const t0 = process.hrtime.bigint();
        await reconcileAtStart(repo);
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        assert.ok(ms < 200, `reconcileAtStart took ${ms} ms`);
      } finally {
        process.env.PATH = saved;
      }
    } finally {
      db.close();
    }
  }));

test(
  'an UNKNOWN task in an overlay fork: the guard stays and the fork is remounted read-only',
  { skip: process.getuid?.() !== 0 ? 'mounting needs root' : false },
  async () =>
    withMountSandbox(async (sb) => {
      const { r, dir, slot } = overlayForkSlot(sb);
      const db = openSidecar(slot.commonDir);
      try {
        const mark = hex16();
        await liveProcess(mark);
        const row = fabricate(db, slot, { mark, mode: 'overlay' });
        fs.writeFileSync(path.join(dir, 'before.txt'), 'writable\n');
        const [t] = recover(sb, r.dir, ['--all']).tasks;
        assert.deepEqual([t.task, t.classification, t.guardCleared], [row.id, 'UNKNOWN', false]);
        assert.match(t.fence, /^fenced/);
        assert.throws(() => fs.writeFileSync(path.join(dir, 'after.txt'), 'refused\n'), /EROFS/);
        assert.equal(readGuardFile(slot).state, 'guard');
      } finally {
        killAll();
        db.close();
      }
    }),
);

test('a row whose slot is not a worktree of this repository is UNKNOWN: no lease file is made there, nothing signalled', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const elsewhere = sb.path('elsewhere');
      fs.mkdirSync(elsewhere);
      const foreign: Slot = { ...slot, id: workspaceId(elsewhere), gitDir: elsewhere };
      const row = fabricate(db, foreign, { command: deadIdentity(), guard: false });
      const [t] = recover(sb, r.dir, [row.id]).tasks;
      assert.deepEqual([t.classification, t.guardCleared, t.snapshot], ['UNKNOWN', false, null]);
      assert.match(t.reason, /not a worktree of this repository/);
      assert.deepEqual(fs.readdirSync(elsewhere), []);
      assert.equal(getTask(db, row.id)!.status, 'running');
    } finally {
      db.close();
    }
  }));

test('a task that never started, in a slot another task now holds: only its row ends, the other task is left alone', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const never = fabricate(db, slot, { guard: false });
      // Another (live) task's guard and lease.
      const other = fabricate(db, slot, { runner: identify(process.pid)! });
      const lease = tryAcquireLease(slot)!;
      try {
        const [t] = recover(sb, r.dir, ['--all']).tasks;
        assert.deepEqual([t.task, t.classification, t.guardCleared], [never.id, 'NOT_RECOVERABLE', false]);
        assert.equal(getTask(db, never.id)!.status, 'interrupted');
        assert.equal(getTask(db, other.id)!.status, 'created');
        const g = readGuardFile(slot);
        assert.ok(g.state === 'guard' && g.guard.task === other.id, "the other task's guard stands");
      } finally {
        lease.release();
      }
    } finally {
      db.close();
    }
  }));

test('a command that ended after its runner died: its result on disk is kept (task result reads it); a refused one is recorded', () =>
  withSandbox((sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const row = fabricate(db, slot, { command: deadIdentity(), exit: 0 });
      fs.writeFileSync(taskFile(slot.commonDir, row.id, 'stdout'), 'out\n');
      const bad = fabricate(db, slot, { command: deadIdentity(), exit: 0, guard: false });
      fs.writeFileSync(taskFile(slot.commonDir, bad.id, 'stdout'), Buffer.from([0x6f, 0xff, 0x0a]));
      const by = Object.fromEntries(
        recover(sb, r.dir, ['--all']).tasks.map((t: Record<string, unknown>) => [t.task, t]),
      );
      assert.deepEqual(
        [by[row.id].classification, by[row.id].exitCode, by[row.id].result, by[row.id].resultRefused],
        ['NOT_RECOVERABLE', 0, 'inline', null],
      );
      const res = xet(sb, r.dir, ['task', 'result', row.id]);
      expectExit(res, 0);
      assert.equal(res.stdout, 'out\n');
      assert.equal(getTask(db, row.id)!.resultSha256, crypto.createHash('sha256').update('out\n').digest('hex'));
      const interrupted = listEvents(db, row.id).find((e) => e.eventType === 'task.interrupted')!;
      assert.equal(interrupted.payload.result, 'inline');
      // Not valid UTF-8: refused under the runner's rules, the refusal recorded, the task still ends.
      assert.deepEqual([by[bad.id].result, by[bad.id].resultRefused], [null, 'RESULT_NOT_UTF8']);
      assert.ok(types(db, bad.id).includes('task.result_refused'));
      assert.equal(getTask(db, bad.id)!.status, 'interrupted');
      expectError(xet(sb, r.dir, ['task', 'result', bad.id, '--json']), 'RESULT_NOT_AVAILABLE');
    } finally {
      db.close();
    }
  }));

test('a REATTACHED task: the recovery returns once the supervisor holds the lease, so task run right after reads WORKDIR_BUSY', async () =>
  withSandbox(async (sb) => {
    const { r, slot, db } = setup(sb);
    try {
      const mark = hex16();
      const cmd = await liveProcess(mark);
      const row = fabricate(db, slot, { command: cmd, mark });
      // The second task's own start pass reattaches the first; its slot check comes right after.
      const second = xet(sb, r.dir, ['task', 'run', '--json', '--', 'true']);
      expectError(second, 'WORKDIR_BUSY');
      const mid = getTask(db, row.id)!;
      assert.deepEqual([mid.recovery, mid.status], ['REATTACHED', 'running']);
      assert.equal(guardState(slot).state, 'live');
      assert.equal(
        codeOf(() => assertSlotWritable(slot, 'test')),
        'WORKDIR_BUSY',
      );
      killAll();
      const end = Date.now() + 30_000;
      while (!['succeeded', 'failed', 'interrupted'].includes(getTask(db, row.id)!.status)) {
        assert.ok(Date.now() < end, 'the supervisor finishes the task');
        await new Promise((res) => setTimeout(res, 100));
      }
      while (readGuardFile(slot).state !== 'none') {
        assert.ok(Date.now() < end, 'the supervisor removes the guard');
        await new Promise((res) => setTimeout(res, 100));
      }
    } finally {
      killAll();
      db.close();
    }
  }));

test(
  "a guard in an overlay fork whose row is gone while its command runs: UNKNOWN, fenced read-only under the recovery's lease",
  { skip: process.getuid?.() !== 0 ? 'mounting needs root' : false },
  async () =>
    withMountSandbox(async (sb) => {
      const { r, dir, slot } = overlayForkSlot(sb);
      try {
        const task = hex16();
        publishGuard(slot, {
          schema: GUARD_SCHEMA,
          task,
          slot: slot.id,
          runner: deadIdentity(),
          command: await liveProcess(),
          createdAt: new Date().toISOString(),
        });
        fs.writeFileSync(path.join(dir, 'before.txt'), 'writable\n');
        const [t] = recover(sb, r.dir, ['--all']).tasks;
        assert.deepEqual([t.task, t.classification, t.guardCleared], [task, 'UNKNOWN', false]);
        assert.match(t.fence, /^fenced/);
        assert.throws(() => fs.writeFileSync(path.join(dir, 'after.txt'), 'refused\n'), /EROFS/);
        assert.equal(readGuardFile(slot).state, 'guard');
      } finally {
        killAll();
      }
    }),
);
