// Forks: writable copies of a snapshot, each a linked worktree of the repository (own HEAD and
// index, shared objects and refs), laid out by one of three modes:
//   overlay  the snapshot's base is the lower layer of a kernel overlay; the fork writes only to its
//            own upper dir, so creating one costs the same at any tree size;
//   clone    the base's files reflinked into the fork (extents shared until written);
//   copy     the snapshot's files checked out into the fork.
// A fork's HEAD is detached at the snapshot's HEAD commit: refs are shared by all worktrees, so a
// fork on the snapshot's branch would move that branch for everyone when it commits. The branch is
// recorded, and `export --branch` makes branches from a fork's work.
//
// Order of effects: the registry row ('creating') comes first, then the worktree, files and index,
// then 'active'. Any failure undoes what was made; a killed creator leaves a 'creating' row that
// `forks` shows as incomplete and `discard` removes.

import { FORK_MARKER_FILE } from '../gc/roots';
import { withObjectsShared } from '../gc/objects-lock';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git } from '../git/exec';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { sidecarDir, withExistingSidecar, withSidecar, type Db } from '../sidecar/db';
import { deleteFork, insertFork, liveForkAt, updateFork, type ForkMode, type ForkRow } from '../sidecar/forks';
import { captureCacheIndex, recordFilesTree, workspaceId } from '../sidecar/workspaces';
import { checkTarget, refuseInsideGitDir } from '../snapshot/target';
import { refuseForkOfOperation } from '../snapshot/operation-state';
import { readSnapshot, resolveSnapshotOid, type Snapshot } from '../snapshot/store';
import { refuseTooLong } from '../snapshot/paths';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import type { GitOptions } from '../git/exec';
import { baseFor, basesDir, ensureBase, readBaseRecord, writeBaseRecord, type BaseRecord } from './base';
import { addForkWorktree } from './worktree';
import { cloneTree, probeReflink, removeDeep } from './copy';
import { isMounted, mountOverlay, probeOverlay, unmount, unmountLazy } from './overlay';
import { diskFull } from './tools';
import { faultPoint } from '../testing/fault-points';
import { admitRepository, enforce, type Admission } from '../allowance/admit';
import { forkAllowance } from '../allowance/config';
import { FORK_FILES_PART, forkLimits, forkOwnDir } from '../allowance/fork-root';
import { forkRoot, recordPart } from '../allowance/ledger';
import type { Amount } from '../allowance/model';
import { readConfig, type GitConfig } from '../git/config';
import { chooseRoute, layerPaths, layerSetting, makeLayer, mountLayer, removeLayer, type LayerRoute } from './layer';
import { dropReclaimView } from './reclaim-view';
import { assertForkWritable, fenceIfStale, forkSlot, hasStaleGuard, unfenceFork } from '../tasks/enforce';

export type RequestedMode = ForkMode | 'auto';

export interface ForkOptions {
  cwd: string;
  snapshot: string;
  dir: string;
  mode: RequestedMode;
  /** `--allowance BYTES[,FILES]`; default `xet.fork.allowance`. */
  allowance?: string;
  progress?: (what: string) => void;
  /** The repository `cwd` is in, when the caller knows it already (the daemon asks git once). */
  repo?: Repo;
  /** How to read its config, when the caller has a better way than asking git (the daemon's memo). */
  readConfig?: () => Promise<GitConfig>;
}

export interface ForkResult {
  id: string;
  dir: string;
  mode: ForkMode;
  snapshot: string;
  /** The commit the fork's (detached) HEAD is at; null for an unborn branch. */
  head: string | null;
  /** The branch the snapshot's HEAD was on, if any. */
  branch: string | null;
  /** Why each better mode was not used (auto only). */
  notAvailable: Partial<Record<'overlay' | 'clone', string>>;
  /** Whether this fork had to materialise the snapshot's base first. */
  baseBuilt: boolean;
  /** The fork's own allowance, or null. */
  allowance: { bytes: number; files: number | null } | null;
  /** What bounds the fork's own processes in the kernel: its layer's route, or null (uncovered). */
  route: LayerRoute | null;
}

