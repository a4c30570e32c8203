// Turning a list of worktree paths into a tree object, byte for byte, through git's own C paths:
// `update-index` (lstat, stat-cache hits, hashing) against an index file that persists between runs,
// then `write-tree` (whose cache-tree extension makes unchanged directories free). With a persistent
// index this is O(changes) after the first run; with `write: false` no blob is stored (verify, diff).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, gitText, gitZ, joinZ, type GitOptions } from '../git/exec';
import { readLooseObject, writePack, type PackItem } from '../git/pack-writer';
import { diffTrees, lsTree, objectSizes, type TreeChange } from '../git/plumbing';
import { createShadow } from '../git/shadow';
import { blobOid, MetaCollector, serializeFileMeta, type FileMeta } from './filemeta';
import type { PackAdmission } from './capture-allowance';
import {
  chunkLarge,
  CHUNKS_RECORD_SUFFIX,
  grownLarge,
  writeChunkRecord,
  previouslyChunked,
  selectLarge,
  type ChunkedPath,
  type ChunkingSpec,
} from './chunked-scan';

export interface ScanSpec {
  worktree: string;
  objectFormat: 'sha1' | 'sha256';
  /** Where objects are written (blobs when `write`, trees always). */
  objectsDir: string;
  /** Extra object dirs to read from. */
  alternates?: string[];
  /** The index file used as stat cache; created if missing. */
  indexFile: string;
  /** Scratch directory for the shadow git dir. */
  scratchDir: string;
  /** Files and symlinks, relative to worktree, '/'-separated. */
  paths: string[];
  write: boolean;
  /** A files tree whose objects are all stored (an earlier capture): only blobs that differ from
   * it are candidates for storing. */
  previousTree?: string | null;
  /** Blob oids known to be stored (the user's index): with no previous tree, these are not looked up. */
  knownObjects?: Set<string>;
  /** Told when hashing is done and storing begins (a progress line's phases). */
  progress?: (what: string) => void;
  /** Collect file times and hard links (src/snapshot/filemeta.ts); git then hashes each inode once. */
  meta?: boolean;
  /** With `write`: the storage allowance admits the pack before it is written (capture-allowance.ts).
   * The stat cache is then worked on as a copy in the scratch dir and published only once the pack
   * is stored, so a refused capture leaves the repository as it was. */
  admission?: PackAdmission;
  /** More objects for the same pack (the staged tree's new trees), known before it is admitted. */
  extraItems?: Promise<PackItem[]>;
  /** With `write`: store files at or above a size as chunks (src/snapshot/chunked-scan.ts). */
  chunking?: ChunkingSpec | null;
}

/** Without a previous tree, a first capture would look up every blob; past this many unknown ones
 * they are simply packed (a duplicate of an object stored elsewhere costs space, never correctness,
 * and the next repack drops it). */
const LOOKUP_LIMIT = 2000;

export interface ScanResult {
  tree: string;
  /** What changed since the previous tree, when one was used (write mode). */
  changes: TreeChange[] | null;
  /** With `meta`: times and hard links of every file, in tree order. */
  meta: FileMeta | null;
  /** With `meta` and `write`: the stored filemeta blob (in the same pack as the files). */
  metaBlob?: string;
  /** Paths stored as chunks (pointer entries of the tree), with their pointers. */
  chunked: Map<string, ChunkedPath>;
  /** The `chunks/` tree (stored in the same pack), when any file is chunked. */
  chunksTree: string | null;
  /** Distinct chunks of the chunked files; pointers reused from the chunk stat cache (no read). */
  chunkStats: { chunks: number; cacheHits: number; newChunks: number; newChunkBytes: number };
}

