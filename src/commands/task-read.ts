// git xet task show, list, events (owner: task-store helper). Reads only: every one starts with the
// recovery pass and the retention pass that all task commands run, then reads the sidecar (and never
// creates one).
import { s } from './schema';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import type { Db } from '../sidecar/db';
import type { TaskEvent, TaskRow } from '../tasks/store';
import type { TaskStatus } from '../tasks/model';
import { emit, formatBytes, type Out } from '../cli/output';
import { defineCommand, type CommandContext } from './spec';

/** The events after which a task says nothing more (docs/FORMAT.md "Event envelope v1"). */
const FINAL_EVENTS = new Set(['task.succeeded', 'task.failed', 'task.cancelled', 'task.timed_out', 'task.interrupted']);
/** How often `events --follow` looks for new events. */
const FOLLOW_POLL_MS = 200;
/** A task found ended whose final event does not follow within this long: stop following anyway. */
const FINAL_EVENT_WAIT_MS = 2000;
/** How often `events --follow` checks that the task's runner is still alive. */
const RUNNER_CHECK_MS = 2000;

async function startTaskCommand(ctx: CommandContext): Promise<Repo> {
  const { findRepo } = await import('../git/repo');
  const repo = await findRepo(ctx.cwd, true);
  const { reconcileAtStart } = await import('../tasks/recover');
  await reconcileAtStart(repo);
  await collectUnlessReadOnlyTool(repo, ctx);
  return repo;
}

/** Task retention (deleting tasks past xet.task.retention) on the command line's reads, as ever;
 * not for an MCP tool, whose read tools are annotated read-only (recovery of a dead runner still
 * runs: it is crash recovery, which every command does). */
export async function collectUnlessReadOnlyTool(repo: Repo, ctx: CommandContext): Promise<void> {
  const { underMcp } = await import('../cli/output');
  if (ctx.via === 'mcp' || underMcp()) return;
  const { collectTasks } = await import('../tasks/retention');
  collectTasks(repo);
}

/** The sidecar if it exists (a read never creates one). */
export async function openExisting(repo: Repo): Promise<Db | null> {
  const fs = await import('node:fs');
  const path = await import('node:path');
  const { openSidecar, sidecarDir } = await import('../sidecar/db');
  if (!fs.existsSync(path.join(sidecarDir(repo.commonDir), 'xet.db'))) return null;
  return openSidecar(repo.commonDir);
}

async function withTask<T>(repo: Repo, spec: string, fn: (db: Db, id: string) => Promise<T> | T): Promise<T> {
  const db = await openExisting(repo);
  const { resolveTaskId } = await import('../tasks/store');
  if (!db) {
    resolveSpecSyntax(spec);
    throw new XetError('TASK_NOT_FOUND', `no task ${spec} in this repository`, { task: spec });
  }
  try {
    return await fn(db, resolveTaskId(db, spec));
  } finally {
    db.close();
  }
}

function resolveSpecSyntax(spec: string): void {
  if (!/^[0-9a-fA-F]{4,16}$/.test(spec.trim())) {
    throw new XetError('USAGE', `${JSON.stringify(spec)} is not a task id: give 4 to 16 hex digits`, { task: spec });
  }
}

/** A row as reads print it: everything but the manifest's text (printed parsed, beside it). */
function publicRow(row: TaskRow): Omit<TaskRow, 'manifestJson'> {
  const { manifestJson, ...rest } = row;
  void manifestJson;
  return rest;
}

const short = (oid: string | null): string => (oid ? oid.slice(0, 12) : '-');

function statusText(row: Omit<TaskRow, 'manifestJson'>): string {
  const bits: string[] = [row.status];
  if (row.errorCode) bits.push(row.errorCode);
  if (row.exitCode !== null) bits.push(`exit ${row.exitCode}`);
  if (row.exitSignal) bits.push(row.exitSignal);
  return bits.join(' ');
}

function eventLine(e: TaskEvent, canonical: (v: unknown) => string): string {
  const payload = Object.keys(e.payload).length ? `  ${canonical(e.payload)}` : '';
  return `${String(e.seq).padStart(4)}  ${e.createdAt}  ${e.eventType}${payload}`;
}

