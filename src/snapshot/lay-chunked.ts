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
import { ChunkList, readRange, type ReadContext } from '../chunks/reader';
import type { ChunkedEntry } from '../chunks/snapshot-files';
import { findEntry, parseIndex, statFields, writeIndexBuffer, writeStat } from '../git/index-file';
import { assertNoSymlinkBetween } from './lay';

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

/** One chunked file: temporary file in its directory, the chunks streamed in, then the rename. */
export async function writeChunkedFile(worktree: string, e: ChunkedEntry, ctx: ReadContext): Promise<void> {
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
  const fd = fs.openSync(
    tmp,
    fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
    mode,
  );
  const out = fs.createWriteStream('', { fd, highWaterMark: 1 << 20 });
  const failed = new Promise<never>((_, reject) => out.once('error', reject));
  failed.catch(() => undefined);
  let renamed = false;
  try {
    const list = await ChunkList.fromPointer(e.pointer, e.path, ctx);
    // Withheld: the temporary file is renamed only once the whole file hashed to the pointer's blob.
    await Promise.race([readRange(list, 0, e.pointer.size, out, ctx, { withheld: true }), failed]);
    const closed = once(out, 'close');
    out.end();
    await Promise.race([closed, failed]);
    fs.renameSync(tmp, abs);
    renamed = true;
  } finally {
    if (!renamed) {
      out.destroy();
      fs.rmSync(tmp, { force: true });
    }
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
