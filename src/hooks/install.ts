// Installing git xet's guard hooks into the hooks directory Git uses (.git/hooks or core.hooksPath),
// chaining hooks already there and putting them back byte for byte on uninstall. OWNER: hooks helper.
//
// Each hook file gets the block of hooks/guard.sh (POSIX sh, builtins only: hooks run on every
// commit and must not start node). Two ways to chain a hook that is already there:
//   block    an executable shell script (#!…/sh, bash, dash, ksh, zsh, env sh…): the block goes in
//            right after its shebang line. The user's code runs in the same process with the same
//            $0, so husky's `. "$(dirname "$0")/h"` and `basename "$0"` still work.
//   wrapper  anything else (no hook, a binary, python, a symlink, a non-executable file): the old
//            file moves to <hooks>/xet-chained/<name> (same basename) and <hooks>/<name> becomes a
//            small sh script: the block, then `exec` of the moved hook if it is executable.
// The files themselves say what was done (a block can be cut out again, a moved hook is in
// xet-chained/), so a run killed half way is repaired by running again; <common>/xet/hooks.json
// records the directory, the originals' sha256 and modes, and what ensureHooks needs to answer
// without spawning git.
import Database from 'better-sqlite3';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git } from '../git/exec';
import type { Repo } from '../git/repo';
import { repoOpts } from '../git/repo';
import { faultPoint } from '../testing/fault-points';

export interface HookState {
  name: string;
  /** absent: not installed; installed: ours alone; chained: ours, running the user's hook too;
   * foreign: we installed it and something replaced the file since; modified: our block is there
   * but not as git xet writes it (edited, or from another version). */
  state: 'absent' | 'installed' | 'chained' | 'foreign' | 'modified';
  /** How the user's hook is chained (block, wrapper); absent when nothing of ours is there. */
  method?: 'block' | 'wrapper';
  /** uninstall: whether the restored hook is byte for byte the one install found ('exact'), or the
   * user changed their part since ('edited'). */
  restored?: 'exact' | 'edited' | 'removed';
}

export interface HooksResult {
  dir: string;
  hooks: HookState[];
}

/** The hooks git xet installs: every Git command that moves a ref runs reference-transaction;
 * pre-commit, pre-merge-commit and pre-rebase refuse earlier, before Git has written anything. */
export const HOOK_NAMES = ['pre-commit', 'pre-merge-commit', 'pre-rebase', 'reference-transaction'] as const;
export const CHAINED_DIR = 'xet-chained';
export const RECORD_SCHEMA = 'xet.hooks/v1';

const BEGIN = '# >>> git xet guard';
const END = '# <<< git xet guard';
const WRAPPER_MARK = '# git xet hook wrapper:';
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
export function wrapperScript(name: string): string {
  return (
    `#!/bin/sh\n${guardBlock(name)}` +
    `${WRAPPER_MARK} the hook that was here before git xet's is ${CHAINED_DIR}/${name}\n` +
    `case $0 in */*) __xet_c=\${0%/*} ;; *) __xet_c=. ;; esac\n` +
    `__xet_c=$__xet_c/${CHAINED_DIR}/${name}\n` +
    `if [ -x "$__xet_c" ]; then exec "$__xet_c" "$@"; fi\n` +
    `exit 0\n`
  );
}

function sha256(b: string | Buffer): string {
  return crypto.createHash('sha256').update(b).digest('hex');
}

// ---------------------------------------------------------------------------------------------
// What a hook file holds

type Found =
  | { kind: 'none' }
  | { kind: 'user'; bytes: Buffer | null; mode: number; shell: boolean; symlink: boolean }
  | { kind: 'block'; user: Buffer; mode: number; current: boolean; exec: boolean }
  | { kind: 'wrapper'; mode: number; current: boolean };

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

