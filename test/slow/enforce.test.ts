// Task guards enforced on git xet's own writes (src/tasks/enforce.ts): a stale guard (its runner
// died) refuses discard, reclaim, export and fork --remount with WORKDIR_RECOVERY_REQUIRED and
// nothing changes; a live guard refuses them with WORKDIR_BUSY except from inside that task
// (XET_TASK_ID); an overlay fork under a stale guard is fenced read-only (EROFS). And the links
// from tasks: handoff create --task, export's Xet-Task trailer, a task's snapshots as gc roots.
// Real CLI, real mounts (skipped with the reason where this process may not mount); task rows are
// made through the task store.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { fenceSlot } from '../../src/tasks/enforce';
import { bootId, identify, type ProcessIdentity } from '../../src/tasks/proc';
import { GUARD_SCHEMA, publishGuard, removeGuard, tryAcquireLease, type Slot } from '../../src/tasks/slot';
import { workspaceId } from '../../src/sidecar/workspaces';
import { withSidecar } from '../../src/sidecar/db';
import { getTask, insertTask, taskExports, updateTask, type TaskPatch, type TaskRow } from '../../src/tasks/store';
import { Repo } from '../support/git';
import { withMountSandbox } from '../support/mounts';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { collectGitState, compareGitStates, compareTrees, walkTree } from '../support/state';
import { capture, expectError, expectExit, parseJson, xet } from '../support/xet';
import { FORK_STATE, fork, forks, richSource } from '../support/forks';
import { taskRow } from '../support/tasks';

function slotAt(r: Repo): Slot {
  const gitDir = fs.realpathSync(r.git('rev-parse', '--absolute-git-dir').trim());
  return { id: workspaceId(gitDir), worktree: r.dir, gitDir, commonDir: r.commonDir() };
}

/** The identity of a process that ran and is gone (a made-up start time on top, for good measure). */
function deadRunner(): ProcessIdentity {
  const r = spawnSync('true');
  assert.equal(r.status, 0);
  return { pid: r.pid as number, start: '1', boot: bootId() as string };
}

const newTaskId = () => crypto.randomBytes(8).toString('hex');

function writeGuard(slot: Slot, runner: ProcessIdentity, task = newTaskId()): string {
  publishGuard(slot, {
    schema: GUARD_SCHEMA,
    task,
    slot: slot.id,
    runner,
    command: null,
    createdAt: new Date().toISOString(),
  });
  return task;
}

/** Everything a refused command must leave as it was: the fork's files and git state, every ref of
 * the repository, the registry's forks. */
function stateOf(sb: Sandbox, src: Repo, f: string) {
  return {
    tree: walkTree(f),
    git: collectGitState(sb, f, FORK_STATE),
    refs: src.git('for-each-ref', '--format=%(refname) %(objectname)'),
    forks: JSON.stringify(forks(sb, src.dir, true)),
  };
}

function assertUnchanged(a: ReturnType<typeof stateOf>, b: ReturnType<typeof stateOf>, what: string): void {
  const diffs = [...compareTrees(a.tree, b.tree), ...compareGitStates(a.git, b.git)];
  assert.deepEqual(diffs, [], `${what} changed the fork:\n${diffs.join('\n')}`);
  assert.equal(b.refs, a.refs, `${what} changed refs`);
  assert.equal(b.forks, a.forks, `${what} changed the fork registry`);
}

