// The MCP server's confinement: what a tool call's arguments may name. Every filesystem path (a
// spec's `paths`) must resolve, symlinks followed, inside one of the server repository's worktrees
// (forks included) or a --root, never inside a git directory; every name given to git (`names`) and
// every path must not start with '-'; a source (restore --from, push, fetch) is a path or file:// or
// xet:: URL confined the same way, or a configured remote's name. Anything else is refused with
// ARGUMENT_NOT_ALLOWED before the command runs. These are the holes the official git MCP server
// shipped (modelcontextprotocol/servers #604, #4550, CVE-2025-68145): a repository argument never
// checked, `..` traversal, symlinks pointing out, string-prefix containment (/tmp/a admitting /tmp/ab)
// and arguments git reads as options.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { XetError } from '../errors';
import { gitText, gitZ } from '../git/exec';
import { storePathFromUrl } from '../remote/url';
import type { AnyCommandSpec, PathKind } from '../commands/spec';

/** What a call may reach, read afresh for each call (a fork made by the previous call is a new
 * worktree; a remote may have been added). */
export interface Reach {
  /** The server's repository: its main worktree's top level (real path). */
  repo: string;
  /** Real paths of every worktree of the repository and every --root. */
  allowed: string[];
  /** Real paths of git directories inside which nothing may be named (hooks, config). */
  gitDirs: string[];
  /** Real path of core.hooksPath when set (resolved against the main worktree, as git does for
   * hooks run there): a file written there runs at the next commit. */
  hooksDirs: string[];
  remotes: Set<string>;
}

function refuse(argument: string, value: unknown, why: string): never {
  throw new XetError('ARGUMENT_NOT_ALLOWED', `${argument}: ${why}`, { argument, value });
}

