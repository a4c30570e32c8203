// Drives the fault points of src/testing/fault-points.ts: runs the real CLI so that it SIGKILLs
// itself at a named point, and checks that the kill landed there (the point announced itself), or
// stops there until the test lets it go on (races made exact).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DIE_AT_ENV, FAULT_POINTS, PAUSE_AT_ENV, PAUSE_DIR_ENV, type FaultPoint } from '../../src/testing/fault-points';
import type { Sandbox } from './sandbox';
import { XET_BIN, describeRun, xet, type XetResult } from './xet';

export { FAULT_POINTS, type FaultPoint };

let runs = 0;

/** Run `git xet <args>` with a SIGKILL at `point`; asserts it died there, not before or after. */
export function killAt(sb: Sandbox, cwd: string, args: string[], point: FaultPoint): XetResult {
  const dir = sb.path(`faults-${++runs}`);
  fs.mkdirSync(dir);
  const r = xet(sb, cwd, args, { env: { [DIE_AT_ENV]: point, [PAUSE_DIR_ENV]: dir } });
  assert.equal(r.signal, 'SIGKILL', `expected a SIGKILL at ${point}:\n${describeRun(r)}`);
  assert.deepEqual(fs.readdirSync(dir), [`${point}.reached`], `the kill landed at ${point}`);
  return r;
}

/** Start `git xet <args>` so that it stops at `point`; resolves once it is there. `go()` lets it
 * finish; `done` is its exit code and stdout. */
export async function pausedAt(
  sb: Sandbox,
  cwd: string,
  args: string[],
  point: FaultPoint,
): Promise<{ go: () => void; done: Promise<{ code: number | null; stdout: string }> }> {
  const dir = sb.path(`faults-${++runs}`);
  fs.mkdirSync(dir);
  const child = spawn(process.execPath, [XET_BIN, ...args], {
    cwd,
    env: { ...sb.env, [PAUSE_AT_ENV]: point, [PAUSE_DIR_ENV]: dir },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  const done = new Promise<{ code: number | null; stdout: string }>((resolve) =>
    child.once('close', (code) => resolve({ code, stdout })),
  );
  const reached = path.join(dir, `${point}.reached`);
  const deadline = Date.now() + 120_000;
  let exited = false;
  void done.then(() => (exited = true));
  while (!fs.existsSync(reached)) {
    assert.ok(!exited && Date.now() < deadline, `git xet ${args.join(' ')} never reached ${point}: ${stdout}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return { go: () => fs.writeFileSync(path.join(dir, `${point}.go`), ''), done };
}
