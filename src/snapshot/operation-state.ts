// Conflicts, operations in progress and sparse checkout: what a snapshot records of them and how a
// restore puts them back. This module owns the manifest fields `unmerged`, `operation` and `sparse`,
// the snapshot tree `gitstate/` (the operation's files of the git dir, byte for byte) and the
// allow-list of those files. A snapshot is hostile input: restore re-checks every name, size and
// line of gitstate/ before writing any of it, and never writes a file whose name is not listed here.
//
// Why files and not a re-run: git keeps a merge, rebase, cherry-pick, revert, am or bisect as plain
// files in the git dir (MERGE_HEAD, rebase-merge/…, sequencer/…, BISECT_*); `git status` and
// `git <op> --continue` read nothing else. None of them holds an absolute path (checked on git
// 2.39 for every operation), so the same bytes work in a new location.

// Control characters are what the content checks look for.
/* eslint-disable no-control-regex */

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText, joinZ, type GitOptions } from '../git/exec';
import { catFileBatch, type IndexEntry, lsTree, mktree, type TreeEntryInput, writeBlobs } from '../git/plumbing';
import type { GitConfig } from '../git/config';
import type { Repo } from '../git/repo';
import { checkTreePaths } from './paths';
import { readTail } from './fsutil';
import type { Manifest } from './manifest';
import type { Snapshot } from './store';

export const GITSTATE_TREE = 'gitstate';
const MAX_FILE = 64 * 1024 * 1024;
const MAX_TOTAL = 256 * 1024 * 1024;
const MAX_FILES = 50_000;
const MAX_PATTERNS = 4 * 1024 * 1024;

/** How restore checks a file's content (capture applies the same check, so what it records restores). */
type Kind =
  | 'oid'
  | 'oids'
  | 'oid-or-empty'
  | 'head-name'
  | 'line'
  | 'strategy'
  | 'terms'
  | 'branch-or-oid'
  | 'todo'
  | 'opts'
  | 'refs'
  | 'update-refs'
  | 'reflog'
  | 'text';

const TOP: Record<string, Kind> = {
  MERGE_HEAD: 'oids',
  MERGE_MSG: 'text',
  MERGE_MODE: 'line',
  MERGE_AUTOSTASH: 'oid',
  AUTO_MERGE: 'oid',
  ORIG_HEAD: 'oid',
  CHERRY_PICK_HEAD: 'oid',
  REVERT_HEAD: 'oid',
  REBASE_HEAD: 'oid',
  SQUASH_MSG: 'text',
  BISECT_LOG: 'text',
  BISECT_START: 'branch-or-oid',
  BISECT_TERMS: 'terms',
  BISECT_NAMES: 'text',
  BISECT_EXPECTED_REV: 'oid',
  BISECT_ANCESTORS_OK: 'text',
  BISECT_HEAD: 'oid',
  BISECT_FIRST_PARENT: 'text',
};

// File names from git's sequencer.c, builtin/rebase.c and builtin/am.c (2.39).
const REBASE_MERGE: Record<string, Kind> = {
  'git-rebase-todo': 'todo',
  'git-rebase-todo.backup': 'text',
  dropped: 'text',
  done: 'text',
  msgnum: 'line',
  end: 'line',
  message: 'text',
  'message-squash': 'text',
  'message-fixup': 'text',
  'current-fixups': 'text',
  'author-script': 'text',
  amend: 'oid',
  'stopped-sha': 'oid',
  'rewritten-list': 'text',
  'rewritten-pending': 'text',
  'squash-onto': 'oid',
  'refs-to-delete': 'refs',
  'update-refs': 'update-refs',
  gpg_sign_opt: 'line',
  cdate_is_adate: 'text',
  ignore_date: 'text',
  'orig-head': 'oid',
  verbose: 'text',
  quiet: 'text',
  signoff: 'text',
  'head-name': 'head-name',
  onto: 'oid',
  autostash: 'oid',
  strategy: 'strategy',
  strategy_opts: 'line',
  allow_rerere_autoupdate: 'line',
  'reschedule-failed-exec': 'text',
  'no-reschedule-failed-exec': 'text',
  drop_redundant_commits: 'text',
  keep_redundant_commits: 'text',
  interactive: 'text',
  patch: 'text',
};

const REBASE_APPLY: Record<string, Kind> = {
  next: 'line',
  last: 'line',
  patch: 'text',
  msg: 'text',
  'final-commit': 'text',
  info: 'text',
  'author-script': 'text',
  'original-commit': 'oid',
  'abort-safety': 'oid-or-empty',
  dirtyindex: 'text',
  applying: 'text',
  rebasing: 'text',
  keep: 'line',
  messageid: 'line',
  threeway: 'line',
  quiet: 'line',
  sign: 'line',
  utf8: 'line',
  scissors: 'line',
  'quoted-cr': 'line',
  'apply-opt': 'line',
  'patch-merge-index': 'text',
  'head-name': 'head-name',
  onto: 'oid',
  'orig-head': 'oid',
  autostash: 'oid',
  verbose: 'text',
  strategy: 'strategy',
  strategy_opts: 'line',
  allow_rerere_autoupdate: 'line',
  gpg_sign_opt: 'line',
  signoff: 'text',
  'ignore-date': 'text',
  'committer-date-is-author-date': 'text',
};

