// Capture's files tree in one pass (issue 14): every file that the stat cache cannot vouch for is
// opened, read, hashed and, when it is new, deflated into the capture's pack, once, by worker
// threads on every core (src/git/file-scan.ts); the trees are built in memory (tree-builder.ts)
// and go into the same pack; the stat cache for the next capture is written from the stat data
// taken while each file was read (index-writer.ts), with no second read by git.
//
// Which objects are stored: a shared set (oid-set.ts) starts with what the repository is known to
// hold (the previous capture's entries when a ref still holds its tree, else the base tree's; the
// user's index), and the first thread to add an id packs it.
//
// When few files are read (a re-capture, a small tree, a branch switched back), the pass only
// hashes: the ids nothing vouches for are looked up in the repository (one cat-file), and only the
// missing ones are read again and packed, so content that is already stored (an older version
// checked out again, say) is not stored twice. Past LOOKUP_LIMIT files the pass packs as it reads:
// an object held somewhere else in the repository may then be stored again; that costs space,
// never correctness, and the next repack drops it. Under a storage allowance with a limit the pack
// must be admitted before any of it is written, so there the pass only hashes too. Either way a
// file read again must still hash to what it did, else WORKTREE_CHANGED.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, type GitOptions } from '../git/exec';
import { BIG_FILE_BYTES, FileState, scanBatch, type ScanDone, type ScanJob } from '../git/file-scan';
import {
  canonicalMode,
  serializeCacheTree,
  serializeIndex,
  STAT,
  STAT_BYTES,
  statBlockInto,
  type IndexEntries,
} from '../git/index-writer';
import { SharedOidSet } from '../git/oid-set';
import { PackStream, WorkerPool } from '../git/pack-stream';
import type { PackItem } from '../git/pack-writer';
import { lsTree, objectSizes } from '../git/plumbing';
import { buildTrees, joinNames, type TreeEntries } from '../git/tree-builder';
import { chunkLevelFor, DEFAULT_CHUNK_COMPRESSION } from '../chunks/compression';
import {
  chunkFiles,
  usableChunkRecord,
  type ChunkedPath,
  type ChunkingResult,
  type ChunkingSpec,
} from './chunked-scan';
import {
  FILEMETA_PARTED_MIN_ENTRIES,
  linkRanks,
  pathCuts,
  storedFileMeta,
  type FileMetaColumns,
  type FileMetaCounts,
} from './filemeta';
import { loadStatCache, STAT_CACHE_SCHEMA, writeStatCache, type StatCache, type StatCacheRecord } from './stat-cache';
import type { PackAdmission } from './capture-allowance';
import { absent, lstatMany, ROW, STAT_ROW } from '../git/lstat-many';
import { REUSED, reuseUnchanged, sameAsEntry } from './stat-reuse';
import type { LstatHeadStart } from './lstat-head-start';
import { heldLocally } from '../git/object-presence';
import { tracePhase } from '../testing/trace';
import { orderedFinder } from './ordered-find';
import { faultPoint } from '../testing/fault-points';
import { copyBytes } from '../git/copy-bytes';
import { CAPTURE_KEEP_PREFIX } from './leftovers';
import type { CaptureMemos } from './capture-memos';

export interface CaptureFilesSpec {
  worktree: string;
  objectFormat: 'sha1' | 'sha256';
  objectsDir: string;
  /** The stat cache: read, and replaced once the pack is published. */
  indexFile: string;
  /** Files and symlinks, relative to the worktree, '/'-separated. */
  paths: string[];
  /** A files tree all of whose objects are stored (the worktree's last capture, else the newest
   * snapshot's), held by a ref. */
  previousTree?: string | null;
  /** The filemeta entry of that snapshot (so every object of it is stored). */
  previousFileMeta?: string | null;
  /** Blob ids known to be stored (the user's index). */
  knownObjects?: Set<string>;
  progress?: (what: string) => void;
  admission?: PackAdmission;
  /** More objects for the same pack (the staged tree's new trees). */
  extraItems?: Promise<PackItem[]>;
  chunking?: ChunkingSpec | null;
  /** Git options for the object lookups (cat-file, ls-tree) against `objectsDir`. */
  gitOptions: GitOptions;
  /** The capture's scratch directory: not charged to the allowance (it goes when the capture ends). */
  scratchDir?: string;
  /** A resident process's lstat of the last capture's paths, begun before the walk. */
  headStart?: LstatHeadStart | null;
  /** A resident process's memos of this worktree's last capture (capture-memos.ts). */
  memos?: CaptureMemos | null;
  /** Leave the stat cache's write to the caller (`statCacheWrite`): a resident process makes it
   * after its reply, still under the capture's locks. */
  deferStatCache?: boolean;
}

export interface CaptureFilesResult {
  tree: string;
  meta: FileMetaCounts;
  /** The snapshot's `filemeta` entry: a blob, or a tree of parts (filemeta.ts). */
  filemeta: { oid: string; parted: boolean };
  chunked: Map<string, ChunkedPath>;
  chunksTree: string | null;
  chunkStats: { chunks: number; cacheHits: number; newChunks: number; newChunkBytes: number };
  totals: { files: number; bytes: number; symlinks: number };
  /** Objects this capture packed (0: nothing new). */
  packed: number;
  /** The pack's `.keep` (PackStream.finish): the capture removes it once its ref holds the objects. */
  packKept?: string;
  /** A captured path's size as this run saw it (lstat, or the bytes read); undefined when the
   * path is not in the tree (gone, a directory now, or never given). */
  sizeOf(path: string): number | undefined;
  /** With `deferStatCache`: writes the stat cache for the next capture (not yet written). */
  statCacheWrite?: () => void;
}

/** Below this a file can never have been stored as chunks (xet.chunk.threshold's minimum): its
 * cached entry is a plain blob whatever the cache's record says. */
