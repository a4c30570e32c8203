// git xet cat: the bytes of one file of a snapshot, or of a range of them.
//
// A chunked file reads only the chunks that overlap the range (ChunkList.chunksFor + readRange:
// the list tree, the segments the range touches, those chunks); an ordinary blob is streamed from
// `git cat-file blob`, the bytes before the range skipped as they pass and the stream stopped after
// it. Either way the bytes go out at the pace the output accepts, so memory stays at a few chunks
// (or pipe buffers) whatever the range. In a lazy copy (`restore --from URL --lazy`) the chunks the
// range needs and the repository lacks are fetched from its source first, in one batch.
//
// Output: a stream (the CLI's stdout), a file written atomically (a temporary beside it renamed
// when complete; nothing is left on an error or a cancellation), or the bytes inline in the result
// (MCP and --json without a file: at most INLINE_MAX bytes).

import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { XetError } from '../errors';
import { gitStream, gitZ, type GitOptions } from '../git/exec';
import { objectSizes } from '../git/plumbing';
import { findRepo, repoOpts } from '../git/repo';
import { ChunkList, PACK_READ_FLAGS, readRange, type ReadContext } from '../chunks/reader';
import { parseRange, resolveRange } from '../chunks/range';
import { chunkedFiles } from '../chunks/snapshot-files';
import { readLazy } from '../chunks/source';
import { checkPathSyntax } from './paths';
import { readSnapshot, resolveSnapshotOid } from './store';

/** The most bytes a result carries inline (MCP, --json without -o): 1 MiB, base64 ~1.4 MB of JSON. */
export const INLINE_MAX = 1 << 20;

export interface CatOptions {
  cwd: string;
  /** `<snapshot>:<path>`. */
  target: string;
  /** `--range` as typed (range.ts), or undefined for the whole file. */
  range?: string;
  /** A stream, a file path (written atomically), or 'inline' (the bytes in the result). */
  output: Writable | string | 'inline';
  signal?: AbortSignal;
}

