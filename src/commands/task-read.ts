// git xet task show, list, events (owner: task-store helper). Reads only: every one starts with the
// recovery pass and the retention pass that all task commands run, then reads the sidecar (and never
// creates one).
import type { Command } from 'commander';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import type { Db } from '../sidecar/db';
import type { TaskEvent, TaskRow } from '../tasks/store';
import type { TaskStatus } from '../tasks/model';
import { run } from '../cli/run';
import { emit, formatBytes, type Out } from '../cli/output';

/** The events after which a task says nothing more (docs/FORMAT.md "Event envelope v1"). */
const FINAL_EVENTS = new Set(['task.succeeded', 'task.failed', 'task.cancelled', 'task.timed_out', 'task.interrupted']);
/** How often `events --follow` looks for new events. */
const FOLLOW_POLL_MS = 200;
/** A task found ended whose final event does not follow within this long: stop following anyway. */
const FINAL_EVENT_WAIT_MS = 2000;
/** How often `events --follow` checks that the task's runner is still alive. */
const RUNNER_CHECK_MS = 2000;

async function startTaskCommand(): Promise<Repo> {
  const { findRepo } = await import('../git/repo');
  const repo = await findRepo(process.cwd(), true);
  const { reconcileAtStart } = await import('../tasks/recover');
  await reconcileAtStart(repo);
  const { collectTasks } = await import('../tasks/retention');
  collectTasks(repo);
  return repo;
}

/** The sidecar if it exists (a read never creates one). */
async function openExisting(repo: Repo): Promise<Db | null> {
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

function parseCount(text: string, what: string, min: number): number {
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

export function registerTaskRead(task: Command): void {
  task
    .command('show')
    .description("a task: its row, its manifest and the manifest's sha256, provenance, result summary")
    .argument('<task>', 'task id (full or at least 4 hex digits)')
    .action(
      run(async (out, spec: string) => {
        // Bad input is refused before the recovery pass can change anything.
        resolveSpecSyntax(spec);
        const repo = await startTaskCommand();
        const { getTask, taskExports } = await import('../tasks/store');
        const { verifyStoredManifest } = await import('../tasks/manifest');
        const value = await withTask(repo, spec, async (db, id) => {
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
          };
        });
        const { displaySafe } = await import('../handoff/descriptor');
        emit(out, value, () => {
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
        });
      }),
    );

  task
    .command('list')
    .description('tasks, newest first: id, status, command, when, workspace')
    .option(
      '--status <statuses>',
      'only these: created, running, succeeded, failed, cancelled, interrupted, active, terminal (comma-separated)',
    )
    .option('--limit <n>', 'at most this many (default 50)')
    .action(
      run(async (out, opts: { status?: string; limit?: string }) => {
        const status = await parseStatuses(opts.status);
        const limit = opts.limit === undefined ? 50 : parseCount(opts.limit, '--limit', 1);
        const repo = await startTaskCommand();
        const { listTasks } = await import('../tasks/store');
        const db = await openExisting(repo);
        let rows: TaskRow[] = [];
        try {
          if (db) rows = listTasks(db, { status, limit });
        } finally {
          db?.close();
        }
        const tasks = rows.map(publicRow);
        const { displaySafe } = await import('../handoff/descriptor');
        emit(out, { tasks }, () =>
          tasks.length
            ? tasks
                .map(
                  (t) =>
                    `${t.id}  ${statusText(t).padEnd(24)} ${t.createdAt}  ${displaySafe(t.command)}  ${t.worktree}${
                      t.correlationId !== null ? `  [${displaySafe(JSON.stringify(t.correlationId))}]` : ''
                    }`,
                )
                .join('\n')
            : 'no tasks',
        );
      }),
    );

  task
    .command('events')
    .description("a task's events (envelope v1), in order; --follow waits for more until the task ends")
    .argument('<task>', 'task id (full or at least 4 hex digits)')
    .option('--after <seq>', 'only events after this sequence number')
    .option(
      '--follow',
      'keep printing events as they come until the task has ended (with --json: one JSON envelope a line)',
    )
    .action(
      run(async (out, spec: string, opts: { after?: string; follow?: boolean }) => {
        const after = opts.after === undefined ? 0 : parseCount(opts.after, '--after', 0);
        resolveSpecSyntax(spec);
        const repo = await startTaskCommand();
        const { listEvents } = await import('../tasks/store');
        const { canonicalJson } = await import('../snapshot/canonical-json');
        await withTask(repo, spec, async (db, id) => {
          if (!opts.follow) {
            const events = listEvents(db, id, after);
            emit(out, { events }, () =>
              events.length ? events.map((e) => eventLine(e, canonicalJson)).join('\n') : 'no events',
            );
            return;
          }
          await follow(out, repo, db, id, after, canonicalJson);
        });
      }),
    );
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
  const { liveness } = await import('../tasks/proc');
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
      const runner =
        row.runnerPid !== null && row.runnerStart !== null && row.bootId !== null
          ? { pid: row.runnerPid, start: row.runnerStart, boot: row.bootId }
          : null;
      // Not only a runner proven gone: one never recorded, or whose liveness cannot be told, is for
      // recovery to judge (it leaves a young start alone), else the follow would wait on it for ever.
      if (!runner || liveness(runner) !== 'alive') {
        const { reconcile } = await import('../tasks/recover');
        const r = await reconcile(repo, { task: id });
        const unknown = r.tasks.find((t) => t.task === id && t.classification === 'UNKNOWN');
        if (unknown) {
          // Nothing will end this task by itself now: what is left is printed, then the follow ends.
          for (const e of listEvents(db, id, seq)) {
            process.stdout.write(out.json ? `${JSON.stringify(e)}\n` : `${eventLine(e, canonical)}\n`);
            seq = e.seq;
          }
          throw new XetError(
            'WORKDIR_RECOVERY_REQUIRED',
            `task ${id} will not end by itself: its runner is gone and recovery cannot establish what its command does (UNKNOWN: ${unknown.reason}); the follow ends. See git xet task recover ${id}`,
            { task: id, classification: 'UNKNOWN', reason: unknown.reason, afterSeq: seq },
          );
        }
      }
    }
    await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
  }
}
