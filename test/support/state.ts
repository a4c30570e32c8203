// Observing a repository: the git-visible state and the raw working tree (bytes, modes, links, empty dirs).
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitTry } from './git';
import type { Sandbox } from './sandbox';

export interface TreeEntry {
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'other';
  /** mode & 0o111, regular files only */
  exec?: number;
  target?: string;
  size?: number;
  sha256?: string;
}

export interface TreeListing {
  /** relative path ('/'-separated) -> entry; the top-level .git is excluded */
  entries: Map<string, TreeEntry>;
  /** relative paths of directories with no entries at all */
  emptyDirs: string[];
}

export function sha256File(abs: string): string {
  const h = createHash('sha256');
  const fd = fs.openSync(abs, 'r');
  try {
    const buf = Buffer.allocUnsafe(4 * 1024 * 1024);
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      h.update(n === buf.length ? buf : buf.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return h.digest('hex');
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Walks dir without following symlinks, excluding the top-level .git (dir or file). */
export function walkTree(dir: string): TreeListing {
  const entries = new Map<string, TreeEntry>();
  const emptyDirs: string[] = [];
  const visit = (absDir: string, relDir: string): void => {
    const names = fs.readdirSync(absDir);
    if (names.length === 0 && relDir !== '') emptyDirs.push(relDir);
    for (const name of names) {
      if (relDir === '' && name === '.git') continue;
      const rel = relDir === '' ? name : `${relDir}/${name}`;
      const abs = path.join(absDir, name);
      const st = fs.lstatSync(abs);
      if (st.isSymbolicLink()) {
        entries.set(rel, { type: 'symlink', target: fs.readlinkSync(abs) });
      } else if (st.isDirectory()) {
        entries.set(rel, { type: 'dir' });
        visit(abs, rel);
      } else if (st.isFile()) {
        entries.set(rel, { type: 'file', exec: st.mode & 0o111, size: st.size, sha256: sha256File(abs) });
      } else if (st.isFIFO()) {
        entries.set(rel, { type: 'fifo' });
      } else if (st.isSocket()) {
        entries.set(rel, { type: 'socket' });
      } else {
        entries.set(rel, { type: 'other' });
      }
    }
  };
  visit(dir, '');
  emptyDirs.sort();
  return { entries, emptyDirs };
}

function describeEntry(e: TreeEntry | undefined): string {
  if (!e) return '(absent)';
  switch (e.type) {
    case 'file':
      return `file exec=${(e.exec ?? 0).toString(8)} size=${e.size} sha256=${e.sha256?.slice(0, 16)}`;
    case 'symlink':
      return `symlink -> ${JSON.stringify(e.target)}`;
    default:
      return e.type;
  }
}

/** Differences between two listings, as human-readable lines (empty when identical). */
export function compareTrees(expected: TreeListing, actual: TreeListing, limit = 40): string[] {
  const diffs: string[] = [];
  const all = new Set([...expected.entries.keys(), ...actual.entries.keys()]);
  for (const rel of [...all].sort()) {
    const a = expected.entries.get(rel);
    const b = actual.entries.get(rel);
    const same =
      a !== undefined &&
      b !== undefined &&
      a.type === b.type &&
      a.exec === b.exec &&
      a.target === b.target &&
      a.size === b.size &&
      a.sha256 === b.sha256;
    if (!same) diffs.push(`  ${JSON.stringify(rel)}: source ${describeEntry(a)} / copy ${describeEntry(b)}`);
  }
  const ea = new Set(expected.emptyDirs);
  const eb = new Set(actual.emptyDirs);
  for (const d of expected.emptyDirs) if (!eb.has(d)) diffs.push(`  empty dir ${JSON.stringify(d)}: missing in copy`);
  for (const d of actual.emptyDirs) if (!ea.has(d)) diffs.push(`  empty dir ${JSON.stringify(d)}: only in copy`);
  if (diffs.length > limit) return [...diffs.slice(0, limit), `  ... and ${diffs.length - limit} more`];
  return diffs;
}

/**
 * Removes paths (exact, or prefixes ending with '/') from a listing, then drops directories that
 * only contained removed entries (they cannot exist in a copy that leaves those entries out).
 */
export function withoutPaths(listing: TreeListing, paths: string[]): TreeListing {
  const drop = (rel: string): boolean =>
    paths.some((p) => (p.endsWith('/') ? rel === p.slice(0, -1) || rel.startsWith(p) : rel === p));
  const kept = [...listing.entries].filter(([rel]) => !drop(rel));
  const emptyDirs = listing.emptyDirs.filter((d) => !drop(d));
  const nonDirs = kept.filter(([, e]) => e.type !== 'dir').map(([rel]) => rel);
  const needed = new Set<string>();
  for (const rel of [...nonDirs, ...emptyDirs]) {
    const parts = rel.split('/');
    for (let i = 1; i <= parts.length; i++) needed.add(parts.slice(0, i).join('/'));
  }
  const entries = new Map(kept.filter(([rel, e]) => e.type !== 'dir' || needed.has(rel)));
  return { entries, emptyDirs };
}

/** The git commands whose output must be identical between a source and its restored copy. */
export const STATE_COMMANDS: Record<string, { args: string[]; okExit?: number[]; sortLines?: boolean }> = {
  status: {
    args: ['status', '--porcelain=v2', '--untracked-files=all', '--ignored=matching'],
    sortLines: true,
  },
  // --full-index: abbreviated ids in "index a..b" lines grow with the object count, which may differ
  // legitimately (the copy also holds the snapshot's own objects, packed differently).
  'diff --binary --full-index': { args: ['diff', '--binary', '--full-index'] },
  'diff --cached --binary --full-index': { args: ['diff', '--cached', '--binary', '--full-index'] },
  'ls-files -s -v -t': { args: ['ls-files', '-s', '-v', '-t'] },
  'rev-parse HEAD': { args: ['rev-parse', '-q', '--verify', 'HEAD'], okExit: [0, 1] },
  'symbolic-ref -q HEAD': { args: ['symbolic-ref', '-q', 'HEAD'], okExit: [0, 1] },
  'for-each-ref heads/tags/stash': {
    args: ['for-each-ref', '--format=%(refname) %(objectname) %(objecttype)', 'refs/heads', 'refs/tags', 'refs/stash'],
  },
  "config --get-regexp '^branch\\.'": { args: ['config', '--get-regexp', '^branch\\.'], okExit: [0, 1] },
};

export type GitState = Record<string, string>;

/** Runs the given git commands (default STATE_COMMANDS) in dir; result "exit N\n<stdout>". */
export function collectGitState(
  sb: Sandbox,
  dir: string,
  commands: Record<string, { args: string[]; okExit?: number[]; sortLines?: boolean }> = STATE_COMMANDS,
): GitState {
  const out: GitState = {};
  for (const [name, spec] of Object.entries(commands)) {
    const r = gitTry(sb, dir, spec.args);
    const ok = spec.okExit ?? [0];
    if (r.status === null || !ok.includes(r.status)) {
      out[name] = `ERROR exit ${r.status}: ${r.stderr.toString('utf8').trim()}`;
      continue;
    }
    let text = r.stdout.toString('utf8');
    if (spec.sortLines) {
      text = text
        .split('\n')
        .filter((l) => l !== '')
        .sort()
        .join('\n');
    }
    out[name] = `exit ${r.status}\n${text}`;
  }
  return out;
}

function clip(s: string, n = 1500): string {
  return s.length > n ? `${s.slice(0, n)}... (${s.length} chars)` : s;
}

/** Differences between two git states, as readable blocks (empty when identical). */
export function compareGitStates(expected: GitState, actual: GitState): string[] {
  const diffs: string[] = [];
  for (const key of Object.keys(expected)) {
    if (expected[key] !== actual[key]) {
      const el = expected[key].split('\n');
      const al = actual[key].split('\n');
      const onlyE = el.filter((l) => !al.includes(l));
      const onlyA = al.filter((l) => !el.includes(l));
      diffs.push(
        `git ${key} differs\n    lines only in source: ${clip(JSON.stringify(onlyE))}\n` +
          `    lines only in copy:   ${clip(JSON.stringify(onlyA))}\n` +
          `    source: ${clip(JSON.stringify(expected[key]), 800)}\n    copy:   ${clip(JSON.stringify(actual[key]), 800)}`,
      );
    }
  }
  return diffs;
}

/** Drops status lines for untracked/ignored paths that are expected to be absent from the copy. */
export function statusWithout(state: GitState, paths: string[]): GitState {
  const key = 'status';
  const lines = state[key].split('\n');
  const header = lines[0];
  const kept = lines.slice(1).filter((l) => {
    if (!(l.startsWith('? ') || l.startsWith('! '))) return true;
    const p = l.slice(2);
    return !paths.some((x) => (x.endsWith('/') ? p === x || p.startsWith(x) : p === x));
  });
  return { ...state, [key]: [header, ...kept].join('\n') };
}

/** The rows `sql` selects from the sidecar of the repository whose common git directory is
 * `commonDir`, read only; none before the sidecar exists. */
export function sidecarRows<T>(commonDir: string, sql: string): T[] {
  const file = path.join(commonDir, 'xet', 'xet.db');
  if (!fs.existsSync(file)) return [];
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    return db.prepare(sql).all() as T[];
  } finally {
    db.close();
  }
}
