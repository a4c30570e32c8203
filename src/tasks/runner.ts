// The task runner (docs/CLI.md "task run"): it creates a task with its immutable manifest, takes the
// slot's writer lease, publishes the guard, starts the command in its own process group through a
// wrapper shell that records the exit status, waits for the end, the deadline or a cancellation,
// ends every process of the task, keeps the result, captures the workspace, and clears the guard.
//
// The order of those steps is a contract with recovery (src/tasks/recover.ts), which reads what a
// dead runner left behind (ISSUE10 "The runner"): lease, then runner identity, then guard, then the
// command's identity, then status and guard removal. finishTask is exported because a supervisor
// that reattached to a live command (src/tasks/adopt.ts) ends it the same way.
//
// Core module: it never prints or exits. The command's output reaches the caller through a callback.

import { spawn, type ChildProcess } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { readConfig, type GitConfig } from '../git/config';
import { callerRepoEnv, gitText } from '../git/exec';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { parseDuration } from '../gc/duration';
import { ensureHooks, hooksIntact } from '../hooks/install';
import { openSidecar, sidecarDir, sidecarIoError, withExistingSidecar, withSidecar, type Db } from '../sidecar/db';
import { liveForkAt, liveForkByGitDir } from '../sidecar/forks';
import { dieAt } from '../testing/fault-points';
import type { RequestedMode } from '../workspace/fork';
import { buildManifest, commandName, taskConfig, validateCorrelationId } from './manifest';
import {
  CORRELATION_ID_MAX_BYTES,
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_TIMEOUT_MS,
  TASK_ENV,
  isTerminal,
  type SlotMode,
  type TaskStatus,
} from './model';
import { ensureTaskDir, taskDir, taskFile } from './paths';
import { bootId, endTaskProcesses, identify, liveness, startTicksOf, type ProcessIdentity } from './proc';
import { continuationOf, reconcileAtStart } from './recover';
import { readExitFile } from './exit-file';
import { storeResult, type ResultInfo } from './result';
import { collectTasks } from './retention';
import {
  GUARD_SCHEMA,
  assertSlotWritable,
  publishGuard,
  readGuardFile,
  removeGuard,
  slotOf,
  tryAcquireLease,
  type Guard,
  type Lease,
  type Slot,
} from './slot';
import { appendEvent, getTask, insertTask, newTaskRow, resolveTaskId, updateTask, type TaskRow } from './store';

/** The variable the wrapper shell writes the command's exit status to (the task dir's `exit`). */
export const EXIT_FILE_ENV = 'XET_TASK_EXIT';

/**
 * Runs the command, then publishes its exit status atomically (a temporary file renamed over `exit`)
 * and exits with it. A runner that died learns the status from that file; a wrapper that was
 * killed writes nothing, which is how "ended by us" is told from "ended by itself".
 */
export const WRAPPER =
  '"$@"; s=$?; printf "%s\\n" "$s" >"$XET_TASK_EXIT.tmp" && mv -f "$XET_TASK_EXIT.tmp" "$XET_TASK_EXIT"; exit $s';

/** Exit codes of `task run` besides the command's own status (docs/CLI.md). */
export const RUN_EXIT = { TIMED_OUT: 124, CANCELLED: 130 } as const;

/** How often a waiting runner looks for `task cancel`'s request. */
const CANCEL_POLL_MS = 250;
/** How often a running task checks that its worktree's guard hooks are still in place. */
const HOOKS_CHECK_MS = 1000;
/** How often an attached runner copies new output to the terminal. */
const FOLLOW_MS = 100;
/** Variables that select a repository: not given to a command that runs in another worktree. */
const REPO_ENV_KEYS = Object.keys(callerRepoEnv());

/** One connection for a run's many small reads and writes (opening one costs more than most of them). */
class SidecarSession {
  private db: Db | null = null;
  constructor(private readonly commonDir: string) {}
  use<T>(fn: (db: Db) => T): T {
    this.db ??= openSidecar(this.commonDir);
    try {
      return fn(this.db);
    } catch (e) {
      throw sidecarIoError(e, sidecarDir(this.commonDir));
    }
  }
  close(): void {
    this.db?.close();
    this.db = null;
  }
}

export interface RunRequest {
  cwd: string;
  argv: string[];
  /** Another worktree of this repository (`--in DIR`). */
  in?: string;
  /** A snapshot to fork (`--fork SNAPSHOT`), with its mode and directory. */
  fork?: string;
  mode?: RequestedMode;
  dir?: string;
  /** `--timeout` as the user typed it. */
  timeout?: string;
  correlationId?: string;
  sessionId?: string;
  /** `--continue TASK`: a new task in that task's slot, continuing its session. */
  continueTask?: string;
  detach?: boolean;
  capture?: boolean;
}

