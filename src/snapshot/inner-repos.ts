// Inner repositories: checked-out submodules and nested repositories (a directory with its own `.git`
// that the outer index does not track) inside a working tree. This module owns how they are
// captured, validated, restored and verified. Each one is captured as a snapshot of its own by the
// ordinary capture (recursively, so a submodule's submodules come along); its objects are fetched
// into the outer repository and its commit becomes a parent of the outer snapshot, so fetching or
// pushing the outer snapshot ref carries everything. The outer manifest names them
// (`repositories`); the outer `files/` tree leaves their contents out. See docs/FORMAT.md.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, type GitOptions } from '../git/exec';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { assertNoSymlinkBetween } from './fsutil';
import { layFiles, layIndex, type LaySpec } from './lay';
import type { Manifest } from './manifest';
import { applyOperationRestore, planOperationRestore } from './operation-state';
import { checkPathSyntax, checkTreePaths, type PathEntry } from './paths';
import { SNAPSHOT_REF_PREFIX } from './refs';
import { readSnapshot, type Snapshot } from './store';
import type { FoundRepository } from './walk';
import { withSidecar } from '../sidecar/db';
import { captureCacheIndex, recordFilesTree, workspaceId } from '../sidecar/workspaces';

export type RepositoryEntry = NonNullable<Manifest['repositories']>[number];

/** Deeper than this is refused on restore: a crafted snapshot must not recurse without end. */
export const MAX_REPOSITORY_DEPTH = 8;
/** At most this many inner repositories in one snapshot tree (all levels together). */
const MAX_REPOSITORIES = 1000;
/** The files index an inner restore leaves in the inner git dir for seedRepositories. */
const INNER_FILES_INDEX = 'xet-files.index';

export interface InnerCaptureResult {
  repositories: RepositoryEntry[];
  /** Snapshot commits to make parents of the outer snapshot. */
  parents: string[];
  /** What the inner captures left out, with paths prefixed by the repository's path. */
  skipped: { path: string; reason: 'nested-repository' }[];
  innerSkipped: { path: string; reason: string }[];
  excludedSecrets: string[];
  excludedByPattern: number;
  /** One line per inner repository for the caller (files counted in that repository). */
  summaries: { path: string; kind: string; snapshot: string; files: number }[];
}

type CaptureFn = (o: { cwd: string; message: string; ignored?: string; inner: true }) => Promise<{
  snapshot: string;
  files: number;
  skipped: { path: string; reason: string }[];
  excludedSecrets: string[];
  excludedByPattern: number;
}>;

const real = (p: string): string => fs.realpathSync(p);

/**
 * Capture each repository the walk found. A directory whose `.git` git cannot open (a stray or
 * broken `.git` file) is not a repository, and one whose common git dir is the outer repository's
 * (a linked worktree of it, not restorable as a repository of its own) is not an inner one: both stay
 * named in `skipped`, so a discard refuses to delete them. The capture function is passed in (it is capture itself: the recursion).
 */
export async function captureInnerRepositories(
  outer: Repo,
  found: FoundRepository[],
  options: { ignored?: string },
  captureFn: CaptureFn,
): Promise<InnerCaptureResult> {
  const out: InnerCaptureResult = {
    repositories: [],
    parents: [],
    skipped: [],
    innerSkipped: [],
    excludedSecrets: [],
    excludedByPattern: 0,
    summaries: [],
  };
  // Every repository is judged before any is captured: one that is the outer repository itself (a
  // linked worktree of it, or a `.git` file naming its git dir) must be set aside before a capture
  // there would queue on the outer capture's own lock.
  const capturable: { f: FoundRepository; abs: string; inner: Repo }[] = [];
  const outerCommon = real(outer.commonDir);
  for (const f of found) {
    const abs = path.join(outer.worktree, f.path);
    let inner: Repo;
    try {
      inner = await findRepo(abs);
    } catch (e) {
      if (e instanceof XetError && ['NOT_A_REPOSITORY', 'BARE_REPOSITORY', 'GIT_FAILED'].includes(e.code)) {
        out.skipped.push({ path: f.path, reason: 'nested-repository' });
        continue;
      }
      throw e;
    }
    if (
      real(inner.commonDir) === outerCommon ||
      real(inner.worktree) !== real(abs) ||
      inner.objectFormat !== outer.objectFormat ||
      (await incompleteHistory(inner))
    ) {
      out.skipped.push({ path: f.path, reason: 'nested-repository' });
      continue;
    }
    capturable.push({ f, abs, inner });
  }
  for (const { f, abs, inner } of capturable) {
    let r: Awaited<ReturnType<CaptureFn>>;
    try {
      r = await captureFn({ cwd: abs, message: `inner repository ${f.path}`, ignored: options.ignored, inner: true });
    } catch (e) {
      // The inner repository's own refusal (a merge in progress there, say), named by where it is.
      if (!(e instanceof XetError)) throw e;
      const where = typeof e.details.repository === 'string' ? `${f.path}/${e.details.repository}` : f.path;
      throw new XetError(e.code, `in the inner repository ${f.path}: ${e.message}`, {
        ...e.details,
        repository: where,
      });
    }
    await fetchSnapshot(outer, inner, r.snapshot);
    out.repositories.push({
      path: f.path,
      kind: f.kind,
      gitDir: submoduleGitDir(outer, inner, f),
      snapshot: r.snapshot,
    });
    out.parents.push(r.snapshot);
    for (const s of r.skipped) out.innerSkipped.push({ path: `${f.path}/${s.path}`, reason: s.reason });
    for (const s of r.excludedSecrets) out.excludedSecrets.push(`${f.path}/${s}`);
    out.excludedByPattern += r.excludedByPattern;
    out.summaries.push({ path: f.path, kind: f.kind, snapshot: r.snapshot, files: r.files });
  }
  return out;
}

