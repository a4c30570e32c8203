// Measuring the repository root: what git xet itself keeps in a repository. That is the sidecar
// directory `<common>/xet/` (the database with its WAL and shm, capture cache indexes, overlay
// bases, task directories and result spools, locks, temporary scratch directories) and the packs git
// xet wrote into `objects/pack/` (captures, fetches), with their temporary files while they are being
// written. Forks under `xet/forks/` are roots of their own (fork-root.ts).
//
// A check must be cheap on a big repository, so the large write-once parts (packs by name, bases by
// their recorded size) come from the ledger and only the small rest is read from disk each time.
// Temporary files are listed before the ledger is read: a concurrent writer records its pack before
// renaming it into place, so its bytes are always seen (as a temporary file, a recorded pack, or
// both), never neither. A recount walks everything, forgets parts that are gone and removes the
// temporary files of dead processes.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Repo } from '../git/repo';
import { sidecarDir, withExistingSidecar, withSidecar, type Db } from '../sidecar/db';
import { BASE_BUILD_RE, ownerAlive, PACK_TEMP_RE, removeTemporary, SCRATCH_RE } from '../snapshot/leftovers';
import { forgetPart, partsOf, recordCount, recordPart, REPOSITORY_ROOT } from './ledger';
import type { Amount } from './model';

// The temporaries' names (PACK_TEMP_RE, SCRATCH_RE, BASE_BUILD_RE) are leftovers.ts's one list.
// Every name under xet/tmp is counted; the names decide only which a recount may remove (those of
// dead owners).
const PACK_SUFFIXES = ['.pack', '.idx', '.rev', '.bitmap', '.keep', '.promisor', '.mtimes'];

export interface TemporaryFile {
  path: string;
  pid: number;
  live: boolean;
  bytes: number;
  files: number;
}

export interface RepositoryUsage {
  root: typeof REPOSITORY_ROOT;
  path: string;
  used: Amount;
  /** Where the bytes are: packs, bases, sidecar (xet.db + WAL + shm), tasks, caches, other, temporary. */
  breakdown: Record<'packs' | 'bases' | 'sidecar' | 'tasks' | 'caches' | 'other' | 'temporary', Amount>;
  temporary: TemporaryFile[];
}

const zero = (): Amount => ({ bytes: 0, files: 0 });
const add = (a: Amount, b: Amount): void => {
  a.bytes += b.bytes;
  a.files += b.files;
};

/** Logical size of a tree: st_size of every non-directory entry, and their count. Entries that vanish
 * while it is walked are skipped (a concurrent writer removed its temporary file). With `seen`, an
 * inode with several links is counted once (`dev:ino`): a hard-linked copy takes no more space. */
export function treeAmount(
  dir: string,
  skip?: (name: string, depth: number) => boolean,
  depth = 0,
  seen?: Set<string>,
): Amount {
  const total = zero();
  let names: fs.Dirent[];
  try {
    names = fs.readdirSync(dir, { withFileTypes: true });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return total;
    if (code === 'ENOTDIR') return fileAmount(dir, seen);
    throw e;
  }
  for (const d of names) {
    if (skip?.(d.name, depth)) continue;
    const p = path.join(dir, d.name);
    if (d.isDirectory()) add(total, treeAmount(p, skip, depth + 1, seen));
    else add(total, fileAmount(p, seen));
  }
  return total;
}

function fileAmount(p: string, seen?: Set<string>): Amount {
  try {
    const st = fs.lstatSync(p);
    if (st.isDirectory()) return treeAmount(p, undefined, 0, seen);
    if (seen && st.nlink > 1) {
      const key = `${st.dev}:${st.ino}`;
      if (seen.has(key)) return zero();
      seen.add(key);
    }
    return { bytes: st.size, files: 1 };
  } catch {
    return zero();
  }
}

function packName(part: string): string | null {
  return part.startsWith('pack:') ? part.slice('pack:'.length) : null;
}

/** The temporary files of git xet writers in this repository, live or dead; `exclude`d paths (a
 * writer's own scratch already inside what it is admitting) are left out and not measured. */
