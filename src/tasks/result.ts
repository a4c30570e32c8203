// Task results: taken from the command's stdout or $XET_TASK_RESULT when it ends, kept inline
// (<= 256 KiB) or spooled atomically to a private file (<= 8 MiB), refused above; read back in
// chunks that end on UTF-8 boundaries. OWNER: result helper.
//
// The source files and the spool are written by the task's command (or could be replaced by it):
// they are read through O_NOFOLLOW|O_NONBLOCK descriptors, must be regular files, and their size is
// checked before anything is read, so a FIFO, a symlink to /dev/zero or a grown file cannot hang
// or flood a reader.
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TextDecoder } from 'node:util';
import { XetError } from '../errors';
import type { Db } from '../sidecar/db';
import { RESULT_CHUNK_MAX, RESULT_INLINE_MAX, RESULT_MAX, RESULT_PREVIEW_BYTES, isTerminal } from './model';
import { taskDir, taskFile } from './paths';
import { appendEvent, inlineResult, updateTask, type TaskRow } from './store';

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

/** The refusals storeResult records on the row (error_code) before it throws them. */
export const RESULT_REFUSALS = ['RESULT_TOO_LARGE', 'RESULT_NOT_UTF8'] as const;

/** Temporary spool files are named with this prefix inside the task dir, then renamed. */
const SPOOL_TMP_PREFIX = '.result.spool.tmp-';
const READ_BLOCK = 64 * 1024;

const isContinuation = (b: number): boolean => (b & 0xc0) === 0x80;

/** Bytes of the character a lead byte starts (1 for anything that is not a multi-byte lead). */
function charLength(lead: number): number {
  if (lead >= 0xf0 && lead <= 0xf7) return 4;
  if (lead >= 0xe0) return lead <= 0xef ? 3 : 1;
  if (lead >= 0xc0) return 2;
  return 1;
}

/** Length of the longest prefix of `b` (at most `max` bytes) that ends on a character boundary. */
function boundaryPrefix(b: Buffer, max: number): number {
  if (b.length <= max) return b.length;
  let end = max;
  while (end > 0 && isContinuation(b[end])) end--;
  return end;
}

function strictDecoder(): TextDecoder {
  // ignoreBOM: a leading U+FEFF is part of the result's bytes, not something to drop.
  return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
}

/** Decodes bytes that must be valid UTF-8; null if they are not. */
function decodeStrict(b: Buffer): string | null {
  try {
    return strictDecoder().decode(b);
  } catch {
    return null;
  }
}

/** An fd on a regular file that the task could have written; null if it does not exist. */
function openRegular(file: string): { fd: number; size: number } | null {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') return { fd: -1, size: -1 };
    throw e;
  }
  const st = fs.fstatSync(fd);
  if (!st.isFile()) {
    fs.closeSync(fd);
    return { fd: -1, size: -1 };
  }
  return { fd, size: st.size };
}