const MIN_CHUNK_THRESHOLD = 64 * 1024;
/** Work that does not pay for starting worker threads is done in this thread. */
const PARALLEL_MIN_FILES = 64;
const PARALLEL_MIN_BYTES = 4 * 1024 * 1024;
const BATCH_FILES = 192;
/** Up to this many files read (and about this many bytes), the ids are looked up before packing. */
const LOOKUP_LIMIT = 2000;
const LOOKUP_BYTES = 64 * 1024 * 1024;
const BATCH_BYTES = 2 * 1024 * 1024;
/** From this many bytes to read (16 KiB a file where no stat cache knows their sizes), files are
 * deflated with igzip (zlib-fast.ts): the time saved outweighs ~6% more bytes. Below it (a few
 * edits, the objects a handoff pushes) they keep libdeflate's smaller streams. */
const FAST_DEFLATE_MIN_BYTES = 32 * 1024 * 1024;

const enum Slot {
  /** To be read. */
  Read = 0,
  /** The stat cache's entry stands (not read). The value stat-reuse.ts's pass writes (REUSED). */
  Reused = 1,
  Vanished = 2,
  /** Chunked (or a clean tracked file too large to hold: hashed in pieces). */
  Large = 3,
  /** A hard link whose content is its inode's first path's. */
  Follower = 4,
  Done = 5,
}
// reuseUnchanged marks what it decides with REUSED: it must be Reused.
if ((Slot.Reused as number) !== REUSED) throw new Error('capture-files: Slot.Reused is not REUSED');

/** The last capture's walked paths, sorted and joined: a resident process's next capture of the
 * same worktree usually walks the very same paths (its watch replays them, the same strings in the
 * same order), and sorting and encoding 34,000 of them cost ~35 ms. Compared element by element. */
interface SortedPaths {
  walked: string[];
  sorted: string[];
  names: Buffer | undefined;
  /** Whether `<` on the strings is their byte order (no surrogate pairs): a binary search may use it. */
  utf16Order: boolean;
}
let lastPaths: SortedPaths | null = null;

// The passes over every position's slot are functions of their own: V8 compiles each once and keeps
// it, where the same loops inside captureFiles ran interpreted at every capture (the function is
// compiled late, at ~200 ms of a thread, and deoptimized again; ~4 ms of a re-capture's 110).

/** The positions whose slot is `s` (with `not`: is not `s`), in order. Counted first, into a typed
 * array of that size: an array of 34,000 numbers is a fresh large object of V8's at every capture
 * (~70 pages to fault in, ~12 µs each here), a typed array's store is malloc's, reused. */
function positionsOf(slot: Uint8Array, s: Slot, not = false): Uint32Array {
  let count = 0;
  for (let i = 0; i < slot.length; i++) if ((slot[i] === s) !== not) count++;
  const out = new Uint32Array(count);
  for (let i = 0, k = 0; k < count; i++) if ((slot[i] === s) !== not) out[k++] = i;
  return out;
}

/** The bytes and symlinks of the files at `final`. */
function totalsOf(final: Uint32Array, size: Float64Array, stat: Buffer): { bytes: number; symlinks: number } {
  let bytes = 0;
  let symlinks = 0;
  for (const i of final) {
    bytes += size[i];
    if (stat.readUInt32BE(i * STAT_BYTES + STAT.mode) === 0o120000) symlinks++;
  }
  return { bytes, symlinks };
}

/** The first position neither done, reused nor vanished (every path ends as one of those), or -1. */
function firstUnsettled(slot: Uint8Array): number {
  for (let i = 0; i < slot.length; i++) {
    const s = slot[i];
    if (s !== Slot.Done && s !== Slot.Reused && s !== Slot.Vanished) return i;
  }
  return -1;
}

function sortedOnce(walked: string[]): SortedPaths {
  const last = lastPaths;
  if (last && last.walked.length === walked.length) {
    let same = true;
    for (let i = 0; i < walked.length && same; i++) same = last.walked[i] === walked[i];
    if (same) return last;
  }
  const { sorted, utf16Order } = byBytes(walked);
  lastPaths = { walked: [...walked], sorted, names: undefined, utf16Order };
  return lastPaths;
}

const SURROGATE = /[\ud800-\udfff]/;

/** The paths sorted by their UTF-8 bytes, and whether that is also their UTF-16 order. */
function byBytes(paths: string[]): { sorted: string[]; utf16Order: boolean } {
  const sorted = [...new Set(paths)].sort();
  // UTF-16 order is byte order except where a surrogate pair meets U+E000..U+FFFF.
  if (sorted.some((p) => SURROGATE.test(p))) {
    const bufs = sorted.map((p) => Buffer.from(p, 'utf8'));
    const idx = bufs.map((_, i) => i).sort((a, b) => Buffer.compare(bufs[a], bufs[b]));
    return { sorted: idx.map((i) => sorted[i]), utf16Order: false };
  }
  return { sorted, utf16Order: true };
}

