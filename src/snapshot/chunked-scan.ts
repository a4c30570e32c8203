// Capture's side of chunked files (docs/FORMAT.md "Chunked files"): which of a scan's paths are
// stored as chunks, their pointers (entered into the shadow index with `update-index --index-info`,
// with true stat data, before write-tree), and the pack items they need (new chunks as range items,
// list and segment trees, pointer blobs).
//
// Which files: a regular file whose lstat size is at least xet.chunk.threshold, except
//   - a hard link that is not the first path of its inode (MetaCollector's followers get the first
//     path's entry, a pointer included);
//   - a tracked file whose bytes are its staged blob: the user's index says it is stat-clean (git's
//     `diff-files` does not list it; the file is then hashed by git as any file is, and the stat
//     cache keeps that to one read), or chunking it found its whole-file id equal to the staged one
//     (a touched but unchanged file; the chunks are dropped). files/ then names the staged blob: no
//     second copy of committed data.
//
// The chunk stat cache (`<stat-cache index>.chunks.json`, published with the index): per chunked
// path the lstat data (size, mtime and ctime in ns, inode, device), the pointer and its chunk ids.
// A path whose lstat is unchanged and whose mtime is more than a second older than the run that
// recorded it (racy-safe: a write in the same clock tick as that read cannot hide) reuses the pointer
// without reading the file; its pointer and list are checked to be present (a pruned object is a
// miss). A changed file is chunked again; its chunks are first compared with that path's previous
// chunk ids, and only the rest are looked up in the repository (one batch), so only chunks the
// repository lacks are packed.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, joinZ, type GitOptions } from '../git/exec';
import { findEntry, parseIndex, statFields, writeIndexBuffer, writeStat, type StatFields } from '../git/index-file';
import type { PackItem } from '../git/pack-writer';
import { objectSizes } from '../git/plumbing';
import { chunkFile, releaseChunkWorkers } from '../chunks/chunk-file';
import { buildChunkList, chunksTree, type TreeObject } from '../chunks/list-tree';
import { parsePointer, pointerOf, serializePointer, type ChunkPointer } from '../chunks/pointer';
import { blobOid, trailerHex } from './filemeta';
import type { ChunkCompression } from '../chunks/compression';

export const CHUNKS_RECORD_SUFFIX = '.chunks.json';

export interface ChunkingSpec {
  /** Files of this many bytes or more are chunked. */
  threshold: number;
  /** Tracked paths the user's index calls clean (stat-clean stage-0 entries) → their staged blob. */
  cleanTracked: Map<string, string>;
  /** Stage-0 blob of every tracked path (a touched file may still hold it). */
  staged: Map<string, string>;
  /** Deflate level of chunks in the pack, or `auto` (xet.chunk.compression; src/chunks/compression.ts):
   * the pack writer resolves `auto` from the chunk bytes the capture packs (the sum of its range items). */
  level?: ChunkCompression;
}

export interface ChunkedPath {
  mode: string;
  pointerOid: string;
  pointer: ChunkPointer;
}

export interface ChunkingResult {
  /** Every chunked path of the tree (followers of a chunked inode included, added by the caller). */
  chunked: Map<string, ChunkedPath>;
  /** Objects the repository lacks: chunks (range items), trees, pointers, the chunks/ tree. */
  items: PackItem[];
  /** The snapshot's `chunks/` tree, when any file is chunked. */
  chunksTree: TreeObject | null;
  /** Distinct chunks of all chunked files. */
  chunkCount: number;
  /** Paths whose pointer came from the stat cache without reading the file. */
  cacheHits: number;
  /** The stat data each entered entry was checked against (for the filemeta collector). */
  stats: Map<string, StatFields>;
  /** Chunks to be packed, and their bytes. */
  newChunks: number;
  newChunkBytes: number;
  /** The chunk stat cache for the next run: written by `writeChunkRecord` once the index is final. */
  record: ChunkRecord;
}

interface CachedFile {
  size: number;
  mtimeNs: string;
  ctimeNs: string;
  ino: string;
  dev: string;
  mode: string;
  pointer: string;
  /** The chunk ids in file order, concatenated. */
  oids: string;
}

