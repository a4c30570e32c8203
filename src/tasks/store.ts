// The tasks' rows, events and exports in the sidecar (migration 6). OWNER: task-store helper.
// Every read and write of the tasks, task_events and task_exports tables goes through here.
import * as crypto from 'node:crypto';
import { XetError } from '../errors';
import type { Db } from '../sidecar/db';
import { canonicalJson } from '../snapshot/canonical-json';
import { TASK_ID_PREFIX_RE, TASK_ID_RE } from './ids';
import {
  EVENT_SCHEMA_VERSION,
  TASK_STATUSES,
  type EventType,
  type Recovery,
  type SlotMode,
  type TaskStatus,
} from './model';

/** A row of `tasks`, camelCase. */
export interface TaskRow {
  id: string;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  status: TaskStatus;
  errorCode: string | null;
  exitCode: number | null;
  exitSignal: string | null;
  command: string;
  correlationId: string | null;
  sessionId: string | null;
  continuesTask: string | null;
  slot: string;
  worktree: string;
  gitDir: string;
  mode: SlotMode;
  forkId: string | null;
  baseSnapshot: string | null;
  resultSnapshot: string | null;
  deadlineAt: string;
  detached: boolean;
  capture: boolean;
  manifestJson: string;
  manifestSha256: string;
  runnerPid: number | null;
  runnerStart: string | null;
  pid: number | null;
  pidStart: string | null;
  bootId: string | null;
  mark: string;
  resultStorage: 'inline' | 'spool' | null;
  resultSource: 'stdout' | 'file' | null;
  resultSizeBytes: number | null;
  resultSha256: string | null;
  recovery: Recovery | null;
  cancelRequestedAt: string | null;
}

/** What a new task's row takes from its creator; everything else starts empty (nothing ran yet). */
export type NewTaskFields = Pick<
  TaskRow,
  | 'id'
  | 'createdAt'
  | 'command'
  | 'slot'
  | 'worktree'
  | 'gitDir'
  | 'deadlineAt'
  | 'manifestJson'
  | 'manifestSha256'
  | 'mark'
> &
  Partial<
    Pick<
      TaskRow,
      'correlationId' | 'sessionId' | 'continuesTask' | 'mode' | 'forkId' | 'baseSnapshot' | 'detached' | 'capture'
    >
  >;

/** The row `task run` inserts: status created, no runner, no command, no result yet. */
export function newTaskRow(f: NewTaskFields): TaskRow {
  return {
    startedAt: null,
    endedAt: null,
    status: 'created',
    errorCode: null,
    exitCode: null,
    exitSignal: null,
    correlationId: null,
    sessionId: null,
    continuesTask: null,
    mode: 'worktree',
    forkId: null,
    baseSnapshot: null,
    resultSnapshot: null,
    detached: false,
    capture: true,
    runnerPid: null,
    runnerStart: null,
    pid: null,
    pidStart: null,
    bootId: null,
    resultStorage: null,
    resultSource: null,
    resultSizeBytes: null,
    resultSha256: null,
    recovery: null,
    cancelRequestedAt: null,
    ...f,
  };
}

/** What may change after creation (the manifest, the id and what the manifest froze may not). */
export type TaskPatch = Partial<
  Pick<
    TaskRow,
    | 'startedAt'
    | 'endedAt'
    | 'status'
    | 'errorCode'
    | 'exitCode'
    | 'exitSignal'
    | 'resultSnapshot'
    | 'runnerPid'
    | 'runnerStart'
    | 'pid'
    | 'pidStart'
    | 'bootId'
    | 'resultStorage'
    | 'resultSource'
    | 'resultSizeBytes'
    | 'resultSha256'
    | 'recovery'
    | 'cancelRequestedAt'
  >
> & { resultInline?: Buffer | null };

/** Envelope schema version 1 (docs/FORMAT.md "Task events"). */
export interface TaskEvent {
  schemaVersion: 1;
  eventId: string;
  taskId: string;
  correlationId: string | null;
  eventType: EventType | string;
  createdAt: string;
  payload: Record<string, unknown>;
  /** Order within the sidecar (for `events --follow --after`). */
  seq: number;
}