/** A shallow or partial clone lacks objects its commits name: its snapshot's objects cannot be
 * fetched whole into the outer repository (fetch would leave the outer one with dangling links, or
 * fail), and its restore could not be faithful. Such a repository stays named in `skipped`. */
async function incompleteHistory(inner: Repo): Promise<boolean> {
  const o = repoOpts(inner);
  const shallow = await git(['rev-parse', '--is-shallow-repository'], o);
  if (shallow.stdout.toString('utf8').trim() === 'true') return true;
  const partial = await git(['config', '--get', 'extensions.partialClone'], { ...o, okCodes: [1] });
  return partial.code === 0;
}

/** Where git keeps a submodule's git dir, relative to the superproject's own (per-worktree) git dir
 * (`modules/<name>`), or null when it lives elsewhere (an old-style `.git` directory inside the
 * submodule, restored the same way). */
function submoduleGitDir(outer: Repo, inner: Repo, f: FoundRepository): string | null {
  if (f.kind !== 'submodule' || inner.gitDir !== inner.commonDir) return null;
  const rel = path.relative(real(outer.gitDir), real(inner.gitDir)).split(path.sep).join('/');
  if (!rel.startsWith('modules/')) return null;
  try {
    checkPathSyntax(rel, 'submodule git dir');
  } catch {
    return null;
  }
  return rel;
}

/** Bring the objects of an inner snapshot into the outer repository. `git fetch` negotiates with the
 * outer refs (earlier outer snapshots have earlier inner snapshots as parents), so a re-capture copies
 * only what is new. No ref and no FETCH_HEAD is written: the outer snapshot ref will keep them. */
async function fetchSnapshot(outer: Repo, inner: Repo, oid: string): Promise<void> {
  await git(
    [
      '-c',
      'gc.auto=0',
      '-c',
      'maintenance.auto=false',
      '-c',
      'fetch.writeCommitGraph=false',
      'fetch',
      '--quiet',
      '--no-tags',
      '--no-write-fetch-head',
      '--recurse-submodules=no',
      '--',
      inner.commonDir,
      `${SNAPSHOT_REF_PREFIX}${oid}`,
    ],
    repoOpts(outer),
  );
}

/**
 * Rules for readers, applied to `repositories` before anything is written (and recursively to each
 * inner snapshot): paths are safe and collide with nothing in `files/`, `emptyDirs` or each other;
 * a submodule git dir is `modules/<name>`, unique and not inside another; each inner snapshot is an
 * ancestor of the outer one (so whoever has the outer has it), and the nesting is bounded.
 */
