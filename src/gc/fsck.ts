// `git xet fsck` for the repository: the sidecar (a cache) against the truth (refs, worktrees,
// mounts), and the snapshots' objects. `--rebuild` reconstructs the sidecar's roots from that truth
// after the database was deleted or corrupted: pins from refs/xet/pins/*, forks from the linked
// worktrees locked as `git xet fork <id>` with their xet-fork.json and, for overlay forks, the
// mounts in /proc/self/mountinfo. A corrupt database is moved aside (xet.db.corrupt-<time>), never
// deleted, and a new one is made.

import { recordedLayer } from '../workspace/layer';
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { git } from '../git/exec';
import { listRefs } from '../git/plumbing';
import { repoOpts, type Repo } from '../git/repo';
import { openSidecar, sidecarDir, sidecarIoError, withExistingSidecar, withSidecar } from '../sidecar/db';
import { listForks } from '../sidecar/forks';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { readSnapshot } from '../snapshot/store';
import { ownerAlive } from '../snapshot/leftovers';
import { REPOSITORY_TARGET } from './journal';
import { readMarkers } from './markers';
import { FORK_MARKER_FILE, readForkMarkers } from './roots';
import { overlayMounts } from './sweep';

export type FsckProblemKind =
  | 'sidecar-unreadable'
  | 'pin-row-without-ref'
  | 'pin-ref-without-row'
  | 'pin-ref-invalid'
  | 'fork-worktree-missing'
  | 'fork-marker-without-row'
  | 'snapshot-objects-missing'
  | 'gc-unfinished';

export interface FsckProblem {
  kind: FsckProblemKind;
  /** The ref, snapshot, fork id or run id it is about. */
  subject: string;
  message: string;
}

export interface RepoFsckResult {
  ok: boolean;
  problems: FsckProblem[];
  /** Counts of what was checked. */
  checked: { snapshots: number; pins: number; forks: number; gcRuns: number };
  /** With --rebuild: what was done. */
  rebuilt: {
    movedAside: string | null;
    pins: number;
    pinRowsRemoved: number;
    forks: number;
    gcRunsInterrupted: number;
  } | null;
}

const DB_FILE = 'xet.db';

/** Whether the database opens and passes SQLite's quick check; the error text when not. */
function sidecarHealth(commonDir: string): string | null {
  const file = path.join(sidecarDir(commonDir), DB_FILE);
  if (!fs.existsSync(file)) return null;
  let db: Database.Database | null = null;
  try {
    db = new Database(file, { fileMustExist: true, timeout: 15000 });
    const rows = db.pragma('quick_check') as { quick_check: string }[];
    const bad = rows.map((r) => r.quick_check).filter((s) => s !== 'ok');
    return bad.length ? bad.slice(0, 3).join('; ') : null;
  } catch (e) {
    // Only a database that is not one, or has corrupt pages, is "unreadable" (and moved aside by
    // --rebuild); a full disk, a permission or I/O error is reported as what it is.
    const code = (e as { code?: string }).code ?? '';
    if (/^SQLITE_(NOTADB|CORRUPT)/.test(code)) return (e as Error).message;
    throw sidecarIoError(e, sidecarDir(commonDir));
  } finally {
    db?.close();
  }
}

/** Move a corrupt database (and its WAL files) aside; returns the new name. */
function moveAside(commonDir: string, now: Date): string {
  const dir = sidecarDir(commonDir);
  const stamp = now.toISOString().replace(/[-:.]/g, '').slice(0, 15);
  const target = path.join(dir, `${DB_FILE}.corrupt-${stamp}`);
  for (const suffix of ['', '-wal', '-shm']) {
    const from = path.join(dir, `${DB_FILE}${suffix}`);
    if (fs.existsSync(from)) fs.renameSync(from, `${target}${suffix}`);
  }
  return target;
}

interface ForkMarkerFile {
  id: string;
  snapshot: string;
  mode: 'overlay' | 'clone' | 'copy';
  createdAt: string;
}