export async function scanToTree(given: ScanSpec): Promise<ScanResult> {
  const staged = given.admission ? stageIndex(given.indexFile, given.scratchDir) : null;
  const spec = staged ? { ...given, indexFile: staged } : given;
  const shadow = createShadow({
    dir: spec.scratchDir,
    objectFormat: spec.objectFormat,
    objectsDir: spec.objectsDir,
    worktree: spec.worktree,
    indexFile: spec.indexFile,
    alternates: spec.alternates,
  });
  try {
    const opts = { cwd: spec.worktree, env: shadow.env };
    // A lock left by a killed run: we hold the workspace lock, so nobody else is using this index.
    fs.rmSync(`${spec.indexFile}.lock`, { force: true });
    let previous: string[] = [];
    if (fs.existsSync(spec.indexFile)) {
      try {
        previous = await gitZ(['ls-files', '-z'], opts);
      } catch {
        fs.rmSync(spec.indexFile, { force: true }); // unreadable cache: start cold
      }
    }
    const current = new Set(spec.paths);
    const gone = previous.filter((p) => !current.has(p));
    if (gone.length) {
      await git(['update-index', '--force-remove', '-z', '--stdin'], { ...opts, input: joinZ(gone) });
    }
    const collector = spec.meta ? new MetaCollector(spec.worktree, spec.indexFile, spec.objectFormat) : null;
    let hashPaths = collector ? collector.prepare(spec.paths, previous) : spec.paths;
    // Large files are chunked by us, never hashed by git (chunked-scan.ts); a path chunked last
    // time that is not now loses its pointer entry first, so git hashes it afresh.
    const chunking = spec.write ? (spec.chunking ?? null) : null;
    const wasChunked = previouslyChunked(spec.indexFile);
    const selection = chunking
      ? selectLarge(spec.worktree, spec.indexFile, hashPaths, chunking, spec.objectFormat)
      : null;
    const large = selection?.large ?? new Map<string, fs.BigIntStats>();
    const unchunk = wasChunked.filter((p) => current.has(p) && !large.has(p));
    if (unchunk.length) {
      await git(['update-index', '--force-remove', '-z', '--stdin'], { ...opts, input: joinZ(unchunk) });
    }
    // Chunking turned off: those paths are whole blobs from now on, and a record left in place would
    // send them through the removal above on every capture (publishIndex removes the published one).
    if (spec.write && !chunking && wasChunked.length)
      fs.rmSync(`${spec.indexFile}${CHUNKS_RECORD_SUFFIX}`, { force: true });
    if (large.size) hashPaths = hashPaths.filter((p) => !large.has(p));
    // Git hashes (and stat-caches) every file; nothing is stored yet. Storing is ours: see below.
    await git(['update-index', '--add', '--remove', '--replace', '--info-only', '-z', '--stdin'], {
      ...opts,
      input: joinZ(hashPaths),
    });
    // A deferred path that grew large was just hashed by git; its entry becomes a pointer below.
    if (chunking && selection) {
      for (const [p, st] of grownLarge(spec.worktree, spec.indexFile, selection, chunking, spec.objectFormat)) {
        large.set(p, st);
      }
    }
    // Run on every chunking capture, large files or not: its record says which threshold it used.
    const chunks = chunking
      ? await chunkLarge(spec.worktree, spec.indexFile, large, chunking, spec.objectFormat, opts, opts)
      : null;
    if (chunks) collector?.trust(chunks.stats);
    const meta = collector ? await collector.finish(opts) : null;
    const chunked = chunks?.chunked ?? new Map<string, ChunkedPath>();
    // A hard link of a chunked file is the same pointer (MetaCollector gave it its first path's entry).
    for (const [f, rep] of collector?.linkedPaths() ?? []) {
      const c = chunked.get(rep);
      if (c) chunked.set(f, c);
    }
    const extra = meta && spec.write ? metaItem(meta, spec.objectFormat) : null;
    const result = spec.write
      ? await storeTree(spec, opts, extra, chunked, chunks?.items ?? [])
      : { tree: await gitText(['write-tree', '--missing-ok'], opts), changes: null };
    collector?.saveRecord();
    if (chunks) writeChunkRecord(spec.indexFile, spec.objectFormat, chunks.record);
    if (staged) publishIndex(staged, given.indexFile);
    return {
      ...result,
      meta,
      ...(extra ? { metaBlob: extra.oid } : {}),
      chunked: new Map([...chunked].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))),
      chunksTree: chunks?.chunksTree?.oid ?? null,
      chunkStats: {
        chunks: chunks?.chunkCount ?? 0,
        cacheHits: chunks?.cacheHits ?? 0,
        newChunks: chunks?.newChunks ?? 0,
        newChunkBytes: chunks?.newChunkBytes ?? 0,
      },
    };
  } finally {
    shadow.dispose();
  }
}