export function repositoryTemporaries(
  repo: Pick<Repo, 'objectsDir' | 'commonDir'>,
  seen?: Set<string>,
  exclude: readonly string[] = [],
): TemporaryFile[] {
  const out: TemporaryFile[] = [];
  const scan = (dir: string, re: RegExp) => {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return;
    }
    const dev = devOf(dir);
    for (const name of names) {
      const m = re.exec(name);
      if (!m) continue;
      const pid = Number(m[1]);
      const p = path.join(dir, name);
      if (exclude.includes(p)) continue;
      // A mounted directory (a reclaim view) holds a fork's files: the fork's root, not this one.
      const a = devOf(p) !== dev ? zero() : fileAmount(p, seen);
      out.push({ path: p, pid, live: ownerAlive(pid), ...a });
    }
  };
  scan(path.join(repo.objectsDir, 'pack'), PACK_TEMP_RE);
  const xet = sidecarDir(repo.commonDir);
  scan(path.join(xet, 'tmp'), SCRATCH_RE);
  scan(path.join(xet, 'bases'), BASE_BUILD_RE);
  return out;
}

function devOf(p: string): number | undefined {
  return fs.lstatSync(p, { throwIfNoEntry: false })?.dev;
}

/** Names under xet/tmp that are no writer's scratch (an older git xet's, a probe file): counted,
 * never removed by a recount. */
function otherTmpAmount(xet: string, seen: Set<string>, exclude: readonly string[]): Amount {
  const tmp = path.join(xet, 'tmp');
  const dev = devOf(tmp);
  const total = zero();
  for (const name of safeReaddir(tmp)) {
    const p = path.join(tmp, name);
    if (SCRATCH_RE.test(name) || exclude.includes(p) || devOf(p) !== dev) continue;
    add(total, fileAmount(p, seen));
  }
  return total;
}

function packFilesAmount(packDir: string, name: string): Amount {
  const total = zero();
  for (const s of PACK_SUFFIXES) {
    try {
      const st = fs.statSync(path.join(packDir, `${name}${s}`));
      add(total, { bytes: st.size, files: 1 });
    } catch {
      // absent: a suffix git never wrote, or the pack was merged away by a user's git gc
    }
  }
  return total;
}

/**
 * The repository root's usage. Without `recount`: ledger parts plus the small rest from disk (cheap).
 * With it: every base walked again and recorded, packs that are gone forgotten, and the total
 * recorded as the root's last count. Temporary files of dead processes are counted either way;
 * removing them is recountRepository's job.
 */
export function measureRepository(
  repo: Repo,
  db: Db | null,
  recount = false,
  opts: MeasureOptions = {},
): RepositoryUsage {
  // No sidecar yet (a repository git xet never wrote a pack into): no ledger parts, nothing created.
  if (recount && !db) throw new Error('a recount needs the sidecar');
  const ledger = db as Db;
  const xet = sidecarDir(repo.commonDir);
  const packDir = path.join(repo.objectsDir, 'pack');
  const seen = new Set<string>();
  const exclude = opts.exclude ?? [];
  // Temporary files first (see the top of this file for why the order matters).
  const temporary = repositoryTemporaries(repo, seen, exclude);
  const breakdown: RepositoryUsage['breakdown'] = {
    packs: zero(),
    bases: zero(),
    sidecar: zero(),
    tasks: zero(),
    caches: zero(),
    other: zero(),
    temporary: zero(),
  };
  for (const t of temporary) add(breakdown.temporary, t);
  add(breakdown.temporary, otherTmpAmount(xet, seen, exclude));
  const parts = db ? partsOf(db, REPOSITORY_ROOT) : [];
  const recordedBases = new Map<string, Amount>();
  for (const p of parts) {
    const pack = packName(p.part);
    if (pack) {
      const a = packFilesAmount(packDir, pack);
      if (a.files === 0 && recount) forgetPart(ledger, REPOSITORY_ROOT, p.part);
      add(breakdown.packs, a);
    } else if (p.part.startsWith('folded:')) {
      // What of git's pack git xet's gc made is git xet's (src/gc/fold.ts): counted while that pack
      // exists; `folded:pending` (a gc between its record and its repack) always.
      const name = p.part.slice('folded:'.length);
      const there = name === 'pending' || fs.existsSync(path.join(packDir, `${name}.pack`));
      if (there) add(breakdown.packs, { bytes: p.bytes, files: p.files });
      else if (recount) forgetPart(ledger, REPOSITORY_ROOT, p.part);
    } else if (p.part.startsWith('base:')) {
      recordedBases.set(p.part.slice('base:'.length), p);
    }
  }
  // Bases: the ledger's figure for each base that exists; a base without one (built by an older git
  // xet, or its record failed) and every base on a recount is walked and recorded.
  const basesDir = path.join(xet, 'bases');
  let baseNames: string[] = [];
  try {
    baseNames = fs.readdirSync(basesDir).filter((n) => !n.startsWith('.'));
  } catch {
    // no bases
  }
  // Only a recount writes the ledger: a check is a read (`git xet allowance` adds nothing).
  for (const name of baseNames) {
    let a = recount ? undefined : recordedBases.get(name);
    if (!a) {
      a = treeAmount(path.join(basesDir, name));
      if (recount) recordPart(ledger, REPOSITORY_ROOT, `base:${name}`, a);
    }
    add(breakdown.bases, a);
    recordedBases.delete(name);
  }
  if (recount) for (const gone of recordedBases.keys()) forgetPart(ledger, REPOSITORY_ROOT, `base:${gone}`);
  // The rest of xet/: small files, read from disk. Forks are their own roots; tmp/ and bases/ are
  // counted above.
  for (const d of safeReaddir(xet)) {
    const p = path.join(xet, d);
    if (d === 'bases' || d === 'forks' || d === 'tmp') continue;
    if (SIDECAR_TRANSIENT.includes(d) && opts.sidecarBeforeOpen) continue;
    const a = treeAmount(p, undefined, 0, seen);
    if (d === 'xet.db' || SIDECAR_TRANSIENT.includes(d)) add(breakdown.sidecar, a);
    else if (d === 'tasks') add(breakdown.tasks, a);
    else if (d === 'cache') add(breakdown.caches, a);
    else add(breakdown.other, a);
  }
  if (opts.sidecarBeforeOpen) add(breakdown.sidecar, opts.sidecarBeforeOpen);
  const used = zero();
  for (const a of Object.values(breakdown)) add(used, a);
  if (recount) recordCount(ledger, REPOSITORY_ROOT, used, 0);
  return { root: REPOSITORY_ROOT, path: repo.commonDir, used, breakdown, temporary };
}

