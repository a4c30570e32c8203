// Reconciliation of tasks whose runner died: REATTACHED, SESSION_RESUMABLE, NOT_RECOVERABLE or
// UNKNOWN (docs/CLI.md "task recover"). Nothing is ever re-run. OWNER: recovery helper.
//
// Who may act on a slot: whoever holds its writer lease. A recovery takes the lease before it
// touches a task or its guard, and re-reads the row under it; two `task recover` runs therefore
// never both capture or both reattach, and a slot whose lease is held is someone's live work.
//
// What decides, in order: the runner's identity (alive: not ours; unknown: UNKNOWN), the lease
// (held: not ours), then the command's identity (alive: REATTACHED; unknown: UNKNOWN; gone:
// SESSION_RESUMABLE with a declared session, else NOT_RECOVERABLE). A command whose pid was never
// recorded is gone only if no process carries the task's mark: the runner may have died between
// the spawn and the row update, and then the mark is all we know of it.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { gitText } from '../git/exec';
import type { Repo } from '../git/repo';
import { openSidecar, sidecarDir, type Db } from '../sidecar/db';
import { workspaceId } from '../sidecar/workspaces';
import { DEFAULT_KILL_GRACE_MS, isTerminal, type Recovery } from './model';
import { fenceSlot } from './enforce';
import { readExitFile } from './exit-file';
import { storeResult } from './result';
import { taskDir } from './paths';
import {
  bootId,
  endTaskProcesses,
  findMarked,
  identify,
  liveness,
  processGroupOf,
  type Liveness,
  type ProcessIdentity,
} from './proc';
import {
  GUARD_SCHEMA,
  publishGuard,
  readGuardFile,
  leaseHeld,
  removeGuard,
  tryAcquireLease,
  type Guard,
  type GuardFile,
  type Lease,
  type Slot,
} from './slot';
import { appendEvent, getTask, listTasks, resolveTaskId, updateTask, type TaskRow } from './store';
import { admitSettle } from '../allowance/settle';

export interface Reconciled {
  task: string;
  classification: Recovery;
  /** What was done: guard cleared, workspace captured (snapshot), supervision resumed. */
  guardCleared: boolean;
  snapshot: string | null;
  reason: string;
  /** The slot's worktree (absent for a task whose row is gone: then it is the guard's worktree). */
  worktree?: string;
  /** The command's exit status when its `exit` file was there (NOT_RECOVERABLE after it ended). */
  exitCode?: number | null;
  /** UNKNOWN with its guard standing: what the fence did (an overlay fork is made read-only). */
  fence?: string;
  /** The command had ended: how its result was kept (`task result` reads it), or why it was not. */
  result?: 'inline' | 'spool' | null;
  resultRefused?: string | null;
}

/** A task that needed nothing: its runner lives (or someone holds the slot), or it has ended. */
export interface Skipped {
  task: string;
  state: 'live' | 'ended';
  reason: string;
}

export interface ReconcileResult {
  tasks: Reconciled[];
  /** Only for an explicit `task recover <id>`: why that task needed nothing. */
  skipped?: Skipped[];
}

/**
 * A detached runner records its identity a moment after the row is inserted (spawn, then the
 * lease): a row without a runner is taken for a live start this long.
 */
const RUNNER_START_GRACE_MS = 60_000;

/** Reconcile one task, or every task (`all`) whose runner is gone. */
export async function reconcile(repo: Repo, opts: { task?: string; all?: boolean } = {}): Promise<ReconcileResult> {
  // Recovery is settling work: admitted into the headroom, and it recounts after a crash.
  const admission = await admitSettle(repo, 'task recover');
  try {
    return await run(repo, { ...opts, atStart: false });
  } finally {
    admission.end();
  }
}

/** The cheap pass every task command runs first: only tasks whose runner is gone are touched. */
export async function reconcileAtStart(repo: Repo): Promise<void> {
  await run(repo, { all: true, atStart: true });
}

interface RunOpts {
  task?: string;
  all?: boolean;
  /** The pass of every task command: no git process, no worktree scan, no repeated UNKNOWN events. */
  atStart: boolean;
}