/** A count: a number from an MCP client, the flag's text from the command line. */
export const countInput = (description: string) => s.union([s.number(), s.string()]).optional().describe(description);

export function parseCount(value: string | number, what: string, min: number): number {
  const text = String(value);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) < min) {
    throw new XetError(
      'USAGE',
      `${what} must be a whole number${min > 0 ? ` of at least ${min}` : ''}, not ${JSON.stringify(text)}`,
      {
        value: text,
      },
    );
  }
  return Number(text);
}

async function parseStatuses(text: string | undefined): Promise<TaskStatus[] | undefined> {
  if (text === undefined) return undefined;
  const { TASK_STATUSES, TERMINAL_STATUSES } = await import('../tasks/model');
  const out = new Set<TaskStatus>();
  for (const s of text.split(',').map((x) => x.trim())) {
    if (s === 'terminal') TERMINAL_STATUSES.forEach((t) => out.add(t));
    else if (s === 'active') ['created', 'running'].forEach((t) => out.add(t as TaskStatus));
    else if ((TASK_STATUSES as readonly string[]).includes(s)) out.add(s as TaskStatus);
    else {
      throw new XetError(
        'USAGE',
        `--status ${JSON.stringify(s)} is not a task status: use ${TASK_STATUSES.join(', ')}, active or terminal (comma-separated)`,
        { value: s },
      );
    }
  }
  return [...out];
}

const taskArg = s.string().describe('task id (full or at least 4 hex digits)');

export const taskShowCommand = defineCommand({
  path: ['task', 'show'],
  tool: 'task_show',
  description: "a task: its row, its manifest and the manifest's sha256, provenance, result summary",
  input: { task: taskArg },
  args: ['task'],
  names: ['task'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    task: s.looseObject({ id: s.string(), status: s.string() }),
    manifest: s.looseObject({ schema: s.string() }),
    manifestSha256: s.string(),
    provenance: s.looseObject({
      baseSnapshot: s.string().nullable(),
      task: s.string(),
      resultSnapshot: s.string().nullable(),
      exports: s.array(s.looseObject({ commit: s.string(), branch: s.string().nullable() })),
    }),
    result: s.looseObject({}).nullable(),
    resultError: s.looseObject({ code: s.string(), message: s.string() }).optional(),
    origin: s.enum(['local', 'record']),
  }),
  async run(input, ctx) {
    const spec = input.task;
    // Bad input is refused before the recovery pass can change anything.
    resolveSpecSyntax(spec);
    const repo = await startTaskCommand(ctx);
    const { getTask, taskExports } = await import('../tasks/store');
    const { verifyStoredManifest } = await import('../tasks/manifest');
    try {
      return await showLocal();
    } catch (e) {
      if (!(e instanceof XetError) || e.code !== 'TASK_NOT_FOUND') throw e;
      // Not a task of this repository: the record of one handed over here (read as hostile).
      const { recordShow } = await import('../tasks/record');
      const shown = await recordShow(repo, spec);
      if (!shown) throw e;
      return shown;
    }
    function showLocal() {
      return withTask(repo, spec, async (db, id) => {
        const row = getTask(db, id) as TaskRow;
        const manifest = verifyStoredManifest(row);
        const exports = taskExports(db, id);
        let result: unknown;
        let resultError: { code: string; message: string } | undefined;
        try {
          const { resultSummary } = await import('../tasks/result');
          result = resultSummary(db, repo.commonDir, row);
        } catch (e) {
          // A result that cannot be read is said so; the task itself is still shown.
          if (e instanceof XetError) resultError = { code: e.code, message: e.message };
          result = null;
        }
        return {
          task: publicRow(row),
          manifest,
          manifestSha256: row.manifestSha256,
          provenance: {
            baseSnapshot: row.baseSnapshot,
            task: row.id,
            resultSnapshot: row.resultSnapshot,
            exports,
          },
          result,
          ...(resultError ? { resultError } : {}),
          origin: 'local' as const,
        };
      });
    }
  },
  human(value) {
    // Loaded only to print for a person (every command file is imported at start: its modules load lazily).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { displaySafe } = require('../handoff/descriptor') as typeof import('../handoff/descriptor');
    if (value.origin === 'record') return recordText(value);
    const t = value.task;
    const r = value.result as { storage: string; sizeBytes: number; sha256: string; truncated: boolean } | null;
    const chain = [
      value.provenance.baseSnapshot ? `snapshot ${short(value.provenance.baseSnapshot)}` : '(no base snapshot)',
      `task ${t.id}`,
      value.provenance.resultSnapshot ? `snapshot ${short(value.provenance.resultSnapshot)}` : '(not captured)',
      ...value.provenance.exports.map((e) => `commit ${short(e.commit)}${e.branch ? ` (${e.branch})` : ''}`),
    ].join(' -> ');
    return [
      `task ${t.id}  ${statusText(t)}`,
      `command      ${displaySafe(t.command)}`,
      `created      ${t.createdAt}`,
      `started      ${t.startedAt ?? '-'}`,
      `ended        ${t.endedAt ?? '-'}`,
      `deadline     ${t.deadlineAt}`,
      `workspace    ${t.worktree} (${t.mode}, slot ${t.slot.slice(0, 12)})`,
      ...(t.correlationId !== null ? [`correlation  ${displaySafe(JSON.stringify(t.correlationId))}`] : []),
      ...(t.sessionId !== null ? [`session      ${displaySafe(JSON.stringify(t.sessionId))}`] : []),
      ...(t.continuesTask ? [`continues    ${t.continuesTask}`] : []),
      ...(t.recovery ? [`recovery     ${t.recovery}`] : []),
      `manifest     ${value.manifest.schema} sha256 ${value.manifestSha256}`,
      `provenance   ${chain}`,
      r
        ? `result       ${r.storage}, ${formatBytes(r.sizeBytes)}, sha256 ${r.sha256}${r.truncated ? ' (preview truncated; git xet task result reads it all)' : ''}`
        : `result       ${value.resultError ? `${value.resultError.message} [${value.resultError.code}]` : 'none'}`,
    ].join('\n');
  },
});

