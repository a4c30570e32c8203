// Capture: the whole state of a working tree -> one snapshot commit (xet.snapshot/v1).
// Order of work: every refusal is checked before any effect; then blobs and trees are written
// (unreferenced objects are harmless); the snapshot ref is created last, so a capture that dies
// half-way leaves no snapshot at all. The user's index, worktree and refs are only ever read.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitSpawnEnv, gitText, gitVersion, gitZ, type GitOptions } from '../git/exec';
import {
  catFileBatch,
  CE_INTENT_TO_ADD,
  CE_SKIP_WORKTREE,
  CE_VALID,
  commitTree,
  identityEnv,
  type IndexEntry,
  type RefEntry,
  indexFileTree,
  mktree,
  readIndexEntries,
  readStash,
  type TreeEntryInput,
  writeBlobs,
} from '../git/plumbing';
import { emptyTreeOid, findRepo, indexRef, repoOpts, type Repo } from '../git/repo';
import { readConfig, type GitConfig } from '../git/config';
import { sidecarDir, withExistingSidecar, withSidecar } from '../sidecar/db';
import { captureCacheIndex, lastFilesTree, recordFilesTree, workspaceId } from '../sidecar/workspaces';
import { heldPreviousSnapshot, snapshotTop } from './previous-tree';
import { rememberSnapshot } from './store';
import { absent, lstatMany, ROW, STAT_ROW } from '../git/lstat-many';
import { statFields, writeStat } from '../git/index-file';
import { commitContent, looseWriteLevel, treeContent, writeLooseObject } from '../git/loose-writer';
import { identDate, keptAsUtf8, plainIdent } from '../git/ident';
import { acquireLock } from '../sidecar/lock';
import { SNAPSHOT_SCHEMA, schemaFor, serializeManifest, type Manifest } from './manifest';
import { resolvePolicy, type PolicyOptions } from './policy';
import { looseObjects, scanToTree, scratchDir, type ScanResult } from './scan';
import { CaptureAllowance } from './capture-allowance';
import type { AdmissionClass } from '../allowance/model';
import type { PackItem } from '../git/pack-writer';
import { IGNORED_LISTING_ARGS, walkWorktree, type WalkResult } from './walk';
import { worktreeWatch } from './walk-watch';
import { beginLstatHeadStart } from './lstat-head-start';
import { residentCaptureMemos } from './capture-memos';
import { FILEMETA_ENTRY } from './filemeta';
import { captureInnerRepositories } from './inner-repos';
import { RESTORE_MARKER } from './refs';
import { faultPoint } from '../testing/fault-points';
import { tracePhase } from '../testing/trace';
import { holdObjectsShared } from '../gc/objects-lock';
import { indexFileKey, readOptional } from './fsutil';
import { readRefView } from './refview';
import { leftoverWarning, removeLeftovers, repoLeftovers } from './leftovers';
import { TOOL_VERSION } from '../version';
import { lastWorkspaceSnapshot, sameSnapshotContent } from './unchanged';
import { parseChunkThreshold } from '../chunks/params';
import { parseChunkCompression } from '../chunks/compression';
import { readLazy } from '../chunks/source';
import type { ChunkingSpec } from './chunked-scan';
import { captureOperationState, GITSTATE_TREE, unmergedPaths, writeGitStateTree } from './operation-state';

import { SNAPSHOT_REF_PREFIX } from './refs';
export { SNAPSHOT_REF_PREFIX };
import { CAPTURED_CONFIG, CAPTURED_REF_PATTERNS, XET_NAMESPACE_RE } from './recorded';
const MAX_PARENTS = 16;

export interface CaptureOptions extends PolicyOptions {
  cwd: string;
  message?: string;
  /** Make a new snapshot even when nothing changed since this worktree's last one. */
  always?: boolean;
  /** Told what is happening, for a progress line on a terminal. */
  progress?: (what: string) => void;
  /** An inner repository of another capture: found from `cwd` alone, never from GIT_DIR. */
  inner?: boolean;
  /** The worktree to record as the source when `cwd` is another view of it (reclaim captures a
   * fork from a private read-only mount of its layers). */
  worktreeAs?: string;
  /** How the storage allowance admits it: 'grow' (default), or 'settle' for the captures of discard
   * and reclaim, which keep a fork's work on the way to freeing its space (they may use the headroom). */
  admissionClass?: AdmissionClass;
  /** The repository `cwd` is in, as findRepo(cwd, true) finds it, when the caller already knows
   * (the daemon, for its own worktree); with it, its config as `git config --list` reads it now. */
  repo?: Repo;
  readConfig?: () => Promise<GitConfig>;
  /** With `repo`: its index listing as `git ls-files -s --debug` reads it now. */
  readIndex?: () => Promise<IndexEntry[]>;
  /** With `repo`: `git update-ref -m <message> <ref> <oid>` as git configured by `config` runs it
   * (the daemon's resident updater, src/daemon/ref-writer.ts). */
  writeRef?: (ref: string, oid: string, message: string, config: GitConfig) => Promise<void>;
  /** With `repo`: git's listing of its untracked ignored paths now, `config` being its config now
   * (the daemon's memo, ignored-memo.ts). */
  readIgnored?: (config: GitConfig, opts: GitOptions) => Promise<string[]>;
  /** With `repo`: its refs as `git for-each-ref` lists them now (the daemon's memo, refs-memo.ts). */
  listRefs?: (patterns: string[], opts: GitOptions) => Promise<RefEntry[]>;
  /** A resident process that replies before the capture's last bookkeeping: handed that work (the
   * stat cache's write for the next capture), which releases the capture's locks when done; it runs
   * it after its reply and before its next request. Without it, the capture does it itself. */
  afterReply?: (work: () => void) => void;
}

