// Temporary files of git xet processes that were killed (SIGKILL, OOM, power loss) before their
// `finally` ran: capture's pack being written (`objects/pack/tmp_pack_xet_<pid>_…`, its index and
// large-object parts), fetch's imported pack (`tmp_xet_<pid>_…`), scratch directories under
// `.git/xet/tmp/<what>-<pid>-…`, and restore's hidden sibling `.<name>.xet-restore-<pid>-…` (or `.xr-<pid>-…`). Each
// name carries its owner's pid; a later run removes those whose owner is gone, and never one of a
// live process (a pid reused since only delays the cleanup). Until then `countLeftovers` says how
// many there are. A capture's `.keep` (which holds its new pack until its ref exists) carries the
// pid in its text, `git-xet capture <pid>`: a dead capture's is removed, anyone else's never.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';

export interface Leftover {
  path: string;
  pid: number;
}

// The one list of names git xet writers give their temporaries in a repository, each carrying the
// writer's pid (the allowance recount, src/allowance/repo-root.ts, scans the same names).
/** objects/pack: a capture's pack, its index and parts (`tmp_pack_xet_`, `tmp_idx_xet_`), fetch's (`tmp_xet_`). */
export const PACK_TEMP_RE = /^tmp_(?:pack_|idx_)?xet_(\d+)_/;
/** The text of the `.keep` a capture holds its pack with until its ref exists. */
export const CAPTURE_KEEP_PREFIX = 'git-xet capture ';
const KEEP_TEXT_RE = /^git-xet capture (\d+)\n$/;
/** xet/tmp: `<what>-<pid>-<6 random>`, or a reclaim view `reclaim-<pid>-<12-hex fork id>`. */
export const SCRATCH_RE = /^[a-z]+-(\d+)-[A-Za-z0-9]{6,12}$/;
/** xet/bases: a base build, `.build-<pid>-<snapshot12>-<random>` (removed by gc's sweep, not here). */
export const BASE_BUILD_RE = /^\.build-(\d+)-[0-9a-f]{12}-[0-9a-f]+$/;
// `.xr-<pid>-…`: the short name of a restore whose tree would not fit under the long one.
const RESTORE_RE = /^\.(?:.+\.xet-restore|xr)-(\d+)-[0-9a-f]+$/;

export function ownerAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, as someone else's process.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A directory's names; none when it cannot be read. */
function namesIn(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

function deadIn(dir: string, re: RegExp, names = namesIn(dir)): Leftover[] {
  const out: Leftover[] = [];
  for (const name of names) {
    const m = re.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (!ownerAlive(pid)) out.push({ path: path.join(dir, name), pid });
  }
  return out;
}

/** Leftovers of dead capture and fetch processes in a repository. */
export function repoLeftovers(repo: { objectsDir: string; commonDir: string }): Leftover[] {
  const packDir = path.join(repo.objectsDir, 'pack');
  const packNames = namesIn(packDir); // read once for both kinds
  return [
    ...deadIn(packDir, PACK_TEMP_RE, packNames),
    ...deadKeeps(packDir, packNames),
    ...deadIn(path.join(repo.commonDir, 'xet', 'tmp'), SCRATCH_RE),
  ];
}

/** `.keep` files of captures killed before their ref: the pack stays, as any unreferenced pack. */
function deadKeeps(dir: string, names: string[]): Leftover[] {
  const out: Leftover[] = [];
  for (const name of names) {
    if (!name.startsWith('pack-') || !name.endsWith('.keep')) continue;
    const file = path.join(dir, name);
    try {
      const st = fs.lstatSync(file);
      if (!st.isFile() || st.size > 64) continue;
      const m = KEEP_TEXT_RE.exec(fs.readFileSync(file, 'utf8'));
      if (m && !ownerAlive(Number(m[1]))) out.push({ path: file, pid: Number(m[1]) });
    } catch {
      // gone meanwhile, or unreadable: not one to remove
    }
  }
  return out;
}

/** Hidden siblings left in `parent` by dead restores. */
export function restoreLeftovers(parent: string): Leftover[] {
  return deadIn(parent, RESTORE_RE);
}

/** How many leftovers of dead processes a repository holds (for status-like reports). */
export function countLeftovers(repo: { objectsDir: string; commonDir: string }): number {
  return repoLeftovers(repo).length;
}

/** Mount points at or under `p` (from /proc/self/mountinfo), deepest first. */
function mountsUnder(p: string): string[] {
  let info: string;
  try {
    info = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const unescape = (m: string) => m.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const out = info
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((m): m is string => !!m)
    .map(unescape)
    .filter((m) => m === p || m.startsWith(`${p}/`));
  return [...new Set(out)].sort((a, b) => b.length - a.length);
}

/**
 * Remove one dead process's temporary file or directory. A killed reclaim leaves its read-only view
 * mounted: a recursive remove through a mount would delete the fork's own files, so whatever is
 * mounted at or under it is unmounted first (read-only views: nothing to lose), and if anything is
 * still mounted the leftover stays (false) for a later run.
 */
export function removeTemporary(p: string): boolean {
  for (const m of mountsUnder(p)) {
    if (spawnSync('umount', [m], { stdio: 'ignore' }).status !== 0) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  }
  if (mountsUnder(p).length) return false;
  try {
    fs.rmSync(p, { recursive: true, force: true });
    return true;
  } catch {
    return false; // not ours to fix here; reported again next time
  }
}

/** Remove leftovers; returns how many went. One that cannot be removed stays for the next run. */
export function removeLeftovers(list: Leftover[]): number {
  let n = 0;
  for (const l of list) if (removeTemporary(l.path)) n++;
  return n;
}

export function leftoverWarning(n: number): string[] {
  return n ? [`removed ${n} temporary file(s) left by killed git xet processes`] : [];
}
