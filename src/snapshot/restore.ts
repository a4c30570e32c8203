// Restore: a snapshot -> a new, self-contained repository in exactly the captured state.
// Safety: the snapshot and every path in it are validated before anything is created; the work is
// done in a temporary sibling directory that is renamed onto the target only when complete, so a
// restore that is killed never leaves a target that looks finished. Nothing is written outside the
// target (paths are checked; git never follows a symlink it created on the way to a path).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { tracePhase } from '../testing/trace';
import { XetError } from '../errors';
import { git, gitText, type GitOptions } from '../git/exec';
import { catFileBatch, lsTree, readLocalConfig, type TreeListing } from '../git/plumbing';
import { findRepo, repoOpts, tryFindRepo, type Repo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { captureCacheIndex, recordFilesTree, workspaceId } from '../sidecar/workspaces';
import { checkTreePaths, NAME_MAX, PATH_MAX, refuseTooLong } from './paths';
import { CAPTURED_CONFIG } from './recorded';
import { chunkedOf, layFiles, layIndex, readLayInputs, type LaySpec } from './lay';
import { applyOperationRestore, planOperationRestore, type OperationPlan } from './operation-state';
import { RESTORE_MARKER, SNAPSHOT_REF_PREFIX } from './refs';
import { leftoverWarning, removeLeftovers, restoreLeftovers } from './leftovers';
import { readSnapshot, resolveSnapshotOid, type Snapshot } from './store';
import { faultPoint } from '../testing/fault-points';
import { checkTarget, refuseInsideGitDir } from './target';

export { checkTarget, refuseInsideGitDir };
import { recordOrigin } from './origin';
import { sealRestoredCache } from './restored-cache';
import { STAT_CACHE_RECORD_SUFFIX } from './stat-cache';
import { recordRestoredFrom } from '../sidecar/restored';
import { remoteError } from '../remote/reach';
import { withoutPassword } from '../remote/url';
import { restoreRepositories, seedRepositories, validateRepositories } from './inner-repos';

/** Where restore leaves the files index until the sidecar adopts it as the capture stat cache. */
const FILES_INDEX = 'xet-files.index';

export interface RestoreOptions {
  cwd: string;
  snapshot: string;
  dir: string;
  /** A path, URL or remote name to fetch the snapshot from instead of the current repository. */
  from?: string;
  /** Told what is happening, for a progress line on a terminal. */
  progress?: (what: string) => void;
  /** Keep `exec` lines of a rebase todo (they run on `git rebase --continue` in the copy). */
  allowExec?: boolean;
  /** With `from` (a Git server): leave chunked files and their chunks on the server (lazy.ts). */
  lazy?: boolean;
}

export interface RestoreResult {
  snapshot: string;
  dir: string;
  /** Problems after the restore was complete (it stands; these only cost speed later). */
  warnings: string[];
  files: number;
  head: string;
  /** With --from: the remote the copy records it came from (`xet-origin`), else null. */
  origin: { name: string; url: string } | null;
  /** With --lazy: the source and the chunked files left unwritten (git xet hydrate writes them). */
  lazy?: { source: string; deferred: string[] };
}

/** Resolve where objects come from: a URL or path for `git fetch`, or the local repository. */
async function resolveFrom(cwd: string, from: string, local: Repo | null): Promise<string> {
  if (local) {
    const r = await git(['remote', 'get-url', '--', from], { ...repoOpts(local), okCodes: [2, 128] });
    if (r.code === 0) return r.stdout.toString('utf8').trim();
  }
  if (/^[a-z][a-z0-9+.-]*::|^[a-z][a-z0-9+.-]*:\/\//i.test(from) || /^[^/]+@[^/]+:/.test(from)) return from;
  const abs = path.resolve(cwd, from);
  // A bare word is meant as a remote name; a path that does not exist is an unreachable remote, as
  // for fetch and push (git says so when it tries).
  if (!fs.existsSync(abs) && !from.includes('/')) {
    throw new XetError('USAGE', `--from ${from}: no such remote or path`, { from });
  }
  return abs;
}

export async function restore(options: RestoreOptions): Promise<RestoreResult> {
  // Reads begun early (the chunked files' pointers) are awaited however the restore ends: no git
  // process of ours outlives it, in a resident process least of all (review 50).
  const begun: { pointers?: Promise<void> } = {};
  try {
    return await restoreWith(options, begun);
  } finally {
    await begun.pointers;
  }
}

async function restoreWith(options: RestoreOptions, begun: { pointers?: Promise<void> }): Promise<RestoreResult> {
  const startedAt = Date.now();
  tracePhase('restore: start');
  const target = path.resolve(options.cwd, options.dir);
  checkTarget(target);
  const local = await tryFindRepo(options.cwd, true);
  if (!local && !options.from) {
    throw new XetError('NOT_A_REPOSITORY', 'restore runs in the source repository, or needs --from <path-or-remote>', {
      cwd: options.cwd,
    });
  }
  if (local) refuseInsideGitDir(target, local, 'restore');
  const fromUrl = options.from ? await resolveFrom(options.cwd, options.from, local) : null;
  const lazy = options.lazy ? await (await import('./lazy')).lazyRestore(fromUrl, options.cwd) : null;

  // Resolve and validate the snapshot before creating anything, when we can see it locally.
  let oid: string | null = null;
  let snap: Snapshot | null = null;
  let opPlan: OperationPlan | null = null;
  let longest = 0;
  let listing: TreeListing[] | undefined;
  if (!fromUrl && local) {
    oid = await resolveSnapshotOid(options.snapshot, repoOpts(local));
    tracePhase('restore: read');
    snap = await readSnapshot(oid, repoOpts(local));
    // The chunked files' pointers (three git processes one after another, ~40-60 ms) are read
    // while the paths are checked: the lay takes them from chunkedOf's memo. Read only; a failure
    // is the lay's to report, after the checks.
    begun.pointers = chunkedOf(snap, repoOpts(local)).then(
      () => undefined,
      () => undefined,
    );
    tracePhase('restore: validate');
    ({ longest, files: listing } = await checkSnapshotPaths(snap, repoOpts(local)));
    tracePhase('restore: plan');
    opPlan = await planOperationRestore(snap, repoOpts(local), options.allowExec === true);
  } else if (fromUrl) {
    oid = await resolveRemoteSnapshot(fromUrl, options.snapshot, options.cwd);
  }
  if (!oid) throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${options.snapshot}`, { snapshot: options.snapshot });

  // Checked against the final path, before any directory is made: what must fit is the copy.
  if (snap) refuseTooLong(target, longest, 'restore');
  const parent = path.dirname(target);
  let madeParent: string | undefined;
  try {
    madeParent = fs.mkdirSync(parent, { recursive: true });
  } catch (e) {
    throw new XetError('TARGET_UNUSABLE', `cannot create ${parent}: ${(e as Error).message}`, { dir: target });
  }
  const cleaned = removeLeftovers(restoreLeftovers(parent));
  const rand = `${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
  let tmp = path.join(parent, `.${path.basename(target)}.xet-restore-${rand}`);
  // The hidden sibling is longer than the target's name: a tree that fits the target but not it,
  // or a target whose name leaves no room for the suffix in a file name (review 48: ENAMETOOLONG
  // from ~230 bytes), is built under a short name instead (leftovers.ts knows both).
  const shortTmp = path.join(parent, `.xr-${rand}`);
  const fits = (dir: string, bytes: number) => Buffer.byteLength(dir) + 1 + bytes + 1 <= PATH_MAX;
  if (Buffer.byteLength(path.basename(tmp)) > NAME_MAX || (snap && !fits(tmp, longest))) tmp = shortTmp;
  if (snap) refuseTooLong(tmp, longest, 'restore');
  let published = false;
  let early: LaySpec['fileMeta'];
  try {
    const progress = options.progress ?? (() => undefined);
    progress(fromUrl ? `fetching ${oid.slice(0, 12)}` : 'linking objects');
    tracePhase('restore: objects');
    // Objects: hard-linked from the local repository (a clone from a path, like git itself does for
    // local clones: objects are immutable, so sharing inodes is safe), or fetched. Not `--local`:
    // with it git dies where it cannot link (the target on another filesystem) instead of copying.
    // The copy is built in a directory only its owner can enter (the files' own directories are
    // made with the umask's modes): nobody else can put a symlink where the lay will write through it
    // (review 46), whatever the umask lets the group do. It is published with the mode a directory
    // made there gets (naturalMode), unless chmod could not give that back.
    let natural: { mode: number; restorable: boolean };
    try {
      natural = naturalMode(parent);
      fs.mkdirSync(tmp, { mode: natural.restorable ? 0o700 : 0o777 });
    } catch (e) {
      // A parent the copy cannot be built in (read-only, full, not ours): review 49 found EROFS
      // INTERNAL, review 50 ENOSPC TARGET_UNUSABLE and the hidden name in the message.
      const errno = (e as NodeJS.ErrnoException).code;
      const full = errno === 'ENOSPC' || errno === 'EDQUOT';
      throw new XetError(
        full ? 'DISK_FULL' : 'TARGET_UNUSABLE',
        // node's message without the path it names (the hidden sibling's or the probe's).
        `cannot build the copy in ${parent}: ${(e as Error).message.split(/, [a-z]+ '/)[0]}`,
        { dir: target, ...(typeof errno === 'string' ? { errno } : {}) },
      );
    }
    if (!fromUrl && local) {
      // The lay's first reads (the filemeta) from the source's objects, which the clone links, while
      // git clones: ~35 ms beside its ~20 (read only: the lay reports a failure, in its turn).
      if (snap?.filemeta && listing) {
        early = readLayInputs(snap, listing, repoOpts(local), path.join(local.commonDir, 'objects'));
        early.catch(() => undefined);
      }
      await git(['clone', '--quiet', '--no-checkout', '--', local.commonDir, tmp]);
    } else {
      // The snapshot id's length tells the object format (the remote must match it).
      await git(['init', '--quiet', `--object-format=${oid.length === 64 ? 'sha256' : 'sha1'}`, tmp]);
      if (lazy?.fetch) await lazy.fetch(oid, { cwd: tmp, env: { GIT_DIR: path.join(tmp, '.git') } });
      else await fetchSnapshot(tmp, fromUrl as string, oid, lazy?.fetchArgs ?? []);
      await lazy?.afterFetch(oid, { cwd: tmp });
    }
    const opts: GitOptions = { cwd: tmp, env: { GIT_DIR: path.join(tmp, '.git'), GIT_WORK_TREE: tmp } };
    let gitDir = path.join(tmp, '.git');
    if (fromUrl) await refuseMisnamedFetch(oid, opts);
    fs.writeFileSync(path.join(gitDir, RESTORE_MARKER), `${oid}\n`);
    await faultPoint('restore:after-objects');
    if (!snap) {
      snap = await readSnapshot(oid, opts);
      const checked = await checkSnapshotPaths(snap, opts);
      const fetchedLongest = checked.longest;
      listing = checked.files;
      refuseTooLong(target, fetchedLongest, 'restore');
      if (!fits(tmp, fetchedLongest) && tmp !== shortTmp) {
        // Only the objects are there yet: moving them under the short name costs one rename.
        fs.renameSync(tmp, shortTmp);
        tmp = shortTmp;
        opts.cwd = tmp;
        opts.env = { GIT_DIR: path.join(tmp, '.git'), GIT_WORK_TREE: tmp };
        gitDir = path.join(tmp, '.git');
      }
      refuseTooLong(tmp, fetchedLongest, 'restore');
      opPlan = await planOperationRestore(snap, opts, options.allowExec === true);
    }
    progress(`writing ${snap.manifest.counts.files} files`);
    tracePhase('restore: files');
    const lay: LaySpec = {
      snap,
      worktree: tmp,
      objectsDir: path.join(gitDir, 'objects'),
      filesIndex: path.join(gitDir, FILES_INDEX),
      indexFile: path.join(gitDir, 'index'),
      scratchParent: gitDir,
      repoGitDir: gitDir,
      deferChunked: lazy !== null,
      shownAs: target,
      listing,
      // Read next by the sealed stat cache (below).
      keepFilesIndex: lazy === null,
      earlyIndex: true,
      fileMeta: early,
    };
    // Refs and config do not depend on the files (the files are laid through a shadow git dir
    // with its own config), so their dozen short git processes run while the files are written.
    // Not beside a lazy restore (its hooks rely on the remote config the fetch made) nor inner
    // repositories (restored between the files and the outer refs).
    const sideBySide = lazy === null && !snap.manifest.repositories?.length;
    const s = snap;
    const settled = await Promise.allSettled([
      layFiles(lay),
      sideBySide ? restoreRefs(s, opts).then(() => restoreConfig(s, opts)) : null,
    ]);
    for (const r of settled) if (r.status === 'rejected') throw r.reason;
    await lazy?.afterLay(snap, tmp, lay.filesIndex, opts);
    await faultPoint('restore:after-files');
    if (snap.manifest.repositories?.length) {
      progress(`restoring ${snap.manifest.repositories.length} inner repositories`);
      await restoreRepositories(snap, tmp, gitDir, gitDir, {
        restoreRefs,
        restoreConfig,
        restoreInfoFiles,
        allowExec: options.allowExec === true,
      });
    }
    progress('restoring index, refs and config');
    tracePhase('restore: refs, config, index');
    if (!sideBySide) {
      await restoreRefs(snap, opts);
      await restoreConfig(snap, opts);
    }
    // The index is built last: conversions are judged with the copy's own config and attributes.
    const origin = fromUrl ? await recordOrigin(fromUrl, opts) : null;
    await lazy?.afterOrigin(gitDir, opts);
    restoreInfoFiles(snap, gitDir);
    progress('writing the index');
    // The stat cache's record (restored-cache.ts) reads the files index, final once the files are
    // laid, the chunked files' stat data and the copy's config, restored by now: it is written
    // while git builds the index (~0.1 s of the tail). Only a restore that brought every object
    // may vouch for them (not a lazy one). Never rejects: a failure is a warning (seedWorkspace).
    const sealing =
      lazy === null
        ? sealRestoredCache(lay.filesIndex, tmp, snap, startedAt, opts).then(
            () => null,
            (e: unknown) => e as Error,
          )
        : null;
    try {
      await layIndex(lay);
      if (opPlan) await applyOperationRestore(opPlan, gitDir, opts);
    } finally {
      await sealing; // nothing writes in the tree once it is published or removed
    }
    fs.rmSync(path.join(gitDir, RESTORE_MARKER));
    progress('moving the copy into place');
    tracePhase('restore: publish, seed');
    await faultPoint('restore:before-rename');
    if (natural.restorable) fs.chmodSync(tmp, natural.mode);
    publish(tmp, target);
    published = true;
    const warnings = [
      ...leftoverWarning(cleaned),
      ...(await seedWorkspace(target, snap, sealing ? await sealing : undefined)),
    ];
    tracePhase('restore: done');
    if (snap.manifest.repositories?.length) {
      warnings.push(
        ...(await seedRepositories(snap, target, { cwd: target, env: { GIT_DIR: path.join(target, '.git') } })),
      );
    }
    return {
      snapshot: oid,
      dir: target,
      warnings,
      files: snap.manifest.counts.files,
      head: snap.manifest.head.kind === 'branch' ? snap.manifest.head.ref : (snap.manifest.head.oid as string),
      origin,
      ...(lazy ? { lazy: lazy.result() } : {}),
    };
  } finally {
    // No read of ours outlives the restore (a cat-file the filemeta read may have started).
    await early?.catch(() => undefined);
    if (!published) {
      fs.rmSync(tmp, { recursive: true, force: true });
      if (madeParent) removeMadeParents(parent, madeParent);
    }
  }
}

/** Remove the parents a failed restore made (`top` the first of them), while they are empty. */
/** `git fetch` of one snapshot ref from a path, URL or remote into the new repository at `dir`. */
async function fetchSnapshot(dir: string, url: string, oid: string, extra: string[]): Promise<void> {
  const f = await git(
    [
      'fetch',
      '--quiet',
      '--no-tags',
      ...extra,
      '--',
      url,
      `+${SNAPSHOT_REF_PREFIX}${oid}:${SNAPSHOT_REF_PREFIX}${oid}`,
    ],
    { cwd: dir, okCodes: [1, 128] },
  );
  if (f.code !== 0) throw remoteError(url, 'restore --from', f.stderr);
}

function removeMadeParents(parent: string, top: string): void {
  for (let d = parent; d.length >= top.length; d = path.dirname(d)) {
    try {
      fs.rmdirSync(d);
    } catch {
      return; // someone else's now, or not empty
    }
  }
}

/**
 * The mode mkdir(2) gives a directory made in `parent` now (the umask, a default ACL, a setgid bit
 * the parent passes on), from one made there and removed (named as a restore's short hidden sibling,
 * so a kill in between leaves what leftovers.ts removes); and whether chmod can give it back: a process
 * outside the directory's group loses a setgid bit by chmod (review 47), and is then left the old
 * way, its copy built at that mode from the start.
 */
function naturalMode(parent: string): { mode: number; restorable: boolean } {
  const probe = path.join(parent, `.xr-${process.pid}-${crypto.randomBytes(4).toString('hex')}`);
  fs.mkdirSync(probe);
  let st: fs.Stats;
  try {
    st = fs.statSync(probe);
  } finally {
    fs.rmdirSync(probe);
  }
  const mode = st.mode & 0o7777;
  const inGroup = process.geteuid?.() === 0 || [process.getegid?.(), ...(process.getgroups?.() ?? [])].includes(st.gid);
  return { mode, restorable: (mode & 0o2000) === 0 || inGroup };
}

function publish(tmp: string, target: string): void {
  try {
    // rename(2) replaces an empty directory atomically and fails on a non-empty one.
    fs.renameSync(tmp, target);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOTEMPTY' || code === 'EEXIST') {
      throw new XetError('TARGET_NOT_EMPTY', `${target} was filled by someone else during the restore`, {
        dir: target,
      });
    }
    throw new XetError('TARGET_UNUSABLE', `cannot move the restored tree into ${target}: ${(e as Error).message}`, {
      dir: target,
      errno: code,
    });
  }
}

/** The remote's ref for a snapshot must point at the commit its name says (refs are anyone's). */
async function refuseMisnamedFetch(oid: string, opts: GitOptions): Promise<void> {
  const got = await gitText(['rev-parse', '--verify', `${SNAPSHOT_REF_PREFIX}${oid}`], opts);
  if (got !== oid) {
    throw new XetError('INTEGRITY_MISMATCH', `the remote's ${SNAPSHOT_REF_PREFIX}${oid} points at ${got}`, {
      snapshot: oid,
      oid: got,
    });
  }
}

async function resolveRemoteSnapshot(url: string, spec: string, cwd: string): Promise<string> {
  const ls = await git(['ls-remote', '--', url, `${SNAPSHOT_REF_PREFIX}*`], { cwd, okCodes: [1, 2, 128] });
  if (ls.code !== 0) throw remoteError(url, 'restore --from', ls.stderr);
  const oids = ls.stdout
    .toString('utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split('\t')[1].slice(SNAPSHOT_REF_PREFIX.length))
    .filter((o) => o.startsWith(spec));
  if (oids.length === 1) return oids[0];
  const shown = withoutPassword(url);
  if (oids.length > 1) throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} is ambiguous at ${shown}`, { snapshot: spec });
  throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${spec} at ${shown}`, { snapshot: spec, from: shown });
}

/** Checks every path (inner repositories' too); returns the byte length of the longest of this
 * snapshot's own (to check against a target). */
export async function validateSnapshotPaths(
  snap: Snapshot,
  opts: GitOptions,
  depth = 0,
  budget?: { left: number },
): Promise<number> {
  return (await checkSnapshotPaths(snap, opts, depth, budget)).longest;
}

/** validateSnapshotPaths, with the files tree's listing it checked (what a lay takes its files
 * from: LaySpec.listing). */
export async function checkSnapshotPaths(
  snap: Snapshot,
  opts: GitOptions,
  depth = 0,
  budget?: { left: number },
): Promise<{ longest: number; files: TreeListing[] }> {
  const m = snap.manifest;
  // Both listings at once: each is a git process of its own.
  const [files, index] = await Promise.all([
    lsTree(snap.filesTree, { ...opts, trees: true }),
    lsTree(snap.indexTree, { ...opts, trees: true }),
  ]);
  checkTreePaths(files, m.emptyDirs, 'files/');
  checkTreePaths(index, [], 'index/');
  const known = new Set(index.map((e) => e.path));
  let longest = 0;
  for (const e of files) longest = Math.max(longest, Buffer.byteLength(e.path));
  for (const e of index) longest = Math.max(longest, Buffer.byteLength(e.path));
  for (const d of m.emptyDirs) longest = Math.max(longest, Buffer.byteLength(d));
  checkTreePaths(
    m.index.intentToAdd.map((p) => ({ path: p, type: 'blob' })),
    [],
    'manifest intent-to-add entries',
  );
  for (const p of (m.index.staleSizes ?? []).map((e) => e.path)) {
    checkTreePaths([{ path: p, type: 'blob' }], [], 'manifest index entries');
  }
  // Only the config capture records may come back: anything else (core.fsmonitor, hooksPath,
  // filter drivers…) would let a crafted snapshot run commands in the copy.
  // A value may hold newlines (a branch description does); `git config` is given it as an argument.
  for (const c of m.config) {
    if (!CAPTURED_CONFIG.test(c.key) || /[\0\n]/.test(c.key) || c.value.includes('\0')) {
      throw new XetError(
        'SNAPSHOT_INVALID',
        `the manifest sets config ${JSON.stringify(c.key)}, which snapshots never carry`,
        {
          key: c.key,
        },
      );
    }
  }
  for (const p of [...m.index.skipWorktree, ...m.index.assumeUnchanged]) {
    if (!known.has(p) && !m.index.intentToAdd.includes(p)) {
      throw new XetError('SNAPSHOT_INVALID', `index flag for ${JSON.stringify(p)}, which is not in the index`, {
        path: p,
      });
    }
  }
  for (const r of m.refs) {
    if (!/^refs\/(heads|tags|remotes|notes)\//.test(r.name) || r.name.includes('..')) {
      throw new XetError('SNAPSHOT_INVALID', `the manifest names an unexpected ref ${JSON.stringify(r.name)}`, {
        ref: r.name,
      });
    }
  }
  if (m.head.kind === 'branch' && !m.head.ref.startsWith('refs/heads/')) {
    throw new XetError('SNAPSHOT_INVALID', `HEAD points outside refs/heads: ${m.head.ref}`, { ref: m.head.ref });
  }
  await validateRepositories(
    snap,
    files,
    opts,
    async (inner, d, b) => {
      await validateSnapshotPaths(inner, opts, d, b);
    },
    depth,
    budget,
  );
  return { longest, files };
}

async function restoreRefs(snap: Snapshot, opts: GitOptions): Promise<void> {
  const m = snap.manifest;
  // Tag objects travel as blobs; re-create each one byte for byte and check it hashes back.
  if (snap.tagsTree) {
    const tags = await lsTree(snap.tagsTree, opts);
    const have = await catFileBatch(
      tags.map((t) => t.path),
      opts,
    );
    const missing = tags.filter((t) => !have.get(t.path));
    if (missing.length) {
      const bodies = await catFileBatch(
        missing.map((t) => t.oid),
        opts,
      );
      for (const t of missing) {
        const body = bodies.get(t.oid);
        if (!body) throw new XetError('SNAPSHOT_INVALID', `tag blob for ${t.path} is missing`, { tag: t.path });
        const got = await gitText(['hash-object', '-t', 'tag', '-w', '--stdin'], { ...opts, input: body.data });
        if (got !== t.path) {
          throw new XetError('SNAPSHOT_INVALID', `tag object ${t.path} does not hash to its name (got ${got})`, {
            tag: t.path,
          });
        }
      }
    }
  }
  // Start from nothing: the clone made refs of its own.
  const existing = (await gitText(['for-each-ref', '--format=%(refname)'], opts)).split('\n').filter(Boolean);
  const wanted = new Map(m.refs.filter((r) => !r.symref).map((r) => [r.name, r.oid]));
  wanted.set(`${SNAPSHOT_REF_PREFIX}${snap.oid}`, snap.oid);
  const lines: string[] = [];
  for (const r of existing) if (!wanted.has(r) && !r.startsWith(SNAPSHOT_REF_PREFIX)) lines.push(`delete ${r}`);
  for (const [name, oid] of wanted) lines.push(`update ${name} ${oid}`);
  await git(['update-ref', '--no-deref', '--stdin'], { ...opts, input: lines.map((l) => `${l}\n`).join('') });
  for (const r of m.refs) {
    if (r.symref) await git(['symbolic-ref', r.name, r.symref], opts);
  }
  if (m.head.kind === 'branch') {
    await git(['symbolic-ref', 'HEAD', m.head.ref], opts);
  } else {
    await git(['update-ref', '--no-deref', 'HEAD', m.head.oid], opts);
  }
  // The stash is a reflog: replay it oldest first so `git stash list` matches.
  for (const s of [...m.stash].reverse()) {
    await git(['update-ref', '--create-reflog', '-m', s.message, 'refs/stash', s.oid], opts);
  }
}

async function restoreConfig(snap: Snapshot, opts: GitOptions): Promise<void> {
  // Drop what clone/init configured for branches and remotes, then apply the captured entries.
  const current = await readLocalConfig('^(branch|remote)\\.', opts);
  const sections = new Set(current.map((c) => c.key.slice(0, c.key.lastIndexOf('.'))));
  for (const s of sections) await git(['config', '--local', '--remove-section', s], { ...opts, okCodes: [128] });
  for (const c of snap.manifest.config) {
    // core.* keys exist once (init wrote some); branch/remote keys may repeat (several fetch lines).
    const mode = c.key.startsWith('core.') ? [] : ['--add'];
    await git(['config', '--local', ...mode, c.key, c.value], opts);
  }
}

function restoreInfoFiles(snap: Snapshot, gitDir: string): void {
  const info = path.join(gitDir, 'info');
  fs.mkdirSync(info, { recursive: true });
  for (const [name, content] of [
    ['exclude', snap.manifest.info.exclude],
    ['attributes', snap.manifest.info.attributes],
  ] as const) {
    const file = path.join(info, name);
    if (content === null) fs.rmSync(file, { force: true });
    else fs.writeFileSync(file, content);
  }
}

/** Tell the new repository's sidecar that its worktree holds this files tree, so its first capture
 * stores only what changed since (the objects are already there), and move the files index (with
 * its record when `sealed` is null: written beside it) to be the stat cache. `sealed` is what
 * writing the record failed with, or undefined when none was written (a lazy restore). An
 * optimisation: the restore is complete before this runs, so a failure here is a warning, not an
 * error. */
async function seedWorkspace(target: string, snap: Snapshot, sealed: Error | null | undefined): Promise<string[]> {
  const filesIndex = path.join(target, '.git', FILES_INDEX);
  const record = `${filesIndex}${STAT_CACHE_RECORD_SUFFIX}`;
  try {
    const repo = await findRepo(target);
    tracePhase('restore: record in the sidecar');
    const c = snap.manifest.counts;
    const id = workspaceId(repo.gitDir);
    // The files index holds every file's stat data: the first capture here hashes only what changed.
    const cache = captureCacheIndex(repo.commonDir, id);
    fs.mkdirSync(path.dirname(cache), { recursive: true });
    fs.renameSync(filesIndex, cache);
    withSidecar(repo.commonDir, (db) => {
      recordFilesTree(
        db,
        { id, worktree: repo.worktree, gitDir: repo.gitDir },
        snap.filesTree,
        { files: c.files, bytes: c.bytes, symlinks: c.symlinks },
        null,
      );
      recordRestoredFrom(db, id, snap.oid);
    });
    if (sealed === null) fs.renameSync(record, `${cache}${STAT_CACHE_RECORD_SUFFIX}`);
    else if (sealed) return [`the first capture here will read every file: ${sealed.message}`];
    return [];
  } catch (e) {
    fs.rmSync(filesIndex, { force: true });
    fs.rmSync(record, { force: true });
    return [`could not record the restore in the sidecar: ${(e as Error).message}`];
  }
}