function readAt(fd: number, length: number, position: number): Buffer {
  const buf = Buffer.alloc(length);
  let got = 0;
  while (got < length) {
    const n = fs.readSync(fd, buf, got, length - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got === length ? buf : buf.subarray(0, got);
}

function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** A spool an earlier store of the same task published, once the row no longer names it. */
function dropSpool(commonDir: string, id: string): void {
  fs.rmSync(taskFile(commonDir, id, 'result.spool'), { force: true });
}

function refuse(
  db: Db,
  commonDir: string,
  task: TaskRow,
  code: (typeof RESULT_REFUSALS)[number],
  source: 'stdout' | 'file',
  sizeBytes: number,
  message: string,
): never {
  db.transaction(() => {
    updateTask(db, task.id, {
      errorCode: code,
      resultStorage: null,
      resultSource: null,
      resultSizeBytes: null,
      resultSha256: null,
      resultInline: null,
    });
    appendEvent(db, task.id, 'task.result_refused', { code, source, sizeBytes });
  })();
  dropSpool(commonDir, task.id);
  throw new XetError(code, message, { task: task.id, source, sizeBytes });
}

/**
 * Keep the ended task's result: $XET_TASK_RESULT if the command wrote it, else its stdout file.
 * Updates the row's result_* columns and appends task.result_spooled / task.result_refused.
 * Throws RESULT_TOO_LARGE or RESULT_NOT_UTF8 (after recording the refusal); nothing half written.
 */
export function storeResult(db: Db, commonDir: string, task: TaskRow): ResultInfo {
  const dir = taskDir(commonDir, task.id);
  for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    // A spool whose writer died before its rename: never published, never read.
    if (name.startsWith(SPOOL_TMP_PREFIX)) fs.rmSync(path.join(dir, name), { force: true });
  }
  let source: 'stdout' | 'file' = 'file';
  let opened = openRegular(taskFile(commonDir, task.id, 'result'));
  if (opened === null) {
    source = 'stdout';
    opened = openRegular(taskFile(commonDir, task.id, 'stdout'));
  }
  if (opened === null) {
    throw new XetError('RESULT_NOT_AVAILABLE', `task ${task.id} left no stdout file to take its result from`, {
      task: task.id,
    });
  }
  if (opened.fd < 0) {
    // A FIFO, device or symlink where a result file belongs: reading it could block or never end.
    throw new XetError(
      'RESULT_NOT_AVAILABLE',
      `the result of task ${task.id} (${source === 'file' ? '$XET_TASK_RESULT' : 'stdout'}) is not a regular file; it was not read`,
      { task: task.id, source },
    );
  }
  const { fd } = opened;
  const tooLarge = (size: number) =>
    refuse(
      db,
      commonDir,
      task,
      'RESULT_TOO_LARGE',
      source,
      size,
      `the result of task ${task.id} is ${size} bytes, over the ${RESULT_MAX}-byte limit; it was not kept (the workspace capture still stands)`,
    );
  let tmp: string | null = null;
  let out = -1;
  try {
    if (opened.size > RESULT_MAX) tooLarge(opened.size);
    const hash = crypto.createHash('sha256');
    const decoder = strictDecoder();
    const held: Buffer[] = [];
    let size = 0;
    let valid = true;
    const block = Buffer.alloc(READ_BLOCK);
    for (;;) {
      // Read to EOF rather than to the size fstat gave: a file that grew since is measured as it is.
      const n = fs.readSync(fd, block, 0, block.length, size);
      if (n === 0) break;
      const piece = block.subarray(0, n);
      size += n;
      if (size > RESULT_MAX) break;
      hash.update(piece);
      try {
        decoder.decode(piece, { stream: true });
      } catch {
        valid = false;
        break;
      }
      if (out < 0 && size > RESULT_INLINE_MAX) {
        tmp = path.join(dir, `${SPOOL_TMP_PREFIX}${crypto.randomBytes(6).toString('hex')}`);
        out = fs.openSync(
          tmp,
          fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
          0o600,
        );
        fs.fchmodSync(out, 0o600); // whatever the umask
        for (const h of held) fs.writeSync(out, h);
        held.length = 0;
      }
      if (out >= 0) fs.writeSync(out, piece);
      else held.push(Buffer.from(piece));
    }
    if (valid && size <= RESULT_MAX) {
      try {
        decoder.decode(); // a character cut off at the end
      } catch {
        valid = false;
      }
    }
    if (size > RESULT_MAX) tooLarge(Math.max(size, opened.size));
    if (!valid) {
      refuse(
        db,
        commonDir,
        task,
        'RESULT_NOT_UTF8',
        source,
        opened.size,
        `the result of task ${task.id} is not valid UTF-8; it was not kept (no lossy decoding)`,
      );
    }
    const info: ResultInfo = {
      storage: out >= 0 ? 'spool' : 'inline',
      source,
      sizeBytes: size,
      sha256: hash.digest('hex'),
    };
    const columns = {
      // A refusal recorded by an earlier attempt no longer holds; any other error code is not ours.
      ...((RESULT_REFUSALS as readonly (string | null)[]).includes(task.errorCode) ? { errorCode: null } : {}),
      resultStorage: info.storage,
      resultSource: info.source,
      resultSizeBytes: info.sizeBytes,
      resultSha256: info.sha256,
    };
    if (info.storage === 'inline') {
      updateTask(db, task.id, { ...columns, resultInline: Buffer.concat(held) });
      dropSpool(commonDir, task.id);
      return info;
    }
    fs.fsyncSync(out);
    fs.closeSync(out);
    out = -1;
    fs.chmodSync(dir, 0o700);
    fs.renameSync(tmp as string, taskFile(commonDir, task.id, 'result.spool'));
    tmp = null;
    fsyncDir(dir);
    // The spool is published before the row names it: a crash in between leaves a file no row
    // points at (collected with the task dir), never a row pointing at nothing.
    db.transaction(() => {
      updateTask(db, task.id, { ...columns, resultInline: null });
      appendEvent(db, task.id, 'task.result_spooled', { sizeBytes: info.sizeBytes, sha256: info.sha256 });
    })();
    return info;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC' || code === 'EDQUOT') {
      throw new XetError('DISK_FULL', `no space left to spool the result of task ${task.id}; nothing was kept`, {
        task: task.id,
      });
    }
    throw e;
  } finally {
    fs.closeSync(fd);
    if (out >= 0) fs.closeSync(out);
    if (tmp !== null) fs.rmSync(tmp, { force: true });
  }
}