const SEQUENCER: Record<string, Kind> = {
  todo: 'todo',
  head: 'oid',
  opts: 'opts',
  'abort-safety': 'oid-or-empty',
};

const DIRS: Record<string, Record<string, Kind>> = {
  'rebase-merge': REBASE_MERGE,
  'rebase-apply': REBASE_APPLY,
  sequencer: SEQUENCER,
};

/** sequencer/opts keys git writes (sequencer.c save_opts). */
const OPTS_KEYS = new Set([
  'no-commit',
  'edit',
  'allow-empty',
  'allow-empty-message',
  'drop-redundant-commits',
  'keep-redundant-commits',
  'signoff',
  'record-origin',
  'allow-ff',
  'mainline',
  'strategy',
  'strategy-option',
  'gpg-sign',
  'allow-rerere-auto',
  'default-msg-cleanup',
  'reference',
]);

/** The name's validation kind, or null when the name is not one git writes for an operation. */
export function stateFileKind(p: string): Kind | null {
  if (p === 'logs/HEAD') return 'reflog';
  const slash = p.indexOf('/');
  if (slash < 0) return Object.hasOwn(TOP, p) ? TOP[p] : null;
  const dir = p.slice(0, slash);
  const name = p.slice(slash + 1);
  if (!Object.hasOwn(DIRS, dir) || name.includes('/')) return null;
  if (dir === 'rebase-apply' && /^[0-9]{4,9}$/.test(name)) return 'text';
  return Object.hasOwn(DIRS[dir], name) ? DIRS[dir][name] : null;
}

/** A stage 1-3 index entry. */
export type UnmergedEntry = NonNullable<Manifest['unmerged']>[number];
/** What is in progress (kinds, sorted: am, bisect, cherry-pick, merge, rebase-apply, rebase-merge,
 * revert, sequencer, squash), the per-worktree refs it owns (refs/bisect/*, refs/rewritten/*), and
 * the commands its pending todo would run (`exec` lines; restore needs --allow-exec for them). */
export type OperationManifest = NonNullable<Manifest['operation']>;
/** Raw config values (null: unset) of core.sparseCheckout, core.sparseCheckoutCone, index.sparse;
 * whether they live in config.worktree; this worktree's info/sparse-checkout. */
export type SparseManifest = NonNullable<Manifest['sparse']>;

export interface StateFile {
  path: string;
  data: Buffer;
}

export interface CapturedState {
  manifest: { unmerged?: UnmergedEntry[]; operation?: OperationManifest; sparse?: SparseManifest };
  files: StateFile[];
  /** Commits the state names: snapshot parents, so fetching the snapshot brings them. */
  commits: string[];
  /** Trees and blobs the state names (AUTO_MERGE, stage blobs): kept reachable under objects/. */
  keep: { oid: string; type: 'tree' | 'blob' }[];
}

function kindsOf(has: (p: string) => boolean): string[] {
  const k: string[] = [];
  if (has('rebase-merge')) k.push('rebase-merge');
  if (has('rebase-apply')) k.push(has('rebase-apply/rebasing') ? 'rebase-apply' : 'am');
  if (has('MERGE_HEAD')) k.push('merge');
  if (has('CHERRY_PICK_HEAD')) k.push('cherry-pick');
  if (has('REVERT_HEAD')) k.push('revert');
  if (has('sequencer')) k.push('sequencer');
  if (has('BISECT_START') || has('BISECT_LOG')) k.push('bisect');
  if (has('SQUASH_MSG')) k.push('squash');
  return k.sort();
}

const refuse = (kinds: string[], message: string, details: Record<string, unknown> = {}): never => {
  throw new XetError('OPERATION_IN_PROGRESS', message, { operation: kinds.join(','), ...details });
};

/** Reads the operation files of a git dir (null when no operation is in progress). Refuses, by name,
 * what a restore could not reproduce: a name git xet does not know, a file that is not a regular
 * file, oversized state, content that restore's checks would reject. */
