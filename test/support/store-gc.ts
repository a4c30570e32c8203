// Store gc and drop --remote for tests: run them as processes through store-gc-run.js (so fault
// points can kill or pause them), read a store's pack files, and check a store is whole.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { run } from './git';
import { readStateLog } from './remote';
import type { Sandbox } from './sandbox';
import { parseJson, xet } from './xet';

export const STORE_GC_RUN = path.resolve(__dirname, 'store-gc-run.js');

export interface ToolResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

function toResult(status: number | null, signal: NodeJS.Signals | null, stdout: string, stderr: string): ToolResult {
  let json: unknown;
  try {
    json = JSON.parse(stdout.trim());
  } catch {
    json = null;
  }
  return { status, signal, stdout, stderr, json };
}

export function describeTool(r: ToolResult): string {
  return `exited ${r.status}${r.signal ? ` (${r.signal})` : ''}\nstdout: ${r.stdout.slice(0, 3000)}\nstderr: ${r.stderr.slice(0, 3000)}`;
}

/** `gc <store> …` or `drop <remote> <id>…`, synchronously. */
export function tool(sb: Sandbox, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): ToolResult {
  const r = run(sb, cwd, process.execPath, [STORE_GC_RUN, ...args], { env, timeoutMs: 180_000 });
  return toResult(r.status, r.signal, r.stdout.toString('utf8'), r.stderr.toString('utf8'));
}

/** The same, as a process that does not block the event loop. */
export function toolAsync(sb: Sandbox, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [STORE_GC_RUN, ...args], {
      cwd,
      env: { ...sb.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (status, signal) => resolve(toResult(status, signal, stdout, stderr)));
  });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function gcOk(sb: Sandbox, cwd: string, store: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): any {
  const r = tool(sb, cwd, ['gc', store, ...args], env);
  assert.equal(r.status, 0, `store gc ${args.join(' ')}: ${describeTool(r)}`);
  return r.json;
}

/** Pack names present in packs/. */
export function packFiles(store: string): string[] {
  const dir = path.join(store, 'packs');
  return fs.existsSync(dir)
    ? fs
        .readdirSync(dir)
        .filter((n) => n.endsWith('.pack'))
        .map((n) => n.slice(0, -5))
        .sort()
    : [];
}

/** `git xet fsck --store` is clean, and the newest state names only packs present in packs/. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function assertStoreWhole(sb: Sandbox, cwd: string, store: string): any {
  const r = xet(sb, cwd, ['fsck', '--store', store, '--json']);
  const out = parseJson(r);
  assert.equal(r.status, 0, `fsck --store: ${r.stdout}\n${r.stderr}`);
  assert.deepEqual(out.problems, []);
  const log = readStateLog(store);
  const newest = log[log.length - 1]?.outer.state;
  const present = new Set(packFiles(store));
  for (const p of newest?.packs ?? []) assert.ok(present.has(p), `the newest state's pack ${p} is in packs/`);
  return out;
}