export function forksDir(repo: Repo): string {
  return path.join(sidecarDir(repo.commonDir), 'forks');
}

async function chooseMode(
  requested: RequestedMode,
  repo: Repo,
  target: string,
  baseExists: boolean,
): Promise<{ mode: ForkMode; notAvailable: ForkResult['notAvailable'] }> {
  const notAvailable: ForkResult['notAvailable'] = {};
  // Asked for overlay with its base in place, the fork's own mount answers whether mounting is
  // allowed before anything costly is made (a refused mount undoes a worktree, a few files); a base
  // to build first is worth a probe.
  if (requested === 'overlay' && baseExists) return { mode: 'overlay', notAvailable };
  if (requested === 'overlay' || requested === 'auto') {
    const failure = await probeOverlay(path.join(sidecarDir(repo.commonDir), 'tmp'));
    if (!failure) return { mode: 'overlay', notAvailable };
    const why = failure.notPermitted
      ? `this process may not mount an overlay: ${failure.message}`
      : `an overlay mount failed: ${failure.message}`;
    if (requested === 'overlay') throw new XetError('FORK_MODE_UNAVAILABLE', why, { mode: 'overlay' });
    notAvailable.overlay = why;
  }
  if (requested === 'clone' || requested === 'auto') {
    const why = probeReflink(basesDir(repo), target);
    if (!why) return { mode: 'clone', notAvailable };
    if (requested === 'clone') throw new XetError('FORK_MODE_UNAVAILABLE', why, { mode: 'clone' });
    notAvailable.clone = why;
  }
  return { mode: 'copy', notAvailable };
}

// Holds the objects lock shared for its whole run: a gc never collects what it is making reachable.
export async function createFork(options: ForkOptions): Promise<ForkResult> {
  const repo = options.repo ?? (await findRepo(options.cwd, true));
  return withObjectsShared(repo.commonDir, () => createForkShared(options, repo));
}

async function createForkShared(options: ForkOptions, repo: Repo): Promise<ForkResult> {
  const o = repoOpts(repo);
  // A snapshot validated once (schema, every path) has that recorded with its base: its id names
  // the same bytes, so forks of it skip that O(tree) work. Without a record that checks out, the
  // snapshot is validated in full and the record (re)written once the base exists.
  const named = recordedSnapshot(repo, options.snapshot);
  const oid = named?.snap.oid ?? (await resolveSnapshotOid(options.snapshot, o));
  const recorded = named ?? readBaseRecord(repo, oid);
  const snap = recorded?.snap ?? (await readSnapshot(oid, o));
  // Required here, not at the top: restore's modules (capture's among them) are for this path only.
  const longest = recorded?.longest ?? (await (await import('../snapshot/restore')).validateSnapshotPaths(snap, o));
  const validated: BaseRecord | null = recorded ? null : { snap, longest };
  if (validated) await requireHeadCommit(snap, o);
  refuseForkOfOperation(snap);
  if (snap.manifest.repositories?.length) {
    // A fork shares one git dir with the repository; submodule git dirs would have to be per fork.
    throw new XetError(
      'SUBMODULE_PRESENT',
      `snapshot ${oid.slice(0, 12)} holds ${snap.manifest.repositories.length} inner repositories ` +
        `(${snap.manifest.repositories[0].path}), which forks do not support yet; restore it instead`,
      { paths: snap.manifest.repositories.map((r) => r.path).slice(0, 50) },
    );
  }
  // The allowance is read and the fork's files checked against it before anything is made.
  const config = await (options.readConfig ?? (() => readConfig(o)))();
  const allowance = forkAllowance(config, options.allowance);
  const id = crypto.randomBytes(6).toString('hex');
  const idx = indexBound(snap, longest);
  const target = path.resolve(options.cwd, options.dir);
  const ownFiles = add(idx, gitFileBound(repo, target));
  if (options.mode === 'copy' || options.mode === 'clone') admitForkFiles(snap, allowance, ownFiles, id);
  checkTarget(target, 'a fork');
  const known = realTarget(target);
  const stale = withSidecar(repo.commonDir, (db) => liveForkAt(db, known));
  if (stale) {
    throw new XetError(
      'TARGET_NOT_EMPTY',
      `${target} is registered as fork ${stale.id}, which is not gone yet; run git xet discard ${target} first`,
      { dir: target, fork: stale.id },
    );
  }
  refuseInsideGitDir(target, repo, 'make a fork');
  // Every mode puts the snapshot's paths under the target; one the kernel refuses would fail half
  // way through creating the fork (copy) or leave files nobody can open (overlay, clone).
  refuseTooLong(known, longest, 'fork');
  // The target directory is made only once the registry row is ours (a creator killed before leaves
  // nothing; after, a row `discard` removes); the reflink probe looks at the filesystem it will be on.
  const dir = known;
  const baseExists = fs.existsSync(baseFor(repo, oid).index);
  const chosen = await chooseMode(options.mode, repo, nearestExisting(dir), baseExists);
  const { mode } = chosen;
  const own = path.join(forksDir(repo), id);
  let route: LayerRoute | null = null;
  if (mode !== 'overlay') admitForkFiles(snap, allowance, ownFiles, id);
  else if (allowance) route = (await chooseRoute(layerSetting(config), forksDir(repo))).route;
  // The repository root gains the base (unless it exists) and the fork's capture cache index.
  const newBase = mode !== 'copy' && !baseExists;
  const admission = await admitRepository(
    repo,
    newBase ? add(add(snapshotAmount(snap), add(idx, idx)), idx) : idx,
    'grow',
    `fork of ${oid.slice(0, 12)}`,
    config,
  );
  try {
    return await createForkAdmitted(repo, snap, options, {
      dir,
      chosen,
      id,
      own,
      route,
      allowance,
      admission,
      idx,
      config,
      validated,
    });
  } finally {
    admission.end();
  }
}