export async function validateRepositories(
  snap: Snapshot,
  files: PathEntry[],
  opts: GitOptions,
  validateInner: (inner: Snapshot, depth: number, budget: { left: number }) => Promise<void>,
  depth: number,
  budget: { left: number } = { left: MAX_REPOSITORIES },
): Promise<void> {
  const repos = snap.manifest.repositories ?? [];
  if (!repos.length) return;
  if (depth >= MAX_REPOSITORY_DEPTH) {
    throw new XetError('SNAPSHOT_INVALID', `inner repositories nest deeper than ${MAX_REPOSITORY_DEPTH} levels`, {
      snapshot: snap.oid,
    });
  }
  budget.left -= repos.length;
  if (budget.left < 0) {
    throw new XetError('SNAPSHOT_INVALID', `more than ${MAX_REPOSITORIES} inner repositories`, { snapshot: snap.oid });
  }
  const where = 'manifest repositories';
  checkTreePaths(
    [...files, ...repos.map((r) => ({ path: r.path, type: 'repository' }))],
    snap.manifest.emptyDirs,
    `files/ and ${where}`,
  );
  const gitDirs: PathEntry[] = [];
  for (const r of repos) {
    if (r.gitDir !== null) {
      if (r.kind !== 'submodule' || !r.gitDir.startsWith('modules/')) {
        throw new XetError('SNAPSHOT_INVALID', `inner repository ${r.path}: git dir ${JSON.stringify(r.gitDir)}`, {
          path: r.path,
        });
      }
      checkPathSyntax(r.gitDir, `${where} (git dir)`);
      gitDirs.push({ path: r.gitDir, type: 'blob' });
    }
  }
  checkTreePaths(gitDirs, [], `${where} (git dirs)`);
  for (const r of repos) {
    const anc = await git(['merge-base', '--is-ancestor', r.snapshot, snap.oid], { ...opts, okCodes: [1, 128] });
    if (anc.code !== 0) {
      throw new XetError(
        'SNAPSHOT_INVALID',
        `inner snapshot ${r.snapshot} of ${r.path} is not a parent of ${snap.oid}`,
        {
          path: r.path,
          snapshot: r.snapshot,
        },
      );
    }
    await validateInner(await readSnapshot(r.snapshot, opts), depth + 1, budget);
  }
}

export interface InnerRestoreHooks {
  restoreRefs(snap: Snapshot, opts: GitOptions): Promise<void>;
  restoreConfig(snap: Snapshot, opts: GitOptions): Promise<void>;
  restoreInfoFiles(snap: Snapshot, gitDir: string): void;
  /** restore --allow-exec: a rebase todo with exec lines inside an inner repository is kept. */
  allowExec?: boolean;
}

/**
 * Lay every inner repository of `snap` into `worktree` (already holding the outer files). `gitDir` is
 * the outer repository's git dir (submodule git dirs go below it, as git keeps them); `objectSource`
 * a git dir holding every object of the outer snapshot (inner snapshots are its ancestors).
 */
export async function restoreRepositories(
  snap: Snapshot,
  worktree: string,
  gitDir: string,
  objectSource: string,
  hooks: InnerRestoreHooks,
): Promise<void> {
  for (const r of snap.manifest.repositories ?? []) {
    const wt = path.join(worktree, r.path);
    assertNoSymlinkBetween(worktree, wt);
    fs.mkdirSync(wt, { recursive: true });
    if (fs.readdirSync(wt).length) {
      throw new XetError('PATH_CONFLICT', `inner repository ${r.path} would land on files of the snapshot`, {
        path: r.path,
      });
    }
    const separate = r.kind === 'submodule' && r.gitDir !== null;
    const innerGitDir = separate ? path.join(gitDir, r.gitDir as string) : path.join(wt, '.git');
    if (fs.existsSync(innerGitDir)) {
      throw new XetError('PATH_CONFLICT', `inner repository ${r.path}: ${innerGitDir} exists already`, {
        path: r.path,
      });
    }
    const format = r.snapshot.length === 64 ? 'sha256' : 'sha1';
    if (separate) {
      assertNoSymlinkBetween(gitDir, innerGitDir);
      fs.mkdirSync(path.dirname(innerGitDir), { recursive: true });
      await git(['init', '--quiet', `--object-format=${format}`, `--separate-git-dir=${innerGitDir}`, wt]);
      // Relative both ways, as `git submodule` writes them: the tree is renamed into place later.
      const toGitDir = path.relative(wt, innerGitDir).split(path.sep).join('/');
      fs.writeFileSync(path.join(wt, '.git'), `gitdir: ${toGitDir}\n`);
      const toWorktree = path.relative(innerGitDir, wt).split(path.sep).join('/');
      await git(['config', 'core.worktree', toWorktree], { cwd: wt, env: { GIT_DIR: innerGitDir } });
    } else {
      await git(['init', '--quiet', `--object-format=${format}`, wt]);
    }
    // Every object the inner snapshot reaches, as one pack written straight into its object dir.
    await git(['pack-objects', '--revs', '--quiet', path.join(innerGitDir, 'objects', 'pack', 'pack')], {
      cwd: wt,
      env: { GIT_DIR: objectSource },
      input: `${r.snapshot}\n`,
    });
    const opts: GitOptions = { cwd: wt, env: { GIT_DIR: innerGitDir, GIT_WORK_TREE: wt } };
    const inner = await readSnapshot(r.snapshot, opts);
    // A conflict or an operation in progress inside the inner repository comes back too: planned
    // (checked) before its files are laid, applied once its index exists, as for the outer one.
    const opPlan = await planOperationRestore(inner, opts, hooks.allowExec === true);
    const filesIndex = path.join(innerGitDir, INNER_FILES_INDEX);
    const lay: LaySpec = {
      snap: inner,
      worktree: wt,
      objectsDir: path.join(innerGitDir, 'objects'),
      filesIndex,
      indexFile: path.join(innerGitDir, 'index'),
      scratchParent: innerGitDir,
      repoGitDir: innerGitDir,
    };
    await layFiles(lay);
    await restoreRepositories(inner, wt, innerGitDir, objectSource, hooks);
    await hooks.restoreRefs(inner, opts);
    await hooks.restoreConfig(inner, opts);
    hooks.restoreInfoFiles(inner, innerGitDir);
    await layIndex(lay);
    if (opPlan) await applyOperationRestore(opPlan, innerGitDir, opts);
    // The files index stays (INNER_FILES_INDEX): seedRepositories adopts it once the tree is in place.
  }
}

