// Capture's side of chunked files (docs/FORMAT.md "Chunked files"): which of a scan's paths are
// stored as chunks, their pointers (stat-cache entries with the file's true stat data), and the
// pack items they need (new chunks as range items, list and segment trees, pointer blobs).
//
// Which files: a regular file whose lstat size is at least xet.chunk.threshold, except
//   - a hard link that is not the first path of its inode (followers get the first path's entry, a
//     pointer included);
//   - a tracked file whose bytes are its staged blob: the user's index says it is stat-clean (git's
//     `diff-files` does not list it; the file is then hashed as any file is, and the stat cache keeps
//     that to one read), or chunking it found its whole-file id equal to the staged one (a touched
//     but unchanged file; the chunks are dropped). files/ then names the staged blob: no second copy
//     of committed data.
//
// The chunk record (kept in the stat cache's XETC extension, so it is published with the entries
// it describes, by one rename): per chunked path the lstat data (size, mtime and ctime in ns, inode, device), the pointer and its chunk ids.
// A path whose lstat is unchanged and whose mtime is more than a second older than the run that
// recorded it (racy-safe: a write in the same clock tick as that read cannot hide) reuses the pointer
// without reading the file; its pointer and list are checked to be present (a pruned object is a
// miss). A changed file is chunked again; its chunks are first compared with that path's previous
// chunk ids, and only the rest are looked up in the repository (one batch), so only chunks the
// repository lacks are packed.

import { heldLocally } from '../git/object-presence';
import { tracePhase } from '../testing/trace';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitOptions } from '../git/exec';
import { canonicalMode } from '../git/index-writer';
import { statFields, type StatFields } from '../git/index-file';
import type { PackItem } from '../git/pack-writer';
import { objectSizes } from '../git/plumbing';
import { chunkFile, releaseChunkWorkers } from '../chunks/chunk-file';
import { buildChunkList, chunksTree, type TreeObject } from '../chunks/list-tree';
import { parsePointer, pointerOf, serializePointer, type ChunkPointer } from '../chunks/pointer';
import { blobOid } from './filemeta';
import type { ChunkCompression } from '../chunks/compression';

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
  /** The stat data each entry was checked against. */
  stats: Map<string, StatFields>;
  /** Each large path's stat-cache entry: its pointer, or its staged blob when that is its content. */
  entries: Map<string, { mode: string; oid: string }>;
  /** Chunks to be packed, and their bytes. */
  newChunks: number;
  newChunkBytes: number;
  /** The chunk record for the next run (kept in the stat cache: stat-cache.ts). */
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
  files: { [path: string]: CachedFile };
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

/** A path's entry in the record: its own key only (a path such as `constructor` or `__proto__` is a
 * file name, not a property the object inherits). */
function recordedFile(record: ChunkRecord | null, p: string): CachedFile | undefined {
  return record && Object.hasOwn(record.files, p) ? record.files[p] : undefined;
}

/** The last count of distinct chunks over reused files alone: a resident process's re-capture of
 * the same large files counts the same lists again (~2,200 chunk ids a file of the bench's 143 MB,
 * a string each: ~8 ms a capture). */
let lastCount: { lists: string[]; count: number } | null = null;

/** How many distinct chunks the reused files' lists (`hits`, hex ids concatenated) and the chunks
 * of the files chunked now (`fresh`) have together. */
function distinctChunks(hits: string[], fresh: Set<string>, idLength: number): number {
  const same = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!fresh.size && lastCount && same(lastCount.lists, hits)) return lastCount.count;
  const all = new Set(fresh);
  for (const list of hits) for (let i = 0; i < list.length; i += idLength) all.add(list.slice(i, i + idLength));
  if (!fresh.size) lastCount = { lists: hits, count: all.size };
  return all.size;
}

/** The chunk record of a stat cache, if it was made at this threshold (another one says nothing of
 * which files are large). */
export function usableChunkRecord(record: ChunkRecord | undefined, threshold: number): ChunkRecord | null {
  if (!record || record.schema !== 'xet.statcache-chunks/1' || typeof record.files !== 'object') return null;
  return record.threshold === threshold ? record : null;
}

