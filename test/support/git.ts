// Thin wrappers over the real `git` binary plus helpers to build fixture repositories.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Sandbox } from './sandbox';

export interface RunResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: Buffer;
}

export interface RunOptions {
  input?: string | Buffer;
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
}

export function run(sb: Sandbox, cwd: string, cmd: string, args: readonly string[], opts: RunOptions = {}): RunResult {
  const r = spawnSync(cmd, args, {
    cwd,
    env: { ...sb.env, ...(opts.env ?? {}) },
    input: typeof opts.input === 'string' ? Buffer.from(opts.input, 'utf8') : opts.input,
    timeout: opts.timeoutMs ?? 120_000,
    maxBuffer: 1024 * 1024 * 1024,
    encoding: 'buffer',
  });
  if (r.error) throw new Error(`${cmd} ${args.join(' ')} (cwd ${cwd}) failed to run: ${r.error.message}`);
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

function describe(args: readonly string[], cwd: string, r: RunResult): string {
  return (
    `git ${args.join(' ')} (cwd ${cwd}) exited ${r.status}${r.signal ? ` signal ${r.signal}` : ''}\n` +
    `stdout: ${r.stdout.toString('utf8').slice(0, 2000)}\nstderr: ${r.stderr.toString('utf8').slice(0, 2000)}`
  );
}

/** Runs git; returns the full result whatever the exit status. */
export function gitTry(sb: Sandbox, cwd: string, args: readonly string[], opts: RunOptions = {}): RunResult {
  return run(sb, cwd, 'git', args, opts);
}

/** Runs git; throws unless it exits 0; returns stdout as UTF-8. */
export function git(sb: Sandbox, cwd: string, args: readonly string[], opts: RunOptions = {}): string {
  const r = gitTry(sb, cwd, args, opts);
  if (r.status !== 0) throw new Error(describe(args, cwd, r));
  return r.stdout.toString('utf8');
}

/** A fixture repository (or linked worktree) rooted at dir. */
export class Repo {
  constructor(
    readonly sb: Sandbox,
    readonly dir: string,
  ) {}

  git(...args: string[]): string {
    return git(this.sb, this.dir, args);
  }

  gitTry(...args: string[]): RunResult {
    return gitTry(this.sb, this.dir, args);
  }

  gitInput(input: string | Buffer, ...args: string[]): string {
    return git(this.sb, this.dir, args, { input });
  }

  p(rel: string): string {
    return path.join(this.dir, rel);
  }

  /** Writes a file (creating parent directories); mode is applied with chmod when given. */
  write(rel: string, content: string | Buffer, mode?: number): void {
    const abs = this.p(rel);
    fs.mkdirSync(path.dirname(abs), { recursive: true });
    fs.writeFileSync(abs, content);
    if (mode !== undefined) fs.chmodSync(abs, mode);
  }

  read(rel: string): Buffer {
    return fs.readFileSync(this.p(rel));
  }

  symlink(target: string, rel: string): void {
    const abs = this.p(rel);
    fs.mkdirSync(path.dirname(abs), { recursive: true });
    fs.symlinkSync(target, abs);
  }

  mkdir(rel: string): void {
    fs.mkdirSync(this.p(rel), { recursive: true });
  }

  rm(rel: string): void {
    fs.rmSync(this.p(rel), { recursive: true, force: true });
  }

  chmod(rel: string, mode: number): void {
    fs.chmodSync(this.p(rel), mode);
  }

  /** Writes the given files, stages everything (git add -A) and commits. */
  commit(message: string, files: Record<string, string | Buffer> = {}): string {
    for (const [rel, content] of Object.entries(files)) this.write(rel, content);
    this.git('add', '-A');
    this.git('commit', '-q', '--allow-empty', '-m', message);
    return this.git('rev-parse', 'HEAD').trim();
  }

  /** Path of a file inside the git dir (per-worktree aware), e.g. gitPath('index'). */
  gitPath(name: string): string {
    const rel = this.git('rev-parse', '--git-path', name).trim();
    return path.resolve(this.dir, rel);
  }

  commonDir(): string {
    return path.resolve(this.dir, this.git('rev-parse', '--git-common-dir').trim());
  }
}

/** git init a new repository at sb.path(name). */
export function initRepo(sb: Sandbox, name: string, initArgs: string[] = []): Repo {
  const dir = sb.path(name);
  fs.mkdirSync(dir, { recursive: true });
  git(sb, dir, ['init', '-q', ...initArgs]);
  return new Repo(sb, dir);
}

/** Deterministic pseudo-random bytes (xorshift), handy for binary fixtures. */
export function pseudoRandomBytes(n: number, seed = 1): Buffer {
  const out = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}