export function readGitState(
  gitDir: string,
  detachedHead: boolean,
  objectFormat: 'sha1' | 'sha256',
): { kinds: string[]; files: StateFile[] } | null {
  const has = (p: string) => fs.existsSync(path.join(gitDir, p));
  const kinds = kindsOf(has);
  if (!kinds.length) return null;
  const files: StateFile[] = [];
  let total = 0;
  const take = (rel: string, st: fs.Stats) => {
    if (!st.isFile()) refuse(kinds, `${rel} in the git dir is not a regular file`, { path: rel });
    if (st.size > MAX_FILE || (total += st.size) > MAX_TOTAL || files.length >= MAX_FILES) {
      refuse(kinds, `the ${kinds.join(', ')} state is too large to capture (${rel})`, { path: rel });
    }
    const data = fs.readFileSync(path.join(gitDir, rel));
    const problem = checkContent(rel, stateFileKind(rel) as Kind, data, objectFormat);
    if (problem) refuse(kinds, `cannot capture ${rel}: ${problem}`, { path: rel });
    files.push({ path: rel, data });
  };
  for (const name of Object.keys(TOP)) {
    const st = fs.lstatSync(path.join(gitDir, name), { throwIfNoEntry: false });
    if (st) take(name, st);
  }
  for (const dir of Object.keys(DIRS)) {
    const st = fs.lstatSync(path.join(gitDir, dir), { throwIfNoEntry: false });
    if (!st) continue;
    if (!st.isDirectory()) refuse(kinds, `${dir} in the git dir is not a directory`, { path: dir });
    for (const name of fs.readdirSync(path.join(gitDir, dir)).sort()) {
      const rel = `${dir}/${name}`;
      if (!stateFileKind(rel)) {
        refuse(
          kinds,
          `${rel} is operation state git xet does not know; finish or abort the ${kinds.join(', ')} first`,
          {
            path: rel,
          },
        );
      }
      take(rel, fs.lstatSync(path.join(gitDir, rel)));
    }
  }
  // `git status` says "HEAD detached at X" from the newest checkout entry of HEAD's reflog; that one
  // line travels (the reflog itself is not captured).
  if (detachedHead) {
    const line = lastCheckoutLine(path.join(gitDir, 'logs', 'HEAD'));
    if (line && !checkContent('logs/HEAD', 'reflog', line, objectFormat)) files.push({ path: 'logs/HEAD', data: line });
  }
  return { kinds, files };
}

function lastCheckoutLine(file: string): Buffer | null {
  const read = readTail(file, 256 * 1024);
  if (!read) return null;
  const lines = read.tail.toString('utf8').split('\n');
  // A line cut by the window's start is not one.
  for (let i = lines.length - 1; i >= (read.tail.length < read.size ? 1 : 0); i--) {
    if (lines[i].includes('\tcheckout: moving from ')) return Buffer.from(`${lines[i]}\n`, 'utf8');
  }
  return null;
}