/** A created task, ready for runTask (here or in a detached runner). */
export interface PreparedTask {
  repo: Repo;
  slot: Slot;
  task: TaskRow;
  argv: string[];
  /** The slot is not the caller's repository: its GIT_DIR and friends must not reach the command. */
  foreignSlot: boolean;
  /** The config startTask read (a detached runner reads none: collection asks git itself). */
  config?: GitConfig;
  /** Why the guard hooks are not all in place (the task runs: git xet's own checks still refuse). */
  hooksWarning?: string | null;
}

export type TaskOutcome =
  | { kind: 'exited'; exitCode: number | null; exitSignal?: string | null }
  | { kind: 'timed_out' }
  | { kind: 'cancelled' };

export interface TaskContext {
  repo: Repo;
  slot: Slot;
  /** The row with the command's pid recorded (its process group). */
  task: TaskRow;
  /** Held by this process (null: the slot is gone, a supervisor holds nothing); released by finishTask. */
  lease: Lease | null;
  /** Frozen in the manifest (policy.killGraceMs); read from the row's manifest when absent. */
  killGraceMs?: number;
  /**
   * The command's exit once its processes were ended (timed out, cancelled). The runner knows its
   * child; without this, the wrapper's `exit` file says (null if it was killed before writing it).
   */
  exitStatus?: () => Promise<{ exitCode: number | null; exitSignal: string | null }>;
  /** The repository's config, if already read (spares the collection at the end a git process). */
  config?: GitConfig;
}

export interface TaskEnd {
  task: TaskRow;
  status: TaskStatus;
  errorCode: string | null;
  exitCode: number | null;
  exitSignal: string | null;
  resultSnapshot: string | null;
  result: ResultInfo | null;
  /** The result was refused (RESULT_TOO_LARGE, RESULT_NOT_UTF8): recorded, the capture stands. */
  resultRefusal: XetError | null;
  /** What made `task run` exit 3: the refusal, when it decided the task's status (failed). */
  error: XetError | null;
  /** Capture failed (recorded as task.capture_failed); the task's status stands. */
  captureError: XetError | null;
  /** Processes that outlived SIGKILL: the guard stays and the slot needs `task recover`. */
  survivors: number[];
  /** What `task run` exits with. */
  exit: number;
}

// ---------------------------------------------------------------------------------------------
// Validation (before any effect)

/** Correlation and session ids: opaque, 1 to 256 UTF-8 bytes, no ASCII control character. */
export function checkOpaqueId(value: string, what: string): string {
  // eslint-disable-next-line no-control-regex
  if (value === '' || /[\u0000-\u001f\u007f]/.test(value)) {
    throw new XetError('USAGE', `${what} must be non-empty and hold no control characters`, { what });
  }
  if (Buffer.byteLength(value, 'utf8') > CORRELATION_ID_MAX_BYTES || /\p{Cs}/u.test(value)) {
    throw new XetError('USAGE', `${what} must be valid UTF-8 of at most ${CORRELATION_ID_MAX_BYTES} bytes`, {
      what,
      bytes: Buffer.byteLength(value, 'utf8'),
    });
  }
  return value;
}

/** The longest --timeout: 100 years (the deadline must stay a time Date and the manifest can hold). */
export const TIMEOUT_MAX_SECONDS = 100 * 365 * 86400;

/** `--timeout`: a positive duration (30s, 10m, 2h, 1d); the deadline is frozen from it at creation. */
export function parseTimeout(text: string | undefined): number {
  if (text === undefined) return DEFAULT_TIMEOUT_MS;
  const s = parseDuration(text, 'timeout');
  if (!Number.isFinite(s) || s <= 0) {
    throw new XetError('USAGE', `--timeout must be a positive duration (30s, 10m, 2h), not ${JSON.stringify(text)}`, {
      value: text,
    });
  }
  if (s > TIMEOUT_MAX_SECONDS) {
    throw new XetError(
      'USAGE',
      `--timeout ${JSON.stringify(text)} is too long: a timeout is from 1s to 100y (${TIMEOUT_MAX_SECONDS}s)`,
      { value: text, maxSeconds: TIMEOUT_MAX_SECONDS },
    );
  }
  return s * 1000;
}

function checkArgv(argv: string[]): void {
  if (!argv.length || argv[0] === '')
    throw new XetError('USAGE', 'task run needs a command: task run -- COMMAND [ARG...]');
  if (argv.some((a) => a.includes('\0'))) throw new XetError('USAGE', 'a command argument holds a NUL byte');
  if (commandName(argv[0]) === '') {
    throw new XetError('USAGE', `${JSON.stringify(argv[0].slice(0, 64))} names no command`);
  }
}

