// git xet archive: a snapshot's files tree (the whole worktree as captured, no .git) as a tar
// stream. This module owns the mapping from tree entries to tar headers (modes, symlinks, empty
// directories, gitlinks as empty directories) and the streaming: one `git cat-file --batch` for all
// blobs, read at the pace the output accepts, so memory stays bounded whatever the file sizes.
// Everything read from the snapshot is checked before use: paths (as for restore), names' encoding,
// each object's type and size against the tree listing, symlink targets' size before reading.

import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import type { Readable, Writable } from 'node:stream';
import type { Header, Pack as TarPack } from 'tar-stream';
import { ChunkList, PACK_READ_FLAGS, readRange, type ReadContext } from '../chunks/reader';
import { chunkedFiles, type ChunkedEntry } from '../chunks/snapshot-files';
import { XetError } from '../errors';
import { git, gitStream, gitText, type GitOptions, type GitStream } from '../git/exec';
import { findRepo, repoOpts } from '../git/repo';
import { checkPathSyntax, checkTreePaths } from './paths';
import { readSnapshot, resolveSnapshotOid } from './store';

export const ARCHIVE_FORMATS = ['tar', 'tar.gz'] as const;
export type ArchiveFormat = (typeof ARCHIVE_FORMATS)[number];
/** Other names accepted for a format (the issue spells gzip'd tar `tgz`). */
const FORMAT_ALIASES: Record<string, ArchiveFormat> = { tgz: 'tar.gz' };

export interface ArchiveOptions {
  cwd: string;
  snapshot: string;
  format?: ArchiveFormat | 'tgz';
  /** Directory every entry is placed under ("DIR" or "DIR/"). */
  prefix?: string;
  /** A file path (written beside it under a temporary name, renamed when complete) or a stream. */
  output: string | Writable;
}

export interface ArchiveResult {
  snapshot: string;
  format: ArchiveFormat;
  prefix: string;
  /** The file written, or null for a stream. */
  output: string | null;
  files: number;
  symlinks: number;
  dirs: number;
  /** Bytes of file content (before tar framing or compression). */
  bytes: number;
  /** The time given to every entry: the snapshot commit's date (no per-file times recorded yet). */
  mtime: string;
}

interface Item {
  path: string;
  kind: 'dir' | 'file' | 'symlink';
  mode: number;
  oid?: string;
  size: number;
  /** A chunked file (its `oid` is the pointer's): reassembled from its chunks. */
  chunked?: ChunkedEntry;
}

// A symlink target longer than PATH_MAX cannot be created anywhere: refused before reading it.
const MAX_LINK_TARGET = 4095;
const MAX_HEADER_LINE = 256;
const WRITE_BATCH = 256 * 1024;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Validates what the user typed; returns the prefix with one trailing slash, or ''. */
export function normalizePrefix(prefix: string | undefined): string {
  if (prefix === undefined || prefix === '') return '';
  const p = prefix.replace(/\/+$/, '');
  try {
    checkPathSyntax(p, '--prefix');
  } catch (e) {
    throw new XetError('USAGE', `--prefix must be a relative directory path: ${(e as Error).message}`, { prefix });
  }
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(p))
    throw new XetError('USAGE', '--prefix must not contain control characters', { prefix });
  return `${p}/`;
}