const REF_RE = /^refs\/(heads|tags|remotes|rewritten|bisect)\/[^\x00-\x20\x7f~^:?*[\\]+$/;
function validRef(name: string): boolean {
  return (
    REF_RE.test(name) &&
    !name.includes('..') &&
    !name.includes('//') &&
    !name.includes('@{') &&
    !name.endsWith('/') &&
    !name.endsWith('.lock') &&
    !name.includes('/.')
  );
}

/** Lines of a todo that run shell commands. */
export function execLines(todo: Buffer): string[] {
  return todo
    .toString('utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => /^(x|exec)(\s|$)/.test(l))
    .map((l) => l.replace(/^(x|exec)\s*/, ''));
}

/** Why the content is not what git writes for this name, or null. */
function checkContent(rel: string, kind: Kind, data: Buffer, format: 'sha1' | 'sha256'): string | null {
  const hex = format === 'sha256' ? 64 : 40;
  const oidRe = new RegExp(`^[0-9a-f]{${hex}}$`);
  const text = data.toString('utf8');
  if (kind === 'text') return null;
  if (data.includes(0)) return 'NUL byte';
  const lines = text.replace(/\n$/, '').split('\n');
  const one = lines.length === 1 && !text.replace(/\n$/, '').includes('\n');
  switch (kind) {
    case 'oid':
      return one && oidRe.test(lines[0]) ? null : 'not one object id';
    case 'oid-or-empty':
      return text.trim() === '' || (one && oidRe.test(lines[0])) ? null : 'not an object id';
    case 'oids':
      return lines.length > 0 && lines.every((l) => oidRe.test(l)) ? null : 'not a list of object ids';
    case 'head-name':
      return one && (lines[0] === 'detached HEAD' || (validRef(lines[0]) && lines[0].startsWith('refs/heads/')))
        ? null
        : 'not a branch name';
    case 'line':
      return one && !/[\x00-\x08\x0b-\x1f\x7f]/.test(text) ? null : 'not a single line of text';
    case 'strategy':
      return one && /^[A-Za-z0-9_-]{0,64}$/.test(lines[0]) ? null : 'not a merge strategy name';
    case 'terms':
      return lines.length === 2 && lines.every((l) => /^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(l))
        ? null
        : 'not two bisect terms';
    case 'branch-or-oid':
      return one && (oidRe.test(lines[0]) || validRef(`refs/heads/${lines[0]}`)) && !lines[0].startsWith('-')
        ? null
        : 'not a branch name or object id';
    case 'refs':
      return lines.every((l) => l === '' || validRef(l)) ? null : 'names a ref outside refs/heads, refs/rewritten…';
    case 'update-refs': {
      if (lines.length % 3 !== 0) return 'not ref/before/after triples';
      for (let i = 0; i < lines.length; i += 3) {
        if (!validRef(lines[i]) || !oidRe.test(lines[i + 1]) || !oidRe.test(lines[i + 2]))
          return 'bad update-refs entry';
      }
      return null;
    }
    case 'opts': {
      for (const l of lines) {
        if (l.trim() === '' || l === '[options]') continue;
        const m = /^\t([a-z-]+) = [^\x00-\x1f]*$/.exec(l);
        if (!m || !OPTS_KEYS.has(m[1])) return `unexpected line ${JSON.stringify(l.slice(0, 80))}`;
      }
      return null;
    }
    case 'todo':
      return /[\x00-\x08\x0b\x0c\x0e-\x1f]/.test(text) ? 'control characters' : null;
    case 'reflog':
      return /^[0-9a-f]{40,64} [0-9a-f]{40,64} [^\n\t]* \d+ [+-]\d{4}\tcheckout: moving from [^\n\x00-\x1f]*\n$/.test(
        text,
      ) && !text.includes('\0')
        ? null
        : 'not a checkout reflog line';
  }
}

async function readConfigValue(key: string, opts: GitOptions): Promise<string | null> {
  const r = await git(['config', '--get', key], { ...opts, okCodes: [1] });
  return r.code === 0 ? r.stdout.toString('utf8').replace(/\n$/, '') : null;
}

/** Everything of a worktree's conflicts, operation and sparse checkout, read before capture writes
 * anything. Refusals are typed and name what cannot be restored faithfully. */
export async function captureOperationState(
  repo: Repo,
  entries: IndexEntry[],
  config: GitConfig,
  head: { kind: string; oid: string | null },
  /** Commits the snapshot's other parents already reach (captured refs). */
  tips: string[],
  opts: GitOptions,
): Promise<CapturedState> {
  const out: CapturedState = { manifest: {}, files: [], commits: [], keep: [] };
  const unmerged = entries
    .filter((e) => e.stage !== 0)
    .map((e) => ({ path: e.path, stage: e.stage, mode: e.mode, oid: e.oid }));
  if (unmerged.length) {
    out.manifest.unmerged = unmerged;
    const blobs = [...new Set(unmerged.filter((e) => e.mode !== '160000').map((e) => e.oid))];
    // A stage whose blob is not in the repository cannot travel (git itself could not merge it).
    const text = blobs.length
      ? await gitText(['cat-file', '--batch-check=%(objectname) %(objecttype)'], {
          ...opts,
          input: blobs.map((o) => `${o}\n`).join(''),
        })
      : '';
    const bad = text.split('\n').filter((l) => l && !l.endsWith(' blob'));
    if (bad.length) {
      const oid = bad[0].split(' ')[0];
      const paths = unmerged.filter((e) => e.oid === oid).map((e) => e.path);
      throw new XetError('UNMERGED_INDEX', `an unmerged entry of ${paths[0]} names ${oid}, which is not a blob here`, {
        paths,
        oid,
      });
    }
    for (const oid of blobs) out.keep.push({ oid, type: 'blob' });
  }
  const state = readGitState(repo.gitDir, head.kind === 'detached', repo.objectFormat);
  const hexes = new Set<string>();
  if (state) {
    const refs = (
      await gitText(['for-each-ref', '--format=%(refname) %(objectname)', 'refs/bisect/', 'refs/rewritten/'], opts)
    )
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const sp = l.lastIndexOf(' ');
        return { name: l.slice(0, sp), oid: l.slice(sp + 1) };
      });
    for (const r of refs) {
      if (!validRef(r.name))
        refuse(state.kinds, `the ref ${JSON.stringify(r.name)} cannot be restored`, { ref: r.name });
      hexes.add(r.oid);
    }
    const todo = state.files.find((f) => f.path === 'rebase-merge/git-rebase-todo' || f.path === 'sequencer/todo');
    out.manifest.operation = { kinds: state.kinds, refs, exec: todo ? execLines(todo.data) : [] };
    out.files = state.files;
    const re =
      repo.objectFormat === 'sha256'
        ? /(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])/g
        : /(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])/g;
    for (const f of state.files) {
      // The todo backup is rebase's own list of orig-head's commits (git.git: 1,200 of them), all
      // reached through orig-head; the index file is binary.
      if (f.path === 'rebase-apply/patch-merge-index' || f.path === 'rebase-merge/git-rebase-todo.backup') continue;
      for (const m of f.data.toString('latin1').matchAll(re)) hexes.add(m[0]);
    }
  }
  if (hexes.size) {
    // Object ids in the state that exist here: commits become parents, trees and blobs are kept.
    const text = await gitText(['cat-file', '--batch-check=%(objectname) %(objecttype)'], {
      ...opts,
      input: [...hexes].map((h) => `${h}\n`).join(''),
    });
    for (const line of text.split('\n')) {
      const [oid, type] = line.split(' ');
      if (type === 'commit') out.commits.push(oid);
      else if (type === 'tree' || type === 'blob') out.keep.push({ oid, type });
    }
  }
  if (config.getBool('core.sparseCheckout')) {
    const patterns = (() => {
      const f = path.join(repo.gitDir, 'info', 'sparse-checkout');
      const st = fs.lstatSync(f, { throwIfNoEntry: false });
      if (!st) return null;
      if (!st.isFile() || st.size > MAX_PATTERNS) {
        throw new XetError('SPARSE_CHECKOUT', 'info/sparse-checkout is not a regular file of at most 4 MiB', {
          path: f,
        });
      }
      return fs.readFileSync(f, 'utf8');
    })();
    out.manifest.sparse = {
      sparseCheckout: await readConfigValue('core.sparseCheckout', opts),
      cone: await readConfigValue('core.sparseCheckoutCone', opts),
      sparseIndex: await readConfigValue('index.sparse', opts),
      worktreeConfig: config.getBool('extensions.worktreeConfig') === true,
      patterns,
    };
  }
  const seen = new Set<string>();
  out.keep = out.keep.filter((k) => !seen.has(k.oid) && seen.add(k.oid));
  out.commits = [...new Set(out.commits)].sort();
  if (out.commits.length > 64) {
    // Many commits (a long bisect log, a rewritten-list): most are ancestors of one another or of a
    // captured branch, and every 16 parents cost a grouping commit. Keep only the tips.
    const others = [...new Set([...tips, ...(head.oid ? [head.oid] : [])])];
    const independent = new Set(
      (await gitText(['merge-base', '--independent', ...out.commits, ...others], opts)).split('\n'),
    );
    out.commits = out.commits.filter((c) => independent.has(c) && !others.includes(c));
  }
  return out;
}