function readMarkerFile(admin: string): ForkMarkerFile | null {
  try {
    const file = path.join(admin, FORK_MARKER_FILE);
    const st = fs.lstatSync(file);
    if (!st.isFile() || st.size > 64 * 1024) return null;
    const m = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<ForkMarkerFile>;
    if (typeof m.id !== 'string' || typeof m.snapshot !== 'string') return null;
    const mode = m.mode === 'overlay' || m.mode === 'clone' || m.mode === 'copy' ? m.mode : 'copy';
    const createdAt = typeof m.createdAt === 'string' ? m.createdAt : new Date().toISOString();
    return { id: m.id, snapshot: m.snapshot, mode, createdAt };
  } catch {
    return null;
  }
}

/** Admin dir of each linked worktree, by id of the fork its lock names. */
function forkAdminDirs(repo: Repo): Map<string, string> {
  const root = path.join(repo.commonDir, 'worktrees');
  const out = new Map<string, string>();
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return out;
  }
  for (const name of names) {
    try {
      const reason = fs.readFileSync(path.join(root, name, 'locked'), 'utf8');
      const m = /^git xet fork ([0-9a-z-]+)\s*$/.exec(reason);
      if (m) out.set(m[1], fs.realpathSync(path.join(root, name)));
    } catch {
      // not a fork's
    }
  }
  return out;
}

/** Snapshot refs whose objects are not all present: one rev-list over all; per ref only if needed. */
async function snapshotsMissingObjects(repo: Repo, oids: string[]): Promise<string[]> {
  if (!oids.length) return [];
  const o = repoOpts(repo);
  const walk = async (list: string[]): Promise<boolean> => {
    try {
      const r = await git(['rev-list', '--objects', '--missing=print', '--stdin'], {
        ...o,
        input: list.map((x) => `${x}\n`).join(''),
      });
      return !/^\?/m.test(r.stdout.toString('utf8'));
    } catch {
      return false; // a missing commit or tree git cannot walk past
    }
  };
  if (await walk(oids)) return [];
  const bad: string[] = [];
  for (const oid of oids) if (!(await walk([oid]))) bad.push(oid);
  return bad;
}

