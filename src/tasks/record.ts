// Task records (xet.task-record/v1): a handed-over task's record in Git objects, so that its
// result travels with push and fetch. This module owns that layout: building the record commit
// (deterministically: one task, one commit on every machine), publishing the create-once ref
// `refs/xet/tasks/<task-id>`, and reading a record back as hostile (it may have been fetched from
// anyone): sizes before reads, every hash checked, the commit rebuilt from what it holds and
// required to be the very commit the ref names.

import * as crypto from 'node:crypto';
import { XetError } from '../errors';
import { git, gitText, type GitOptions } from '../git/exec';
import { catFileBatch, listRefs } from '../git/plumbing';
import { objectId } from '../git/object-id';
import { repoOpts, type Repo } from '../git/repo';
import { batchCheck, commitParents } from '../handoff/objects';
import { parseTreeObject } from '../git/tree-object';
import { canonicalJson } from '../snapshot/canonical-json';
import { verifyStoredManifest } from './manifest';
import { isTerminal, RESULT_CHUNK_MAX, RESULT_MAX, RESULT_PREVIEW_BYTES } from './model';
import type { TaskRow } from './store';
import { readBytesChunk, readResultChunk, type ResultChunk } from './result';
import { withExistingSidecar } from '../sidecar/db';

export const TASK_RECORD_PREFIX = 'refs/xet/tasks/';
export const TASK_RECORD_SCHEMA = 'xet.task-record/v1';
/** The identity of every record commit (as of handoff commits): never who or where. */
const IDENTITY = 'git xet <git-xet@localhost>';
const TASK_JSON_MAX = 64 * 1024;
const MANIFEST_MAX = 1024 * 1024;
const SMALL_OBJECT_MAX = 64 * 1024;
const TASK_ID_RE = /^[0-9a-f]{16}$/;
const OID_RE = /^[0-9a-f]{40}([0-9a-f]{24})?$/;
const ISO_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

export interface TaskRecord {
  schema: typeof TASK_RECORD_SCHEMA;
  task: string;
  status: string;
  exitCode: number | null;
  exitSignal: string | null;
  errorCode: string | null;
  createdAt: string;
  endedAt: string;
  correlationId: string | null;
  resultSnapshot: string | null;
  result: { sizeBytes: number; sha256: string; source: 'stdout' | 'file' } | null;
  manifestSha256: string;
}

/** A record read back and checked: its fields, the manifest's text and the result's bytes. */
export interface LoadedRecord {
  ref: string;
  commit: string;
  record: TaskRecord;
  manifestJson: string;
  result: Buffer | null;
}

export function taskRecordRef(id: string): string {
  return `${TASK_RECORD_PREFIX}${id}`;
}

const sha256 = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

interface RecordObjects {
  blobs: { name: string; oid: string; bytes: Buffer }[];
  tree: { oid: string; bytes: Buffer };
  commit: { oid: string; bytes: Buffer };
}

/** The objects of a record, with their ids; built by hand (no user identity, clock or gpgSign). */
function recordObjects(
  record: TaskRecord,
  manifestJson: string,
  result: Buffer | null,
  format: Repo['objectFormat'],
): RecordObjects {
  // Tree entries in git's order (byte order of the names; none is a directory).
  const files: [string, Buffer][] = [['manifest.json', Buffer.from(manifestJson, 'utf8')]];
  if (result) files.push(['result', result]);
  files.push(['task.json', Buffer.from(canonicalJson(record), 'utf8')]);
  const blobs = files.map(([name, bytes]) => ({ name, bytes, oid: objectId('blob', bytes, format) }));
  const tree = Buffer.concat(
    blobs.flatMap((b) => [Buffer.from(`100644 ${b.name}\0`, 'utf8'), Buffer.from(b.oid, 'hex')]),
  );
  const treeOid = objectId('tree', tree, format);
  const when = `${Math.floor(Date.parse(record.endedAt) / 1000)} +0000`;
  const commit = Buffer.from(
    [
      `tree ${treeOid}`,
      ...(record.resultSnapshot ? [`parent ${record.resultSnapshot}`] : []),
      `author ${IDENTITY} ${when}`,
      `committer ${IDENTITY} ${when}`,
      '',
      `xet task record: ${record.task}`,
      '',
      `Schema: ${TASK_RECORD_SCHEMA}`,
      '',
    ].join('\n'),
    'utf8',
  );
  return {
    blobs,
    tree: { oid: treeOid, bytes: tree },
    commit: { oid: objectId('commit', commit, format), bytes: commit },
  };
}