export interface ChunkRecord {
  schema: 'xet.statcache-chunks/1';
  /** ms since the epoch when the run that wrote it started chunking. */
  startedAt: number;
  /** The threshold it chunked at: a cache made at another one says nothing of which files are large. */
  threshold?: number;
  /** The trailer of the index it was published with (`writeChunkRecord`): only a record that belongs
   * to the index in place may vouch that an entry is not a chunked file's pointer. */
  index?: string;
  files: { [path: string]: CachedFile };
}

function readRecord(file: string): ChunkRecord | null {
  try {
    const r = JSON.parse(fs.readFileSync(file, 'utf8')) as ChunkRecord;
    return r.schema === 'xet.statcache-chunks/1' && typeof r.files === 'object' ? r : null;
  } catch {
    return null;
  }
}

function lstatBig(abs: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(abs, { bigint: true });
  } catch {
    return null;
  }
}

function changed(p: string, why: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${p} changed while it was being captured (${why}); capture again`, {
    path: p,
  });
}

/** Chunk candidates found before git hashes anything, and the paths whose size is left to git. */
export interface LargeSelection {
  large: Map<string, fs.BigIntStats>;
  /** Paths the stat cache records as small files, not lstat-ed here (see `grownLarge`), and where
   * their entry (stat data and object id) is in `before`. */
  deferred: Map<string, number>;
  /** The stat cache as it was before git's update-index. */
  before: Buffer | null;
}

const hashLenOf = (format: 'sha1' | 'sha256'): number => (format === 'sha256' ? 32 : 20);

/**
 * Paths (of those git would hash) that are chunk candidates: regular files ≥ threshold, not clean
 * tracked files. A path the stat cache records as a small file, in a cache whose last run chunked at
 * the same threshold, is not lstat-ed: git's `update-index` lstat-s every path anyway and rewrites
 * the entry of any file whose stat data changed, and `grownLarge` looks at those. Skipping the second
 * lstat of every path is most of the cost of a re-capture that finds nothing large changed.
 */
export function selectLarge(
  worktree: string,
  indexFile: string,
  paths: string[],
  spec: ChunkingSpec,
  format: 'sha1' | 'sha256',
): LargeSelection {
  const large = new Map<string, fs.BigIntStats>();
  const deferred = new Map<string, number>();
  const record = readRecord(`${indexFile}${CHUNKS_RECORD_SUFFIX}`);
  // A record that is not the index's own (a crash between publishing the two, an older copy) may
  // miss a chunked path; its pointer entry's 32-bit size could then pass for small (a file of 4 GiB
  // or more): nothing is deferred.
  const own = record?.index !== undefined && record.index === trailerHex(indexFile, hashLenOf(format));
  const cache =
    record && own && record.threshold === spec.threshold
      ? recordedSmall(indexFile, spec.threshold, format, record)
      : null;
  for (const p of paths) {
    if (spec.cleanTracked.has(p)) continue;
    const at = cache?.small.get(p);
    if (at !== undefined) {
      deferred.set(p, at);
      continue;
    }
    const st = lstatBig(path.join(worktree, p));
    if (st && st.isFile() && st.size >= BigInt(spec.threshold)) large.set(p, st);
  }
  return { large, deferred, before: cache?.buf ?? null };
}

/** Stage-0 regular-file entries of the stat cache smaller than the threshold and not chunked. */
function recordedSmall(
  indexFile: string,
  threshold: number,
  format: 'sha1' | 'sha256',
  record: ChunkRecord,
): { buf: Buffer; small: Map<string, number> } | null {
  let parsed;
  try {
    parsed = parseIndex(indexFile, format);
  } catch {
    return null;
  }
  const small = new Map<string, number>();
  for (const e of parsed.entries) {
    if (e.stage !== 0 || (e.mode & 0o170000) !== 0o100000) continue;
    if (parsed.buf.readUInt32BE(e.offset + STAT_SIZE_AT) >= threshold) continue;
    const p = e.path;
    if (!(p in record.files)) small.set(p, e.offset);
  }
  return { buf: parsed.buf, small };
}

/** Where an index entry's 32-bit size is, from the start of its stat data (gitformat-index(5)). */
const STAT_SIZE_AT = 36;
const STAT_BYTES = 40;

/**
 * After `update-index`: the deferred paths that are now large. An entry whose stat data and object
 * id are as they were is a file git's own stat check found unchanged, so it is still the small file
 * a real lstat once found (every path was lstat-ed when it entered the cache, or when it last
 * changed). Git rewrote the entry of every file that changed: those few are lstat-ed. No clock is
 * compared, so a copied tree (every ctime new) or a server's clock cannot mislead it, and a file of
 * 4 GiB or more, whose 32-bit recorded size may look small, is caught by its changed stat data.
 */
export function grownLarge(
  worktree: string,
  indexFile: string,
  sel: LargeSelection,
  spec: ChunkingSpec,
  format: 'sha1' | 'sha256',
): Map<string, fs.BigIntStats> {
  const out = new Map<string, fs.BigIntStats>();
  if (!sel.deferred.size || !sel.before) return out;
  const before = sel.before;
  const width = STAT_BYTES + hashLenOf(format);
  const parsed = parseIndex(indexFile, format);
  for (const [p, was] of sel.deferred) {
    const i = findEntry(parsed, p);
    if (i >= 0) {
      const at = parsed.entries[i].offset;
      if (parsed.buf.compare(before, was, was + width, at, at + width) === 0) continue;
    }
    const st = lstatBig(path.join(worktree, p));
    if (st && st.isFile() && st.size >= BigInt(spec.threshold)) out.set(p, st);
  }
  return out;
}

/** Write the chunk record of this run (chunkLarge's), tied to the index as it is about to be
 * published: after every write to it (the filemeta collector's, write-tree's cache-tree). */
export function writeChunkRecord(indexFile: string, format: 'sha1' | 'sha256', record: ChunkRecord): void {
  const index = trailerHex(indexFile, hashLenOf(format));
  const file = `${indexFile}${CHUNKS_RECORD_SUFFIX}`;
  const tmp = `${file}.${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(index ? { ...record, index } : record));
  fs.renameSync(tmp, file);
}