/** Column of each TaskRow field (the table is snake_case, every reader camelCase). */
const COLUMNS: Record<keyof TaskRow, string> = {
  id: 'id',
  createdAt: 'created_at',
  startedAt: 'started_at',
  endedAt: 'ended_at',
  status: 'status',
  errorCode: 'error_code',
  exitCode: 'exit_code',
  exitSignal: 'exit_signal',
  command: 'command',
  correlationId: 'correlation_id',
  sessionId: 'session_id',
  continuesTask: 'continues_task',
  slot: 'slot',
  worktree: 'worktree',
  gitDir: 'git_dir',
  mode: 'mode',
  forkId: 'fork_id',
  baseSnapshot: 'base_snapshot',
  resultSnapshot: 'result_snapshot',
  deadlineAt: 'deadline_at',
  detached: 'detached',
  capture: 'capture',
  manifestJson: 'manifest_json',
  manifestSha256: 'manifest_sha256',
  runnerPid: 'runner_pid',
  runnerStart: 'runner_start',
  pid: 'pid',
  pidStart: 'pid_start',
  bootId: 'boot_id',
  mark: 'mark',
  resultStorage: 'result_storage',
  resultSource: 'result_source',
  resultSizeBytes: 'result_size_bytes',
  resultSha256: 'result_sha256',
  recovery: 'recovery',
  cancelRequestedAt: 'cancel_requested_at',
};
const FIELDS = Object.keys(COLUMNS) as (keyof TaskRow)[];
/** Every column but the inline result (a blob of up to 256 KiB that lists and shows never need). */
const SELECT_ROW = `SELECT ${FIELDS.map((f) => `${COLUMNS[f]} AS ${f}`).join(', ')} FROM tasks`;

/** The fields updateTask may set: TaskPatch's keys, checked at run time too (a cast cannot widen it). */
const PATCHABLE = new Set<string>([
  'startedAt',
  'endedAt',
  'status',
  'errorCode',
  'exitCode',
  'exitSignal',
  'resultSnapshot',
  'runnerPid',
  'runnerStart',
  'pid',
  'pidStart',
  'bootId',
  'resultStorage',
  'resultSource',
  'resultSizeBytes',
  'resultSha256',
  'recovery',
  'cancelRequestedAt',
]);

type RawRow = Omit<TaskRow, 'detached' | 'capture'> & { detached: number; capture: number };

function toRow(r: RawRow): TaskRow {
  return { ...r, detached: r.detached === 1, capture: r.capture === 1 };
}

const sha256 = (text: string): string => crypto.createHash('sha256').update(text, 'utf8').digest('hex');

/** Insert a new task (status 'created') and its task.created event in one transaction. */
export function insertTask(db: Db, row: TaskRow): TaskEvent {
  // A bug in a caller must not store a row whose id or mark could not be one, or a manifest whose
  // hash does not name it: both are read back later as if they were true.
  if (!TASK_ID_RE.test(row.id)) throw new Error(`insertTask: ${JSON.stringify(row.id)} is not a task id`);
  if (!TASK_ID_RE.test(row.mark)) throw new Error('insertTask: the mark must be 16 hex digits');
  if (sha256(row.manifestJson) !== row.manifestSha256) {
    throw new Error(`insertTask: manifestSha256 is not the sha256 of manifestJson (task ${row.id})`);
  }
  const values: Record<string, unknown> = {};
  for (const f of FIELDS) {
    const v = row[f];
    values[f] = typeof v === 'boolean' ? (v ? 1 : 0) : (v ?? null);
  }
  const insert = db.prepare(
    `INSERT INTO tasks(${FIELDS.map((f) => COLUMNS[f]).join(', ')}) VALUES (${FIELDS.map((f) => `@${f}`).join(', ')})`,
  );
  return db
    .transaction(() => {
      insert.run(values);
      return appendEvent(db, row.id, 'task.created', {
        command: row.command,
        mode: row.mode,
        slot: row.slot,
        detached: row.detached,
        capture: row.capture,
        deadlineAt: row.deadlineAt,
        manifestSha256: row.manifestSha256,
        baseSnapshot: row.baseSnapshot,
        continuesTask: row.continuesTask,
      });
    })
    .immediate();
}

export function getTask(db: Db, id: string): TaskRow | null {
  const r = db.prepare(`${SELECT_ROW} WHERE id = ?`).get(id) as RawRow | undefined;
  return r ? toRow(r) : null;
}