test('guards: a stale guard on a fork refuses discard, reclaim and export with WORKDIR_RECOVERY_REQUIRED; nothing changes', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    fork(sb, src.dir, snap, f, ['--mode', 'copy']);
    const inFork = new Repo(sb, f);
    inFork.write('work.txt', 'the task wrote this\n');
    const task = writeGuard(slotAt(inFork), deadRunner());
    const before = stateOf(sb, src, f);
    for (const args of [
      ['discard', f],
      ['discard', f, '--no-capture'],
      ['reclaim', f, '--force'],
      ['export', f, '--branch', 'from-fork'],
      ['export', f, '--patch', sb.path('p.patch')],
    ]) {
      const e = expectError(xet(sb, src.dir, [...args, '--json']), 'WORKDIR_RECOVERY_REQUIRED');
      assert.equal(e.details.task, task, `${args.join(' ')}: the refusal names the task`);
      assert.match(e.message, /task recover/);
      assertUnchanged(before, stateOf(sb, src, f), args.join(' '));
    }
    assert.equal(fs.existsSync(sb.path('p.patch')), false);
    // reclaim --idle lists the fork as refused with the code, and leaves it.
    const r = xet(sb, src.dir, ['reclaim', '--idle', '0s', '--force', '--json']);
    expectExit(r, 0);
    const out = parseJson(r);
    assert.deepEqual(out.reclaimed, []);
    assert.deepEqual(
      out.refused.map((x: { dir: string; code: string }) => [x.dir, x.code]),
      [[f, 'WORKDIR_RECOVERY_REQUIRED']],
    );
    assertUnchanged(before, stateOf(sb, src, f), 'reclaim --idle');
    // Reading is allowed: changes, and a capture of the fork (what recovery keeps as evidence).
    expectExit(xet(sb, src.dir, ['changes', f, '--json']), 0);
    capture(sb, f);
  }));

test('guards: a stale guard on the main worktree refuses export --branch before its capture; capture and export --patch still work', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    fork(sb, src.dir, snap, f, ['--mode', 'copy']);
    new Repo(sb, f).write('work.txt', 'work\n');
    writeGuard(slotAt(src), deadRunner());
    const refs = src.git('for-each-ref', '--format=%(refname) %(objectname)');
    expectError(xet(sb, src.dir, ['export', f, '--branch', 'out', '--json']), 'WORKDIR_RECOVERY_REQUIRED');
    expectError(xet(sb, src.dir, ['export', snap, '--branch', 'out', '--json']), 'WORKDIR_RECOVERY_REQUIRED');
    assert.equal(src.git('for-each-ref', '--format=%(refname) %(objectname)'), refs, 'no branch, no snapshot');
    expectExit(xet(sb, src.dir, ['export', f, '--patch', sb.path('p.patch'), '--json']), 0);
    assert.ok(fs.statSync(sb.path('p.patch')).size > 0);
    capture(sb, src.dir);
  }));

test('guards: a live guard refuses with WORKDIR_BUSY, except a command run by that task (XET_TASK_ID)', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    fork(sb, src.dir, snap, f, ['--mode', 'copy']);
    const inFork = new Repo(sb, f);
    inFork.write('work.txt', 'work\n');
    const slot = slotAt(inFork);
    const lease = tryAcquireLease(slot);
    assert.ok(lease, 'the lease is free');
    try {
      const task = writeGuard(slot, identify(process.pid) as ProcessIdentity);
      const before = stateOf(sb, src, f);
      for (const args of [
        ['discard', f],
        ['reclaim', f, '--force'],
        ['export', f, '--patch', sb.path('p.patch')],
      ]) {
        const e = expectError(xet(sb, src.dir, [...args, '--json']), 'WORKDIR_BUSY');
        assert.equal(e.details.task, task);
        assertUnchanged(before, stateOf(sb, src, f), args.join(' '));
        // Another task's id is not that task.
        expectError(xet(sb, src.dir, [...args, '--json'], { env: { XET_TASK_ID: newTaskId() } }), 'WORKDIR_BUSY');
      }
      const inTask = { env: { XET_TASK_ID: task } };
      expectExit(xet(sb, src.dir, ['export', f, '--patch', sb.path('p.patch'), '--json'], inTask), 0);
      const r = xet(sb, src.dir, ['discard', f, '--json'], inTask);
      expectExit(r, 0);
      assert.equal(fs.existsSync(f), false, 'the task discarded its own fork');
    } finally {
      lease.release();
    }
  }));