/** The paths chunked last time (so that one no longer chunked is hashed by git afresh). */
export function previouslyChunked(indexFile: string): string[] {
  return Object.keys(readRecord(`${indexFile}${CHUNKS_RECORD_SUFFIX}`)?.files ?? {});
}

/**
 * Chunk the large paths (or reuse their cached pointers), enter their pointer entries into the
 * shadow index with stat data, and return what must be packed. Paths whose content turns out to be
 * their staged blob are entered with that blob instead (and returned in `asStaged`).
 */
export async function chunkLarge(
  worktree: string,
  indexFile: string,
  large: Map<string, fs.BigIntStats>,
  spec: ChunkingSpec,
  format: 'sha1' | 'sha256',
  opts: GitOptions,
  objectOpts: GitOptions,
): Promise<ChunkingResult> {
  const startedAt = Date.now();
  const record = readRecord(`${indexFile}${CHUNKS_RECORD_SUFFIX}`);
  const next: ChunkRecord = {
    schema: 'xet.statcache-chunks/1',
    startedAt,
    threshold: spec.threshold,
    files: {},
  };
  const chunked = new Map<string, ChunkedPath>();
  const items: PackItem[] = [];
  const lines: string[] = [];
  const stats = new Map<string, StatFields>();
  const allChunks = new Set<string>();
  let cacheHits = 0;
  let newChunkBytes = 0;
  const modeOf = (st: fs.BigIntStats): string => ((Number(st.mode) & 0o111) !== 0 ? '100755' : '100644');
  // Cached pointers first: one batched presence check of their pointers and lists.
  const hits = new Map<string, CachedFile>();
  const limit = record ? BigInt(record.startedAt - 1000) * 1_000_000n : 0n;
  for (const [p, st] of large) {
    const c = record?.files[p];
    if (
      c &&
      c.size === Number(st.size) &&
      c.mtimeNs === String(st.mtimeNs) &&
      c.ctimeNs === String(st.ctimeNs) &&
      c.ino === String(st.ino) &&
      c.dev === String(st.dev) &&
      c.mode === modeOf(st) &&
      st.mtimeNs < limit
    ) {
      hits.set(p, c);
    }
  }
  if (hits.size) {
    const want: string[] = [];
    const parsed = new Map<string, ChunkPointer>();
    for (const [p, c] of hits) {
      const ptr = parsePointer(Buffer.from(c.pointer, 'utf8'), format, p);
      parsed.set(p, ptr);
      want.push(blobOid(Buffer.from(c.pointer, 'utf8'), format), ptr.list);
    }
    const present = await objectSizes(want, objectOpts);
    for (const [p, c] of hits) {
      const ptr = parsed.get(p) as ChunkPointer;
      const pointerOid = blobOid(Buffer.from(c.pointer, 'utf8'), format);
      if (!present.has(pointerOid) || !present.has(ptr.list)) {
        hits.delete(p);
        continue;
      }
      const st = large.get(p) as fs.BigIntStats;
      chunked.set(p, { mode: c.mode, pointerOid, pointer: ptr });
      lines.push(`${c.mode} ${pointerOid}\t${p}`);
      stats.set(p, statFields(st));
      for (let i = 0; i < c.oids.length; i += pointerOid.length) allChunks.add(c.oids.slice(i, i + pointerOid.length));
      next.files[p] = c;
      cacheHits++;
    }
  }
  // The rest are read and chunked, one file at a time (bounded memory).
  const fresh: { p: string; st: fs.BigIntStats; chunks: { offset: number; size: number; oid: string }[] }[] = [];
  const candidates = new Set<string>();
  for (const [p, st] of large) {
    if (hits.has(p)) continue;
    const abs = path.join(worktree, p);
    const cf = await chunkFile(abs, { format, expectSize: Number(st.size) });
    const after = lstatBig(abs);
    if (!after || after.mtimeNs !== st.mtimeNs || after.ctimeNs !== st.ctimeNs || after.size !== st.size) {
      throw changed(p, 'its stat data changed while it was read');
    }
    if (spec.staged.get(p) === cf.blob) {
      // A touched tracked file with its committed bytes: the staged blob, as git would hash it.
      lines.push(`${modeOf(st)} ${cf.blob}\t${p}`);
      stats.set(p, statFields(st));
      continue;
    }
    const { list, segments } = buildChunkList(cf.chunks, format);
    const pointer = pointerOf(cf, list.oid);
    const data = serializePointer(pointer);
    const pointerOid = blobOid(data, format);
    const mode = modeOf(st);
    chunked.set(p, { mode, pointerOid, pointer });
    lines.push(`${mode} ${pointerOid}\t${p}`);
    stats.set(p, statFields(st));
    items.push({ oid: pointerOid, type: 'blob', data });
    for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
    // Chunks this path had last time are stored; the others are looked up below.
    const before = new Set<string>();
    const prev = record?.files[p]?.oids ?? '';
    for (let i = 0; i < prev.length; i += pointerOid.length) before.add(prev.slice(i, i + pointerOid.length));
    for (const c of cf.chunks) {
      allChunks.add(c.oid);
      if (!before.has(c.oid)) candidates.add(c.oid);
    }
    fresh.push({ p, st, chunks: cf.chunks });
    next.files[p] = {
      size: cf.size,
      mtimeNs: String(st.mtimeNs),
      ctimeNs: String(st.ctimeNs),
      ino: String(st.ino),
      dev: String(st.dev),
      mode,
      pointer: data.toString('utf8'),
      oids: cf.chunks.map((c) => c.oid).join(''),
    };
  }
  await releaseChunkWorkers();
  const present = candidates.size ? await objectSizes(candidates, objectOpts) : new Map<string, number>();
  const packed = new Set<string>();
  for (const f of fresh) {
    for (const c of f.chunks) {
      if (!candidates.has(c.oid) || present.has(c.oid) || packed.has(c.oid)) continue;
      packed.add(c.oid);
      newChunkBytes += c.size;
      items.push({
        oid: c.oid,
        type: 'blob',
        file: path.join(worktree, f.p),
        range: { offset: c.offset, size: c.size },
      });
    }
  }
  // Pointer entries into the shadow index, then their stat data (so restore-time tools and the
  // filemeta collector see true times; git itself never re-hashes them: they are not given to it).
  if (lines.length) {
    await git(['update-index', '-z', '--index-info'], { ...opts, input: joinZ(lines) });
    const parsed = parseIndex(indexFile, format);
    for (const [p, s] of stats) {
      const i = findEntry(parsed, p);
      if (i >= 0) writeStat(parsed.buf, parsed.entries[i].offset, s);
    }
    writeIndexBuffer(indexFile, parsed);
  }
  const tree = chunked.size
    ? chunksTree(
        [...chunked.values()].map((c) => c.pointer.list),
        format,
      )
    : null;
  if (tree) items.push({ oid: tree.oid, type: 'tree', data: tree.data });
  return {
    chunked,
    stats,
    items,
    chunksTree: tree,
    chunkCount: allChunks.size,
    cacheHits,
    newChunks: packed.size,
    newChunkBytes,
    record: next,
  };
}