async function run(repo: Repo, opts: RunOpts): Promise<ReconcileResult> {
  if (opts.task && opts.all) throw new XetError('USAGE', 'give a task or --all, not both');
  const tasks: Reconciled[] = [];
  const skipped: Skipped[] = [];
  const handled = new Set<string>();
  await withDb(repo, async (db) => {
    let rows: TaskRow[] = [];
    if (opts.task) {
      if (!db) throw new XetError('TASK_NOT_FOUND', `no task ${opts.task}`, { task: opts.task });
      const id = resolveTaskId(db, opts.task);
      const row = getTask(db, id);
      if (!row) throw new XetError('TASK_NOT_FOUND', `no task ${opts.task}`, { task: opts.task });
      rows = [row];
    } else if (db) {
      rows = listTasks(db, { status: ['created', 'running'] });
    }
    for (const row of rows) {
      handled.add(row.id);
      const r = await reconcileTask(repo, db, row, opts);
      // (A row whose slot is not ours is not fenced either: nothing is made or changed there.)
      if (r && 'classification' in r)
        tasks.push(rowProblem(repo, row) || r.fence !== undefined ? r : await fenced(repo, slotOfRow(repo, row), r));
      else if (r) skipped.push(r);
    }
    if (opts.task) {
      // The task has ended but its guard may still stand (its runner died after the final status).
      const row = rows[0];
      if (isTerminal(row.status)) {
        const slot = slotOfRow(repo, row);
        const gf = safeReadGuard(slot);
        if (gf.state === 'guard' && gf.guard.task === row.id) {
          const r = await reconcileGuard(repo, db, slot, opts);
          if (r && 'classification' in r) {
            tasks.push(r);
            skipped.length = 0;
          }
        }
      }
      return;
    }
    // Guards whose task is not a live row: the sidecar lost it, or the runner died after the final
    // status. At the start of a task command only this worktree's guard is looked at (one open).
    const slots = opts.atStart ? [slotOfRepo(repo)] : await worktreeSlots(repo);
    for (const slot of slots) {
      const gf = safeReadGuard(slot);
      if (gf.state === 'none') continue;
      if (gf.state === 'guard' && handled.has(gf.guard.task)) continue;
      const r = await reconcileGuard(repo, db, slot, opts);
      if (r && 'classification' in r) tasks.push(r.fence !== undefined ? r : await fenced(repo, slot, r));
    }
  });
  return opts.task ? { tasks, skipped } : { tasks };
}

/**
 * An UNKNOWN whose guard stands: fence the slot (overlay forks) and say how it went. `underLease`:
 * we hold the slot's lease (the guard reads live to anyone asking guardState, so the fence is told
 * it is stale by our judgement); without it, fenceSlot judges for itself.
 */
async function fenced(repo: Repo, slot: Slot, r: Reconciled, underLease = false): Promise<Reconciled> {
  if (r.classification !== 'UNKNOWN' || safeReadGuard(slot).state === 'none') return r;
  const message = await fence(repo, slot, underLease);
  return message ? { ...r, fence: message } : r;
}

/** fenced() for an outcome decided under the lease. */
async function fencedHeld(repo: Repo, slot: Slot, o: Outcome): Promise<Outcome> {
  return o && 'classification' in o ? fenced(repo, slot, o, true) : o;
}

