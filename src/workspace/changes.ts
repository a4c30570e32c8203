// What a fork changed relative to its base snapshot: files added, modified and deleted, and whether
// anything at all (files, index, HEAD) differs, which decides whether discard must capture first.
//
// Overlay forks are read from the upper layer, so the cost follows the changes, not the tree: every
// file the fork wrote is in the upper dir, and directories the fork never touched are never listed.
// Whiteouts and opaque or renamed directories are not decoded from overlay's xattrs: inside a
// directory the fork touched, the mounted view says which base entries are hidden (deleted) and
// which entries came from elsewhere (a renamed directory), and the base says what was there.
// Clone and copy forks are scanned with their stat cache, the way `git status` looks at a tree.

import { chunkedFiles, contentId } from '../chunks/snapshot-files';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readHead, sameHead } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { expectedForkHead, type ForkRow } from '../sidecar/forks';
import { captureCacheIndex, workspaceId } from '../sidecar/workspaces';
import { diffTrees } from '../git/plumbing';
import { readSnapshot, type Snapshot } from '../snapshot/store';
import { compareIndex, objEnv, scanWorktreeFiles, withScratchObjects } from '../snapshot/verify';
import { baseFor } from './base';
import { ensureUsable, resolveFork } from './fork';
import { readdirUtf8 } from './names';

export interface FileChanges {
  added: string[];
  modified: string[];
  deleted: string[];
  /** Empty directories that appeared, and empty directories of the base that are gone or filled. */
  addedEmptyDirs: string[];
  removedEmptyDirs: string[];
  /** Repositories inside the fork (a `git init` or `git clone` there; scan mode): their contents are
   * not listed above, and a fork holding one is never clean. */
  repositories?: string[];
  /** Entries no snapshot can hold (names git refuses, fifos, sockets; scan mode): a fork holding
   * one is never clean, so a discard captures and then refuses to lose them. */
  skipped?: string[];
}

export interface ForkChanges extends FileChanges {
  id: string;
  dir: string;
  mode: ForkRow['mode'];
  snapshot: string;
  /** How they were found: the overlay's upper layer, or a scan of the whole tree. */
  method: 'upper' | 'scan';
}

export async function forkChanges(cwd: string, dirArg: string): Promise<ForkChanges> {
  const { repo, row } = await resolveFork(cwd, dirArg);
  await ensureUsable(repo, row);
  const files = await changedFiles(repo, row, await readSnapshot(row.snapshot, repoOpts(repo)));
  return {
    id: row.id,
    dir: row.dir,
    mode: row.mode,
    snapshot: row.snapshot,
    method: row.mode === 'overlay' ? 'upper' : 'scan',
    ...files,
  };
}

export async function changedFiles(repo: Repo, row: ForkRow, snap: Snapshot): Promise<FileChanges> {
  if (row.mode === 'overlay' && row.upper) {
    return upperChanges(row.upper, row.dir, baseFor(repo, row.snapshot).tree, snap.manifest.emptyDirs);
  }
  const fork = await findRepo(row.dir);
  return withScratchObjects('changes', async (scratch, objects) => {
    const alternates = [fork.objectsDir];
    const cache = captureCacheIndex(repo.commonDir, workspaceId(fork.gitDir));
    const { tree, emptyDirs, repositories, skipped } = await scanWorktreeFiles(
      fork,
      scratch,
      objects,
      alternates,
      cache,
    );
    const out: FileChanges = { added: [], modified: [], deleted: [], addedEmptyDirs: [], removedEmptyDirs: [] };
    const env = objEnv(fork, objects, alternates);
    // A chunked file is named by its pointer in the snapshot, by its whole blob when hashed again.
    const chunked = await chunkedFiles(snap, { cwd: fork.worktree, env });
    for (const c of await diffTrees(snap.filesTree, tree, { cwd: fork.worktree, env })) {
      if (c.status === 'M' && c.oldMode === c.newMode && contentId(c.path, c.oldOid, chunked) === c.newOid) continue;
      (c.status === 'A' ? out.added : c.status === 'D' ? out.deleted : out.modified).push(c.path);
    }
    const was = new Set(snap.manifest.emptyDirs);
    const now = new Set(emptyDirs);
    out.addedEmptyDirs = emptyDirs.filter((d) => !was.has(d)).sort();
    out.removedEmptyDirs = snap.manifest.emptyDirs.filter((d) => !now.has(d)).sort();
    if (repositories.length) out.repositories = repositories.map((r) => r.path);
    if (skipped.length) out.skipped = skipped.map((s) => s.path);
    return out;
  });
}