/** The gitstate/ tree of the captured files (null when there are none). */
export async function writeGitStateTree(files: StateFile[], opts: GitOptions): Promise<string | null> {
  if (!files.length) return null;
  const oids = await writeBlobs(
    files.map((f) => f.data),
    'blob',
    opts,
  );
  const byDir = new Map<string, TreeEntryInput[]>();
  files.forEach((f, n) => {
    const slash = f.path.lastIndexOf('/');
    const dir = slash < 0 ? '' : f.path.slice(0, slash);
    const list = byDir.get(dir) ?? [];
    list.push({ mode: '100644', type: 'blob', oid: oids[n], name: f.path.slice(slash + 1) });
    byDir.set(dir, list);
  });
  const top = byDir.get('') ?? [];
  for (const [dir, list] of byDir) {
    if (dir !== '') top.push({ mode: '040000', type: 'tree', oid: await mktree(list, opts), name: dir });
  }
  return mktree(top, opts);
}

export interface OperationPlan {
  unmerged: UnmergedEntry[];
  files: StateFile[];
  refs: { name: string; oid: string }[];
  sparse: SparseManifest | null;
  exec: string[];
}

function invalid(message: string, details: Record<string, unknown> = {}): never {
  throw new XetError('SNAPSHOT_INVALID', message, details);
}

/** The gitstate/ tree oid of a snapshot, if it has one. */
async function gitStateTreeOf(snap: Snapshot, opts: GitOptions): Promise<string | null> {
  const r = await git(['ls-tree', '-z', snap.oid, '--', GITSTATE_TREE], opts);
  const rec = r.stdout.toString('utf8').split('\0')[0];
  if (!rec) return null;
  const [mode, type, oid] = rec.slice(0, rec.indexOf('\t')).split(' ');
  if (mode !== '040000' || type !== 'tree') invalid(`${GITSTATE_TREE} in snapshot ${snap.oid} is not a tree`);
  return oid;
}

/**
 * Everything a restore will write for this snapshot's conflicts, operation and sparse checkout,
 * validated before anything is written: names against the allow-list, sizes before reading, every
 * line that git would act on (oids, refs, options), objects present. A todo that runs commands
 * needs `allowExec` (OPERATION_RUNS_COMMANDS otherwise): whoever runs `git rebase --continue` in the
 * copy runs them.
 */