/** The record of an ended task, from its row, its manifest and its result bytes (if it kept one). */
export function recordOf(row: TaskRow): TaskRecord {
  return {
    schema: TASK_RECORD_SCHEMA,
    task: row.id,
    status: row.status,
    exitCode: row.exitCode,
    exitSignal: row.exitSignal,
    errorCode: row.errorCode,
    createdAt: row.createdAt,
    endedAt: row.endedAt as string,
    correlationId: row.correlationId,
    resultSnapshot: row.resultSnapshot,
    result:
      row.resultSizeBytes !== null && row.resultSha256 !== null
        ? { sizeBytes: row.resultSizeBytes, sha256: row.resultSha256, source: row.resultSource ?? 'stdout' }
        : null,
    manifestSha256: row.manifestSha256,
  };
}

/** A task that may be handed over with --task: it has ended (its record no longer changes). */
export function checkHandable(row: TaskRow): void {
  if (!isTerminal(row.status) || row.endedAt === null) {
    throw new XetError(
      'RESULT_NOT_AVAILABLE',
      `task ${row.id} has not ended (${row.status}); hand it over once it has (git xet task result --wait)`,
      { task: row.id, status: row.status },
    );
  }
}

/**
 * Write the record's objects and create `refs/xet/tasks/<id>` once. The same commit already there is
 * success; another is REF_IMMUTABLE. `result` must be the bytes the row's sha256 names.
 */
