// Turning a list of worktree paths into a tree object, byte for byte. Capture (`write`) does it in
// one pass of its own (capture-files.ts: each new file read, hashed and packed once, the stat cache
// written from that read). Verify and diff (no `write`) hash through git's own C paths instead:
// `update-index` against a scratch copy of the stat cache, then `write-tree`; nothing is stored.

import type { LstatHeadStart } from './lstat-head-start';
import type { CaptureMemos } from './capture-memos';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, gitText, gitZ, joinZ } from '../git/exec';
import { readLooseObject, type PackItem } from '../git/pack-writer';
import type { TreeChange } from '../git/plumbing';
import { createShadow } from '../git/shadow';
import { MetaCollector, type FileMeta, type FileMetaCounts } from './filemeta';
import type { PackAdmission } from './capture-allowance';
import type { ChunkedPath, ChunkingSpec } from './chunked-scan';
import { captureFiles } from './capture-files';

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
  /** The filemeta entry of a snapshot a ref reaches whose files tree is `previousTree`. */
  previousFileMeta?: string | null;
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
  /** A resident process's lstat of the last capture's paths (capture-files.ts). */
  headStart?: LstatHeadStart | null;
  /** A resident process's memos of this worktree's last capture (capture-memos.ts). */
  memos?: CaptureMemos | null;
  /** With `write`: the stat cache is written by the caller, through `statCacheWrite`. */
  deferStatCache?: boolean;
}

export interface ScanResult {
  tree: string;
  /** What changed since the previous tree, when one was used (write mode). */
  changes: TreeChange[] | null;
  /** With `meta`: what the files' hard links come to. */
  meta: FileMetaCounts | null;
  /** With `meta` and without `write` (verify, diff): every file's time and links, in tree order. */
  entries?: FileMeta;
  /** With `meta` and `write`: the stored filemeta entry, a blob or a tree of parts (in the same
   * pack as the files). */
  filemeta?: { oid: string; parted: boolean };
  /** Paths stored as chunks (pointer entries of the tree), with their pointers. */
  chunked: Map<string, ChunkedPath>;
  /** The `chunks/` tree (stored in the same pack), when any file is chunked. */
  chunksTree: string | null;
  /** Distinct chunks of the chunked files; pointers reused from the chunk stat cache (no read). */
  chunkStats: { chunks: number; cacheHits: number; newChunks: number; newChunkBytes: number };
  /** With `write`: files, bytes (a chunked file at its real size) and symlinks of the tree. */
  totals?: { files: number; bytes: number; symlinks: number };
  /** With `write`: the `.keep` that holds the new pack until a ref reaches it (the caller removes it). */
  packKept?: string;
  /** With `deferStatCache`: writes the stat cache for the next capture (capture-files.ts). */
  statCacheWrite?: () => void;
  /** With `write`: a captured path's size as the capture saw it (capture-files.ts). */
  sizeOf?: (path: string) => number | undefined;
}

export async function scanToTree(spec: ScanSpec): Promise<ScanResult> {
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
    if (spec.write) {
      // Capture: one pass of our own (capture-files.ts); git reads no file.
      const r = await captureFiles({
        worktree: spec.worktree,
        objectFormat: spec.objectFormat,
        objectsDir: spec.objectsDir,
        indexFile: spec.indexFile,
        paths: spec.paths,
        previousTree: spec.previousTree,
        previousFileMeta: spec.previousFileMeta,
        knownObjects: spec.knownObjects,
        progress: spec.progress,
        admission: spec.admission,
        extraItems: spec.extraItems,
        chunking: spec.chunking,
        gitOptions: opts,
        scratchDir: spec.scratchDir,
        headStart: spec.headStart,
        memos: spec.memos,
        deferStatCache: spec.deferStatCache,
      });
      return {
        tree: r.tree,
        changes: null,
        meta: r.meta,
        filemeta: r.filemeta,
        chunked: r.chunked,
        chunksTree: r.chunksTree,
        chunkStats: r.chunkStats,
        totals: r.totals,
        packKept: r.packKept,
        sizeOf: r.sizeOf,
        statCacheWrite: r.statCacheWrite,
      };
    }
    // Verify and diff: git hashes the files into a scratch copy of the stat cache; nothing is stored.
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
    const hashPaths = collector ? collector.prepare(spec.paths, previous) : spec.paths;
    await git(['update-index', '--add', '--remove', '--replace', '--info-only', '-z', '--stdin'], {
      ...opts,
      input: joinZ(hashPaths),
    });
    const meta = collector ? await collector.finish(opts) : null;
    const tree = await gitText(['write-tree', '--missing-ok'], opts);
    collector?.saveRecord();
    return {
      tree,
      changes: null,
      meta,
      entries: meta ?? undefined,
      chunked: new Map<string, ChunkedPath>(),
      chunksTree: null,
      chunkStats: { chunks: 0, cacheHits: 0, newChunks: 0, newChunkBytes: 0 },
    };
  } finally {
    shadow.dispose();
  }
}

export function scratchDir(base: string, what: string): string {
  fs.mkdirSync(base, { recursive: true });
  // The pid says whose it is: a killed capture's leftovers are removed by a later one (leftovers.ts).
  return fs.mkdtempSync(path.join(base, `${what}-${process.pid}-`));
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