export async function captureFiles(spec: CaptureFilesSpec): Promise<CaptureFilesResult> {
  const format = spec.objectFormat;
  const hashLen = format === 'sha256' ? 32 : 20;
  // When this run's stat data began to be taken (earlier with a head start whose rows it uses).
  let runStart = Date.now();
  tracePhase('files: load stat cache');
  const cache = loadStatCache(spec.indexFile, format);
  tracePhase('files: classify');
  const once = sortedOnce(spec.paths);
  const paths = once.sorted;
  const n = paths.length;
  const stat = Buffer.alloc(n * STAT_BYTES);
  const oid = Buffer.alloc(n * hashLen);
  const slot = new Uint8Array(n);
  // One buffer for both (the native pass of reuseUnchanged fills them together).
  const nlinkSize = new Float64Array(2 * n);
  const nlink = nlinkSize.subarray(0, n);
  const size = nlinkSize.subarray(n);
  const mtimeSec = new Float64Array(n);
  // Only paths with more than one link have an entry (their device and inode).
  const inode = new Map<number, string>();
  const chunking = spec.chunking ?? null;
  const large = new Map<string, fs.BigIntStats>();
  const largePos = new Map<string, number>(); // a large path's position
  const bigOwned = new Map<number, string>(); // position -> oid, to be deflated in pieces
  const toRead: number[] = [];
  // Every path as UTF-8, each ended by a NUL: encoded once for the lstat batch, the trees and the
  // stat cache (most of a capture's paths are in all three).
  const namesOf = (): Buffer => (once.names ??= joinNames(paths));

  // --- what the stat cache vouches for ---
  const head = spec.headStart;
  let early: Float64Array | null = null;
  if (cache) {
    // The head start's rows, when it lstat'ed exactly these paths.
    early = head?.names && head.names.equals(namesOf()) ? await head.rows : null;
    if (early) runStart = Math.min(runStart, head!.begun);
    tracePhase(early ? 'files: classify (head start)' : 'files: classify (lstat)');
    classify(early);
  } else for (let i = 0; i < n; i++) toRead.push(i);
  head?.keep(namesOf(), n, early !== null);

  function classify(early: Float64Array | null): void {
    const c = cache as StatCache;
    const recordChunked = c.record?.chunks?.files ?? null;
    const buf = c.buf;
    const prefix = spec.worktree.endsWith('/') ? spec.worktree : `${spec.worktree}/`;
    // Every path's lstat in one batch (src/git/lstat-many.ts): exact times, no Stats objects.
    const rows = early ?? lstatMany(spec.worktree, paths, true, namesOf());
    const entryAt = c.lookup(paths, namesOf);
    // The plain case first, for every path at once (stat-reuse.ts); the loop decides the rest.
    const sizeBelow = Math.min(MIN_CHUNK_THRESHOLD, chunking ? chunking.threshold : Infinity);
    reuseUnchanged(rows, entryAt, buf, hashLen, c.racyFrom, sizeBelow, { stat, oid, slot, mtimeSec, nlinkSize });
    // The rest, in order (a pass of its own: this closure is compiled again at every capture).
    for (const i of positionsOf(slot, Slot.Reused, true)) {
      const p = paths[i];
      const r = i * STAT_ROW;
      if (absent(rows, i)) {
        slot[i] = Slot.Vanished;
        continue;
      }
      const mode = canonicalMode(rows[r + ROW.mode]);
      if (mode === 0) {
        slot[i] = Slot.Vanished; // a directory or a fifo now: not a file to capture
        continue;
      }
      const stSize = rows[r + ROW.size];
      nlink[i] = rows[r + ROW.nlink];
      size[i] = stSize;
      if (
        chunking &&
        mode !== 0o120000 &&
        (stSize < 0 || stSize >= chunking.threshold) &&
        !chunking.cleanTracked.has(p) &&
        !stagedInCache(p, entryAt[i], rows, r, mode)
      ) {
        const big = lstatBig(prefix + p);
        if (!big || !big.isFile()) {
          slot[i] = Slot.Vanished;
          continue;
        }
        noteStat(i, big);
        large.set(p, big);
        largePos.set(p, i);
        slot[i] = Slot.Large;
        continue;
      }
      const o = entryAt[i];
      if (o >= 0) {
        if (
          sameAsEntry(buf, o, rows, r, mode) &&
          buf.readUInt32BE(o + STAT.mtime) < c.racyFrom &&
          (stSize < MIN_CHUNK_THRESHOLD || (recordChunked !== null && !Object.hasOwn(recordChunked, p)))
        ) {
          copyBytes(buf, stat, i * STAT_BYTES, o, o + STAT_BYTES);
          copyBytes(buf, oid, i * hashLen, o + STAT_BYTES, o + STAT_BYTES + hashLen);
          mtimeSec[i] = buf.readUInt32BE(o + STAT.mtime);
          if (nlink[i] > 1) {
            // An inode number or device a double cannot hold: the bigint lstat names it exactly.
            const big = rows[r + ROW.ino] < 0 || rows[r + ROW.dev] < 0 ? lstatBig(prefix + p) : null;
            inode.set(i, big ? `${big.dev}:${big.ino}` : `${rows[r + ROW.dev]}:${rows[r + ROW.ino]}`);
          } else inode.delete(i);
          slot[i] = Slot.Reused;
          continue;
        }
      }
      toRead.push(i);
    }
  }

  /** A large tracked file the stat cache holds as its staged blob (what chunking it found last
   * time), unchanged since by that cache's stat data and racy rule: the entry below reuses that
   * blob, as chunking it again would find. (The user's index may call it modified for ever: its
   * stat data is stale after a copy of the tree, until git refreshes it.) */
  function stagedInCache(p: string, o: number, rows: Float64Array, r: number, mode: number): boolean {
    const c = cache as StatCache;
    const recordChunked = c.record?.chunks?.files ?? null;
    if (o < 0 || recordChunked === null || Object.hasOwn(recordChunked, p)) return false;
    const staged = chunking?.staged.get(p);
    if (staged === undefined || !sameAsEntry(c.buf, o, rows, r, mode)) return false;
    if (c.buf.readUInt32BE(o + STAT.mtime) >= c.racyFrom) return false;
    return c.buf.toString('hex', o + STAT_BYTES, o + STAT_BYTES + hashLen) === staged;
  }

  function noteStat(i: number, st: fs.BigIntStats): void {
    statBlockInto(st, stat, i * STAT_BYTES);
    nlink[i] = Number(st.nlink);
    size[i] = Number(st.size);
    const NS = 1_000_000_000n;
    mtimeSec[i] = Number(st.mtimeNs >= 0n || st.mtimeNs % NS === 0n ? st.mtimeNs / NS : st.mtimeNs / NS - 1n);
    if (st.nlink > 1n) inode.set(i, `${st.dev}:${st.ino}`);
    else inode.delete(i);
  }

  // --- which objects the repository is known to hold ---
  tracePhase('files: known objects');
  // The objects of the previous snapshot's filemeta when it is a tree of parts: listed by git now,
  // beside the work below, for a tree large enough that its own filemeta will be in parts.
  const prevMeta = spec.previousFileMeta ?? null;
  const prevMetaObjects =
    prevMeta && n > FILEMETA_PARTED_MIN_ENTRIES
      ? heldFileMetaObjects(prevMeta, spec.objectsDir, spec.gitOptions)
      : null;
  const byRecord = !!cache && !!spec.previousTree && cache.record?.root === spec.previousTree;
  const backed = byRecord || (!!cache && !!spec.previousTree && cacheRoot(cache, format) === spec.previousTree);
  tracePhase(
    `files: cache ${cache ? (backed ? (byRecord ? 'held (record)' : 'held (its tree)') : 'not held') : 'none'}`,
  );
  const reused = positionsOf(slot, Slot.Reused);
  // Without a held cache, the base tree's blobs and trees (and the base itself) are what is known.
  const baseOids =
    !backed && spec.previousTree
      ? [spec.previousTree, ...(await lsTree(spec.previousTree, { ...spec.gitOptions, trees: true })).map((e) => e.oid)]
      : [];
  // Sized for what can go in, counted once: a held cache's ids and the files still to read (or
  // large), else the files (reused or read, never both) and the base. Twice that many slots, each
  // new page of which costs ~10 us on these VMs (docs/DESIGN-NOTES.md "Fresh pages cost"): the sum
  // of the overlapping sources doubled the table (6 MB for this tree) for nothing.
  // A held cache's ids go in only when many files are read: with few (looked up before packing,
  // below), the read blobs are looked for among the cache's ids there instead (cacheHeldBlobs: a
  // ref holds the cache's tree, so its blobs are in the repository, some maybe loose, which the
  // pack lookup does not see), and no tree is a blob. Adding ~34,000 ids took ~9 ms of a daemon
  // re-capture of the bench tree; the look-up among them ~1 ms.
  // The bytes to read (a guess without a cache), and whether so little is read that new ids are
  // looked up before anything is packed: decided here for the known table, and below for the pack.
  const readEstimate = (): number => toRead.reduce((a, i) => a + (cache ? size[i] : 16384), 0);
  const looksUpFirst = (estimate: number): boolean => toRead.length <= LOOKUP_LIMIT && estimate <= LOOKUP_BYTES;
  // (Here, with toRead as it stands; for a held cache it does not change before the pack's own
  // decision below, which therefore comes out the same.)
  const fewFirst = looksUpFirst(readEstimate());
  const cacheIds = backed && cache && !fewFirst ? cache.offsets.length : 0;
  const fromFiles = backed && cache ? cacheIds + toRead.length + large.size : n;
  // The same for the index's ids (every tracked file's staged blob): with a held cache and few files
  // read, the read blobs are looked for in that set where they are looked up (below). Adding them
  // took ~7 ms of a daemon re-capture of a tree whose every file is tracked (34,000 ids).
  const indexIdsApart = backed && !!cache && fewFirst;
  const indexIds = indexIdsApart ? 0 : (spec.knownObjects?.size ?? 0);
  const known = SharedOidSet.create(fromFiles + baseOids.length + indexIds + 4096, hashLen);
  if (!indexIdsApart) for (const o of spec.knownObjects ?? []) known.addHex(o);
  for (const o of baseOids) known.addHex(o);
  if (backed && cache) {
    const { buf, offsets } = cache;
    if (cacheIds) for (let k = 0; k < offsets.length; k++) known.add(buf, offsets[k] + STAT_BYTES);
  } else if (reused.length) {
    // Entries of a cache no held tree vouches for (its snapshot dropped and collected, say): their
    // objects may be gone. The ones the repository lacks are read again.
    const unknown = new Set<string>();
    for (const i of reused)
      if (!known.has(oid, i * hashLen)) unknown.add(oid.toString('hex', i * hashLen, (i + 1) * hashLen));
    const present = await objectSizes(unknown, spec.gitOptions);
    for (const i of reused) {
      const hex = oid.toString('hex', i * hashLen, (i + 1) * hashLen);
      if (unknown.has(hex) && !present.has(hex)) {
        slot[i] = Slot.Read;
        toRead.push(i);
      } else known.add(oid, i * hashLen);
    }
    toRead.sort((a, b) => a - b);
  }

  const limited = spec.admission?.limited ?? false;
  // (toRead as it is now: the branch above may have added to it.)
  const estimate = readEstimate();
  const lookupFirst = looksUpFirst(estimate);
  const twoPass = limited || lookupFirst;
  const mode: 'hash' | 'pack' = twoPass ? 'hash' : 'pack';
  let pack: PackStream | null = null;
  let pool: WorkerPool | null = null;
  const deflateLevel = 1;
  // A capture with much to read deflates it with the faster, larger igzip; one with little (a
  // re-capture after a few edits, what a handoff sends) keeps libdeflate's smaller output.
  const fastDeflate = estimate >= FAST_DEFLATE_MIN_BYTES;
  /** The pack, opened (and, without a limit, admitted) when something may go into it. */
  const ensurePack = async (): Promise<PackStream> => {
    if (!pack) {
      await spec.admission?.admit(1, () => [], spec.scratchDir);
      pack = PackStream.open(spec.objectsDir, format);
    }
    return pack;
  };
  const packedBlobs: { index: number; offset: number; crc: number }[] = [];
  const absorb = (r: ScanDone, at: number[]): void => {
    if (r.error) throw scanError(r.error, spec.worktree);
    const statIn = Buffer.from(r.stat.buffer, r.stat.byteOffset, r.stat.byteLength);
    const oidIn = Buffer.from(r.oid.buffer, r.oid.byteOffset, r.oid.byteLength);
    for (let k = 0; k < at.length; k++) {
      const i = at[k];
      const s = r.state[k] as FileState;
      if (s === FileState.Vanished) {
        slot[i] = Slot.Vanished;
        continue;
      }
      copyBytes(statIn, stat, i * STAT_BYTES, k * STAT_BYTES, (k + 1) * STAT_BYTES);
      nlink[i] = r.nlink[k];
      size[i] = r.size[k];
      mtimeSec[i] = r.mtimeSec[k];
      const linked = r.inode[k];
      if (linked) inode.set(i, linked);
      else inode.delete(i);
      if (s === FileState.Linked) {
        slot[i] = Slot.Follower; // for now: the first path of each inode is read next
        continue;
      }
      if (s === FileState.Large) {
        slot[i] = Slot.Large;
        continue;
      }
      copyBytes(oidIn, oid, i * hashLen, k * hashLen, (k + 1) * hashLen);
      slot[i] = Slot.Done;
      if (s === FileState.Big && r.owned[k]) bigOwned.set(i, oidIn.toString('hex', k * hashLen, (k + 1) * hashLen));
    }
    for (const p of r.packed) packedBlobs.push({ index: at[p.index], offset: p.offset, crc: p.crc });
  };
  /** Read `positions` in batches, on the workers when there are any. */
  const run = async (
    positions: number[],
    o: { deferLinks: boolean; mode: 'hash' | 'pack'; largeAt: number; set: SharedOidSet; expect?: string[] },
  ): Promise<void> => {
    const jobs: ScanJob[] = [];
    const batchPositions: number[][] = [];
    let cur: number[] = [];
    let bytes = 0;
    const flush = () => {
      if (!cur.length) return;
      const at = cur;
      const p = pack as PackStream | null;
      jobs.push({
        kind: 'scan',
        batch: jobs.length,
        format,
        level: deflateLevel,
        fast: fastDeflate,
        root: spec.worktree,
        paths: at.map((i) => paths[i]),
        largeAt: o.largeAt,
        deferLinks: o.deferLinks,
        mode: o.mode,
        ...(o.expect ? { expect: at.map((i) => (o.expect as string[])[i] ?? '') } : {}),
        fd: p ? p.fd : -1,
        end: p ? p.end : new SharedArrayBuffer(8),
        set: o.set.buffers,
      });
      batchPositions.push(at);
      cur = [];
      bytes = 0;
    };
    for (const i of positions) {
      cur.push(i);
      bytes += cache ? size[i] : 16384;
      if (cur.length >= BATCH_FILES || bytes >= BATCH_BYTES) flush();
    }
    flush();
    const w = pool as WorkerPool | null;
    const results = w ? await Promise.all(jobs.map((j) => w.run<ScanDone>(j))) : jobs.map((j) => scanBatch(j));
    results.forEach((r, b) => absorb(r, batchPositions[b]));
  };
  const largeAt = chunking ? chunking.threshold : 0;
  try {
    if (!twoPass && (toRead.length > 0 || large.size > 0)) await ensurePack();
    if (toRead.length >= PARALLEL_MIN_FILES && estimate >= PARALLEL_MIN_BYTES && WorkerPool.size() > 1) {
      pool = new WorkerPool();
    }
    if (toRead.length) spec.progress?.(`reading ${toRead.length} files`);
    tracePhase(`files: read ${toRead.length}`);
    await run(toRead, { deferLinks: true, mode, largeAt, set: known });
    tracePhase('files: links and large');
    // Hard links: the first path of each inode is read; the others are that file.
    const groups = new Map<string, number[]>();
    for (const i of positionsOf(slot, Slot.Follower)) {
      const key = inode.get(i) as string;
      const g = groups.get(key);
      if (g) g.push(i);
      else groups.set(key, [i]);
    }
    const firsts = [...groups.values()].map((g) => g[0]);
    if (firsts.length) await faultPoint('capture:before-links');
    if (firsts.length) await run(firsts, { deferLinks: false, mode, largeAt, set: known });
    // The others of a group whose first path is gone, or is another file now (renamed over while
    // we read: an editor's save, a package manager), are read for themselves.
    const orphans: number[] = [];
    for (const [key, g] of groups) {
      const first = g[0];
      if (slot[first] === Slot.Vanished || (slot[first] !== Slot.Large && inode.get(first) !== key)) {
        orphans.push(...g.slice(1));
      }
    }
    if (orphans.length) await run(orphans, { deferLinks: false, mode, largeAt, set: known });
    // Large files a worker saw (stat-ed, not read): chunk candidates, stat-ed again for the chunker.
    for (const i of positionsOf(slot, Slot.Large)) {
      if (large.has(paths[i])) continue;
      const st = lstatBig(path.join(spec.worktree, paths[i]));
      if (!st || !st.isFile()) {
        slot[i] = Slot.Vanished;
        continue;
      }
      noteStat(i, st);
      large.set(paths[i], st);
      largePos.set(paths[i], i);
    }
    // A clean tracked file is not chunked: its staged blob is in history already (chunked-scan.ts).
    const wholeLarge = [...large.keys()].filter((p) => chunking?.cleanTracked.has(p)).map((p) => largePos.get(p)!);
    for (const i of wholeLarge) large.delete(paths[i]);
    if (wholeLarge.length) await run(wholeLarge, { deferLinks: false, mode, largeAt: 0, set: known });

    // The readers go before the chunker starts its own threads (both at once would add up).
    const readers = pool as WorkerPool | null;
    pool = null;
    await readers?.close();

    // --- chunked files ---
    tracePhase(`files: chunk ${large.size}`);
    let chunks: ChunkingResult | null = null;
    if (chunking) {
      const record = usableChunkRecord(cache?.record?.chunks, chunking.threshold);
      chunks = await chunkFiles(
        spec.worktree,
        large,
        chunking,
        format,
        record,
        spec.gitOptions,
        spec.objectsDir,
        byRecord,
      );
      for (const [p, e] of chunks.entries) {
        const i = paths.indexOf(p);
        if (i < 0) continue;
        noteStat(i, large.get(p) as fs.BigIntStats);
        stat.writeUInt32BE(Number.parseInt(e.mode, 8), i * STAT_BYTES + STAT.mode);
        Buffer.from(e.oid, 'hex').copy(oid, i * hashLen);
        slot[i] = Slot.Done;
      }
    }
    const chunked = chunks?.chunked ?? new Map<string, ChunkedPath>();
    // Followers take their first path's entry (a chunked file's pointer included).
    for (const [key, g] of groups) {
      const first = g[0];
      if (slot[first] === Slot.Vanished) continue;
      if (inode.get(first) !== key && g.slice(1).some((f) => slot[f] === Slot.Follower)) {
        throw new XetError(
          'WORKTREE_CHANGED',
          `${paths[first]} was replaced while it was being captured; capture again`,
          {
            path: paths[first],
          },
        );
      }
      for (const f of g.slice(1)) {
        if (slot[f] !== Slot.Follower) continue;
        oid.copy(oid, f * hashLen, first * hashLen, (first + 1) * hashLen);
        stat.writeUInt32BE(stat.readUInt32BE(first * STAT_BYTES + STAT.mode), f * STAT_BYTES + STAT.mode);
        slot[f] = Slot.Done;
        const c = chunked.get(paths[first]);
        if (c) chunked.set(paths[f], c);
      }
    }
    const lost = firstUnsettled(slot);
    if (lost >= 0) throw new XetError('GIT_FAILED', `capture lost track of ${paths[lost]}`);

    // --- trees, times and links ---
    tracePhase('files: trees and filemeta');
    const final = positionsOf(slot, Slot.Vanished, true);
    const treeInput = treeEntries(final, paths, stat, oid, hashLen, namesOf);
    const built = spec.memos ? spec.memos.trees.build(treeInput, format) : buildTrees(treeInput, format);
    const { counts: meta, columns: metaColumns } = fileMeta(final);
    const stored = storedFileMeta(metaColumns, format, spec.memos?.fileMeta ?? null);
    const metaOid = stored.oid;
    // What this filemeta names (its objects, each once, itself last): the next capture's question
    // about its previous filemeta, answered before it is asked. Only a snapshot a ref holds is asked
    // about, so these are in the repository whenever they are used.
    if (stored.parted) keepFileMetaObjects(spec.objectsDir, metaOid, new Set(stored.objects.map((o) => o.oid)));

    // --- the rest of the pack ---
    const items: PackItem[] = [];
    const oldTrees = backed && cache ? cache.trees : new Set<string>();
    for (const t of built.trees) {
      if (!oldTrees.has(t.oid) && !known.hasHex(t.oid)) items.push({ oid: t.oid, type: 'tree', data: t.data });
    }
    // The previous snapshot's filemeta is stored with all its objects (a ref reaches it): of a tree
    // of parts, only the parts and groups it does not hold are stored (after a few edits, nearly
    // all are its). The record's filemeta alone may have been held only by a snapshot dropped
    // since: it is skipped only when the repository still has it (asked of the object directory
    // itself, object-presence.ts: no git process; but it opens every pack index, so only for this).
    const oldMeta = backed ? cache?.record?.meta : undefined;
    const whole =
      metaOid === prevMeta || (metaOid === oldMeta && heldLocally([metaOid], spec.objectsDir, format).has(metaOid));
    if (!whole) {
      const held = stored.parted && prevMetaObjects ? await prevMetaObjects : new Set<string>();
      for (const o of stored.objects) if (!held.has(o.oid)) items.push(o);
    }
    if (spec.extraItems) items.push(...(await spec.extraItems));
    const chunkItems = chunks?.items ?? [];
    const chunkBytes = chunkItems.reduce((a, it) => a + (it.range ? it.range.size : 0), 0);
    const chunkLevel = chunkLevelFor(chunking?.level ?? DEFAULT_CHUNK_COMPRESSION, chunkBytes);

    if (twoPass) {
      // What the repository lacks is admitted, then written: the blobs read again (each must hash
      // as before).
      const firstOf = new Map<string, number>();
      for (let i = 0; i < n; i++) {
        if (slot[i] !== Slot.Done || chunked.has(paths[i]) || known.has(oid, i * hashLen)) continue;
        const hex = oid.toString('hex', i * hashLen, (i + 1) * hashLen);
        if (indexIdsApart && spec.knownObjects?.has(hex)) continue;
        if (!firstOf.has(hex)) firstOf.set(hex, i);
      }
      if (firstOf.size && backed && cache && !cacheIds) {
        for (const hex of cacheHeldBlobs(firstOf, cache, oid, hashLen)) firstOf.delete(hex);
      }
      if (firstOf.size && firstOf.size <= LOOKUP_LIMIT) {
        tracePhase(`files: look up ${firstOf.size}`);
        for (const hex of heldLocally(firstOf.keys(), spec.objectsDir, format)) firstOf.delete(hex);
      }
      const whole: number[] = [];
      for (const [hex, i] of firstOf) {
        if (size[i] > BIG_FILE_BYTES) bigOwned.set(i, hex);
        else whole.push(i);
      }
      const all = [...items, ...chunkItems];
      const objects = firstOf.size + all.length;
      if (objects && limited) {
        await spec.admission?.admit(
          objects,
          () =>
            [...firstOf.values()].map((i) => size[i]).concat(all.map((it) => it.data?.length ?? it.range?.size ?? 0)),
          spec.scratchDir,
        );
        pack = PackStream.open(spec.objectsDir, format);
      } else if (objects) await ensurePack();
      if (objects) {
        whole.sort((a, b) => a - b);
        if (!pool && whole.length >= PARALLEL_MIN_FILES && WorkerPool.size() > 1) pool = new WorkerPool();
        const expect: string[] = [];
        for (const i of whole) expect[i] = oid.toString('hex', i * hashLen, (i + 1) * hashLen);
        // A set of its own: only what this pass claims is written.
        const claims = SharedOidSet.create(whole.length + 16, hashLen);
        await faultPoint('capture:between-passes');
        await run(whole, { deferLinks: false, mode: 'pack', largeAt: 0, set: claims, expect });
        // The trees already name these files: one gone (or a directory, a fifo) since it was hashed
        // would leave a snapshot naming content it never stored.
        for (const i of whole) {
          if (slot[i] !== Slot.Done) {
            throw new XetError('WORKTREE_CHANGED', `${paths[i]} went away while it was being captured; capture again`, {
              path: paths[i],
            });
          }
        }
      }
    }
    const restItems = [...chunkItems, ...items];
    if (!pack && restItems.length) await ensurePack();
    tracePhase('files: rest of the pack');
    const pk = pack as PackStream | null;
    if (pk) {
      for (const b of packedBlobs) {
        pk.add({ oid: oid.toString('hex', b.index * hashLen, (b.index + 1) * hashLen), offset: b.offset, crc: b.crc });
      }
      // Half way: the files read so far are in; what follows is read again (chunks) or built here.
      await faultPoint('pack:mid-write');
      // Files too big to hold, then chunks, trees and the rest (no worker writes meanwhile).
      for (const [i, hex] of bigOwned) {
        if (!pk.has(hex)) await pk.appendBigFile(hex, path.join(spec.worktree, paths[i]), deflateLevel);
      }
      const rest = restItems.filter((it) => !pk.has(it.oid));
      if (rest.length) {
        if (!pool && chunkBytes >= PARALLEL_MIN_BYTES && WorkerPool.size() > 1) pool = new WorkerPool();
        // The last append: the trailer's hash runs beside it (pack-stream.ts).
        await pk.appendItems(rest, deflateLevel, chunkLevel, pool, true);
      }
      if (pk.entries.length) spec.progress?.(`storing ${pk.entries.length} new objects`);
    }
    const openPool = pool as WorkerPool | null;
    pool = null;
    await openPool?.close();
    tracePhase('files: finish pack');
    const written = pk
      ? await pk.finish(spec.admission?.beforePublish, `${CAPTURE_KEEP_PREFIX}${process.pid}\n`)
      : { objects: 0, kept: undefined };
    tracePhase('files: stat cache');
    pack = null;

    // --- the stat cache for the next capture, published after the pack it names ---
    const record: Omit<StatCacheRecord, 'index'> = {
      schema: STAT_CACHE_SCHEMA,
      since: Math.floor(runStart / 1000) - 1,
      root: built.root,
      meta: metaOid,
      // Without chunking no entry is a pointer: an empty chunk record says so (else every file of
      // 64 KiB or more would be read again next time).
      chunks: chunks ? chunks.record : { schema: 'xet.statcache-chunks/1', startedAt: runStart, files: {} },
    };
    const entries: IndexEntries = { names: treeInput.names, rows: final, stat, oid };
    const statCacheWrite = (): void => {
      fs.mkdirSync(path.dirname(spec.indexFile), { recursive: true });
      const index = serializeIndex(entries, {
        version: 4,
        format,
        extensions: [{ signature: 'TREE', data: serializeCacheTree(built.cacheTree) }],
      });
      writeStatCache(spec.indexFile, index, record, hashLen);
      // Records of the git-written caches of earlier versions (now kept inside the index).
      for (const old of ['.meta.json', '.chunks.json']) fs.rmSync(`${spec.indexFile}${old}`, { force: true });
    };
    if (!spec.deferStatCache) statCacheWrite();

    tracePhase('files: done');
    let byPath: Map<string, number> | undefined;
    let find: ((p: string) => number) | undefined;
    const { bytes, symlinks } = totalsOf(final, size, stat);
    return {
      tree: built.root,
      meta,
      filemeta: { oid: metaOid, parted: stored.parted },
      chunked: new Map([...chunked].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))),
      chunksTree: chunks?.chunksTree?.oid ?? null,
      chunkStats: {
        chunks: chunks?.chunkCount ?? 0,
        cacheHits: chunks?.cacheHits ?? 0,
        newChunks: chunks?.newChunks ?? 0,
        newChunkBytes: chunks?.newChunkBytes ?? 0,
      },
      totals: { files: final.length, bytes, symlinks },
      packed: written.objects,
      packKept: written.kept,
      // (The tree's paths are those not Vanished: no slot becomes Vanished after `final` is made.)
      sizeOf: (p: string) => {
        let at: number;
        if (once.utf16Order) {
          // (A map of every path would cost a resident process ~13 ms a capture for a few lookups;
          // the questions come in the index's order, each search from where the last ended.)
          find ??= orderedFinder(paths);
          at = find(p);
        } else {
          byPath ??= new Map(paths.map((q, i) => [q, i]));
          at = byPath.get(p) ?? -1;
        }
        return at >= 0 && slot[at] !== Slot.Vanished ? size[at] : undefined;
      },
      ...(spec.deferStatCache ? { statCacheWrite } : {}),
    };
  } catch (e) {
    (pack as PackStream | null)?.abort();
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC' || code === 'EDQUOT') {
      throw new XetError('DISK_FULL', `no space left in ${spec.objectsDir} while writing a pack; nothing was kept`, {
        dir: path.join(spec.objectsDir, 'pack'),
      });
    }
    throw e;
  } finally {
    await (pool as WorkerPool | null)?.close();
    // No worker is left that holds it.
    SharedOidSet.recycle(known);
  }

  /** Times and hard links of the captured files, in tree order (filemeta.ts). */
  function fileMeta(final: Uint32Array): { counts: FileMetaCounts; columns: FileMetaColumns } {
    const count = final.length;
    const sec = new Float64Array(count);
    const nsec = new Uint32Array(count);
    let linkTo: Int32Array | null = null;
    let nl: Float64Array | null = null;
    const groups = new Map<string, { k: number; mode: number; oid: string; size: number }>();
    let hardLinks = 0;
    let linkedBytes = 0;
    for (let k = 0; k < count; k++) {
      const i = final[k];
      sec[k] = mtimeSec[i];
      nsec[k] = stat.readUInt32BE(i * STAT_BYTES + STAT.mtimeNs);
      if (nlink[i] <= 1) continue;
      const key = inode.get(i);
      if (!key) continue;
      nl ??= new Float64Array(count);
      nl[k] = nlink[i];
      const mode = stat.readUInt32BE(i * STAT_BYTES + STAT.mode);
      const o = oid.toString('hex', i * hashLen, (i + 1) * hashLen);
      const g = groups.get(key);
      // One inode is one blob; a member that hashed otherwise changed during the capture.
      if (g && g.mode === mode && g.oid === o) {
        linkTo ??= new Int32Array(count).fill(-1);
        linkTo[k] = g.k;
        g.size++;
        hardLinks++;
        linkedBytes += size[i];
      } else if (!g) groups.set(key, { k, mode, oid: o, size: 1 });
    }
    let external: Float64Array | null = null;
    let externalLinks = 0;
    if (nl) {
      const groupSize = new Map<number, number>();
      for (const g of groups.values()) groupSize.set(g.k, g.size);
      for (let k = 0; k < count; k++) {
        if (nl[k] > 1 && (!linkTo || linkTo[k] < 0) && nl[k] > (groupSize.get(k) ?? 1)) {
          external ??= new Float64Array(count);
          external[k] = nl[k];
          externalLinks++;
        }
      }
    }
    // Ranks are written only by a filemeta in parts (filemeta.ts); only entries whose blob a link
    // shares can be another link's first path.
    let linkRank: Int32Array | null = null;
    if (linkTo && count > FILEMETA_PARTED_MIN_ENTRIES) {
      const key = (k: number): string => oid.toString('latin1', final[k] * hashLen, (final[k] + 1) * hashLen);
      const linkedIds = new Set<string>();
      for (let k = 0; k < count; k++) if (linkTo[k] >= 0) linkedIds.add(key(k));
      linkRank = linkRanks(
        linkTo,
        (k) => `${stat.readUInt32BE(final[k] * STAT_BYTES + STAT.mode)}:${key(k)}`,
        (k) => linkedIds.has(key(k)),
      );
    }
    return {
      counts: { hardLinks, externalLinks, linkedBytes },
      columns: {
        count,
        mtimeSec: sec,
        mtimeNsec: nsec,
        cuts: cutsOf(final),
        linkTo,
        linkRank,
        externalNlink: external,
      },
    };
  }

  /** pathCuts of the paths `final` names: a resident process's next capture of the same paths (the
   * very same array, walk.ts replays it) reuses them. */
  function cutsOf(final: Uint32Array): Uint8Array {
    if (final.length <= FILEMETA_PARTED_MIN_ENTRIES) return new Uint8Array(final.length);
    let all = cutsKept.get(paths);
    if (!all || all.length !== paths.length) {
      all = pathCuts(paths);
      cutsKept.set(paths, all);
    }
    if (final.length === paths.length) return all;
    const out = new Uint8Array(final.length);
    for (let k = 0; k < final.length; k++) out[k] = all[final[k]];
    return out;
  }
}

