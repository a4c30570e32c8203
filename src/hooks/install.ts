// Installing git xet's guard hooks into the hooks directory Git uses (.git/hooks or core.hooksPath),
// chaining hooks already there and putting them back byte for byte on uninstall. OWNER: hooks helper.
//
// Each hook file gets the block of hooks/guard.sh (POSIX sh, builtins only: hooks run on every
// commit and must not start node). Two ways to chain a hook that is already there:
//   block    an executable shell script (#!…/sh, bash, dash, ksh, zsh, env sh…): the block goes in
//            right after its shebang line. The user's code runs in the same process with the same
//            $0, so husky's `. "$(dirname "$0")/h"` and `basename "$0"` still work.
//   wrapper  anything else (no hook, a binary, python, a symlink, a non-executable file): the old
//            hook is kept where it resolves the same way and <hooks>/<name> becomes a small sh
//            script: the block, then `exec` of the kept hook. A file stays in the same directory
//            as <name>.xet-chained (helpers it finds next to itself are still there); a symlink
//            goes to <hooks>/xet-chained/<name> with a relative target prefixed by `../` (same
//            file, and the basename a dispatcher reads from $0 is kept). A hook that ran before
//            must still run: the wrapper refuses (exit 1) when it is gone, never skips it.
// The files themselves say what was done (a block can be cut out again, the wrapper names the kept
// hook), so a run killed half way is repaired by running again; <common>/xet/hooks.json records,
// per hooks directory, the originals' sha256 and modes, and per worktree what ensureHooks needs
// to answer without spawning git.
import Database from 'better-sqlite3';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git } from '../git/exec';
import type { Repo } from '../git/repo';
import { repoOpts } from '../git/repo';
import { lexists } from '../snapshot/fsutil';
import { faultPoint } from '../testing/fault-points';
import { WRAPPER_MARK, hooksDirectory } from './location';
import type { GitConfig } from '../git/config';

export interface HookState {
  name: string;
  /** absent: not installed; installed: ours alone; chained: ours, running the user's hook too;
   * foreign: we installed it and something replaced the file since; modified: our block is there
   * but not as git xet writes it (edited, or from another version). */
  state: 'absent' | 'installed' | 'chained' | 'foreign' | 'modified' | 'broken' | 'skipped';
  /** How the user's hook is chained (block, wrapper); absent when nothing of ours is there. */
  method?: 'block' | 'wrapper';
  /** uninstall: whether the restored hook is byte for byte the one install found ('exact'), or the
   * user changed their part since ('edited'). */
  restored?: 'exact' | 'edited' | 'removed' | 'lost' | 'tracked';
  /** broken, skipped, restored lost/tracked: why. */
  reason?: string;
}

export interface HooksResult {
  dir: string;
  hooks: HookState[];
  /** core.hooksPath names something that is not a directory (/dev/null): Git runs no hook. */
  disabled?: true;
  /** The directory is outside this repository (a global core.hooksPath): other repositories may
   * rely on the same hook files. */
  shared?: true;
  /** status: every hook carries git xet's guard and every hook it chains is there. */
  intact?: boolean;
}

/** The hooks git xet installs: every Git command that moves a ref runs reference-transaction;
 * pre-commit, pre-merge-commit and pre-rebase refuse earlier, before Git has written anything. */
export const HOOK_NAMES = ['pre-commit', 'pre-merge-commit', 'pre-rebase', 'reference-transaction'] as const;
/** Where a chained symlink goes (one level down, its relative target prefixed by `../`). */
export const CHAINED_DIR = 'xet-chained';
/** What a chained file is renamed to, in the same directory (its own relative lookups still work). */
export const CHAINED_SUFFIX = '.xet-chained';
export const RECORD_SCHEMA = 'xet.hooks/v2';

const BEGIN = '# >>> git xet guard';
const END = '# <<< git xet guard';
const SHELLS = new Set(['sh', 'dash', 'bash', 'ksh', 'mksh', 'ash', 'zsh']);

let template: string | undefined;
function guardTemplate(): string {
  // dist/src/hooks/install.js and src/hooks/install.ts both sit three levels below the package.
  template ??= fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'hooks', 'guard.sh'), 'utf8');
  return template;
}
export function templateSha(): string {
  return sha256(guardTemplate());
}
export function guardBlock(name: string): string {
  return guardTemplate().replace(/__XET_HOOK__/g, name);
}

/** How a wrapper chains the hook that was there: `required` when that hook ran (Git runs only an
 * executable hook): then the wrapper refuses when it is gone instead of skipping it. */
