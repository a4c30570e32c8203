// git xet daemon start|stop|status: the resident process of a worktree (src/daemon/). `capture`
// asks it first and runs the normal path when it is absent, stale or refuses; `run` is the daemon.
import { s } from './schema';
import { XetError } from '../errors';
import { defineCommand } from './spec';

export const daemonCommand = defineCommand({
  path: ['daemon'],
  tool: null,
  description: "start, stop or query this worktree's resident process, which runs captures without a start-up",
  input: {
    action: s
      .enum(['start', 'stop', 'status', 'run'])
      .describe('start | stop | status (run: the daemon itself, in the foreground)'),
  },
  args: ['action'],
  annotations: { readOnly: false, destructive: false, idempotent: true },
  output: s.looseObject({
    running: s.boolean(),
    pid: s.number().nullable(),
    answering: s.boolean().optional(),
    watch: s
      .looseObject({ watching: s.boolean(), dirs: s.number(), reason: s.string().nullable() })
      .optional()
      .describe('status: whether captures read only the directories that changed, and if not, why'),
    lstatHeadStart: s
      .looseObject({ used: s.number(), unused: s.number() })
      .optional()
      .describe("status: captures that took the lstat begun when their request came, and those that lstat'ed again"),
  }),
  async run(input, ctx) {
    const { locateDaemon } = await import('../daemon/locate');
    const p = locateDaemon(ctx.cwd);
    if (!p) throw new XetError('NOT_A_REPOSITORY', `${ctx.cwd} is not inside a worktree`);
    const { runningPid, serveDaemon } = await import('../daemon/server');
    const { sendToDaemon } = await import('../daemon/client');
    let watch: unknown;
    let lstatHeadStart: unknown;
    const ask = async (): Promise<number | null> => {
      const r = await sendToDaemon(p, { op: 'status', cwd: ctx.cwd }, 2000);
      if (!r?.ok) return null;
      ({ watch, lstatHeadStart } = r.result as { watch?: unknown; lstatHeadStart?: unknown });
      return (r.result as { pid: number }).pid;
    };
    if (input.action === 'run') {
      await serveDaemon(p);
      return { running: false, pid: null };
    }
    // The daemon that answers, else the process the pid file names if it is one that does not
    // (suspended, wedged, its socket file gone): runningPid only names a git xet daemon.
    const answered = await ask();
    const pid = answered ?? runningPid(p) ?? null;
    if (input.action === 'status') {
      if (pid === null) return { running: false, pid, socket: p.socket };
      if (answered === null) return { running: true, pid, socket: p.socket, answering: false };
      return {
        running: true,
        pid,
        socket: p.socket,
        ...(watch ? { watch } : {}),
        ...(lstatHeadStart ? { lstatHeadStart } : {}),
      };
    }
    if (input.action === 'stop') {
      if (pid === null) return { running: false, pid };
      const stopped = async (ms: number): Promise<boolean> => {
        for (let i = 0; i < ms / 20 && runningPid(p) === pid; i++) await new Promise((r) => setTimeout(r, 20));
        return runningPid(p) !== pid;
      };
      await sendToDaemon(p, { op: 'stop', cwd: ctx.cwd }, 2000);
      if (await stopped(2000)) return { running: false, pid };
      // No answer on the socket: the signal it also stops on. `stopped` found the pid file still
      // naming this pid as a git xet daemon, so it is not another program's (a reused pid).
      try {
        process.kill(pid, 'SIGTERM');
      } catch (e) {
        // It exited between the check and the signal: stopped is what was asked.
        if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
      }
      if (await stopped(3000)) return { running: false, pid };
      throw new XetError('BUSY', `the daemon (pid ${pid}) did not stop: it is suspended or not answering`, { pid });
    }
    if (answered !== null) return { running: true, pid: answered, socket: p.socket };
    if (pid !== null)
      throw new XetError(
        'BUSY',
        `a daemon runs for this worktree (pid ${pid}) but does not answer: it is suspended or wedged (git xet daemon stop)`,
        { pid },
      );
    const { spawnDaemon } = await import('../daemon/start');
    const child = spawnDaemon(p);
    for (let i = 0; i < 250; i++) {
      const pid = await ask();
      if (pid !== null) return { running: true, pid, socket: p.socket };
      if (child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new XetError('BUSY', 'the daemon did not start (another one starting, or the socket cannot be made)');
  },
  human: (r) =>
    r.running
      ? `daemon running (pid ${r.pid})${r.answering === false ? ', not answering' : ''}`
      : r.pid
        ? `daemon stopped (pid ${r.pid})`
        : 'no daemon',
});
