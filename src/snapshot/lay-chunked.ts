// Laying chunked files (src/chunks/) into a working tree: each is reassembled from its chunks into
// a temporary file beside its path (created exclusively, never through a symlink, with the mode git
// would give it) and renamed into place once the whole file hashed to the pointer's blob id, so a
// failed or killed restore never leaves a half-written file under the real name. Layers above
// (lay.ts) then link, time and record stat data exactly as for files git checked out.

import * as crypto from 'node:crypto';
import { once } from 'node:events';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LocalPacks } from '../chunks/local-packs';
import { chunkFromPack, ChunkList, chunkThroughGit, packsHolding, readRange, type ReadContext } from '../chunks/reader';
import type { ChunkRef } from '../chunks/list-tree';
import type { PackReader } from '../git/pack-reader';
import { XetError } from '../errors';
import type { ChunkedEntry } from '../chunks/snapshot-files';
import { findEntry, parseIndex, statFields, writeIndexBuffer, writeStat } from '../git/index-file';
import { assertNoSymlinkBetween } from './fsutil';
import { finishSparse, HOLE_BLOCK, writeSparse } from './sparse-write';

/** Files reassembled at once: each has its own `cat-file`, and disks like a few writers. */
const PARALLEL = 4;

/** Reassemble `entries` into `worktree` (their parent directories are made as needed). After a
 * failure no file is started, and the failure is reported once the files under way have stopped
 * (each removes its temporary file), so nothing writes into a tree its caller is removing. */
