// Laying a snapshot into a working tree: its files byte for byte, then its index (staged tree, flags,
// stale stat sizes) with true stat data, so git sees exactly the captured state without re-hashing.
// Shared by restore (a new repository) and forks (a linked worktree, or a base that forks reuse).
//
// Files first: the whole files tree is checked out through a shadow git dir (no smudge, no eol
// conversion, all cores) against a "files index" that then holds the stat data of every file. That
// index is also capture's stat cache, so the first capture in the new tree is O(changes). The real
// index is a copy of it re-read with `git read-tree -m <index tree>`: git keeps the stat data of
// every entry whose blob is unchanged, and entries whose staged blob differs from the file get none,
// exactly as they would have in the source.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { chunkedFiles, type ChunkedEntry } from '../chunks/snapshot-files';
import { git, gitText, gitZ, joinZ, type GitOptions } from '../git/exec';
import { findEntryBytes, parseIndex, setRecordedSizes, writeIndexBuffer, type ParsedIndex } from '../git/index-file';
import { STAT_BYTES } from '../git/index-writer';
import { diffTrees, lsTree, type TreeListing } from '../git/plumbing';
import { checkoutBesideWork, createShadow } from '../git/shadow';
import type { Snapshot } from './store';
import { planFileMeta, readFileMeta, type ParsedFileMeta } from './filemeta';
import { recordStat, writeChunkedFiles, writePlaceholder } from './lay-chunked';
import { layFailure, layFromPacks, LayPool, type LaidBlob } from './lay-pack';
import { nativeLayAvailable, nativeLayersClosed } from './lay-native';
import { Stamper } from './set-times';
import { assertNoSymlinkBetween } from './fsutil';
import { tracePhase } from '../testing/trace';

/** Config no index we write may inherit from the user's repository: a split index lives beside its
 * git dir (so the file could not be copied), fsmonitor runs a command, the untracked cache records
 * a directory that is not the target's. Passed as GIT_CONFIG_* so they win over every config file. */
export const NEUTRAL_INDEX_CONFIG: Record<string, string> = {
  GIT_CONFIG_COUNT: '3',
  GIT_CONFIG_KEY_0: 'core.splitIndex',
  GIT_CONFIG_VALUE_0: 'false',
  GIT_CONFIG_KEY_1: 'core.fsmonitor',
  GIT_CONFIG_VALUE_1: 'false',
  GIT_CONFIG_KEY_2: 'core.untrackedCache',
  GIT_CONFIG_VALUE_2: 'false',
};

export interface LaySpec {
  snap: Snapshot;
  /** Directory the files go into: must exist; files already there with snapshot paths are replaced. */
  worktree: string;
  /** Object database holding the snapshot's objects (read only). */
  objectsDir: string;
  /** The files index: the files tree with stat data (kept, for capture's stat cache). */
  filesIndex: string;
  /** The index git uses for this worktree. */
  indexFile: string;
  /** A directory for scratch git dirs (removed afterwards). */
  scratchParent: string;
  /** A git dir whose config and info/attributes apply to this worktree (conversions are judged with
   * the target's own settings, as `git status` will judge them). */
  repoGitDir: string;
  /** A lazy restore (lazy.ts): chunked files are not reassembled (their chunks are elsewhere); an
   * empty placeholder with their mode stands at their paths so links and times apply, for the
   * lazy hook to remove with their files-index entries. */
  deferChunked?: boolean;
  /** The files tree's recursive listing with its trees (`lsTree(filesTree, { trees: true })`),
   * when the caller has it already (restore's validation read it); else it is read here. */
  listing?: TreeListing[];
  /** What errors name as the tree being laid when `worktree` is a temporary one (a restore's
   * hidden sibling): the directory the user asked for. */
  shownAs?: string;
  /** Keep the parse of the files index written at the end, for the one reader that comes next (a
   * restore's sealed stat cache: parseIndexWritten). */
  keepFilesIndex?: boolean;
  /** readLayInputs for this snapshot and listing, begun by the caller (a restore reads them from
   * its source repository while it clones it); read here when absent. */
  fileMeta?: Promise<{ blobs: LaidBlob[]; odd: string[]; meta: ParsedFileMeta }>;
  /** Begin the index while the files are laid (restore): its read-tree of the staged tree runs on
   * the files index as git first wrote it (no stat data yet), and layIndex then gives the entries
   * read-tree kept the stat data the lay recorded for them (beginIndex). */
  earlyIndex?: boolean;
}