export interface CaptureResult {
  snapshot: string;
  files: number;
  bytes: number;
  tracked: number;
  untracked: number;
  ignored: number;
  symlinks: number;
  emptyDirs: number;
  excludedSecrets: string[];
  /** Entries left out by xet.capture.exclude / --exclude patterns. */
  excludedByPattern: number;
  /** Ignored entries left out because the policy is `ignored: none` (a whole dir counts once). */
  ignoredNotCaptured: number;
  skipped: { path: string; reason: string }[];
  incremental: boolean;
  /** Submodules and nested repositories, each captured as its own snapshot. */
  repositories: { path: string; kind: string; snapshot: string; files: number }[];
  /** Small packs were rolled up after this capture (see consolidatePacks). */
  repacked: boolean;
  warnings: string[];
  /** Nothing changed since this worktree's last snapshot, which is returned (no new ref, no pack). */
  unchanged: boolean;
  /** Files stored as chunks: how many pointers came from the chunk stat cache (files not read) and
   * the bytes of chunks this capture packed. */
  chunking: { files: number; cacheHits: number; newChunks: number; newChunkBytes: number };
}

const LFS_POINTER = Buffer.from('version https://git-lfs.github.com/spec/v1\n');

/** Tracked files with filter=lfs whose worktree holds a pointer to an object we do not have. */
async function refuseMissingLfs(repo: Repo, captured: string[], attributeFiles: string[]): Promise<void> {
  const info = path.join(repo.commonDir, 'info', 'attributes');
  const mentionsLfs = (f: string) => {
    try {
      return fs.readFileSync(f, 'utf8').includes('lfs');
    } catch {
      return false;
    }
  };
  if (!attributeFiles.some((f) => mentionsLfs(path.join(repo.worktree, f))) && !mentionsLfs(info)) return;
  const r = await git(['check-attr', '-z', '--stdin', 'filter'], {
    ...repoOpts(repo),
    input: Buffer.from(captured.map((p) => `${p}\0`).join(''), 'utf8'),
  });
  const f = r.stdout.toString('utf8').split('\0');
  const missing: string[] = [];
  for (let i = 0; i + 2 < f.length; i += 3) {
    if (f[i + 2] !== 'lfs') continue;
    const p = f[i];
    let head: Buffer;
    try {
      const fd = fs.openSync(path.join(repo.worktree, p), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
      head = Buffer.alloc(200);
      const n = fs.readSync(fd, head, 0, 200, 0);
      fs.closeSync(fd);
      head = head.subarray(0, n);
    } catch {
      continue; // a symlink or unreadable: not a pointer file
    }
    if (!head.subarray(0, LFS_POINTER.length).equals(LFS_POINTER)) continue;
    const m = /oid sha256:([0-9a-f]{64})/.exec(head.toString('utf8'));
    const obj = m && path.join(repo.commonDir, 'lfs', 'objects', m[1].slice(0, 2), m[1].slice(2, 4), m[1]);
    if (!obj || !fs.existsSync(obj)) missing.push(p);
  }
  if (missing.length) {
    throw new XetError(
      'LFS_CONTENT_MISSING',
      `${missing.length} Git LFS file(s) are pointers without content (run git lfs pull first): ${missing[0]}`,
      { paths: missing.slice(0, 50) },
    );
  }
}

export async function capture(options: CaptureOptions): Promise<CaptureResult> {
  tracePhase('capture: start');
  // The caller's repository and config reader, when it has them; an inner repository finds its own.
  const given = options.inner ? undefined : options.repo;
  const repo = given ?? (await findRepo(options.cwd, !options.inner));
  const userOpts = repoOpts(repo);
  const xetDir = sidecarDir(repo.commonDir);
  const wsId = workspaceId(repo.gitDir);
  fs.mkdirSync(xetDir, { recursive: true });
  // One capture per workspace at a time (they share the stat-cache index); others wait, then BUSY.
  // Shared objects lock first (a gc waits for this capture, or this capture for the gc: the blobs it
  // reuses from its stat cache must not be pruned before its ref exists), then the workspace's.
  const objectsLock = holdObjectsShared(repo.commonDir, () => options.progress?.('waiting for git xet gc'));
  let lock: ReturnType<typeof acquireLock> | undefined;
  let allowance: CaptureAllowance | undefined;
  // The new pack's `.keep` (pack-stream.ts): held until the snapshot's ref reaches its objects.
  let packKept: string | undefined;
  // The stat cache's write, left by the scan to the end (options.afterReply), and whether the locks
  // went with it.
  let statCacheWrite: (() => void) | null = null;
  let locksHandedOver = false;
  const finishStatCache = (): void => {
    const write = statCacheWrite;
    statCacheWrite = null;
    if (!write) return;
    if (!options.afterReply) return write();
    const [held, objects] = [lock, objectsLock];
    locksHandedOver = true;
    options.afterReply(() => {
      try {
        write();
      } catch {
        // The last stat cache stays: the next capture reads it, as after a capture killed here.
      } finally {
        held?.release();
        objects.release();
      }
    });
  };
  const releasePack = (): void => {
    if (packKept) fs.rmSync(packKept, { force: true });
    packKept = undefined;
  };
  try {
    lock = acquireLock(path.join(xetDir, 'locks', `capture-${wsId}.lockdb`), 'capturing this worktree');
  } catch (e) {
    objectsLock.release();
    throw e;
  }
  try {
    // In a resident process watching this worktree, its lstat of every path begins first, beside
    // the checks, the reads and the walk (lstat-head-start.ts): it is the longest step of a capture
    // there. (A capture refused below leaves it to finish: its rows are its own.)
    const headStart =
      options.inner || options.worktreeAs || !worktreeWatch() ? null : beginLstatHeadStart(repo.worktree);
    // Temporary files of killed captures (their owners are dead) go before we make our own.
    const cleaned = removeLeftovers(repoLeftovers(repo));
    // --- read and check; nothing is written in this section ---
    // A lazy restore's deferred files are absent from the worktree, not deleted: a snapshot of it
    // would record them as gone.
    const lazy = repo.gitDir === repo.commonDir ? readLazy(repo.commonDir) : null;
    if (lazy?.deferred.length) {
      throw new XetError(
        'LAZY_DEFERRED',
        `${repo.worktree} is a lazy restore: ${lazy.deferred.length} chunked file(s) are not written yet (${lazy.deferred.slice(0, 3).join(', ')}${lazy.deferred.length > 3 ? ', …' : ''}); run git xet hydrate, then capture`,
        { dir: repo.worktree, deferred: lazy.deferred.slice(0, 100) },
      );
    }
    if (fs.existsSync(path.join(repo.gitDir, RESTORE_MARKER))) {
      throw new XetError('RESTORE_INCOMPLETE', `${repo.worktree} is a restore that did not finish; restore it again`, {
        dir: repo.worktree,
      });
    }
    // The base to store changes against: this worktree's last capture, else the newest snapshot in
    // the repository (another worktree of the same project shares most of its files).
    // (Only while a ref still holds that tree's snapshot: src/snapshot/previous-tree.ts.)
    // Read only: a capture refused by the allowance must not have made a sidecar. Its git
    // processes run beside the reads below.
    const recorded = withExistingSidecar(repo.commonDir, (db) => lastFilesTree(db, wsId));
    const previousP = (async () => {
      const held = recorded ? await heldPreviousSnapshot(repo.commonDir, wsId, recorded.tree, userOpts) : null;
      return (
        (held && recorded ? { ...recorded, ...held } : null) ?? (await newestSnapshotBase(repo.commonDir, userOpts))
      );
    })();
    // Awaited below; a refusal before then must not leave its failure unhandled.
    previousP.catch(() => undefined);
    // Independent reads run concurrently: each is a short git process, and their latency adds up.
    tracePhase('capture: reads');
    const configP = given && options.readConfig ? options.readConfig() : readConfig(userOpts);
    const readIgnored = given && options.readIgnored;
    const [entries, config, ignoredList, refView] = await Promise.all([
      given && options.readIndex ? options.readIndex() : readIndexEntries(userOpts, indexRef(repo)),
      configP,
      readIgnored ? configP.then((c) => readIgnored(c, userOpts)) : gitZ(IGNORED_LISTING_ARGS, userOpts),
      // refs/stash in the same listing: its reflog is read only when it exists (one git process
      // fewer for every capture of a tree without a stash).
      readRefView([...CAPTURED_REF_PATTERNS, 'refs/stash'], userOpts, repo, (given && options.listRefs) || undefined),
    ]);
    const { head } = refView;
    // The repository's own config file's entries, from the listing just read (its scopes and
    // origins), as `git config --local --get-regexp` gives them.
    const localConfig = config.localEntries(path.join(repo.commonDir, 'config'), CAPTURED_CONFIG);
    const allRefs = refView.refs.filter((r) => !r.name.startsWith('refs/stash/') && r.name !== 'refs/stash');
    const stash = refView.refs.some((r) => r.name === 'refs/stash') ? await readStash(userOpts) : [];
    allowance = new CaptureAllowance(repo, config, options.admissionClass ?? 'grow');
    // Conflicts, operations in progress and sparse checkout are captured (operation-state.ts refuses
    // only what it cannot restore faithfully); submodules and nested repositories become inner
    // snapshots (inner-repos.ts).
    const opState = await captureOperationState(
      repo,
      entries,
      config,
      head,
      allRefs.filter((r) => r.type === 'commit' && !XET_NAMESPACE_RE.test(r.name)).map((r) => r.oid),
      userOpts,
    );
    const policy = resolvePolicy(config, options);
    // Read once per capture (an invalid value is refused before anything is written).
    const chunking = chunkingSpec(parseChunkThreshold(config.get('xet.chunk.threshold')), entries, repo.worktree);
    if (chunking) chunking.level = parseChunkCompression(config.get('xet.chunk.compression'));
    const tracked = new Set(entries.map((e) => e.path));
    const progress = options.progress ?? (() => undefined);
    progress('scanning the working tree');
    tracePhase('capture: walk');
    const walkInputs = {
      root: repo.worktree,
      tracked,
      ignored: new Set(ignoredList),
      policy,
      gitDirs: [repo.gitDir, repo.commonDir],
    };
    // A resident process watching this worktree lends the last walk (src/daemon/tree-watch.ts).
    const watch = options.inner || options.worktreeAs ? null : worktreeWatch();
    const memo = watch?.begin(walkInputs) ?? null;
    let walk: WalkResult;
    try {
      walk = walkWorktree({ ...walkInputs, memo: memo ?? undefined });
    } catch (e) {
      if (memo) watch?.end(memo, null);
      throw e;
    }
    if (memo) watch?.end(memo, memo.next ?? null);
    tracePhase('capture: lfs check');
    progress(`checking ${walk.paths.length} files for Git LFS pointers`);
    await refuseMissingLfs(repo, walk.paths, walk.attributeFiles);
    // Inner repositories first: each is a capture of its own (with its own refusals), and the
    // outer snapshot names their snapshots and has them as parents.
    if (walk.repositories.length) progress(`capturing ${walk.repositories.length} inner repositories`);
    const innerRepos = await captureInnerRepositories(repo, walk.repositories, { ignored: options.ignored }, capture);
    const skipped = [...walk.skipped, ...innerRepos.skipped, ...innerRepos.innerSkipped].sort((a, b) =>
      a.path < b.path ? -1 : a.path > b.path ? 1 : 0,
    ) as typeof walk.skipped;
    const excludedSecrets = [...walk.excludedSecrets, ...innerRepos.excludedSecrets].sort();
    const excludedByPattern = walk.excludedByPattern + innerRepos.excludedByPattern;
    const refs = allRefs.filter((r) => !XET_NAMESPACE_RE.test(r.name));
    const indexHeader = Buffer.alloc(8);
    const indexFile = path.join(repo.gitDir, 'index');
    let indexVersion = 2;
    if (fs.existsSync(indexFile)) {
      const fd = fs.openSync(indexFile, 'r');
      fs.readSync(fd, indexHeader, 0, 8, 0);
      fs.closeSync(fd);
      indexVersion = indexHeader.readUInt32BE(4);
    }

    // --- write objects (unreferenced until the ref at the very end) ---
    const cacheIndex = captureCacheIndex(repo.commonDir, wsId);
    fs.mkdirSync(path.dirname(cacheIndex), { recursive: true });
    const incremental = fs.existsSync(cacheIndex);
    const tmpBase = path.join(xetDir, 'tmp');
    const previous = await previousP;
    // The staged tree's new trees go into the capture's one pack, admitted with it (nothing loose is
    // written before the allowance admits the capture).
    const indexTreeP = writeIndexTree(repo, tmpBase, unmergedPaths(entries), previous?.index ?? null);
    const filesTreeP = scanToTree({
      worktree: repo.worktree,
      objectFormat: repo.objectFormat,
      objectsDir: repo.objectsDir,
      indexFile: cacheIndex,
      scratchDir: scratchDir(tmpBase, 'capture'),
      paths: walk.paths,
      write: true,
      previousTree: previous?.tree ?? null,
      previousFileMeta: previous?.filemeta ?? null,
      knownObjects: new Set(entries.filter((e) => !(e.flags & CE_INTENT_TO_ADD)).map((e) => e.oid)),
      progress,
      meta: true,
      admission: allowance,
      extraItems: indexTreeP.then((t) => t.items),
      chunking,
      headStart,
      // Kept where the head start is: a resident process, its own worktree.
      memos: headStart ? residentCaptureMemos(repo.worktree) : null,
      deferStatCache: options.afterReply !== undefined,
    });
    progress(`hashing ${walk.paths.length} files${incremental ? ' (stat cache)' : ''}`);
    // Settled together: a refusal must not leave a sibling still writing scratch files.
    const settled = await Promise.allSettled([filesTreeP, indexTreeP, collectTagObjects(refs, userOpts)]);
    if (settled[0].status === 'fulfilled') {
      packKept = settled[0].value.packKept;
      statCacheWrite = settled[0].value.statCacheWrite ?? null;
    }
    for (const r of settled) if (r.status === 'rejected') throw r.reason;
    const [scan, { tree: indexTree }, tagObjects] = settled.map(
      (r) => (r as PromiseFulfilledResult<unknown>).value,
    ) as [ScanResult, { tree: string }, TagObjects];

    await faultPoint('capture:after-pack');
    tracePhase('capture: manifest, commit, ref');
    progress('writing the snapshot');
    const filesTree = scan.tree;
    // The scan counts what it put in the tree; a path that vanished since the walk is not in it,
    // and a count that includes it would be a lie.
    const totals = scan.totals as Totals;
    const { files: fileCount, bytes, symlinks } = totals;
    if (fileCount !== walk.paths.length) {
      throw new XetError(
        'WORKTREE_CHANGED',
        `the snapshot would hold ${fileCount} files where ${walk.paths.length} were found; capture again`,
        { found: walk.paths.length, stored: fileCount },
      );
    }

    // Annotated tags travel as raw tag objects (blobs under tags/), re-created byte-identical on
    // restore; refs to bare trees or blobs are kept reachable under objects/.
    const extraTop: TreeEntryInput[] = [];
    if (tagObjects.tags.length) {
      const blobs = await writeBlobs(
        tagObjects.tags.map((t) => t.data),
        'blob',
        userOpts,
      );
      const tagTree = await mktree(
        tagObjects.tags.map((t, n) => ({ mode: '100644', type: 'blob', oid: blobs[n], name: t.oid })),
        userOpts,
      );
      extraTop.push({ mode: '040000', type: 'tree', oid: tagTree, name: 'tags' });
    }
    const looseObjects = [
      ...tagObjects.loose,
      ...opState.keep.filter((k) => !tagObjects.loose.some((o) => o.oid === k.oid)),
    ];
    if (looseObjects.length) {
      const objTree = await mktree(
        looseObjects.map((o) => ({
          mode: o.type === 'tree' ? '040000' : '100644',
          type: o.type,
          oid: o.oid,
          name: o.oid,
        })),
        userOpts,
      );
      extraTop.push({ mode: '040000', type: 'tree', oid: objTree, name: 'objects' });
    }
    const gitStateTree = await writeGitStateTree(opState.files, userOpts);
    if (gitStateTree) extraTop.push({ mode: '040000', type: 'tree', oid: gitStateTree, name: GITSTATE_TREE });

    const [gMaj, gMin, gPatch] = gitVersion();
    const flagged = (bit: number) =>
      entries
        .filter((e) => (e.flags & bit) !== 0)
        .map((e) => e.path)
        .sort();
    const manifest: Manifest = {
      schema: SNAPSHOT_SCHEMA,
      tool: { name: 'git-xet', version: TOOL_VERSION },
      git: { version: `${gMaj}.${gMin}.${gPatch}`, objectFormat: repo.objectFormat },
      platform: { os: os.platform(), arch: os.arch() },
      createdAt: new Date().toISOString(),
      message: options.message ?? '',
      source: { worktree: options.worktreeAs ?? repo.worktree, linkedWorktree: repo.gitDir !== repo.commonDir },
      head,
      refs: refs.map((r) => ({ name: r.name, oid: r.oid, type: r.type, ...(r.symref ? { symref: r.symref } : {}) })),
      stash,
      config: localConfig,
      index: {
        version: indexVersion,
        intentToAdd: flagged(CE_INTENT_TO_ADD),
        skipWorktree: flagged(CE_SKIP_WORKTREE),
        assumeUnchanged: flagged(CE_VALID),
        staleSizes: staleSizes(repo.worktree, entries, scan.sizeOf!),
      },
      emptyDirs: walk.emptyDirs,
      info: {
        exclude: readOptional(path.join(repo.commonDir, 'info', 'exclude')),
        attributes: readOptional(path.join(repo.commonDir, 'info', 'attributes')),
      },
      policy: {
        ignored: policy.ignored,
        include: policy.include,
        exclude: policy.exclude,
        secretPatterns: policy.secretPatterns,
        excludedSecrets,
        excludedByPattern,
        ignoredNotCaptured: walk.ignoredNotCaptured,
      },
      skipped,
      ...(innerRepos.repositories.length ? { repositories: innerRepos.repositories } : {}),
      ...(scan.chunked.size ? { chunked: [...scan.chunked.keys()] } : {}),
      counts: {
        files: fileCount,
        bytes,
        tracked: walk.counts.tracked,
        untracked: walk.counts.untracked,
        ignored: walk.counts.ignored,
        symlinks,
        emptyDirs: walk.emptyDirs.length,
        ...(scan.meta
          ? {
              diskBytes: bytes - scan.meta.linkedBytes,
              hardLinks: scan.meta.hardLinks,
              externalLinks: scan.meta.externalLinks,
            }
          : {}),
        ...(scan.chunked.size ? { chunkedFiles: scan.chunked.size, chunks: scan.chunkStats.chunks } : {}),
      },
      ...opState.manifest,
    };
    manifest.schema = schemaFor(manifest, { partedFileMeta: scan.filemeta?.parted });
    // The filemeta went into the scan's pack (or was there already, for an unchanged tree).
    if (scan.chunksTree) extraTop.push({ mode: '040000', type: 'tree', oid: scan.chunksTree, name: 'chunks' });
    if (scan.filemeta) {
      const { oid, parted } = scan.filemeta;
      extraTop.push(
        parted
          ? { mode: '040000', type: 'tree', oid, name: FILEMETA_ENTRY }
          : { mode: '100644', type: 'blob', oid, name: FILEMETA_ENTRY },
      );
    }
    const topEntries: TreeEntryInput[] = [
      { mode: '040000', type: 'tree', oid: filesTree, name: 'files' },
      { mode: '040000', type: 'tree', oid: indexTree, name: 'index' },
      ...extraTop,
    ];
    const resultOf = (
      snapshot: string,
      how: Pick<CaptureResult, 'unchanged' | 'repacked' | 'warnings'>,
    ): CaptureResult => ({
      snapshot,
      ...manifest.counts,
      excludedSecrets,
      skipped,
      excludedByPattern,
      ignoredNotCaptured: walk.ignoredNotCaptured,
      incremental,
      repositories: innerRepos.summaries,
      chunking: {
        files: scan.chunked.size,
        cacheHits: scan.chunkStats.cacheHits,
        newChunks: scan.chunkStats.newChunks,
        newChunkBytes: scan.chunkStats.newChunkBytes,
      },
      ...how,
    });
    // A files tree other than the one this worktree's last capture recorded cannot be that
    // snapshot's: no need to read it back to know something changed.
    if (!options.always && (!recorded || recorded.tree === filesTree)) {
      progress('comparing with the last snapshot');
      const last = await lastWorkspaceSnapshot(repo.commonDir, wsId, userOpts);
      if (last && (await sameSnapshotContent(last, manifest, topEntries, userOpts))) {
        finishStatCache();
        return resultOf(last, { unchanged: true, repacked: false, warnings: leftoverWarning(cleaned) });
      }
    }
    // Written here, not by two git processes in a row, unless git must write them (looseWriteLevel).
    const manifestData = serializeManifest(manifest);
    const level = looseWriteLevel(config);
    const manifestBlob =
      level !== null
        ? writeLooseObject(repo.objectsDir, repo.objectFormat, 'blob', manifestData, level)
        : (await writeBlobs([manifestData], 'blob', userOpts))[0];
    const topWithManifest: TreeEntryInput[] = [
      ...topEntries,
      { mode: '100644', type: 'blob', oid: manifestBlob, name: 'manifest.json' },
    ];
    const top =
      level !== null
        ? writeLooseObject(
            repo.objectsDir,
            repo.objectFormat,
            'tree',
            treeContent(topWithManifest, repo.objectFormat),
            level,
          )
        : await mktree(topWithManifest, userOpts);

    const identity = identityEnv(config);
    const commitOpts = { ...userOpts, env: { ...userOpts.env, ...identity } };
    const parents = await snapshotParents(
      repo,
      head,
      refs,
      [...tagObjects.peeledCommits, ...opState.commits, ...innerRepos.parents],
      stash,
      commitOpts,
    );
    const subject = options.message ? options.message : 'snapshot';
    const message = `xet: ${subject}\n\nSchema: ${manifest.schema}\n`;
    const asGit = level !== null ? commitsAsGit(config, commitOpts.env, message, Date.now()) : null;
    const commit =
      asGit && level !== null
        ? writeLooseObject(
            repo.objectsDir,
            repo.objectFormat,
            'commit',
            commitContent({
              tree: top,
              parents,
              name: identity.GIT_AUTHOR_NAME,
              email: identity.GIT_AUTHOR_EMAIL,
              ...asGit,
              message,
            }),
            level,
          )
        : await commitTree(top, parents, message, commitOpts);

    // --- publish: the ref, then the sidecar record ---
    await faultPoint('capture:before-ref');
    const snapshotRef = `${SNAPSHOT_REF_PREFIX}${commit}`;
    if (given && options.writeRef) await options.writeRef(snapshotRef, commit, 'xet: capture', config);
    else await git(['update-ref', '-m', 'xet: capture', snapshotRef, commit], userOpts);
    releasePack();
    rememberSnapshot(repo.commonDir, commit, manifestData, topWithManifest);
    // The snapshot exists from here on; what follows is bookkeeping, and a failure is a warning.
    await faultPoint('capture:after-ref');
    const warnings: string[] = leftoverWarning(cleaned);
    try {
      withSidecar(repo.commonDir, (db) => {
        const now = new Date().toISOString();
        recordFilesTree(
          db,
          { id: wsId, worktree: options.worktreeAs ?? repo.worktree, gitDir: repo.gitDir },
          filesTree,
          totals,
          now,
        );
        db.prepare(
          `INSERT OR IGNORE INTO snapshots(oid, workspace_id, created_at, message, files, bytes) VALUES (?, ?, ?, ?, ?, ?)`,
        ).run(commit, wsId, manifest.createdAt, manifest.message, fileCount, bytes);
      });
    } catch (e) {
      warnings.push(`the sidecar was not updated (the next capture will store more): ${(e as Error).message}`);
    }
    tracePhase('capture: consolidate');
    progress('consolidating packs');
    const repacked = await consolidatePacks(repo, config, allowance).catch((e: Error) => {
      warnings.push(`could not consolidate packs: ${e.message}`);
      return false;
    });
    warnings.push(...allowance.warnings);
    finishStatCache();
    return resultOf(commit, { unchanged: false, repacked, warnings });
  } finally {
    releasePack();
    allowance?.end();
    if (!locksHandedOver) {
      lock.release();
      objectsLock.release();
    }
  }
}

/** The dates of the snapshot's commit when this process writes it exactly as `git commit-tree`
 * would with this configuration and environment (commitContent), else null: no encoding header,
 * dates git takes as written (now, or its raw form), one identity git keeps as given, text git
 * keeps as UTF-8, a message without a NUL. (commit.gpgSign is not asked: commit-tree signs only
 * with -S, which a capture never passes; a test holds git to that.) */
function commitsAsGit(
  config: GitConfig,
  env: Record<string, string | undefined>,
  message: string,
  nowMs: number,
): { authored: string; committed: string } | null {
  const seen = gitSpawnEnv(env);
  if (config.get('i18n.commitencoding') !== undefined || message.includes('\0')) return null;
  const name = seen.GIT_AUTHOR_NAME;
  const email = seen.GIT_AUTHOR_EMAIL;
  if (!plainIdent(name) || !plainIdent(email)) return null;
  if (seen.GIT_COMMITTER_NAME !== name || seen.GIT_COMMITTER_EMAIL !== email) return null;
  if (![name, email, message].every(keptAsUtf8)) return null;
  const authored = identDate(seen.GIT_AUTHOR_DATE, nowMs);
  const committed = identDate(seen.GIT_COMMITTER_DATE, nowMs);
  return authored && committed ? { authored, committed } : null;
}

/** Every capture adds one pack; past `xet.capture.maxPacks` (default 50) the small ones are rolled
 * up with git's geometric repack, which touches only packs smaller than their neighbours, so the
 * cost stays proportional to recent captures. Concurrent writers are safe: repack never removes a
 * pack it did not list, and ours become visible only when complete. */
async function consolidatePacks(repo: Repo, config: GitConfig, allowance: CaptureAllowance): Promise<boolean> {
  const max = Number(config.get('xet.capture.maxPacks') ?? 50);
  if (!Number.isInteger(max) || max <= 0) return false;
  const packDir = path.join(repo.objectsDir, 'pack');
  const packNames = () =>
    fs
      .readdirSync(packDir)
      .filter((n) => n.endsWith('.idx'))
      .map((n) => n.slice(0, -'.idx'.length));
  const before = packNames();
  if (before.length <= max) return false;
  await git(['repack', '-d', '-q', '--geometric=2', '--no-write-bitmap-index'], repoOpts(repo));
  allowance.repacked(packDir, before, packNames());
  return true;
}

/** Which files a capture chunks (null: none). A large stage-0 entry whose file git would call
 * stat-clean (not assume-unchanged or skip-worktree, whose stat git does not check) holds its
 * staged blob: such a file is hashed whole and names that blob (chunked-scan.ts). Stat-clean here
 * is stricter than git (nanoseconds too, the executable bit whatever core.fileMode says, and never
 * within git's racy window): a file it misses is chunked, found to be its staged blob, and named so
 * all the same; only the work differs. */
function chunkingSpec(threshold: number | null, entries: IndexEntry[], worktree: string): ChunkingSpec | null {
  if (threshold === null) return null;
  const cleanTracked = new Map<string, string>();
  const staged = new Map<string, string>();
  for (const e of entries) {
    if (e.stage !== 0 || e.flags & CE_INTENT_TO_ADD || !/^100(644|755)$/.test(e.mode)) continue;
    staged.set(e.path, e.oid);
    if (e.flags & (CE_VALID | CE_SKIP_WORKTREE) || !e.recorded || e.recorded.racy || e.size < threshold) continue;
    if (statClean(path.join(worktree, e.path), e.mode, e.recorded.stat)) cleanTracked.set(e.path, e.oid);
  }
  return { threshold, cleanTracked, staged };
}

/** Whether a file's lstat is the stat data recorded for it, field for field (what git would record
 * for it now, writeStat, equals what it did record), and its type and executable bit are the
 * entry's mode's. */
function statClean(file: string, mode: string, stat: Buffer): boolean {
  let st: fs.BigIntStats;
  try {
    st = fs.lstatSync(file, { bigint: true });
  } catch {
    return false;
  }
  if (!st.isFile() || ((st.mode & 0o100n) !== 0n) !== (mode === '100755')) return false;
  const now = Buffer.from(stat); // the recorded mode stays: writeStat leaves it
  writeStat(now, 0, statFields(st));
  return now.equals(stat);
}

/** Index entries whose recorded size is not the file's size: git reports those as modified without
 * reading them, so the restore must record the same sizes to show the same status. The file's size
 * is the one the capture saw (`sizeOf`); a path the capture did not take (excluded, or inside an
 * inner repository) is lstat'ed here. Gone, or a directory where the file was, is no stale size. */
function staleSizes(
  worktree: string,
  entries: IndexEntry[],
  sizeOf: (p: string) => number | undefined,
): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  const unseen: IndexEntry[] = [];
  for (const e of entries) {
    // Gitlinks: git's own listing (--ignore-submodules=all) never calls them modified.
    if (e.stage !== 0 || e.size === 0 || e.mode === '160000') continue;
    if (e.flags & (CE_VALID | CE_SKIP_WORKTREE | CE_INTENT_TO_ADD)) continue;
    const size = sizeOf(e.path);
    if (size === undefined) unseen.push(e);
    else if (size % 2 ** 32 !== e.size) out.push({ path: e.path, size: e.size });
  }
  if (unseen.length) {
    const rows = lstatMany(
      worktree,
      unseen.map((e) => e.path),
    );
    unseen.forEach((e, i) => {
      if (absent(rows, i)) return;
      const type = rows[i * STAT_ROW + ROW.mode] & 0o170000;
      if (type !== 0o100000 && type !== 0o120000) return;
      // (A size past 2^53 is -1 here: never a 32-bit index size, so stale.)
      if (rows[i * STAT_ROW + ROW.size] % 2 ** 32 !== e.size) out.push({ path: e.path, size: e.size });
    });
  }
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** The staged trees last written, by index file and what stands for its content (indexFileKey). */
const indexTrees = new Map<string, string>();
const INDEX_TREES_KEPT = 4;

/** The staged tree, from a copy of the user's index (capture must not touch the index itself). Its
 * new trees are written to a scratch object dir and returned, for the capture's pack. The same
 * index as at this process's last capture gives the same tree (git's write-tree reads the index
 * alone), which is taken without git when the snapshot this capture stores against (`held`: its
 * `index` entry, a ref holds it, so all its trees are there) has it: a git process and a copy of
 * the index fewer per re-capture in a resident process. */
async function writeIndexTree(
  repo: Repo,
  tmpBase: string,
  unmerged: string[],
  held: string | null,
): Promise<{ tree: string; items: PackItem[] }> {
  const file = path.join(repo.gitDir, 'index');
  const key = indexFileKey(file);
  const kept = key === null ? undefined : indexTrees.get(`${file}\0${key}`);
  if (kept !== undefined && kept === held) return { tree: kept, items: [] };
  const dir = scratchDir(tmpBase, 'index');
  try {
    const objects = path.join(dir, 'objects');
    fs.mkdirSync(objects);
    const o = repoOpts(repo);
    const env = { ...o.env, GIT_OBJECT_DIRECTORY: objects, GIT_ALTERNATE_OBJECT_DIRECTORIES: repo.objectsDir };
    const tree = await indexFileTree(file, dir, { ...o, env }, false, unmerged);
    // Kept only when the index did not change while git read it.
    if (key !== null && indexFileKey(file) === key) {
      if (indexTrees.size >= INDEX_TREES_KEPT) indexTrees.delete(indexTrees.keys().next().value as string);
      indexTrees.set(`${file}\0${key}`, tree);
    }
    return { tree, items: looseObjects(objects) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function ensureEmptyTree(repo: Repo): Promise<string> {
  const oid = await mktree([], repoOpts(repo));
  if (oid !== emptyTreeOid(repo.objectFormat)) throw new XetError('GIT_FAILED', 'unexpected empty tree oid');
  return oid;
}

interface TagObjects {
  tags: { oid: string; data: Buffer }[];
  loose: { oid: string; type: 'tree' | 'blob' }[];
  peeledCommits: string[];
}

async function collectTagObjects(refs: { oid: string; type: string }[], opts: { cwd: string }): Promise<TagObjects> {
  const out: TagObjects = { tags: [], loose: [], peeledCommits: [] };
  const seen = new Set<string>();
  for (const r of refs) {
    if (r.type === 'tree' || r.type === 'blob') out.loose.push({ oid: r.oid, type: r.type });
  }
  let pending = refs.filter((r) => r.type === 'tag').map((r) => r.oid);
  while (pending.length) {
    const batch = [...new Set(pending.filter((o) => !seen.has(o)))];
    batch.forEach((o) => seen.add(o));
    pending = [];
    const objs = await catFileBatch(batch, opts);
    for (const oid of batch) {
      const o = objs.get(oid);
      const big = objs.oversized.get(oid);
      if (big !== undefined)
        throw new XetError('GIT_FAILED', `tag object ${oid} is ${big} bytes, too large to capture`);
      if (!o) throw new XetError('GIT_FAILED', `tag object ${oid} is missing`);
      out.tags.push({ oid, data: Buffer.from(o.data) });
      const m = /^object ([0-9a-f]+)\ntype (\w+)\n/.exec(o.data.toString('utf8', 0, 200));
      if (!m) throw new XetError('GIT_FAILED', `tag object ${oid} is malformed`);
      if (m[2] === 'tag') pending.push(m[1]);
      else if (m[2] === 'commit') out.peeledCommits.push(m[1]);
      else out.loose.push({ oid: m[1], type: m[2] as 'tree' | 'blob' });
    }
  }
  out.tags.sort((a, b) => (a.oid < b.oid ? -1 : 1));
  const uniq = new Map(out.loose.map((o) => [o.oid, o]));
  out.loose = [...uniq.values()].sort((a, b) => (a.oid < b.oid ? -1 : 1));
  return out;
}

/** HEAD first, then every other commit a ref, tag or stash entry names, so that fetching the
 * snapshot brings all the history it refers to. Beyond MAX_PARENTS they are grouped under
 * intermediate commits (a tree of octopus merges) to keep every commit ordinary. */
async function snapshotParents(
  repo: Repo,
  head: { oid: string | null },
  refs: { oid: string; type: string }[],
  peeledCommits: string[],
  stash: { oid: string }[],
  opts: { cwd: string; env: Record<string, string> },
): Promise<string[]> {
  const others = new Set<string>();
  for (const r of refs) if (r.type === 'commit') others.add(r.oid);
  for (const c of peeledCommits) others.add(c);
  for (const s of stash) others.add(s.oid);
  if (head.oid) others.delete(head.oid);
  let rest = [...others].sort();
  const empty = rest.length + (head.oid ? 1 : 0) > MAX_PARENTS ? await ensureEmptyTree(repo) : '';
  const first = head.oid ? [head.oid] : [];
  while (first.length + rest.length > MAX_PARENTS) {
    const groups: string[] = [];
    for (let i = 0; i < rest.length; i += MAX_PARENTS) {
      groups.push(await commitTree(empty, rest.slice(i, i + MAX_PARENTS), 'xet: refs group\n', opts));
    }
    rest = groups;
  }
  return [...first, ...rest];
}

interface Totals {
  files: number;
  bytes: number;
  symlinks: number;
}

/** The files tree and totals of the newest snapshot in the repository, if any. */
async function newestSnapshotBase(
  commonDir: string,
  opts: {
    cwd: string;
  },
): Promise<({ tree: string; filemeta: string | null; index: string | null } & Totals) | null> {
  // Only a ref that names its own commit is a snapshot (a fetched one may point anywhere).
  const newest = (
    await gitText(
      ['for-each-ref', '--sort=-creatordate', '--format=%(refname) %(objectname)', SNAPSHOT_REF_PREFIX],
      opts,
    )
  )
    .split('\n')
    .map((l) => l.split(' '))
    .find(([name, oid]) => name === `${SNAPSHOT_REF_PREFIX}${oid}`)?.[1];
  if (!newest) return null;
  const objs = await catFileBatch([`${newest}:manifest.json`], opts);
  const manifest = objs.get(`${newest}:manifest.json`);
  // No manifest (or one too large to read: its top tree may be too): no base, and nothing more read.
  if (!manifest) return null;
  // Its files tree and its filemeta (whose objects a capture then need not store again).
  const entries = await snapshotTop(commonDir, newest, opts);
  if (!entries) return null;
  const files = entries.get('files');
  if (files?.type !== 'tree') return null;
  try {
    const counts = (JSON.parse(manifest.data.toString('utf8')) as { counts?: Partial<Totals> }).counts;
    if (![counts?.files, counts?.bytes, counts?.symlinks].every((n) => Number.isSafeInteger(n))) return null;
    return {
      tree: files.oid,
      filemeta: entries.get('filemeta')?.oid ?? null,
      index: entries.get('index')?.oid ?? null,
      ...(counts as Totals),
    };
  } catch {
    return null;
  }
}