/** An overlay fork, or the reason this process cannot make one. */
function overlayFork(sb: Sandbox, src: Repo, snap: string, f: string): string | null {
  const r = xet(sb, src.dir, ['fork', snap, f, '--mode', 'overlay', '--json']);
  if (r.status === 0) return null;
  const out = parseJson(r);
  if (out?.error?.code === 'FORK_MODE_UNAVAILABLE') return out.error.message as string;
  assert.fail(`fork --mode overlay failed: ${r.stdout}${r.stderr}`);
}

function writeFails(file: string): string | null {
  try {
    fs.writeFileSync(file, 'x');
    return null;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'error';
  }
}

test('guards: an overlay fork under a stale guard is fenced read-only (EROFS), mounted only read-only, and writable again after recovery', async () => {
  await withMountSandbox(async (sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('f');
    const why = overlayFork(sb, src, snap, f);
    if (why) {
      process.stdout.write(`# skipped: overlay forks are not possible here: ${why}\n`);
      return;
    }
    const inFork = new Repo(sb, f);
    const slot = slotAt(inFork);
    const task = writeGuard(slot, deadRunner());
    // fork --remount is a write: refused, nothing mounted or changed.
    const before = stateOf(sb, src, f);
    expectError(xet(sb, src.dir, ['fork', '--remount', f, '--json']), 'WORKDIR_RECOVERY_REQUIRED');
    assertUnchanged(before, stateOf(sb, src, f), 'fork --remount');
    assert.equal(writeFails(path.join(f, 'direct.txt')), null, 'not fenced yet: a direct write works');
    fs.rmSync(path.join(f, 'direct.txt'));

    // A file open for writing in the fork: the kernel refuses the remount, and the report says so.
    const fd = fs.openSync(path.join(f, 'open.txt'), 'w');
    try {
      const busy = await fenceSlot({ commonDir: src.commonDir() }, slot);
      assert.equal(busy.fenced, false);
      assert.match(busy.message, /^unfenced: mount -o remount,ro .* busy/);
    } finally {
      fs.closeSync(fd);
    }
    fs.rmSync(path.join(f, 'open.txt'));
    // A recovery fences while it holds the slot's lease (so nobody clears the guard in between):
    // under a lease the guard reads live, so the caller says it judged the guard stale itself.
    const held = tryAcquireLease(slot);
    assert.ok(held);
    try {
      assert.deepEqual(await fenceSlot({ commonDir: src.commonDir() }, slot), {
        fenced: false,
        message: 'unfenced: the slot has no stale guard',
      });
      const fence = await fenceSlot({ commonDir: src.commonDir() }, slot, { underOwnLease: true });
      assert.deepEqual(fence, { fenced: true, message: 'fenced: remounted read-only' });
    } finally {
      held.release();
    }
    assert.equal(writeFails(path.join(f, 'direct.txt')), 'EROFS', 'a process writing files directly is refused');
    // (HEAD, index and refs live in the worktree's admin dir, outside the mount: the hooks guard those.)
    assert.notEqual(inFork.gitTry('checkout', '--', 'a.txt').status, 0, 'nor can git write its files');
    // Recovery's evidence: a capture of the fenced fork works (capture only reads).
    capture(sb, f);
    assert.deepEqual(await fenceSlot({ commonDir: src.commonDir() }, slot), {
      fenced: true,
      message: 'fenced: mounted read-only',
    });

    // After a reboot (unmounted), git xet mounts it again only read-only while the guard stands.
    assert.equal(spawnSync('umount', [f]).status, 0);
    expectExit(xet(sb, src.dir, ['changes', f, '--json']), 0);
    assert.equal(writeFails(path.join(f, 'direct.txt')), 'EROFS', 'remounted read-only');

    // Recovery clears the guard: --remount makes it writable again.
    assert.equal(removeGuard(slot, task), true);
    const r = xet(sb, src.dir, ['fork', '--remount', f, '--json']);
    expectExit(r, 0);
    assert.deepEqual([parseJson(r).mounted, parseJson(r).unfenced], [false, true]);
    assert.equal(writeFails(path.join(f, 'direct.txt')), null, 'writable again');

    // A mounted, writable fork that gets a stale guard is fenced by the next git xet command that
    // mounts it for reading.
    writeGuard(slot, deadRunner());
    expectExit(xet(sb, src.dir, ['changes', f, '--json']), 0);
    assert.equal(writeFails(path.join(f, 'direct2.txt')), 'EROFS');
    // A worktree is a plain directory: not fenced, and the report says why.
    const main = slotAt(src);
    writeGuard(main, deadRunner());
    const plain = await fenceSlot({ commonDir: src.commonDir() }, main);
    assert.equal(plain.fenced, false);
    assert.match(plain.message, /^unfenced: not a fork/);
  });
});