/** An index begun during the lay (beginIndex): the staged tree's differences from the files tree. */
const begunIndexes = new WeakMap<LaySpec, Promise<Awaited<ReturnType<typeof diffTrees>>>>();
/** The files index a lay wrote last, parsed, for its layIndex (the entries' stat data). */
const laidIndexes = new WeakMap<LaySpec, ParsedIndex>();

/** Write every file, symlink and empty directory of the snapshot into the worktree, and the files
 * index. A full disk is DISK_FULL and another failure of the tree's file system TARGET_UNUSABLE,
 * whichever way the files were written (lay-pack.ts layFailure). */
export async function layFiles(spec: LaySpec): Promise<void> {
  try {
    await layFilesAnyWay(spec);
  } catch (e) {
    throw layFailure(e, spec.worktree, spec.shownAs);
  }
}

async function layFilesAnyWay(spec: LaySpec): Promise<void> {
  const { snap, worktree } = spec;
  const { scratch, shadow } = shadowFor(spec, spec.filesIndex);
  // Into a tree holding nothing but its git dir, a snapshot with recorded times is laid by
  // lay-pack.ts: worker threads read each blob from the packs, hash-check it and write it with its
  // time in one native call (GIT_XET_LAY=checkout: git's checkout writes them, and the times and
  // stat data are set after). Measured on a quiet machine at stop 34 the workers took 0.6-1.0 s
  // less than git's checkout for the same CPU; at stop 27, on the shared cores and before the
  // native call, git's checkout had used less CPU (docs/DESIGN-NOTES.md "Laying files from the
  // packs"). GIT_XET_LAY=git keeps the older path (checkout, then links, times and an lstat pass);
  // tests compare the three. The stamper's python3 starts now, so its start-up overlaps the reading.
  const how = process.env.GIT_XET_LAY;
  const fromPacks = snap.filemeta !== null && how !== 'git' && holdsOnlyGitDir(worktree);
  const stamper = fromPacks ? new Stamper() : null;
  // With the native pass (lay-native.ts) the workers boot only if something is left for them.
  const pool = fromPacks && how !== 'checkout' ? new LayPool(snap.manifest.counts.files, !nativeLayAvailable()) : null;
  let stamped = false;
  let indexRead: Promise<void> | null = null;
  try {
    const o = { cwd: worktree, env: shadow.env };
    const format = snap.manifest.git.objectFormat;
    const mkdirSafe = (abs: string) => {
      assertNoSymlinkBetween(worktree, abs);
      fs.mkdirSync(abs, { recursive: true });
    };
    if (stamper && snap.filemeta) {
      // The workers need the files, not the files index: they take them from the tree's listing
      // (the one restore validated), and git's read-tree writes the index while they lay (~0.25 s
      // of read-tree and parsing that kept both cores waiting before).
      indexRead = git(['read-tree', snap.filesTree], o).then(() => tracePhase('lay: files index read'));
      indexRead.catch(() => undefined);
      if (spec.earlyIndex) {
        // Copied before anything else reads it (then-callbacks run in the order they were added).
        const begun = indexRead.then(() => beginIndex(spec));
        begun.catch(() => undefined);
        begunIndexes.set(spec, begun);
      }
      const [{ blobs, odd, meta }, chunked] = await Promise.all([
        spec.fileMeta ?? readLayInputs(snap, spec.listing ?? (await lsTree(snap.filesTree, o)), o, spec.objectsDir),
        chunkedOf(snap, o),
      ]);
      tracePhase('lay: times and chunk lists read');
      await layFromPacks({
        worktree,
        objectsDir: spec.objectsDir,
        filesIndex: spec.filesIndex,
        blobs,
        odd,
        indexRead,
        format,
        meta,
        chunked,
        deferChunked: spec.deferChunked === true,
        shadow: o,
        mkdirSafe,
        emptyDirs: snap.manifest.emptyDirs,
        stamper,
        pool,
        keepFilesIndex: spec.keepFilesIndex === true,
        written: spec.earlyIndex ? (parsed) => laidIndexes.set(spec, parsed) : undefined,
      });
      stamped = true;
      return;
    }
    await git(['read-tree', snap.filesTree], o);
    tracePhase('lay: files index read');
    const meta = await planFileMeta(snap.filemeta, spec.filesIndex, worktree, format, o);
    // Chunked files are pointers in files/: git checks out everything else, they are reassembled.
    const chunked = await chunkedOf(snap, o);
    let checkout = meta?.checkout ?? null;
    if (chunked.size) checkout = (checkout ?? (await gitZ(['ls-files', '-z'], o))).filter((p) => !chunked.has(p));
    const checkOut = async (beside: string[] = []): Promise<void> => {
      if (checkout) {
        if (checkout.length) {
          await git([...beside, 'checkout-index', '--force', '-u', '-z', '--stdin'], { ...o, input: joinZ(checkout) });
        }
      } else {
        await git([...beside, 'checkout-index', '--all', '--force', '-u'], o);
      }
    };
    // Hard links of a chunked file are made from its first path below, as for any file (filemeta).
    const firsts = meta?.checkout ? new Set(meta.checkout) : null;
    const leaders: ChunkedEntry[] = [...chunked.values()].filter((e) => !firsts || firsts.has(e.path));
    if (leaders.length && !spec.deferChunked && holdsOnlyGitDir(worktree)) {
      // Into a worktree that held nothing but its git dir, the chunked files are reassembled while git
      // checks out the rest (git's checkout leaves a core idle part of the time; reassembly is mostly
      // this process and its cat-files). Nothing is in the way of either: every path was validated
      // (no two entries for a path, none through a file or symlink of the snapshot: paths.ts), so
      // git only makes directories on the chunked files' way, never a symlink or a file, and writes
      // no path of theirs. Both run to their end before a failure is reported, so nothing writes
      // into a tree its caller is already removing.
      // Their directories first: git, finding one made meanwhile where it saw none, dies
      // (lay-pack.ts says how).
      for (const e of leaders) mkdirSafe(path.dirname(path.join(worktree, e.path)));
      const results = await Promise.allSettled([
        checkOut(checkoutBesideWork()),
        writeChunkedFiles(worktree, leaders, { git: o, format }),
      ]);
      for (const r of results) if (r.status === 'rejected') throw r.reason;
    } else {
      await checkOut();
      if (spec.deferChunked) {
        for (const e of leaders) writePlaceholder(worktree, e);
      } else if (leaders.length) {
        await writeChunkedFiles(worktree, leaders, { git: o, format });
      }
    }
    // Without filemeta nothing else records their stat data in the files index.
    if (chunked.size && !meta) recordStat(spec.filesIndex, worktree, chunked.keys(), format);
    for (const d of snap.manifest.emptyDirs) mkdirSafe(path.join(worktree, d));
    // Hard links, then times (which change ctime), then the stat data git will trust.
    meta?.finish(mkdirSafe);
  } finally {
    // Never return (nor let the caller remove the tree) while git still writes in it.
    await indexRead?.catch(() => undefined);
    await begunIndexes.get(spec)?.catch(() => undefined);
    await nativeLayersClosed();
    if (stamper && !stamped) stamper.abort();
    pool?.close();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** What a lay from the packs reads before its first file: the files tree's files and symlinks, its
 * other entries, and their times and links (the filemeta), read from the packs of `objectsDir` (the
 * objects `o` reads) in this process. */
export async function readLayInputs(
  snap: Snapshot,
  listing: TreeListing[],
  o: GitOptions,
  objectsDir: string,
): Promise<{ blobs: LaidBlob[]; odd: string[]; meta: ParsedFileMeta }> {
  const { blobs, odd } = filesListing(listing);
  const meta = await readFileMeta(snap.filemeta as string, blobs, o, {
    objectsDir,
    format: snap.manifest.git.objectFormat,
  });
  return { blobs, odd, meta };
}

/** The files and symlinks of a files tree's recursive listing, in its order (git's index order for
 * any tree git wrote; lay-pack.ts refuses a tree where the two differ), and its other entries. */
function filesListing(listing: TreeListing[]): { blobs: LaidBlob[]; odd: string[] } {
  const blobs: LaidBlob[] = [];
  const odd: string[] = [];
  for (const e of listing) {
    if (e.type === 'blob') blobs.push({ path: e.path, mode: parseInt(e.mode, 8), oid: e.oid });
    else if (e.type !== 'tree') odd.push(e.path);
  }
  return { blobs, odd };
}

/** Build the worktree's index from the files index: staged tree, stat data, conversions, flags. */
export async function layIndex(spec: LaySpec): Promise<void> {
  const { snap, worktree } = spec;
  const begun = begunIndexes.get(spec);
  const laid = laidIndexes.get(spec);
  begunIndexes.delete(spec);
  laidIndexes.delete(spec);
  // Begun during the lay, and the lay's stat data at hand: only the stat data is left to give it.
  if (begun && laid) return finishIndex(spec, await begun, laid);
  const { scratch, shadow } = shadowFor(spec, spec.indexFile);
  try {
    fs.copyFileSync(spec.filesIndex, spec.indexFile);
    const o = { cwd: worktree, env: shadow.env };
    // Both refreshes look at the same differences between the staged tree and the files tree, and
    // only at paths in both (the untracked and ignored files, most of a tree, are not listed);
    // listed while read-tree merges the staged tree in.
    const listed = diffTrees(snap.indexTree, snap.filesTree, o, 'M');
    listed.catch(() => undefined);
    await git(['read-tree', '-m', '-i', snap.indexTree], o);
    await convertedAndFlags(spec, await listed);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * The index's read-tree, begun while the files are laid: the files index as git's read-tree first
 * wrote it (every entry without stat data) is copied to the index, and the staged tree merged in
 * (`read-tree -m -i`), which keeps an entry of the files index where the staged tree has the same
 * blob and mode at its path, and gives every other entry none. finishIndex then copies the stat
 * data the lay recorded into exactly the entries kept, so the index is the one read-tree would
 * have made after the lay; read-tree's ~35 ms and the diff's ~20 ms run beside the lay's threads
 * instead of after them. Returns the staged tree's differences from the files tree.
 */
async function beginIndex(spec: LaySpec): Promise<Awaited<ReturnType<typeof diffTrees>>> {
  const { scratch, shadow } = shadowFor(spec, spec.indexFile);
  try {
    fs.copyFileSync(spec.filesIndex, spec.indexFile);
    const o = { cwd: spec.worktree, env: shadow.env };
    const listed = diffTrees(spec.snap.indexTree, spec.snap.filesTree, o, 'M');
    listed.catch(() => undefined);
    await git(['read-tree', '-m', '-i', spec.snap.indexTree], o);
    tracePhase('lay: index read');
    return await listed;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** The begun index given the stat data of the files index the lay wrote (`laid`) for each entry
 * read-tree kept from it (same path, blob and mode), then conversions and flags as layIndex. */
async function finishIndex(
  spec: LaySpec,
  changes: Awaited<ReturnType<typeof diffTrees>>,
  laid: ParsedIndex,
): Promise<void> {
  const format = spec.snap.manifest.git.objectFormat;
  const index = parseIndex(spec.indexFile, format);
  const hashLen = index.hashLen;
  let copied = 0;
  for (const e of index.entries) {
    if (e.stage !== 0 || e.intentToAdd) continue;
    const k = findEntryBytes(laid, e.names, e.nameStart, e.nameEnd);
    if (k < 0) continue;
    const f = laid.entries[k];
    const oidAt = STAT_BYTES;
    if (
      f.mode !== e.mode ||
      laid.buf.compare(
        index.buf,
        e.offset + oidAt,
        e.offset + oidAt + hashLen,
        f.offset + oidAt,
        f.offset + oidAt + hashLen,
      ) !== 0
    ) {
      continue;
    }
    laid.buf.copy(index.buf, e.offset, f.offset, f.offset + STAT_BYTES);
    copied++;
  }
  if (copied) writeIndexBuffer(spec.indexFile, index);
  await convertedAndFlags(spec, changes);
}

/** What layIndex does once read-tree has merged the staged tree in: the converted and chunked
 * files' stat data, then the flags and the version. */
async function convertedAndFlags(spec: LaySpec, changes: Awaited<ReturnType<typeof diffTrees>>): Promise<void> {
  const { snap, worktree } = spec;
  const repoEnv = {
    ...NEUTRAL_INDEX_CONFIG,
    GIT_DIR: spec.repoGitDir,
    GIT_WORK_TREE: worktree,
    GIT_INDEX_FILE: spec.indexFile,
    GIT_OBJECT_DIRECTORY: spec.objectsDir,
  };
  const chunked = await chunkedOf(snap, { cwd: worktree, env: repoEnv });
  await refreshConverted(snap, { cwd: worktree, env: repoEnv }, chunked, changes);
  await refreshChunked(spec, chunked, changes);
  await setIndexFlags(spec, repoEnv);
}

/** A snapshot's chunked files, read once for layFiles, layIndex and the restore's sealed stat
 * cache of one lay (the same snapshot object): the answer depends on the snapshot's objects alone,
 * so any repository holding them may be asked. Failures are not kept. */
const chunkedMemo = new WeakMap<Snapshot, Promise<Map<string, ChunkedEntry>>>();
export function chunkedOf(snap: Snapshot, o: GitOptions): Promise<Map<string, ChunkedEntry>> {
  let got = chunkedMemo.get(snap);
  if (!got) {
    got = chunkedFiles(snap, o);
    chunkedMemo.set(snap, got);
    got.catch(() => chunkedMemo.delete(snap));
  }
  return got;
}

/** True when `dir` has no entry but `.git` (a tree being built from nothing: restore, a fork, a base). */
function holdsOnlyGitDir(dir: string): boolean {
  return fs.readdirSync(dir).every((name) => name === '.git');
}

/** A scratch dir holding a shadow git dir that reads and writes `indexFile` for the worktree. */
function shadowFor(spec: LaySpec, indexFile: string): { scratch: string; shadow: ReturnType<typeof createShadow> } {
  const scratch = fs.mkdtempSync(path.join(spec.scratchParent, 'xet-lay-'));
  const shadow = createShadow({
    dir: path.join(scratch, 'shadow'),
    objectFormat: spec.snap.manifest.git.objectFormat,
    objectsDir: spec.objectsDir,
    worktree: spec.worktree,
    indexFile,
    // The version the copy's index keeps (the source's): the files index is copied to the index
    // and read-tree keeps its version, so no rewrite of its 34,000 entries is needed at the end.
    indexVersion: keptIndexVersion(spec.snap),
  });
  return { scratch, shadow };
}

type Opts = { cwd: string; env: Record<string, string | undefined> };

/**
 * Paths whose worktree bytes differ from the staged blob only by conversion (eol, filters): in the
 * source, git recorded the worktree file's stat data against that blob. Our index has no stat data
 * for them, and git would hash them on every status. So hash those files the way git would (with
 * the target's own attributes and config) and, where the result is the staged blob, let
 * update-index record their stat data. Genuine edits are left alone.
 */
async function refreshConverted(
  snap: Snapshot,
  repo: Opts,
  chunked: Map<string, ChunkedEntry>,
  changes: Awaited<ReturnType<typeof diffTrees>>,
): Promise<void> {
  const ix = snap.manifest.index;
  const flagged = new Set([...ix.skipWorktree, ...ix.assumeUnchanged, ...ix.intentToAdd]);
  const candidates: string[] = [];
  for (const c of changes) {
    // Same mode, other bytes: possibly only a conversion of the staged content. (Chunked files are
    // large, binary in practice, and not read again here: refreshChunked judges them by their id.)
    if (c.status === 'M' && c.oldMode === c.newMode && !flagged.has(c.path) && !chunked.has(c.path)) {
      candidates.push(c.path);
    }
  }
  const regular = candidates.filter((p) => {
    try {
      return fs.lstatSync(path.join(repo.cwd, p)).isFile();
    } catch {
      return false;
    }
  });
  if (!regular.length) return;
  // The staged blob of each candidate is the old side of its change.
  const staged = new Map(changes.map((c) => [c.path, c.oldOid]));
  // hash-object hashes each file as `git add` would, using the path's own attributes. The names
  // are its arguments, a few hundred a process: --stdin-paths would unquote a name that starts
  // with a double quote and drop a trailing CR (review 50).
  const same: string[] = [];
  for (let at = 0; at < regular.length; at += 256) {
    const part = regular.slice(at, at + 256);
    const oids = (await gitText(['hash-object', '--', ...part], repo)).split('\n');
    part.forEach((p, k) => {
      if (oids[k] === staged.get(p)) same.push(p);
    });
  }
  if (same.length) await git(['update-index', '-z', '--stdin'], { ...repo, input: joinZ(same) });
}

/**
 * A chunked file's entry in the files index names its pointer, in the index its staged blob, so
 * read-tree kept no stat data for it. Where the staged blob is the file's bytes (the pointer's
 * `blob`: a tracked file chunked as it was committed) the entry is clean and gets the file's stat
 * data, as git would record it, without reading the file; any other is modified, as in the source.
 */
async function refreshChunked(
  spec: LaySpec,
  chunked: Map<string, ChunkedEntry>,
  changes: Awaited<ReturnType<typeof diffTrees>>,
): Promise<void> {
  if (!chunked.size) return;
  const ix = spec.snap.manifest.index;
  const flagged = new Set([...ix.skipWorktree, ...ix.assumeUnchanged, ...ix.intentToAdd]);
  const clean: string[] = [];
  for (const c of changes) {
    const e = chunked.get(c.path);
    if (e && c.status === 'M' && c.oldMode === c.newMode && c.oldOid === e.pointer.blob && !flagged.has(c.path)) {
      clean.push(c.path);
    }
  }
  if (clean.length) recordStat(spec.indexFile, spec.worktree, clean, spec.snap.manifest.git.objectFormat);
}

async function setIndexFlags(spec: LaySpec, repoEnv: Record<string, string>): Promise<void> {
  const ix = spec.snap.manifest.index;
  const opts = { cwd: spec.worktree, env: repoEnv };
  if (ix.intentToAdd.length) {
    // `git add -N` wants a file to exist. It gets one in a scratch worktree made for the purpose,
    // never in the target: nothing is created through a symlink the snapshot put there, and no
    // placeholder or directory is left behind.
    const scratch = fs.mkdtempSync(path.join(spec.scratchParent, 'xet-ita-'));
    try {
      for (const p of ix.intentToAdd) {
        const abs = path.join(scratch, p);
        fs.mkdirSync(path.dirname(abs), { recursive: true });
        fs.writeFileSync(abs, '');
      }
      await git(['add', '--intent-to-add', '--force', '--pathspec-from-file=-', '--pathspec-file-nul'], {
        cwd: scratch,
        env: { ...repoEnv, GIT_WORK_TREE: scratch, GIT_LITERAL_PATHSPECS: '1' },
        input: joinZ(ix.intentToAdd),
      });
    } finally {
      fs.rmSync(scratch, { recursive: true, force: true });
    }
  }
  if (ix.skipWorktree.length) {
    await git(['update-index', '--skip-worktree', '-z', '--stdin'], { ...opts, input: joinZ(ix.skipWorktree) });
  }
  if (ix.assumeUnchanged.length) {
    await git(['update-index', '--assume-unchanged', '-z', '--stdin'], { ...opts, input: joinZ(ix.assumeUnchanged) });
  }
  const stale = ix.staleSizes ?? [];
  const version = keptIndexVersion(spec.snap);
  if (stale.length) {
    // setRecordedSizes edits versions 2 and 3 in place. The index read-tree wrote through the
    // shadow has the version the copy keeps (the source's, 2 in most trees: the shadow's
    // index.version), so only a copy that keeps 4 is rewritten, twice (3 for the edit, then 4).
    const read = indexVersion(spec.indexFile);
    if (read !== 2 && read !== 3) {
      await git(['update-index', `--index-version=${version === 4 ? 3 : version}`], opts);
    }
    setRecordedSizes(spec.indexFile, new Map(stale.map((e) => [e.path, e.size])), spec.snap.manifest.git.objectFormat);
  }
  // A rewrite only to state the version it has already is a git process saved.
  if (ix.intentToAdd.length || indexVersion(spec.indexFile) !== version) {
    await git(['update-index', `--index-version=${version}`], opts);
  }
}

/** The index version a copy of `snap` keeps: the source's (2 where it had none or one git does not
 * write). */
function keptIndexVersion(snap: Snapshot): 2 | 3 | 4 {
  const v = snap.manifest.index.version;
  return v === 3 || v === 4 ? v : 2;
}

/** The version in an index file's header (the 32 bits after "DIRC"), or -1 when it has none. */
function indexVersion(file: string): number {
  const head = Buffer.alloc(8);
  const fd = fs.openSync(file, 'r');
  try {
    return fs.readSync(fd, head, 0, 8, 0) === 8 && head.toString('latin1', 0, 4) === 'DIRC' ? head.readUInt32BE(4) : -1;
  } finally {
    fs.closeSync(fd);
  }
}
