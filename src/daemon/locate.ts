// Where a repository's daemon lives: .git/xet/daemon/ of the worktree's git directory, found without
// running git (the client must cost less than the work it saves). Undefined when not in a worktree.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TOOL_VERSION } from '../version';

export interface DaemonPlace {
  worktree: string;
  gitDir: string;
  dir: string;
  socket: string;
  pidFile: string;
}

export function locateDaemon(cwd: string): DaemonPlace | undefined {
  let d = path.resolve(cwd);
  for (;;) {
    const dot = path.join(d, '.git');
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(dot);
    } catch {
      st = undefined;
    }
    if (st?.isDirectory()) return place(d, dot);
    if (st?.isFile()) {
      const m = /^gitdir: (.+)$/m.exec(fs.readFileSync(dot, 'utf8'));
      return m ? place(d, path.resolve(d, m[1].trim())) : undefined;
    }
    const up = path.dirname(d);
    if (up === d) return undefined;
    d = up;
  }
}

function place(worktree: string, gitDir: string): DaemonPlace {
  const dir = path.join(gitDir, 'xet', 'daemon');
  return { worktree, gitDir, dir, socket: path.join(dir, 'sock'), pidFile: path.join(dir, 'pid') };
}

/** Variables besides GIT_* that change what git or a capture does: where git's global config and
 * its default excludes file are (HOME, XDG_CONFIG_HOME), the time zone a snapshot's commit records
 * (TZ), and the capture's own tuning (XET_*). Not PATH: the thin client runs no git. */
// TZDIR: where the C library looks a TZ name up (the snapshot commit's offset, review 26).
const ENV_ALSO = ['HOME', 'XDG_CONFIG_HOME', 'TZ', 'TZDIR'];

/** The environment a capture or fork depends on: client and daemon must agree on it, else the
 * client runs the normal path. The umask is part of it: a fork's files are created under it. */
export function gitEnvPrint(env: NodeJS.ProcessEnv = process.env, umask: number = process.umask()): string {
  return JSON.stringify([
    ...Object.keys(env)
      .filter(
        (k) =>
          (k.startsWith('GIT_') && k !== 'GIT_XET_PROGRESS' && !k.startsWith('GIT_TRACE')) ||
          k.startsWith('XET_') ||
          ENV_ALSO.includes(k),
      )
      .sort()
      .map((k) => [k, env[k]]),
    ['umask', umask],
  ]);
}

/** Whether a client's environment print (hostile: from the socket) is the daemon's own. A
 * GIT_EXEC_PATH naming git's built-in exec path (git sets it for every command it runs, `git xet`
 * included) is the same as none: a daemon started by `git xet daemon start` serves `git-xet capture`
 * and one started by the MCP server serves `git xet capture`. */
export function sameEnvPrint(theirs: unknown, ours: string, builtInExecPath: string | undefined): boolean {
  if (theirs === ours) return true;
  if (typeof theirs !== 'string' || builtInExecPath === undefined) return false;
  const plain = (print: string): string | undefined => {
    let pairs: unknown;
    try {
      pairs = JSON.parse(print);
    } catch {
      return undefined;
    }
    if (!Array.isArray(pairs)) return undefined;
    return JSON.stringify(
      pairs.filter(
        (p) => !(Array.isArray(p) && p[0] === 'GIT_EXEC_PATH' && p[1] === builtInExecPath && p.length === 2),
      ),
    );
  };
  const a = plain(theirs);
  return a !== undefined && a === plain(ours);
}

/** The code a process runs: the version, where its build lives and when its capture module was
 * built (in nanoseconds: an integer the native client, native/git-xet-relay.c, prints the same). A
 * daemon started before a rebuild or from another install refuses, and the CLI captures itself
 * with the code it has. */
export function buildId(): string {
  let built = 0n;
  try {
    built = fs.statSync(path.join(__dirname, '..', 'snapshot', 'capture.js'), { bigint: true }).mtimeNs;
  } catch {
    // not a built tree: the version and location still tell builds apart
  }
  return `${TOOL_VERSION} ${__dirname} ${built}`;
}