export async function archive(opts: ArchiveOptions): Promise<ArchiveResult> {
  const asked: string = opts.format ?? 'tar';
  const format = FORMAT_ALIASES[asked] ?? (asked as ArchiveFormat);
  if (!ARCHIVE_FORMATS.includes(format)) {
    throw new XetError(
      'USAGE',
      `unknown archive format ${JSON.stringify(asked)} (use ${[...ARCHIVE_FORMATS, ...Object.keys(FORMAT_ALIASES)].join(', ')})`,
    );
  }
  const prefix = normalizePrefix(opts.prefix);
  const outFile = typeof opts.output === 'string' ? path.resolve(opts.cwd, opts.output) : null;
  if (outFile) checkOutputFile(outFile);

  const repo = await findRepo(opts.cwd, true);
  const gopts = repoOpts(repo);
  const oid = await resolveSnapshotOid(opts.snapshot, gopts);
  const snap = await readSnapshot(oid, gopts);
  const seconds = Number(await gitText(['log', '-1', '--format=%ct', oid, '--'], gopts));
  const mtime = new Date((Number.isFinite(seconds) ? seconds : 0) * 1000);
  const chunked = await chunkedFiles(snap, gopts);
  const items = await listItems(snap.filesTree, snap.manifest.emptyDirs, prefix, gopts, chunked);
  // A lazy copy fetches the chunks it lacks in one batch first (lazy.ts says why).
  if (chunked.size) await (await import('./lazy')).fetchMissingChunks(repo, snap, chunked.values(), gopts);
  const ctx: ReadContext = { git: gopts, format: snap.manifest.git.objectFormat };

  const result: ArchiveResult = {
    snapshot: oid,
    format,
    prefix,
    output: outFile,
    files: 0,
    symlinks: 0,
    dirs: 0,
    bytes: 0,
    mtime: mtime.toISOString(),
  };
  if (!outFile) {
    await writeArchive(items, format, mtime, opts.output as Writable, false, result, ctx);
    return result;
  }
  const tmp = path.join(
    path.dirname(outFile),
    `.${path.basename(outFile)}.xet-archive-${randomBytes(4).toString('hex')}`,
  );
  let fd: number;
  try {
    fd = fs.openSync(tmp, 'wx', 0o644);
  } catch (e) {
    throw new XetError('TARGET_UNUSABLE', `cannot create ${tmp}: ${(e as Error).message}`, { path: outFile });
  }
  // Room for several batches: the next one is built while the last is still being written.
  const stream = fs.createWriteStream('', { fd, highWaterMark: 4 * WRITE_BATCH });
  try {
    await writeArchive(items, format, mtime, stream, true, result, ctx);
    fs.renameSync(tmp, outFile);
  } catch (e) {
    stream.destroy();
    fs.rmSync(tmp, { force: true });
    if (e instanceof XetError) throw e;
    throw new XetError('TARGET_UNUSABLE', `cannot write ${outFile}: ${(e as Error).message}`, { path: outFile });
  }
  return result;
}

function checkOutputFile(file: string): void {
  let st: fs.Stats | null = null;
  try {
    st = fs.statSync(file);
  } catch {
    /* absent: fine */
  }
  if (st && !st.isFile())
    throw new XetError('TARGET_UNUSABLE', `${file} exists and is not a regular file`, { path: file });
  if (!fs.existsSync(path.dirname(file))) {
    throw new XetError('TARGET_UNUSABLE', `directory ${path.dirname(file)} does not exist`, { path: file });
  }
}

/** Every entry of the files tree, the empty directories and the prefix's own directories, in an
 * order where each directory comes before what it holds. */