/** A task row made through the store (as the runner makes it), then brought to `patch`. */
function makeTask(r: Repo, patch: TaskPatch & Partial<Pick<TaskRow, 'correlationId' | 'forkId'>> = {}): string {
  const id = newTaskId();
  const slot = slotAt(r);
  const manifestJson = JSON.stringify({ schema: 'xet.task/v1', taskId: id });
  const now = new Date().toISOString();
  const { correlationId, forkId, ...rest } = patch;
  const row: TaskRow = taskRow({
    id,
    createdAt: now,
    correlationId: correlationId ?? null,
    slot: slot.id,
    worktree: slot.worktree,
    gitDir: slot.gitDir,
    forkId: forkId ?? null,
    manifestJson,
  });
  withSidecar(r.commonDir(), (db) => {
    insertTask(db, row);
    if (Object.keys(rest).length) updateTask(db, id, rest);
  });
  return id;
}

const ended = (resultSnapshot: string | null, hoursAgo = 0): TaskPatch => ({
  status: 'succeeded',
  startedAt: new Date(Date.now() - hoursAgo * 3600_000 - 1000).toISOString(),
  endedAt: new Date(Date.now() - hoursAgo * 3600_000).toISOString(),
  exitCode: 0,
  resultSnapshot,
});

test('handoff create --task: the snapshot defaults to its result snapshot; the descriptor names the task and its correlation id', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const task = makeTask(src, { correlationId: 'run 7/α', ...ended(snap) });
    const base = ['--to', 'reviewer', '--from', 'agent', '--title', 'the work'];
    const r = xet(sb, src.dir, ['handoff', 'create', '--task', task.slice(0, 6), ...base, '--json']);
    expectExit(r, 0);
    const id = parseJson(r).id as string;
    const shown = xet(sb, src.dir, ['handoff', 'show', id, '--json']);
    expectExit(shown, 0);
    const d = parseJson(shown).descriptor;
    assert.deepEqual([d.snapshot.oid, d.task, d.correlationId], [snap, task, 'run 7/α']);
    const listed = xet(sb, src.dir, ['handoff', 'list', '--json']);
    expectExit(listed, 0);
    assert.equal(JSON.stringify(parseJson(listed)).includes(`"task":"${task}"`), true, 'handoff list shows the task');
    // The same correlation id is fine; another one is a contradiction.
    expectExit(
      xet(sb, src.dir, ['handoff', 'create', '--task', task, '--correlation-id', 'run 7/α', ...base, '--json']),
      0,
    );
    const refs = src.git('for-each-ref', '--format=%(refname)', 'refs/xet/handoffs/');
    const refusals: [string[], string][] = [
      [['--task', task, '--correlation-id', 'other'], 'USAGE'],
      [['--task', 'ffff0000'], 'TASK_NOT_FOUND'],
      [['--task', makeTask(src, { status: 'running' })], 'RESULT_NOT_AVAILABLE'],
    ];
    for (const [args, code] of refusals) {
      expectError(xet(sb, src.dir, ['handoff', 'create', ...args, ...base, '--json']), code, code === 'USAGE' ? 2 : 3);
    }
    fs.writeFileSync(sb.path('d.json'), '{}');
    const e = expectError(
      xet(sb, src.dir, ['handoff', 'create', '--task', task, '--descriptor', sb.path('d.json'), '--json']),
      'USAGE',
      2,
    );
    assert.match(e.message, /task/);
    assert.equal(src.git('for-each-ref', '--format=%(refname)', 'refs/xet/handoffs/'), refs, 'no handoff made');
    // A task still running, with the snapshot named: the descriptor names the task.
    const running = makeTask(src, { status: 'running', correlationId: 'c-2' });
    const r2 = xet(sb, src.dir, ['handoff', 'create', snap, '--task', running, ...base, '--json']);
    expectExit(r2, 0);
    const d2 = parseJson(xet(sb, src.dir, ['handoff', 'show', parseJson(r2).id, '--json'])).descriptor;
    assert.deepEqual([d2.task, d2.correlationId], [running, 'c-2']);
  }));