export interface CatResult {
  snapshot: string;
  path: string;
  /** The file's size. */
  size: number;
  /** First byte written. */
  start: number;
  /** One past the last byte written (start + bytes). */
  end: number;
  bytes: number;
  chunked: boolean;
  /** Chunks read (those overlapping the range); 0 for an ordinary blob. */
  chunksRead: number;
  /** Of those, how many a lazy copy fetched from its source first. */
  chunksFetched: number;
  /** The file written, or null. */
  output: string | null;
  /** Inline output: the bytes, as text when they are UTF-8, else base64. */
  content?: string;
  encoding?: 'utf8' | 'base64';
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Split `<snapshot>:<path>`: snapshot names never hold a colon, paths may. */
export function parseTarget(target: string): { snapshot: string; path: string } {
  const colon = target.indexOf(':');
  if (colon <= 0 || colon === target.length - 1) {
    throw new XetError('USAGE', `cat needs <snapshot>:<path>, got ${JSON.stringify(target)}`, { target });
  }
  const p = target.slice(colon + 1).replace(/^(\.\/)+/, '');
  try {
    checkPathSyntax(p, 'cat');
  } catch (e) {
    throw new XetError('USAGE', `cat: ${(e as Error).message}`, { path: p });
  }
  return { snapshot: target.slice(0, colon), path: p };
}

export async function cat(opts: CatOptions): Promise<CatResult> {
  const t = parseTarget(opts.target);
  const spec = opts.range === undefined ? null : parseRange(opts.range);
  const outFile =
    typeof opts.output === 'string' && opts.output !== 'inline' ? path.resolve(opts.cwd, opts.output) : null;
  if (outFile) checkOutputFile(outFile);
  const repo = await findRepo(opts.cwd, true);
  const gopts = repoOpts(repo);
  const oid = await resolveSnapshotOid(t.snapshot, gopts);
  const snap = await readSnapshot(oid, gopts);
  const format = snap.manifest.git.objectFormat;
  const entry = await fileEntry(snap.filesTree, t.path, oid, gopts);
  const chunkedEntry = snap.manifest.chunked?.includes(t.path)
    ? (await chunkedFiles(snap, gopts)).get(t.path)
    : undefined;
  const size = chunkedEntry
    ? chunkedEntry.pointer.size
    : ((await objectSizes([entry.oid], gopts)).get(entry.oid) ?? missingBlob(t.path, entry.oid));
  const { start, end } = resolveRange(spec, size, t.path);
  if (opts.output === 'inline' && end - start > INLINE_MAX) {
    throw new XetError(
      'USAGE',
      `${t.path}: ${end - start} bytes are more than the ${INLINE_MAX} an answer carries inline; ` +
        'ask for a smaller --range, or write them to a file (-o FILE on the command line)',
      { path: t.path, bytes: end - start, max: INLINE_MAX },
    );
  }
  const result: CatResult = {
    snapshot: oid,
    path: t.path,
    size,
    start,
    end,
    bytes: 0,
    chunked: chunkedEntry !== undefined,
    chunksRead: 0,
    chunksFetched: 0,
    output: outFile,
  };

  const write = async (out: Writable): Promise<void> => {
    if (!chunkedEntry) {
      result.bytes = await streamBlob(entry.oid, size, start, end, out, { git: gopts, format, signal: opts.signal });
      return;
    }
    const lazy = readLazy(repo.commonDir);
    const ctx: ReadContext = { git: gopts, format, signal: opts.signal };
    const list = await ChunkList.fromPointer(chunkedEntry.pointer, t.path, ctx);
    const chunks = await list.chunksFor(start, end);
    result.chunksRead = chunks.length;
    if (lazy && chunks.length) {
      const { fetchLacking, offlineGit } = await import('./lazy');
      const offline = offlineGit(repo.objectsDir, format, repo.gitDir);
      try {
        result.chunksFetched = await fetchLacking(repo, chunks, offline.git, gopts, format, opts.signal);
        // Read without git's own promisor fetches: what is still missing is CHUNK_MISSING.
        const offCtx = { ...ctx, git: offline.git };
        result.bytes = await readRange(
          await ChunkList.fromPointer(chunkedEntry.pointer, t.path, offCtx),
          start,
          end,
          out,
          offCtx,
        );
      } finally {
        offline.dispose();
      }
      return;
    }
    result.bytes = await readRange(list, start, end, out, ctx);
  };

  if (opts.output === 'inline') {
    const parts: Buffer[] = [];
    await write(
      new Writable({
        write(chunk: Buffer, _enc, cb) {
          parts.push(chunk);
          cb();
        },
      }),
    );
    const data = Buffer.concat(parts);
    try {
      result.content = utf8.decode(data);
      result.encoding = 'utf8';
    } catch {
      result.content = data.toString('base64');
      result.encoding = 'base64';
    }
    return result;
  }
  if (!outFile) {
    await write(opts.output as Writable);
    return result;
  }
  await writeAtomically(outFile, write, opts.signal);
  return result;
}

/** The files/ entry at a path: a regular file, else USAGE saying what it is. */
async function fileEntry(
  filesTree: string,
  p: string,
  snapshot: string,
  opts: GitOptions,
): Promise<{ mode: string; oid: string }> {
  const recs = await gitZ(['ls-tree', '-z', '--full-tree', filesTree, '--', `:(literal)${p}`], opts);
  for (const rec of recs) {
    const tab = rec.indexOf('\t');
    if (rec.slice(tab + 1) !== p) continue;
    const [mode, type, oid] = rec.slice(0, tab).split(' ');
    if (type === 'blob' && (mode === '100644' || mode === '100755')) return { mode, oid };
    const what = mode === '120000' ? 'a symbolic link' : type === 'tree' ? 'a directory' : `not a file (${mode})`;
    throw new XetError('USAGE', `${p} in snapshot ${snapshot.slice(0, 12)} is ${what}`, { path: p, mode });
  }
  throw new XetError('USAGE', `snapshot ${snapshot.slice(0, 12)} has no file ${p}`, { path: p, snapshot });
}

function missingBlob(p: string, oid: string): never {
  throw new XetError('GIT_FAILED', `${p}: the blob ${oid} is not in this repository`, { path: p, oid });
}

/**
 * Bytes [start, end) of an ordinary blob, streamed from `git cat-file blob`: what precedes the
 * range is skipped as it passes, the stream is stopped once the range is out. A whole-file read is
 * checked against the blob's id (git does not re-hash what it reads).
 */
async function streamBlob(
  oid: string,
  size: number,
  start: number,
  end: number,
  out: Writable,
  ctx: ReadContext,
): Promise<number> {
  if (end <= start) return 0;
  const cat = gitStream([...PACK_READ_FLAGS, 'cat-file', 'blob', oid], ctx.git);
  const abort = (): void => cat.kill();
  ctx.signal?.addEventListener('abort', abort, { once: true });
  const whole = start === 0 && end === size ? createHash(ctx.format).update(`blob ${size}\0`) : null;
  let pos = 0;
  let written = 0;
  try {
    for await (const piece of cat.stdout as AsyncIterable<Buffer>) {
      ctx.signal?.throwIfAborted();
      const from = Math.max(start - pos, 0);
      const to = Math.min(end - pos, piece.length);
      pos += piece.length;
      if (to > from) {
        const part = from === 0 && to === piece.length ? piece : piece.subarray(from, to);
        whole?.update(part);
        written += part.length;
        if (!out.write(part)) await once(out, 'drain', { signal: ctx.signal });
      }
      if (pos >= end) break;
    }
    ctx.signal?.throwIfAborted();
    if (written < end - start) {
      await cat.done;
      throw new XetError('GIT_FAILED', `git cat-file gave ${written} of ${end - start} bytes of ${oid}`, { oid });
    }
  } finally {
    ctx.signal?.removeEventListener('abort', abort);
    cat.kill();
    await cat.done.catch(() => undefined);
  }
  if (whole && whole.digest('hex') !== oid) {
    throw new XetError('INTEGRITY_MISMATCH', `the blob ${oid} does not hash to its id`, { oid });
  }
  return written;
}

function checkOutputFile(file: string): void {
  let st: fs.Stats | null = null;
  try {
    st = fs.statSync(file);
  } catch {
    /* absent: fine */
  }
  if (st && !st.isFile()) {
    throw new XetError('TARGET_UNUSABLE', `${file} exists and is not a regular file`, { path: file });
  }
  if (!fs.existsSync(path.dirname(file))) {
    throw new XetError('TARGET_UNUSABLE', `directory ${path.dirname(file)} does not exist`, { path: file });
  }
}

/** Write through `write` into a temporary beside `file`, renamed onto it when complete; removed on
 * any failure or cancellation (CANCELLED). */
async function writeAtomically(
  file: string,
  write: (out: Writable) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.xet-cat-${randomBytes(4).toString('hex')}`);
  let fd: number;
  try {
    fd = fs.openSync(tmp, 'wx', 0o666);
  } catch (e) {
    throw new XetError('TARGET_UNUSABLE', `cannot create ${tmp}: ${(e as Error).message}`, { path: file });
  }
  const stream = fs.createWriteStream('', { fd, highWaterMark: 1 << 20 });
  let failed: unknown = null;
  stream.on('error', (e) => (failed ??= e));
  try {
    await write(stream);
    stream.end();
    await once(stream, 'close');
    if (failed) throw failed;
    signal?.throwIfAborted();
    fs.renameSync(tmp, file);
  } catch (e) {
    stream.destroy();
    fs.rmSync(tmp, { force: true });
    if (signal?.aborted) throw new XetError('CANCELLED', `cat was cancelled; ${file} was not written`, { path: file });
    if (e instanceof XetError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    throw new XetError(
      code === 'ENOSPC' ? 'DISK_FULL' : 'TARGET_UNUSABLE',
      `cannot write ${file}: ${(e as Error).message}`,
      { path: file },
    );
  }
}
