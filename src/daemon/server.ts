// The resident process: one per worktree, serving on .git/xet/daemon/sock. It runs captures and
// forks in a warm process (no node start-up, no module loading per call), one at a time, with
// exactly the code the CLI runs (src/snapshot/capture.ts, src/workspace/fork.ts), so a capture or
// fork through it is the one the CLI would make.
// pid file created O_EXCL is the lock; a pid file of a dead process is stale and replaced. Exits after
// an idle period without a request it ran (GIT_XET_DAEMON_IDLE_MS, default 10 min), when its git
// directory goes away, on stop.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import { XetError, isXetError } from '../errors';
import { TOOL_VERSION } from '../version';
import { serveOpsInProcess, type DaemonOp, type DaemonReply, type DaemonRequest } from './client';
import { relayedCommand } from './relay';
import * as path from 'node:path';
import { buildId, gitEnvPrint, locateDaemon, sameEnvPrint, type DaemonPlace } from './locate';
import type { Repo } from '../git/repo';
import type { GitConfig } from '../git/config';
import type { IndexEntry } from '../git/plumbing';
import { configMemo } from './config-memo';
import { ResidentRefWriter } from './ref-writer';
import { refListingMemo } from './refs-memo';
import { ignoredListingMemo } from './ignored-memo';
import { indexEntriesMemo } from './index-memo';
import { ownerAlive } from '../snapshot/leftovers';
import { lendWorktreeWatch } from '../snapshot/walk-watch';
import { headStartCounts } from '../snapshot/lstat-head-start';
import { TreeWatch } from './tree-watch';
import { tracePhase } from '../testing/trace';

/** A request the daemon will not run for its client, who then runs it itself. */
class DeclinedHere extends Error {}

/** The pid of the running daemon, or undefined (a stale pid file counts as none: its process gone,
 * or its pid reused by another program, as after a SIGKILL or a reboot). */
