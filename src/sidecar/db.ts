// The SQLite sidecar: one database in the repository's common git dir (shared by all linked
// worktrees) for what Git has no place for. WAL mode so readers never block the writer; a busy
// timeout so concurrent git xet processes queue instead of failing. Schema changes are numbered
// migrations applied in one transaction each and recorded in PRAGMA user_version.

import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';

export type Db = Database.Database;

/** Ordered migrations; index + 1 is the schema version it produces. Never edit a shipped one. */
const MIGRATIONS: string[] = [
  // 1: snapshots captured here, and the workspaces (worktrees) that captured them
  `CREATE TABLE workspaces (
     id TEXT PRIMARY KEY,          -- stable id of a worktree: hash of its git dir
     worktree TEXT NOT NULL,       -- absolute path of the working tree
     git_dir TEXT NOT NULL,
     last_capture_at TEXT,
     -- totals of the last captured files tree, so the next capture counts only what changed
     last_files_tree TEXT,
     last_files INTEGER,
     last_bytes INTEGER,
     last_symlinks INTEGER
   );
   CREATE TABLE snapshots (
     oid TEXT PRIMARY KEY,
     workspace_id TEXT REFERENCES workspaces(id),
     created_at TEXT NOT NULL,
     message TEXT NOT NULL DEFAULT '',
     files INTEGER NOT NULL,
     bytes INTEGER NOT NULL
   );
   CREATE INDEX snapshots_by_workspace ON snapshots(workspace_id, created_at);`,
  // 2: forks (linked worktrees laid from a snapshot), live or discarded
  `CREATE TABLE forks (
     id TEXT PRIMARY KEY,
     dir TEXT NOT NULL,              -- absolute path of the fork's working tree
     mode TEXT NOT NULL CHECK (mode IN ('overlay', 'clone', 'copy')),
     snapshot TEXT NOT NULL,         -- the snapshot it was laid from (its base)
     head_oid TEXT,                  -- the commit its HEAD started at (NULL: unborn)
     branch TEXT,                    -- the branch the snapshot's HEAD was on, if any
     git_dir TEXT,                   -- the linked worktree's admin dir, once it exists
     upper TEXT,                     -- overlay: upper and work dirs
     work TEXT,
     -- creating -> active -> discarding (its work is kept; removal under way) -> discarded
     state TEXT NOT NULL CHECK (state IN ('creating', 'active', 'discarding', 'discarded')),
     created_at TEXT NOT NULL,
     discarded_at TEXT,
     kept_snapshot TEXT              -- what discard captured before removing it
   );
   CREATE UNIQUE INDEX forks_live_dir ON forks(dir) WHERE state != 'discarded';`,
  // 3: publications (pushes with an id, resolved after a lost reply) and handoff acceptances
  `CREATE TABLE publications (
     id TEXT PRIMARY KEY,            -- the publication id the push carries into the store's state log
     remote TEXT NOT NULL,           -- remote name or URL as given
     url TEXT NOT NULL,
     refspecs TEXT NOT NULL,         -- JSON array
     state TEXT NOT NULL CHECK (state IN ('pending', 'published', 'rejected', 'not-published', 'unknown')),
     created_at TEXT NOT NULL,
     resolved_at TEXT,
     detail TEXT                     -- JSON: per-ref results, the state seq that published it
   );
   CREATE TABLE handoff_acceptances (
     handoff TEXT NOT NULL,
     dir TEXT NOT NULL,
     mode TEXT NOT NULL,             -- restore | overlay | clone | copy
     snapshot TEXT NOT NULL,
     accepted_at TEXT NOT NULL,
     PRIMARY KEY (handoff, dir)
   );`,
  // 4: client-chosen request ids of handoff create (idempotent retries after a lost reply), and the
  // snapshot a restored workspace came from
  `CREATE TABLE handoff_requests (
     request_id TEXT PRIMARY KEY,
     inputs_sha256 TEXT NOT NULL,    -- sha256 of the canonical JSON of the resolved inputs
     created_at TEXT NOT NULL,       -- the descriptor's createdAt, reused by every retry
     handoff TEXT,                   -- its id, once created
     recorded_at TEXT NOT NULL
   );
   -- the snapshot a restored worktree was laid from (git xet status compares with it)
   ALTER TABLE workspaces ADD COLUMN restored_from TEXT;`,
  // 5: durable roots and garbage collection. Pins are refs (refs/xet/pins/*) first; this table is
  // their cache, rebuilt from the refs by fsck --rebuild. gc_runs is the collector's journal (one row
  // per run, its plan and how far it got); gc_deleted_refs what a run deleted, so undrop can bring a
  // snapshot back while its objects are still there.
  `CREATE TABLE pins (
     snapshot TEXT PRIMARY KEY,
     commit_oid TEXT NOT NULL,       -- the pin commit refs/xet/pins/<snapshot> points to
     reason TEXT NOT NULL DEFAULT '',
     until TEXT,                     -- ISO time the pin stops being a root; NULL: until unpinned
     created_at TEXT NOT NULL
   );
   CREATE TABLE gc_runs (
     id TEXT PRIMARY KEY,
     target TEXT NOT NULL,           -- 'repository', or the store's path for gc --store
     pid INTEGER NOT NULL,
     started_at TEXT NOT NULL,
     finished_at TEXT,
     -- marking -> planned -> sweeping -> reclaiming -> done | failed; interrupted: found unfinished
     -- by a later run (its holder died), which re-marks from scratch instead of replaying this plan
     state TEXT NOT NULL CHECK (state IN ('marking', 'planned', 'sweeping', 'reclaiming', 'done', 'failed', 'interrupted')),
     dry_run INTEGER NOT NULL DEFAULT 0,
     grace_seconds INTEGER,          -- NULL: never
     cutoff TEXT,                    -- objects and drops older than this may go
     step TEXT,                      -- the last step completed
     plan TEXT,                      -- JSON: what the run decided
     result TEXT                     -- JSON: what it reclaimed
   );
   CREATE TABLE gc_deleted_refs (
     run_id TEXT NOT NULL,
     ref TEXT NOT NULL,
     oid TEXT NOT NULL,
     deleted_at TEXT NOT NULL,
     PRIMARY KEY (run_id, ref)
   );
   CREATE INDEX gc_deleted_refs_by_oid ON gc_deleted_refs(oid);
   -- reclaim: the fork was captured, verified, pinned and removed (state 'discarded', kept_snapshot set)
   ALTER TABLE forks ADD COLUMN reclaimed_at TEXT;`,
  // 6: tasks (src/tasks/): one row per run with its immutable manifest, its events (envelope v1),
  // its result (inline, or spooled to a private file), and what recovery found. The trigger makes
  // the manifest unchangeable: there is no update path, by construction.
  `CREATE TABLE tasks (
     id TEXT PRIMARY KEY,
     created_at TEXT NOT NULL,
     started_at TEXT,
     ended_at TEXT,
     -- created -> running -> succeeded | failed | cancelled | interrupted (timed out, runner lost)
     status TEXT NOT NULL CHECK (status IN ('created', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
     error_code TEXT,                -- TASK_TIMED_OUT, TASK_CANCELLED, TASK_INTERRUPTED, RESULT_TOO_LARGE, ...
     exit_code INTEGER,              -- the command's exit status (NULL: unknown, or killed by a signal)
     exit_signal TEXT,
     command TEXT NOT NULL,          -- the command's name only, never its arguments (prompts, secrets)
     correlation_id TEXT,
     session_id TEXT,
     continues_task TEXT,
     slot TEXT NOT NULL,             -- the workspace slot: workspaceId(git dir of the worktree)
     worktree TEXT NOT NULL,
     git_dir TEXT NOT NULL,
     mode TEXT NOT NULL CHECK (mode IN ('worktree', 'overlay', 'clone', 'copy')),
     fork_id TEXT,
     base_snapshot TEXT,
     result_snapshot TEXT,
     deadline_at TEXT NOT NULL,
     detached INTEGER NOT NULL DEFAULT 0,
     capture INTEGER NOT NULL DEFAULT 1,
     manifest_json TEXT NOT NULL,
     manifest_sha256 TEXT NOT NULL,
     runner_pid INTEGER,             -- the process holding the lease, and its identity
     runner_start TEXT,
     pid INTEGER,                    -- the command's process (group leader), and its identity
     pid_start TEXT,
     boot_id TEXT,
     mark TEXT NOT NULL,             -- XET_TASK_MARK: finds descendants that left the process group
     result_storage TEXT CHECK (result_storage IN ('inline', 'spool')),
     result_source TEXT CHECK (result_source IN ('stdout', 'file')),
     result_inline BLOB,
     result_size_bytes INTEGER,
     result_sha256 TEXT,
     recovery TEXT CHECK (recovery IN ('REATTACHED', 'SESSION_RESUMABLE', 'NOT_RECOVERABLE', 'UNKNOWN')),
     cancel_requested_at TEXT
   );
   CREATE INDEX tasks_by_status ON tasks(status, ended_at);
   CREATE TRIGGER tasks_manifest_immutable BEFORE UPDATE OF manifest_json, manifest_sha256 ON tasks
   BEGIN SELECT RAISE(ABORT, 'task manifests are immutable'); END;
   CREATE TABLE task_events (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     event_id TEXT NOT NULL UNIQUE,
     task_id TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
     correlation_id TEXT,
     event_type TEXT NOT NULL,
     created_at TEXT NOT NULL,
     payload TEXT NOT NULL           -- canonical JSON, metadata only
   );
   CREATE INDEX task_events_by_task ON task_events(task_id, seq);
   -- commits git xet export made from a task's workspace or result snapshot (provenance)
   CREATE TABLE task_exports (
     task_id TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
     commit_oid TEXT NOT NULL,
     branch TEXT,
     created_at TEXT NOT NULL,
     PRIMARY KEY (task_id, commit_oid)
   );`,
  // 7: the storage allowance's ledger (src/allowance/). Parts are the large, write-once things git
  // xet stored in a root (its packs, overlay bases, a copy fork's files), recorded before they are
  // published so a crash leaves the ledger over, never under; everything else in a root is small and
  // counted from disk at each check. counts holds the last full recount of each root. A fork's own
  // allowance and the route that bounds what its processes write are on its row.
  `CREATE TABLE allowance_parts (
     root TEXT NOT NULL,             -- 'repository' | 'fork:<id>'
     part TEXT NOT NULL,             -- 'pack:<name>' | 'base:<snapshot>' | 'files'
     bytes INTEGER NOT NULL CHECK (bytes >= 0),
     files INTEGER NOT NULL CHECK (files >= 0),
     recorded_at TEXT NOT NULL,
     PRIMARY KEY (root, part)
   );
   CREATE TABLE allowance_counts (
     root TEXT PRIMARY KEY,
     bytes INTEGER NOT NULL,
     files INTEGER NOT NULL,
     counted_at TEXT NOT NULL,
     leftovers_removed INTEGER NOT NULL DEFAULT 0
   );
   ALTER TABLE forks ADD COLUMN allowance_bytes INTEGER;
   ALTER TABLE forks ADD COLUMN allowance_files INTEGER;
   -- what bounds the fork's own processes: 'image' (upper+work on a loop-mounted filesystem of the
   -- allowance's size), 'tmpfs', 'project-quota', or NULL (uncovered)
   ALTER TABLE forks ADD COLUMN layer_route TEXT;`,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

export function sidecarDir(commonDir: string): string {
  return path.join(commonDir, 'xet');
}

export function openSidecar(commonDir: string): Db {
  const dir = sidecarDir(commonDir);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'xet.db');
  let db: Db | null = null;
  try {
    db = new Database(file, { timeout: 15000 });
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    boundWalOnOpen(db);
    migrate(db);
    return db;
  } catch (e) {
    db?.close();
    // A database that is not one (overwritten, truncated, corrupt pages): a typed error that says
    // how to recover, not an internal one.
    const code = (e as { code?: string }).code;
    if (code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT' || code === 'SQLITE_CORRUPT_VTAB') {
      throw new XetError(
        'SIDECAR_UNREADABLE',
        `the sidecar database ${file} is unreadable (${(e as Error).message}); git xet fsck --rebuild rebuilds it from refs and worktrees`,
        { file, sqlite: code },
      );
    }
    throw sidecarIoError(e, dir);
  }
}