export async function publishTaskRecord(
  row: TaskRow,
  result: Buffer | null,
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<{ ref: string; commit: string; created: boolean }> {
  checkHandable(row);
  const record = recordOf(row);
  if ((record.result === null) !== (result === null) || (result && sha256(result) !== record.result?.sha256)) {
    throw new XetError('INTEGRITY_MISMATCH', `the kept result of task ${row.id} does not match its row`, {
      task: row.id,
    });
  }
  const objs = recordObjects(record, row.manifestJson, result, format);
  const ref = taskRecordRef(row.id);
  const existing = await readRef(ref, opts);
  if (existing === objs.commit.oid) return { ref, commit: existing, created: false };
  if (existing) throw immutable(ref, objs.commit.oid, existing);
  for (const [type, o] of [
    ...objs.blobs.map((b) => ['blob', b] as const),
    ['tree', objs.tree] as const,
    ['commit', objs.commit] as const,
  ]) {
    const oid = await gitText(['hash-object', '-w', '--no-filters', '-t', type, '--stdin'], {
      ...opts,
      input: o.bytes,
    });
    if (oid !== o.oid) {
      throw new XetError('INTEGRITY_MISMATCH', `git stored the task record ${type} as ${oid}, expected ${o.oid}`, {
        type,
        expected: o.oid,
        actual: oid,
      });
    }
  }
  const zero = '0'.repeat(format === 'sha256' ? 64 : 40);
  const r = await git(['update-ref', '-m', 'git xet handoff create --task', ref, objs.commit.oid, zero], {
    ...opts,
    okCodes: [1, 128],
  });
  if (r.code === 0) return { ref, commit: objs.commit.oid, created: true };
  const now = await readRef(ref, opts);
  if (now === objs.commit.oid) return { ref, commit: now, created: false };
  if (now) throw immutable(ref, objs.commit.oid, now);
  throw new XetError('GIT_FAILED', `cannot create ${ref}: ${r.stderr.trim()}`, { ref, stderr: r.stderr });
}

function immutable(ref: string, expected: string, existing: string): XetError {
  return new XetError(
    'REF_IMMUTABLE',
    `${ref} already exists and points to ${existing}, not to this task's record ${expected}; task records are never moved`,
    { ref, expected, existing },
  );
}

async function readRef(ref: string, opts: GitOptions): Promise<string | null> {
  const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', ref], { ...opts, okCodes: [1, 128] });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : null;
}

/** Every record ref here (names chosen by whoever pushed them). */
export async function listTaskRecordRefs(opts: GitOptions): Promise<{ id: string; ref: string; oid: string }[]> {
  return (await listRefs([TASK_RECORD_PREFIX], opts)).map((r) => ({
    id: r.name.slice(TASK_RECORD_PREFIX.length),
    ref: r.name,
    oid: r.oid,
  }));
}

/** The record ref a full or abbreviated task id names here, or null (USAGE when ambiguous). */
export async function findTaskRecord(spec: string, opts: GitOptions): Promise<{ ref: string; oid: string } | null> {
  const s = spec.trim().toLowerCase();
  if (!/^[0-9a-f]{4,16}$/.test(s)) return null;
  const matches = (await listTaskRecordRefs(opts)).filter((r) => TASK_ID_RE.test(r.id) && r.id.startsWith(s));
  if (matches.length > 1) {
    throw new XetError('USAGE', `${spec} is ambiguous: ${matches.length} task records start with it`, {
      task: spec,
      candidates: matches.map((m) => m.id),
    });
  }
  return matches[0] ?? null;
}

function bad(ref: string, why: string): XetError {
  return new XetError('INTEGRITY_MISMATCH', `${ref} is not a valid task record (${why}); it was not used`, {
    ref,
    why,
  });
}

function parseRecord(bytes: Buffer, ref: string): TaskRecord {
  let v: unknown;
  try {
    v = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw bad(ref, 'task.json is not JSON');
  }
  if (canonicalJson(v) !== bytes.toString('utf8')) throw bad(ref, 'task.json is not canonical JSON');
  const r = v as Record<string, unknown>;
  const keys = Object.keys(r).sort().join(',');
  const want =
    'correlationId,createdAt,endedAt,errorCode,exitCode,exitSignal,manifestSha256,result,resultSnapshot,schema,status,task';
  if (keys !== want) throw bad(ref, `task.json has the fields ${keys}`);
  const str = (x: unknown) => typeof x === 'string';
  const nullable = (x: unknown, ok: (y: unknown) => boolean) => x === null || ok(x);
  const res = r.result as Record<string, unknown> | null;
  const fine =
    r.schema === TASK_RECORD_SCHEMA &&
    str(r.task) &&
    TASK_ID_RE.test(r.task as string) &&
    str(r.status) &&
    isTerminal(r.status as TaskRow['status']) &&
    nullable(r.exitCode, Number.isSafeInteger) &&
    nullable(r.exitSignal, str) &&
    nullable(r.errorCode, str) &&
    str(r.createdAt) &&
    ISO_RE.test(r.createdAt as string) &&
    str(r.endedAt) &&
    ISO_RE.test(r.endedAt as string) &&
    nullable(r.correlationId, str) &&
    nullable(r.resultSnapshot, (x) => str(x) && OID_RE.test(x as string)) &&
    str(r.manifestSha256) &&
    /^[0-9a-f]{64}$/.test(r.manifestSha256 as string) &&
    (res === null ||
      (typeof res === 'object' &&
        Object.keys(res).sort().join(',') === 'sha256,sizeBytes,source' &&
        Number.isSafeInteger(res.sizeBytes) &&
        (res.sizeBytes as number) >= 0 &&
        (res.sizeBytes as number) <= RESULT_MAX &&
        str(res.sha256) &&
        /^[0-9a-f]{64}$/.test(res.sha256 as string) &&
        (res.source === 'stdout' || res.source === 'file')));
  if (!fine) throw bad(ref, `task.json does not follow ${TASK_RECORD_SCHEMA}`);
  return v as TaskRecord;
}

/**
 * Read the record `ref` → `oid` without trusting any of it: INTEGRITY_MISMATCH (naming what is
 * wrong) unless the commit is exactly the record its task.json, manifest and result rebuild, for
 * the task its name says.
 */
export async function loadTaskRecord(ref: string, oid: string, opts: GitOptions): Promise<LoadedRecord> {
  if (!OID_RE.test(oid)) throw bad(ref, 'it does not name an object id');
  const head = await catFileBatch([oid, `${oid}^{tree}`], opts, SMALL_OBJECT_MAX);
  if (head.oversized.size) throw bad(ref, `it leads to a ${[...head.oversized.values()][0]}-byte commit or tree`);
  const commit = head.get(oid);
  if (commit?.type !== 'commit') throw bad(ref, 'it does not point to a commit');
  const tree = head.get(`${oid}^{tree}`);
  if (tree?.type !== 'tree') throw bad(ref, 'its commit has no tree');
  const entries = parseTreeObject(tree.data, oid.length / 2).entries;
  const names = entries.map((e) => e.name).join(',');
  if (names !== 'manifest.json,result,task.json' && names !== 'manifest.json,task.json') {
    throw bad(ref, `its tree holds ${names || 'nothing'}, not manifest.json, task.json and (maybe) result`);
  }
  if (entries.some((e) => e.mode !== '100644')) throw bad(ref, 'its tree holds something that is not a plain file');
  const limits: Record<string, number> = {
    'manifest.json': MANIFEST_MAX,
    result: RESULT_MAX,
    'task.json': TASK_JSON_MAX,
  };
  const sizes = await batchCheck(
    entries.map((e) => e.oid),
    opts,
  );
  entries.forEach((e, n) => {
    const s = sizes[n];
    if (!s || s.type !== 'blob') throw bad(ref, `${e.name} is missing or not a file`);
    if (s.size > limits[e.name]) throw bad(ref, `${e.name} is ${s.size} bytes, over its ${limits[e.name]}-byte limit`);
  });
  const blobs = await catFileBatch(
    entries.map((e) => e.oid),
    opts,
    RESULT_MAX,
  );
  const bytesOf = (name: string) => {
    const e = entries.find((x) => x.name === name);
    return e ? Buffer.from(blobs.get(e.oid)?.data ?? Buffer.alloc(0)) : null;
  };
  const record = parseRecord(bytesOf('task.json') as Buffer, ref);
  if (ref !== taskRecordRef(record.task)) throw bad(ref, `it holds the record of task ${record.task}`);
  const manifestJson = (bytesOf('manifest.json') as Buffer).toString('utf8');
  if (sha256(manifestJson) !== record.manifestSha256)
    throw bad(ref, "manifest.json does not hash to task.json's manifestSha256");
  try {
    verifyStoredManifest({ id: record.task, manifestJson, manifestSha256: record.manifestSha256 });
  } catch (e) {
    throw bad(ref, `its manifest: ${(e as Error).message}`);
  }
  const result = bytesOf('result');
  if ((result === null) !== (record.result === null)) throw bad(ref, 'task.json and the tree disagree on a result');
  if (result && record.result) {
    if (result.length !== record.result.sizeBytes)
      throw bad(ref, `the result is ${result.length} bytes, task.json says ${record.result.sizeBytes}`);
    if (sha256(result) !== record.result.sha256) throw bad(ref, "the result does not hash to task.json's sha256");
  }
  const parents = commitParents(commit.data);
  const wantParents = record.resultSnapshot ? [record.resultSnapshot] : [];
  if (parents.join(',') !== wantParents.join(',')) {
    throw bad(ref, `its commit's parents are ${parents.join(', ') || 'none'}, not the result snapshot`);
  }
  // Everything else (identity, date, message) must be exactly as a record is built.
  const format = oid.length === 64 ? 'sha256' : 'sha1';
  if (recordObjects(record, manifestJson, result, format).commit.oid !== oid) {
    throw bad(ref, 'its commit is not the one its contents build');
  }
  return { ref, commit: oid, record, manifestJson, result };
}

/** The whole kept result of a local task (checked against its sha256 by the last chunk), or null. */
export function keptResult(commonDir: string, row: TaskRow): Buffer | null {
  if (row.resultSizeBytes === null || row.resultSha256 === null) return null;
  return withExistingSidecar(commonDir, (db) => {
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const c = readResultChunk(db, commonDir, row, at, RESULT_CHUNK_MAX);
      parts.push(Buffer.from(c.text, 'utf8'));
      if (c.eof) return Buffer.concat(parts);
      at = c.nextOffsetBytes;
    }
  });
}