export interface Chain {
  at: 'sibling' | 'link';
  required: boolean;
}
function chainRel(name: string, at: Chain['at']): string {
  return at === 'sibling' ? `${name}${CHAINED_SUFFIX}` : `${CHAINED_DIR}/${name}`;
}
export function wrapperScript(name: string, chain: Chain | null = null): string {
  const head = `#!/bin/sh\n${guardBlock(name)}`;
  if (!chain) return `${head}${WRAPPER_MARK} nothing chained\nexit 0\n`;
  const rel = chainRel(name, chain.at);
  return (
    `${head}${WRAPPER_MARK} chains ${rel} (${chain.required ? 'must run' : 'runs if executable'})\n` +
    `case $0 in */*) __xet_c=\${0%/*} ;; *) __xet_c=. ;; esac\n` +
    `__xet_c=$__xet_c/${rel}\n` +
    `if [ -f "$__xet_c" ] && [ -x "$__xet_c" ]; then exec "$__xet_c" "$@"; fi\n` +
    (chain.required
      ? `printf '%s\\n' "git xet: the ${name} hook git xet chained ($__xet_c) is missing or not executable: refusing instead of skipping it; run git xet hooks status" >&2\nexit 1\n`
      : `exit 0\n`)
  );
}

/** Whether git would run a program of the user's as hook `name`: an executable file in the hooks
 * directory (git runs no other) that is not git xet's own wrapper with nothing chained, byte for
 * byte. Unsure is yes. */
export function runsUserHook(repo: Repo, config: GitConfig, name: string): boolean {
  const dir = hooksDirectory(repo, config);
  if (dir === null) return true;
  const file = path.join(dir, name);
  try {
    fs.accessSync(file, fs.constants.X_OK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code !== 'ENOENT' && code !== 'EACCES' && code !== 'ENOTDIR';
  }
  try {
    return fs.readFileSync(file, 'utf8') !== wrapperScript(name);
  } catch {
    return true;
  }
}

/** The chain a wrapper names on its mark line; undefined when the line is not one git xet writes. */
function parseMark(rest: string, name: string): Chain | null | undefined {
  const line = rest.slice(0, rest.indexOf('\n') + 1);
  if (line === `${WRAPPER_MARK} nothing chained\n`) return null;
  const m = /^# git xet hook wrapper: chains (\S+) \((must run|runs if executable)\)\n$/.exec(line);
  if (!m) return undefined;
  const at = m[1] === chainRel(name, 'sibling') ? 'sibling' : m[1] === chainRel(name, 'link') ? 'link' : undefined;
  return at ? { at, required: m[2] === 'must run' } : undefined;
}

function sha256(b: string | Buffer): string {
  return crypto.createHash('sha256').update(b).digest('hex');
}

// ---------------------------------------------------------------------------------------------
// What a hook file holds

type Found =
  | { kind: 'none' }
  | { kind: 'user'; bytes: Buffer | null; mode: number; shell: boolean; symlink: boolean; runs: boolean }
  | { kind: 'block'; user: Buffer; mode: number; current: boolean; exec: boolean }
  | { kind: 'wrapper'; mode: number; current: boolean; chain: Chain | null | undefined };

/** Line-start offsets of our markers; unbalanced or nested markers cannot be cut out safely. */
function blockSpans(text: string, file: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  let open = -1;
  let at = 0;
  while (at < text.length) {
    const nl = text.indexOf('\n', at);
    const end = nl === -1 ? text.length : nl + 1;
    const line = text.slice(at, end);
    if (line.startsWith(BEGIN)) {
      if (open !== -1) throw conflict(file, 'it holds a git xet guard block that never ends');
      open = at;
    } else if (line.startsWith(END)) {
      if (open === -1) throw conflict(file, 'it holds the end of a git xet guard block without its start');
      spans.push([open, end]);
      open = -1;
    }
    at = end;
  }
  if (open !== -1) throw conflict(file, 'it holds a git xet guard block that never ends');
  return spans;
}

function conflict(file: string, why: string): XetError {
  return new XetError('HOOK_CONFLICT', `cannot chain the hook ${file}: ${why}; fix or move it, then run again`, {
    file,
  });
}

function isShellScript(bytes: Buffer): boolean {
  const nl = bytes.indexOf(10);
  if (nl === -1) return false;
  const m = /^#!\s*(\S+)(?:\s+(\S+))?/.exec(bytes.subarray(0, nl).toString('latin1'));
  if (!m) return false;
  const interp = path.posix.basename(m[1]);
  if (SHELLS.has(interp)) return true;
  return interp === 'env' && m[2] !== undefined && SHELLS.has(m[2]);
}

/** What Git does with it: runs it only when it resolves to an executable file. */
function runnable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function inspect(file: string, name: string): Found {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'none' };
    throw e;
  }
  if (st.isSymbolicLink()) {
    return { kind: 'user', bytes: null, mode: 0, shell: false, symlink: true, runs: runnable(file) };
  }
  if (!st.isFile()) throw conflict(file, 'it is not a regular file');
  // A hook is a small script; one that is huge is not ours to rewrite.
  if (st.size > 4 * 1024 * 1024) throw conflict(file, 'it is over 4 MiB');
  const bytes = fs.readFileSync(file);
  const mode = st.mode & 0o7777;
  const exec = (mode & 0o111) !== 0;
  const text = bytes.toString('latin1');
  const spans = blockSpans(text, file);
  if (spans.length === 0) {
    return { kind: 'user', bytes, mode, shell: exec && isShellScript(bytes), symlink: false, runs: exec };
  }
  if (
    text.startsWith('#!/bin/sh\n') &&
    spans[0][0] === 10 &&
    text.slice(spans[spans.length - 1][1]).startsWith(WRAPPER_MARK)
  ) {
    const chain = parseMark(text.slice(spans[spans.length - 1][1]), name);
    const current = chain !== undefined && text === wrapperScript(name, chain) && (mode & 0o111) === 0o111;
    return { kind: 'wrapper', mode, current, chain };
  }
  let user = '';
  let from = 0;
  for (const [a, b] of spans) {
    user += text.slice(from, a);
    from = b;
  }
  user += text.slice(from);
  const block = guardBlock(name);
  // Git skips a hook that is not executable, and our block with it.
  const current =
    exec &&
    spans.length === 1 &&
    text.slice(spans[0][0], spans[0][1]) === block &&
    spans[0][0] === text.indexOf('\n') + 1;
  return { kind: 'block', user: Buffer.from(user, 'latin1'), mode, current, exec };
}