async function listItems(
  tree: string,
  emptyDirs: string[],
  prefix: string,
  opts: GitOptions,
  chunked: Map<string, ChunkedEntry>,
): Promise<Item[]> {
  const raw = (await git(['ls-tree', '-r', '-t', '-l', '-z', '--full-tree', tree], opts)).stdout;
  const items: Item[] = [];
  let i = 0;
  while (i < raw.length) {
    const nul = raw.indexOf(0, i);
    const rec = raw.subarray(i, nul < 0 ? raw.length : nul);
    i = nul < 0 ? raw.length : nul + 1;
    const tab = rec.indexOf(9);
    let p: string;
    try {
      p = utf8.decode(rec.subarray(tab + 1));
    } catch {
      throw new XetError('PATH_ENCODING', `a file name in the snapshot is not valid UTF-8`, {
        path: rec.subarray(tab + 1).toString('utf8'),
      });
    }
    const [mode, , oid, size] = rec.subarray(0, tab).toString('latin1').split(/ +/);
    if (mode === '040000' || mode === '160000') items.push({ path: p, kind: 'dir', mode: 0o755, size: 0 });
    else if (mode === '120000') items.push({ path: p, kind: 'symlink', mode: 0o777, oid, size: Number(size) });
    else if (mode === '100644' || mode === '100755') {
      const c = chunked.get(p);
      const it: Item = { path: p, kind: 'file', mode: mode === '100755' ? 0o755 : 0o644, oid, size: Number(size) };
      if (c) Object.assign(it, { size: c.pointer.size, chunked: c });
      items.push(it);
    } else throw new XetError('SNAPSHOT_INVALID', `unknown mode ${mode} for ${JSON.stringify(p)} in the files tree`);
  }
  checkTreePaths(
    items.map((it) => ({ path: it.path, type: it.kind === 'dir' ? 'tree' : 'blob' })),
    emptyDirs,
    'the files tree',
  );
  const dirs = new Set(items.filter((it) => it.kind === 'dir').map((it) => it.path));
  const addDir = (d: string) => {
    for (let j = d.indexOf('/'); j >= 0; j = d.indexOf('/', j + 1)) addDir1(d.slice(0, j));
    addDir1(d);
  };
  const addDir1 = (d: string) => {
    if (dirs.has(d)) return;
    dirs.add(d);
    items.push({ path: d, kind: 'dir', mode: 0o755, size: 0 });
  };
  for (const d of emptyDirs) addDir(d);
  for (const it of items) {
    if (it.kind !== 'dir' && (!Number.isSafeInteger(it.size) || it.size < 0)) {
      throw new XetError('SNAPSHOT_INVALID', `no size for ${JSON.stringify(it.path)} in the files tree`);
    }
    it.path = prefix + it.path;
  }
  if (prefix) {
    const p = prefix.slice(0, -1).split('/');
    for (let j = 1; j <= p.length; j++)
      items.push({ path: p.slice(0, j).join('/'), kind: 'dir', mode: 0o755, size: 0 });
  }
  // '/' sorts before every other byte: a directory, then everything inside it.
  const key = (s: string) => s.replace(/\//g, '\0');
  items.sort((a, b) => {
    const ka = key(a.path);
    const kb = key(b.path);
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  });
  return items;
}

async function writeArchive(
  items: Item[],
  format: ArchiveFormat,
  mtime: Date,
  out: Writable,
  ownsOutput: boolean,
  result: ArchiveResult,
  ctx: ReadContext,
): Promise<void> {
  const opts = ctx.git;
  // tar-stream is loaded only here: no other command pays for it.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const tar = require('tar-stream') as typeof import('tar-stream');
  const pack = tar.pack();
  const gzip = format === 'tar.gz' ? zlib.createGzip({ level: 6 }) : null;
  const sink: Writable = gzip ?? out;
  // A file we opened is ended and closed; a stream we were given (stdout) is only flushed.
  const flushed = gzip ? pipeline(gzip, out, { end: ownsOutput }) : Promise.resolve();
  const consumed = (async () => {
    // tar-stream yields a 512-byte header per entry and small bodies: written one by one, a tree
    // of small files costs a system call per chunk. Coalesced into writes of up to 256 KiB.
    let batch: Buffer[] = [];
    let batched = 0;
    const flush = async () => {
      if (!batched) return;
      const buf = batch.length === 1 ? batch[0] : Buffer.concat(batch, batched);
      batch = [];
      batched = 0;
      if (!sink.write(buf)) await once(sink, 'drain');
    };
    for await (const chunk of pack as unknown as AsyncIterable<Buffer>) {
      batch.push(chunk);
      batched += chunk.length;
      if (batched >= WRITE_BATCH) await flush();
    }
    await flush();
    if (gzip) gzip.end();
    else if (ownsOutput)
      await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
    else await new Promise<void>((resolve, reject) => out.write(Buffer.alloc(0), (e) => (e ? reject(e) : resolve())));
  })();
  // Whole blobs come from one `cat-file --batch` per run of them between chunked files (which are
  // read through their own chunk reader): a batch left unread while a large chunked file streams
  // can end, and its stream with it, before its output is read.
  const cats: GitStream[] = [];
  let reader: ByteReader | null = null;
  const startRun = (from: number): ByteReader => {
    const run: Item[] = [];
    for (let j = from; j < items.length && !items[j].chunked; j++) if (items[j].kind !== 'dir') run.push(items[j]);
    const cat = gitStream([...PACK_READ_FLAGS, 'cat-file', '--batch'], {
      ...opts,
      input: run.map((b) => `${b.oid}\n`).join(''),
    });
    cats.push(cat);
    return new ByteReader(cat.stdout as Readable);
  };
  try {
    const producing = (async () => {
      for (let index = 0; index < items.length; index++) {
        const it = items[index];
        const header = { name: it.kind === 'dir' ? `${it.path}/` : it.path, mode: it.mode, mtime, uid: 0, gid: 0 };
        if (it.kind === 'dir') {
          await entry(pack, { ...header, type: 'directory' });
          result.dirs++;
          continue;
        }
        if (it.chunked) {
          reader = null;
          await chunkedEntry(pack, { ...header, type: 'file', size: it.size }, it.chunked, ctx);
          result.files++;
          result.bytes += it.size;
          continue;
        }
        if (it.kind === 'symlink' && it.size > MAX_LINK_TARGET) {
          throw new XetError('SNAPSHOT_INVALID', `symlink ${JSON.stringify(it.path)} has a ${it.size}-byte target`);
        }
        reader ??= startRun(index);
        const line = await reader.line(MAX_HEADER_LINE);
        const [hOid, hType, hSize] = line.split(' ');
        if (hOid !== it.oid || hType !== 'blob' || Number(hSize) !== it.size) {
          throw new XetError(
            'SNAPSHOT_INVALID',
            `object for ${JSON.stringify(it.path)} is not the blob the tree names`,
            {
              expected: `${it.oid} blob ${it.size}`,
              found: line.slice(0, 200),
            },
          );
        }
        if (it.kind === 'symlink') {
          const parts: Buffer[] = [];
          for await (const part of reader.take(it.size)) parts.push(part);
          let target: string;
          try {
            target = utf8.decode(Buffer.concat(parts));
          } catch {
            throw new XetError('PATH_ENCODING', `the target of symlink ${JSON.stringify(it.path)} is not valid UTF-8`);
          }
          if (target === '' || target.includes('\0')) {
            throw new XetError(
              'SNAPSHOT_INVALID',
              `symlink ${JSON.stringify(it.path)} has an empty or NUL-bearing target`,
            );
          }
          await entry(pack, { ...header, type: 'symlink', linkname: target });
          result.symlinks++;
        } else {
          let w!: ReturnType<TarPack['entry']>;
          const written = new Promise<void>((resolve, reject) => {
            w = pack.entry({ ...header, type: 'file', size: it.size }, (e) => (e ? reject(e) : resolve()));
          });
          // Rejected when the pack is destroyed after a failure elsewhere: that failure is reported.
          written.catch(() => undefined);
          for await (const part of reader.take(it.size)) {
            if (!w.write(part)) await new Promise<void>((resolve) => w.once('drain', () => resolve()));
          }
          w.end(undefined);
          await written;
          result.files++;
          result.bytes += it.size;
        }
        if ((await reader.line(1)) !== '') throw new XetError('GIT_FAILED', 'cat-file --batch output is out of step');
      }
      pack.finalize();
    })();
    const outFailed = new Promise<never>((_, reject) => out.once('error', reject));
    await Promise.race([Promise.all([producing, consumed, flushed]), outFailed]);
    await Promise.all(cats.map((c) => c.done));
  } catch (e) {
    for (const c of cats) c.kill();
    pack.destroy();
    if (e instanceof XetError) throw e;
    // The reader went away (EPIPE) or the disk refused: the archive is incomplete.
    throw new XetError('TARGET_UNUSABLE', `cannot write the archive: ${(e as Error).message}`, {
      errno: (e as NodeJS.ErrnoException).code,
    });
  }
}

/** A chunked file's entry: its chunks streamed in (each checked, the whole checked against the
 * pointer's blob id before the entry is complete), at the pace the archive is written. */
async function chunkedEntry(
  pack: TarPack,
  header: Partial<Header> & { name: string; size: number },
  c: ChunkedEntry,
  ctx: ReadContext,
): Promise<void> {
  let w!: ReturnType<TarPack['entry']>;
  const written = new Promise<void>((resolve, reject) => {
    w = pack.entry(header, (e) => (e ? reject(e) : resolve()));
  });
  written.catch(() => undefined);
  const list = await ChunkList.fromPointer(c.pointer, c.path, ctx);
  await readRange(list, 0, c.pointer.size, w as unknown as Writable, ctx);
  w.end(undefined);
  await written;
}

function entry(pack: TarPack, header: Partial<Header> & { name: string }): Promise<void> {
  return new Promise((resolve, reject) => pack.entry(header, (e) => (e ? reject(e) : resolve())));
}

/** Lines and exact byte counts from a stream, pulled on demand (the source waits meanwhile). */
class ByteReader {
  private buf: Buffer = Buffer.alloc(0);
  private readonly it: AsyncIterator<Buffer>;

  constructor(stream: Readable) {
    this.it = stream[Symbol.asyncIterator]();
  }

  private async fill(): Promise<void> {
    const r = await this.it.next();
    if (r.done) throw new XetError('GIT_FAILED', 'cat-file --batch ended early');
    this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
  }

  /** The next line without its LF; at most `max` bytes long. */
  async line(max: number): Promise<string> {
    for (;;) {
      const nl = this.buf.indexOf(10);
      if (nl >= 0 && nl <= max) {
        const s = this.buf.toString('utf8', 0, nl);
        this.buf = this.buf.subarray(nl + 1);
        return s;
      }
      if (nl > max || this.buf.length > max) throw new XetError('GIT_FAILED', 'cat-file --batch: header line too long');
      await this.fill();
    }
  }

  async *take(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (!this.buf.length) await this.fill();
      const part = this.buf.subarray(0, Math.min(left, this.buf.length));
      this.buf = this.buf.subarray(part.length);
      left -= part.length;
      yield part;
    }
  }
}