/** Newest first. */
export function listTasks(db: Db, filter: { status?: TaskStatus[]; limit?: number } = {}): TaskRow[] {
  const where: string[] = [];
  const args: unknown[] = [];
  if (filter.status?.length) {
    for (const s of filter.status) {
      if (!TASK_STATUSES.includes(s)) throw new Error(`listTasks: ${JSON.stringify(s)} is not a task status`);
    }
    where.push(`status IN (${filter.status.map(() => '?').join(', ')})`);
    args.push(...filter.status);
  }
  let sql = `${SELECT_ROW}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY created_at DESC, id`;
  if (filter.limit !== undefined) {
    sql += ' LIMIT ?';
    args.push(filter.limit);
  }
  return (db.prepare(sql).all(...args) as RawRow[]).map(toRow);
}

/** Update the mutable fields (a manifest change is refused by the schema's trigger as well). */
export function updateTask(db: Db, id: string, patch: TaskPatch): void {
  const sets: string[] = [];
  const values: Record<string, unknown> = { id };
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    if (k === 'resultInline') {
      sets.push('result_inline = @resultInline');
      values.resultInline = v;
      continue;
    }
    if (!PATCHABLE.has(k)) throw new Error(`updateTask: ${k} cannot change after a task is created`);
    sets.push(`${COLUMNS[k as keyof TaskRow]} = @${k}`);
    values[k] = v;
  }
  if (!sets.length) return;
  const r = db.prepare(`UPDATE tasks SET ${sets.join(', ')} WHERE id = @id`).run(values);
  if (r.changes === 0) throw new XetError('TASK_NOT_FOUND', `no task ${id}`, { task: id });
}

/** The inline result bytes (null if none). */
export function inlineResult(db: Db, id: string): Buffer | null {
  const r = db.prepare('SELECT result_inline AS b FROM tasks WHERE id = ?').get(id) as { b: Buffer | null } | undefined;
  return r?.b ?? null;
}

/** A payload string longer than this is not metadata (output, a prompt): refused. */
export const EVENT_STRING_MAX = 512;
/** And a whole payload (canonical JSON) longer than this. */
export const EVENT_PAYLOAD_MAX_BYTES = 8192;

/**
 * Events carry metadata only (docs/FORMAT.md "Event envelope v1"): no command output, prompt text,
 * environment values or absolute host paths. Their values come from git xet's own code, so a value
 * that looks like one of those is a bug in the caller: thrown, never stored.
 */
export function checkEventPayload(payload: Record<string, unknown>): void {
  const visit = (v: unknown, at: string): void => {
    if (typeof v === 'string') {
      if (v.startsWith('/'))
        throw new Error(`event payload ${at} looks like an absolute path; events are metadata only`);
      if (v.length > EVENT_STRING_MAX) {
        throw new Error(
          `event payload ${at} is ${v.length} characters (at most ${EVENT_STRING_MAX}); events are metadata only`,
        );
      }
    } else if (Array.isArray(v)) v.forEach((x, i) => visit(x, `${at}[${i}]`));
    else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) visit(x, `${at}.${k}`);
    }
  };
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    throw new Error('an event payload is an object');
  }
  visit(payload, 'payload');
}

interface RawEvent {
  seq: number;
  eventId: string;
  taskId: string;
  correlationId: string | null;
  eventType: string;
  createdAt: string;
  payload: string;
}

const SELECT_EVENT =
  'SELECT seq, event_id AS eventId, task_id AS taskId, correlation_id AS correlationId, event_type AS eventType, created_at AS createdAt, payload FROM task_events';

function toEvent(r: RawEvent): TaskEvent {
  return {
    schemaVersion: EVENT_SCHEMA_VERSION as 1,
    eventId: r.eventId,
    taskId: r.taskId,
    correlationId: r.correlationId,
    eventType: r.eventType,
    createdAt: r.createdAt,
    payload: JSON.parse(r.payload) as Record<string, unknown>,
    seq: r.seq,
  };
}

