// Runs the real CLI (bin/git-xet) as a child process and parses its JSON output.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { run } from './git';
import type { Sandbox } from './sandbox';

// Compiled location: dist/test/support/xet.js -> ../../../bin/git-xet
export const XET_BIN = path.resolve(__dirname, '..', '..', '..', 'bin', 'git-xet');

export interface XetResult {
  args: string[];
  cwd: string;
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function xet(
  sb: Sandbox,
  cwd: string,
  args: string[],
  opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv; wrap?: string[] } = {},
): XetResult {
  if (!fs.existsSync(XET_BIN)) throw new Error(`CLI entry point not found at ${XET_BIN}`);
  // `wrap` runs the CLI under another program, e.g. setpriv to take a capability away.
  const [cmd, ...pre] = opts.wrap?.length ? [...opts.wrap, process.execPath] : [process.execPath];
  const r = run(sb, cwd, cmd, [...pre, XET_BIN, ...args], {
    timeoutMs: opts.timeoutMs ?? 180_000,
    env: opts.env,
  });
  return {
    args,
    cwd,
    status: r.status,
    signal: r.signal,
    stdout: r.stdout.toString('utf8'),
    stderr: r.stderr.toString('utf8'),
  };
}

export function describeRun(r: XetResult): string {
  return (
    `git xet ${r.args.join(' ')} (cwd ${r.cwd}) exited ${r.status}` +
    `${r.signal ? ` (signal ${r.signal}; timed out or killed)` : ''}\n` +
    `stdout: ${r.stdout.slice(0, 3000)}\nstderr: ${r.stderr.slice(0, 3000)}`
  );
}

/** Parses stdout as one JSON document (tolerating surrounding whitespace). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function parseJson(r: XetResult): any {
  const text = r.stdout.trim();
  try {
    return JSON.parse(text);
  } catch {
    assert.fail(`stdout is not a single JSON document:\n${describeRun(r)}`);
  }
}

export function expectExit(r: XetResult, code: number): void {
  assert.equal(r.status, code, `expected exit ${code}:\n${describeRun(r)}`);
}

/** capture --json; asserts success and a 40-hex snapshot id; returns it. */
export function capture(sb: Sandbox, cwd: string, extra: string[] = [], timeoutMs?: number): string {
  const r = xet(sb, cwd, ['capture', ...extra, '--json'], { timeoutMs });
  expectExit(r, 0);
  const out = parseJson(r);
  assert.equal(typeof out?.snapshot, 'string', `capture output has no "snapshot": ${r.stdout}`);
  assert.match(out.snapshot, /^[0-9a-f]{40}$/, `capture "snapshot" is not a 40-hex oid: ${r.stdout}`);
  return out.snapshot as string;
}

/** restore --json; asserts success. */
export function restore(
  sb: Sandbox,
  cwd: string,
  snapshot: string,
  target: string,
  extra: string[] = [],
  timeoutMs?: number,
): XetResult {
  const r = xet(sb, cwd, ['restore', snapshot, target, ...extra, '--json'], { timeoutMs });
  expectExit(r, 0);
  return r;
}

export function verify(sb: Sandbox, cwd: string, snapshot: string, target: string, timeoutMs?: number): XetResult {
  return xet(sb, cwd, ['verify', snapshot, target, '--json'], { timeoutMs });
}

/** show <snapshot> --json; returns the manifest. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function showManifest(sb: Sandbox, cwd: string, snapshot: string): any {
  const r = xet(sb, cwd, ['show', snapshot, '--json']);
  expectExit(r, 0);
  const out = parseJson(r);
  // Accept the manifest itself or a {manifest: ...} wrapper.
  return out && typeof out === 'object' && out.manifest && typeof out.manifest === 'object' ? out.manifest : out;
}

/** Asserts a typed failure: exit status (3 by default) and {"error":{"code":code,...}} on stdout.
 * One code: the docs promise one code for one condition, so a test never accepts either of two. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function expectError(r: XetResult, code: string, exit = 3): any {
  assert.equal(r.status, exit, `expected exit ${exit} with error ${code}:\n${describeRun(r)}`);
  const out = parseJson(r);
  assert.ok(out && typeof out === 'object' && out.error, `no "error" object in output:\n${describeRun(r)}`);
  assert.equal(
    out.error.code,
    code,
    `expected error code ${code}, got ${JSON.stringify(out.error.code)}:\n${describeRun(r)}`,
  );
  assert.equal(typeof out.error.message, 'string', `error.message should be a string: ${r.stdout}`);
  assert.ok(out.error.message.length > 0, `error.message should not be empty: ${r.stdout}`);
  return out.error;
}
