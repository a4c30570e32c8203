// Tasks: the shared vocabulary of src/tasks/ — states, limits, event types, the environment a task's
// command is given. Pure data: no I/O here, so every module (runner, recovery, reads, the CLI) agrees
// on one definition.

/** created -> running -> one of the terminal states. */
export const TASK_STATUSES = ['created', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export const TERMINAL_STATUSES: readonly TaskStatus[] = ['succeeded', 'failed', 'cancelled', 'interrupted'];
export function isTerminal(s: TaskStatus): boolean {
  return TERMINAL_STATUSES.includes(s);
}

export type SlotMode = 'worktree' | 'overlay' | 'clone' | 'copy';
export type Recovery = 'REATTACHED' | 'SESSION_RESUMABLE' | 'NOT_RECOVERABLE' | 'UNKNOWN';

/** Results up to this size are kept in the sidecar row. */
export const RESULT_INLINE_MAX = 256 * 1024;
/** Results up to this size are spooled to a private file; larger ones are RESULT_TOO_LARGE. */
export const RESULT_MAX = 8 * 1024 * 1024;
/** `task result` returns at most this many bytes a call. */
export const RESULT_CHUNK_MAX = 65536;
/** `task show` / `--json` reads of a spooled result carry a preview this long (bytes, UTF-8 cut). */
export const RESULT_PREVIEW_BYTES = 4096;
/** The deadline when --timeout is not given (frozen into the manifest at creation). */
export const DEFAULT_TIMEOUT_MS = 24 * 3600_000;
/** How long ended processes get between SIGTERM and SIGKILL. */
export const DEFAULT_KILL_GRACE_MS = 2000;
/** Terminal tasks are collected this long after they ended (xet.task.retention). */
export const DEFAULT_RETENTION_MS = 168 * 3600_000;
/** Correlation ids: opaque, at most this many UTF-8 bytes, no ASCII control characters. */
export const CORRELATION_ID_MAX_BYTES = 256;

export const MANIFEST_SCHEMA_VERSION = 1;
export const EVENT_SCHEMA_VERSION = 1;
/** The task protocol version recorded in manifests (what a runner and its readers agree on). */
export const TASK_PROTOCOL_VERSION = 1;

/** Event types of envelope v1. Additive: readers must accept types they do not know. */
export const EVENT_TYPES = [
  'task.created',
  'task.started',
  'task.result_spooled',
  'task.result_refused',
  'task.captured',
  'task.capture_failed',
  'task.succeeded',
  'task.failed',
  'task.cancel_requested',
  'task.cancelled',
  'task.timed_out',
  'task.interrupted',
  'task.reattached',
  'task.hooks_missing',
  'task.hooks_restored',
  'task.collected',
  'runtime.reconciliation_started',
  'runtime.reconciliation_finished',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** The environment a task's command gets (documented in docs/CLI.md "task run"). */
export const TASK_ENV = {
  /** The task's id. A git xet command run inside the task may write its own slot. */
  id: 'XET_TASK_ID',
  /** A file the command may write its result to instead of stdout. */
  result: 'XET_TASK_RESULT',
  /** A random mark every descendant inherits: how processes that left the process group are found. */
  mark: 'XET_TASK_MARK',
  /** The correlation id, when one was given. */
  correlation: 'XET_CORRELATION_ID',
  /** The declared session id, when one was given. */
  session: 'XET_SESSION_ID',
} as const;
