// Task results: taken from the command's stdout or $XET_TASK_RESULT when it ends, kept inline
// (<= 256 KiB) or spooled atomically to a private file (<= 8 MiB), refused above; read back in
// chunks that end on UTF-8 boundaries. OWNER: result helper.
import type { Db } from '../sidecar/db';
import type { TaskRow } from './store';

export interface ResultInfo {
  storage: 'inline' | 'spool';
  source: 'stdout' | 'file';
  sizeBytes: number;
  sha256: string;
}

export interface ResultSummary extends ResultInfo {
  /** The first bytes (inline: everything), cut on a UTF-8 boundary. */
  preview: string;
  truncated: boolean;
  retrievable: boolean;
}

export interface ResultChunk {
  text: string;
  offsetBytes: number;
  nextOffsetBytes: number;
  eof: boolean;
  sizeBytes: number;
  sha256: string;
}

const todo = (what: string): never => {
  throw new Error(`${what}: not implemented yet (issue 10)`);
};

/**
 * Keep the ended task's result: $XET_TASK_RESULT if the command wrote it, else its stdout file.
 * Updates the row's result_* columns and appends task.result_spooled / task.result_refused.
 * Throws RESULT_TOO_LARGE or RESULT_NOT_UTF8 (after recording the refusal); nothing half written.
 */
export function storeResult(db: Db, commonDir: string, task: TaskRow): ResultInfo {
  return todo(`storeResult ${db.name} ${commonDir} ${task.id}`);
}

/** What `task show` / `task run --json` say about the result; null if there is none. */
export function resultSummary(db: Db, commonDir: string, task: TaskRow): ResultSummary | null {
  return todo(`resultSummary ${db.name} ${commonDir} ${task.id}`);
}

/** Exact bytes [offset, offset+maxBytes) cut back to a UTF-8 boundary (maxBytes <= 65536). */
export function readResultChunk(
  db: Db,
  commonDir: string,
  task: TaskRow,
  offset: number,
  maxBytes: number,
): ResultChunk {
  return todo(`readResultChunk ${db.name} ${commonDir} ${task.id} ${offset} ${maxBytes}`);
}