// ---------------------------------------------------------------------------------------------
// 1-2: resolve the slot, validate, create the task

interface Continuation {
  sessionId: string;
  continuesTask: string;
  worktree: string;
}

/** The continuation `--continue` asks for (TASK_NOT_FOUND, TASK_NOT_RESUMABLE from recovery). */
function continuation(db: Db, id: string): Continuation {
  return continuationOf(db, id);
}

async function mainWorktree(repo: Repo): Promise<string> {
  const text = await gitText(['worktree', 'list', '--porcelain'], repoOpts(repo));
  const first = /^worktree (.+)$/m.exec(text);
  return first ? first[1] : repo.worktree;
}

function relativeCwd(worktree: string, dir: string): string {
  const rel = path.relative(fs.realpathSync(worktree), fs.realpathSync(dir));
  if (rel.startsWith('..') || path.isAbsolute(rel)) return '.';
  return rel === '' ? '.' : rel.split(path.sep).join('/');
}

/** Steps 1-2: everything checked, then the task row (status created) and its private directory. */
/** What a task adds besides its capture and its command's output: its row, events and files. */
const TASK_BOOKKEEPING = { bytes: 64 * 1024, files: 8 };

export async function startTask(req: RunRequest): Promise<PreparedTask> {
  checkArgv(req.argv);
  if (req.in !== undefined && req.fork !== undefined) throw new XetError('USAGE', '--in and --fork exclude each other');
  if (req.fork === undefined && (req.mode !== undefined || req.dir !== undefined)) {
    throw new XetError('USAGE', '--mode and --dir go with --fork');
  }
  if (req.continueTask !== undefined && (req.in !== undefined || req.fork !== undefined)) {
    throw new XetError('USAGE', "--continue runs in the continued task's workspace: no --in or --fork");
  }
  const correlationId = req.correlationId === undefined ? null : validateCorrelationId(req.correlationId);
  let sessionId = req.sessionId === undefined ? null : checkOpaqueId(req.sessionId, 'the session id');
  const timeoutMs = parseTimeout(req.timeout);

  const repo = await findRepo(req.cwd, true);
  await reconcileAtStart(repo);
  // One read of the config: retention now, and the manifest's policy below.
  const config = await readConfig(repoOpts(repo));
  collectTasks(repo, { config });

  const id = crypto.randomBytes(8).toString('hex');
  let continuesTask: string | null = null;
  let inDir = req.in === undefined ? undefined : path.resolve(req.cwd, req.in);
  if (req.continueTask !== undefined) {
    const spec = req.continueTask;
    const c = withSidecar(repo.commonDir, (db) => continuation(db, spec));
    if (sessionId !== null && sessionId !== c.sessionId) {
      throw new XetError('USAGE', `--session-id differs from the session of task ${c.continuesTask}`, {
        task: c.continuesTask,
      });
    }
    sessionId = c.sessionId;
    continuesTask = c.continuesTask;
    inDir = c.worktree;
  }

  let slotRepo = repo;
  let cwdRel = relativeCwd(repo.worktree, req.cwd);
  if (inDir !== undefined) {
    if (!fs.existsSync(inDir)) throw new XetError('USAGE', `--in ${inDir}: no such directory`, { dir: inDir });
    // An overlay fork whose mounts are gone (a reboot) is mounted again, its layer first, as every
    // other way into a fork does: unmounted, its dir is an empty directory outside any worktree.
    const at = fs.realpathSync(inDir);
    const fork = withExistingSidecar(repo.commonDir, (db) => liveForkAt(db, at));
    if (fork) await (await import('../workspace/fork')).ensureUsable(repo, fork);
    slotRepo = await findRepo(inDir);
    if (fs.realpathSync(slotRepo.commonDir) !== fs.realpathSync(repo.commonDir)) {
      throw new XetError('USAGE', `${inDir} is not a worktree of this repository`, { dir: inDir });
    }
    cwdRel = relativeCwd(slotRepo.worktree, inDir);
  }
  let forkDir: string | undefined;
  if (req.fork !== undefined) {
    const main = await mainWorktree(repo);
    forkDir =
      req.dir !== undefined
        ? path.resolve(req.cwd, req.dir)
        : path.join(path.dirname(main), `${path.basename(main)}.tasks`, id);
    cwdRel = '.';
  } else {
    assertSlotWritable(slotOf(slotRepo), 'task run');
  }
  // Read once, here: the manifest freezes them for the task's life.
  const { killGraceMs, retentionMs } = taskConfig(config);

  // A new task is growing work, refused before any effect once the repository root is into its
  // headroom; its capture at the end then settles. (A fork's own admission is createFork's.)
  const { admitRepository } = await import('../allowance/admit');
  (await admitRepository(repo, TASK_BOOKKEEPING, 'grow', 'task run', config)).end();

  // Effects from here on.
  let mode: SlotMode = 'worktree';
  let forkId: string | null = null;
  let baseSnapshot: string | null = null;
  if (req.fork !== undefined && forkDir !== undefined) {
    const { createFork } = await import('../workspace/fork');
    const f = await createFork({ cwd: req.cwd, snapshot: req.fork, dir: forkDir, mode: req.mode ?? 'auto' });
    slotRepo = await findRepo(f.dir);
    mode = f.mode;
    forkId = f.id;
    baseSnapshot = f.snapshot;
  } else {
    const f = withSidecar(repo.commonDir, (db) => liveForkByGitDir(db, slotRepo.gitDir));
    if (f) {
      mode = f.mode;
      forkId = f.id;
      baseSnapshot = f.snapshot;
    }
  }
  // The hooks of the slot's own worktree: with a relative core.hooksPath (husky's .husky/_) a fork
  // or a linked worktree has a hooks dir of its own. One git xet may not write (tracked, switched
  // off, shared) does not stop the task: its guard is still enforced by git xet itself, and the
  // task's events and output say so.
  const hooks = await ensureHooks(slotRepo);
  const hooksWarning =
    hooks.state === 'intact' || hooks.state === 'installed'
      ? null
      : `the guard hooks are ${hooks.state}: git commit in this worktree is not refused if its runner dies (${hooks.message ?? 'git xet hooks status says why'})`;
  const slot = slotOf(slotRepo);
  const createdAt = new Date().toISOString();
  const deadlineAt = new Date(Date.parse(createdAt) + timeoutMs).toISOString();
  const capture = req.capture !== false;
  const manifest = await buildManifest({
    taskId: id,
    createdAt,
    argv0: req.argv[0],
    sessionId,
    continuesTask,
    correlationId,
    workspace: { alias: forkId ?? path.basename(slot.worktree), slot: slot.id, cwd: cwdRel, mode },
    baseSnapshot,
    timeoutMs,
    policy: { capture, killGraceMs, retentionMs, hooks: true },
    runtimeCwd: path.resolve(slot.worktree, cwdRel),
    runtimeEnv: commandBaseEnv({ foreignSlot: slotRepo.gitDir !== repo.gitDir }),
    versionCacheDir: sidecarDir(repo.commonDir),
  });
  const task = newTaskRow({
    id,
    createdAt,
    command: manifest.manifest.runtime.command,
    correlationId,
    sessionId,
    continuesTask,
    slot: slot.id,
    worktree: slot.worktree,
    gitDir: slot.gitDir,
    mode,
    forkId,
    baseSnapshot,
    deadlineAt,
    detached: Boolean(req.detach),
    capture,
    manifestJson: manifest.json,
    manifestSha256: manifest.sha256,
    mark: crypto.randomBytes(8).toString('hex'),
  });
  withSidecar(repo.commonDir, (db) => {
    insertTask(db, task);
    if (hooksWarning) appendEvent(db, id, 'task.hooks_missing', { state: hooks.state });
  });
  ensureTaskDir(repo.commonDir, id);
  return {
    repo: slotRepo,
    slot,
    task,
    argv: req.argv,
    foreignSlot: slotRepo.gitDir !== repo.gitDir,
    config,
    hooksWarning,
  };
}