const RECORD_SUFFIX = '.meta.json';

/** A working copy of the stat cache (and its filemeta record) in the scratch dir: a hard link, which
 * git never writes through (it writes a new index and renames it), else a copy with the same times
 * (git's racy-entry check compares entries' mtimes with the index's). */
function stageIndex(indexFile: string, scratch: string): string {
  fs.mkdirSync(scratch, { recursive: true });
  const work = path.join(scratch, 'xet-stat-cache.index');
  for (const [from, to] of [
    [indexFile, work],
    [`${indexFile}${RECORD_SUFFIX}`, `${work}${RECORD_SUFFIX}`],
    [`${indexFile}${CHUNKS_RECORD_SUFFIX}`, `${work}${CHUNKS_RECORD_SUFFIX}`],
  ]) {
    try {
      fs.linkSync(from, to);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      fs.copyFileSync(from, to);
      const st = fs.statSync(from);
      fs.utimesSync(to, st.atime, st.mtime);
    }
  }
  return work;
}

/** The stat cache, then its record (a record that does not match its index is ignored: a crash in
 * between costs a full lstat next time, never a wrong answer). */
function publishIndex(work: string, indexFile: string): void {
  if (fs.existsSync(work)) fs.renameSync(work, indexFile);
  for (const suffix of [RECORD_SUFFIX, CHUNKS_RECORD_SUFFIX]) {
    if (fs.existsSync(`${work}${suffix}`)) fs.renameSync(`${work}${suffix}`, `${indexFile}${suffix}`);
    // A chunk record the scan removed (chunking off) goes; one that never existed costs nothing.
    else if (suffix === CHUNKS_RECORD_SUFFIX) fs.rmSync(`${indexFile}${suffix}`, { force: true });
  }
}

export function scratchDir(base: string, what: string): string {
  fs.mkdirSync(base, { recursive: true });
  // The pid says whose it is: a killed capture's leftovers are removed by a later one (leftovers.ts).
  return fs.mkdtempSync(path.join(base, `${what}-${process.pid}-`));
}

/** Trees go to a scratch object dir, then every object the repository lacks (new blobs read from
 * the worktree, new trees) is written as one pack: one file, written with all cores. */
function metaItem(meta: FileMeta, format: 'sha1' | 'sha256'): PackItem {
  const data = serializeFileMeta(meta);
  return { oid: blobOid(data, format), type: 'blob', data };
}

