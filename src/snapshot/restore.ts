// Restore: a snapshot -> a new, self-contained repository in exactly the captured state.
// Safety: the snapshot and every path in it are validated before anything is created; the work is
// done in a temporary sibling directory that is renamed onto the target only when complete, so a
// restore that is killed never leaves a target that looks finished. Nothing is written outside the
// target (paths are checked; git never follows a symlink it created on the way to a path).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText, joinZ, type GitOptions } from '../git/exec';
import { catFileBatch, diffTrees, lsTree, readLocalConfig } from '../git/plumbing';
import { findRepo, repoOpts, tryFindRepo, type Repo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { recordFilesTree, workspaceId } from '../sidecar/workspaces';
import { createShadow } from '../git/shadow';
import { checkTreePaths } from './paths';
import { CAPTURED_CONFIG_RE } from './capture';
import { setRecordedSizes } from '../git/index-file';
import { RESTORE_MARKER, SNAPSHOT_REF_PREFIX } from './refs';
import { readSnapshot, resolveSnapshotOid, type Snapshot } from './store';

export interface RestoreOptions {
  cwd: string;
  snapshot: string;
  dir: string;
  /** A path, URL or remote name to fetch the snapshot from instead of the current repository. */
  from?: string;
  /** Told what is happening, for a progress line on a terminal. */
  progress?: (what: string) => void;
}

export interface RestoreResult {
  snapshot: string;
  dir: string;
  /** Problems after the restore was complete (it stands; these only cost speed later). */
  warnings: string[];
  files: number;
  head: string;
}

function checkTarget(dir: string): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(dir);
  } catch {
    return; // does not exist: fine
  }
  if (!st.isDirectory()) throw new XetError('TARGET_NOT_EMPTY', `${dir} exists and is not a directory`, { dir });
  if (fs.readdirSync(dir).length > 0) {
    throw new XetError('TARGET_NOT_EMPTY', `${dir} exists and is not empty; restore needs a new or empty directory`, {
      dir,
    });
  }
}