// ---------------------------------------------------------------------------------------------
// 3: a detached runner

/** The environment a command (and a detached runner) starts from. */
function commandBaseEnv(prep: Pick<PreparedTask, 'foreignSlot'>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  if (prep.foreignSlot) for (const k of REPO_ENV_KEYS) delete env[k];
  return env;
}

/**
 * Step 3 (--detach): a runner of its own (runner-main.js, a new session, nothing inherited but the
 * environment) does steps 4-8. Its identity is recorded at once, so a runner that dies before it
 * takes the lease is found by recovery, not taken for one still starting.
 */
export function detachTask(prep: PreparedTask): void {
  const log = fs.openSync(path.join(taskDir(prep.repo.commonDir, prep.task.id), 'runner.log'), 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(
      process.execPath,
      [path.join(__dirname, 'runner-main.js'), prep.repo.commonDir, prep.task.id, '--', ...prep.argv],
      { detached: true, stdio: ['ignore', 'ignore', log], cwd: prep.slot.worktree, env: commandBaseEnv(prep) },
    );
  } finally {
    fs.closeSync(log);
  }
  child.unref();
  const runner = child.pid ? identify(child.pid) : null;
  if (runner) {
    withSidecar(prep.repo.commonDir, (db) =>
      updateTask(db, prep.task.id, { runnerPid: runner.pid, runnerStart: runner.start, bootId: runner.boot }),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// 4-8: run

/** The context finishTask needs, from a task row and a lease this process holds. */
export function taskContext(repo: Repo, task: TaskRow, lease: Lease | null): TaskContext {
  let killGraceMs = DEFAULT_KILL_GRACE_MS;
  try {
    const g = (JSON.parse(task.manifestJson) as { policy?: { killGraceMs?: unknown } }).policy?.killGraceMs;
    if (typeof g === 'number' && Number.isFinite(g) && g >= 0) killGraceMs = g;
  } catch {
    // the manifest was checked when it was written; the default grace is the safe side
  }
  const slot: Slot = { id: task.slot, worktree: task.worktree, gitDir: task.gitDir, commonDir: repo.commonDir };
  return { repo, slot, task, lease, killGraceMs };
}

function failBeforeStart(sc: SidecarSession, id: string, e: XetError): XetError {
  sc.use((db) => {
    updateTask(db, id, { status: 'failed', errorCode: e.code, endedAt: new Date().toISOString() });
    appendEvent(db, id, 'task.failed', { errorCode: e.code });
  });
  return e;
}

/** Copies what is appended to a file to `emit`, from where it last stopped. */
function follower(file: string, emit: (b: Buffer) => void): () => void {
  let offset = 0;
  const buf = Buffer.alloc(65536);
  return () => {
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch {
      return;
    }
    try {
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, offset);
        if (n <= 0) break;
        offset += n;
        emit(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      fs.closeSync(fd);
    }
  };
}

export interface RunOptions {
  /** The command's output as it grows (attached, not --json). */
  onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void;
}

/** Steps 4-8 in this process: lease, guard, the command, waiting, finishTask. */
export async function runTask(prep: PreparedTask, opts: RunOptions = {}): Promise<TaskEnd> {
  const { repo, slot } = prep;
  const commonDir = repo.commonDir;
  const id = prep.task.id;
  // The runner acts on the slot alone from here (capture included): never on the caller's GIT_DIR.
  const env = commandBaseEnv(prep);
  if (prep.foreignSlot) for (const k of REPO_ENV_KEYS) delete process.env[k];

  const sc = new SidecarSession(commonDir);
  // 4: the writer lease.
  const lease = tryAcquireLease(slot);
  if (!lease) {
    throw failBeforeStart(
      sc,
      id,
      new XetError('WORKDIR_BUSY', `another task holds the writer lease of ${slot.worktree}`, {
        slot: slot.id,
        task: id,
      }),
    );
  }
  let guarded = false;
  /** finishTask owns the guard and the lease from then on. */
  let handedOver = false;
  const stopSignals = trapSignals();
  try {
    const runner = identify(process.pid) as ProcessIdentity;
    sc.use((db) => updateTask(db, id, { runnerPid: runner.pid, runnerStart: runner.start, bootId: runner.boot }));
    dieAt('task:after-lease');

    // 5: the guard. Any guard standing now is stale: its runner's lease was free.
    if (readGuardFile(slot).state !== 'none') {
      throw failBeforeStart(
        sc,
        id,
        new XetError(
          'WORKDIR_RECOVERY_REQUIRED',
          `a task runner died while it could write ${slot.worktree}; run git xet task recover`,
          { slot: slot.id, task: id },
        ),
      );
    }
    const guard: Guard = {
      schema: GUARD_SCHEMA,
      task: id,
      slot: slot.id,
      runner,
      command: null,
      createdAt: new Date().toISOString(),
    };
    publishGuard(slot, guard);
    guarded = true;
    dieAt('task:after-guard');

    const early = sc.use((db) => getTask(db, id));
    if (early?.cancelRequestedAt) {
      // Cancelled before it started: nothing to end, nothing ran.
      handedOver = true;
      return await finishTask({ ...taskContext(repo, early, lease) }, { kind: 'cancelled' });
    }

    // 6: the command, in its own process group, output to the task's files.
    const cwd = manifestCwd(prep.task, slot.worktree);
    const out = fs.openSync(taskFile(commonDir, id, 'stdout'), 'w', 0o600);
    const err = fs.openSync(taskFile(commonDir, id, 'stderr'), 'w', 0o600);
    let child: ChildProcess;
    try {
      child = spawn('/bin/sh', ['-c', WRAPPER, 'xet-task', ...prep.argv], {
        cwd,
        detached: true,
        stdio: ['ignore', out, err],
        env: { ...env, ...taskEnv(commonDir, prep.task) },
      });
    } finally {
      fs.closeSync(out);
      fs.closeSync(err);
    }
    const exited = new Promise<{ exitCode: number | null; exitSignal: string | null }>((resolve) => {
      child.once('exit', (code, sig) => resolve({ exitCode: code, exitSignal: sig }));
      child.once('error', () => resolve({ exitCode: null, exitSignal: null }));
    });
    const pid = child.pid;
    if (!pid) {
      throw failBeforeStart(sc, id, new XetError('USAGE', 'the task command could not be started', { task: id }));
    }
    handedOver = true;
    const pidStart = startTicksOf(pid);
    const startedAt = new Date().toISOString();
    sc.use((db) => {
      updateTask(db, id, { pid, pidStart, status: 'running', startedAt });
      appendEvent(db, id, 'task.started', {});
    });
    const boot = bootId();
    if (pidStart && boot) publishGuard(slot, { ...guard, command: { pid, start: pidStart, boot } });
    dieAt('task:after-start');
    const row: TaskRow = { ...prep.task, pid, pidStart, status: 'running', startedAt, runnerPid: runner.pid };

    // 7: wait.
    const follow = opts.onOutput
      ? [
          follower(taskFile(commonDir, id, 'stdout'), (b) => opts.onOutput?.('stdout', b)),
          follower(taskFile(commonDir, id, 'stderr'), (b) => opts.onOutput?.('stderr', b)),
        ]
      : [];
    const drain = () => follow.forEach((f) => f());
    const ticker = follow.length ? setInterval(drain, FOLLOW_MS) : null;
    try {
      const outcome = await waitFor(sc, row, exited, stopSignals.cancelled, repo);
      drain();
      const ctx: TaskContext = {
        ...taskContext(repo, row, lease),
        config: prep.config,
        exitStatus: () => withTimeout(exited, 5000, { exitCode: readExitFile(commonDir, id), exitSignal: null }),
      };
      return await finishTask(ctx, outcome);
    } finally {
      if (ticker) clearInterval(ticker);
      drain();
    }
  } catch (e) {
    // Nothing was started: no process can be writing the slot, so the guard goes (a started command
    // is finishTask's, which clears the guard itself or leaves it for recovery).
    if (!handedOver) {
      if (guarded) removeGuard(slot, id);
      // A failure of our own before the start (the task dir's files, the sidecar): the task ends
      // failed here rather than waiting for recovery to find a dead runner.
      try {
        sc.use((db) => {
          if (getTask(db, id)?.status !== 'created') return;
          const code = e instanceof XetError ? e.code : 'INTERNAL';
          updateTask(db, id, { status: 'failed', errorCode: code, endedAt: new Date().toISOString() });
          appendEvent(db, id, 'task.failed', { errorCode: code });
        });
      } catch {
        // the sidecar itself failed: recovery finds the task (its runner gone, nothing started)
      }
    }
    lease.release();
    throw e;
  } finally {
    stopSignals.stop();
    sc.close();
  }
}

function manifestCwd(task: TaskRow, worktree: string): string {
  let rel = '.';
  try {
    const c = (JSON.parse(task.manifestJson) as { workspace?: { cwd?: unknown } }).workspace?.cwd;
    if (typeof c === 'string') rel = c;
  } catch {
    // the manifest was checked when it was written
  }
  const dir = path.resolve(worktree, rel);
  // A cwd that left the worktree (it cannot: it is relative and checked) or is gone: the top.
  return dir.startsWith(worktree) && fs.existsSync(dir) ? dir : worktree;
}

/** The variables a task's command gets (docs/CLI.md "task run"). */
export function taskEnv(commonDir: string, task: TaskRow): Record<string, string> {
  const env: Record<string, string> = {
    [TASK_ENV.id]: task.id,
    [TASK_ENV.result]: taskFile(commonDir, task.id, 'result'),
    [TASK_ENV.mark]: task.mark,
    [EXIT_FILE_ENV]: taskFile(commonDir, task.id, 'exit'),
  };
  if (task.correlationId !== null) env[TASK_ENV.correlation] = task.correlationId;
  if (task.sessionId !== null) env[TASK_ENV.session] = task.sessionId;
  return env;
}

/** SIGTERM, SIGINT and SIGHUP to the runner cancel the task; further ones are ignored until it ends. */
function trapSignals(): { cancelled: Promise<void>; stop: () => void } {
  let fire: () => void = () => undefined;
  const cancelled = new Promise<void>((r) => (fire = r));
  const on = () => fire();
  const sigs: NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP'];
  for (const s of sigs) process.on(s, on);
  return { cancelled, stop: () => sigs.forEach((s) => process.off(s, on)) };
}

function withTimeout<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(fallback), ms);
    void p.then((v) => {
      clearTimeout(t);
      resolve(v);
    });
  });
}

