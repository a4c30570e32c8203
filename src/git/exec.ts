// The one place that spawns git. Everything else asks for git through these functions, so the
// environment (no pager, no prompts, locale), error mapping and output decoding are uniform.
// Outputs that can be large are streamed or kept as Buffers; NUL-separated (-z) output is the rule
// wherever paths appear, because paths may contain newlines.

import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { startProcess } from './spawn';

export interface GitOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** Bytes written to stdin (then closed). */
  input?: string | Buffer;
  /** Exit codes that are results rather than failures (e.g. 1 for `diff --quiet`). */
  okCodes?: number[];
  /**
   * Kill git when this process dies (SIGKILL included), through setpriv(1)'s parent-death signal:
   * for work that must not outlive a lock this process holds (gc's repack under the objects lock).
   * Without setpriv, git runs as usual.
   */
  dieWithParent?: boolean;
  /** gitToFile: aborted, git is killed and the call fails with CANCELLED (a relayed push whose
   * client went away stops writing its pack). */
  signal?: AbortSignal;
}

let setprivPath: string | null | undefined;
function setpriv(): string | null {
  if (setprivPath === undefined) {
    setprivPath = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => fs.existsSync(p)) ?? null;
  }
  return setprivPath;
}

export interface GitResult {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/**
 * Variables that choose a repository, index or object store. They are never inherited: a command
 * meant for the repository being restored must not act on the one named by the caller's GIT_DIR.
 * Only the first lookup of the caller's own repository reads them (see callerRepoEnv), and every
 * later command names its repository explicitly.
 */
const REPO_ENV = [
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_INDEX_FILE',
  'GIT_OBJECT_DIRECTORY',
  'GIT_ALTERNATE_OBJECT_DIRECTORIES',
  'GIT_COMMON_DIR',
  'GIT_NAMESPACE',
  'GIT_PREFIX',
  'GIT_QUARANTINE_PATH',
];

/** The caller's repository-selecting variables, for locating the repository the user means. */
export function callerRepoEnv(): Record<string, string | undefined> {
  return Object.fromEntries(REPO_ENV.map((k) => [k, process.env[k]]));
}

function baseEnv(extra?: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of REPO_ENV) delete env[k];
  // GIT_CONFIG makes `git config` (and no other git command) read that one file, and refuse
  // --local: git xet reads the config git's own commands use.
  delete env.GIT_CONFIG;
  env.GIT_TERMINAL_PROMPT = '0';
  env.GIT_PAGER = 'cat';
  env.LC_ALL = 'C';
  env.LANG = 'C';
  // Optional locks would make read-only commands like `status` rewrite the index: never.
  env.GIT_OPTIONAL_LOCKS = '0';
  for (const [k, v] of Object.entries(extra ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/** The environment every git child gets (for a spawn outside these wrappers: object-reader.ts). */
export function gitSpawnEnv(extra?: Record<string, string | undefined>): NodeJS.ProcessEnv {
  return baseEnv(extra);
}

function failure(args: string[], code: number | null, stderr: string, cwd?: string): XetError {
  const first = stderr.trim().split('\n').slice(-3).join(' | ');
  return new XetError('GIT_FAILED', `git ${args.slice(0, 3).join(' ')} failed: ${first || `exit ${code}`}`, {
    args,
    exitCode: code,
    stderr: stderr.slice(0, 4000),
    cwd,
  });
}

/** Run git to completion, buffering stdout. For outputs bounded by repository metadata, not file data. */
export function git(args: string[], opts: GitOptions = {}): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    const wrapper = opts.dieWithParent ? setpriv() : null;
    const child = wrapper
      ? startProcess(wrapper, ['--pdeathsig', 'KILL', '--', 'git', ...args], { cwd: opts.cwd, env: baseEnv(opts.env) })
      : startProcess('git', args, { cwd: opts.cwd, env: baseEnv(opts.env) });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.stdin.on('error', () => {
      /* git may exit before reading all input; the exit code tells */
    });
    child.exited.then(
      ({ code }) => {
        const stderr = Buffer.concat(err).toString('utf8');
        const ok = code === 0 || (code !== null && (opts.okCodes ?? []).includes(code));
        if (!ok) reject(failure(args, code, stderr, opts.cwd));
        else resolve({ code: code ?? 0, stdout: Buffer.concat(out), stderr });
      },
      (e: Error) => reject(new XetError('GIT_FAILED', `cannot run git: ${e.message}`, { args })),
    );
    if (opts.input !== undefined) child.stdin.end(opts.input);
    else child.stdin.end();
  });
}