/**
 * SQLite reports a full filesystem as SQLITE_FULL, or, when the WAL or the shared memory file
 * cannot grow, as a plain I/O error: either is DISK_FULL when the filesystem has (almost) nothing
 * left, never an internal error and never "corrupt" (a rebuild would throw a healthy ledger away).
 */
export function sidecarIoError(e: unknown, dir: string): unknown {
  const code = (e as { code?: string }).code ?? '';
  if (!/^SQLITE_(FULL|IOERR)/.test(code)) return e;
  let free = Infinity;
  try {
    const st = fs.statfsSync(dir);
    free = st.bavail * st.bsize;
  } catch {
    // gone: say what SQLite said
  }
  if (code === 'SQLITE_FULL' || free < 1 << 20) {
    return new XetError('DISK_FULL', `no space left for the sidecar database in ${dir}; nothing was half written`, {
      dir,
      sqlite: code,
    });
  }
  return e;
}

/** Open the sidecar, run `fn`, close it whatever happens. */
export function withSidecar<T>(commonDir: string, fn: (db: Db) => T): T {
  const db = openSidecar(commonDir);
  try {
    return fn(db);
  } catch (e) {
    throw sidecarIoError(e, sidecarDir(commonDir));
  } finally {
    try {
      truncateWalAfterWrite(db, commonDir);
    } finally {
      db.close();
    }
  }
}