/**
 * Chunk the large paths (or reuse their cached pointers from the stat cache's chunk record) and
 * return their stat-cache entries (the pointer, with the file's stat data) and what must be packed.
 * A path whose content turns out to be its staged blob gets that blob as its entry instead.
 */
export async function chunkFiles(
  worktree: string,
  large: Map<string, fs.BigIntStats>,
  spec: ChunkingSpec,
  format: 'sha1' | 'sha256',
  record: ChunkRecord | null,
  objectOpts: GitOptions,
  /** The object directory objectOpts reads and the capture writes. */
  objectsDir: string,
  /** The record belongs to a files tree a ref holds: its pointers and lists are stored. */
  recordHeld = false,
): Promise<ChunkingResult> {
  const startedAt = Date.now();
  const next: ChunkRecord = {
    schema: 'xet.statcache-chunks/1',
    startedAt,
    threshold: spec.threshold,
    files: {},
  };
  const chunked = new Map<string, ChunkedPath>();
  const items: PackItem[] = [];
  const entries = new Map<string, { mode: string; oid: string }>();
  const stats = new Map<string, StatFields>();
  const allChunks = new Set<string>();
  // The chunk lists of the files reused from the record, in order: counted below.
  const hitLists: string[] = [];
  let cacheHits = 0;
  let newChunkBytes = 0;
  // As git records a file's mode (the owner's execute bit), so a chunked file's mode is the one it
  // would have as a blob.
  const modeOf = (st: fs.BigIntStats): string => (canonicalMode(Number(st.mode)) === 0o100755 ? '100755' : '100644');
  // Cached pointers first: one batched presence check of their pointers and lists.
  const hits = new Map<string, CachedFile>();
  const limit = record ? BigInt(record.startedAt - 1000) * 1_000_000n : 0n;
  for (const [p, st] of large) {
    const c = recordedFile(record, p);
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
    const present = recordHeld ? new Map(want.map((o) => [o, 0])) : await objectSizes(want, objectOpts);
    for (const [p, c] of hits) {
      const ptr = parsed.get(p) as ChunkPointer;
      const pointerOid = blobOid(Buffer.from(c.pointer, 'utf8'), format);
      if (!present.has(pointerOid) || !present.has(ptr.list)) {
        hits.delete(p);
        continue;
      }
      const st = large.get(p) as fs.BigIntStats;
      chunked.set(p, { mode: c.mode, pointerOid, pointer: ptr });
      entries.set(p, { mode: c.mode, oid: pointerOid });
      stats.set(p, statFields(st));
      hitLists.push(c.oids);
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
      entries.set(p, { mode: modeOf(st), oid: cf.blob });
      stats.set(p, statFields(st));
      continue;
    }
    const { list, segments } = buildChunkList(cf.chunks, format);
    const pointer = pointerOf(cf, list.oid);
    const data = serializePointer(pointer);
    const pointerOid = blobOid(data, format);
    const mode = modeOf(st);
    chunked.set(p, { mode, pointerOid, pointer });
    entries.set(p, { mode, oid: pointerOid });
    stats.set(p, statFields(st));
    items.push({ oid: pointerOid, type: 'blob', data });
    for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
    // Chunks this path had last time are stored; the others are looked up below.
    const before = new Set<string>();
    const prev = recordedFile(record, p)?.oids ?? '';
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
  tracePhase(`chunks: look up ${candidates.size}`);
  // In this process (object-presence.ts): a cold capture's chunks are all new, and git's answer
  // "missing" costs a rescan of the pack directory each.
  const present = candidates.size ? heldLocally(candidates, objectsDir, format) : new Set<string>();
  tracePhase('chunks: list');
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
    entries,
    items,
    chunksTree: tree,
    chunkCount: distinctChunks(hitLists, allChunks, format === 'sha256' ? 64 : 40),
    cacheHits,
    newChunks: packed.size,
    newChunkBytes,
    record: next,
  };
}
