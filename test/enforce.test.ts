// Task guards enforced on git xet's own writes (src/tasks/enforce.ts): a stale guard (its runner
// died) refuses discard, reclaim, export and fork --remount with WORKDIR_RECOVERY_REQUIRED and
// nothing changes; a live guard refuses them with WORKDIR_BUSY except from inside that task
// (XET_TASK_ID); an overlay fork under a stale guard is fenced read-only (EROFS). Real CLI, real
// mounts (skipped with the reason where this process may not mount).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { fenceSlot } from '../src/tasks/enforce';
import { bootId, identify, type ProcessIdentity } from '../src/tasks/proc';
import { GUARD_SCHEMA, publishGuard, removeGuard, tryAcquireLease, type Slot } from '../src/tasks/slot';
import { workspaceId } from '../src/sidecar/workspaces';
import { Repo } from './support/git';
import { withMountSandbox } from './support/mounts';
import { withSandbox, type Sandbox } from './support/sandbox';
import { collectGitState, compareGitStates, compareTrees, walkTree } from './support/state';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';
import { FORK_STATE, fork, forks, richSource } from './support/forks';

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

    const fence = await fenceSlot({ commonDir: src.commonDir() }, slot);
    assert.deepEqual(fence, { fenced: true, message: 'fenced: remounted read-only' });
    assert.equal(writeFails(path.join(f, 'direct.txt')), 'EROFS', 'a process writing files directly is refused');
    // (HEAD, index and refs live in the worktree's admin dir, outside the mount: the hooks guard those.)
    assert.notEqual(inFork.gitTry('checkout', '--', 'a.txt').status, 0, 'nor can git write its files');
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