/** Resolve where objects come from: a URL or path for `git fetch`, or the local repository. */
async function resolveFrom(cwd: string, from: string, local: Repo | null): Promise<string> {
  if (local) {
    const r = await git(['remote', 'get-url', '--', from], { ...repoOpts(local), okCodes: [2, 128] });
    if (r.code === 0) return r.stdout.toString('utf8').trim();
  }
  if (/^[a-z][a-z0-9+.-]*::|^[a-z][a-z0-9+.-]*:\/\//i.test(from) || /^[^/]+@[^/]+:/.test(from)) return from;
  const abs = path.resolve(cwd, from);
  if (!fs.existsSync(abs)) throw new XetError('USAGE', `--from ${from}: no such remote or path`, { from });
  return abs;
}

export async function restore(options: RestoreOptions): Promise<RestoreResult> {
  const target = path.resolve(options.cwd, options.dir);
  checkTarget(target);
  const local = await tryFindRepo(options.cwd, true);
  if (!local && !options.from) {
    throw new XetError('NOT_A_REPOSITORY', 'restore runs in the source repository, or needs --from <path-or-remote>', {
      cwd: options.cwd,
    });
  }
  const fromUrl = options.from ? await resolveFrom(options.cwd, options.from, local) : null;

  // Resolve and validate the snapshot before creating anything, when we can see it locally.
  let oid: string | null = null;
  let snap: Snapshot | null = null;
  if (!fromUrl && local) {
    oid = await resolveSnapshotOid(options.snapshot, repoOpts(local));
    snap = await readSnapshot(oid, repoOpts(local));
    await validateSnapshotPaths(snap, repoOpts(local));
  } else if (fromUrl) {
    oid = await resolveRemoteSnapshot(fromUrl, options.snapshot, options.cwd);
  }
  if (!oid) throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${options.snapshot}`, { snapshot: options.snapshot });

  const parent = path.dirname(target);
  try {
    fs.mkdirSync(parent, { recursive: true });
  } catch (e) {
    throw new XetError('TARGET_UNUSABLE', `cannot create ${parent}: ${(e as Error).message}`, { dir: target });
  }
  const tmp = path.join(parent, `.${path.basename(target)}.xet-restore-${crypto.randomBytes(4).toString('hex')}`);
  let published = false;
  try {
    const progress = options.progress ?? (() => undefined);
    progress(fromUrl ? `fetching ${oid.slice(0, 12)}` : 'linking objects');
    // Objects: hard-linked from the local repository (git clone --local, like git itself does for
    // local clones: objects are immutable, so sharing inodes is safe), or fetched.
    if (!fromUrl && local) {
      await git(['clone', '--quiet', '--local', '--no-checkout', '--', local.commonDir, tmp]);
    } else {
      fs.mkdirSync(tmp);
      // The snapshot id's length tells the object format (the remote must match it).
      await git(['init', '--quiet', `--object-format=${oid.length === 64 ? 'sha256' : 'sha1'}`, tmp]);
      await git(
        [
          'fetch',
          '--quiet',
          '--no-tags',
          '--',
          fromUrl as string,
          `+${SNAPSHOT_REF_PREFIX}${oid}:${SNAPSHOT_REF_PREFIX}${oid}`,
        ],
        {
          cwd: tmp,
        },
      );
    }
    const opts: GitOptions = { cwd: tmp, env: { GIT_DIR: path.join(tmp, '.git'), GIT_WORK_TREE: tmp } };
    const gitDir = path.join(tmp, '.git');
    fs.writeFileSync(path.join(gitDir, RESTORE_MARKER), `${oid}\n`);
    if (!snap) {
      snap = await readSnapshot(oid, opts);
      await validateSnapshotPaths(snap, opts);
    }
    progress(`writing ${snap.manifest.counts.files} files`);
    const rewritten = await writeWorktree(snap, tmp, gitDir);
    progress('restoring index, refs and config');
    await restoreRefs(snap, opts);
    await restoreConfig(snap, opts);
    restoreInfoFiles(snap, gitDir);
    await refreshConverted(snap, rewritten, opts);
    await restoreIndexFlags(snap, opts);
    fs.rmSync(path.join(gitDir, RESTORE_MARKER));
    publish(tmp, target);
    published = true;
    const warnings = await seedWorkspace(target, snap);
    return {
      snapshot: oid,
      dir: target,
      warnings,
      files: snap.manifest.counts.files,
      head: snap.manifest.head.kind === 'branch' ? snap.manifest.head.ref : (snap.manifest.head.oid as string),
    };
  } finally {
    if (!published) fs.rmSync(tmp, { recursive: true, force: true });
  }
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

async function resolveRemoteSnapshot(url: string, spec: string, cwd: string): Promise<string> {
  const r = await gitText(['ls-remote', '--', url, `${SNAPSHOT_REF_PREFIX}*`], { cwd });
  const oids = r
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split('\t')[1].slice(SNAPSHOT_REF_PREFIX.length))
    .filter((o) => o.startsWith(spec));
  if (oids.length === 1) return oids[0];
  if (oids.length > 1) throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} is ambiguous at ${url}`, { snapshot: spec });
  throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${spec} at ${url}`, { snapshot: spec, from: url });
}

export async function validateSnapshotPaths(snap: Snapshot, opts: GitOptions): Promise<void> {
  const m = snap.manifest;
  const files = await lsTree(snap.filesTree, { ...opts, trees: true });
  checkTreePaths(files, m.emptyDirs, 'files/');
  const index = await lsTree(snap.indexTree, { ...opts, trees: true });
  checkTreePaths(index, [], 'index/');
  const known = new Set(index.map((e) => e.path));
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
  const allowed = new RegExp(CAPTURED_CONFIG_RE);
  for (const c of m.config) {
    if (!allowed.test(c.key) || /[\0\n]/.test(c.value)) {
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
}

/** Files: the staged tree first (so the index gets true stat data), then the paths where the
 * working tree differs from the index, then empty directories. Both passes run git's checkout in a
 * shadow git dir, so no smudge filter or eol conversion touches the bytes. */
async function writeWorktree(snap: Snapshot, worktree: string, gitDir: string): Promise<string[]> {
  const scratch = fs.mkdtempSync(path.join(gitDir, 'xet-scratch-'));
  const objectsDir = path.join(gitDir, 'objects');
  const realIndex = shadowFor(snap, scratch, 'a', worktree, objectsDir, path.join(gitDir, 'index'));
  const filesIndex = shadowFor(snap, scratch, 'b', worktree, objectsDir, path.join(scratch, 'files.index'));
  try {
    const o1 = { cwd: worktree, env: realIndex.env };
    await git(['read-tree', snap.indexTree], o1);
    await git(['checkout-index', '--all', '--force', '-u'], o1);

    const toRemove: string[] = [];
    const toWrite: string[] = [];
    const rewritten: string[] = [];
    for (const { oldMode, newMode, status, path: p } of await diffTrees(snap.indexTree, snap.filesTree, o1)) {
      if (status === 'D') toRemove.push(p);
      else toWrite.push(p);
      if (status === 'T' || status === 'M') toRemove.push(p);
      // Same mode, other bytes: possibly only a conversion of the staged content (see refreshConverted).
      if (status === 'M' && oldMode === newMode) rewritten.push(p);
    }
    const dirsToCheck = new Set<string>();
    for (const p of toRemove) {
      fs.rmSync(path.join(worktree, p), { force: true });
      dirsToCheck.add(path.posix.dirname(p));
    }
    // Directories emptied by removals go too (a file that replaced a directory needs the room).
    for (const d of [...dirsToCheck].sort((a, b) => b.length - a.length)) {
      let cur = d;
      while (cur !== '.' && cur !== '') {
        try {
          fs.rmdirSync(path.join(worktree, cur));
        } catch {
          break;
        }
        cur = path.posix.dirname(cur);
      }
    }
    if (toWrite.length) {
      const o2 = { cwd: worktree, env: filesIndex.env };
      await git(['read-tree', snap.filesTree], o2);
      await git(['checkout-index', '--force', '-z', '--stdin'], { ...o2, input: joinZ(toWrite) });
    }
    for (const d of snap.manifest.emptyDirs) {
      const abs = path.join(worktree, d);
      assertNoSymlinkBetween(worktree, abs);
      fs.mkdirSync(abs, { recursive: true });
    }
    return rewritten;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

function shadowFor(
  snap: Snapshot,
  scratch: string,
  name: string,
  worktree: string,
  objectsDir: string,
  indexFile: string,
) {
  return createShadow({
    dir: path.join(scratch, `shadow-${name}`),
    objectFormat: snap.manifest.git.objectFormat,
    objectsDir,
    worktree,
    indexFile,
  });
}

function assertNoSymlinkBetween(root: string, abs: string): void {
  const rel = path.relative(root, abs).split(path.sep);
  let cur = root;
  for (const comp of rel) {
    cur = path.join(cur, comp);
    try {
      if (fs.lstatSync(cur).isSymbolicLink()) {
        throw new XetError('PATH_ESCAPE', `refusing to create a directory through the symlink ${cur}`, { path: abs });
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
  }
}

/**
 * Paths whose worktree bytes differ from the staged blob only by conversion (eol, filters): in the
 * source, git recorded the worktree file's stat data against that blob. Our index holds the blob's
 * checkout instead, and git treats a size mismatch as a modification without looking. So hash those
 * files the way git would (with the copy's own attributes and config, now in place) and, where the
 * result is the staged blob, let update-index record their stat data. Genuine edits are left alone.
 */
async function refreshConverted(snap: Snapshot, rewritten: string[], opts: GitOptions): Promise<void> {
  const ix = snap.manifest.index;
  const flagged = new Set([...ix.skipWorktree, ...ix.assumeUnchanged, ...ix.intentToAdd]);
  const candidates = rewritten.filter((p) => !flagged.has(p));
  if (!candidates.length) return;
  const staged = new Map<string, string>();
  for (const e of await lsTree(snap.indexTree, opts)) staged.set(e.path, e.oid);
  const regular = candidates.filter((p) => {
    try {
      return fs.lstatSync(path.join(opts.cwd as string, p)).isFile();
    } catch {
      return false;
    }
  });
  if (!regular.length) return;
  // --stdin-paths hashes each file as `git add` would, using the path's own attributes; it reads
  // one path per line, so the (rare) names with a newline are hashed one by one.
  const plain = regular.filter((p) => !p.includes('\n'));
  const odd = regular.filter((p) => p.includes('\n'));
  const oids = plain.length
    ? (await gitText(['hash-object', '--stdin-paths'], { ...opts, input: plain.map((p) => `${p}\n`).join('') })).split(
        '\n',
      )
    : [];
  const same = plain.filter((p, i) => oids[i] === staged.get(p));
  for (const p of odd) {
    const oid = await gitText(['hash-object', `--path=${p}`, '--', p], opts);
    if (oid === staged.get(p)) same.push(p);
  }
  if (same.length) await git(['update-index', '-z', '--stdin'], { ...opts, input: joinZ(same) });
}

async function restoreIndexFlags(snap: Snapshot, opts: GitOptions): Promise<void> {
  const ix = snap.manifest.index;
  const cwd = opts.cwd as string;
  if (ix.intentToAdd.length) {
    // `git add -N` wants a file to exist. It gets one in a scratch worktree made for the purpose,
    // never in the target: nothing is created through a symlink the snapshot put there, and no
    // placeholder or directory is left behind.
    const gitDir = path.join(cwd, '.git');
    const scratch = fs.mkdtempSync(path.join(gitDir, 'xet-ita-'));
    try {
      for (const p of ix.intentToAdd) {
        const abs = path.join(scratch, p);
        fs.mkdirSync(path.dirname(abs), { recursive: true });
        fs.writeFileSync(abs, '');
      }
      await git(['add', '--intent-to-add', '--force', '--pathspec-from-file=-', '--pathspec-file-nul'], {
        cwd: scratch,
        env: {
          GIT_DIR: gitDir,
          GIT_WORK_TREE: scratch,
          GIT_INDEX_FILE: path.join(gitDir, 'index'),
          GIT_LITERAL_PATHSPECS: '1',
        },
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
  if (stale.length) {
    await git(['update-index', '--index-version=3'], opts);
    setRecordedSizes(
      path.join(opts.cwd as string, '.git', 'index'),
      new Map(stale.map((e) => [e.path, e.size])),
      snap.manifest.git.objectFormat,
    );
  }
  if (ix.version >= 2 && ix.version <= 4) {
    await git(['update-index', `--index-version=${ix.version}`], opts);
  }
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
 * stores only what changed since (the objects are already there). An optimisation: the restore is
 * complete before this runs, so a failure here is a warning, not an error. */
async function seedWorkspace(target: string, snap: Snapshot): Promise<string[]> {
  try {
    const repo = await findRepo(target);
    const c = snap.manifest.counts;
    withSidecar(repo.commonDir, (db) =>
      recordFilesTree(
        db,
        { id: workspaceId(repo.gitDir), worktree: repo.worktree, gitDir: repo.gitDir },
        snap.filesTree,
        { files: c.files, bytes: c.bytes, symlinks: c.symlinks },
        null,
      ),
    );
    return [];
  } catch (e) {
    return [`could not record the restore in the sidecar: ${(e as Error).message}`];
  }
}