export async function fsckRepository(repo: Repo, opts: { rebuild: boolean; now?: Date }): Promise<RepoFsckResult> {
  const now = opts.now ?? new Date();
  const o = repoOpts(repo);
  const problems: FsckProblem[] = [];
  let rebuilt: RepoFsckResult['rebuilt'] = null;

  const health = sidecarHealth(repo.commonDir);
  if (health !== null) {
    if (!opts.rebuild) {
      problems.push({
        kind: 'sidecar-unreadable',
        subject: path.join(sidecarDir(repo.commonDir), DB_FILE),
        message: `the sidecar database is unreadable (${health}); git xet fsck --rebuild rebuilds it`,
      });
      return { ok: false, problems, checked: { snapshots: 0, pins: 0, forks: 0, gcRuns: 0 }, rebuilt };
    }
  }
  if (opts.rebuild) {
    rebuilt = { movedAside: null, pins: 0, pinRowsRemoved: 0, forks: 0, gcRunsInterrupted: 0 };
    if (health !== null) rebuilt.movedAside = moveAside(repo.commonDir, now);
    await rebuildRoots(repo, rebuilt);
  }

  const pins = await readMarkers('pin', o);
  const pinRows =
    withExistingSidecar(
      repo.commonDir,
      (db) =>
        db.prepare('SELECT snapshot, commit_oid AS commitOid FROM pins').all() as {
          snapshot: string;
          commitOid: string;
        }[],
    ) ?? [];
  const pinRefs = new Map(pins.map((p) => [p.snapshot, p]));
  for (const row of pinRows) {
    const ref = pinRefs.get(row.snapshot);
    if (!ref || ref.commit !== row.commitOid) {
      problems.push({
        kind: 'pin-row-without-ref',
        subject: row.snapshot,
        message: `the sidecar has a pin of ${row.snapshot} that refs/xet/pins/ ${ref ? 'holds differently' : 'does not hold'}`,
      });
    }
  }
  const rowSet = new Set(pinRows.map((r) => `${r.snapshot} ${r.commitOid}`));
  for (const p of pins) {
    if (!p.record) {
      problems.push({ kind: 'pin-ref-invalid', subject: p.ref, message: `${p.ref}: ${p.problem}` });
      continue;
    }
    if (!rowSet.has(`${p.snapshot} ${p.commit}`)) {
      problems.push({ kind: 'pin-ref-without-row', subject: p.ref, message: `${p.ref} is not in the sidecar's pins` });
    }
  }

  const forks = withExistingSidecar(repo.commonDir, (db) => listForks(db, false)) ?? [];
  const rowIds = new Set(forks.map((f) => f.id));
  for (const f of forks) {
    const gone = !fs.existsSync(f.dir) || (f.gitDir !== null && !fs.existsSync(f.gitDir));
    if (gone && f.state !== 'creating') {
      problems.push({
        kind: 'fork-worktree-missing',
        subject: f.id,
        message: `fork ${f.id} (${f.state}) at ${f.dir}: its ${fs.existsSync(f.dir) ? 'worktree admin dir' : 'directory'} is gone; git xet discard ${f.dir} forgets it`,
      });
    }
  }
  const markerProblems: string[] = [];
  for (const m of readForkMarkers(repo, markerProblems)) {
    if (!rowIds.has(m.id)) {
      problems.push({
        kind: 'fork-marker-without-row',
        subject: m.id,
        message: `worktree ${m.dir} is fork ${m.id} of ${m.snapshot.slice(0, 12)} but the sidecar does not know it; git xet fsck --rebuild adds it`,
      });
    }
  }

  const snapRefs = (await listRefs([SNAPSHOT_REF_PREFIX], o)).filter(
    (r) => r.name === `${SNAPSHOT_REF_PREFIX}${r.oid}`,
  );
  for (const oid of await snapshotsMissingObjects(
    repo,
    snapRefs.map((r) => r.oid),
  )) {
    problems.push({
      kind: 'snapshot-objects-missing',
      subject: oid,
      message: `refs/xet/snapshots/${oid} names objects this repository does not have`,
    });
  }

  const runs =
    withExistingSidecar(
      repo.commonDir,
      (db) =>
        db
          .prepare(
            `SELECT id, pid, state, target FROM gc_runs WHERE state IN ('marking', 'planned', 'sweeping', 'reclaiming')`,
          )
          .all() as { id: string; pid: number; state: string; target: string }[],
    ) ?? [];
  const gcRuns =
    withExistingSidecar(
      repo.commonDir,
      (db) => (db.prepare('SELECT count(*) AS n FROM gc_runs').get() as { n: number }).n,
    ) ?? 0;
  for (const r of runs) {
    if (ownerAlive(r.pid)) continue; // running now
    problems.push({
      kind: 'gc-unfinished',
      subject: r.id,
      message: `gc run ${r.id} (${r.target}) stopped while ${r.state}; the next git xet gc marks it interrupted and starts over`,
    });
  }
  return {
    ok: problems.length === 0,
    problems,
    checked: { snapshots: snapRefs.length, pins: pins.length, forks: forks.length, gcRuns },
    rebuilt,
  };
}