/** Step 7: the first of the command's exit, the frozen deadline, a cancellation. */
async function waitFor(
  sc: SidecarSession,
  task: TaskRow,
  exited: Promise<{ exitCode: number | null; exitSignal: string | null }>,
  signalled: Promise<void>,
  repo: Repo,
): Promise<TaskOutcome> {
  const deadline = Date.parse(task.deadlineAt);
  const timers: NodeJS.Timeout[] = [];
  // The command may rewrite the hooks (a project's install step: husky's `prepare`, simple-git-hooks'
  // postinstall). Put the guard back while the runner lives, so it stands if the runner dies later.
  let checking = false;
  const keepHooks = async () => {
    if (checking) return;
    checking = true;
    try {
      if (!hooksIntact(repo).intact) {
        const r = await ensureHooks(repo);
        if (r.state === 'installed') sc.use((db) => appendEvent(db, task.id, 'task.hooks_restored', {}));
      }
    } catch {
      // a hooks dir being rewritten right now: the next tick looks again
    } finally {
      checking = false;
    }
  };
  timers.push(setInterval(() => void keepHooks(), HOOKS_CHECK_MS));
  try {
    return await Promise.race<TaskOutcome>([
      exited.then((e) => ({ kind: 'exited', ...e })),
      signalled.then(() => ({ kind: 'cancelled' })),
      new Promise<TaskOutcome>((resolve) => {
        // setTimeout holds 2^31-1 ms at most (24.8 days): a longer deadline is met by the poll.
        timers.push(
          setTimeout(() => resolve({ kind: 'timed_out' }), Math.min(Math.max(0, deadline - Date.now()), 2 ** 31 - 1)),
        );
        timers.push(
          setInterval(() => {
            if (Date.now() >= deadline) resolve({ kind: 'timed_out' });
            try {
              const t = sc.use((db) => getTask(db, task.id));
              if (t?.cancelRequestedAt) resolve({ kind: 'cancelled' });
            } catch {
              // a busy or briefly unreadable sidecar: the next poll asks again
            }
          }, CANCEL_POLL_MS),
        );
      }),
    ]);
  } finally {
    timers.forEach((t) => clearTimeout(t));
  }
}