/**
 * After the restored tree is in its final place: make each inner repository's files index its
 * capture stat cache and record its files tree, so the first capture in the copy reads only what
 * changed inside submodules too. An optimisation: failures are returned as warnings.
 */
export async function seedRepositories(snap: Snapshot, worktree: string, opts: GitOptions): Promise<string[]> {
  const warnings: string[] = [];
  for (const r of snap.manifest.repositories ?? []) {
    const wt = path.join(worktree, r.path);
    try {
      const repo = await findRepo(wt);
      const filesIndex = path.join(repo.gitDir, INNER_FILES_INDEX);
      const inner = await readSnapshot(r.snapshot, opts, true);
      const id = workspaceId(repo.gitDir);
      const cache = captureCacheIndex(repo.commonDir, id);
      fs.mkdirSync(path.dirname(cache), { recursive: true });
      fs.renameSync(filesIndex, cache);
      const c = inner.manifest.counts;
      withSidecar(repo.commonDir, (db) =>
        recordFilesTree(
          db,
          { id, worktree: repo.worktree, gitDir: repo.gitDir },
          inner.filesTree,
          { files: c.files, bytes: c.bytes, symlinks: c.symlinks },
          null,
        ),
      );
      warnings.push(...(await seedRepositories(inner, wt, opts)));
    } catch (e) {
      warnings.push(`could not record the inner repository ${r.path} in its sidecar: ${(e as Error).message}`);
    }
  }
  return warnings;
}

export interface RepositoryDifference {
  kind: string;
  path?: string;
  expected?: unknown;
  actual?: unknown;
}

/**
 * Verify each inner repository against its snapshot (recursively, through `verifyInner`), with
 * difference paths prefixed by the repository's path, plus repositories found on disk that the
 * snapshot does not have (`repository-extra`).
 */
export async function compareRepositories(
  snap: Snapshot,
  worktree: string,
  found: FoundRepository[],
  verifyInner: (snapshot: string, dir: string) => Promise<RepositoryDifference[]>,
): Promise<RepositoryDifference[]> {
  const repos = snap.manifest.repositories ?? [];
  const want = new Set(repos.map((r) => r.path));
  const out: RepositoryDifference[] = [];
  for (const f of found) if (!want.has(f.path)) out.push({ kind: 'repository-extra', path: f.path });
  for (const r of repos) {
    for (const d of await verifyInner(r.snapshot, path.join(worktree, r.path))) {
      out.push({ ...d, path: d.path && !path.isAbsolute(d.path) ? `${r.path}/${d.path}` : r.path });
    }
  }
  return out;
}

/**
 * Changes between the inner repositories of a snapshot and those of another snapshot or a working
 * tree: `repository-added`, `repository-deleted`, and for a path in both, the inner diff (through
 * `diffInner`, which returns nothing when there is nothing to compare) with paths prefixed.
 */
export async function repositoryChanges(
  from: RepositoryEntry[],
  to: { path: string; snapshot?: string }[],
  diffInner: (a: RepositoryEntry, b: { path: string; snapshot?: string }) => Promise<RepositoryDifference[]>,
): Promise<RepositoryDifference[]> {
  const out: RepositoryDifference[] = [];
  const toByPath = new Map(to.map((r) => [r.path, r]));
  const fromPaths = new Set(from.map((r) => r.path));
  for (const r of from) {
    const other = toByPath.get(r.path);
    if (!other) {
      out.push({ kind: 'repository-deleted', path: r.path });
      continue;
    }
    for (const d of await diffInner(r, other)) out.push({ ...d, path: d.path ? `${r.path}/${d.path}` : r.path });
  }
  for (const r of to) if (!fromPaths.has(r.path)) out.push({ kind: 'repository-added', path: r.path });
  return out;
}