/** Which of the read blobs `firstOf` (hex → a position in `oid`) a stat cache's entries name: ids
 * compared by their first four bytes, then whole. */
function cacheHeldBlobs(firstOf: Map<string, number>, cache: StatCache, oid: Buffer, hashLen: number): string[] {
  const byHead = new Map<number, string[]>();
  for (const [hex, i] of firstOf) {
    const head = oid.readUInt32BE(i * hashLen);
    const list = byHead.get(head);
    if (list) list.push(hex);
    else byHead.set(head, [hex]);
  }
  const { buf, offsets } = cache;
  const held = new Set<string>();
  for (let k = 0; k < offsets.length; k++) {
    const at = offsets[k] + STAT_BYTES;
    const list = byHead.get(buf.readUInt32BE(at));
    if (!list) continue;
    const hex = buf.toString('hex', at, at + hashLen);
    if (list.includes(hex)) held.add(hex);
  }
  return [...held];
}

/** The cut bytes of recent capture path lists (see cutsOf). */
const cutsKept = new WeakMap<readonly string[], Uint8Array>();

function lstatBig(abs: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(abs, { bigint: true });
  } catch {
    return null;
  }
}

/** The files tree a stat cache's entries make (what git's write-tree of it would give). */
function cacheRoot(cache: StatCache, format: 'sha1' | 'sha256'): string | null {
  let parsed: ReturnType<StatCache['parsed']>;
  try {
    parsed = cache.parsed();
  } catch {
    return null; // entries the native parse took and node's refuses: no tree to vouch for them
  }
  const { buf, entries, hashLen } = parsed;
  const paths: string[] = [];
  const modes: number[] = [];
  const oids = Buffer.allocUnsafe(entries.length * hashLen);
  for (const e of entries) {
    if (e.stage !== 0 || e.intentToAdd) return null;
    const mode = buf.readUInt32BE(e.offset + STAT.mode);
    if (mode !== 0o100644 && mode !== 0o100755 && mode !== 0o120000) return null;
    buf.copy(oids, paths.length * hashLen, e.offset + STAT_BYTES, e.offset + STAT_BYTES + hashLen);
    paths.push(e.names.toString('utf8', e.nameStart, e.nameEnd));
    modes.push(mode);
  }
  return buildTrees({ paths, modes, oids }, format).root;
}