/** Like withSidecar, but only if the database exists (readers must not create one). */
export function withExistingSidecar<T>(commonDir: string, fn: (db: Db) => T): T | null {
  if (!fs.existsSync(path.join(sidecarDir(commonDir), 'xet.db'))) return null;
  return withSidecar(commonDir, fn);
}

// ---------------------------------------------------------------------------------------------
// Bounding the WAL (the sidecar's part of the repository root's allowance)
//
// SQLite's WAL only shrinks when it is reset, and it can only be reset when no reader still needs
// its frames: under a long reader it grows by everything committed meanwhile, without limit, and
// afterwards keeps its largest size on disk until the last connection closes (a task runner keeps
// one open for the task's lifetime). Three bounds:
// - wal_autocheckpoint 1000 pages (SQLite's default, set so no build option changes it): a commit
//   that leaves the WAL over 1000 pages (4 MiB at the 4 KiB page size) copies it back into xet.db.
// - journal_size_limit 4 MiB: when the WAL is reset after such a checkpoint, the file is cut back to
//   4 MiB instead of staying at its high-water mark; the same figure as the autocheckpoint, so in
//   steady state the WAL never holds more than about two checkpoints' worth (≤ 8 MiB).
// - a writer that finds the WAL over 16 MiB as it closes (four times the steady-state size: only a
//   long reader gets it there) runs wal_checkpoint(TRUNCATE), which copies every frame back and
//   truncates the file to 0. It does not wait (busy_timeout 0 for that one call): under a reader
//   that still needs frames it cannot finish, returns at once, and the next writer tries again.
// No git xet command holds a read transaction on xet.db across a long operation: every use is
// withSidecar (open, statements, close), better-sqlite3 transactions are synchronous (they cannot
// span an await), nothing iterates a cursor across an await, and the long-held locks (objects lock,
// slot leases, hooks lock) are transactions on their own small databases in rollback-journal mode.
// A long reader is therefore someone else's (a user's sqlite3 shell, a backup): the WAL grows while
// it reads (test/sidecar-wal.test.ts: 1000 small commits took it to 33 MiB; the bound under a
// reader is what is committed meanwhile) and is truncated by the first git xet write after it ends.
// Without a reader it stays ≤ 4 MiB plus one transaction (measured: 4.0 MiB).