/** Rebuild the sidecar's roots from refs, worktrees and mounts (rows already right are left alone). */
async function rebuildRoots(repo: Repo, out: NonNullable<RepoFsckResult['rebuilt']>): Promise<void> {
  const o = repoOpts(repo);
  // Opening makes a fresh database (all migrations) when the old one was moved aside or deleted.
  openSidecar(repo.commonDir).close();
  const pins = (await readMarkers('pin', o)).filter((p) => p.record);
  const admins = forkAdminDirs(repo);
  const mounts = overlayMounts();
  const problems: string[] = [];
  const markers = readForkMarkers(repo, problems);
  // Each fork's HEAD commit and branch as it started: the snapshot's manifest says.
  const heads = new Map<string, { oid: string | null; branch: string | null }>();
  for (const m of markers) {
    if (heads.has(m.snapshot)) continue;
    try {
      const snap = await readSnapshot(m.snapshot, o, true);
      const h = snap.manifest.head;
      heads.set(m.snapshot, { oid: h.oid, branch: h.kind === 'branch' ? h.ref : null });
    } catch {
      heads.set(m.snapshot, { oid: null, branch: null });
    }
  }
  withSidecar(repo.commonDir, (db) =>
    db.transaction(() => {
      const refSet = new Set(pins.map((p) => p.snapshot));
      for (const row of db.prepare('SELECT snapshot FROM pins').all() as { snapshot: string }[]) {
        if (!refSet.has(row.snapshot)) {
          db.prepare('DELETE FROM pins WHERE snapshot = ?').run(row.snapshot);
          out.pinRowsRemoved++;
        }
      }
      const upsert = db.prepare(
        `INSERT INTO pins(snapshot, commit_oid, reason, until, created_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT(snapshot) DO UPDATE SET commit_oid = excluded.commit_oid, reason = excluded.reason,
           until = excluded.until, created_at = excluded.created_at`,
      );
      for (const p of pins) {
        const r = p.record as NonNullable<typeof p.record>;
        const had = db.prepare('SELECT commit_oid AS c FROM pins WHERE snapshot = ?').get(p.snapshot) as
          { c: string } | undefined;
        if (had?.c === p.commit) continue;
        upsert.run(p.snapshot, p.commit, r.reason, r.until, r.createdAt);
        out.pins++;
      }
      const live = new Set(listForks(db, false).map((f) => f.id));
      for (const m of markers) {
        if (live.has(m.id)) continue;
        const admin = admins.get(m.id) ?? null;
        const file = admin ? readMarkerFile(admin) : null;
        const dir = m.dir && fs.existsSync(m.dir) ? fs.realpathSync(m.dir) : m.dir;
        const mount = mounts.find((x) => x.mountPoint === dir);
        const mode = mount ? 'overlay' : (file?.mode ?? 'copy');
        const own = path.join(sidecarDir(repo.commonDir), 'forks', m.id);
        // A fork with a layer (fork --allowance) says so in its layer.json: route, allowance, layers.
        const layer = mode === 'overlay' ? recordedLayer(own) : null;
        const upper = mode === 'overlay' ? (mount?.upper ?? layer?.paths.upper ?? path.join(own, 'upper')) : null;
        const work = mode === 'overlay' ? (layer?.paths.work ?? path.join(own, 'work')) : null;
        const head = heads.get(m.snapshot) ?? { oid: null, branch: null };
        // A discarded row of the same id (history) gives way to the live fork the worktree proves.
        db.prepare(`DELETE FROM forks WHERE id = ? AND state = 'discarded'`).run(m.id);
        try {
          db.prepare(
            `INSERT INTO forks(id, dir, mode, snapshot, head_oid, branch, git_dir, upper, work, state, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?)`,
          ).run(
            m.id,
            dir,
            mode,
            m.snapshot,
            head.oid,
            head.branch,
            admin,
            upper,
            work,
            file?.createdAt ?? new Date().toISOString(),
          );
          if (layer) {
            db.prepare('UPDATE forks SET layer_route = ?, allowance_bytes = ?, allowance_files = ? WHERE id = ?').run(
              layer.route,
              layer.allowance?.bytes ?? null,
              layer.allowance?.files ?? null,
              m.id,
            );
          }
          out.forks++;
        } catch {
          // another live row holds that directory: left for fsck to report
        }
      }
      const dead = (
        db
          .prepare(
            `SELECT id, pid FROM gc_runs WHERE target = ? AND state IN ('marking', 'planned', 'sweeping', 'reclaiming')`,
          )
          .all(REPOSITORY_TARGET) as { id: string; pid: number }[]
      ).filter((r) => !ownerAlive(r.pid));
      for (const r of dead) {
        db.prepare(`UPDATE gc_runs SET state = 'interrupted', finished_at = ? WHERE id = ?`).run(
          new Date().toISOString(),
          r.id,
        );
        out.gcRunsInterrupted++;
      }
    })(),
  );
}