/** Anything that makes the fork differ from its snapshot: files, the index and its flags, HEAD. */
export async function forkIsDirty(repo: Repo, row: ForkRow): Promise<boolean> {
  const snap = await readSnapshot(row.snapshot, repoOpts(repo));
  const files = await changedFiles(repo, row, snap);
  if (Object.values(files).some((list) => list.length > 0)) return true;
  const fork = await findRepo(row.dir);
  if (!sameHead(await readHead(repoOpts(fork)), expectedForkHead(row))) return true;
  return withScratchObjects(
    'dirty',
    async (scratch, objects) => (await compareIndex(snap, fork, scratch, objects, [fork.objectsDir])).length > 0,
  );
}

function isWhiteout(st: fs.Stats): boolean {
  return st.isCharacterDevice() && st.rdev === 0;
}

function lstatOrNull(p: string): fs.Stats | null {
  try {
    return fs.lstatSync(p);
  } catch {
    return null;
  }
}

/** Changes of an overlay fork, from its upper layer, mounted view and base (see the top comment). */
export function upperChanges(upper: string, merged: string, base: string, baseEmptyDirs: string[]): FileChanges {
  const out: FileChanges = { added: [], modified: [], deleted: [], addedEmptyDirs: [], removedEmptyDirs: [] };
  const join = (rel: string, name: string) => (rel ? `${rel}/${name}` : name);
  const emptyNow = new Set<string>();

  // Every file (or symlink) under a path, read from one layer.
  const filesUnder = (root: string, rel: string, into: string[]) => {
    const st = lstatOrNull(path.join(root, rel));
    if (!st) return;
    if (!st.isDirectory()) {
      into.push(rel);
      return;
    }
    for (const name of readdirUtf8(path.join(root, rel), rel)) filesUnder(root, join(rel, name), into);
  };

  // Whether the mounted entry is the base's own entry at the same path. With all layers on one
  // filesystem overlayfs shows a lower file's inode, so a differing inode means the entry came from
  // elsewhere (a renamed directory); on other layouts this is merely slower, never wrong.
  const sameAsBase = (p: string) => {
    const m = lstatOrNull(path.join(merged, p));
    const b = lstatOrNull(path.join(base, p));
    return Boolean(m && b && m.ino === b.ino && m.isDirectory() === b.isDirectory());
  };

  // Compare what the mounted view shows under p with the base at the same path, entry by entry.
  const compareSubtree = (p: string) => {
    const ms = lstatOrNull(path.join(merged, p));
    const bs = lstatOrNull(path.join(base, p));
    if (!ms) {
      if (bs) filesUnder(base, p, out.deleted);
      return;
    }
    if (ms.isDirectory()) {
      if (bs && !bs.isDirectory()) out.deleted.push(p);
      const names = readdirUtf8(path.join(merged, p), p);
      if (!names.length) emptyNow.add(p);
      const shown = new Set(names);
      if (bs?.isDirectory()) {
        for (const n of readdirUtf8(path.join(base, p), p))
          if (!shown.has(n)) filesUnder(base, join(p, n), out.deleted);
      }
      for (const n of names) compareSubtree(join(p, n));
    } else if (!bs) {
      out.added.push(p);
    } else if (bs.isDirectory()) {
      filesUnder(base, p, out.deleted);
      out.added.push(p);
    } else if (ms.ino !== bs.ino && differs(path.join(merged, p), ms, path.join(base, p), bs)) {
      out.modified.push(p);
    }
  };

  const visit = (rel: string) => {
    const upperEntries = new Map<string, fs.Stats>();
    for (const name of readdirUtf8(path.join(upper, rel), rel)) {
      const st = fs.lstatSync(path.join(upper, rel, name));
      if (!isWhiteout(st)) upperEntries.set(name, st);
    }
    const baseDir = lstatOrNull(path.join(base, rel));
    const baseEntries = baseDir?.isDirectory() ? readdirUtf8(path.join(base, rel), rel) : [];
    // A `.git` the fork made below the top (a `git init` or `git clone`) is a repository, as a scan
    // of a copy fork says: its git dir's internals are not the fork's files. Where the base has files
    // of its own (tracked by the fork's index, so capture treats the directory as ordinary), only
    // that `.git` is reported, as skipped.
    let innerGit = false;
    if (rel !== '' && upperEntries.has('.git')) {
      if (!baseEntries.length) {
        (out.repositories ??= []).push(rel);
        return;
      }
      (out.skipped ??= []).push(`${rel}/.git`);
      innerGit = true;
    }
    const shownList = readdirUtf8(path.join(merged, rel), rel).filter(
      (n) => !((rel === '' || innerGit) && n === '.git'),
    );
    if (rel && !shownList.length) emptyNow.add(rel);
    const shown = new Set(shownList);
    const inBase = new Set(baseEntries);
    // Base entries the mounted view no longer shows: deleted (a whiteout, or an opaque directory).
    for (const name of baseEntries) if (!shown.has(name)) filesUnder(base, join(rel, name), out.deleted);
    for (const name of shownList) {
      const p = join(rel, name);
      const st = upperEntries.get(name);
      if (!st) {
        // Not written by the fork: the base's own entry, unless it came with a renamed directory.
        if (!inBase.has(name) || !sameAsBase(p)) compareSubtree(p);
        continue;
      }
      const baseSt = inBase.has(name) ? lstatOrNull(path.join(base, p)) : null;
      if (st.isDirectory()) {
        if (baseSt && !baseSt.isDirectory()) out.deleted.push(p);
        visit(p);
      } else if (!baseSt) {
        out.added.push(p);
      } else if (baseSt.isDirectory()) {
        filesUnder(base, p, out.deleted);
        out.added.push(p);
      } else if (differs(path.join(upper, p), st, path.join(base, p), baseSt)) {
        out.modified.push(p);
      }
    }
  };
  visit('');
  const wasEmpty = new Set(baseEmptyDirs);
  out.addedEmptyDirs = [...emptyNow].filter((d) => !wasEmpty.has(d));
  for (const d of baseEmptyDirs) {
    const st = lstatOrNull(path.join(merged, d));
    if (!st?.isDirectory() || fs.readdirSync(path.join(merged, d)).length > 0) out.removedEmptyDirs.push(d);
  }
  for (const list of Object.values(out)) list.sort();
  return out;
}

