// A real MCP client session against `git xet mcp`: the SDK's Client with StdioClientTransport
// spawning bin/git-xet in a sandbox, and helpers that call a tool and check its result's shape.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Sandbox } from './sandbox';
import { XET_BIN } from './xet';

export interface McpSession {
  client: Client;
  transport: StdioClientTransport;
  /** The server's stderr so far (for failure messages). */
  stderr: () => string;
  /** The server process (its exit code and signal). */
  process: ChildProcess;
  close: () => Promise<void>;
}

/** Starts `git xet mcp <args>` with the sandbox's environment (plus `env`) and connects a client. */
export async function startMcp(sb: Sandbox, args: string[], env: NodeJS.ProcessEnv = {}): Promise<McpSession> {
  const e: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...sb.env, ...env })) if (v !== undefined) e[k] = v;
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [XET_BIN, 'mcp', ...args],
    env: e,
    cwd: sb.root,
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  const client = new Client({ name: 'xet-test', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (err) {
    throw new Error(`git xet mcp ${args.join(' ')} did not start: ${err}\nstderr: ${stderr}`, { cause: err });
  }
  const proc = (transport as unknown as { _process: ChildProcess })._process;
  return { client, transport, stderr: () => stderr, process: proc, close: () => client.close() };
}

export async function withMcp<T>(
  sb: Sandbox,
  args: string[],
  fn: (s: McpSession) => Promise<T>,
  env: NodeJS.ProcessEnv = {},
): Promise<T> {
  const s = await startMcp(sb, args, env);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

function describe(s: McpSession, tool: string, args: unknown, r: unknown): string {
  return `${tool} ${JSON.stringify(args)}\nresult: ${JSON.stringify(r).slice(0, 3000)}\nserver stderr: ${s
    .stderr()
    .slice(-2000)}`;
}

/** Calls a tool that must succeed; returns its structuredContent, checked equal to its text content. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function callOk(s: McpSession, tool: string, args: Record<string, unknown>): Promise<any> {
  const r = (await s.client.callTool({ name: tool, arguments: args }, undefined, {
    timeout: 120_000,
  })) as CallToolResult;
  assert.ok(!r.isError, `expected success:\n${describe(s, tool, args, r)}`);
  assert.ok(r.structuredContent, `no structuredContent:\n${describe(s, tool, args, r)}`);
  const text = r.content.find((c) => c.type === 'text');
  assert.deepEqual(JSON.parse(text?.type === 'text' ? text.text : 'null'), r.structuredContent);
  return r.structuredContent;
}

/** A tool error's {code, message, details}. */
export interface ToolError {
  code: string;
  message: string;
  details: Record<string, unknown>;
}

/** Calls a tool that must fail with `code`; returns the error. */
export async function callError(
  s: McpSession,
  tool: string,
  args: Record<string, unknown>,
  code: string,
): Promise<ToolError> {
  const r = (await s.client.callTool({ name: tool, arguments: args }, undefined, {
    timeout: 120_000,
  })) as CallToolResult;
  assert.equal(r.isError, true, `expected ${code}:\n${describe(s, tool, args, r)}`);
  const error = (r.structuredContent as { error?: ToolError } | undefined)?.error;
  assert.equal(error?.code, code, `expected ${code}:\n${describe(s, tool, args, r)}`);
  assert.ok(error && typeof error.message === 'string' && error.message.length > 0);
  const text = r.content.find((c) => c.type === 'text');
  assert.deepEqual(JSON.parse(text?.type === 'text' ? text.text : 'null'), { error });
  return error;
}

/** Whether a process exists (a zombie counts as gone: it runs nothing). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Waits until `pid` is gone; fails after `ms`. */
export async function waitGone(pid: number, ms = 15_000, what = `process ${pid}`): Promise<void> {
  const deadline = Date.now() + ms;
  while (alive(pid)) {
    assert.ok(Date.now() < deadline, `${what} still runs after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