/** The tree build's columns for the entries `final` (indexes into the capture's columns), with the
 * paths encoded once (the index is written from the same names). */
function treeEntries(
  final: Uint32Array,
  paths: string[],
  stat: Buffer,
  oid: Buffer,
  hashLen: number,
  namesOf: () => Buffer,
): TreeEntries & { names: Buffer } {
  const modes = new Uint32Array(final.length);
  for (let k = 0; k < final.length; k++) modes[k] = stat.readUInt32BE(final[k] * STAT_BYTES + STAT.mode);
  if (final.length === paths.length) return { paths, modes, oids: oid, names: namesOf() };
  const kept = Array.from(final, (i) => paths[i]);
  const oids = Buffer.allocUnsafe(final.length * hashLen);
  for (let k = 0; k < final.length; k++) oid.copy(oids, k * hashLen, final[k] * hashLen, (final[k] + 1) * hashLen);
  return { paths: kept, modes, oids, names: joinNames(kept) };
}

function scanError(e: NonNullable<ScanDone['error']>, worktree: string): Error {
  if (e.error === 'write') return Object.assign(new Error(e.detail), { code: e.code });
  if (e.error === 'changed') {
    return new XetError(
      'WORKTREE_CHANGED',
      `${e.path} changed while it was being captured (${e.detail}); capture again`,
      {
        path: e.path,
      },
    );
  }
  return new XetError('WORKTREE_CHANGED', `${e.path} could not be read (${e.detail}); capture again`, {
    path: e.path,
    dir: worktree,
  });
}