interface Admitted {
  dir: string;
  chosen: Awaited<ReturnType<typeof chooseMode>>;
  id: string;
  own: string;
  route: LayerRoute | null;
  allowance: { bytes: number; files: number | null } | null;
  admission: Admission;
  /** A bound of one index of the snapshot (the capture cache index a fork adds to the repository). */
  idx: Amount;
  config: GitConfig;
  /** This run's full validation of the snapshot, to record with its base; null: it was recorded. */
  validated: BaseRecord | null;
}

async function createForkAdmitted(repo: Repo, snap: Snapshot, options: ForkOptions, a: Admitted): Promise<ForkResult> {
  const { dir, chosen, id, own, route, allowance, admission, idx, config, validated } = a;
  const { mode } = chosen;
  const oid = snap.oid;
  const progress = options.progress ?? (() => undefined);
  const layer = route ? layerPaths(own) : null;
  const head = snap.manifest.head;
  const row: Omit<ForkRow, 'state' | 'discardedAt' | 'keptSnapshot'> = {
    id,
    dir,
    mode,
    snapshot: oid,
    headOid: head.oid,
    branch: head.kind === 'branch' ? head.ref : null,
    gitDir: null,
    upper: mode === 'overlay' ? (layer?.upper ?? path.join(own, 'upper')) : null,
    work: mode === 'overlay' ? (layer?.work ?? path.join(own, 'work')) : null,
    createdAt: new Date().toISOString(),
    allowanceBytes: allowance?.bytes ?? null,
    allowanceFiles: allowance?.files ?? null,
    layerRoute: route,
  };
  try {
    withSidecar(repo.commonDir, (db) => insertFork(db, row));
  } catch (e) {
    if (/UNIQUE constraint/.test((e as Error).message)) {
      throw new XetError('TARGET_NOT_EMPTY', `${dir} is being made into a fork by another git xet process`, { dir });
    }
    throw e;
  }
  let created: boolean;
  try {
    created = makeTargetDir(dir);
  } catch (e) {
    withSidecar(repo.commonDir, (db) => deleteFork(db, id));
    throw e;
  }

  let gitDir: string | null = null;
  let mounted = false;
  let baseBuilt = false;
  try {
    let base = null;
    if (mode !== 'copy') {
      progress(`materialising the base of ${oid.slice(0, 12)}`);
      const b = await ensureBase(repo, snap, { admission, more: idx }, validated ?? undefined);
      base = b.base;
      baseBuilt = b.built;
      if (validated && !b.built) writeBaseRecord(repo, validated);
      await faultPoint('fork:after-base');
    }
    if (layer && route && allowance) {
      progress(`making the fork's ${route} layer (${allowance.bytes} bytes)`);
      await makeLayer(layer, route, allowance, id);
      await faultPoint('fork:after-layer');
    }
    if (mode === 'overlay' && row.upper && row.work) {
      fs.mkdirSync(row.upper, { recursive: true });
      fs.mkdirSync(row.work, { recursive: true });
    }
    progress('adding the worktree');
    // The worktree's .git file belongs to the fork, not the base: an overlay fork's is in its upper layer.
    const link = path.join(mode === 'overlay' && row.upper ? row.upper : dir, '.git');
    gitDir = await addWorktree(repo, config, { dir, link, id, snap });
    // Recorded at once: verify knows a fork by its admin dir, and must see a creation killed from
    // here on as incomplete (a copy fork killed after its files are laid would match its snapshot).
    withSidecar(repo.commonDir, (db) => updateFork(db, id, { gitDir }));
    writeForkMarker(gitDir, { id, snapshot: oid, mode, createdAt: row.createdAt });
    await faultPoint('fork:after-worktree');
    const filesIndex = path.join(gitDir, 'xet-files.index');
    const spec = {
      snap,
      worktree: dir,
      objectsDir: repo.objectsDir,
      filesIndex,
      indexFile: path.join(gitDir, 'index'),
      scratchParent: gitDir,
      repoGitDir: gitDir,
    };
    if (mode === 'overlay' && base && row.upper && row.work) {
      // The base's index holds the stat data of the base's files, which the overlay shows unchanged.
      fs.copyFileSync(base.index, spec.indexFile);
      fs.copyFileSync(base.filesIndex, filesIndex);
      progress('mounting');
      await faultPoint('fork:before-mount');
      const failure = await mountOverlay({ lower: base.tree, upper: row.upper, work: row.work }, dir);
      if (failure) {
        throw new XetError(
          failure.notPermitted ? 'FORK_MODE_UNAVAILABLE' : 'FORK_BROKEN',
          `cannot mount the fork: ${failure.message}`,
          { dir, mode },
        );
      }
      mounted = true;
    } else if (mode === 'clone' && base) {
      progress(`cloning ${snap.manifest.counts.files} files`);
      // Clone and copy forks' modules are required here: an overlay fork never needs them.
      const { layIndex } = await import('../snapshot/lay');
      const { refreshIndexStat } = await import('../snapshot/filemeta');
      await cloneTree(base.tree, dir);
      fs.copyFileSync(base.filesIndex, filesIndex);
      // Copies are new inodes with the base's bytes, times and links (cp -a): their stat data is
      // recorded from lstat, no file is read.
      refreshIndexStat(filesIndex, dir, snap.manifest.git.objectFormat);
      await layIndex(spec);
    } else {
      progress(`writing ${snap.manifest.counts.files} files`);
      const { layFiles, layIndex } = await import('../snapshot/lay');
      await layFiles(spec);
      await layIndex(spec);
    }
    if (mode !== 'overlay') {
      // The fork's files as its base counts them, and its .git file: a check reads this, a recount
      // walks the tree (and finds the same).
      const gitFile = { bytes: fs.lstatSync(path.join(dir, '.git')).size, files: 1 };
      withSidecar(repo.commonDir, (db) =>
        recordPart(db, forkRoot(id), FORK_FILES_PART, add(snapshotAmount(snap), gitFile)),
      );
    }
    const adopt = adoptWorkspace(repo, dir, gitDir, snap, filesIndex);
    await faultPoint('fork:before-active');
    withSidecar(repo.commonDir, (db) =>
      db.transaction(() => {
        adopt(db);
        updateFork(db, id, { state: 'active' });
      })(),
    );
  } catch (e) {
    // Judged before the undo frees the space again.
    const full = diskFull(e, [dir, repo.commonDir]);
    await undoCreate(repo, { ...row, gitDir }, mounted, !created);
    if (full) throw new XetError('DISK_FULL', `no space left on ${full} while creating the fork at ${dir}`, { dir });
    throw e;
  }
  return {
    id,
    dir,
    mode,
    snapshot: oid,
    head: row.headOid,
    branch: row.branch,
    notAvailable: chosen.notAvailable,
    baseBuilt,
    allowance,
    route,
  };
}