/**
 * Chunks of the result of the task record `spec` names here (`window` [offset, maxBytes]: that one
 * chunk; null: all of them), with the chunking rules of local results; null when there is no such
 * record. A record that is not what it claims is INTEGRITY_MISMATCH, never served.
 */
export async function recordChunks(
  repo: Repo,
  spec: string,
  window: [number, number] | null,
): Promise<{ id: string; chunks: (ResultChunk & { origin: 'record' })[] } | null> {
  const opts = repoOpts(repo);
  const found = await findTaskRecord(spec, opts);
  if (!found) return null;
  const { record, result } = await loadTaskRecord(found.ref, found.oid, opts);
  if (!result || !record.result) {
    throw new XetError('RESULT_NOT_AVAILABLE', `task ${record.task} kept no result (its record says so)`, {
      task: record.task,
    });
  }
  const sha = record.result.sha256;
  const chunk = (o: number, n: number) => ({
    ...readBytesChunk(result, record.task, sha, o, n),
    origin: 'record' as const,
  });
  if (window) return { id: record.task, chunks: [chunk(window[0], window[1])] };
  const all = [chunk(0, RESULT_CHUNK_MAX)];
  while (!all[all.length - 1].eof) all.push(chunk(all[all.length - 1].nextOffsetBytes, RESULT_CHUNK_MAX));
  return { id: record.task, chunks: all };
}

