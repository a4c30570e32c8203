// What `git xet gc` removes under `.git/xet/` besides refs: bases no live fork uses, half-built
// bases, stat caches of worktrees that are gone, and temporary files of dead processes. Each finder
// is read-only (the dry run lists its result); each remover re-checks what it can under the lock
// that guards the thing, and moves a directory aside before deleting it, so that a half-removed
// base is never mistaken for a complete one.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitText } from '../git/exec';
import { repoOpts, type Repo } from '../git/repo';
import { sidecarDir, withExistingSidecar } from '../sidecar/db';
import { acquireLock } from '../sidecar/lock';
import { workspaceId } from '../sidecar/workspaces';
import { ownerAlive, repoLeftovers } from '../snapshot/leftovers';
import { isXetError } from '../errors';

const OID_RE = /^[0-9a-f]{40}([0-9a-f]{24})?$/;
const TRASH_PREFIX = '.trash-';
// git's own temporary packs (`.tmp-<pid>-pack-…`, written by pack-objects under repack) of a
// repack that died or failed (a full disk): they are never part of the repository.
const GIT_TMP_PACK_RE = /^\.tmp-(\d+)-pack/;

function basesRoot(repo: Repo): string {
  return path.join(sidecarDir(repo.commonDir), 'bases');
}

function readdir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

/** bases/<oid>/ that no live fork uses, and leftovers of builds and removals (`.build-*`, `.trash-*`). */
export function unusedBases(repo: Repo, live: Set<string>): { bases: string[]; leftovers: string[] } {
  const root = basesRoot(repo);
  const mountedLowers = overlayLowerDirs();
  const bases: string[] = [];
  const leftovers: string[] = [];
  for (const name of readdir(root)) {
    if (name.startsWith('.build-') || name.startsWith(TRASH_PREFIX)) {
      leftovers.push(path.join(root, name));
      continue;
    }
    if (!OID_RE.test(name) || live.has(name)) continue;
    // An overlay mounted on it (a fork the sidecar lost) keeps it whatever the rows say.
    if (mountedLowers.some((l) => l === path.join(root, name, 'tree'))) continue;
    bases.push(name);
  }
  return { bases, leftovers };
}

/**
 * Remove one base: under its build lock (as ensureBase takes it), re-check that no live fork row
 * names it, rename it to a trash name (a base that exists is complete, by contract), then delete.
 * Returns false when it was kept (a fork appeared, or the lock is held).
 */
export function removeBase(repo: Repo, oid: string): boolean {
  const root = basesRoot(repo);
  const lockFile = path.join(sidecarDir(repo.commonDir), 'locks', `base-${oid}.lockdb`);
  let lock;
  try {
    lock = acquireLock(lockFile, 'materialising this base', 0);
  } catch (e) {
    if (isXetError(e, 'BUSY')) return false;
    throw e;
  }
  try {
    const used = withExistingSidecar(repo.commonDir, (db) =>
      db.prepare(`SELECT 1 FROM forks WHERE snapshot = ? AND mode != 'copy' AND state != 'discarded' LIMIT 1`).get(oid),
    );
    if (used) return false;
    const dir = path.join(root, oid);
    if (!fs.existsSync(dir)) return false;
    const trash = path.join(root, `${TRASH_PREFIX}${oid.slice(0, 12)}-${crypto.randomBytes(4).toString('hex')}`);
    fs.renameSync(dir, trash);
    fs.rmSync(trash, { recursive: true, force: true });
  } finally {
    lock.release();
  }
  // The base is gone and nothing builds it (no fork runs while gc holds the objects lock).
  fs.rmSync(lockFile, { force: true });
  return true;
}

export function removePaths(paths: string[]): number {
  let n = 0;
  for (const p of paths) {
    try {
      fs.rmSync(p, { recursive: true, force: true });
      n++;
    } catch {
      // reported again by the next run
    }
  }
  return n;
}

/** Lower dirs of the overlay mounts this process can see (from /proc/self/mountinfo). */
export function overlayLowerDirs(): string[] {
  return overlayMounts().flatMap((m) => m.lower);
}

export interface OverlayMount {
  mountPoint: string;
  lower: string[];
  upper: string | null;
}

export function overlayMounts(): OverlayMount[] {
  let text: string;
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const out: OverlayMount[] = [];
  for (const line of text.split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!post) continue;
    const fields = post.split(' ');
    if (fields[0] !== 'overlay') continue;
    const mountPoint = unescapeMount(pre.split(' ')[4] ?? '');
    const opts = fields.slice(2).join(' ').split(',');
    const opt = (k: string) => opts.find((o) => o.startsWith(`${k}=`))?.slice(k.length + 1) ?? null;
    const lower = (opt('lowerdir') ?? '').split(':').filter(Boolean).map(unescapeMount);
    const upper = opt('upperdir');
    out.push({ mountPoint, lower, upper: upper ? unescapeMount(upper) : null });
  }
  return out;
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** The worktrees that exist now: each one's admin (git) dir, as findRepo and fork record them. */
function liveWorkspaceIds(repo: Repo): Set<string> {
  const ids = new Set<string>();
  const add = (gitDir: string) => {
    ids.add(workspaceId(gitDir));
    try {
      ids.add(workspaceId(fs.realpathSync(gitDir)));
    } catch {
      // gone
    }
  };
  add(repo.commonDir);
  add(repo.gitDir);
  const root = path.join(repo.commonDir, 'worktrees');
  for (const name of readdir(root)) {
    const admin = path.join(root, name);
    let target: string;
    try {
      target = fs.readFileSync(path.join(admin, 'gitdir'), 'utf8').trim();
    } catch {
      continue;
    }
    // `gitdir` names the worktree's .git file; an unmounted overlay fork has only its mount point,
    // a locked worktree is kept whatever (git worktree prune would not remove it either).
    const wt = path.dirname(path.resolve(admin, target));
    if (fs.existsSync(wt) || fs.existsSync(path.join(admin, 'locked'))) add(admin);
  }
  return ids;
}