const add = (a: Amount, b: Amount): Amount => ({ bytes: a.bytes + b.bytes, files: a.files + b.files });

/** A snapshot's files as laid out: regular files and symlinks (the manifest's `files` counts both;
 * a symlink's size is its target's length, which its byte count includes). */
function snapshotAmount(snap: Snapshot): Amount {
  const c = snap.manifest.counts;
  return { bytes: c.bytes, files: c.files };
}

/** A bound of the `.git` file `git worktree add` writes into the fork: `gitdir: <common>/worktrees/
 * <name>`, the name being the dir's, with a number git appends when it is taken. */
function gitFileBound(repo: Repo, target: string): Amount {
  const adminDir = path.join(fs.realpathSync(repo.commonDir), 'worktrees', path.basename(target));
  return { bytes: Buffer.byteLength(`gitdir: ${adminDir}\n`) + 12, files: 1 };
}

/** An upper bound of one index of the snapshot's paths: header, per entry 62 bytes of stat data
 * and id (plus 12 for SHA-256) and a path no longer than the longest, padded to 8; the extensions
 * git writes (a cache tree: a few dozen bytes per directory, bounded by one per entry) and checksum. */
function indexBound(snap: Snapshot, longest: number): Amount {
  const c = snap.manifest.counts;
  const entries = c.files + c.symlinks;
  const oidBytes = snap.manifest.git.objectFormat === 'sha256' ? 32 : 20;
  const entry = 62 + (oidBytes - 20) + longest + 8;
  return { bytes: 12 + entries * (entry + oidBytes + 16) + 4096 + oidBytes, files: 1 };
}

