// Starting a worktree's daemon: `git xet daemon start`, and a CLI capture or fork that ran in its
// own process where `xet.daemon.autoStart` is true, so that the next one goes through a warm
// process (as git starts its fsmonitor daemon for core.fsmonitor=true). Off unless set: a process
// left running for ten minutes after the last request, and its inotify watches, are the user's to
// choose (docs/DESIGN-NOTES.md "A daemon the CLI starts").
import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { git } from '../git/exec';
import type { DaemonPlace } from './locate';

/** The config key that makes a CLI capture or fork start the worktree's daemon. */
export const AUTO_START_KEY = 'xet.daemon.autoStart';

/** Variables git sets for the command it runs, not the user's own: what every hook, `!` alias and
 * `rebase -x` command gets (GIT_PREFIX, also empty at the top; a commit's hooks GIT_INDEX_FILE; a
 * receive's GIT_QUARANTINE_PATH and push options), and what git's global options set (`-c` and
 * `--config-env`, `--git-dir`, `--work-tree`, `--namespace`, `-p`, `--no-replace-objects`, the
 * pathspec options, `--no-optional-locks`). A daemon serves only clients whose environment is its
 * own (locate.ts gitEnvPrint), so one started with these would serve no later plain `git xet
 * capture` while it stood in the way of one that would (reviews 44, 45: a post-commit hook's capture
 * started one). A command run with any of them set starts none. Variables a user exports (an author,
 * GIT_CONFIG_COUNT, an editor) are not here: their shell's every capture carries them too. */
export const PER_COMMAND_ENV = [
  'GIT_PREFIX',
  'GIT_INDEX_FILE',
  'GIT_QUARANTINE_PATH',
  'GIT_PUSH_OPTION_COUNT',
  'GIT_CONFIG_PARAMETERS',
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_NAMESPACE',
  'GIT_PAGER_IN_USE',
  'GIT_NO_REPLACE_OBJECTS',
  'GIT_LITERAL_PATHSPECS',
  'GIT_GLOB_PATHSPECS',
  'GIT_NOGLOB_PATHSPECS',
  'GIT_ICASE_PATHSPECS',
  'GIT_OPTIONAL_LOCKS',
];

/** `git xet daemon run` for `p`, detached: it outlives its caller, whose output it does not hold. */
export function spawnDaemon(p: DaemonPlace): ChildProcess {
  const bin = path.resolve(__dirname, '..', '..', '..', 'bin', 'git-xet');
  // V8 neither shrinks the idle daemon's heap nor drops the bytecode of functions a capture has
  // not run for a while: after a pause, the next capture otherwise regrows the heap (fresh pages
  // cost ~10 µs each on these VMs) and compiles again. A small gain, seen only on a quiet machine
  // (captures after 12 s pauses 267-336 ms against 269-443 ms); the price is ~19 MiB more RSS
  // while idle (DESIGN-NOTES "Push and handoff create through the daemon").
  const child = spawn(process.execPath, ['--no-memory-reducer', '--no-flush-bytecode', bin, 'daemon', 'run'], {
    cwd: p.worktree,
    detached: true,
    stdio: 'ignore',
  });
  child.unref();
  return child;
}

/**
 * After a capture or fork this process ran itself (no daemon answered): where `xet.daemon.autoStart`
 * is true, start the worktree's daemon without waiting for it, unless one already runs (it may be
 * suspended, or have declined this line: a second would only find it and exit), GIT_XET_NO_DAEMON=1,
 * or git set variables of its own for this command (PER_COMMAND_ENV). Returns a warning for a value
 * git does not take as a boolean (nothing is started), else null. Never throws: the command it
 * follows has already done its work.
 */
export async function autoStartDaemon(cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<string | null> {
  if (env.GIT_XET_NO_DAEMON === '1' || PER_COMMAND_ENV.some((k) => env[k] !== undefined)) return null;
  try {
    const { locateDaemon } = await import('./locate');
    const p = locateDaemon(cwd);
    if (!p) return null;
    const r = await git(['config', '--type=bool', '--get', AUTO_START_KEY], { cwd, okCodes: [1, 128] });
    if (r.code === 1) return null;
    if (r.code !== 0) {
      const why = r.stderr.trim().replace(/^(fatal|error): /, '');
      return `${AUTO_START_KEY} is not a boolean (${why}): no daemon was started`;
    }
    if (r.stdout.toString('utf8').trim() !== 'true') return null;
    const { runningPid } = await import('./server');
    if (runningPid(p) !== undefined) return null;
    spawnDaemon(p).on('error', () => undefined);
    return null;
  } catch (e) {
    return `${AUTO_START_KEY}: the daemon could not be started (${(e as Error).message})`;
  }
}
