// The thin client: `git xet capture|fork|push|handoff create …` handed whole to the worktree's
// running daemon before the CLI loads anything else (bin/git-xet requires this module first). The daemon parses and runs the
// command line with the CLI's own code (src/cli/main.ts runCli) and sends back what it printed and
// its exit code. Node's start-up is then the whole cost of the process: loading the command modules
// (commander, the schemas, the capture code) is what the daemon saves.
// This module loads only node built-ins and the daemon's client (client.ts, locate.ts). Whenever the
// daemon cannot run the line (none running, another build or environment, a dropped connection, no
// acknowledgement in time), the CLI runs it itself.
import { sendToDaemon } from './client';
import { locateDaemon } from './locate';

/** Flags the program itself takes before a command word. */
const GLOBAL_FLAGS = new Set(['--json', '-q', '--quiet']);
/** What makes a line the program's (help, version), not a command the daemon runs. */
const NOT_RELAYED = new Set(['-h', '--help', '-V', '--version', 'help']);

/** The commands the daemon may run for a client. A push and a handoff create are the daemon's only
 * when their command definition says so for the parsed line (spec.relayable: a directory store
 * written in-process, no signing, nothing read from stdin); otherwise the daemon declines at once
 * and the CLI runs the line. */
export type RelayedCommand = 'capture' | 'fork' | 'push' | 'handoff create';

/** The command a line runs when the daemon may run it (a RelayedCommand; fork but not --remount),
 * else undefined. Decided on the words alone: the daemon parses the line again with the CLI's parser
 * and refuses what that says is another command. */
export function relayedCommand(argv: readonly string[]): RelayedCommand | undefined {
  let i = 0;
  while (i < argv.length && GLOBAL_FLAGS.has(argv[i])) i++;
  let word: RelayedCommand;
  if (argv[i] === 'capture' || argv[i] === 'fork' || argv[i] === 'push') word = argv[i] as RelayedCommand;
  else if (argv[i] === 'handoff' && argv[i + 1] === 'create') word = 'handoff create';
  else return undefined;
  for (const a of argv) {
    if (NOT_RELAYED.has(a)) return undefined;
    // Node decoded bytes that are not UTF-8 as U+FFFD: only the process that has the raw bytes
    // can tell (src/cli/argv-bytes.ts), so such a line runs here.
    if (a.includes('\uFFFD')) return undefined;
    if (word === 'fork' && (a === '--remount' || a.startsWith('--remount='))) return undefined;
  }
  return word;
}

export interface RelayedRun {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Whether a relayed reply is well formed (the socket is a peer to check, like any input). */
export function isRelayedRun(v: unknown): v is RelayedRun {
  const r = v as RelayedRun;
  return (
    typeof r === 'object' &&
    r !== null &&
    Number.isInteger(r.exitCode) &&
    r.exitCode >= 0 &&
    r.exitCode < 256 &&
    typeof r.stdout === 'string' &&
    typeof r.stderr === 'string'
  );
}

/** Runs argv through the daemon and prints what it printed: true when it did (process.exitCode is
 * then set), false when the caller must run the line itself. */
export async function relayCli(argv: string[]): Promise<boolean> {
  if (process.env.GIT_XET_NO_DAEMON === '1') return false;
  // The MCP server's child CLIs report progress as they go (GIT_XET_PROGRESS=json); a relayed
  // command's output arrives when it ends.
  if (process.env.GIT_XET_PROGRESS !== undefined) return false;
  if (relayedCommand(argv) === undefined) return false;
  const cwd = process.cwd();
  const place = locateDaemon(cwd);
  if (!place) return false;
  const reply = await sendToDaemon(
    place,
    { op: 'cli', cwd, argv, stderrTTY: Boolean(process.stderr.isTTY), columns: process.stderr.columns },
    0,
    true,
  );
  if (!reply?.ok || !isRelayedRun(reply.result)) return false;
  const r = reply.result;
  await Promise.all([write(process.stdout, r.stdout), write(process.stderr, r.stderr)]);
  process.exitCode = r.exitCode;
  return true;
}

function write(stream: NodeJS.WriteStream, text: string): Promise<void> {
  if (!text) return Promise.resolve();
  return new Promise((resolve) => {
    // A reader that closed the pipe early loses what it did not read (as in src/cli/main.ts).
    stream.once('error', () => resolve());
    stream.write(text, () => resolve());
  });
}