/** Whether `p` is `base` or below it: by path components, so /tmp/a does not contain /tmp/ab. */
export function isInside(p: string, base: string): boolean {
  const rel = path.relative(base, p);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

function realOrNull(p: string): string | null {
  try {
    return fs.realpathSync(p);
  } catch {
    return null;
  }
}

/** Reads the repository's worktrees (git worktree list: forks are linked worktrees), its git
 * directories and its remotes; `roots` are real paths already. */
export async function readReach(repo: string, roots: string[]): Promise<Reach> {
  const [fields, common, remoteText, hooksPath] = await Promise.all([
    gitZ(['worktree', 'list', '--porcelain', '-z'], { cwd: repo }),
    gitText(['rev-parse', '--path-format=absolute', '--git-common-dir'], { cwd: repo }),
    gitText(['remote'], { cwd: repo }),
    gitText(['config', '--path', '--get', 'core.hooksPath'], { cwd: repo }).catch(() => ''),
  ]);
  const worktrees = fields.filter((f) => f.startsWith('worktree ')).map((f) => f.slice('worktree '.length));
  const remotes = remoteText.split('\n').filter(Boolean);
  const allowed = [...worktrees.map(realOrNull).filter((p): p is string => p !== null), ...roots];
  const gitDirs = [realOrNull(common)].filter((p): p is string => p !== null);
  const hooks = hooksPath.trim();
  const hooksDirs = hooks === '' ? [] : [resolvePath('core.hooksPath', hooks, repo)];
  return { repo, allowed, gitDirs, hooksDirs, remotes: new Set(remotes) };
}

/** Resolves `value` as the kernel would, component by component: each existing prefix through
 * realpath (so `link/..` is the parent of the link's target, not of the link), a `..` after a real
 * path is its parent, and the part that does not exist yet may not contain `..` (the command would
 * create it; a lexical `..` there could climb anywhere). A dangling symlink is refused: creating
 * through it would write where it points. */
export function resolvePath(argument: string, value: string, base: string): string {
  const abs = path.isAbsolute(value) ? value : `${base}${path.sep}${value}`;
  const parts = abs.split(path.sep).filter((c) => c !== '' && c !== '.');
  let resolved = path.parse(abs).root;
  let i = 0;
  for (; i < parts.length; i++) {
    const c = parts[i];
    if (c === '..') {
      resolved = path.dirname(resolved);
      continue;
    }
    const next = path.join(resolved, c);
    let st: fs.Stats;
    try {
      st = fs.lstatSync(next);
    } catch {
      break; // the rest does not exist yet
    }
    if (st.isSymbolicLink()) {
      const real = realOrNull(next);
      if (real === null) refuse(argument, value, `${next} is a symbolic link that points nowhere`);
      resolved = real;
    } else resolved = next;
  }
  const rest = parts.slice(i);
  if (rest.includes('..')) refuse(argument, value, "'..' below a directory that does not exist");
  return path.join(resolved, ...rest);
}

/** One path value: refused when it starts with '-', holds a NUL or resolves outside every allowed
 * place or into a git directory; else its resolved absolute form (what the command then gets). */
export function confinePath(argument: string, value: string, reach: Reach, kind: PathKind = 'existing'): string {
  if (value.startsWith('-')) refuse(argument, value, "a path may not start with '-'");
  if (value.includes('\0')) refuse(argument, value, 'a path may not contain NUL');
  const resolved = resolvePath(argument, value, reach.repo);
  for (const g of reach.gitDirs) {
    if (isInside(resolved, g)) refuse(argument, value, `${resolved} is inside the git directory ${g}`);
  }
  if (resolved.split(path.sep).some((c) => c.toLowerCase() === '.git')) {
    refuse(argument, value, `${resolved} is inside a .git directory`);
  }
  for (const h of reach.hooksDirs) {
    if (isInside(resolved, h)) refuse(argument, value, `${resolved} is inside core.hooksPath ${h}`);
  }
  // A target is created or replaced: an existing file there may be the user's untracked work (the
  // CLI overwrites it on purpose when told to; an agent may name it by mistake or on purpose).
  if (kind === 'target') {
    let st: fs.Stats | null;
    try {
      st = fs.lstatSync(resolved);
    } catch {
      st = null;
    }
    if (st !== null && !st.isDirectory()) {
      refuse(argument, value, `${resolved} exists: through MCP a target file may not be overwritten`);
    }
  }
  if (!reach.allowed.some((a) => isInside(resolved, a))) {
    refuse(
      argument,
      value,
      `${resolved} is outside the repository's worktrees and the server's roots (${reach.allowed.join(', ')})`,
    );
  }
  return resolved;
}

/** A source: a configured remote's name (as is), a xet:: or file:// URL or a path (confined; the
 * URL keeps its form). Any other URL (ssh, https, ext::) is refused: the server reaches only what
 * its operator configured or allowed. */
export function confineSource(argument: string, value: string, reach: Reach): string {
  if (value.startsWith('-')) refuse(argument, value, "a source may not start with '-'");
  if (reach.remotes.has(value)) return value;
  if (value.startsWith('xet::')) {
    const p = storePathFromUrl(value, reach.repo);
    return `xet::${confinePath(argument, p, reach)}`;
  }
  if (/^file:\/\//i.test(value)) {
    let p: string;
    try {
      p = fileURLToPath(value);
    } catch {
      refuse(argument, value, 'not a local file:// URL');
    }
    return pathToFileURL(confinePath(argument, p, reach)).href;
  }
  // scp-like `host:path` and every other scheme (ssh://, https://, ext::): not a local path.
  const colon = value.indexOf(':');
  const slash = value.indexOf('/');
  if (colon > 0 && (slash === -1 || colon < slash)) {
    refuse(argument, value, 'only configured remotes, local paths, file:// and xet:: URLs are allowed');
  }
  return confinePath(argument, value, reach);
}

function eachString(value: unknown, fn: (v: string) => string): unknown {
  if (typeof value === 'string') return fn(value);
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'string' ? fn(v) : v));
  return value;
}

/** The input with every path made absolute and resolved; throws ARGUMENT_NOT_ALLOWED for anything
 * out of reach. Run on the validated input, before the command. */
export function confineInput(
  spec: AnyCommandSpec,
  input: Record<string, unknown>,
  reach: Reach | null,
): Record<string, unknown> {
  const out = { ...input };
  for (const key of spec.names ?? []) {
    eachString(out[key], (v) => {
      if (v.startsWith('-')) refuse(key, v, "a name may not start with '-' (git would read it as an option)");
      return v;
    });
  }
  for (const [key, kind] of Object.entries(spec.paths ?? {}) as [string, PathKind][]) {
    if (out[key] === undefined || out[key] === null) continue;
    if (!reach) throw new Error(`${spec.path.join(' ')}: ${key} is a path, and no reach was read`);
    out[key] = eachString(out[key], (v) =>
      kind === 'source' ? confineSource(key, v, reach) : confinePath(key, v, reach, kind),
    );
  }
  return out;
}