function withBlock(user: Buffer, name: string): Buffer {
  const nl = user.indexOf(10);
  return Buffer.concat([user.subarray(0, nl + 1), Buffer.from(guardBlock(name), 'latin1'), user.subarray(nl + 1)]);
}

function tmpName(file: string): string {
  return path.join(
    path.dirname(file),
    `.${path.basename(file)}.xet-${process.pid}-${crypto.randomBytes(4).toString('hex')}.tmp`,
  );
}

/** Replace `file` atomically: Git may be running the hook this very moment. */
function writeAtomic(file: string, data: string | Buffer, mode: number): void {
  const tmp = tmpName(file);
  const fd = fs.openSync(tmp, 'wx', 0o600);
  try {
    fs.writeSync(fd, typeof data === 'string' ? Buffer.from(data, 'utf8') : data);
    fs.fchmodSync(fd, mode);
    fs.fsyncSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fs.closeSync(fd);
  renameOrDrop(tmp, file);
}

function symlinkAtomic(target: string, file: string): void {
  const tmp = tmpName(file);
  fs.symlinkSync(target, tmp);
  renameOrDrop(tmp, file);
}

function renameOrDrop(tmp: string, file: string): void {
  try {
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// The record

interface RecordEntry {
  method: 'block' | 'wrapper';
  /** The hook install found, as uninstall must put it back (null: there was none). */
  original: { sha256: string | null; mode: number; symlink: boolean } | null;
}

/** One hooks directory: a relative core.hooksPath (husky's .husky/_) gives each worktree its own. */
interface DirRecord {
  template: string;
  installedAt: string;
  hooks: Record<string, RecordEntry>;
  /** git xet made this directory (a relative core.hooksPath missing in a linked worktree or a
   * fork), with a `.gitignore` of `*` as husky makes its own: uninstall removes it again. */
  created?: boolean;
}

interface HooksRecord {
  schema: typeof RECORD_SCHEMA;
  dirs: Record<string, DirRecord>;
  /** Per worktree git dir: its hooks directory and what decides it (config files' stat, config
   * env); unchanged, `dir` still holds and ensureHooks needs no git. */
  worktrees: Record<string, { dir: string; configKey: string }>;
}

function recordPath(repo: Repo): string {
  return path.join(repo.commonDir, 'xet', 'hooks.json');
}

function emptyRecord(): HooksRecord {
  return { schema: RECORD_SCHEMA, dirs: {}, worktrees: {} };
}

function readRecord(repo: Repo): HooksRecord {
  try {
    if (fs.statSync(recordPath(repo)).size > 1024 * 1024) return emptyRecord();
    const r = JSON.parse(fs.readFileSync(recordPath(repo), 'utf8')) as HooksRecord;
    const isMap = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (r?.schema !== RECORD_SCHEMA || !isMap(r.dirs) || !isMap(r.worktrees)) return emptyRecord();
    return r;
  } catch {
    // missing or unreadable (or v1): the hook files themselves say what is installed
    return emptyRecord();
  }
}

function writeRecord(repo: Repo, r: HooksRecord): void {
  const file = recordPath(repo);
  if (Object.keys(r.dirs).length === 0 && Object.keys(r.worktrees).length === 0) {
    fs.rmSync(file, { force: true });
    return;
  }
  fs.mkdirSync(path.dirname(file), { recursive: true });
  writeAtomic(file, `${JSON.stringify(r, null, 2)}\n`, 0o644);
}

/** Record keys: the same directory reached by another spelling is the same entry. */
function real(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

function statKey(file: string): string {
  try {
    const st = fs.statSync(file);
    return `${file}:${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch {
    return `${file}:-`;
  }
}

/** Everything git reads to find core.hooksPath, cheaply: config files' identity and the config
 * environment. An [include]d file is not followed (docs/DESIGN-NOTES.md says so). */
function configKey(repo: Repo): string {
  const home = process.env.HOME ?? os.homedir();
  const env = [
    'GIT_CONFIG_GLOBAL',
    'GIT_CONFIG_SYSTEM',
    'GIT_CONFIG_NOSYSTEM',
    'GIT_CONFIG_COUNT',
    'GIT_CONFIG_PARAMETERS',
  ]
    .map((k) => `${k}=${process.env[k] ?? ''}`)
    .join('\n');
  const files = [
    path.join(repo.commonDir, 'config'),
    path.join(repo.gitDir, 'config.worktree'),
    process.env.GIT_CONFIG_GLOBAL ?? path.join(home, '.gitconfig'),
    path.join(process.env.XDG_CONFIG_HOME || path.join(home, '.config'), 'git', 'config'),
    process.env.GIT_CONFIG_SYSTEM ?? '/etc/gitconfig',
  ];
  return [env, ...files.map(statKey)].join('\n');
}

async function hooksDir(repo: Repo): Promise<string> {
  const r = await git(['rev-parse', '--path-format=absolute', '--git-path', 'hooks'], repoOpts(repo));
  const dir = r.stdout.toString('utf8').replace(/\n$/, '');
  return real(path.resolve(repo.worktree, dir));
}

function within(root: string, p: string): boolean {
  const rel = path.relative(real(root), p);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

/** Where the hooks directory is: in a git dir of this repository, in this worktree (its files may
 * be tracked, new ones would show as untracked), or outside the repository altogether (a global
 * core.hooksPath: other repositories rely on the same files). */
async function placeOf(repo: Repo, dir: string, wantShared: boolean): Promise<{ worktree: boolean; shared: boolean }> {
  if (within(repo.commonDir, dir) || within(repo.gitDir, dir)) return { worktree: false, shared: false };
  if (within(repo.worktree, dir)) return { worktree: true, shared: false };
  // /dev/null is outside every repository, but holds nothing to share.
  if (!wantShared || dirKind(dir) === 'other') return { worktree: false, shared: false };
  const r = await git(['worktree', 'list', '--porcelain'], repoOpts(repo));
  const trees = r.stdout
    .toString('utf8')
    .split('\n')
    .filter((l) => l.startsWith('worktree '))
    .map((l) => l.slice('worktree '.length));
  return { worktree: false, shared: !trees.some((t) => within(t, dir)) };
}

/** Which of `files` (absolute, in the worktree) the repository tracks, and which git ignores. */
async function worktreeFacts(repo: Repo, files: string[]): Promise<{ tracked: Set<string>; ignored: Set<string> }> {
  if (files.length === 0) return { tracked: new Set(), ignored: new Set() };
  const rels = files.map((f) => path.relative(repo.worktree, f));
  const back = (rel: string) => path.join(repo.worktree, rel);
  const ls = await git(['ls-files', '-z', '--', ...rels], repoOpts(repo));
  const ci = await git(['check-ignore', '-z', '--stdin'], {
    ...repoOpts(repo),
    input: `${rels.join('\0')}\0`,
    okCodes: [1],
  });
  const split = (b: Buffer) => b.toString('utf8').split('\0').filter(Boolean).map(back);
  return { tracked: new Set(split(ls.stdout)), ignored: new Set(split(ci.stdout)) };
}

function dirKind(dir: string): 'dir' | 'missing' | 'other' {
  try {
    return fs.statSync(dir).isDirectory() ? 'dir' : 'other';
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return 'missing';
    if (code === 'ENOTDIR') return 'other';
    throw e;
  }
}

const DISABLED_WHY = "it is not a directory (core.hooksPath switches Git's hooks off there)";

/** core.hooksPath=/dev/null (hooks switched off) or another non-directory: nothing can go there. */
function makeHooksDir(dir: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
    if (fs.statSync(dir).isDirectory()) return;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST' && code !== 'ENOTDIR') throw e;
  }
  throw new XetError('HOOK_CONFLICT', `cannot install hooks into ${dir}: ${DISABLED_WHY}`, { dir, disabled: true });
}

/** One installer at a time per repository: a SQLite EXCLUSIVE transaction, which the kernel drops
 * however the holder ends. */
function lockHooks(repo: Repo): () => void {
  const dir = path.join(repo.commonDir, 'xet');
  fs.mkdirSync(dir, { recursive: true });
  const db = new Database(path.join(dir, 'hooks.lock'), { timeout: 30_000 });
  try {
    db.pragma('journal_mode = DELETE');
    db.exec('CREATE TABLE IF NOT EXISTS lock (x INTEGER)');
    db.exec('BEGIN EXCLUSIVE');
  } catch (e) {
    db.close();
    if ((e as { code?: string }).code === 'SQLITE_BUSY') {
      throw new XetError('BUSY', 'another git xet process is installing or removing the hooks; retry later', {
        lock: path.join(dir, 'hooks.lock'),
      });
    }
    throw e;
  }
  return () => {
    try {
      db.exec('ROLLBACK');
    } finally {
      db.close();
    }
  };
}

function keptPath(dir: string, name: string, at: Chain['at']): string {
  return path.join(dir, chainRel(name, at));
}
/** The hook a wrapper chains: where its mark line says, or (a wrapper edited) wherever one is. */
function keptOf(dir: string, name: string, chain: Chain | null | undefined): string | null {
  if (chain === null) return null;
  const places = chain ? [chain.at] : (['sibling', 'link'] as const);
  for (const at of places) if (lexists(keptPath(dir, name, at))) return keptPath(dir, name, at);
  return null;
}

/** Why a wrapper's chain no longer does what the hook did before install; null: it does. */
function brokenChain(dir: string, name: string, chain: Chain): string | null {
  const kept = keptPath(dir, name, chain.at);
  const rel = chainRel(name, chain.at);
  if (!lexists(kept)) return `${rel}, the hook that was here before git xet's, is gone: commits are refused`;
  if (chain.required && !runnable(kept)) {
    return `${rel}, the hook that was here before git xet's, is no longer executable (or its target is gone): commits are refused`;
  }
  return null;
}

function stateOf(found: Found, recorded: boolean, dir: string, name: string): HookState {
  switch (found.kind) {
    case 'none':
      return { name, state: 'absent' };
    case 'user':
      return { name, state: recorded ? 'foreign' : 'absent' };
    case 'block':
      return { name, state: found.current ? 'chained' : 'modified', method: 'block' };
    case 'wrapper': {
      if (!found.current || found.chain === undefined) return { name, state: 'modified', method: 'wrapper' };
      if (found.chain === null) return { name, state: 'installed', method: 'wrapper' };
      const why = brokenChain(dir, name, found.chain);
      if (why) return { name, state: 'broken', method: 'wrapper', reason: why };
      return { name, state: 'chained', method: 'wrapper' };
    }
  }
}

/** A symlink kept one level down resolves to the same file when its relative target goes up once more. */
function keptLinkTarget(target: string): string {
  return path.isAbsolute(target) ? target : `../${target}`;
}
function restoredLinkTarget(kept: string): string {
  return !path.isAbsolute(kept) && kept.startsWith('../') ? kept.slice(3) : kept;
}

function originalOfKept(kept: string | null, at: Chain['at'] | null): RecordEntry['original'] {
  if (!kept) return null;
  try {
    const st = fs.lstatSync(kept);
    if (st.isSymbolicLink()) {
      const t = fs.readlinkSync(kept);
      return { sha256: sha256(at === 'link' ? restoredLinkTarget(t) : t), mode: 0, symlink: true };
    }
    return { sha256: sha256(fs.readFileSync(kept)), mode: st.mode & 0o7777, symlink: false };
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// install / uninstall / status

type Step =
  | { do: 'keep'; entry: RecordEntry }
  | { do: 'wrapper'; chain: Chain | null; entry: RecordEntry }
  | { do: 'block'; bytes: Buffer; mode: number; entry: RecordEntry }
  | { do: 'aside'; chain: Chain; from: 'file' | 'link' | Buffer; mode: number; entry: RecordEntry };

/** What install does to one hook, before anything is written; the files it would create. */
function stepFor(dir: string, name: string, file: string, found: Found): { step: Step; creates: string[] } {
  const aside = (chain: Chain) => {
    const kept = keptPath(dir, name, chain.at);
    if (lexists(kept)) {
      throw conflict(file, `${chainRel(name, chain.at)} is already there (a hook git xet kept aside earlier)`);
    }
    return kept;
  };
  switch (found.kind) {
    case 'none':
      return { step: { do: 'wrapper', chain: null, entry: { method: 'wrapper', original: null } }, creates: [file] };
    case 'wrapper': {
      const kept = keptOf(dir, name, found.chain);
      const at: Chain['at'] | null = kept ? (kept.endsWith(CHAINED_SUFFIX) ? 'sibling' : 'link') : null;
      const entry: RecordEntry = { method: 'wrapper', original: originalOfKept(kept, at) };
      if (found.current) return { step: { do: 'keep', entry }, creates: [] };
      // An edited wrapper: rewritten for what is kept aside; a chain that had to run still must.
      const chain = at && kept ? { at, required: found.chain ? found.chain.required : runnable(kept) } : null;
      return { step: { do: 'wrapper', chain, entry }, creates: [] };
    }
    case 'block': {
      const entry: RecordEntry = {
        method: 'block',
        original: { sha256: sha256(found.user), mode: found.mode, symlink: false },
      };
      if (found.current) return { step: { do: 'keep', entry }, creates: [] };
      if (found.exec)
        return { step: { do: 'block', bytes: withBlock(found.user, name), mode: found.mode, entry }, creates: [] };
      // Someone made the hook non-executable (Git skips it): its own part is kept aside, still
      // skipped there, and the guard runs from a wrapper.
      const chain: Chain = { at: 'sibling', required: false };
      return {
        step: { do: 'aside', chain, from: found.user, mode: found.mode, entry: { method: 'wrapper', original: null } },
        creates: [aside(chain)],
      };
    }
    case 'user': {
      if (found.shell && found.bytes) {
        const entry: RecordEntry = {
          method: 'block',
          original: { sha256: sha256(found.bytes), mode: found.mode, symlink: false },
        };
        return { step: { do: 'block', bytes: withBlock(found.bytes, name), mode: found.mode, entry }, creates: [] };
      }
      const chain: Chain = { at: found.symlink ? 'link' : 'sibling', required: found.runs };
      const original = found.symlink
        ? { sha256: sha256(fs.readlinkSync(file)), mode: 0, symlink: true }
        : { sha256: sha256(found.bytes ?? ''), mode: found.mode, symlink: false };
      return {
        step: {
          do: 'aside',
          chain,
          from: found.symlink ? 'link' : 'file',
          mode: found.mode,
          entry: { method: 'wrapper', original },
        },
        creates: [aside(chain)],
      };
    }
  }
}

function apply(dir: string, name: string, file: string, step: Step): void {
  switch (step.do) {
    case 'keep':
      return;
    case 'wrapper':
      writeAtomic(file, wrapperScript(name, step.chain), 0o755);
      return;
    case 'block':
      writeAtomic(file, step.bytes, step.mode);
      return;
    case 'aside': {
      // Kept aside first (a hard link, a new symlink, a copy), then the wrapper replaces the hook:
      // there is no moment without a hook while a commit runs.
      const kept = keptPath(dir, name, step.chain.at);
      if (step.chain.at === 'link') {
        fs.mkdirSync(path.dirname(kept), { recursive: true });
        fs.symlinkSync(keptLinkTarget(fs.readlinkSync(file)), kept);
      } else if (step.from === 'file') {
        fs.linkSync(file, kept);
      } else if (Buffer.isBuffer(step.from)) {
        writeAtomic(kept, step.from, step.mode);
      }
      writeAtomic(file, wrapperScript(name, step.chain), 0o755);
    }
  }
}

const TRACKED_WHY =
  'the repository tracks it (core.hooksPath is inside the worktree) and git xet does not rewrite tracked files; put the block that git xet hooks block <hook> prints after its shebang line and commit it (hooks/README.md)';
const UNTRACKED_WHY =
  'it would add a file git does not ignore to the worktree (it would show as untracked and be captured and committed); commit the hook with the block of git xet hooks block <hook> in it, or ignore it';

function skippedAll(dir: string, reason: string, extra: Partial<HooksResult> = {}): HooksResult {
  return { dir, ...extra, hooks: HOOK_NAMES.map((name) => ({ name, state: 'skipped', reason })) };
}

export interface InstallOptions {
  /** Install what can be installed and report the rest as `skipped` (init, ensureHooks); without
   * it a hook that must be skipped is HOOK_CONFLICT before anything is written. */
  partial?: boolean;
}

/** Idempotent; safe to run twice at once. */
const IGNORE_ALL = '*\n';

function makeIgnoredHooksDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  const ignore = path.join(dir, '.gitignore');
  if (!fs.existsSync(ignore)) writeAtomic(ignore, Buffer.from(IGNORE_ALL), 0o644);
}

/** Undo makeIgnoredHooksDir: only what git xet put there, and the directory if nothing else is. */
function removeIgnoredHooksDir(dir: string): void {
  const ignore = path.join(dir, '.gitignore');
  try {
    if (fs.readFileSync(ignore, 'utf8') === IGNORE_ALL) fs.rmSync(ignore);
    fs.rmdirSync(dir);
  } catch {
    // something else lives there now: it stays
  }
}

export async function installHooks(repo: Repo, opts: InstallOptions = {}): Promise<HooksResult> {
  // The key before git reads the config: a change in between makes the next ensureHooks ask again.
  const key = configKey(repo);
  const dir = await hooksDir(repo);
  const place = await placeOf(repo, dir, true);
  const extra: Partial<HooksResult> = place.shared ? { shared: true } : {};
  const kind = dirKind(dir);
  if (kind === 'other') {
    if (opts.partial) return skippedAll(dir, DISABLED_WHY, { ...extra, disabled: true });
    makeHooksDir(dir); // throws HOOK_CONFLICT
  }
  let created = false;
  if (kind === 'missing') {
    if (place.worktree) {
      // A relative core.hooksPath (husky's .husky/_) names a directory in each worktree; a linked
      // worktree or a fork has none until husky runs there. Git would run no hook in it, so the
      // guard would be open: make it as husky makes its own, ignored as a whole (`.gitignore`: `*`),
      // so `git status` stays clean, and remember that uninstall removes it.
      makeIgnoredHooksDir(dir);
      created = true;
    } else makeHooksDir(dir);
  }
  const unlock = lockHooks(repo);
  try {
    // Look at every file before changing any: a conflict in the last one leaves the first alone.
    const plan = HOOK_NAMES.map((name) => {
      const file = path.join(dir, name);
      const found = inspect(file, name);
      return { name, file, found, ...stepFor(dir, name, file, found) };
    });
    const skipped = new Map<string, string>();
    if (place.worktree) {
      const writes = plan.filter((p) => p.step.do !== 'keep');
      const facts = await worktreeFacts(repo, [...writes.map((p) => p.file), ...writes.flatMap((p) => p.creates)]);
      for (const p of writes) {
        if (p.found.kind !== 'none' && facts.tracked.has(p.file)) skipped.set(p.name, TRACKED_WHY);
        else if (p.creates.some((c) => !facts.ignored.has(c))) skipped.set(p.name, UNTRACKED_WHY);
      }
    }
    if (skipped.size > 0 && !opts.partial) {
      const files = [...skipped.keys()].map((n) => path.relative(repo.worktree, path.join(dir, n)));
      const why = [...new Set(skipped.values())].join('; ');
      throw new XetError(
        'HOOK_CONFLICT',
        `cannot install the guard into ${files.join(', ')}: ${why}. git xet init (and task run) install the others and report these`,
        { files, dir },
      );
    }
    const record = readRecord(repo);
    const prior = record.dirs[dir];
    const entries: Record<string, RecordEntry> = {};
    let wrote = 0;
    for (const { name, file, step } of plan) {
      if (skipped.has(name)) continue;
      apply(dir, name, file, step);
      // What install first found stays the reference for uninstall's exact/edited.
      const before = prior?.hooks[name];
      entries[name] = step.do === 'keep' && before?.method === step.entry.method ? before : step.entry;
      if (step.do !== 'keep' && ++wrote === 1) await faultPoint('hooks:mid-install');
    }
    record.dirs[dir] = {
      template: templateSha(),
      installedAt: new Date().toISOString(),
      hooks: entries,
      ...(created || prior?.created ? { created: true } : {}),
    };
    record.worktrees[real(repo.gitDir)] = { dir, configKey: key };
    writeRecord(repo, record);
    return {
      dir,
      ...extra,
      hooks: HOOK_NAMES.map((name) =>
        skipped.has(name)
          ? { name, state: 'skipped', reason: skipped.get(name) }
          : stateOf(inspect(path.join(dir, name), name), true, dir, name),
      ),
    };
  } finally {
    unlock();
  }
}

export interface UninstallOptions {
  /** Also from a hooks directory outside this repository, which other repositories may rely on. */
  force?: boolean;
}

export async function uninstallHooks(repo: Repo, opts: UninstallOptions = {}): Promise<HooksResult> {
  const dir = await hooksDir(repo);
  if (dirKind(dir) !== 'dir') {
    return {
      dir,
      ...(dirKind(dir) === 'other' ? { disabled: true as const } : {}),
      hooks: HOOK_NAMES.map((name) => ({ name, state: 'absent' })),
    };
  }
  const place = await placeOf(repo, dir, true);
  if (place.shared && !opts.force) {
    throw new XetError(
      'HOOK_CONFLICT',
      `the hooks directory ${dir} is outside this repository (a global or shared core.hooksPath): other repositories may rely on its guard hooks, and removing them lets commits through under their dead runners' guards; pass --force to remove them anyway`,
      { dir, shared: true },
    );
  }
  const unlock = lockHooks(repo);
  try {
    const record = readRecord(repo);
    const recorded = record.dirs[dir]?.hooks ?? {};
    const plan = HOOK_NAMES.map((name) => {
      const file = path.join(dir, name);
      const found = inspect(file, name);
      if (found.kind === 'none' || found.kind === 'user') {
        for (const at of ['sibling', 'link'] as const) {
          if (lexists(keptPath(dir, name, at))) {
            throw conflict(
              file,
              `${chainRel(name, at)} holds the hook git xet kept aside, but ${name} is no longer git xet's: move one of them yourself`,
            );
          }
        }
      }
      return { name, file, found };
    });
    const tracked = place.worktree
      ? (
          await worktreeFacts(
            repo,
            plan.filter((p) => p.found.kind !== 'none').map((p) => p.file),
          )
        ).tracked
      : new Set<string>();
    const hooks: HookState[] = [];
    for (const { name, file, found } of plan) {
      const rec = recorded[name];
      if ((found.kind === 'block' || found.kind === 'wrapper') && tracked.has(file)) {
        // Committed by the user (git xet hooks block): theirs to keep or remove.
        hooks.push({
          ...stateOf(found, true, dir, name),
          restored: 'tracked',
          reason: 'the repository tracks this file: git xet leaves it as committed',
        });
      } else if (found.kind === 'block') {
        const mode = rec?.original && !rec.original.symlink ? rec.original.mode : found.mode;
        writeAtomic(file, found.user, mode);
        const exact = rec?.original?.sha256 === sha256(found.user);
        hooks.push({ name, state: 'absent', restored: exact ? 'exact' : 'edited' });
      } else if (found.kind === 'wrapper') {
        const kept = keptOf(dir, name, found.chain);
        if (kept) {
          const at = kept.endsWith(CHAINED_SUFFIX) ? 'sibling' : 'link';
          const back = originalOfKept(kept, at);
          const st = fs.lstatSync(kept);
          if (at === 'link' && st.isSymbolicLink()) {
            symlinkAtomic(restoredLinkTarget(fs.readlinkSync(kept)), file);
            fs.rmSync(kept, { force: true });
          } else {
            fs.renameSync(kept, file);
          }
          hooks.push({ name, state: 'absent', restored: back?.sha256 === rec?.original?.sha256 ? 'exact' : 'edited' });
        } else if (found.chain === null) {
          fs.rmSync(file, { force: true });
          hooks.push({ name, state: 'absent', restored: 'removed' });
        } else {
          fs.rmSync(file, { force: true });
          hooks.push({
            name,
            state: 'absent',
            restored: 'lost',
            reason: 'the hook git xet chained was gone (deleted since install): nothing to put back',
          });
        }
      } else {
        hooks.push({ name, state: found.kind === 'user' && rec ? 'foreign' : 'absent' });
      }
    }
    try {
      fs.rmdirSync(path.join(dir, CHAINED_DIR));
    } catch {
      // not there, or holds something that is not ours to remove
    }
    if (record.dirs[dir]?.created) removeIgnoredHooksDir(dir);
    delete record.dirs[dir];
    for (const [k, w] of Object.entries(record.worktrees)) if (w.dir === dir) delete record.worktrees[k];
    writeRecord(repo, record);
    return { dir, ...(place.shared ? { shared: true as const } : {}), hooks };
  } finally {
    unlock();
  }
}

export async function hooksStatus(repo: Repo): Promise<HooksResult> {
  const dir = await hooksDir(repo);
  const place = await placeOf(repo, dir, true);
  const extra: Partial<HooksResult> = place.shared ? { shared: true } : {};
  if (dirKind(dir) === 'other') {
    return {
      dir,
      ...extra,
      disabled: true,
      intact: false,
      hooks: HOOK_NAMES.map((name) => ({ name, state: 'absent' })),
    };
  }
  const recorded = readRecord(repo).dirs[dir]?.hooks ?? {};
  const hooks = HOOK_NAMES.map((name) =>
    stateOf(inspect(path.join(dir, name), name), Boolean(recorded[name]), dir, name),
  );
  return { dir, ...extra, intact: hooks.every((h) => h.state === 'installed' || h.state === 'chained'), hooks };
}

export interface HooksIntact {
  intact: boolean;
  /** The hooks directory git xet last installed into for this worktree (null: never). */
  dir: string | null;
  /** What is wrong, one line per hook (or about the record). */
  problems: string[];
}

/**
 * Whether this worktree's guard hooks are all in place, without starting git: one read of
 * hooks.json, a stat of each config file, a read of each hook. For whatever runs when a task may
 * have run the project's install (simple-git-hooks, husky rewrite or delete hooks): a `false`
 * means a dead runner's guard would not stop `git commit` (git xet's own commands still refuse).
 */
export function hooksIntact(repo: Repo): HooksIntact {
  const rec = readRecord(repo);
  const w = rec.worktrees[real(repo.gitDir)];
  if (!w) return { intact: false, dir: null, problems: ['git xet has not installed its hooks for this worktree'] };
  const problems: string[] = [];
  if (w.configKey !== configKey(repo)) problems.push('the Git config changed since the hooks were installed');
  for (const name of HOOK_NAMES) {
    try {
      const st = stateOf(inspect(path.join(w.dir, name), name), true, w.dir, name);
      if (st.state !== 'installed' && st.state !== 'chained') {
        problems.push(`${name}: ${st.state}${st.reason ? ` (${st.reason})` : ''}`);
      }
    } catch (e) {
      problems.push(`${name}: ${(e as Error).message}`);
    }
  }
  return { intact: problems.length === 0, dir: w.dir, problems };
}

export interface EnsureResult {
  /** intact: nothing to do; installed: (re)installed now; partial: some hooks could not be
   * installed (skipped: tracked, or would be untracked files in the worktree); disabled:
   * core.hooksPath is not a directory (Git runs no hook); conflict: a hook file stops install. In
   * the last three the hook half of the guard is missing: git xet's own checks still refuse. */
  state: 'intact' | 'installed' | 'partial' | 'disabled' | 'conflict';
  dir: string | null;
  /** partial, disabled, conflict: what to tell the user. */
  message?: string;
  skipped?: string[];
}

/** Install if not yet installed (task run calls this; cheap when they are there: no git). Never
 * throws HOOK_CONFLICT: a task still runs where hooks cannot go, and the caller warns. */
export async function ensureHooks(repo: Repo): Promise<EnsureResult> {
  const now = hooksIntact(repo);
  if (now.intact) return { state: 'intact', dir: now.dir };
  let r: HooksResult;
  try {
    r = await installHooks(repo, { partial: true });
  } catch (e) {
    if (e instanceof XetError && e.code === 'HOOK_CONFLICT') {
      return { state: 'conflict', dir: null, message: e.message };
    }
    throw e;
  }
  if (r.disabled) {
    return {
      state: 'disabled',
      dir: r.dir,
      message: `core.hooksPath is ${r.dir}, not a directory: Git runs no hooks, so only git xet's own commands refuse writes under a dead runner's guard`,
    };
  }
  const skipped = r.hooks.filter((h) => h.state === 'skipped');
  if (skipped.length > 0) {
    return {
      state: 'partial',
      dir: r.dir,
      skipped: skipped.map((h) => h.name),
      message: `guard hooks not installed in ${r.dir}: ${skipped.map((h) => `${h.name} (${h.reason})`).join('; ')}`,
    };
  }
  return { state: 'installed', dir: r.dir };
}