/** Recent filemeta trees' objects, by object directory and id: what a tree names never changes, and a
 * resident process's next capture asks for the filemeta its last capture built (one git process less). */
const metaObjects = new Map<string, Set<string>>();
const META_KEPT = 4;

function keepFileMetaObjects(objectsDir: string, filemeta: string, oids: Set<string>): void {
  if (metaObjects.size >= META_KEPT) metaObjects.delete(metaObjects.keys().next().value as string);
  metaObjects.set(`${objectsDir}\0${filemeta}`, oids);
}

/** The objects of a filemeta that a ref reaches (so all are stored): itself and, for a tree of
 * parts, its groups and parts. Empty when git cannot list it: then nothing is assumed held. */
async function heldFileMetaObjects(filemeta: string, objectsDir: string, opts: GitOptions): Promise<Set<string>> {
  const kept = metaObjects.get(`${objectsDir}\0${filemeta}`);
  if (kept) return kept;
  const held = new Set<string>([filemeta]);
  const r = await git(['ls-tree', '-r', '-t', '-z', '--format=%(objectname)', filemeta], {
    ...opts,
    okCodes: [128],
  }).catch(() => null);
  if (!r || r.code !== 0) return new Set();
  for (const oid of r.stdout.toString('latin1').split('\0')) if (oid) held.add(oid);
  keepFileMetaObjects(objectsDir, filemeta, held);
  return held;
}