function inspect(file: string, name: string): Found {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'none' };
    throw e;
  }
  if (st.isSymbolicLink()) return { kind: 'user', bytes: null, mode: 0, shell: false, symlink: true };
  if (!st.isFile()) throw conflict(file, 'it is not a regular file');
  // A hook is a small script; one that is huge is not ours to rewrite.
  if (st.size > 4 * 1024 * 1024) throw conflict(file, 'it is over 4 MiB');
  const bytes = fs.readFileSync(file);
  const mode = st.mode & 0o7777;
  const text = bytes.toString('latin1');
  const spans = blockSpans(text, file);
  if (spans.length === 0) {
    return { kind: 'user', bytes, mode, shell: (mode & 0o111) !== 0 && isShellScript(bytes), symlink: false };
  }
  if (
    text.startsWith('#!/bin/sh\n') &&
    spans[0][0] === 10 &&
    text.slice(spans[spans.length - 1][1]).startsWith(WRAPPER_MARK)
  ) {
    return { kind: 'wrapper', mode, current: text === wrapperScript(name) && (mode & 0o111) === 0o111 };
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
  const exec = (mode & 0o111) !== 0;
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

/** Replace `file` atomically: Git may be running the hook this very moment. */
function writeAtomic(file: string, data: string | Buffer, mode: number): void {
  const tmp = path.join(
    path.dirname(file),
    `.${path.basename(file)}.xet-${process.pid}-${crypto.randomBytes(4).toString('hex')}.tmp`,
  );
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

interface HooksRecord {
  schema: typeof RECORD_SCHEMA;
  dir: string;
  template: string;
  installedAt: string;
  /** What decides the hooks directory (config files' stat, config env): unchanged, the cached
   * `dir` still holds and ensureHooks needs no git. */
  configKey: string;
  hooks: Record<string, RecordEntry>;
}

function recordPath(repo: Repo): string {
  return path.join(repo.commonDir, 'xet', 'hooks.json');
}

function readRecord(repo: Repo): HooksRecord | null {
  try {
    if (fs.statSync(recordPath(repo)).size > 1024 * 1024) return null;
    const text = fs.readFileSync(recordPath(repo), 'utf8');
    const r = JSON.parse(text) as HooksRecord;
    if (r?.schema !== RECORD_SCHEMA || typeof r.dir !== 'string' || typeof r.hooks !== 'object' || !r.hooks)
      return null;
    return r;
  } catch {
    // missing or unreadable: the hook files themselves say what is installed
    return null;
  }
}

function writeRecord(repo: Repo, r: HooksRecord): void {
  const file = recordPath(repo);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  writeAtomic(file, `${JSON.stringify(r, null, 2)}\n`, 0o644);
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
  return path.resolve(repo.worktree, dir);
}

/** core.hooksPath=/dev/null (hooks switched off) or another non-directory: nothing can go there. */
function makeHooksDir(dir: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
    if (fs.statSync(dir).isDirectory()) return;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST' && code !== 'ENOTDIR') throw e;
  }
  throw new XetError(
    'HOOK_CONFLICT',
    `cannot install hooks into ${dir}: it is not a directory (core.hooksPath switches Git's hooks off there)`,
    { dir },
  );
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

/**
 * A hooks directory inside the worktree (core.hooksPath=.githooks) may hold hooks the repository
 * tracks: git xet never rewrites a tracked file (the change would be committed for everyone). Such
 * a hook can carry the guard block itself, committed (then nothing needs writing).
 */
async function refuseTracked(repo: Repo, dir: string, plan: Array<{ name: string; file: string; found: Found }>) {
  const rel = path.relative(repo.worktree, dir);
  if (rel.startsWith('..') || path.isAbsolute(rel)) return;
  const touched = plan.filter(
    (p) =>
      p.found.kind !== 'none' &&
      !(p.found.kind === 'block' && p.found.current) &&
      !(p.found.kind === 'wrapper' && p.found.current),
  );
  if (touched.length === 0) return;
  const r = await git(
    ['ls-files', '-z', '--', ...touched.map((p) => path.relative(repo.worktree, p.file))],
    repoOpts(repo),
  );
  const tracked = r.stdout.toString('utf8').split('\0').filter(Boolean);
  if (tracked.length > 0) {
    throw new XetError(
      'HOOK_CONFLICT',
      `cannot chain ${tracked.join(', ')}: the repository tracks it (core.hooksPath is inside the worktree) and git xet does not rewrite tracked files; put the block that git xet hooks block <hook> prints after its shebang line and commit it (hooks/README.md)`,
      { files: tracked, dir },
    );
  }
}

function stateOf(found: Found, recorded: boolean, dir: string, name: string): HookState {
  switch (found.kind) {
    case 'none':
    case 'user':
      return { name, state: recorded ? 'foreign' : 'absent' };
    case 'block':
      return { name, state: found.current ? 'chained' : 'modified', method: 'block' };
    case 'wrapper': {
      if (!found.current) return { name, state: 'modified', method: 'wrapper' };
      const aside = chainedExists(dir, name);
      return { name, state: aside ? 'chained' : 'installed', method: 'wrapper' };
    }
  }
}

function chainedPath(dir: string, name: string): string {
  return path.join(dir, CHAINED_DIR, name);
}
function chainedExists(dir: string, name: string): boolean {
  try {
    fs.lstatSync(chainedPath(dir, name));
    return true;
  } catch {
    return false;
  }
}

function originalOf(dir: string, name: string, found: Found): RecordEntry['original'] {
  if (found.kind === 'block') return { sha256: sha256(found.user), mode: found.mode, symlink: false };
  const aside = chainedPath(dir, name);
  try {
    const st = fs.lstatSync(aside);
    if (st.isSymbolicLink()) return { sha256: sha256(fs.readlinkSync(aside)), mode: 0, symlink: true };
    return { sha256: sha256(fs.readFileSync(aside)), mode: st.mode & 0o7777, symlink: false };
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// install / uninstall / status

/** Idempotent; safe to run twice at once. */
export async function installHooks(repo: Repo): Promise<HooksResult> {
  // The key before git reads the config: a change in between makes the next ensureHooks ask again.
  const key = configKey(repo);
  const dir = await hooksDir(repo);
  makeHooksDir(dir);
  const unlock = lockHooks(repo);
  try {
    // Look at every file before changing any: a conflict in the last one leaves the first alone.
    const plan = HOOK_NAMES.map((name) => {
      const file = path.join(dir, name);
      const found = inspect(file, name);
      const aside = (found.kind === 'user' && !found.shell) || (found.kind === 'block' && !found.exec);
      if (aside && chainedExists(dir, name)) {
        throw conflict(file, `${CHAINED_DIR}/${name} is already there (a hook git xet moved aside earlier)`);
      }
      return { name, file, found };
    });
    await refuseTracked(repo, dir, plan);
    const entries: Record<string, RecordEntry> = {};
    let wrote = 0;
    for (const { name, file, found } of plan) {
      if (found.kind === 'none' || found.kind === 'wrapper') {
        if (found.kind === 'none' || !found.current) writeAtomic(file, wrapperScript(name), 0o755);
        entries[name] = { method: 'wrapper', original: originalOf(dir, name, found) };
      } else if (found.kind === 'block' && !found.exec) {
        // Someone made the hook non-executable (Git skips it): its own part moves aside, still
        // skipped there, and the guard runs from a wrapper.
        const aside = chainedPath(dir, name);
        fs.mkdirSync(path.dirname(aside), { recursive: true });
        writeAtomic(aside, found.user, found.mode);
        writeAtomic(file, wrapperScript(name), 0o755);
        entries[name] = { method: 'wrapper', original: originalOf(dir, name, { kind: 'none' }) };
      } else if (found.kind === 'block') {
        if (!found.current) writeAtomic(file, withBlock(found.user, name), found.mode);
        entries[name] = { method: 'block', original: originalOf(dir, name, found) };
      } else if (found.shell && found.bytes) {
        writeAtomic(file, withBlock(found.bytes, name), found.mode);
        entries[name] = {
          method: 'block',
          original: { sha256: sha256(found.bytes), mode: found.mode, symlink: false },
        };
      } else {
        // Moved aside under its own basename; a hard link (or a new symlink) first, so the hook
        // never goes missing while a commit runs.
        const aside = chainedPath(dir, name);
        fs.mkdirSync(path.dirname(aside), { recursive: true });
        if (found.symlink) fs.symlinkSync(fs.readlinkSync(file), aside);
        else fs.linkSync(file, aside);
        writeAtomic(file, wrapperScript(name), 0o755);
        entries[name] = { method: 'wrapper', original: originalOf(dir, name, { kind: 'none' }) };
      }
      if (++wrote === 1) await faultPoint('hooks:mid-install');
    }
    const record: HooksRecord = {
      schema: RECORD_SCHEMA,
      dir,
      template: templateSha(),
      installedAt: new Date().toISOString(),
      configKey: key,
      hooks: entries,
    };
    writeRecord(repo, record);
    return { dir, hooks: HOOK_NAMES.map((name) => stateOf(inspect(path.join(dir, name), name), true, dir, name)) };
  } finally {
    unlock();
  }
}

export async function uninstallHooks(repo: Repo): Promise<HooksResult> {
  const dir = await hooksDir(repo);
  const unlock = lockHooks(repo);
  try {
    const prev = readRecord(repo);
    const recorded = prev && prev.dir === dir ? prev.hooks : {};
    const plan = HOOK_NAMES.map((name) => {
      const file = path.join(dir, name);
      const found = inspect(file, name);
      if ((found.kind === 'none' || found.kind === 'user') && chainedExists(dir, name)) {
        throw conflict(
          file,
          `${CHAINED_DIR}/${name} holds the hook git xet moved aside, but ${name} is no longer git xet's: move one of them yourself`,
        );
      }
      return { name, file, found };
    });
    const hooks: HookState[] = [];
    for (const { name, file, found } of plan) {
      const rec = recorded[name];
      if (found.kind === 'block') {
        const mode = rec?.original && !rec.original.symlink ? rec.original.mode : found.mode;
        writeAtomic(file, found.user, mode);
        const exact = rec?.original?.sha256 === sha256(found.user);
        hooks.push({ name, state: 'absent', restored: exact ? 'exact' : 'edited' });
      } else if (found.kind === 'wrapper') {
        const aside = chainedPath(dir, name);
        if (chainedExists(dir, name)) {
          const back = originalOf(dir, name, { kind: 'none' });
          fs.renameSync(aside, file);
          hooks.push({ name, state: 'absent', restored: back?.sha256 === rec?.original?.sha256 ? 'exact' : 'edited' });
        } else {
          fs.rmSync(file, { force: true });
          hooks.push({ name, state: 'absent', restored: 'removed' });
        }
      } else {
        hooks.push({ name, state: rec ? 'foreign' : 'absent' });
      }
    }
    try {
      fs.rmdirSync(path.join(dir, CHAINED_DIR));
    } catch {
      // not there, or holds something that is not ours to remove
    }
    fs.rmSync(recordPath(repo), { force: true });
    return { dir, hooks };
  } finally {
    unlock();
  }
}

export async function hooksStatus(repo: Repo): Promise<HooksResult> {
  const dir = await hooksDir(repo);
  const prev = readRecord(repo);
  const recorded = prev && prev.dir === dir ? prev.hooks : {};
  return {
    dir,
    hooks: HOOK_NAMES.map((name) => stateOf(inspect(path.join(dir, name), name), Boolean(recorded[name]), dir, name)),
  };
}

/** Install if not yet installed (task run calls this; cheap when they are there: no git, a read
 * of hooks.json, a stat of each config file and a read of each hook). */
export async function ensureHooks(repo: Repo): Promise<void> {
  const rec = readRecord(repo);
  if (rec && rec.template === templateSha() && rec.configKey === configKey(repo)) {
    const ok = HOOK_NAMES.every((name) => {
      try {
        const file = path.join(rec.dir, name);
        return (fs.statSync(file).mode & 0o111) !== 0 && fs.readFileSync(file, 'latin1').includes(guardBlock(name));
      } catch {
        return false;
      }
    });
    if (ok) return;
  }
  await installHooks(repo);
}
