// Export: a fork's (or a snapshot's) work as one ordinary commit on top of the commit it started
// from, on a branch or as a patch, so it can be reviewed and merged with plain Git. The commit holds
// tracked and untracked files that are not ignored, exactly as `git add -A && git commit` would
// record them (clean filters and eol rules apply), built in a temporary index so the fork's own
// index is never touched. Trailers name the snapshot the commit came from.

import { withObjectsShared } from '../gc/objects-lock';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText, gitZ, joinZ } from '../git/exec';
import { readConfig } from '../git/config';
import { chunkedFiles, contentId, type ChunkedEntry } from '../chunks/snapshot-files';
import { commitTree, diffTrees, identityEnv, lsTree, objectSizes, type TreeChange } from '../git/plumbing';
import { admitRepository } from '../allowance/admit';
import { scratchDir } from '../snapshot/scan';
import { faultPoint } from '../testing/fault-points';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { createShadow } from '../git/shadow';
import { sidecarDir } from '../sidecar/db';
import { capture } from '../snapshot/capture';
import { NEUTRAL_INDEX_CONFIG } from '../snapshot/lay';
import { writeChunkedFiles } from '../snapshot/lay-chunked';
import { readSnapshot, resolveSnapshotOid, type Snapshot } from '../snapshot/store';
import { ensureUsable, resolveFork } from './fork';
import { assertForkWritable, refuseStale } from '../tasks/enforce';
import { slotOf } from '../tasks/slot';
import { findTask, taskOfFork, taskOfResult } from '../tasks/provenance';
import { recordExport } from '../tasks/store';
import { withSidecar } from '../sidecar/db';

export interface ExportOptions {
  cwd: string;
  /** A fork directory or a snapshot id. */
  source: string;
  branch?: string;
  /** A file to write the patch to ('-' for the result's `patchText`). */
  patch?: string;
  message?: string;
  force?: boolean;
  /** The task the work came from (full or abbreviated id); found from the source when not given. */
  task?: string;
}

export interface ExportResult {
  /** The export commit, or null when there was nothing to export. */
  commit: string | null;
  parent: string | null;
  snapshot: string;
  fork: string | null;
  /** The task named by the `Xet-Task:` trailer (and linked to the commit), if any. */
  task: string | null;
  branch: string | null;
  patch: string | null;
  patchText?: string;
  changed: number;
}

// Holds the objects lock shared for its whole run: a gc never collects what it is making reachable.
export async function exportChanges(options: ExportOptions): Promise<ExportResult> {
  if (Boolean(options.branch) === Boolean(options.patch)) {
    throw new XetError('USAGE', 'export needs exactly one of --branch NAME or --patch FILE');
  }
  const repo = await findRepo(options.cwd, true);
  return withObjectsShared(repo.commonDir, () => exportChangesShared(options, repo));
}