/** Run `fn` with the sidecar; without one there are no task rows, but guards may still stand. */
async function withDb(repo: Repo, fn: (db: Db | null) => Promise<void>): Promise<void> {
  // A reader must not create a sidecar (withExistingSidecar's rule); this one stays open across awaits.
  if (!fs.existsSync(path.join(sidecarDir(repo.commonDir), 'xet.db'))) return fn(null);
  const db = openSidecar(repo.commonDir);
  try {
    await fn(db);
  } finally {
    db.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Slots

function slotOfRepo(repo: Repo): Slot {
  return { id: workspaceId(repo.gitDir), worktree: repo.worktree, gitDir: repo.gitDir, commonDir: repo.commonDir };
}

function slotOfRow(repo: Repo, row: Pick<TaskRow, 'slot' | 'worktree' | 'gitDir'>): Slot {
  return { id: row.slot, worktree: row.worktree, gitDir: row.gitDir, commonDir: repo.commonDir };
}

const MARK_RE = /^[0-9a-f]{16}$/;

/**
 * Why a row cannot be acted on, or null. The sidecar is read as hostile: before a lease file is
 * made in its git dir, a guard removed there, a directory captured or a process signalled, the git
 * dir must be this repository's (the common dir or one of its worktrees' admin dirs; the slot id
 * names no file), and the mark must be one (an empty mark would match every process whose mark is
 * empty).
 */
function rowProblem(repo: Repo, row: TaskRow): string | null {
  const admin = path.join(repo.commonDir, 'worktrees');
  const ours =
    row.gitDir === repo.commonDir || (path.dirname(row.gitDir) === admin && /^[^/]+$/.test(path.basename(row.gitDir)));
  if (!ours) return "the row's slot is not a worktree of this repository";
  if (!path.isAbsolute(row.worktree)) return "the row's worktree is not an absolute path";
  if (!MARK_RE.test(row.mark)) return "the row's process mark is not one git xet makes";
  return null;
}

/** Every worktree's slot: the main one and each `<common>/worktrees/<name>` (a linked worktree's
 * git dir is its admin dir, so its guard is found even when the worktree itself is not mounted). */
async function worktreeSlots(repo: Repo): Promise<Slot[]> {
  const slots: Slot[] = [];
  const porcelain = await gitText(['worktree', 'list', '--porcelain'], {
    cwd: repo.worktree,
    env: { GIT_DIR: repo.commonDir },
  });
  const first = /^worktree (.*)$/m.exec(porcelain);
  const bare = /^bare$/m.test(porcelain.split('\n\n')[0] ?? '');
  if (first && !bare)
    slots.push({
      id: workspaceId(repo.commonDir),
      worktree: first[1],
      gitDir: repo.commonDir,
      commonDir: repo.commonDir,
    });
  const admin = path.join(repo.commonDir, 'worktrees');
  let names: string[] = [];
  try {
    names = fs.readdirSync(admin);
  } catch {
    // no linked worktrees
  }
  for (const name of names.sort()) {
    const gitDir = path.join(admin, name);
    let worktree = gitDir;
    try {
      // `gitdir` names the worktree's .git file; a guard is all we need from a worktree that is gone.
      worktree = path.dirname(fs.readFileSync(path.join(gitDir, 'gitdir'), 'utf8').trim());
    } catch {
      // keep the admin dir as the name
    }
    slots.push({ id: workspaceId(gitDir), worktree, gitDir, commonDir: repo.commonDir });
  }
  return slots;
}

function safeReadGuard(slot: Slot): GuardFile {
  try {
    return readGuardFile(slot);
  } catch {
    // an unreadable guard file still fails the slot closed: malformed
    return { state: 'malformed', text: '' };
  }
}

/** The lease, or null when a live process holds it; 'gone' when the slot's git dir is gone. */
function takeLease(slot: Slot): Lease | null | 'gone' {
  if (!fs.existsSync(slot.gitDir)) return 'gone';
  return tryAcquireLease(slot);
}

// ---------------------------------------------------------------------------------------------
// Identities

function runnerOf(row: TaskRow): ProcessIdentity | null {
  if (row.runnerPid === null || !row.runnerStart || !row.bootId) return null;
  return { pid: row.runnerPid, start: row.runnerStart, boot: row.bootId };
}

function commandOf(row: TaskRow): ProcessIdentity | null {
  if (row.pid === null || !row.pidStart || !row.bootId) return null;
  return { pid: row.pid, start: row.pidStart, boot: row.bootId };
}

/** The runner's liveness; a row without a recorded runner counts as alive while it is young. */
function runnerLiveness(row: TaskRow, now = Date.now()): Liveness {
  const id = runnerOf(row);
  if (id) return liveness(id);
  if (row.runnerPid !== null) return 'unknown'; // a pid without its start time proves nothing
  return now - Date.parse(row.createdAt) < RUNNER_START_GRACE_MS ? 'alive' : 'gone';
}

/**
 * The group to signal for a command that is gone: its group id survives it only while members
 * remain, and a number that is free again may lead a stranger's group. So the group is signalled
 * only when one of its members carries the task's mark; otherwise the marked processes alone.
 */
function leftoverGroup(row: TaskRow): number | null {
  if (row.pid === null) return null;
  return findMarked(row.mark).some((p) => processGroupOf(p) === row.pid) ? row.pid : null;
}

function killGraceOf(row: TaskRow): number {
  try {
    const m = JSON.parse(row.manifestJson) as { policy?: { killGraceMs?: unknown } };
    const g = m.policy?.killGraceMs;
    if (typeof g === 'number' && Number.isFinite(g) && g >= 0 && g <= 600_000) return g;
  } catch {
    // a manifest that does not parse: the default grace
  }
  return DEFAULT_KILL_GRACE_MS;
}

// ---------------------------------------------------------------------------------------------
// One task row

type Outcome = Reconciled | Skipped | null;

async function reconcileTask(repo: Repo, db: Db | null, first: TaskRow, opts: RunOpts): Promise<Outcome> {
  if (!db) return null;
  if (isTerminal(first.status)) return { task: first.id, state: 'ended', reason: `the task ended (${first.status})` };
  const lv = runnerLiveness(first);
  if (lv === 'alive') {
    const why = runnerOf(first) ? 'its runner is alive' : 'its runner is starting (it has not recorded itself yet)';
    return { task: first.id, state: 'live', reason: why };
  }
  const slot = slotOfRow(repo, first);
  const problem = rowProblem(repo, first);
  if (problem) return unknown(repo, db, first, slot, opts, problem);
  if (lv === 'unknown') return unknown(repo, db, first, slot, opts, 'the runner cannot be proven alive or gone');
  const lease = takeLease(slot);
  if (lease === null) {
    // Someone writes the slot. If the guard there is this task's, that someone is a recovery or a
    // supervisor; if the task never started, the slot is another task's now and only the row ends.
    const gf = safeReadGuard(slot);
    const ours = gf.state === 'guard' && gf.guard.task === first.id;
    if (ours || first.pid !== null || findMarked(first.mark).length)
      return { task: first.id, state: 'live', reason: 'a live process holds the slot' };
    return await endNeverStarted(repo, db, first, slot, opts, false);
  }
  // Every return below awaits: the lease must outlive the work it covers (a returned promise would
  // let the finally release it first).
  const hand: Handover = {};
  const decide = async (): Promise<Outcome> => {
    // Under the lease: the row as it is now (a concurrent recovery may have finished it, or handed
    // it to a supervisor that is alive).
    const row = getTask(db, first.id);
    if (!row || isTerminal(row.status)) return { task: first.id, state: 'ended', reason: 'the task ended meanwhile' };
    const now = runnerLiveness(row);
    if (now === 'alive') return { task: row.id, state: 'live', reason: 'its runner is alive' };
    if (now === 'unknown') return await unknown(repo, db, row, slot, opts, 'the runner cannot be proven alive or gone');
    const cmd = commandOf(row);
    if (cmd) {
      const c = liveness(cmd);
      if (c === 'alive') return await reattach(repo, db, row, slot, cmd, lease === 'gone' ? null : lease, hand);
      if (c === 'unknown')
        return await unknown(repo, db, row, slot, opts, 'the command cannot be proven alive or gone');
      return await endGone(repo, db, row, slot, opts, lease !== 'gone');
    }
    if (row.pid !== null)
      return await unknown(repo, db, row, slot, opts, "the command's start time was never recorded");
    if (findMarked(row.mark).length)
      return await unknown(
        repo,
        db,
        row,
        slot,
        opts,
        "the command's pid was never recorded but processes carrying its mark run",
      );
    return await endNeverStarted(repo, db, row, slot, opts, lease !== 'gone');
  };
  try {
    // An UNKNOWN is fenced before the lease goes: nobody can clear or take the slot in between.
    return await fencedHeld(repo, slot, await decide());
  } finally {
    if (lease && lease !== 'gone') lease.release();
    // REATTACHED: return once the supervisor holds the lease, so that the caller's next slot check
    // (task run's own) reads WORKDIR_BUSY, not a guard whose lease nobody holds (stale).
    if (hand.guard) await awaitHandover(db, slot, first.id, hand.guard);
  }
}

/** What reattach published, for the hand-over of the lease to the supervisor. */
interface Handover {
  guard?: Guard;
}

/** How long a recovery waits for the supervisor it started to take the lease. */
const HANDOVER_WAIT_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Wait (bounded) until the supervisor named in `ours` holds the slot's lease: it republishes the
 * guard right after taking it, and holds it until the task's end. Ends early when the guard is no
 * longer the task's (the task ended), the supervisor is gone (the next recovery replaces it), or
 * the row has ended. A supervisor slower than the bound leaves the slot reading stale meanwhile,
 * which fails closed.
 */
async function awaitHandover(db: Db, slot: Slot, id: string, ours: Guard): Promise<void> {
  const sup = ours.runner;
  const until = Date.now() + HANDOVER_WAIT_MS;
  while (Date.now() < until) {
    const gf = safeReadGuard(slot);
    if (gf.state !== 'guard' || gf.guard.task !== id) return;
    const g = gf.guard;
    const named = g.runner.pid === sup.pid && g.runner.start === sup.start && g.runner.boot === sup.boot;
    if (!named) return; // someone else's now
    if (g.createdAt !== ours.createdAt || leaseHeld(slot)) return;
    if (liveness(sup) === 'gone') return;
    const row = getTask(db, id);
    if (!row || isTerminal(row.status)) return;
    await sleep(50);
  }
}

function started(db: Db, row: TaskRow, opts: RunOpts): void {
  appendEvent(db, row.id, 'runtime.reconciliation_started', {
    trigger: opts.atStart ? 'task-command' : 'task-recover',
  });
}

function finished(db: Db, row: TaskRow, r: Reconciled): void {
  appendEvent(db, row.id, 'runtime.reconciliation_finished', {
    classification: r.classification,
    reason: r.reason,
    guardCleared: r.guardCleared,
    snapshot: r.snapshot,
  });
}

/**
 * Ending a task's row: once, whoever else is looking (the transaction re-reads it), with its last
 * events in the same transaction: the task's final event (task.interrupted) comes last, so a
 * follower that stops at the final event has seen everything.
 */
function endRow(db: Db, id: string, patch: Parameters<typeof updateTask>[2], events: () => void): boolean {
  return db
    .transaction(() => {
      const cur = getTask(db, id);
      if (!cur || isTerminal(cur.status)) return false;
      updateTask(db, id, patch);
      events();
      return true;
    })
    .immediate();
}

/** UNKNOWN: nothing changes, the guard stays (an overlay fork is fenced: fencedHeld, fenced). */
async function unknown(
  _repo: Repo,
  db: Db,
  row: TaskRow,
  _slot: Slot,
  opts: RunOpts,
  reason: string,
  alreadyStarted = false,
): Promise<Outcome> {
  // Every task command runs the start pass: say UNKNOWN once, not at each of them.
  const repeat = opts.atStart && row.recovery === 'UNKNOWN';
  const r: Reconciled = {
    task: row.id,
    classification: 'UNKNOWN',
    guardCleared: false,
    snapshot: null,
    reason,
    worktree: row.worktree,
  };
  if (repeat) return r;
  if (!alreadyStarted) started(db, row, opts);
  updateTask(db, row.id, { recovery: 'UNKNOWN' });
  finished(db, row, r);
  return r;
}

/** The runner died before the command started (or before it recorded the start): nothing ran. */
async function endNeverStarted(
  repo: Repo,
  db: Db,
  row: TaskRow,
  slot: Slot,
  opts: RunOpts,
  mayClear: boolean,
): Promise<Outcome> {
  const exitCode = readExitFile(repo.commonDir, row.id);
  if (exitCode !== null) return endGone(repo, db, row, slot, opts, mayClear);
  started(db, row, opts);
  const cleared = mayClear && removeGuard(slot, row.id);
  const r: Reconciled = {
    task: row.id,
    classification: 'NOT_RECOVERABLE',
    guardCleared: cleared,
    snapshot: null,
    reason: 'the runner died before the command started: nothing ran, nothing to capture',
    worktree: row.worktree,
  };
  const ok = endRow(
    db,
    row.id,
    {
      status: 'interrupted',
      errorCode: 'TASK_INTERRUPTED',
      endedAt: new Date().toISOString(),
      recovery: 'NOT_RECOVERABLE',
    },
    () => {
      finished(db, row, r);
      appendEvent(db, row.id, 'task.interrupted', {
        classification: r.classification,
        reason: r.reason,
        started: false,
      });
    },
  );
  return ok ? r : { task: row.id, state: 'ended', reason: 'the task ended meanwhile' };
}

/** The command is gone: end what is left of it, mark the task interrupted, capture, clear the guard. */
async function endGone(repo: Repo, db: Db, row: TaskRow, slot: Slot, opts: RunOpts, mayClear = true): Promise<Outcome> {
  started(db, row, opts);
  const classification: Recovery = row.sessionId ? 'SESSION_RESUMABLE' : 'NOT_RECOVERABLE';
  const left = await endTaskProcesses(leftoverGroup(row), row.mark, killGraceOf(row));
  if (left.survivors.length) {
    // Processes of the task that outlive SIGKILL (uninterruptible sleep): they may still write.
    return unknown(repo, db, row, slot, { ...opts, atStart: false }, 'processes of the task survived SIGKILL', true);
  }
  const exitCode = readExitFile(repo.commonDir, row.id);
  // The `exit` file proves the command ended: its result is on disk, kept under the runner's rules.
  const kept = exitCode !== null ? keepResult(repo, db, row.id) : { storage: null, refused: null, note: '' };
  let snapshot: string | null = null;
  let captureNote = '';
  if (row.capture && mayClear) {
    const c = await captureEvidence(slot, row.id);
    snapshot = c.snapshot;
    if (c.snapshot) appendEvent(db, row.id, 'task.captured', { snapshot: c.snapshot, evidence: true });
    else {
      appendEvent(db, row.id, 'task.capture_failed', { code: c.code });
      captureNote = `; the capture failed (${c.code})`;
    }
  }
  const reason =
    (exitCode !== null
      ? `the runner died after the command ended (exit status ${exitCode})`
      : 'the runner died and the command is gone') +
    (classification === 'SESSION_RESUMABLE' ? '; its session may be continued with task run --continue' : '') +
    kept.note +
    captureNote;
  // The guard goes first: a recovery that dies after it leaves a row the next one ends again, never
  // a terminal task whose guard stands.
  const cleared = mayClear && removeGuard(slot, row.id);
  const r: Reconciled = {
    task: row.id,
    classification,
    guardCleared: cleared,
    snapshot,
    reason,
    worktree: row.worktree,
    exitCode,
    ...(exitCode !== null ? { result: kept.storage, resultRefused: kept.refused } : {}),
  };
  const ok = endRow(
    db,
    row.id,
    {
      status: 'interrupted',
      errorCode: 'TASK_INTERRUPTED',
      endedAt: new Date().toISOString(),
      recovery: classification,
      ...(exitCode !== null ? { exitCode } : {}),
      ...(snapshot ? { resultSnapshot: snapshot } : {}),
    },
    () => {
      finished(db, row, r);
      appendEvent(db, row.id, 'task.interrupted', {
        classification,
        reason,
        exitCode,
        terminated: left.terminated,
        killed: left.killed,
        result: kept.storage,
        resultRefused: kept.refused,
      });
    },
  );
  return ok ? r : { task: row.id, state: 'ended', reason: 'the task ended meanwhile' };
}

/**
 * Keep the result of a command that ended after its runner died, as the runner's finishTask would
 * have: storeResult's size and UTF-8 checks, its refusal recorded (task.result_refused), never
 * fatal to the recovery. A result the runner stored before it died is not stored twice.
 */
function keepResult(
  repo: Repo,
  db: Db,
  id: string,
): { storage: 'inline' | 'spool' | null; refused: string | null; note: string } {
  const row = getTask(db, id);
  if (!row) return { storage: null, refused: null, note: '' };
  if (row.resultStorage) return { storage: row.resultStorage, refused: null, note: '; its result was kept' };
  try {
    const info = storeResult(db, repo.commonDir, row);
    return { storage: info.storage, refused: null, note: '; its result was kept' };
  } catch (e) {
    const code = e instanceof XetError ? e.code : 'INTERNAL';
    return { storage: null, refused: code, note: `; its result was not kept (${code})` };
  }
}

async function captureEvidence(slot: Slot, id: string): Promise<{ snapshot: string | null; code: string }> {
  try {
    const { capture } = await import('../snapshot/capture');
    // `inner`: found from the worktree alone, never from the caller's GIT_DIR.
    const c = await capture({
      cwd: slot.worktree,
      message: `task ${id} interrupted`,
      inner: true,
      admissionClass: 'settle',
    });
    return { snapshot: c.snapshot, code: '' };
  } catch (e) {
    return { snapshot: null, code: e instanceof XetError ? e.code : 'INTERNAL' };
  }
}

/** The runner-main the adopted supervisor runs as (dist/tasks/runner-main.js). */
export function runnerMainPath(): string {
  return path.join(__dirname, 'runner-main.js');
}

/** REATTACHED: a detached supervisor takes over; the row and the guard name it before we let go. */
async function reattach(
  repo: Repo,
  db: Db,
  row: TaskRow,
  slot: Slot,
  cmd: ProcessIdentity,
  lease: Lease | null,
  hand: Handover = {},
): Promise<Outcome> {
  const main = runnerMainPath();
  if (!fs.existsSync(main))
    return unknown(repo, db, row, slot, { atStart: false }, 'the command runs but no supervisor can be started');
  started(db, row, { atStart: false });
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    // A supervisor is nobody's task and acts on the repository its arguments name.
    if (k.startsWith('XET_TASK_') || k === 'XET_SESSION_ID' || k === 'XET_CORRELATION_ID') continue;
    if (k === 'GIT_DIR' || k === 'GIT_WORK_TREE' || k === 'GIT_INDEX_FILE' || k === 'GIT_COMMON_DIR') continue;
    if (k.startsWith('GIT_XET_TEST_DIE_AT') || k.startsWith('GIT_XET_TEST_PAUSE')) continue;
    env[k] = v;
  }
  // Its stderr goes where a detached runner's goes (the task dir's runner.log): a failure that it
  // could not record in the row is still somewhere.
  let log: number | 'ignore' = 'ignore';
  try {
    log = fs.openSync(path.join(taskDir(repo.commonDir, row.id), 'runner.log'), 'a', 0o600);
  } catch {
    // no task dir: nothing to keep it in
  }
  let child;
  try {
    child = spawn(process.execPath, [main, repo.commonDir, row.id, '--adopt'], {
      detached: true,
      stdio: ['ignore', 'ignore', log],
      cwd: fs.existsSync(slot.worktree) ? slot.worktree : repo.commonDir,
      env,
    });
  } finally {
    if (typeof log === 'number') fs.closeSync(log);
  }
  child.unref();
  const sup = child.pid ? identify(child.pid) : null;
  if (!sup)
    return unknown(repo, db, row, slot, { atStart: false }, 'the command runs but the supervisor did not start');
  updateTask(db, row.id, { runnerPid: sup.pid, runnerStart: sup.start, recovery: 'REATTACHED' });
  if (lease) {
    const g: Guard = {
      schema: GUARD_SCHEMA,
      task: row.id,
      slot: slot.id,
      runner: sup,
      command: cmd,
      createdAt: new Date().toISOString(),
    };
    publishGuard(slot, g);
    hand.guard = g;
  }
  const r: Reconciled = {
    task: row.id,
    classification: 'REATTACHED',
    guardCleared: false,
    snapshot: null,
    reason: `the command still runs; supervisor ${sup.pid} follows it to its end`,
    worktree: row.worktree,
  };
  appendEvent(db, row.id, 'task.reattached', { classification: r.classification, supervisorPid: sup.pid });
  finished(db, row, r);
  return r;
}

/**
 * E's fence (an overlay fork remounted read-only while its stale guard stands). Under our own lease
 * the guard reads live to guardState: `underOwnLease` says it is stale by our judgement.
 */
async function fence(repo: Repo, slot: Slot, underOwnLease: boolean): Promise<string | null> {
  try {
    return (await fenceSlot(repo, slot, { underOwnLease })).message;
  } catch (e) {
    return `unfenced: ${e instanceof XetError ? e.code : 'INTERNAL'}`;
  }
}

// ---------------------------------------------------------------------------------------------
// A guard whose task is not a live row

async function reconcileGuard(repo: Repo, db: Db | null, slot: Slot, opts: RunOpts): Promise<Outcome> {
  const gf = safeReadGuard(slot);
  if (gf.state === 'none') return null;
  // A live runner's guard: not ours, and no reason to wait on its lease.
  if (gf.state === 'guard' && liveness(gf.guard.runner) === 'alive') return null;
  const lease = takeLease(slot);
  if (lease === null || lease === 'gone') return null; // live work, or nothing left to guard
  const decide = async (): Promise<Outcome> => {
    const now = safeReadGuard(slot);
    if (now.state === 'none') return null;
    if (now.state === 'malformed') {
      const r: Reconciled = {
        task: '',
        classification: 'UNKNOWN',
        guardCleared: false,
        snapshot: null,
        reason: 'the guard is not one git xet wrote: it stays (remove it by hand once nothing writes the worktree)',
        worktree: slot.worktree,
      };
      return r;
    }
    const g = now.guard;
    const row = db ? getTask(db, g.task) : null;
    if (row && !isTerminal(row.status)) return null; // the row pass decides
    const base = { task: g.task, snapshot: null, worktree: slot.worktree };
    const runner = liveness(g.runner);
    const cmd = g.command ? liveness(g.command) : 'gone';
    // A runner alive without the lease is a supervisor in the instant before it takes it.
    if (runner === 'alive') return null;
    const why =
      runner === 'unknown' || cmd === 'unknown'
        ? 'the processes the guard names cannot be proven alive or gone'
        : cmd === 'alive'
          ? row
            ? 'the task ended but the command the guard names still runs'
            : 'the command the guard names still runs and its task row is gone: nothing can supervise it'
          : null;
    if (why) {
      const r: Reconciled = { ...base, classification: 'UNKNOWN', guardCleared: false, reason: why };
      if (row && db && !(opts.atStart && row.recovery === 'UNKNOWN')) {
        started(db, row, opts);
        finished(db, row, r);
      }
      return r;
    }
    if (row && db) {
      started(db, row, opts);
      await endTaskProcesses(null, row.mark, killGraceOf(row));
      const cleared = removeGuard(slot, g.task);
      const r: Reconciled = {
        ...base,
        classification: row.recovery ?? 'NOT_RECOVERABLE',
        guardCleared: cleared,
        snapshot: row.resultSnapshot,
        reason: `the task had ended (${row.status}) but its runner died before it removed the guard`,
      };
      finished(db, row, r);
      return r;
    }
    // No row (the sidecar lost it): the guard's own identities are all there is.
    let snapshot: string | null = null;
    let note = '';
    if (g.command) {
      const c = await captureEvidence(slot, g.task);
      snapshot = c.snapshot;
      if (!snapshot) note = `; the capture failed (${c.code})`;
    }
    const cleared = removeGuard(slot, g.task);
    return {
      ...base,
      classification: 'NOT_RECOVERABLE',
      guardCleared: cleared,
      snapshot,
      reason:
        (g.command
          ? 'the task row is gone and so is the command the guard names'
          : 'the task row is gone and its command never started') + note,
    };
  };
  try {
    return await fencedHeld(repo, slot, await decide());
  } finally {
    lease.release();
  }
}

// ---------------------------------------------------------------------------------------------
// task run --continue

export interface Continuation {
  sessionId: string;
  continuesTask: string;
  /** The slot of the task continued: the new task runs there (B resolves the worktree). */
  slot: string;
  worktree: string;
  gitDir: string;
  mode: TaskRow['mode'];
  forkId: string | null;
}

/**
 * What `task run --continue <id>` continues: the task's declared session in its slot. The task
 * must have declared a session and must have ended (SESSION_RESUMABLE after recovery, or any
 * terminal state): a task still running, or UNKNOWN, cannot be continued beside itself.
 */
export function continuationOf(db: Db, id: string): Continuation {
  const full = resolveTaskId(db, id);
  const row = getTask(db, full);
  if (!row) throw new XetError('TASK_NOT_FOUND', `no task ${id}`, { task: id });
  if (!row.sessionId) {
    throw new XetError('TASK_NOT_RESUMABLE', `task ${row.id} declared no session id (task run --session-id)`, {
      task: row.id,
    });
  }
  if (!isTerminal(row.status)) {
    throw new XetError(
      'TASK_NOT_RESUMABLE',
      `task ${row.id} has not ended (${row.status}${row.recovery ? `, ${row.recovery}` : ''}); run git xet task recover ${row.id} first`,
      { task: row.id, status: row.status, recovery: row.recovery },
    );
  }
  return {
    sessionId: row.sessionId,
    continuesTask: row.id,
    slot: row.slot,
    worktree: row.worktree,
    gitDir: row.gitDir,
    mode: row.mode,
    forkId: row.forkId,
  };
}

/** This process's identity (a supervisor names itself in the guard and the row). */
export function selfIdentity(): ProcessIdentity | null {
  return bootId() ? identify(process.pid) : null;
}