/** A clone or copy fork's files (with its .git file and its admin dir's index) must fit its
 * allowance: refused before anything is made. */
function admitForkFiles(
  snap: Snapshot,
  allowance: { bytes: number; files: number | null } | null,
  own: Amount,
  id: string,
): void {
  if (!allowance) return;
  const limits = forkLimits({ allowanceBytes: allowance.bytes, allowanceFiles: allowance.files });
  enforce(
    forkRoot(id),
    limits,
    { bytes: 0, files: 0 },
    add(snapshotAmount(snap), own),
    'grow',
    `fork of ${snap.oid.slice(0, 12)}`,
  );
}

/** Create the target directory; true if this call created it (EEXIST: it was there, empty). */
function makeTargetDir(target: string): boolean {
  try {
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.mkdirSync(target);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST' && fs.statSync(target).isDirectory()) return false;
    throw new XetError('TARGET_UNUSABLE', `cannot create ${target}: ${(e as Error).message}`, { dir: target });
  }
}

/** The real path a target has or will have: its nearest existing ancestor resolved (symlinks),
 * the rest as given. */
function realTarget(target: string): string {
  const at = nearestExisting(target);
  return path.join(fs.realpathSync(at), path.relative(at, target));
}

function nearestExisting(p: string): string {
  let at = p;
  while (!fs.existsSync(at) && path.dirname(at) !== at) at = path.dirname(at);
  return at;
}

/** The fork's linked worktree (empty, detached at the snapshot's HEAD commit), locked so `git
 * worktree prune` never drops it while it is unmounted; returns its admin dir. */