export function runningPid(p: DaemonPlace): number | undefined {
  try {
    const pid = Number(fs.readFileSync(p.pidFile, 'utf8').trim());
    return pid > 0 && isDaemonProcess(pid, p.worktree) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` is a live `git-xet daemon run` of `worktree` (its command line, and its working
 * directory at or under the worktree, from Linux's /proc; where there is no /proc, whether it is
 * alive at all). A zombie's command line is empty: not one. A pid file copied with the repository
 * (`cp -a`) names the original's daemon, whose directory is the original worktree (review 43). */
function isDaemonProcess(pid: number, worktree: string): boolean {
  if (!ownerAlive(pid)) return false;
  let argv: string[];
  try {
    argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return !fs.existsSync('/proc/self');
  }
  if (!(argv.some((a) => a.endsWith('git-xet')) && argv.includes('daemon') && argv.includes('run'))) return false;
  let cwd: string;
  try {
    cwd = fs.readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return true; // not ours to look at: its command line is all there is
  }
  const top = fs.realpathSync(worktree);
  return cwd === top || cwd.startsWith(top.endsWith('/') ? top : `${top}/`);
}

function takeLock(p: DaemonPlace): void {
  fs.mkdirSync(p.dir, { recursive: true, mode: 0o700 });
  const st = fs.lstatSync(p.dir);
  if (!st.isDirectory() || (typeof process.getuid === 'function' && st.uid !== process.getuid()))
    throw new XetError('BUSY', `${p.dir} belongs to another user; the daemon will not use it`);
  for (let i = 0; i < 2; i++) {
    try {
      fs.writeFileSync(p.pidFile, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      fs.rmSync(p.socket, { force: true });
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const pid = runningPid(p);
      if (pid !== undefined)
        throw new XetError('BUSY', `a daemon already runs for this worktree (pid ${pid})`, { pid });
      fs.rmSync(p.pidFile, { force: true });
    }
  }
  throw new XetError('BUSY', 'the daemon lock could not be taken');
}

/** Whether git, started in `cwd`, finds this worktree the way it did for the daemon: `cwd` is in the
 * worktree but not in its git directory (git would call that bare), and the walk up to the worktree
 * stays on one filesystem under no ceiling (git stops there). Otherwise the request finds its
 * repository itself, and fails as the CLI would. */
function discoversWorktree(cwd: string, p: DaemonPlace): boolean {
  if (process.env.GIT_CEILING_DIRECTORIES || process.env.GIT_DISCOVERY_ACROSS_FILESYSTEM) return false;
  const inside = (dir: string, root: string): boolean => {
    const rel = path.relative(root, dir);
    return rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel);
  };
  const dir = path.resolve(cwd);
  if (!inside(dir, p.worktree) || inside(dir, p.gitDir)) return false;
  try {
    const dev = fs.statSync(p.worktree).dev;
    for (let d = dir; d !== p.worktree; d = path.dirname(d)) if (fs.statSync(d).dev !== dev) return false;
    return true;
  } catch {
    return false;
  }
}

/** Follows the compiled tree this process runs from (inotify on its directories): a rebuild in place
 * rewrites only the files that changed (`tsc -w`), which the build id (the capture module's mtime)
 * can miss. Any .js file written, added or removed makes the daemon refuse what follows and stop. */
function watchBuild(onChange: () => void): { readonly changed: boolean; close(): void } {
  const state = { changed: false, close: (): void => undefined };
  const watchers: fs.FSWatcher[] = [];
  const walk = (dir: string): void => {
    try {
      const w = fs.watch(dir, (_event, name) => {
        if (state.changed || !String(name ?? '').endsWith('.js')) return;
        state.changed = true;
        onChange();
      });
      w.on('error', () => undefined);
      w.unref();
      watchers.push(w);
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(path.join(dir, e.name));
    } catch {
      // out of inotify watches, or a directory gone: the build id still tells most rebuilds apart
    }
  };
  walk(path.join(__dirname, '..'));
  state.close = () => {
    for (const w of watchers) w.close();
  };
  return state;
}

/** git's built-in exec path: what `git --exec-path` says without GIT_EXEC_PATH set (undefined if it
 * says nothing usable). Asked once, when the daemon starts. */
function builtInExecPath(): string | undefined {
  const env = { ...process.env };
  delete env.GIT_EXEC_PATH;
  const r = spawnSync('git', ['--exec-path'], { env, encoding: 'utf8', timeout: 30_000 });
  const out = r.status === 0 ? r.stdout.replace(/\n$/, '') : '';
  return out && path.isAbsolute(out) ? out : undefined;
}

export async function serveDaemon(p: DaemonPlace, opts: { idleMs?: number } = {}): Promise<void> {
  takeLock(p);
  const idleMs = opts.idleMs ?? (Number(process.env.GIT_XET_DAEMON_IDLE_MS) || 600_000);
  const env = gitEnvPrint();
  const execPath = builtInExecPath();
  const build = buildId();
  const rebuilt = watchBuild(() => setImmediate(stop));
  const { capture } = await import('../snapshot/capture');
  const { createFork } = await import('../workspace/fork');
  const { findRepo, repoOpts } = await import('../git/repo');
  const { readConfig } = await import('../git/config');
  const { runsUserHook } = await import('../hooks/install');
  const { invocation } = await import('../cli/invocation');
  const statCaches = await import('../snapshot/stat-cache');
  statCaches.keepStatCachesInMemory();
  // Captures of this worktree read again only the directories that changed (src/daemon/tree-watch.ts).
  const treeWatch = new TreeWatch(p.worktree);
  lendWorktreeWatch(treeWatch);
  // The repository as the CLI finds it from the top of this worktree (rev-parse), asked once. Only
  // a request from the top gets it: from a directory below, git's discovery may stop at a nested
  // repository this process's own lookup does not see (a .git that is a symlink, a bare repository
  // inside the tree: review 25), so such a request asks git as the CLI does. With GIT_DIR or
  // GIT_WORK_TREE set, git decides differently, so every request asks again.
  let repo: Promise<Repo> | undefined;
  const ownRepo = (cwd: string): Promise<Repo> | undefined => {
    if (process.env.GIT_DIR !== undefined || process.env.GIT_WORK_TREE !== undefined) return undefined;
    if (path.resolve(cwd) !== p.worktree) return undefined;
    if (locateDaemon(cwd)?.gitDir !== p.gitDir || !discoversWorktree(cwd, p)) return undefined;
    repo ??= findRepo(p.worktree, true).catch((e: unknown) => {
      repo = undefined;
      throw e;
    });
    return repo;
  };
  // This worktree's requests get the repository and memos of its config (config-memo.ts) and its
  // index listing (index-memo.ts), for a capture or a fork alike.
  let config: (() => Promise<GitConfig>) | undefined;
  let index: (() => Promise<IndexEntry[]>) | undefined;
  let refWriter: ResidentRefWriter | undefined;
  let refs: ReturnType<typeof refListingMemo> | undefined;
  let ignored: ReturnType<typeof ignoredListingMemo> | undefined;
  const memoFor = (own: Repo | undefined) => {
    if (!own) return {};
    const writer = (refWriter ??= new ResidentRefWriter(repoOpts(own), own));
    return {
      repo: own,
      readConfig: (config ??= configMemo(own)),
      readIndex: (index ??= indexEntriesMemo(own)),
      writeRef: writer.write.bind(writer),
      listRefs: (refs ??= refListingMemo(own.commonDir, (config ??= configMemo(own)))),
      readIgnored: (ignored ??= ignoredListingMemo(own, treeWatch)),
    };
  };
  let queue: Promise<unknown> = Promise.resolve();
  // Work captures handed over for after their reply (capture.ts afterReply).
  const afterReply: (() => void)[] = [];
  let idle: NodeJS.Timeout | undefined;
  let stopping = false;
  const server = net.createServer();
  const cleanup = (): void => {
    try {
      if (fs.readFileSync(p.pidFile, 'utf8').trim() === String(process.pid)) {
        fs.rmSync(p.socket, { force: true });
        fs.rmSync(p.pidFile, { force: true });
      }
    } catch {
      // the git directory is gone, or another daemon took over
    }
  };
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    cleanup();
    server.close();
    clearInterval(gone);
    rebuilt.close();
    lendWorktreeWatch(null);
    treeWatch.close();
    refWriter?.close();
    if (idle) clearTimeout(idle);
  };
  // Requests queued or running (not status or stop), and whether the idle time ran out meanwhile:
  // it is then decided when they reply (review 45: a daemon stopped in the middle of a capture that
  // came just before its idle time ran out, and the next client started a second one).
  let pending = 0;
  let idleDue = false;
  const armIdle = (): void => {
    if (idle) clearTimeout(idle);
    idleDue = false;
    idle = setTimeout(() => {
      if (pending > 0) idleDue = true;
      else stop();
    }, idleMs);
    idle.unref();
  };
  /** A queued request replied: one it ran re-arms the idle time; a refusal leaves it running, and
   * stops the daemon if it ran out meanwhile. */
  const settled = (ran: boolean): void => {
    pending--;
    if (ran) armIdle();
    else if (idleDue && pending === 0) stop();
  };
  const gone = setInterval(() => {
    if (!fs.existsSync(p.pidFile)) stop();
  }, 2000);
  gone.unref();
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);

  // One op run in this process: the snapshot or fork the CLI would make, with this worktree's warm
  // repository and config memo (a capture asked git for both at every request: a rev-parse before
  // anything else could start, and a config listing).
  // A reference-transaction hook of the user's runs when the snapshot's or the fork's refs are
  // written, and here it would run with the daemon's environment: such a request is declined
  // (DeclinedHere) before anything is done, and the client runs it. The repository and config read
  // for that check are the capture's and the fork's own.
  const runOp = async (op: DaemonOp, cwd: string, input: Record<string, unknown>): Promise<unknown> => {
    const withCwd = { ...input, cwd };
    const own = await ownRepo(cwd);
    const memo = own ? memoFor(own) : undefined;
    const repo = own ?? (await findRepo(cwd, true));
    const config = await (memo?.readConfig ?? (() => readConfig(repoOpts(repo))))();
    if (runsUserHook(repo, config, 'reference-transaction')) {
      const reason = 'a reference-transaction hook runs';
      if (invocation().relayed) invocation().decline(reason);
      throw new DeclinedHere(reason);
    }
    // Another directory's request gets the repository found for it, and reads its config again
    // with its other reads, as the CLI does.
    const given = memo ?? { repo };
    tracePhase('daemon: op');
    return op === 'capture'
      ? capture({
          ...(withCwd as unknown as Parameters<typeof capture>[0]),
          ...given,
          afterReply: (work) => void afterReply.push(work),
        })
      : createFork({ ...(withCwd as unknown as Parameters<typeof createFork>[0]), ...given });
  };
  serveOpsInProcess(runOp);

  const handle = async (
    req: DaemonRequest & { version?: string; env?: string },
    gone: AbortSignal,
  ): Promise<DaemonReply> => {
    if (req.op === 'status')
      return {
        ok: true,
        result: {
          pid: process.pid,
          worktree: p.worktree,
          version: TOOL_VERSION,
          watch: treeWatch.state(),
          lstatHeadStart: headStartCounts(),
        },
      };
    if (req.op === 'stop') {
      setImmediate(stop);
      return { ok: true, result: { stopped: process.pid } };
    }
    if (req.version !== build || rebuilt.changed) return { ok: false, refused: 'version' };
    if (!sameEnvPrint(req.env, env, execPath)) return { ok: false, refused: 'environment' };
    if (typeof req.cwd !== 'string' || !path.isAbsolute(req.cwd)) return { ok: false, refused: 'cwd' };
    if (req.op === 'cli') return relayed(req, gone);
    if (req.op !== 'capture' && req.op !== 'fork') return { ok: false, refused: 'op' };
    try {
      return { ok: true, result: await runOp(req.op, req.cwd, req.input ?? {}) };
    } catch (e) {
      if (e instanceof DeclinedHere) return { ok: false, refused: 'declined', reason: e.message };
      if (isXetError(e)) return { ok: false, error: e.toJSON() };
      return { ok: false, refused: String((e as Error).message) };
    }
  };

  // A command line from the thin client (src/daemon/relay.ts), run with the CLI's own parser and
  // output: what it printed and its exit code go back. Errors are already printed by the CLI code.
  const relayed = async (req: DaemonRequest, gone: AbortSignal): Promise<DaemonReply> => {
    const argv = req.argv;
    if (!Array.isArray(argv) || argv.length > 4096 || !argv.every((a) => typeof a === 'string'))
      return { ok: false, refused: 'argv' };
    if (relayedCommand(argv) === undefined) return { ok: false, refused: 'op' };
    const [{ runCli }, { collectInvocation }] = await Promise.all([import('../cli/main'), import('../cli/invocation')]);
    const columns = Number.isInteger(req.columns) && (req.columns as number) > 0 ? req.columns : undefined;
    const warm = async (cwd: string) => {
      const own = await ownRepo(cwd);
      return own ? { repo: own, readConfig: (config ??= configMemo(own)) } : undefined;
    };
    const facts = { cwd: req.cwd, stderrTTY: req.stderrTTY === true, columns, signal: gone, warm };
    const r = await collectInvocation(facts, () => runCli(argv));
    // Declined by the command before it did anything (spec.relayable): the client runs it, told
    // that the daemon was asked (it does not ask again).
    if (r.declined !== undefined) return { ok: false, refused: 'declined', reason: r.declined };
    return { ok: true, result: { exitCode: r.value, stdout: r.stdout, stderr: r.stderr } };
  };

  // The idle time counts from the last request the daemon ran (a capture, a fork, a relayed line,
  // or one that failed as the CLI's would), not from every connection: a daemon that only refuses
  // (its clients' environment or build is not its own, review 44) or is only asked its status
  // serves nobody, and goes.
  server.on('connection', (sock) => {
    let buf = '';
    sock.setEncoding('utf8');
    sock.on('error', () => sock.destroy());
    let taken = false;
    // The client gone (interrupted, killed) before its line ran: a push run for it stops before it
    // publishes (a capture or a fork runs to its end).
    // 'end' is the client's close as soon as it is read (our clients never half-close: a client
    // that did would cancel its push); 'close' comes a turn later, or on an error.
    const clientGone = new AbortController();
    sock.once('end', () => clientGone.abort());
    sock.once('close', () => clientGone.abort());
    sock.on('data', (d: string) => {
      if (taken) return; // one request per connection: what follows its line is not read
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      taken = true;
      tracePhase('daemon: request');
      let req: DaemonRequest & { deadline?: unknown };
      try {
        req = JSON.parse(buf.slice(0, nl)) as DaemonRequest & { deadline?: unknown };
      } catch {
        sock.destroy();
        return;
      }
      // A command with a deadline is taken now or never (client.ts): past it, the client has run
      // it itself; before it, the acknowledgement tells the client to wait for this one.
      if (req.deadline !== undefined) {
        if (typeof req.deadline !== 'number' || Date.now() > req.deadline) {
          sock.end(JSON.stringify({ ok: false, refused: 'late' }) + '\n');
          return;
        }
        sock.write('{"accepted":true}\n');
      }
      // Status and stop are answered at once, not behind a long capture in the queue.
      if (req.op === 'status' || req.op === 'stop') {
        void handle(req, clientGone.signal).then((reply) => {
          if (!sock.destroyed) sock.end(JSON.stringify(reply) + '\n');
        });
        return;
      }
      pending++;
      const run = queue.then(() => handle(req, clientGone.signal));
      // What a capture left for after its reply (its stat cache's write, under its locks) runs once
      // the reply is written (a reaction registered after this one) and before the next request,
      // whether or not the reply reached its client: the locks are released only by it.
      queue = run
        .catch(() => undefined)
        .then(() => new Promise<void>((r) => setImmediate(r)))
        .then(() => {
          for (const work of afterReply.splice(0)) work();
          tracePhase('daemon: after reply');
        });
      void run.then(
        (reply) => {
          if (!sock.destroyed) sock.end(JSON.stringify(reply) + '\n');
          tracePhase('daemon: replied');
          settled(reply.ok || reply.error !== undefined);
          // After the reply, before the next request (queued behind this): the stat cache the
          // capture wrote, parsed for the next one.
          queue = queue
            .then(() => new Promise<void>((r) => setImmediate(r)))
            .then(() => statCaches.prewarmStatCaches())
            .catch(() => undefined);
        },
        () => {
          sock.destroy();
          settled(false);
        },
      );
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(p.socket, () => resolve());
  });
  fs.chmodSync(p.socket, 0o600);
  armIdle();
  // What a relayed line loads besides the capture (the CLI's parser, a handoff and a push), loaded in
  // the queue before any request: the first relayed handoff create would otherwise pay for it.
  queue = queue
    .then(() =>
      Promise.all([
        import('../cli/main'),
        import('../cli/invocation'),
        import('../handoff/create'),
        import('../remote/publish'),
        import('../remote/select'),
      ]),
    )
    .catch(() => undefined);
  await new Promise<void>((resolve) => server.once('close', () => resolve()));
  cleanup();
}