/** `task show` of a task known here only by its record (refs/xet/tasks/<id>). */
function recordText(value: {
  task: { id: string; status: string };
  manifest: { schema: string };
  manifestSha256: string;
  provenance: { resultSnapshot: string | null };
  result: unknown;
}): string {
  const t = value.task as { id: string; status: string; exitCode: number | null; createdAt: string; endedAt: string };
  const r = value.result as { sizeBytes: number; sha256: string } | null;
  return [
    `task ${t.id}  ${t.status}${t.exitCode !== null ? ` (exit ${t.exitCode})` : ''}  (from its task record; it ran elsewhere)`,
    `created      ${t.createdAt}`,
    `ended        ${t.endedAt}`,
    `manifest     ${value.manifest.schema} sha256 ${value.manifestSha256}`,
    `snapshot     ${value.provenance.resultSnapshot ?? '(not captured)'}`,
    r ? `result       record, ${formatBytes(r.sizeBytes)}, sha256 ${r.sha256}` : 'result       none',
  ].join('\n');
}

export const taskListCommand = defineCommand({
  path: ['task', 'list'],
  tool: 'task_list',
  description: 'tasks, newest first: id, status, command, when, workspace',
  input: {
    status: s
      .string()
      .optional()
      .describe(
        'only these: created, running, succeeded, failed, cancelled, interrupted, active, terminal (comma-separated)',
      ),
    limit: countInput('at most this many (default 50)'),
  },
  flags: { status: { value: '<statuses>' }, limit: { value: '<n>' } },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({ tasks: s.array(s.looseObject({ id: s.string(), status: s.string() })) }),
  async run(input, ctx) {
    const status = await parseStatuses(input.status);
    const limit = input.limit === undefined ? 50 : parseCount(input.limit, '--limit', 1);
    const repo = await startTaskCommand(ctx);
    const { listTasks } = await import('../tasks/store');
    const db = await openExisting(repo);
    let rows: TaskRow[] = [];
    try {
      if (db) rows = listTasks(db, { status, limit });
    } finally {
      db?.close();
    }
    return { tasks: rows.map(publicRow) };
  },
  human({ tasks }) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { displaySafe } = require('../handoff/descriptor') as typeof import('../handoff/descriptor');
    return tasks.length
      ? tasks
          .map(
            (t) =>
              `${t.id}  ${statusText(t).padEnd(24)} ${t.createdAt}  ${displaySafe(t.command)}  ${t.worktree}${
                t.correlationId !== null ? `  [${displaySafe(JSON.stringify(t.correlationId))}]` : ''
              }`,
          )
          .join('\n')
      : 'no tasks';
  },
});