/** Checkpoint every commit past this many pages (4 MiB at SQLite's 4 KiB default page). */
export const WAL_AUTOCHECKPOINT_PAGES = 1000;
/** The size a reset WAL is cut back to. */
export const WAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024;
/** A writer finding the WAL larger than this truncates it. */
export const WAL_TRUNCATE_ABOVE_BYTES = 16 * 1024 * 1024;

function boundWalOnOpen(db: Db): void {
  db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
  db.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
}

/** If this connection wrote and the WAL is over the threshold, checkpoint and truncate it without
 * waiting. Returns whether the WAL was truncated. A failure here loses nothing: the rows are
 * committed; the WAL is merely left for the next writer. */
export function truncateWalAfterWrite(db: Db, commonDir: string): boolean {
  if (!db.open || db.inTransaction) return false;
  let size: number;
  try {
    size = fs.statSync(path.join(sidecarDir(commonDir), 'xet.db-wal')).size;
  } catch {
    return false;
  }
  if (size <= WAL_TRUNCATE_ABOVE_BYTES) return false;
  try {
    // Only a writer does it: a read-only command must leave every file as it found it.
    const wrote = (db.prepare('SELECT total_changes() AS n').get() as { n: number }).n > 0;
    if (!wrote) return false;
    const timeout = db.pragma('busy_timeout', { simple: true }) as number;
    db.pragma('busy_timeout = 0');
    try {
      const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number }[];
      return r?.busy === 0;
    } finally {
      db.pragma(`busy_timeout = ${timeout}`);
    }
  } catch {
    return false;
  }
}

function migrate(db: Db): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > SCHEMA_VERSION) {
    throw new XetError(
      'SCHEMA_UNSUPPORTED',
      `the sidecar database has schema ${current}, newer than this git xet understands (${SCHEMA_VERSION})`,
      { found: current, supported: SCHEMA_VERSION },
    );
  }
  if (current === SCHEMA_VERSION) return;
  // IMMEDIATE takes the write lock first, so two processes migrating at once serialise and the
  // second sees the first's user_version instead of applying a migration twice.
  const apply = db.transaction(() => {
    const now = db.pragma('user_version', { simple: true }) as number;
    for (let v = now; v < SCHEMA_VERSION; v++) {
      db.exec(MIGRATIONS[v]);
      db.pragma(`user_version = ${v + 1}`);
    }
  });
  apply.immediate();
}