function signalExit(sig: string | null): number | null {
  if (!sig) return null;
  const n = (os.constants.signals as Record<string, number>)[sig];
  return n ? 128 + n : null;
}

/**
 * Step 8: end every process of the task (group and marked descendants), keep the result, capture
 * the workspace, record the final status, clear the guard and release the lease.
 */
export async function finishTask(ctx: TaskContext, outcome: TaskOutcome): Promise<TaskEnd> {
  const { repo, slot, lease } = ctx;
  const commonDir = repo.commonDir;
  const id = ctx.task.id;
  let internal: unknown = null;
  const sc = new SidecarSession(commonDir);
  try {
    const grace = ctx.killGraceMs ?? taskContext(repo, ctx.task, lease).killGraceMs ?? DEFAULT_KILL_GRACE_MS;
    const ended = await endTaskProcesses(ctx.task.pid, ctx.task.mark, grace);
    dieAt('task:after-exit');
    const exit =
      outcome.kind === 'exited'
        ? { exitCode: outcome.exitCode, exitSignal: outcome.exitSignal ?? null }
        : ctx.exitStatus
          ? await ctx.exitStatus()
          : { exitCode: readExitFile(commonDir, id), exitSignal: null };

    // The result: a refusal is recorded (by storeResult) and makes the task failed, nothing more.
    let result: ResultInfo | null = null;
    let resultRefusal: XetError | null = null;
    // A command that never started (cancelled first) has no output to take a result from.
    if (ctx.task.pid !== null) {
      try {
        result = sc.use((db) => {
          const row = getTask(db, id);
          return row ? storeResult(db, commonDir, row) : null;
        });
      } catch (e) {
        if (e instanceof XetError) resultRefusal = e;
        else internal = e;
      }
    }
    let error: XetError | null = null;

    let resultSnapshot: string | null = null;
    let captureError: XetError | null = null;
    if (ctx.task.capture) {
      try {
        // Loaded here: capture's modules are most of a task's start-up otherwise.
        const { capture } = await import('../snapshot/capture');
        // An admitted task's capture settles: it may use the headroom.
        const c = await capture({ cwd: slot.worktree, message: `task ${id}`, always: true, admissionClass: 'settle' });
        resultSnapshot = c.snapshot;
        sc.use((db) => {
          updateTask(db, id, { resultSnapshot });
          appendEvent(db, id, 'task.captured', { snapshot: resultSnapshot });
        });
      } catch (e) {
        captureError = e instanceof XetError ? e : new XetError('GIT_FAILED', (e as Error).message);
        const code = captureError.code;
        sc.use((db) => appendEvent(db, id, 'task.capture_failed', { code }));
      }
    }

    let status: TaskStatus;
    let errorCode: string | null = null;
    let event: 'task.succeeded' | 'task.failed' | 'task.cancelled' | 'task.timed_out';
    let code: number;
    if (outcome.kind === 'timed_out') {
      [status, errorCode, event, code] = ['interrupted', 'TASK_TIMED_OUT', 'task.timed_out', RUN_EXIT.TIMED_OUT];
    } else if (outcome.kind === 'cancelled') {
      [status, errorCode, event, code] = ['cancelled', 'TASK_CANCELLED', 'task.cancelled', RUN_EXIT.CANCELLED];
    } else if (resultRefusal) {
      error = resultRefusal;
      [status, errorCode, event, code] = ['failed', resultRefusal.code, 'task.failed', 3];
    } else {
      code = exit.exitCode ?? signalExit(exit.exitSignal) ?? 1;
      [status, event] = code === 0 ? ['succeeded', 'task.succeeded'] : ['failed', 'task.failed'];
    }
    const endedAt = new Date().toISOString();
    const final = sc.use((db) => {
      updateTask(db, id, { status, errorCode, exitCode: exit.exitCode, exitSignal: exit.exitSignal, endedAt });
      appendEvent(db, id, event, {
        exitCode: exit.exitCode,
        exitSignal: exit.exitSignal,
        errorCode,
        resultSnapshot,
        terminated: ended.terminated,
        killed: ended.killed,
        survivors: ended.survivors.length,
      });
      return getTask(db, id) as TaskRow;
    });
    // A process that outlived SIGKILL may still write: the guard stays, the slot fails closed.
    if (!ended.survivors.length) removeGuard(slot, id);
    lease?.release();
    collectTasks(repo, { config: ctx.config });
    if (internal) throw internal;
    return {
      task: final,
      status,
      errorCode,
      exitCode: exit.exitCode,
      exitSignal: exit.exitSignal,
      resultSnapshot,
      result,
      resultRefusal,
      error,
      captureError,
      survivors: ended.survivors,
      exit: code,
    };
  } finally {
    lease?.release();
    sc.close();
  }
}

