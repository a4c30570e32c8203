// One race both daemon clients must win (test/daemon.test.ts for node's, test/relay-native.test.ts
// for the native one): a client stopped (Ctrl-Z) while its daemon, stopped too, has its line unread;
// the daemon resumes, acknowledges and runs the line, and the client resumes only past its deadline.
// The line must run once: the client takes the acknowledgement that arrived while it was stopped.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs the race for the capture `[cmd, ...args]` (a `--json capture` line) in dir, whose daemon is
 * daemonPid; snapshotRefs lists the repository's snapshots. */
export async function stoppedClientRunsOnce(opts: {
  dir: string;
  daemonPid: number;
  command: [string, ...string[]];
  env: NodeJS.ProcessEnv;
  snapshotRefs: (dir: string) => string[];
}): Promise<void> {
  const { dir, daemonPid, command, env, snapshotRefs } = opts;
  const before = snapshotRefs(dir).length;
  process.kill(daemonPid, 'SIGSTOP');
  const client = spawn(command[0], command.slice(1), { cwd: dir, env });
  let out = '';
  client.stdout.on('data', (b: Buffer) => (out += b.toString()));
  const code = new Promise<number | null>((r) => client.on('close', r));
  await pause(700); // connected, its line unread
  process.kill(client.pid as number, 'SIGSTOP');
  process.kill(daemonPid, 'SIGCONT'); // the daemon reads it before the deadline, acknowledges and runs it
  for (let i = 0; i < 500 && snapshotRefs(dir).length === before; i++) await pause(20);
  await pause(3500); // past the client's deadline
  process.kill(client.pid as number, 'SIGCONT');
  assert.equal(await code, 0, out);
  const made = snapshotRefs(dir);
  assert.equal(made.length, before + 1, 'one snapshot, not one from the daemon and one from the CLI');
  assert.ok(made.includes((JSON.parse(out) as { snapshot: string }).snapshot), 'the one reported');
}