/** Append an event; the payload is checked to be metadata only. Returns the stored envelope. */
export function appendEvent(db: Db, taskId: string, type: EventType, payload: Record<string, unknown> = {}): TaskEvent {
  checkEventPayload(payload);
  const text = canonicalJson(payload);
  if (Buffer.byteLength(text, 'utf8') > EVENT_PAYLOAD_MAX_BYTES) {
    throw new Error(`event payload of ${type} is over ${EVENT_PAYLOAD_MAX_BYTES} bytes; events are metadata only`);
  }
  const task = db.prepare('SELECT correlation_id AS c FROM tasks WHERE id = ?').get(taskId) as
    { c: string | null } | undefined;
  if (!task) throw new XetError('TASK_NOT_FOUND', `no task ${taskId}`, { task: taskId });
  const eventId = crypto.randomUUID();
  const createdAt = new Date().toISOString();
  const r = db
    .prepare(
      'INSERT INTO task_events(event_id, task_id, correlation_id, event_type, created_at, payload) VALUES (?, ?, ?, ?, ?, ?)',
    )
    .run(eventId, taskId, task.c, type, createdAt, text);
  return {
    schemaVersion: EVENT_SCHEMA_VERSION as 1,
    eventId,
    taskId,
    correlationId: task.c,
    eventType: type,
    createdAt,
    payload: JSON.parse(text) as Record<string, unknown>,
    seq: Number(r.lastInsertRowid),
  };
}

/** The task's events after `afterSeq`, in the order they were appended. */
export function listEvents(db: Db, taskId: string, afterSeq = 0): TaskEvent[] {
  return (
    db.prepare(`${SELECT_EVENT} WHERE task_id = ? AND seq > ? ORDER BY seq`).all(taskId, afterSeq) as RawEvent[]
  ).map(toEvent);
}

/** A commit `git xet export` made from the task's workspace or result snapshot. */
export function recordExport(db: Db, taskId: string, commit: string, branch: string | null): void {
  if (!/^(?:[0-9a-f]{40}|[0-9a-f]{64})$/.test(commit)) throw new Error(`recordExport: ${commit} is not a commit id`);
  try {
    db.prepare('INSERT OR IGNORE INTO task_exports(task_id, commit_oid, branch, created_at) VALUES (?, ?, ?, ?)').run(
      taskId,
      commit,
      branch,
      new Date().toISOString(),
    );
  } catch (e) {
    if ((e as { code?: string }).code === 'SQLITE_CONSTRAINT_FOREIGNKEY') {
      throw new XetError('TASK_NOT_FOUND', `no task ${taskId}`, { task: taskId });
    }
    throw e;
  }
}

export function taskExports(db: Db, taskId: string): { commit: string; branch: string | null; createdAt: string }[] {
  return db
    .prepare(
      'SELECT commit_oid AS "commit", branch, created_at AS createdAt FROM task_exports WHERE task_id = ? ORDER BY created_at, commit_oid',
    )
    .all(taskId) as { commit: string; branch: string | null; createdAt: string }[];
}

/** Full id from a full or abbreviated (4+ hex digits) one: TASK_NOT_FOUND, or USAGE if ambiguous. */
export function resolveTaskId(db: Db, spec: string): string {
  const s = spec.trim().toLowerCase();
  if (!TASK_ID_PREFIX_RE.test(s)) {
    throw new XetError('USAGE', `${JSON.stringify(spec)} is not a task id: give 4 to 16 hex digits`, { task: spec });
  }
  // A range on the primary key ('g' sorts after every hex digit): an index lookup, whatever the table holds.
  const rows = db.prepare('SELECT id FROM tasks WHERE id >= ? AND id < ? ORDER BY id LIMIT 21').all(s, `${s}g`) as {
    id: string;
  }[];
  if (!rows.length) throw new XetError('TASK_NOT_FOUND', `no task ${s} in this repository`, { task: s });
  if (rows.length > 1) {
    throw new XetError(
      'USAGE',
      `${s} is ambiguous: ${rows.length > 20 ? 'more than 20' : rows.length} tasks start with it; give more digits`,
      {
        task: s,
        matches: rows.slice(0, 20).map((r) => r.id),
      },
    );
  }
  return rows[0].id;
}

/** The task whose result snapshot is `snapshot`, if any (export's trailer, handoff --task). */
export function taskOfSnapshot(db: Db, snapshot: string): TaskRow | null {
  const r = db.prepare(`${SELECT_ROW} WHERE result_snapshot = ? ORDER BY created_at DESC LIMIT 1`).get(snapshot) as
    RawRow | undefined;
  return r ? toRow(r) : null;
}