async function exportChangesShared(options: ExportOptions, repo: Repo): Promise<ExportResult> {
  const o = repoOpts(repo);
  // The branch is made in this worktree: after its runner died, its hook would refuse the update
  // half way (after the capture).
  if (options.branch) refuseStale(slotOf(repo), 'export --branch');
  const ref = options.branch ? await checkBranch(repo, options.branch, Boolean(options.force)) : null;
  const named = options.task !== undefined ? findTask(repo, options.task).id : null;

  const asDir = path.resolve(options.cwd, options.source);
  let tree: string;
  let parent: string | null;
  let snapshot: string;
  let forkId: string | null = null;
  let task: string | null = named;
  const trailers: string[] = [];
  if (fs.existsSync(asDir) && fs.statSync(asDir).isDirectory()) {
    const { row } = await resolveFork(options.cwd, options.source);
    assertForkWritable(repo, row, 'export');
    task ??= taskOfFork(repo, row.id)?.id ?? null;
    await ensureUsable(repo, row);
    // The state being exported is kept as a snapshot (all of it), so the commit can be traced back.
    snapshot = (await capture({ cwd: row.dir, message: `git xet export: fork ${row.id}`, ignored: 'all' })).snapshot;
    const fork = await findRepo(row.dir);
    tree = await treeOfWorktree(repo, fork.worktree, fork.gitDir, path.join(fork.gitDir, 'index'));
    parent = row.headOid;
    forkId = row.id;
    trailers.push(`Xet-Snapshot: ${snapshot}`, `Xet-Base-Snapshot: ${row.snapshot}`, `Xet-Fork: ${row.id}`);
  } else {
    snapshot = await resolveSnapshotOid(options.source, o);
    task ??= taskOfResult(repo, snapshot)?.id ?? null;
    const snap = await readSnapshot(snapshot, o);
    tree = await treeOfSnapshot(repo, snap);
    parent = snap.manifest.head.oid;
    trailers.push(`Xet-Snapshot: ${snapshot}`);
  }
  if (task) trailers.push(`Xet-Task: ${task}`);

  const parentTree = parent ? await gitText(['rev-parse', `${parent}^{tree}`], o) : null;
  const changed = parentTree
    ? (await diffTrees(parentTree, tree, o)).length
    : (await lsTree(tree, o)).filter((e) => e.type === 'blob').length;
  const result: ExportResult = {
    commit: null,
    parent,
    snapshot,
    fork: forkId,
    task,
    branch: null,
    patch: null,
    changed,
  };
  if (changed === 0) return result;

  const subject =
    options.message ?? (forkId ? `Work from fork ${forkId}` : `Work from snapshot ${snapshot.slice(0, 12)}`);
  const message = `${subject.replace(/\s+$/, '')}\n\n${trailers.join('\n')}\n`;
  const config = await readConfig(o);
  const commit = await commitTree(tree, parent ? [parent] : [], message, {
    ...o,
    env: { ...o.env, ...identityEnv(config) },
  });
  result.commit = commit;
  if (ref) {
    const zero = '0'.repeat(commit.length);
    await git(['update-ref', '-m', `git xet export ${options.source}`, ref.name, commit, ref.old ?? zero], o);
    result.branch = ref.name.slice('refs/heads/'.length);
  } else if (options.patch) {
    const text = (
      await git(['format-patch', '-1', '--stdout', '--binary', '--no-signature', '--full-index', commit], o)
    ).stdout;
    if (options.patch === '-') {
      result.patchText = text.toString('utf8');
      result.patch = '-';
    } else {
      const file = path.resolve(options.cwd, options.patch);
      const tmp = `${file}.xet-${crypto.randomBytes(4).toString('hex')}`;
      fs.writeFileSync(tmp, text);
      fs.renameSync(tmp, file);
      result.patch = file;
    }
  }
  // After the commit is made and published: the link is provenance, not part of the export.
  if (task) withSidecar(repo.commonDir, (db) => recordExport(db, task, commit, result.branch));
  return result;
}

/** Checks before any effect: a valid name, and an existing branch only with --force and only if no
 * worktree has it checked out (moving it would change what that worktree's index is compared to). */
async function checkBranch(repo: Repo, name: string, force: boolean): Promise<{ name: string; old: string | null }> {
  const o = repoOpts(repo);
  const r = await git(['check-ref-format', '--branch', name], { ...o, okCodes: [1, 128] });
  if (r.code !== 0 || name.startsWith('-'))
    throw new XetError('USAGE', `${JSON.stringify(name)} is not a valid branch name`);
  const ref = `refs/heads/${name}`;
  const old = await git(['rev-parse', '--verify', '-q', `${ref}^{commit}`], { ...o, okCodes: [1] });
  if (old.code === 0 && !force) {
    throw new XetError('BRANCH_EXISTS', `branch ${name} exists; pass --force to move it`, { branch: name });
  }
  // Checked out somewhere (an unborn branch too: creating it would give that worktree a commit it
  // never made).
  const list = await gitText(['worktree', 'list', '--porcelain'], o);
  let wt = '';
  for (const line of list.split('\n')) {
    if (line.startsWith('worktree ')) wt = line.slice('worktree '.length);
    if (line === `branch ${ref}`) {
      throw new XetError('BRANCH_EXISTS', `branch ${name} is checked out in ${wt}; export will not move it`, {
        branch: name,
        worktree: wt,
      });
    }
  }
  return { name: ref, old: old.code === 0 ? old.stdout.toString('utf8').trim() : null };
}