export async function planOperationRestore(
  snap: Snapshot,
  opts: GitOptions,
  allowExec: boolean,
): Promise<OperationPlan | null> {
  const m = snap.manifest;
  const format = m.git.objectFormat;
  const oidRe = format === 'sha256' ? /^[0-9a-f]{64}$/ : /^[0-9a-f]{40}$/;
  // A gitstate/ tree without a manifest operation is never read, so it cannot be written either.
  if (!m.unmerged?.length && !m.operation && !m.sparse) return null;
  const tree = m.operation ? await gitStateTreeOf(snap, opts) : null;
  const plan: OperationPlan = { unmerged: m.unmerged ?? [], files: [], refs: [], sparse: m.sparse ?? null, exec: [] };

  // Unmerged entries: safe paths, stages 1-3 once each, not also staged at stage 0, objects present.
  const seen = new Set<string>();
  checkTreePaths(
    [...new Set(plan.unmerged.map((e) => e.path))].map((p) => ({ path: p, type: 'blob' })),
    [],
    'manifest unmerged entries',
  );
  for (const e of plan.unmerged) {
    const key = `${e.stage}\0${e.path}`;
    if (![1, 2, 3].includes(e.stage) || seen.has(key)) invalid(`bad unmerged entry for ${JSON.stringify(e.path)}`);
    if (!['100644', '100755', '120000', '160000'].includes(e.mode) || !oidRe.test(e.oid)) {
      invalid(`bad mode or object id in the unmerged entry for ${JSON.stringify(e.path)}`);
    }
    seen.add(key);
  }
  if (plan.unmerged.length) {
    const staged = new Set((await lsTree(snap.indexTree, opts)).map((e) => e.path));
    const both = plan.unmerged.find((e) => staged.has(e.path));
    if (both) invalid(`${JSON.stringify(both.path)} is both staged and unmerged`, { path: both.path });
  }

  // gitstate/: names first (from the listing, with sizes), then contents.
  if (tree) {
    const listing = await lsTree(tree, { ...opts, long: true });
    if (listing.length > MAX_FILES) invalid(`${GITSTATE_TREE}/ has too many files`);
    let total = 0;
    for (const e of listing) {
      if (!stateFileKind(e.path) || e.type !== 'blob' || e.mode !== '100644') {
        invalid(`${GITSTATE_TREE}/${e.path} is not an operation file git xet restores`, { path: e.path });
      }
      total += e.size;
      if (e.size > MAX_FILE || total > MAX_TOTAL) invalid(`${GITSTATE_TREE}/${e.path} is too large`, { path: e.path });
    }
    const blobs = await catFileBatch(
      listing.map((e) => e.oid),
      opts,
    );
    for (const e of listing) {
      const b = blobs.get(e.oid);
      if (!b || b.type !== 'blob') invalid(`${GITSTATE_TREE}/${e.path} is missing`, { path: e.path });
      const problem = checkContent(e.path, stateFileKind(e.path) as Kind, b.data, format);
      if (problem) invalid(`${GITSTATE_TREE}/${e.path}: ${problem}`, { path: e.path });
      plan.files.push({ path: e.path, data: Buffer.from(b.data) });
      if (e.path === 'rebase-merge/git-rebase-todo' || e.path === 'sequencer/todo')
        plan.exec.push(...execLines(b.data));
    }
  }
  if (m.operation) {
    for (const r of m.operation.refs ?? []) {
      if (!validRef(r.name) || !/^refs\/(bisect|rewritten)\//.test(r.name) || !oidRe.test(r.oid)) {
        invalid(`the manifest names an unexpected operation ref ${JSON.stringify(r.name)}`, { ref: r.name });
      }
      plan.refs.push({ name: r.name, oid: r.oid });
    }
  }
  if (plan.sparse) {
    const s = plan.sparse;
    for (const v of [s.sparseCheckout, s.cone, s.sparseIndex]) {
      if (v !== null && !/^(true|false|yes|no|on|off|1|0|)$/i.test(v))
        invalid(`bad sparse checkout setting ${JSON.stringify(v)}`);
    }
    if (s.patterns !== null && (s.patterns.length > MAX_PATTERNS || s.patterns.includes('\0'))) {
      invalid('bad sparse-checkout patterns');
    }
  }
  // Objects the index and state refer to must be here (a fetch brought what the snapshot reaches).
  const need = [
    ...new Set([...plan.unmerged.filter((e) => e.mode !== '160000').map((e) => e.oid), ...plan.refs.map((r) => r.oid)]),
  ];
  if (need.length) {
    const text = await gitText(['cat-file', '--batch-check=%(objectname) %(objecttype)'], {
      ...opts,
      input: need.map((o) => `${o}\n`).join(''),
    });
    const missing = text.split('\n').find((l) => l.endsWith(' missing'));
    if (missing) invalid(`object ${missing.split(' ')[0]} named by the snapshot's conflict state is missing`);
  }
  if (plan.exec.length && !allowExec) {
    throw new XetError(
      'OPERATION_RUNS_COMMANDS',
      `the snapshot's ${m.operation?.kinds.join(', ')} would run ${plan.exec.length} command(s) on --continue (${JSON.stringify(plan.exec[0].slice(0, 80))}); restore with --allow-exec to keep them`,
      { commands: plan.exec.slice(0, 50) },
    );
  }
  return plan;
}

