// Drives the fault points of src/testing/fault-points.ts: runs the real CLI so that it SIGKILLs
// itself at a named point, and checks that the kill landed there (the point announced itself).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { DIE_AT_ENV, FAULT_POINTS, PAUSE_DIR_ENV, type FaultPoint } from '../../src/testing/fault-points';
import type { Sandbox } from './sandbox';
import { describeRun, xet, type XetResult } from './xet';

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