// ---------------------------------------------------------------------------------------------
// task cancel

export interface CancelResult {
  task: string;
  status: TaskStatus;
  /** False when the task had already ended. */
  cancelRequested: boolean;
  /** Whether its runner was alive and got SIGTERM (else `task recover` deals with it). */
  signalled: boolean;
}

/** Ask a task to stop: cancelRequestedAt (the runner polls it) and SIGTERM to a live runner. */
export async function cancelTask(cwd: string, spec: string): Promise<CancelResult> {
  const repo = await findRepo(cwd, true);
  await reconcileAtStart(repo);
  collectTasks(repo);
  const t = withSidecar(repo.commonDir, (db) => {
    const row = getTask(db, resolveTaskId(db, spec));
    if (!row) throw new XetError('TASK_NOT_FOUND', `no task ${spec}`, { task: spec });
    if (isTerminal(row.status)) return row;
    if (!row.cancelRequestedAt) {
      updateTask(db, row.id, { cancelRequestedAt: new Date().toISOString() });
      appendEvent(db, row.id, 'task.cancel_requested', {});
    }
    return row;
  });
  if (isTerminal(t.status)) return { task: t.id, status: t.status, cancelRequested: false, signalled: false };
  // Only the process named in this task's guard gets SIGTERM: it published the guard after it
  // trapped the signal. A runner still starting (recorded by detachTask at spawn, before node has
  // loaded anything) would die of it and be taken for a crash (interrupted, not cancelled); it reads
  // cancelRequestedAt before it starts the command instead.
  let signalled = false;
  const g = readGuardFile({ gitDir: t.gitDir });
  if (g.state === 'guard' && g.guard.task === t.id && liveness(g.guard.runner) === 'alive') {
    try {
      process.kill(g.guard.runner.pid, 'SIGTERM');
      signalled = true;
    } catch {
      // it ended just now
    }
  }
  return { task: t.id, status: t.status, cancelRequested: true, signalled };
}