test("export: an Xet-Task trailer from --task, a task's result snapshot or a task's fork, linked to the task", () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const trailers = (commit: string) =>
      src.git('log', '-1', '--format=%(trailers:key=Xet-Task,valueonly)', commit).trim().split('\n').filter(Boolean);
    const exportsOf = (task: string) => withSidecar(src.commonDir(), (db) => taskExports(db, task));

    // A task's result snapshot.
    src.write('result.txt', 'the result\n');
    const result = capture(sb, src.dir);
    const t1 = makeTask(src, ended(result));
    const r1 = xet(sb, src.dir, ['export', result, '--branch', 'from-task', '--json']);
    expectExit(r1, 0);
    const o1 = parseJson(r1);
    assert.equal(o1.task, t1);
    assert.deepEqual(trailers(o1.commit), [t1]);
    assert.deepEqual(
      exportsOf(t1).map((x) => [x.commit, x.branch]),
      [[o1.commit, 'from-task']],
    );

    // A task's fork (task run --fork made it).
    const f = sb.path('f');
    const made = fork(sb, src.dir, snap, f, ['--mode', 'copy']);
    new Repo(sb, f).write('in-fork.txt', 'fork work\n');
    const t2 = makeTask(src, { forkId: made.id, ...ended(null) });
    const r2 = xet(sb, src.dir, ['export', f, '--patch', sb.path('f.patch'), '--json']);
    expectExit(r2, 0);
    const o2 = parseJson(r2);
    assert.equal(o2.task, t2);
    assert.match(fs.readFileSync(sb.path('f.patch'), 'utf8'), new RegExp(`^Xet-Task: ${t2}$`, 'm'));
    assert.deepEqual(
      exportsOf(t2).map((x) => [x.commit, x.branch]),
      [[o2.commit, null]],
    );

    // --task names it for a snapshot no task made; no task: no trailer.
    src.write('other.txt', 'other\n');
    const other = capture(sb, src.dir);
    const r3 = xet(sb, src.dir, ['export', other, '--branch', 'plain', '--json']);
    expectExit(r3, 0);
    assert.deepEqual([parseJson(r3).task, trailers(parseJson(r3).commit)], [null, []]);
    const r4 = xet(sb, src.dir, ['export', other, '--branch', 'named', '--task', t1.slice(0, 8), '--json']);
    expectExit(r4, 0);
    assert.deepEqual(trailers(parseJson(r4).commit), [t1]);
    assert.equal(exportsOf(t1).length, 2);
    // An unknown task: refused before anything is made.
    const refs = src.git('for-each-ref', '--format=%(refname) %(objectname)');
    expectError(
      xet(sb, src.dir, ['export', other, '--branch', 'nope', '--task', 'abcd1234', '--json']),
      'TASK_NOT_FOUND',
    );
    expectError(xet(sb, src.dir, ['export', f, '--branch', 'nope', '--task', 'abcd1234', '--json']), 'TASK_NOT_FOUND');
    assert.equal(src.git('for-each-ref', '--format=%(refname) %(objectname)'), refs);
  }));