async function addWorktree(
  repo: Repo,
  config: GitConfig,
  w: { dir: string; link: string; id: string; snap: Snapshot },
): Promise<string> {
  const head = w.snap.manifest.head;
  // An unborn HEAD has no commit to detach at: start at the snapshot commit, then point HEAD at the
  // unborn branch as the snapshot had it.
  const gitDir = await addForkWorktree(repo, config, {
    dir: w.dir,
    link: w.link,
    commit: head.oid ?? w.snap.oid,
    reason: `git xet fork ${w.id}`,
  });
  if (head.kind === 'branch' && head.oid === null) fs.writeFileSync(path.join(gitDir, 'HEAD'), `ref: ${head.ref}\n`);
  // `git worktree add --no-checkout` leaves no index; ours comes later.
  fs.rmSync(path.join(gitDir, 'index'), { force: true });
  return gitDir;
}

/** A full snapshot id resolved without git: its snapshot ref (a loose ref file) names it, so the
 * commit is in the repository (git keeps what refs reach), and its base records that it was
 * validated as a snapshot (so the ref, which a fetch could have brought, is not taken on its word).
 * Anything else (an abbreviation, a packed ref, no record) is resolveSnapshotOid's. */
function recordedSnapshot(repo: Repo, spec: string): BaseRecord | null {
  if (!/^(?:[0-9a-f]{40}|[0-9a-f]{64})$/.test(spec)) return null;
  try {
    if (fs.readFileSync(path.join(repo.commonDir, SNAPSHOT_REF_PREFIX, spec), 'utf8') !== `${spec}\n`) return null;
  } catch {
    return null;
  }
  return readBaseRecord(repo, spec);
}

/** A snapshot's HEAD commit must be in the repository for a fork to detach at it (git worktree add
 * checked this; a fork whose worktree is written directly must too). Checked with the validation. */
async function requireHeadCommit(snap: Snapshot, o: GitOptions): Promise<void> {
  const commit = snap.manifest.head.oid;
  if (!commit) return;
  const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', `${commit}^{commit}`], {
    ...o,
    okCodes: [1, 128],
  });
  if (r.code !== 0 || r.stdout.toString('utf8').trim() !== commit) {
    throw new XetError(
      'SNAPSHOT_INVALID',
      `snapshot ${snap.oid.slice(0, 12)}'s HEAD commit ${commit} is not in this repository`,
      {
        snapshot: snap.oid,
        head: commit,
      },
    );
  }
}

export const FORK_MARKER_SCHEMA = 'xet.fork-marker/v1';

/** `<admin dir>/xet-fork.json`: the fork's roots (its snapshot) outside the sidecar, so marking after
 * the database was lost (and fsck --rebuild) still knows the fork. Written atomically. */
function writeForkMarker(gitDir: string, m: { id: string; snapshot: string; mode: ForkMode; createdAt: string }): void {
  const file = path.join(gitDir, FORK_MARKER_FILE);
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, `${JSON.stringify({ schema: FORK_MARKER_SCHEMA, ...m })}\n`);
  fs.renameSync(tmp, file);
}

/** Make the fork a workspace whose last capture is the snapshot's files, with the files index as its
 * stat cache (a capture in the fork hashes and stores only what the fork changed): the index moves
 * into place now, the returned step records the workspace in the sidecar. */
function adoptWorkspace(repo: Repo, dir: string, gitDir: string, snap: Snapshot, filesIndex: string): (db: Db) => void {
  // As findRepo(dir) would report it (both are real paths), without one more git process.
  const fork = { worktree: dir, gitDir };
  const wsId = workspaceId(fork.gitDir);
  const cache = captureCacheIndex(repo.commonDir, wsId);
  fs.mkdirSync(path.dirname(cache), { recursive: true });
  fs.renameSync(filesIndex, cache);
  const c = snap.manifest.counts;
  return (db) =>
    recordFilesTree(
      db,
      { id: wsId, worktree: fork.worktree, gitDir: fork.gitDir },
      snap.filesTree,
      { files: c.files, bytes: c.bytes, symlinks: c.symlinks },
      null,
    );
}