/** How long `task_events` with `follow` waits through MCP for an event after `after` (a call
 * cannot stream: it answers with what came, or nothing new, within this long). */
const MCP_FOLLOW_WAIT_MS = 30_000;

export const taskEventsCommand = defineCommand({
  path: ['task', 'events'],
  tool: 'task_events',
  description: "a task's events (envelope v1), in order; --follow waits for more until the task ends",
  input: {
    task: taskArg,
    after: countInput('only events after this sequence number'),
    follow: s
      .boolean()
      .optional()
      .describe('keep printing events as they come until the task has ended (with --json: one JSON envelope a line)'),
  },
  args: ['task'],
  flags: { after: { value: '<seq>' } },
  names: ['task'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    events: s.array(s.looseObject({ seq: s.number(), eventType: s.string(), createdAt: s.string() })),
  }),
  // Without follow: the events after `after`. Through MCP with follow: the same, once there is at
  // least one or the task has ended, waiting at most MCP_FOLLOW_WAIT_MS.
  async run(input, ctx) {
    const after = input.after === undefined ? 0 : parseCount(input.after, '--after', 0);
    resolveSpecSyntax(input.task);
    const repo = await startTaskCommand(ctx);
    const { getTask, listEvents } = await import('../tasks/store');
    const { isTerminal } = await import('../tasks/model');
    return withTask(repo, input.task, async (db, id) => {
      const until = Date.now() + (input.follow ? MCP_FOLLOW_WAIT_MS : 0);
      for (;;) {
        const row = getTask(db, id);
        const events = listEvents(db, id, after);
        if (events.length || !row || isTerminal(row.status) || Date.now() >= until) return { events };
        await pause(FOLLOW_POLL_MS, ctx.signal);
      }
    });
  },
  human: ({ events }) => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { canonicalJson } = require('../snapshot/canonical-json') as typeof import('../snapshot/canonical-json');
    return events.length ? events.map((e) => eventLine(e, canonicalJson)).join('\n') : 'no events';
  },
  async cliAction(input, ctx, out) {
    if (!input.follow) {
      const r = await taskEventsCommand.run(input, ctx);
      emit(out, r, () => taskEventsCommand.human!(r, ctx, input));
      return;
    }
    const after = input.after === undefined ? 0 : parseCount(input.after, '--after', 0);
    resolveSpecSyntax(input.task);
    const repo = await startTaskCommand(ctx);
    const { canonicalJson } = await import('../snapshot/canonical-json');
    await withTask(repo, input.task, (db, id) => follow(out, repo, db, id, after, canonicalJson));
  },
});

/** Sleeps `ms`; a caller's cancellation (MCP) ends the wait with CANCELLED. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const cancelled = () => new XetError('CANCELLED', 'the caller cancelled the wait', {});
    if (signal?.aborted) return reject(cancelled());
    const onAbort = () => {
      clearTimeout(timer);
      reject(cancelled());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Print events as they are appended, until the task has ended and its final event is printed (or
 * the task is collected). The status is read before the events each round: an event appended
 * before the status changed is therefore always seen before the loop can end. A runner that dies
 * while followed would leave the task running for ever: when its identity is not alive, the task
 * is reconciled, which ends it or hands it to a supervisor that does (followed in turn); when
 * recovery classifies it UNKNOWN nothing will end it, and the follow ends with
 * WORKDIR_RECOVERY_REQUIRED after the events so far.
 */