/** What `task show` prints of a task known here only by its record; null when there is none. */
export async function recordShow(repo: Repo, spec: string) {
  const opts = repoOpts(repo);
  const found = await findTaskRecord(spec, opts);
  if (!found) return null;
  const { record, manifestJson, result, commit, ref } = await loadTaskRecord(found.ref, found.oid, opts);
  const manifest = verifyStoredManifest({ id: record.task, manifestJson, manifestSha256: record.manifestSha256 });
  const { schema, task, manifestSha256, result: kept, ...rest } = record;
  void schema;
  void kept;
  let summary: Record<string, unknown> | null = null;
  if (result && record.result) {
    const head = readBytesChunk(
      result,
      task,
      record.result.sha256,
      0,
      Math.min(RESULT_PREVIEW_BYTES, RESULT_CHUNK_MAX),
    );
    summary = {
      storage: 'record',
      ...record.result,
      preview: head.text,
      truncated: head.nextOffsetBytes < result.length,
      retrievable: true,
    };
  }
  return {
    task: { id: task, ...rest },
    manifest,
    manifestSha256,
    provenance: { baseSnapshot: manifest.baseSnapshot, task, resultSnapshot: record.resultSnapshot, exports: [] },
    result: summary,
    record: { ref, commit },
    origin: 'record' as const,
  };
}