/** Undo a fork creation that failed: unmount, drop the worktree, empty the target, forget the row. */
async function undoCreate(
  repo: Repo,
  row: Pick<ForkRow, 'id' | 'dir' | 'gitDir' | 'mode'>,
  mounted: boolean,
  existed: boolean,
): Promise<void> {
  if (mounted || (row.mode === 'overlay' && isMounted(row.dir))) {
    // Nobody can be using a fork that never finished; a lazy unmount detaches it regardless.
    if ((await unmount(row.dir)) !== 'ok') await unmountLazy(row.dir);
  }
  await removeForkFiles(repo, row);
  if (!isMounted(row.dir)) {
    if (existed) await emptyDir(row.dir);
    else await removeDeep(row.dir);
  }
  withSidecar(repo.commonDir, (db) => deleteFork(db, row.id));
}

/** Remove what a fork owns besides its working tree: the worktree admin dir, layers, stat cache. */
export async function removeForkFiles(repo: Repo, row: Pick<ForkRow, 'id' | 'gitDir' | 'dir'>): Promise<void> {
  // A creator killed between `git worktree add` and recording its admin dir left no name for it:
  // find it by the working tree it points at (git itself refuses a second worktree there).
  const gitDir = row.gitDir ?? adminDirPointingAt(repo, row.dir);
  if (gitDir) {
    fs.rmSync(captureCacheIndex(repo.commonDir, workspaceId(gitDir)), { force: true });
    // The admin dir is ours (made for this fork); removing it is what `git worktree remove` does.
    if (gitDir.startsWith(path.join(repo.commonDir, 'worktrees') + path.sep)) {
      fs.rmSync(gitDir, { recursive: true, force: true });
    }
  }
  // A layer (the fork's own filesystem) is unmounted and its loop device detached before its image
  // and mount point go with the fork's dir.
  await removeLayer(layerPaths(forkOwnDir(repo, row.id)));
  fs.rmSync(path.join(forksDir(repo), row.id), { recursive: true, force: true });
}

/** Mount a fork's layer if it has one and it is not mounted (after a reboot): before its overlay. */
export async function ensureLayer(repo: Repo, row: ForkRow): Promise<boolean> {
  if (row.mode !== 'overlay' || !row.layerRoute) return false;
  return mountLayer(layerPaths(forkOwnDir(repo, row.id)), row.layerRoute, row.id);
}

function adminDirPointingAt(repo: Repo, dir: string): string | null {
  const root = path.join(repo.commonDir, 'worktrees');
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return null;
  }
  for (const name of names) {
    try {
      const target = fs.readFileSync(path.join(root, name, 'gitdir'), 'utf8').trim();
      if (path.resolve(target) === path.join(dir, '.git')) return fs.realpathSync(path.join(root, name));
    } catch {
      // not a complete admin dir
    }
  }
  return null;
}

export async function emptyDir(dir: string): Promise<void> {
  await removeDeep(dir, { keepDir: true });
}

/** The live fork a directory (or, from inside a fork, the current worktree) names. */
export async function resolveFork(cwd: string, dirArg: string): Promise<{ repo: Repo; row: ForkRow }> {
  const abs = path.resolve(cwd, dirArg);
  const dir = fs.existsSync(abs) ? fs.realpathSync(abs) : abs;
  // The registry is in the repository we stand in, or else in the one the fork belongs to.
  const candidates: Repo[] = [];
  for (const [at, caller] of [
    [cwd, true],
    [dir, false],
  ] as const) {
    const r = await findRepo(at, caller).catch((e: unknown) => {
      if (e instanceof XetError && (e.code === 'NOT_A_REPOSITORY' || e.code === 'BARE_REPOSITORY')) return null;
      if (e instanceof XetError && e.code === 'GIT_FAILED') return null; // e.g. a dir that is gone
      throw e;
    });
    if (r && !candidates.some((c) => c.commonDir === r.commonDir)) candidates.push(r);
  }
  for (const repo of candidates) {
    const row = withExistingSidecar(repo.commonDir, (db) => liveForkAt(db, dir));
    if (row) return { repo, row };
  }
  throw new XetError(
    'FORK_NOT_FOUND',
    `${dir} is not a fork registered in ${candidates.map((c) => c.commonDir).join(' or ') || 'any repository here'}`,
    { dir },
  );
}