export async function writeChunkedFiles(worktree: string, entries: ChunkedEntry[], ctx: ReadContext): Promise<void> {
  if (!entries.length) return;
  // Chunks straight from the repository's packs (chunks/local-packs.ts), shared by the files.
  const packs = ctx.packs ? null : await LocalPacks.open(ctx.git, ctx.format);
  if (packs) ctx = { ...ctx, packs };
  let next = 0;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (next < entries.length && !failed) {
      const e = entries[next++];
      try {
        await writeChunkedFile(worktree, e, ctx);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  try {
    const results = await Promise.allSettled(Array.from({ length: Math.min(PARALLEL, entries.length) }, worker));
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  } finally {
    packs?.close();
  }
}

/** The chunk ids (hex, joined) of each chunked file this thread has written from its packs: a
 * restore's sealed stat cache records them (restored-cache.ts), and reading its lists again was
 * ~20 ms of the restore's tail on the bench tree. */
const laidChunks = new WeakMap<ChunkedEntry, string>();

/** The chunk ids `e` was written from in this thread (by writeChunkedFile, or the native pass:
 * rememberChunkIds), or undefined. */
export function laidChunkIds(e: ChunkedEntry): string | undefined {
  return laidChunks.get(e);
}

/** Remember the chunk ids `e` was written from (hex, joined in order). */
export function rememberChunkIds(e: ChunkedEntry, ids: string): void {
  laidChunks.set(e, ids);
}

/** One chunked file: temporary file in its directory, the chunks streamed in, then the rename. */
export async function writeChunkedFile(
  worktree: string,
  e: ChunkedEntry,
  ctx: ReadContext,
  /** In a worker thread, where nothing else waits on this one: when the packs hold every chunk,
   * read and write synchronously through one buffer (the stream's fresh buffers and hand-offs to
   * libuv's pool cost about twice the time on the bench tree's 170 MB of chunked files). */
  opts: { sync?: boolean } = {},
): Promise<void> {
  const abs = path.join(worktree, e.path);
  const dir = path.dirname(abs);
  assertNoSymlinkBetween(worktree, dir);
  fs.mkdirSync(dir, { recursive: true });
  // checkout-index --force replaces a directory in the way; so does this.
  const st = fs.lstatSync(abs, { throwIfNoEntry: false });
  if (st?.isDirectory()) fs.rmSync(abs, { recursive: true, force: true });
  const tmp = path.join(dir, `.xet-${crypto.randomBytes(6).toString('hex')}.tmp`);
  // As git creates files: 0777 or 0666, less the umask.
  const mode = e.mode === '100755' ? 0o777 : 0o666;
  let fd: number | null = fs.openSync(
    tmp,
    fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
    mode,
  );
  let out: fs.WriteStream | null = null;
  let renamed = false;
  try {
    const list = await ChunkList.fromPointer(e.pointer, e.path, ctx);
    const chunks = opts.sync && ctx.packs ? await list.chunksFor(0, e.pointer.size) : null;
    const from = chunks && ctx.packs ? packsHolding(chunks, ctx.packs) : null;
    if (chunks && from) {
      await writeFromPacks(fd, list, chunks, from, ctx);
      rememberChunkIds(e, chunks.map((c) => c.oid).join(''));
      const closing = fd;
      fd = null;
      fs.closeSync(closing);
    } else {
      const stream = fs.createWriteStream('', { fd, highWaterMark: 1 << 20 });
      out = stream;
      fd = null; // the stream's now
      const failed = new Promise<never>((_, reject) => stream.once('error', reject));
      failed.catch(() => undefined);
      // Withheld: the temporary file is renamed only once the whole file hashed to the pointer's blob.
      await Promise.race([readRange(list, 0, e.pointer.size, stream, ctx, { withheld: true }), failed]);
      const closed = once(stream, 'close');
      stream.end();
      await Promise.race([closed, failed]);
    }
    fs.renameSync(tmp, abs);
    renamed = true;
  } finally {
    if (!renamed) {
      out?.destroy();
      if (fd !== null) fs.closeSync(fd);
      fs.rmSync(tmp, { force: true });
    }
  }
}

/** Bytes gathered into one write (writeFromPacks): chunks are ~8 KiB. */
const WRITE_BATCH = 1024 * 1024;

/** A chunked file's chunks (`from[i]` holds `chunks[i]`) written to `fd` in order through one
 * buffer, the whole hashed as its blob: INTEGRITY_MISMATCH unless it is the pointer's. */
async function writeFromPacks(
  fd: number,
  list: ChunkList,
  chunks: ChunkRef[],
  from: PackReader[],
  ctx: ReadContext,
): Promise<void> {
  const whole = crypto.createHash(ctx.format).update(`blob ${list.size}\0`);
  const batch = Buffer.allocUnsafe(WRITE_BATCH);
  let used = 0;
  let total = 0;
  let flushed = 0; // the batch's offset in the file
  let written = 0; // past the last byte written (holes are not)
  // Written up to the last whole hole block in the batch unless `all`: the rest moves to the
  // batch's start, so a block of zeros that chunk boundaries split is still seen whole (a hole).
  const flush = (all: boolean): void => {
    const end = all ? used : Math.floor((flushed + used) / HOLE_BLOCK) * HOLE_BLOCK - flushed;
    if (end <= 0) return;
    written = Math.max(written, writeSparse(fd, batch.subarray(0, end), flushed));
    batch.copyWithin(0, end, used);
    used -= end;
    flushed += end;
  };
  for (let i = 0; i < chunks.length; i++) {
    if (chunks[i].offset !== total) {
      throw new XetError('SNAPSHOT_INVALID', `${list.where}: chunk ${i} does not start where the one before ended`, {
        path: list.where,
        chunk: chunks[i].oid,
      });
    }
    const data = chunkFromPack(from[i], chunks[i], list.where) ?? (await chunkThroughGit(chunks[i], ctx, list.where));
    whole.update(data);
    total += data.length;
    if (used + data.length > batch.length) flush(false);
    if (used + data.length > batch.length) {
      // Larger than the batch holds (no chunk is): written as it is.
      flush(true);
      written = Math.max(written, writeSparse(fd, data, flushed));
      flushed += data.length;
    } else {
      data.copy(batch, used);
      used += data.length;
    }
  }
  flush(true);
  finishSparse(fd, written, total);
  if (total !== list.size || whole.digest('hex') !== list.pointer.blob) {
    throw new XetError(
      'INTEGRITY_MISMATCH',
      `${list.where}: the reassembled file does not hash to ${list.pointer.blob}`,
      {
        path: list.where,
        expected: list.pointer.blob,
      },
    );
  }
}

/** An empty file with a chunked file's mode at its path (a lazy restore's stand-in). */
export function writePlaceholder(worktree: string, e: ChunkedEntry): void {
  const abs = path.join(worktree, e.path);
  assertNoSymlinkBetween(worktree, path.dirname(abs));
  fs.mkdirSync(path.dirname(abs), { recursive: true });
  fs.rmSync(abs, { recursive: true, force: true });
  const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW;
  fs.closeSync(fs.openSync(abs, flags, e.mode === '100755' ? 0o777 : 0o666));
}

/** Record the lstat data of `paths` in an index's entries for them (which must name the files on
 * disk as they are), without reading a file. Returns how many were recorded. */
export function recordStat(
  indexFile: string,
  worktree: string,
  paths: Iterable<string>,
  format: 'sha1' | 'sha256',
): number {
  const parsed = parseIndex(indexFile, format);
  let n = 0;
  for (const p of paths) {
    const i = findEntry(parsed, p);
    if (i < 0) continue;
    const st = fs.lstatSync(path.join(worktree, p), { bigint: true, throwIfNoEntry: false });
    if (!st?.isFile()) continue;
    writeStat(parsed.buf, parsed.entries[i].offset, statFields(st));
    n++;
  }
  if (n) writeIndexBuffer(indexFile, parsed);
  return n;
}
