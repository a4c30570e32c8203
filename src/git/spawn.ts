// Starting a program with three pipes: posix_spawn through the native module where it loaded,
// node's spawn otherwise. Node forks, and fork copies the page tables of the whole process: each
// git a capture starts cost the main thread 5 ms at 40 MB of RSS and 15-20 ms at 250 MB on these
// machines, about a sixth of a re-capture and more in the daemon. posix_spawn shares the memory
// until exec, at under 1 ms whatever the process's size (docs/DESIGN-NOTES.md "Spawning git").
//
// The two routes behave alike: the program is looked up on the child's PATH (as libuv's execvp
// does), it starts with every signal at its default and none blocked, it gets the given environment
// and nothing else, and `exited` settles once it has exited and its stdout and stderr are drained.

import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable, type Writable } from 'node:stream';
import { native } from '../native';

export interface Started {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  /** The exit code, or null and the signal that ended it; rejects when it could not start. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Signal it, unless it has already exited (a reaped pid may be another process's by now). */
  kill(signal?: NodeJS.Signals): void;
}

export interface StartOptions {
  cwd?: string;
  env: NodeJS.ProcessEnv;
  /** An open file for its stdout instead of a pipe (`stdout` is then an empty, ended stream). */
  stdoutFd?: number;
}

/** The stdout of a child whose stdout is a file: nothing to read. */
function ended(): Readable {
  return Readable.from([]);
}

/** Where onPath found a program lately, by name and PATH: a restore starts ~35 gits, and each
 * lookup was a stat and an access per PATH entry before it (~0.7 ms of the main thread). Kept a
 * few seconds, as a shell's hash table keeps it for longer: a git installed earlier on PATH since
 * is found by the next lookup, and one removed since fails posix_spawn, whose caller then starts it
 * through node's spawn, which says what is missing. Only for a PATH of absolute directories (a
 * relative one depends on the directory the child starts in). */
const found = new Map<string, { at: string; until: number }>();
const FOUND_MS = 5000;

/** A program's path on `PATH` as execvp finds it (the first executable regular file), or null. */
function onPath(file: string, env: NodeJS.ProcessEnv, cwd: string): string | null {
  if (file.includes('/')) return path.resolve(cwd, file);
  const dirs = env.PATH ?? '/bin:/usr/bin';
  const key = `${file}\0${dirs}`;
  const now = Date.now();
  const known = found.get(key);
  if (known && known.until > now) return known.at;
  const at = searchPath(file, dirs, cwd);
  if (at && dirs.split(':').every((d) => d.startsWith('/'))) {
    if (found.size > 64) found.clear();
    found.set(key, { at, until: now + FOUND_MS });
  }
  return at;
}

function searchPath(file: string, dirs: string, cwd: string): string | null {
  // ('/bin:/usr/bin' is execvp's default when PATH is unset.)
  for (const dir of dirs.split(':')) {
    const candidate = path.resolve(cwd, dir || '.', file);
    let st: fs.Stats | undefined;
    try {
      st = fs.statSync(candidate, { throwIfNoEntry: false });
    } catch {
      continue; // a directory not searchable by this user, or a file on PATH: execvp skips them too
    }
    if (st?.isFile() && st.mode & 0o111) {
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        return candidate;
      } catch {
        // not ours to run: execvp goes on to the next directory
      }
    }
  }
  return null;
}

// exec.ts's joinZ, which cannot be imported here (exec.ts starts its processes through this module).
const nul = (list: string[]): Buffer => Buffer.from(list.map((s) => `${s}\0`).join(''), 'utf8');

