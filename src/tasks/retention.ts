// Collection of terminal tasks after xet.task.retention (default 168 h): the row, its events and
// exports, its private directory (spool included) and with the row its result snapshot's root.
// Never a task that has not ended. OWNER: task-store helper.
//
// It runs at the start of every task command, so the common case (nothing due) is one query on the
// tasks_by_status index; config is read only when a terminal task exists at all.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitConfig } from '../git/config';
import { gitSync } from '../git/exec';
import type { Repo } from '../git/repo';
import { parseDuration } from '../gc/duration';
import { withExistingSidecar, type Db } from '../sidecar/db';
import { isTaskId } from './ids';
import { DEFAULT_RETENTION_MS, TERMINAL_STATUSES } from './model';
import { taskDir } from './paths';

export interface CollectResult {
  collected: string[];
}

/** xet.task.retention as milliseconds (default 168 h); null: `never`. CONFIG_INVALID if bad. */
export function retentionMsFromConfig(value: string | undefined): number | null {
  if (value === undefined) return DEFAULT_RETENTION_MS;
  const s = parseDuration(value, 'xet.task.retention duration', 'CONFIG_INVALID');
  return s === Infinity ? null : s * 1000;
}

// Asking git costs a process (15-20 ms on a loaded machine) on every task command. Most users never
// set xet.task.retention, and that is cheap to rule out: no config file git reads mentions
// "retention" or includes another, and no GIT_CONFIG_* variable adds or moves one. Any doubt asks git.
const SYSTEM_CONFIGS = ['/etc/gitconfig', '/usr/local/etc/gitconfig'];
function configMayName(repo: Repo): boolean {
  if (Object.keys(process.env).some((k) => k.startsWith('GIT_CONFIG') && k !== 'GIT_CONFIG_NOSYSTEM')) return true;
  const home = process.env.HOME ?? '';
  const xdg = process.env.XDG_CONFIG_HOME || (home && path.join(home, '.config'));
  const files = [
    ...SYSTEM_CONFIGS,
    ...(xdg ? [path.join(xdg, 'git', 'config')] : []),
    ...(home ? [path.join(home, '.gitconfig')] : []),
    path.join(repo.commonDir, 'config'),
    path.join(repo.gitDir, 'config.worktree'),
  ];
  for (const f of files) {
    let text: string;
    try {
      const st = fs.statSync(f);
      if (!st.isFile() || st.size > 1 << 20) return true;
      text = fs.readFileSync(f, 'latin1');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') continue;
      return true;
    }
    if (/retention|include/i.test(text)) return true;
  }
  return false;
}

/** The retention in force now (not the one a task's manifest froze: shortening it frees space). */
function currentRetentionMs(repo: Repo, config?: GitConfig): number | null {
  if (config) return retentionMsFromConfig(config.get('xet.task.retention'));
  if (!configMayName(repo)) return DEFAULT_RETENTION_MS;
  const r = gitSync(
    ['--git-dir', repo.gitDir, '--work-tree', repo.worktree, 'config', '--get', 'xet.task.retention'],
    repo.worktree,
  );
  if (r.code === 1) return DEFAULT_RETENTION_MS;
  if (r.code !== 0) {
    throw new XetError('GIT_FAILED', `git config --get xet.task.retention failed: ${r.stderr.trim()}`, {
      exitCode: r.code,
      stderr: r.stderr.slice(0, 4000),
    });
  }
  return retentionMsFromConfig(r.stdout.replace(/\n$/, ''));
}

const TERMINAL_IN = `status IN (${TERMINAL_STATUSES.map((s) => `'${s}'`).join(', ')})`;

// One MIN per terminal status: each is a single step down the (status, ended_at) index.
const OLDEST_ENDED = `SELECT MIN(t) AS t FROM (${TERMINAL_STATUSES.map(
  (s) => `SELECT MIN(ended_at) AS t FROM tasks WHERE status = '${s}'`,
).join(' UNION ALL ')})`;

/** Run at the start of task commands, at submission, at terminal completion, and by git xet gc. */
export function collectTasks(
  repo: Repo,
  opts: { now?: Date; dryRun?: boolean; config?: GitConfig } = {},
): CollectResult {
  const found = withExistingSidecar(repo.commonDir, (db) => {
    const oldest = db.prepare(OLDEST_ENDED).get() as { t: string | null };
    if (oldest.t === null) return [];
    const retention = currentRetentionMs(repo, opts.config);
    if (retention === null) return [];
    const cutoff = new Date((opts.now ?? new Date()).getTime() - retention).toISOString();
    if (oldest.t >= cutoff) return [];
    const due = (
      db.prepare(`SELECT id FROM tasks WHERE ${TERMINAL_IN} AND ended_at < ? ORDER BY ended_at`).all(cutoff) as {
        id: string;
      }[]
    ).map((r) => r.id);
    if (opts.dryRun) return due;
    // The directories first, then the rows: a collection cut short leaves rows that the next one
    // finishes, never a spool file no row leads to. Only a well-formed id becomes a path.
    for (const id of due) if (isTaskId(id)) fs.rmSync(taskDir(repo.commonDir, id), { recursive: true, force: true });
    // One transaction for the rows; events and exports go with them (ON DELETE CASCADE). The
    // condition is checked again: a row is deleted only if it is still terminal and due.
    const remove = db.prepare(`DELETE FROM tasks WHERE id = ? AND ${TERMINAL_IN} AND ended_at < ?`);
    const collected: string[] = [];
    db.transaction(() => {
      for (const id of due) if (remove.run(id, cutoff).changes === 1) collected.push(id);
    }).immediate();
    return collected;
  });
  return { collected: found ?? [] };
}

/** Snapshots that tasks keep alive (gc roots): every kept task's result, a running task's base. */
export function taskRoots(db: Db): { snapshot: string; task: string; why: 'result' | 'base' }[] {
  const rows = db
    .prepare(
      `SELECT result_snapshot AS snapshot, id AS task, 'result' AS why FROM tasks WHERE result_snapshot IS NOT NULL
       UNION ALL
       SELECT base_snapshot AS snapshot, id AS task, 'base' AS why FROM tasks
        WHERE base_snapshot IS NOT NULL AND NOT ${TERMINAL_IN}
       ORDER BY task, why`,
    )
    .all() as { snapshot: string; task: string; why: 'result' | 'base' }[];
  return rows;
}