/** Writes the plan into a restored repository (its worktree, index and git dir are complete). */
export async function applyOperationRestore(plan: OperationPlan, gitDir: string, opts: GitOptions): Promise<void> {
  if (plan.unmerged.length) {
    // Stage entries for paths with no stage-0 entry (the staged tree left them out).
    const lines = plan.unmerged.map((e) => `${e.mode} ${e.oid} ${e.stage}\t${e.path}`);
    await git(['update-index', '-z', '--index-info'], { ...opts, input: joinZ(lines) });
  }
  if (plan.refs.length) {
    const input = plan.refs.map((r) => `update ${r.name} ${r.oid}\n`).join('');
    await git(['update-ref', '--no-deref', '--stdin'], { ...opts, input });
  }
  for (const f of plan.files) {
    const abs = path.join(gitDir, ...f.path.split('/'));
    fs.mkdirSync(path.dirname(abs), { recursive: true });
    if (f.path === 'logs/HEAD') fs.appendFileSync(abs, f.data);
    else fs.writeFileSync(abs, f.data, { flag: 'wx' });
  }
  const s = plan.sparse;
  if (s) {
    const where = s.worktreeConfig ? ['--worktree'] : ['--local'];
    if (s.worktreeConfig) {
      await git(['config', '--local', 'core.repositoryformatversion', '1'], opts);
      await git(['config', '--local', 'extensions.worktreeConfig', 'true'], opts);
    }
    const set: [string, string | null][] = [
      ['core.sparseCheckout', s.sparseCheckout],
      ['core.sparseCheckoutCone', s.cone],
      ['index.sparse', s.sparseIndex],
    ];
    for (const [k, v] of set) if (v !== null) await git(['config', ...where, k, v], opts);
    if (s.patterns !== null) {
      fs.mkdirSync(path.join(gitDir, 'info'), { recursive: true });
      fs.writeFileSync(path.join(gitDir, 'info', 'sparse-checkout'), s.patterns);
    }
    // With index.sparse, git collapses skip-worktree directories whenever it writes the index.
    if (s.sparseIndex !== null && /^(true|yes|on|1)$/i.test(s.sparseIndex)) {
      const header = Buffer.alloc(8);
      const fd = fs.openSync(path.join(gitDir, 'index'), 'r');
      fs.readSync(fd, header, 0, 8, 0);
      fs.closeSync(fd);
      await git(['update-index', `--index-version=${header.readUInt32BE(4)}`], opts);
    }
  }
}

/** Forks share one base per snapshot and lay only files and the stage-0 index; an operation, its
 * conflicts or a sparse checkout would be lost there, so such a snapshot is restored, not forked. */
export function refuseForkOfOperation(snap: Snapshot): void {
  const m = snap.manifest;
  if (m.unmerged?.length || m.operation) {
    throw new XetError(
      'OPERATION_IN_PROGRESS',
      `snapshot ${snap.oid.slice(0, 12)} holds ${m.operation ? `a ${m.operation.kinds.join(', ')} in progress` : 'unmerged entries'}; forks cannot carry it: use git xet restore`,
      { operation: m.operation?.kinds.join(',') ?? null, snapshot: snap.oid },
    );
  }
  if (m.sparse) {
    throw new XetError(
      'SPARSE_CHECKOUT',
      `snapshot ${snap.oid.slice(0, 12)} is a sparse checkout; forks cannot carry it: use git xet restore`,
      { snapshot: snap.oid },
    );
  }
}

/** Paths of the unmerged entries of an index listing (for trees that hold stage 0 only). */
export function unmergedPaths(entries: IndexEntry[]): string[] {
  return [...new Set(entries.filter((e) => e.stage !== 0).map((e) => e.path))];
}

function blobOid(data: Buffer, format: 'sha1' | 'sha256'): string {
  return crypto
    .createHash(format === 'sha256' ? 'sha256' : 'sha1')
    .update(`blob ${data.length}\0`)
    .update(data)
    .digest('hex');
}

export interface StateDifference {
  kind: string;
  path?: string;
  expected?: unknown;
  actual?: unknown;
}