/** The sidecar's WAL, shm and rollback journal: SQLite makes them when a connection opens and removes
 * them when the last one closes. */
const SIDECAR_TRANSIENT = ['xet.db-wal', 'xet.db-shm', 'xet.db-journal'];

export interface MeasureOptions {
  /** sidecarTransients() taken before the measuring connection opened: what is there at rest (or
   * what other connections hold), not the measuring connection's own shm and WAL. */
  sidecarBeforeOpen?: Amount;
  /** The measuring writer's own scratch whose content is already inside the amount it is admitting
   * (a capture's stat cache copy): not charged twice. */
  exclude?: readonly string[];
}

/** The sidecar's WAL, shm and journal as they are now: call it before opening the measuring
 * connection (its own shm is 32 KiB and its WAL exists only because it opened). */
export function sidecarTransients(commonDir: string): Amount {
  const total = zero();
  for (const n of SIDECAR_TRANSIENT) add(total, fileAmount(path.join(sidecarDir(commonDir), n)));
  return total;
}

/** The repository root's usage on the cheap path, as it is at rest: the sidecar's transient files are
 * statted before the measuring connection opens them; no sidecar is made. */
export function measureRepositoryAtRest(repo: Repo, opts: MeasureOptions = {}): RepositoryUsage {
  const sidecarBeforeOpen = sidecarTransients(repo.commonDir);
  const o = { ...opts, sidecarBeforeOpen };
  return (
    withExistingSidecar(repo.commonDir, (db) => measureRepository(repo, db, false, o)) ??
    measureRepository(repo, null, false, o)
  );
}

function safeReaddir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

/** Remove the temporary files of dead writers, then recount. Returns the usage and how many went. */
export function recountRepository(repo: Repo): RepositoryUsage & { leftoversRemoved: number } {
  let removed = 0;
  for (const t of repositoryTemporaries(repo)) {
    if (t.live) continue;
    // Left for the next recount (still counted) when it cannot go, or is still mounted.
    if (removeTemporary(t.path)) removed++;
  }
  const sidecarBeforeOpen = sidecarTransients(repo.commonDir);
  return withSidecar(repo.commonDir, (db) => {
    const usage = measureRepository(repo, db, true, { sidecarBeforeOpen });
    recordCount(db, REPOSITORY_ROOT, usage.used, removed);
    return { ...usage, leftoversRemoved: removed };
  });
}

/** Record a pack git xet is about to publish in `objects/pack` (call before its .idx is renamed). */
export function recordRepositoryPack(db: Db, packName: string, amount: Amount): void {
  recordPart(db, REPOSITORY_ROOT, `pack:${packName}`, amount);
}