/** Run git with its stdout written straight to a file (packs: sizes bounded by file data). */
export async function gitToFile(args: string[], file: string, opts: GitOptions = {}): Promise<void> {
  const fd = fs.openSync(file, 'wx');
  let child;
  try {
    child = startProcess('git', args, { cwd: opts.cwd, env: baseEnv(opts.env), stdoutFd: fd });
  } finally {
    fs.closeSync(fd); // the child has its own copy
  }
  const err: Buffer[] = [];
  child.stderr.on('data', (b: Buffer) => err.push(b));
  child.stdin.on('error', () => undefined); // killed before it read its input
  child.stdin.end(opts.input ?? '');
  const stop = (): void => child.kill('SIGKILL');
  if (opts.signal?.aborted) stop();
  else opts.signal?.addEventListener('abort', stop, { once: true });
  const { code } = await child.exited
    .catch((e: Error) => {
      throw new XetError('GIT_FAILED', `cannot run git: ${e.message}`, { args });
    })
    .finally(() => opts.signal?.removeEventListener('abort', stop));
  if (opts.signal?.aborted) throw new XetError('CANCELLED', 'interrupted: its caller went away', { args });
  if (code !== 0) throw failure(args, code, Buffer.concat(err).toString('utf8'), opts.cwd);
}

/** Run git and return trimmed stdout as text. */
export async function gitText(args: string[], opts: GitOptions = {}): Promise<string> {
  const r = await git(args, opts);
  return r.stdout.toString('utf8').replace(/\n$/, '');
}

/** Run git and split -z output into strings (the trailing empty field is dropped). */
export async function gitZ(args: string[], opts: GitOptions = {}): Promise<string[]> {
  const r = await git(args, opts);
  return splitZ(r.stdout);
}

export function splitZ(buf: Buffer): string[] {
  if (buf.length === 0) return [];
  const parts = buf.toString('utf8').split('\0');
  if (parts[parts.length - 1] === '') parts.pop();
  return parts;
}

/** Synchronous variant for the few places that run before any async machinery (version checks). */
export function gitSync(args: string[], cwd?: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('git', args, { cwd, env: baseEnv(), encoding: 'utf8' });
  return { code: r.status ?? -1, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

let cachedVersion: [number, number, number] | null = null;

function parseVersion(stdout: string): [number, number, number] {
  const m = /git version (\d+)\.(\d+)\.(\d+)/.exec(stdout);
  if (!m) throw new XetError('GIT_FAILED', 'cannot determine the git version', { output: stdout });
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** The git binary's version as [major, minor, patch] (asked once per process). */
export function gitVersion(): [number, number, number] {
  cachedVersion ??= parseVersion(gitSync(['--version']).stdout);
  return cachedVersion;
}

/** Oldest git with everything git xet relies on (bulk-checkin streaming in update-index, ls-files --debug flags). */
export const MIN_GIT: [number, number] = [2, 38];

function refuseOldGit([maj, min, patch]: [number, number, number]): void {
  if (maj < MIN_GIT[0] || (maj === MIN_GIT[0] && min < MIN_GIT[1])) {
    throw new XetError(
      'GIT_TOO_OLD',
      `git ${maj}.${min}.${patch} is too old; git xet needs git ${MIN_GIT.join('.')} or newer`,
      {
        found: `${maj}.${min}.${patch}`,
        required: MIN_GIT.join('.'),
      },
    );
  }
}

/** Refuses a git older than MIN_GIT. Asked without blocking: the first command of a process asks git while it starts its
 * other first git (spawnSync forks the whole node process and waits; this one is posix_spawn). */
export async function requireGitVersion(): Promise<void> {
  if (!cachedVersion) {
    const r = await git(['--version']);
    cachedVersion ??= parseVersion(r.stdout.toString('utf8'));
  }
  refuseOldGit(cachedVersion);
}

/** Quote a path for use in a literal pathspec list fed through --pathspec-from-file with NULs. */
export function joinZ(items: Iterable<string>): Buffer {
  const chunks: Buffer[] = [];
  for (const s of items) {
    chunks.push(Buffer.from(s, 'utf8'), Buffer.from([0]));
  }
  return Buffer.concat(chunks);
}

export interface GitStream {
  /** git's stdout, read by the caller at its own pace (git blocks when the pipe is full). */
  stdout: NodeJS.ReadableStream;
  /** Settles when git has exited: rejects with GIT_FAILED on a non-zero exit. */
  done: Promise<void>;
  /** Stop git early (the caller gave up on its output). */
  kill(): void;
}

/** Run git with stdout as a stream, for outputs bounded by file data (object contents). */
export function gitStream(args: string[], opts: GitOptions = {}): GitStream {
  const child = startProcess('git', args, { cwd: opts.cwd, env: baseEnv(opts.env) });
  const err: Buffer[] = [];
  let errBytes = 0;
  child.stderr.on('data', (b: Buffer) => {
    if (errBytes < 64 * 1024) err.push(b);
    errBytes += b.length;
  });
  child.stdin.on('error', () => undefined);
  const done = child.exited.then(
    ({ code, signal }) => {
      if (code !== 0) throw failure(args, code ?? (signal ? 128 : null), Buffer.concat(err).toString('utf8'), opts.cwd);
    },
    (e: Error) => {
      throw new XetError('GIT_FAILED', `cannot run git: ${e.message}`, { args });
    },
  );
  // A caller that stops early must not leave an unhandled rejection behind.
  done.catch(() => undefined);
  child.stdin.end(opts.input ?? '');
  return { stdout: child.stdout, done, kill: () => child.kill('SIGKILL') };
}