/** verify: unmerged stages, operation files and refs, sparse settings of a directory vs a snapshot. */
export async function compareOperationState(
  snap: Snapshot,
  target: Repo,
  entries: IndexEntry[],
  opts: GitOptions,
): Promise<StateDifference[]> {
  const m = snap.manifest;
  const diffs: StateDifference[] = [];
  const key = (e: { path: string; stage: number }) => `${e.path}\0${e.stage}`;
  const want = new Map((m.unmerged ?? []).map((e) => [key(e), e]));
  const have = new Map(entries.filter((e) => e.stage !== 0).map((e) => [key(e), e]));
  for (const [k, e] of want) {
    const h = have.get(k);
    if (!h)
      diffs.push({ kind: 'unmerged-missing', path: e.path, expected: { stage: e.stage, mode: e.mode, oid: e.oid } });
    else if (h.mode !== e.mode || h.oid !== e.oid) {
      diffs.push({
        kind: 'unmerged-modified',
        path: e.path,
        expected: { stage: e.stage, mode: e.mode, oid: e.oid },
        actual: { stage: h.stage, mode: h.mode, oid: h.oid },
      });
    }
  }
  for (const [k, h] of have) {
    if (!want.has(k))
      diffs.push({ kind: 'unmerged-extra', path: h.path, actual: { stage: h.stage, mode: h.mode, oid: h.oid } });
  }

  let state: { kinds: string[]; files: StateFile[] } | null;
  try {
    const detached = !fs.readFileSync(path.join(target.gitDir, 'HEAD'), 'utf8').startsWith('ref: ');
    state = readGitState(target.gitDir, detached, target.objectFormat);
  } catch (e) {
    if (!(e instanceof XetError)) throw e;
    state = { kinds: ['unknown'], files: [] };
    diffs.push({ kind: 'operation', expected: m.operation?.kinds ?? [], actual: e.message });
  }
  const wantKinds = m.operation?.kinds ?? [];
  const haveKinds = state?.kinds ?? [];
  if (wantKinds.join(',') !== haveKinds.join(',') && !diffs.some((d) => d.kind === 'operation')) {
    diffs.push({ kind: 'operation', expected: wantKinds, actual: haveKinds });
  }
  const tree = m.operation ? await gitStateTreeOf(snap, opts).catch(() => null) : null;
  const wantFiles = new Map(tree ? (await lsTree(tree, opts)).map((e) => [e.path, e.oid]) : []);
  const haveFiles = new Map((state?.files ?? []).map((f) => [f.path, blobOid(f.data, target.objectFormat)]));
  for (const [p, oid] of wantFiles) {
    const h = haveFiles.get(p);
    if (h === undefined) diffs.push({ kind: 'gitstate-missing', path: p });
    else if (h !== oid) diffs.push({ kind: 'gitstate-modified', path: p, expected: oid, actual: h });
  }
  for (const p of haveFiles.keys()) if (!wantFiles.has(p)) diffs.push({ kind: 'gitstate-extra', path: p });
  if (m.operation || state) {
    const refs = (
      await gitText(['for-each-ref', '--format=%(refname) %(objectname)', 'refs/bisect/', 'refs/rewritten/'], opts)
    )
      .split('\n')
      .filter(Boolean);
    const wantRefs = new Set((m.operation?.refs ?? []).map((r) => `${r.name} ${r.oid}`));
    for (const r of wantRefs)
      if (!refs.includes(r))
        diffs.push({ kind: 'operation-ref-missing', path: r.split(' ')[0], expected: r.split(' ')[1] });
    for (const r of refs)
      if (!wantRefs.has(r)) diffs.push({ kind: 'operation-ref-extra', path: r.split(' ')[0], actual: r.split(' ')[1] });
  }

  const sparseOn = (await readConfigValue('core.sparseCheckout', opts)) ?? null;
  const wantSparse = m.sparse ?? null;
  if (wantSparse || (sparseOn !== null && /^(true|yes|on|1)$/i.test(sparseOn))) {
    const actual: Record<string, string | null> = {
      'core.sparseCheckout': sparseOn,
      'core.sparseCheckoutCone': await readConfigValue('core.sparseCheckoutCone', opts),
      'index.sparse': await readConfigValue('index.sparse', opts),
      'info/sparse-checkout': (() => {
        try {
          return fs.readFileSync(path.join(target.gitDir, 'info', 'sparse-checkout'), 'utf8');
        } catch {
          return null;
        }
      })(),
    };
    const expected: Record<string, string | null> = {
      'core.sparseCheckout': wantSparse?.sparseCheckout ?? null,
      'core.sparseCheckoutCone': wantSparse?.cone ?? null,
      'index.sparse': wantSparse?.sparseIndex ?? null,
      'info/sparse-checkout': wantSparse?.patterns ?? null,
    };
    for (const k of Object.keys(expected)) {
      if (expected[k] !== actual[k]) diffs.push({ kind: 'sparse', path: k, expected: expected[k], actual: actual[k] });
    }
  }
  return diffs;
}