/** The stored bytes of a task's result, checked against the row; `why` says what is wrong. */
type Stored =
  | { ok: true; read: (offset: number, length: number) => Buffer; hash: () => string; close: () => void }
  | { ok: false; why: string; code: 'RESULT_NOT_AVAILABLE' | 'INTEGRITY_MISMATCH' };

function openStored(db: Db, commonDir: string, task: TaskRow): Stored {
  if (task.resultStorage === null || task.resultSizeBytes === null || task.resultSha256 === null) {
    const why = !isTerminal(task.status)
      ? `task ${task.id} has not ended yet`
      : task.errorCode === 'RESULT_TOO_LARGE' || task.errorCode === 'RESULT_NOT_UTF8'
        ? `the result of task ${task.id} was refused (${task.errorCode})`
        : `task ${task.id} has no result`;
    return { ok: false, why, code: 'RESULT_NOT_AVAILABLE' };
  }
  const size = task.resultSizeBytes;
  if (task.resultStorage === 'inline') {
    const bytes = inlineResult(db, task.id);
    if (bytes === null) return { ok: false, why: `task ${task.id} has no inline result`, code: 'RESULT_NOT_AVAILABLE' };
    if (bytes.length !== size) {
      return {
        ok: false,
        why: `the inline result of task ${task.id} is ${bytes.length} bytes, the row says ${size}`,
        code: 'INTEGRITY_MISMATCH',
      };
    }
    return {
      ok: true,
      read: (o, n) => bytes.subarray(o, Math.min(o + n, size)),
      hash: () => crypto.createHash('sha256').update(bytes).digest('hex'),
      close: () => undefined,
    };
  }
  const opened = openRegular(taskFile(commonDir, task.id, 'result.spool'));
  if (opened === null) {
    return {
      ok: false,
      why: `the spooled result of task ${task.id} is gone (collected?)`,
      code: 'RESULT_NOT_AVAILABLE',
    };
  }
  if (opened.fd < 0 || opened.size !== size) {
    if (opened.fd >= 0) fs.closeSync(opened.fd);
    return {
      ok: false,
      why:
        opened.fd < 0
          ? `the spool of task ${task.id} is not a regular file`
          : `the spool of task ${task.id} is ${opened.size} bytes, the row says ${size}`,
      code: 'INTEGRITY_MISMATCH',
    };
  }
  const { fd } = opened;
  const hash = () => {
    const h = crypto.createHash('sha256');
    const block = Buffer.alloc(READ_BLOCK);
    for (let at = 0; at < size;) {
      const n = fs.readSync(fd, block, 0, Math.min(block.length, size - at), at);
      if (n === 0) break;
      h.update(block.subarray(0, n));
      at += n;
    }
    return h.digest('hex');
  };
  return {
    ok: true,
    read: (o, n) => readAt(fd, Math.max(0, Math.min(n, size - o)), o),
    hash,
    close: () => fs.closeSync(fd),
  };
}

/** What `task show` / `task run --json` say about the result; null if there is none. */
export function resultSummary(db: Db, commonDir: string, task: TaskRow): ResultSummary | null {
  if (task.resultStorage === null || task.resultSizeBytes === null || task.resultSha256 === null) return null;
  const info: ResultInfo = {
    storage: task.resultStorage,
    source: task.resultSource ?? 'stdout',
    sizeBytes: task.resultSizeBytes,
    sha256: task.resultSha256,
  };
  const stored = openStored(db, commonDir, task);
  if (!stored.ok) return { ...info, preview: '', truncated: info.sizeBytes > 0, retrievable: false };
  try {
    const head = stored.read(0, RESULT_PREVIEW_BYTES + 1);
    const cut = boundaryPrefix(head, RESULT_PREVIEW_BYTES);
    const preview = decodeStrict(head.subarray(0, cut));
    if (preview === null) return { ...info, preview: '', truncated: info.sizeBytes > 0, retrievable: false };
    return { ...info, preview, truncated: cut < info.sizeBytes, retrievable: true };
  } finally {
    stored.close();
  }
}