/** `git add -A` into a copy of a worktree's index: the tree a commit of everything would have. */
async function treeOfWorktree(repo: Repo, worktree: string, gitDir: string, index: string | null): Promise<string> {
  // The copy and the index git writes beside it (lock + rename): twice the index, plus what add -A
  // adds to it (an entry per untracked file: within the slack).
  const indexBytes = index ? (fs.statSync(index, { throwIfNoEntry: false })?.size ?? 0) : 0;
  const admission = await admitRepository(
    repo,
    { bytes: 2 * indexBytes + EXPORT_SLACK_BYTES, files: 2 },
    'grow',
    'export',
  );
  // The pid in the name lets a recount remove the copy of a killed export (src/snapshot/leftovers.ts).
  const scratch = scratchDir(path.join(sidecarDir(repo.commonDir), 'tmp'), 'export');
  const tmpIndex = path.join(scratch, 'index');
  try {
    if (index && fs.existsSync(index)) fs.copyFileSync(index, tmpIndex);
    const o = {
      cwd: worktree,
      env: { ...NEUTRAL_INDEX_CONFIG, GIT_DIR: gitDir, GIT_WORK_TREE: worktree, GIT_INDEX_FILE: tmpIndex },
    };
    await git(['add', '-A'], o);
    return await gitText(['write-tree'], o);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
    admission.end();
  }
}

/** An index's entries and git's own files beside what an export lays: generous per-entry room. */
const EXPORT_SLACK_BYTES = 64 * 1024;
const INDEX_ENTRY_BYTES = 256;

/**
 * A snapshot has no worktree to run `git add -A` in, so a minimal one is made: the files that differ
 * from the snapshot's index, plus every .gitignore (so ignore rules apply as in the source). Entries
 * the snapshot left unchanged are marked skip-worktree in the temporary index, where add ignores them.
 */