/** A copied-up file may be unchanged (opened for writing, or touched): compare type, exec bit, bytes. */
function differs(a: string, sa: fs.Stats, b: string, sb: fs.Stats): boolean {
  if (sa.isSymbolicLink() || sb.isSymbolicLink()) {
    return !(sa.isSymbolicLink() && sb.isSymbolicLink() && fs.readlinkSync(a) === fs.readlinkSync(b));
  }
  if ((sa.mode & 0o100) !== (sb.mode & 0o100) || sa.size !== sb.size) return true;
  return !sameBytes(a, b, sa.size);
}

function sameBytes(a: string, b: string, size: number): boolean {
  const chunk = 1 << 20;
  const ba = Buffer.allocUnsafe(Math.min(chunk, Math.max(size, 1)));
  const bb = Buffer.allocUnsafe(ba.length);
  const fa = fs.openSync(a, 'r');
  const fb = fs.openSync(b, 'r');
  try {
    for (let off = 0; off < size;) {
      const na = fs.readSync(fa, ba, 0, ba.length, off);
      const nb = fs.readSync(fb, bb, 0, bb.length, off);
      if (na !== nb || na === 0 || !ba.subarray(0, na).equals(bb.subarray(0, nb))) return false;
      off += na;
    }
    return true;
  } finally {
    fs.closeSync(fa);
    fs.closeSync(fb);
  }
}