test('gc roots: a task keeps its result snapshot (drop refuses SNAPSHOT_RETAINED naming the task) until gc collects the task', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const task = makeTask(src, ended(snap));
    const e = expectError(xet(sb, src.dir, ['drop', snap, '--json']), 'SNAPSHOT_RETAINED');
    assert.deepEqual(e.details.roots, [{ kind: 'task', name: task }]);
    const dry = xet(sb, src.dir, ['gc', '--dry-run', '--json']);
    expectExit(dry, 0);
    const plan = parseJson(dry);
    assert.deepEqual(plan.tasks, []);
    assert.deepEqual(
      plan.kept
        .find((k: { snapshot: string }) => k.snapshot === snap)
        .keepers.filter((k: { kind: string }) => k.kind === 'task'),
      [{ kind: 'task', name: task }],
    );
    // Past xet.task.retention (168 h by default): a dry run lists it and keeps it, gc collects it.
    withSidecar(src.commonDir(), (db) => updateTask(db, task, ended(snap, 200)));
    const dry2 = parseJson(xet(sb, src.dir, ['gc', '--dry-run', '--json']));
    assert.deepEqual(dry2.tasks, [task]);
    assert.ok(
      withSidecar(src.commonDir(), (db) => getTask(db, task)),
      'a dry run collects nothing',
    );
    const r = xet(sb, src.dir, ['gc', '--json']);
    expectExit(r, 0);
    assert.deepEqual(parseJson(r).tasks, [task]);
    assert.equal(
      withSidecar(src.commonDir(), (db) => getTask(db, task)),
      null,
    );
    expectExit(xet(sb, src.dir, ['drop', snap, '--json']), 0);
  }));

// Needs the task runner (task run --fork): the links are made from what the runner records alone.
test('task run --fork, then export of its fork and handoff create --task: the trailer and the descriptor name the task unasked', () =>
  withSandbox((sb) => {
    const src = richSource(sb);
    const snap = capture(sb, src.dir);
    const f = sb.path('task-fork');
    const run = xet(sb, src.dir, [
      'task',
      'run',
      '--fork',
      snap,
      '--mode',
      'copy',
      '--dir',
      f,
      '--correlation-id',
      'ticket-9',
      '--json',
      '--',
      'sh',
      '-c',
      'echo from the task > task.txt; echo done',
    ]);
    expectExit(run, 0);
    const { task, resultSnapshot } = parseJson(run) as { task: string; resultSnapshot: string };
    assert.match(resultSnapshot, /^[0-9a-f]{40}$/);
    const ex = xet(sb, src.dir, ['export', f, '--branch', 'task-work', '--json']);
    expectExit(ex, 0);
    const commit = parseJson(ex).commit as string;
    assert.match(src.git('log', '-1', '--format=%B', commit), new RegExp(`^Xet-Task: ${task}$`, 'm'));
    const h = xet(sb, src.dir, [
      'handoff',
      'create',
      '--task',
      task,
      '--to',
      'r',
      '--from',
      'a',
      '--title',
      't',
      '--json',
    ]);
    expectExit(h, 0);
    const d = parseJson(xet(sb, src.dir, ['handoff', 'show', parseJson(h).id, '--json'])).descriptor;
    assert.deepEqual([d.snapshot.oid, d.task, d.correlationId], [resultSnapshot, task, 'ticket-9']);
    assert.deepEqual(
      withSidecar(src.commonDir(), (db) => taskExports(db, task)).map((x) => [x.commit, x.branch]),
      [[commit, 'task-work']],
    );
  }));