async function treeOfSnapshot(repo: Repo, snap: Snapshot): Promise<string> {
  // Growing work in the repository root while it runs: admitted before anything is written, with an
  // upper bound from the blobs it will lay (their sizes from git's object store, not from the tree's
  // word) and three indexes of the snapshot's index's entries.
  const ro = repoOpts(repo);
  // Chunked files are laid by reassembly, and one whose bytes are its staged blob is unchanged.
  const chunked = await chunkedFiles(snap, ro);
  const unchanged = (c: TreeChange): boolean =>
    c.status === 'M' && c.oldMode === c.newMode && contentId(c.path, c.newOid, chunked) === c.oldOid;
  const hiddenFirst = new Set([...snap.manifest.index.skipWorktree, ...snap.manifest.index.assumeUnchanged]);
  const planned = (await diffTrees(snap.indexTree, snap.filesTree, ro)).filter(
    (c) => !hiddenFirst.has(c.path) && c.status !== 'D' && !unchanged(c),
  );
  const plannedSet = new Set(planned.map((c) => c.path));
  const ignoreFiles = (await lsTree(snap.filesTree, ro)).filter(
    (e) => (e.path === '.gitignore' || e.path.endsWith('/.gitignore')) && !plannedSet.has(e.path),
  );
  const blobs = [...planned.map((c) => c.newOid), ...ignoreFiles.map((e) => e.oid)];
  const sizes = await objectSizes(blobs, ro);
  const entries = (await lsTree(snap.indexTree, ro)).length + ignoreFiles.length;
  let laid = 0;
  for (const oid of blobs) laid += sizes.get(oid) ?? 0;
  // A chunked file is laid whole, and `git add` writes it as a new object of up to its size.
  for (const c of planned) laid += 2 * (chunked.get(c.path)?.pointer.size ?? 0);
  const admission = await admitRepository(
    repo,
    {
      bytes: laid + 3 * entries * INDEX_ENTRY_BYTES + EXPORT_SLACK_BYTES,
      files: blobs.length + 3 + EXPORT_SHADOW_FILES,
    },
    'grow',
    'export',
  );
  const scratch = scratchDir(path.join(sidecarDir(repo.commonDir), 'tmp'), 'export');
  try {
    const wt = path.join(scratch, 'wt');
    fs.mkdirSync(wt);
    const shadow = createShadow({
      dir: path.join(scratch, 'shadow'),
      objectFormat: snap.manifest.git.objectFormat,
      objectsDir: repo.objectsDir,
      worktree: wt,
      indexFile: path.join(scratch, 'files.index'),
    });
    const so = { cwd: wt, env: shadow.env };
    // Paths the user hid from git (skip-worktree, assume-unchanged) stay as staged, as in the source.
    const hidden = new Set([...snap.manifest.index.skipWorktree, ...snap.manifest.index.assumeUnchanged]);
    const changes = (await diffTrees(snap.indexTree, snap.filesTree, so)).filter(
      (c) => !hidden.has(c.path) && !unchanged(c),
    );
    const touched = new Set(changes.map((c) => c.path));
    const write = changes.filter((c) => c.status !== 'D' && !chunked.has(c.path)).map((c) => c.path);
    const gitignores = (await lsTree(snap.filesTree, so)).filter(
      (e) => e.path === '.gitignore' || e.path.endsWith('/.gitignore'),
    );
    for (const g of gitignores) if (!touched.has(g.path)) write.push(g.path);
    await git(['read-tree', snap.filesTree], so);
    if (write.length) await git(['checkout-index', '--force', '-z', '--stdin'], { ...so, input: joinZ(write) });
    const index = path.join(scratch, 'index');
    const o = {
      cwd: wt,
      env: { ...NEUTRAL_INDEX_CONFIG, GIT_DIR: repo.commonDir, GIT_WORK_TREE: wt, GIT_INDEX_FILE: index },
    };
    const big = changes.filter((c) => c.status !== 'D' && chunked.has(c.path));
    if (big.length) {
      // Untracked ones that add -A would ignore are not worth reassembling (the .gitignores are laid).
      const fresh = big.filter((c) => c.status === 'A').map((c) => c.path);
      const ignored = fresh.length
        ? new Set(
            await gitZ(['check-ignore', '--no-index', '-z', '--stdin'], { ...o, input: joinZ(fresh), okCodes: [1] }),
          )
        : new Set<string>();
      const lay = big.filter((c) => !ignored.has(c.path)).map((c) => chunked.get(c.path) as ChunkedEntry);
      // A lazy copy fetches the chunks it lacks in one batch first (snapshot/lazy.ts says why).
      await (await import('../snapshot/lazy')).fetchMissingChunks(repo, snap, lay, repoOpts(repo));
      await writeChunkedFiles(wt, lay, { git: so, format: snap.manifest.git.objectFormat });
    }
    await faultPoint('export:after-checkout');
    await git(['read-tree', snap.indexTree], o);
    const untouched = (await gitZ(['ls-files', '-z'], o)).filter((p) => !touched.has(p));
    if (untouched.length)
      await git(['update-index', '--skip-worktree', '-z', '--stdin'], { ...o, input: joinZ(untouched) });
    return await treeOfWorktree(repo, wt, repo.commonDir, index);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
    admission.end();
  }
}

/** What a shadow git dir holds (src/git/shadow.ts): a few small files. */
const EXPORT_SHADOW_FILES = 16;