/** Make a fork usable again for reading and capturing: mounted (overlay), and with the `.git` file
 * that links it to its worktree admin dir (re-written if someone deleted it; the registry knows it). */
export async function ensureUsable(repo: Repo, row: ForkRow): Promise<void> {
  await ensureMounted(repo, row);
  if (row.state !== 'active' || !row.gitDir || !fs.existsSync(row.gitDir) || !fs.existsSync(row.dir)) return;
  const link = path.join(row.dir, '.git');
  // A fenced fork (read-only: a stale task guard) is not repaired until the guard is cleared.
  if (!fs.existsSync(link) && (row.mode !== 'overlay' || isMounted(row.dir)) && !hasStaleGuard(forkSlot(repo, row))) {
    fs.writeFileSync(link, `gitdir: ${row.gitDir}\n`);
  }
}

/** Mount an overlay fork that is not mounted (after a reboot); true if it had to be. While a stale
 * task guard stands on it, it is mounted (or, mounted, remounted) read-only: the fence. */
export async function ensureMounted(repo: Repo, row: ForkRow): Promise<boolean> {
  if (row.mode !== 'overlay' || row.state !== 'active') return false;
  if (isMounted(row.dir)) {
    await fenceIfStale(repo, row);
    return false;
  }
  await ensureLayer(repo, row);
  if (!row.upper || !row.work || !fs.existsSync(path.join(row.upper, '.git'))) {
    throw new XetError('FORK_BROKEN', `the upper layer of fork ${row.id} is missing (${row.upper})`, {
      dir: row.dir,
      upper: row.upper,
    });
  }
  fs.mkdirSync(row.work, { recursive: true });
  // A reclaim killed with its read-only view mounted: the upper layer must not stay a lower layer
  // of that view once the fork writes to it again.
  await dropReclaimView(repo, row.id);
  let base = baseFor(repo, row.snapshot);
  if (!fs.existsSync(base.index)) {
    // The base is derived data: rebuilt from the snapshot (its files get new inodes, so git
    // re-hashes them once; the fork's content is unaffected).
    base = (await ensureBase(repo, await readSnapshot(row.snapshot, repoOpts(repo)))).base;
  }
  fs.mkdirSync(row.dir, { recursive: true });
  if (fs.readdirSync(row.dir).length > 0) {
    throw new XetError(
      'FORK_BROKEN',
      `${row.dir} is not mounted and holds files of its own; mounting would hide them`,
      { dir: row.dir },
    );
  }
  // Judged at the mount itself: a guard published after a check above still gets a fence.
  const readOnly = hasStaleGuard(forkSlot(repo, row));
  const failure = await mountOverlay({ lower: base.tree, upper: row.upper, work: row.work }, row.dir, { readOnly });
  if (failure) {
    throw new XetError(
      failure.notPermitted ? 'FORK_MODE_UNAVAILABLE' : 'FORK_BROKEN',
      `cannot mount fork ${row.id}: ${failure.message}`,
      { dir: row.dir },
    );
  }
  return true;
}

export async function remountFork(
  cwd: string,
  dirArg: string,
): Promise<{ id: string; dir: string; mounted: boolean; unfenced: boolean }> {
  const { repo, row } = await resolveFork(cwd, dirArg);
  if (row.mode !== 'overlay') {
    throw new XetError('USAGE', `fork ${row.id} is a ${row.mode} fork; only overlay forks are mounted`, {
      dir: row.dir,
    });
  }
  assertForkWritable(repo, row, 'fork remount');
  const mounted = await ensureMounted(repo, row);
  // A fork fenced while a stale guard stood gets its writable mount back once the guard is gone.
  const unfenced = !mounted && (await unfenceFork(repo, row));
  return { id: row.id, dir: row.dir, mounted, unfenced };
}