/** Stat caches (`cache/<workspace>.index*`) of worktrees that no longer exist. */
export function staleCaches(repo: Repo): string[] {
  const dir = path.join(sidecarDir(repo.commonDir), 'cache');
  const live = liveWorkspaceIds(repo);
  // A workspace row whose git dir still exists is live too (a worktree of another layout).
  withExistingSidecar(repo.commonDir, (db) => {
    for (const r of db.prepare('SELECT id, git_dir AS gitDir FROM workspaces').all() as {
      id: string;
      gitDir: string;
    }[]) {
      if (fs.existsSync(r.gitDir) && fs.existsSync(path.join(r.gitDir, 'HEAD'))) live.add(r.id);
    }
  });
  const out: string[] = [];
  for (const name of readdir(dir)) {
    const m = /^([0-9a-f]{16})\.index/.exec(name);
    if (m && !live.has(m[1])) out.push(path.join(dir, name));
  }
  return out;
}

/** Capture lock files of the workspaces whose caches go (nothing can capture a worktree that is gone). */
export function captureLocksOf(repo: Repo, caches: string[]): string[] {
  const locks = path.join(sidecarDir(repo.commonDir), 'locks');
  const ids = new Set(caches.map((c) => /([0-9a-f]{16})\.index/.exec(path.basename(c))?.[1]).filter(Boolean));
  return [...ids].map((id) => path.join(locks, `capture-${id}.lockdb`)).filter((f) => fs.existsSync(f));
}

/** Temporary files of dead processes: capture and fetch packs, xet/tmp scratch dirs, git's own
 * temporary packs of a repack that died. */
export function deadSpools(repo: Repo): string[] {
  const out = repoLeftovers(repo).map((l) => l.path);
  const packDir = path.join(repo.objectsDir, 'pack');
  for (const name of readdir(packDir)) {
    const m = GIT_TMP_PACK_RE.exec(name);
    if (m && !ownerAlive(Number(m[1]))) out.push(path.join(packDir, name));
  }
  return out;
}

/**
 * Stat caches of live worktrees that could name reclaimed objects: a capture trusts its cache and
 * reuses a blob id without the blob, so a cache whose files tree is no longer the files tree of a
 * snapshot that stays (its last snapshot was dropped, or the sidecar that said which tree it holds
 * was lost) must go before Git reclaims. The next capture there hashes every file again.
 */
export async function unsafeCaches(repo: Repo, remaining: Iterable<string>, already: Set<string>): Promise<string[]> {
  const dir = path.join(sidecarDir(repo.commonDir), 'cache');
  const byWs = new Map<string, string[]>();
  for (const name of readdir(dir)) {
    const m = /^([0-9a-f]{16})\.index/.exec(name);
    const p = path.join(dir, name);
    if (!m || already.has(p)) continue;
    byWs.set(m[1], [...(byWs.get(m[1]) ?? []), p]);
  }
  if (!byWs.size) return [];
  const trees = new Map<string, string | null>();
  withExistingSidecar(repo.commonDir, (db) => {
    const q = db.prepare('SELECT last_files_tree AS tree FROM workspaces WHERE id = ?');
    for (const ws of byWs.keys()) trees.set(ws, (q.get(ws) as { tree: string | null } | undefined)?.tree ?? null);
  });
  const snaps = [...new Set(remaining)];
  const keep = new Set<string>();
  if (snaps.length) {
    const text = await gitText(['cat-file', '--batch-check=%(objectname)'], {
      ...repoOpts(repo),
      input: snaps.map((s) => `${s}:files\n`).join(''),
    });
    for (const line of text.split('\n')) if (/^[0-9a-f]{40,64}$/.test(line)) keep.add(line);
  }
  const out: string[] = [];
  for (const [ws, files] of byWs) {
    const tree = trees.get(ws) ?? null;
    if (!tree || !keep.has(tree)) out.push(...files);
  }
  return out;
}

/** Forget the last files tree of the workspaces whose caches went (capture must not use it as a base). */
export function forgetCacheTrees(repo: Repo, caches: string[]): void {
  const ids = [...new Set(caches.map((c) => /([0-9a-f]{16})\.index/.exec(path.basename(c))?.[1]).filter(Boolean))];
  if (!ids.length) return;
  withExistingSidecar(repo.commonDir, (db) => {
    const q = db.prepare('UPDATE workspaces SET last_files_tree = NULL WHERE id = ?');
    db.transaction(() => ids.forEach((id) => q.run(id)))();
  });
}
