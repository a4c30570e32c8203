// The client half: ask the repository's daemon to run a command. Undefined whenever it cannot (no
// daemon, a stale socket, a foreign owner, another version or environment, a dropped connection):
// the caller then runs the normal path, so nothing ever depends on the daemon.
import * as fs from 'node:fs';
import * as net from 'node:net';
import { XetError, type ErrorCode } from '../errors';
import { buildId, gitEnvPrint, locateDaemon, type DaemonPlace } from './locate';

/** The commands a daemon runs for the CLI. */
export type DaemonOp = 'capture' | 'fork';

export interface DaemonRequest {
  /** 'cli': a whole command line relayed by the thin client (src/daemon/relay.ts). */
  op: DaemonOp | 'cli' | 'status' | 'stop';
  cwd: string;
  input?: Record<string, unknown>;
  /** op 'cli': the command line, and whether the client's stderr is a terminal (and its width). */
  argv?: string[];
  stderrTTY?: boolean;
  columns?: number;
}

export interface DaemonReply {
  ok: boolean;
  refused?: string;
  /** Why a relayed line was declined (refused: "declined"), for a trace. */
  reason?: string;
  result?: unknown;
  error?: { code: ErrorCode; message: string; details: Record<string, unknown> };
}

function ownSocket(p: DaemonPlace): boolean {
  try {
    const st = fs.lstatSync(p.socket);
    return st.isSocket() && (typeof process.getuid !== 'function' || st.uid === process.getuid());
  } catch {
    return false;
  }
}

/** How long a daemon has to take a command (read it and say so) before the client runs it itself,
 * and the margin the client waits beyond that for the acknowledgement to arrive. A daemon that is
 * stopped (SIGSTOP) or wedged still accepts connections, since the kernel completes them: without
 * this, a command sent to it would wait forever. */
export const ACCEPT_WITHIN_MS = 2000;
const ACCEPT_MARGIN_MS = 1000;
/** Set once a daemon let a command go unacknowledged: this process asks it nothing more (the CLI's
 * own run of a relayed line would otherwise wait for it a second time). */
let unanswered = false;

/** This process asks no daemon: the native client (native/git-xet-relay.c) already asked this
 * one and it did not run the line (bin/git-xet, from GIT_XET_DAEMON_TRIED). */
export function daemonAlreadyAsked(): void {
  unanswered = true;
}

/**
 * Sends one request and waits for the reply line. `timeoutMs` bounds the whole exchange (status,
 * stop). A command (`accept`) is instead given a deadline: the daemon refuses it once the deadline
 * has passed and otherwise acknowledges it at once, before running it, so the client can give up on
 * a daemon that never read it, knowing the daemon will not run it later. The reply may then take
 * as long as the command does.
 */
export function sendToDaemon(
  p: DaemonPlace,
  req: DaemonRequest,
  timeoutMs = 0,
  accept = false,
): Promise<DaemonReply | undefined> {
  if (!ownSocket(p)) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    let buf = '';
    let done = false;
    let unacknowledged: NodeJS.Timeout | undefined;
    const finish = (r: DaemonReply | undefined): void => {
      if (done) return;
      done = true;
      if (unacknowledged) clearTimeout(unacknowledged);
      sock.destroy();
      resolve(r);
    };
    const sock = net.createConnection(p.socket);
    if (timeoutMs > 0) sock.setTimeout(timeoutMs, () => finish(undefined));
    sock.on('connect', () => {
      const deadline = accept ? Date.now() + ACCEPT_WITHIN_MS : undefined;
      // Decided after the next poll (setImmediate): a client stopped (Ctrl-Z) past its deadline runs
      // this timer first on resuming, while the acknowledgement may wait unread in its socket.
      if (accept)
        unacknowledged = setTimeout(
          () =>
            setImmediate(() => {
              if (!unacknowledged) return;
              unanswered = true;
              finish(undefined);
            }),
          ACCEPT_WITHIN_MS + ACCEPT_MARGIN_MS,
        );
      sock.write(JSON.stringify({ ...req, deadline, version: buildId(), env: gitEnvPrint() }) + '\n');
    });
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      buf += d;
      for (let nl = buf.indexOf('\n'); nl >= 0 && !done; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        let reply: (DaemonReply & { accepted?: unknown }) | undefined;
        try {
          reply = JSON.parse(line) as DaemonReply & { accepted?: unknown };
        } catch {
          finish(undefined);
          return;
        }
        if (reply?.accepted === true && unacknowledged) {
          clearTimeout(unacknowledged);
          unacknowledged = undefined;
          continue;
        }
        finish(reply);
      }
    });
    sock.on('error', () => finish(undefined));
    sock.on('close', () => finish(undefined));
  });
}

/** Inside the daemon: how it runs an op itself (with its warm repository and config memo). A
 * command line relayed to it reaches viaDaemon too, which must not ask its own socket (the daemon
 * runs one request at a time: that would wait for itself). */
let serving: ((op: DaemonOp, cwd: string, input: Record<string, unknown>) => Promise<unknown>) | undefined;

export function serveOpsInProcess(run: typeof serving): void {
  serving = run;
}

/** Runs `op` through the daemon of cwd's repository: its result, its XetError thrown, or undefined
 * when the daemon did not run it (then the caller runs it itself). GIT_XET_NO_DAEMON=1 skips it. */
export async function viaDaemon(op: DaemonOp, cwd: string, input: Record<string, unknown>): Promise<unknown> {
  if (serving) return serving(op, cwd, input);
  if (process.env.GIT_XET_NO_DAEMON === '1' || unanswered) return undefined;
  const p = locateDaemon(cwd);
  if (!p) return undefined;
  const r = await sendToDaemon(p, { op, cwd, input }, 0, true);
  if (!r || r.refused) return undefined;
  if (r.ok) return r.result;
  if (r.error) throw new XetError(r.error.code, r.error.message, r.error.details);
  return undefined;
}