async function follow(
  out: Out,
  repo: Repo,
  db: Db,
  id: string,
  after: number,
  canonical: (v: unknown) => string,
): Promise<void> {
  const { getTask, listEvents } = await import('../tasks/store');
  const { isTerminal } = await import('../tasks/model');
  // A reader that went away (`| head`) ends the follow quietly.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
  });
  let seq = after;
  let finalSeen = listEvents(db, id, 0).some((e) => e.seq <= after && FINAL_EVENTS.has(e.eventType));
  let endedSince: number | null = null;
  let lastRound = false;
  let lastRunnerCheck = Date.now();
  for (;;) {
    const row = getTask(db, id);
    for (const e of listEvents(db, id, seq)) {
      process.stdout.write(out.json ? `${JSON.stringify(e)}\n` : `${eventLine(e, canonical)}\n`);
      seq = e.seq;
      if (FINAL_EVENTS.has(e.eventType)) finalSeen = true;
    }
    if (!row) return; // collected while followed
    if (isTerminal(row.status)) {
      // One more round after the final event: what is appended right after it (recovery's
      // runtime.reconciliation_finished) belongs to the same end.
      if (finalSeen && lastRound) return;
      if (finalSeen) {
        lastRound = true;
        await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
        continue;
      }
      endedSince ??= Date.now();
      if (Date.now() - endedSince >= FINAL_EVENT_WAIT_MS) return;
    } else if (Date.now() - lastRunnerCheck >= RUNNER_CHECK_MS) {
      lastRunnerCheck = Date.now();
      const unknown = await reconcileIfRunnerGone(repo, row, id);
      if (unknown) {
        // Nothing will end this task by itself now: what is left is printed, then the follow ends.
        for (const e of listEvents(db, id, seq)) {
          process.stdout.write(out.json ? `${JSON.stringify(e)}\n` : `${eventLine(e, canonical)}\n`);
          seq = e.seq;
        }
        throw unendingTask(id, unknown.reason, 'the follow', { afterSeq: seq });
      }
    }
    await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
  }
}

/**
 * A running task whose runner's identity is not alive is reconciled, which ends it or hands it to
 * a supervisor that does. Not only a runner proven gone: one never recorded, or whose liveness
 * cannot be told, is for recovery to judge (it leaves a young start alone), else a wait on it could
 * last for ever. Returns recovery's verdict when it is UNKNOWN: nothing will end the task then.
 */
async function reconcileIfRunnerGone(repo: Repo, row: TaskRow, id: string): Promise<{ reason: string } | null> {
  const { liveness } = await import('../tasks/proc');
  const runner =
    row.runnerPid !== null && row.runnerStart !== null && row.bootId !== null
      ? { pid: row.runnerPid, start: row.runnerStart, boot: row.bootId }
      : null;
  if (runner && liveness(runner) === 'alive') return null;
  const { reconcile } = await import('../tasks/recover');
  const r = await reconcile(repo, { task: id });
  return r.tasks.find((t) => t.task === id && t.classification === 'UNKNOWN') ?? null;
}

function unendingTask(id: string, reason: string, waiter: string, extra: Record<string, unknown>): XetError {
  return new XetError(
    'WORKDIR_RECOVERY_REQUIRED',
    `task ${id} will not end by itself: its runner is gone and recovery cannot establish what its command does (UNKNOWN: ${reason}); ${waiter} ends. See git xet task recover ${id}`,
    { task: id, classification: 'UNKNOWN', reason, ...extra },
  );
}

/**
 * Waits until a task has ended (`task result --wait`), polling as `events --follow` does, its
 * runner checked as it does. The task collected meanwhile is TASK_NOT_FOUND; a caller's
 * cancellation is CANCELLED.
 */
export async function waitForEnd(repo: Repo, db: Db, id: string, signal?: AbortSignal): Promise<void> {
  const { getTask } = await import('../tasks/store');
  const { isTerminal } = await import('../tasks/model');
  let lastRunnerCheck = Date.now();
  for (;;) {
    const row = getTask(db, id);
    if (!row) throw new XetError('TASK_NOT_FOUND', `task ${id} was collected while waited for`, { task: id });
    if (isTerminal(row.status)) return;
    if (Date.now() - lastRunnerCheck >= RUNNER_CHECK_MS) {
      lastRunnerCheck = Date.now();
      const unknown = await reconcileIfRunnerGone(repo, row, id);
      if (unknown) throw unendingTask(id, unknown.reason, 'the wait', {});
    }
    await pause(FOLLOW_POLL_MS, signal);
  }
}