function usage(message: string, details: Record<string, unknown> = {}): XetError {
  return new XetError('USAGE', message, details);
}

/** Exact bytes [offset, offset+maxBytes) cut back to a UTF-8 boundary (maxBytes <= 65536). */
export function readResultChunk(
  db: Db,
  commonDir: string,
  task: TaskRow,
  offset: number,
  maxBytes: number,
): ResultChunk {
  checkWindow(offset, maxBytes);
  const stored = openStored(db, commonDir, task);
  if (!stored.ok) throw new XetError(stored.code, stored.why, { task: task.id });
  try {
    return storedChunk(stored, task.id, task.resultSizeBytes as number, task.resultSha256 as string, offset, maxBytes);
  } finally {
    stored.close();
  }
}

/** The same chunk of result bytes held in memory (a task record's result blob, src/tasks/record.ts). */
export function readBytesChunk(
  bytes: Buffer,
  id: string,
  sha256: string,
  offset: number,
  maxBytes: number,
): ResultChunk {
  checkWindow(offset, maxBytes);
  const stored = {
    ok: true as const,
    read: (o: number, n: number) => bytes.subarray(o, Math.min(o + n, bytes.length)),
    hash: () => crypto.createHash('sha256').update(bytes).digest('hex'),
    close: () => undefined,
  };
  return storedChunk(stored, id, bytes.length, sha256, offset, maxBytes);
}

function checkWindow(offset: number, maxBytes: number): void {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 1 || maxBytes > RESULT_CHUNK_MAX) {
    throw usage(`--max-bytes must be an integer from 1 to ${RESULT_CHUNK_MAX}`, { maxBytes });
  }
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw usage('--offset must be a non-negative integer (bytes)', { offset });
  }
}

function storedChunk(
  stored: Extract<Stored, { ok: true }>,
  id: string,
  size: number,
  sha256: string,
  offset: number,
  maxBytes: number,
): ResultChunk {
  const task = { id };
  {
    if (offset > size) {
      throw usage(`--offset ${offset} is past the end of the result (${size} bytes)`, { offset, sizeBytes: size });
    }
    // The chunk that reaches the end checks the whole stored result against the row's sha256:
    // hashing it for every chunk would make a 64 KiB read cost the whole spool, and a reader that
    // concatenates chunks learns of a change at the latest with the last one.
    const verifyWhole = () => {
      const actual = stored.hash();
      if (actual !== sha256) {
        throw new XetError(
          'INTEGRITY_MISMATCH',
          `the stored result of task ${task.id} does not hash to its recorded sha256; it changed after it was kept`,
          { task: task.id, expected: sha256, actual },
        );
      }
    };
    if (offset === size) {
      verifyWhole();
      return { text: '', offsetBytes: offset, nextOffsetBytes: size, eof: true, sizeBytes: size, sha256 };
    }
    // One byte past the window tells whether its end falls inside a character; a window smaller
    // than the character at `offset` still returns that whole character (at most 4 bytes), so a
    // reader always moves forward.
    const window = stored.read(offset, Math.max(maxBytes, 4) + 1);
    if (window.length === 0 || isContinuation(window[0])) {
      throw usage(
        `--offset ${offset} is inside a UTF-8 character; offsets must be on a character boundary (a nextOffsetBytes of an earlier read)`,
        { offset, sizeBytes: size },
      );
    }
    let len = boundaryPrefix(window, Math.min(maxBytes, size - offset));
    if (len === 0) len = Math.min(charLength(window[0]), window.length);
    const bytes = window.subarray(0, len);
    const text = decodeStrict(bytes);
    if (text === null) {
      throw new XetError(
        'INTEGRITY_MISMATCH',
        `the stored result of task ${task.id} is not valid UTF-8 at bytes ${offset}..${offset + len}; it changed after it was kept`,
        { task: task.id, offset },
      );
    }
    const next = offset + len;
    if (next === size) verifyWhole();
    return { text, offsetBytes: offset, nextOffsetBytes: next, eof: next === size, sizeBytes: size, sha256 };
  }
}
