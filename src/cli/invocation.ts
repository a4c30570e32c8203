// Where one CLI invocation runs and prints: its working directory, stdout and stderr. Normally the
// process's own; the daemon (src/daemon/server.ts) runs a relayed command line for a thin
// client (src/daemon/relay.ts) with the client's directory and terminal facts, and collects what the
// command prints to send back. The daemon runs one request at a time, so one current invocation is
// enough.

import type { GitConfig } from '../git/config';
import type { Repo } from '../git/repo';

export interface Invocation {
  cwd(): string;
  stdout(text: string): void;
  stderr(text: string): void;
  /** Whether stderr is a terminal (notes and the progress line go only there). */
  stderrTTY: boolean;
  /** The terminal's width, when stderr is one. */
  columns: number | undefined;
  /** Whether output reaches the terminal as it is written (a progress line needs that; collected
   * output is sent when the command ends). */
  live: boolean;
  /** Whether the daemon runs this line for a thin client (a command may decline it: decline). */
  relayed: boolean;
  /** A relayed line the command will not run here, and why: the client runs it itself. */
  decline(reason: string): void;
  /** A relayed line's: aborted when its client went away (interrupted, killed). */
  signal: AbortSignal | undefined;
  /** A relayed line's: the daemon's repository and config memo (src/daemon/config-memo.ts) when
   * `cwd` is in the daemon's own worktree, else undefined (two git processes fewer per line). */
  warm?: (cwd: string) => Promise<WarmRepo | undefined>;
}

/** The daemon's repository and a reader of its config that asks git only when a file changed. */
export interface WarmRepo {
  repo: Repo;
  readConfig: () => Promise<GitConfig>;
}

const own: Invocation = {
  cwd: () => process.cwd(),
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
  get stderrTTY() {
    return Boolean(process.stderr.isTTY);
  },
  get columns() {
    return process.stderr.columns;
  },
  live: true,
  relayed: false,
  decline: () => {
    throw new Error('only a relayed invocation can be declined');
  },
  signal: undefined,
};

let current: Invocation = own;

export function invocation(): Invocation {
  return current;
}

/** Whether `signal` says the caller went away, once what already reached this process is read: a
 * client that exited has closed its socket, but the daemon learns it only when its event loop reads
 * that, so a check right after a long synchronous step (or a pause) lets the loop turn once first. */
export async function callerGone(signal: AbortSignal | undefined): Promise<boolean> {
  if (!signal) return false;
  if (!signal.aborted) await new Promise((resolve) => setImmediate(resolve));
  return signal.aborted;
}

/** A relayed invocation's captured output, or why the command declined to run it. */
export interface CollectedOutput {
  stdout: string;
  stderr: string;
  declined?: string;
}

/** Runs fn as an invocation from `cwd` whose output is collected instead of printed. */
export async function collectInvocation<T>(
  facts: {
    cwd: string;
    stderrTTY: boolean;
    columns?: number;
    signal?: AbortSignal;
    warm?: (cwd: string) => Promise<WarmRepo | undefined>;
  },
  fn: () => Promise<T>,
): Promise<{ value: T } & CollectedOutput> {
  if (current !== own) throw new Error('a relayed invocation is already running in this process');
  const out: string[] = [];
  const err: string[] = [];
  let declined: string | undefined;
  current = {
    cwd: () => facts.cwd,
    stdout: (text) => void out.push(text),
    stderr: (text) => void err.push(text),
    stderrTTY: facts.stderrTTY,
    columns: facts.columns,
    live: false,
    relayed: true,
    decline: (reason) => {
      declined = reason;
    },
    signal: facts.signal,
    warm: facts.warm,
  };
  try {
    const value = await fn();
    return { value, stdout: out.join(''), stderr: err.join(''), ...(declined === undefined ? {} : { declined }) };
  } finally {
    current = own;
  }
}