async function storeTree(
  spec: ScanSpec,
  opts: { cwd: string; env: Record<string, string | undefined> },
  extra: PackItem | null,
  chunked: Map<string, ChunkedPath>,
  chunkItems: PackItem[],
): Promise<{ tree: string; changes: TreeChange[] | null }> {
  const scratchObjects = path.join(spec.scratchDir, 'objects');
  fs.mkdirSync(scratchObjects, { recursive: true });
  const env = {
    ...opts.env,
    GIT_OBJECT_DIRECTORY: scratchObjects,
    GIT_ALTERNATE_OBJECT_DIRECTORIES: [spec.objectsDir, ...(spec.alternates ?? [])].join(':'),
  };
  const o = { cwd: opts.cwd, env };
  const tree = await gitText(['write-tree', '--missing-ok'], o);
  const found = await candidateBlobs(tree, spec.previousTree ?? null, o);
  const { changes } = found;
  // Pointers (and their chunks and lists) come as items of their own, never read from the file.
  const blobs = chunked.size ? found.blobs.filter((b) => !chunked.has(b.path)) : found.blobs;
  let unknown = blobs.map((b) => b.oid);
  if (changes === null && spec.knownObjects) unknown = unknown.filter((oid) => !spec.knownObjects?.has(oid));
  // The filemeta blob is looked up with the files' (it is the same as last time when no time changed).
  if (extra) unknown.push(extra.oid);
  const missing =
    changes === null && unknown.length > LOOKUP_LIMIT ? new Set(unknown) : await missingObjects(unknown, o);
  const items: PackItem[] = [];
  if (extra && missing.delete(extra.oid)) items.push(extra);
  if (spec.extraItems) items.push(...(await spec.extraItems));
  items.push(...chunkItems);
  for (const b of blobs) {
    if (!missing.has(b.oid)) continue;
    missing.delete(b.oid);
    items.push({ oid: b.oid, type: 'blob', file: path.join(spec.worktree, b.path), symlink: b.mode === '120000' });
  }
  for (const t of looseObjects(scratchObjects)) items.push(t);
  // The trees are in memory now (items' data) and go into the pack: their loose copies would hold
  // them twice on disk (and a file per directory) while the pack is written.
  fs.rmSync(scratchObjects, { recursive: true, force: true });
  const unique = [...new Map(items.map((i) => [i.oid, i])).values()];
  await spec.admission?.admit(unique.length, () => unique.map(itemSize), spec.scratchDir);
  if (items.length) spec.progress?.(`storing ${items.length} new objects`);
  await writePack(spec.objectsDir, spec.objectFormat, unique, 1, spec.admission?.beforePublish, {
    chunkLevel: spec.chunking?.level,
  });
  return { tree, changes };
}

/** An object's inflated size before it is read: a link's is its target's length, as lstat says. */
function itemSize(i: PackItem): number {
  if (i.data) return i.data.length;
  if (i.range) return i.range.size;
  return i.file ? (fs.lstatSync(i.file, { throwIfNoEntry: false })?.size ?? 0) : 0;
}

interface BlobRef {
  mode: string;
  oid: string;
  path: string;
}

/** Blobs that may be new: those changed since `previous` (O(changes)), else all of them. */
async function candidateBlobs(
  tree: string,
  previous: string | null,
  o: GitOptions,
): Promise<{ blobs: BlobRef[]; changes: TreeChange[] | null }> {
  const out: BlobRef[] = [];
  if (previous && (await git(['cat-file', '-e', `${previous}^{tree}`], { ...o, okCodes: [1, 128] })).code === 0) {
    const changes = await diffTrees(previous, tree, o);
    for (const c of changes) {
      if (c.newMode !== '000000' && c.newMode !== '160000') out.push({ mode: c.newMode, oid: c.newOid, path: c.path });
    }
    return { blobs: out, changes };
  }
  for (const e of await lsTree(tree, o)) if (e.type === 'blob') out.push({ mode: e.mode, oid: e.oid, path: e.path });
  return { blobs: out, changes: null };
}

async function missingObjects(oids: string[], o: GitOptions): Promise<Set<string>> {
  const present = await objectSizes(oids, o);
  return new Set(oids.filter((oid) => !present.has(oid)));
}

/** Every loose object in a scratch object dir (the trees write-tree just made). */
export function looseObjects(dir: string): PackItem[] {
  const out: PackItem[] = [];
  for (const sub of fs.readdirSync(dir)) {
    if (!/^[0-9a-f]{2}$/.test(sub)) continue;
    for (const name of fs.readdirSync(path.join(dir, sub))) {
      const { type, data } = readLooseObject(path.join(dir, sub, name));
      out.push({ oid: sub + name, type, data });
    }
  }
  return out;
}