function withNode(file: string, args: string[], opts: StartOptions): Started {
  const child = spawn(file, args, { cwd: opts.cwd, env: opts.env, stdio: ['pipe', opts.stdoutFd ?? 'pipe', 'pipe'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  // stdin and stderr are pipes (the stdio above), so node made them.
  const stdin = child.stdin as Writable;
  stdin.on('error', () => undefined); // as below: the exit status tells
  return {
    stdin,
    stdout: child.stdout ?? ended(),
    stderr: child.stderr as Readable,
    exited,
    kill: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}

const SIGNALS = Object.fromEntries(Object.entries(os.constants.signals).map(([name, n]) => [n, name])) as Record<
  number,
  NodeJS.Signals
>;

// GIT_XET_POSIX_SPAWN=0: node's spawn always (to compare, or should posix_spawn misbehave somewhere).
const posixSpawn = process.env.GIT_XET_POSIX_SPAWN !== '0';

function withPosixSpawn(file: string, args: string[], opts: StartOptions): Started | null {
  const n = native;
  if (!posixSpawn || !n?.spawnPiped) return null;
  let here: string;
  try {
    here = opts.cwd ?? process.cwd();
  } catch {
    return null; // this process's directory is gone: node's spawn runs the child there anyway
  }
  const env = Object.entries(opts.env).flatMap(([k, v]) => (v === undefined ? [] : [`${k}=${v}`]));
  // A NUL would cut a string short; node's spawn refuses such an argument in its own words.
  if ([file, ...args, ...env, opts.cwd ?? ''].some((a) => a.includes('\0'))) return null;
  const resolved = onPath(file, opts.env, here);
  if (!resolved) return null; // node's spawn reports the ENOENT in its own words
  const out = Buffer.alloc(16);
  // '' keeps this process's directory, as node's spawn does without a cwd.
  const err = n.spawnPiped(resolved, nul([file, ...args]), nul(env), opts.cwd ?? '', opts.stdoutFd ?? -1, out);
  // A failure here (a cwd that is gone, a file that vanished since the lookup) is left to node's
  // spawn, which reports it as it always has.
  if (err !== 0) return null;
  const pid = out.readInt32LE(0);
  const stdin = new net.Socket({ fd: out.readInt32LE(4), readable: false, writable: true });
  const piped = opts.stdoutFd === undefined;
  const stdout = piped ? new net.Socket({ fd: out.readInt32LE(8), readable: true, writable: false }) : ended();
  const stderr = new net.Socket({ fd: out.readInt32LE(12), readable: true, writable: false });
  /** Its end, once reaped. */
  let status: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  let open = piped ? 2 : 1;
  let settle: (v: { code: number | null; signal: NodeJS.Signals | null }) => void = () => undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => (settle = resolve));
  const done = (): void => {
    if (status && open === 0) settle(status);
  };
  /** Reap it if it has exited; then do what node does at a child's exit. */
  const tryReap = (): boolean => {
    if (status) return true;
    const st = n.waitPid(pid);
    if (st === -1) return false;
    clearInterval(watch);
    // -2 - errno (ECHILD: something else reaped it, which nothing in this process does: libuv waits
    // only for the pids it started) is reported as an unknown end, which git() calls a failure.
    if (st < -1) status = { code: null, signal: null };
    else if ((st & 0x7f) === 0) status = { code: (st >> 8) & 0xff, signal: null };
    else status = { code: null, signal: SIGNALS[st & 0x7f] ?? 'SIGKILL' };
    // As node at a child's exit: its stdin goes, and output nobody is reading any more is let
    // through (flushStdio), so that the pipes reach their end and `exited` settles even for a
    // caller that paused its reader or never read.
    stdin.destroy();
    if (piped && !stdout.destroyed) stdout.resume();
    if (!stderr.destroyed) stderr.resume();
    done();
    return true;
  };
  // Its exit is learnt apart from its pipes (a reader may have paused them): a light poll that, as
  // node's own child handle, keeps this process alive until the child is reaped. Not unref'd: a
  // paused pipe whose buffer is full is not read and keeps nothing alive, and node would exit with
  // `exited` pending (review helper 15).
  const watch = setInterval(tryReap, 20);
  const closed = (): void => {
    if (--open > 0) return;
    if (status) return done();
    // Its pipes closed a moment before it exited: ask again at once, then shortly (these timers
    // keep the process alive: nothing else may).
    const retry = (delay: number): void => {
      if (tryReap()) return;
      setTimeout(() => retry(Math.min(delay * 2, 50)), delay);
    };
    setImmediate(() => retry(1));
  };
  if (piped) stdout.on('close', closed);
  stderr.on('close', closed);
  // A write after it exited (EPIPE) is told by its exit status, as with node's spawn.
  stdin.on('error', () => undefined);
  return {
    stdin,
    stdout,
    stderr,
    exited,
    kill: (signal = 'SIGTERM') => {
      if (status) return; // reaped: the pid may be another process's by now
      try {
        process.kill(pid, signal);
      } catch {
        // exited meanwhile (not yet reaped: still ours, so not another process's)
      }
      // Its pipes are left alone, as node's spawn leaves them: once it is reaped, unread output is
      // let through and the reader sees the end (destroying them here ended no read: a reader
      // waiting for 'end' waited forever).
    },
  };
}

/** Start `file` with `args`, its stdin, stdout and stderr pipes to this process. */
export function startProcess(file: string, args: string[], opts: StartOptions): Started {
  return withPosixSpawn(file, args, opts) ?? withNode(file, args, opts);
}

/** One route, for the tests that hold the two to the same behaviour: null when posix_spawn is not
 * available or declined this start. */
export function startProcessVia(
  route: 'posix' | 'node',
  file: string,
  args: string[],
  opts: StartOptions,
): Started | null {
  return route === 'posix' ? withPosixSpawn(file, args, opts) : withNode(file, args, opts);
}
