// Long tools (spec.long: capture, restore, fork, push…) run as a child `git xet <words> <argv> --json`
// in the server's repository rather than in the server's process: the child is the CLI, so a
// cancelled or killed call leaves exactly what a killed CLI leaves (nothing half written), progress
// comes from the CLI's own phases (GIT_XET_PROGRESS=json: `{"progress":…}` lines on stderr), and a
// cancellation can stop it at any point with a signal. Each child leads its own process group, so
// a signal reaches git's processes under it too, as Ctrl-C in a terminal does.

import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { XetError, type ErrorCode } from '../errors';
import { PROGRESS_ENV } from '../cli/output';
import { toArgv } from '../cli/to-argv';
import type { AnyCommandSpec } from '../commands/spec';

/** Compiled location: dist/src/mcp/child.js -> ../../../bin/git-xet. */
export const XET_BIN = path.resolve(__dirname, '..', '..', '..', 'bin', 'git-xet');
/** Preloaded into each child: ends the child's process group when the server goes away. */
const ORPHAN_GUARD = path.join(__dirname, 'orphan-guard.js');
/** How long a child has after SIGTERM before SIGKILL. */
export const KILL_AFTER_MS = 5000;

export interface ChildCall {
  spec: AnyCommandSpec;
  input: Record<string, unknown>;
  cwd: string;
  signal?: AbortSignal;
  onProgress?: (phase: string) => void;
}

interface Live {
  child: ChildProcess;
  closed: Promise<void>;
}

const live = new Set<Live>();

function signalGroup(pid: number | undefined, sig: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, sig);
  } catch {
    /* the group is gone */
  }
}

/** SIGTERM to the child's group, SIGKILL after KILL_AFTER_MS if it is still there; resolves when
 * the child has exited and its group has been swept. */
async function stop(l: Live): Promise<void> {
  signalGroup(l.child.pid, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(l.child.pid, 'SIGKILL'), KILL_AFTER_MS);
  await l.closed;
  clearTimeout(timer);
  // git processes that outlived the CLI (it died on SIGTERM without waiting for them).
  signalGroup(l.child.pid, 'SIGKILL');
}

/** Runs the call as a child CLI; resolves with its --json value (a result, whatever its exit code,
 * as verify's 1 for differences), throws its typed error, or CANCELLED when the signal stopped it. */
export function runChild(call: ChildCall): Promise<unknown> {
  const argv = toArgv(call.spec, call.input, ['--json']);
  const child = spawn(process.execPath, ['--require', ORPHAN_GUARD, XET_BIN, ...argv], {
    cwd: call.cwd,
    env: { ...process.env, [PROGRESS_ENV]: 'json' },
    // stdin stays an open pipe the server never writes: its EOF tells the child the server is gone.
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  });
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const l: Live = { child, closed };
  live.add(l);
  const out: Buffer[] = [];
  let errTail = '';
  let errLine = '';
  child.stdout?.on('data', (b: Buffer) => out.push(b));
  child.stderr?.on('data', (b: Buffer) => {
    const lines = (errLine + b.toString('utf8')).split('\n');
    errLine = lines.pop() ?? '';
    for (const line of lines) {
      if (line.startsWith('{"progress":')) {
        try {
          call.onProgress?.(String((JSON.parse(line) as { progress: unknown }).progress));
          continue;
        } catch {
          /* not ours: keep it as text */
        }
      }
      errTail = (errTail + line + '\n').slice(-4000);
    }
  });
  child.stdin?.on('error', () => undefined);
  let cancelled = false;
  const onAbort = () => {
    cancelled = true;
    void stop(l);
  };
  if (call.signal?.aborted) onAbort();
  else call.signal?.addEventListener('abort', onAbort, { once: true });

  return new Promise((resolve, reject) => {
    child.once('error', (e) => reject(new XetError('GIT_FAILED' as ErrorCode, `cannot start git xet: ${e.message}`)));
    child.once('close', (code, sig) => {
      live.delete(l);
      call.signal?.removeEventListener('abort', onAbort);
      if (cancelled && code === null) {
        reject(
          new XetError('CANCELLED', `${call.spec.path.join(' ')} was cancelled; it was stopped with ${sig}`, {
            command: call.spec.path.join(' '),
            signal: sig,
          }),
        );
        return;
      }
      const text = Buffer.concat(out).toString('utf8').trim();
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        reject(
          Object.assign(
            new Error(`git xet ${call.spec.path.join(' ')} ended (${sig ?? `exit ${code}`}) without a result`),
            {
              details: { exitCode: code, signal: sig, stderr: errTail },
            },
          ),
        );
        return;
      }
      const err = (value as { error?: { code?: string; message?: string; details?: Record<string, unknown> } }).error;
      if (code !== 0 && err && typeof err.code === 'string') {
        reject(new XetError(err.code as ErrorCode, String(err.message ?? err.code), err.details ?? {}));
        return;
      }
      resolve(value);
    });
  });
}

/** Stops every running child (the server is closing): resolves when all have exited. */
export async function stopChildren(): Promise<void> {
  await Promise.all([...live].map(stop));
}

/** How many children run now (tests and shutdown). */
export function liveChildren(): number {
  return live.size;
}
