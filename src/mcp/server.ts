// The MCP server (`git xet mcp`): one tool per command definition with a tool name
// (src/commands/registry.ts), with the definition's own schema as input schema (made zod by toZod:
// this is the one front end that loads zod; the CLI's argument names, validated by the CLI's
// parseInput: one definition, not two), its output schema,
// its --json value as structuredContent, its typed errors as error results carrying the stable code,
// and its annotations as MCP's hints. Every call is confined to the server's repository
// (src/mcp/confine.ts); long tools run as child CLIs (src/mcp/child.ts) for progress and
// cancellation. The SDK's low-level Server is used rather than McpServer.registerTool because
// McpServer validates arguments itself and answers a bad one with untyped text: here the one
// validation is parseInput's, and a bad argument is a USAGE error like on the command line.

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { z } from 'zod';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  ErrorCode as McpErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { XetError } from '../errors';
import { callerRepoEnv } from '../git/exec';
import { findRepo } from '../git/repo';
import { TOOL_VERSION } from '../version';
import { parseInput } from '../cli/from-spec';
import { COMMANDS } from '../commands/registry';
import { isLong, type AnyCommandSpec } from '../commands/spec';
import { toZod, type Field } from '../commands/schema';
import { confineInput, readReach } from './confine';
import { XET_BIN, runChild, stopChildren } from './child';

export interface ServeOptions {
  /** Where `git xet mcp` was started (relative --repo and --root are relative to it). */
  cwd: string;
  repo?: string;
  roots: string[];
  /** Comma-separated tool names. */
  tools?: string;
  readOnly: boolean;
  /** Keep the worktree's daemon running while serving (started if none runs; stopped at the end
   * if this server started it). */
  daemon?: boolean;
}

/** The tools offered: every definition with a tool name, only those of `tools` when given (an
 * unknown name is USAGE), only read-only ones with `readOnly` (naming another is USAGE too). */
export function selectTools(specs: AnyCommandSpec[], tools: string | undefined, readOnly: boolean): AnyCommandSpec[] {
  let chosen = specs.filter((s) => s.tool !== null);
  if (tools !== undefined) {
    const names = tools
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean);
    const known = new Map(chosen.map((s) => [s.tool as string, s]));
    const unknown = names.filter((n) => !known.has(n));
    if (unknown.length || names.length === 0) {
      throw new XetError('USAGE', `mcp --tools: unknown tool(s) ${unknown.join(', ') || '(none named)'}`, {
        unknown,
        tools: [...known.keys()],
      });
    }
    chosen = chosen.filter((s) => names.includes(s.tool as string));
  }
  if (readOnly) {
    const writers = tools !== undefined ? chosen.filter((s) => !s.annotations.readOnly) : [];
    if (writers.length) {
      throw new XetError('USAGE', `mcp --read-only: ${writers.map((s) => s.tool).join(', ')} is not read-only`, {
        tools: writers.map((s) => s.tool),
      });
    }
    chosen = chosen.filter((s) => s.annotations.readOnly);
  }
  return chosen;
}

/** The error result's structuredContent, as --json prints an error. */
const ErrorOutput = z.object({
  error: z.object({ code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()) }),
});

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const s = z.toJSONSchema(schema, { io, unrepresentable: 'any', target: 'draft-7' }) as Record<string, unknown>;
  delete s.$schema;
  return s;
}

/** A definition's input as zod: its fields, no other key (what parseInput checks). */
function inputZod(spec: AnyCommandSpec): z.ZodType {
  const shape = Object.fromEntries(Object.entries(spec.input as Record<string, Field>).map(([k, v]) => [k, toZod(v)]));
  return z.object(shape).strict();
}

/** A tool's description for tools/list. */
export function toolDefinition(spec: AnyCommandSpec): Tool {
  const input = jsonSchema(inputZod(spec), 'input');
  // MCP's own defaults (gc is a dry run unless asked) are what an agent gets: the schema says so.
  const props = (input.properties ?? {}) as Record<string, Record<string, unknown>>;
  for (const [k, v] of Object.entries(spec.mcpDefaults ?? {})) if (props[k]) props[k].default = v;
  const tool: Tool = {
    name: spec.tool as string,
    title: `git xet ${spec.path.join(' ')}`,
    description: spec.description,
    inputSchema: input as Tool['inputSchema'],
    annotations: {
      readOnlyHint: spec.annotations.readOnly,
      destructiveHint: spec.annotations.destructive,
      idempotentHint: spec.annotations.idempotent,
      openWorldHint: spec.annotations.openWorld ?? false,
    },
  };
  if (spec.output) {
    // An error result carries structuredContent too, and clients check it against this schema.
    tool.outputSchema = {
      type: 'object',
      anyOf: [jsonSchema(toZod(spec.output), 'output'), jsonSchema(ErrorOutput, 'output')],
    } as Tool['outputSchema'];
  }
  return tool;
}

function errorPayload(e: unknown): { code: string; message: string; details: Record<string, unknown> } {
  if (e instanceof XetError) return e.toJSON();
  const err = e as Error & { details?: Record<string, unknown> };
  return { code: 'INTERNAL', message: err?.message ?? String(e), details: err?.details ?? { stack: err?.stack } };
}

export function errorResult(e: unknown): CallToolResult {
  const error = errorPayload(e);
  return {
    isError: true,
    content: [{ type: 'text', text: JSON.stringify({ error }) }],
    structuredContent: { error },
  };
}

function valueResult(spec: AnyCommandSpec, value: unknown): CallToolResult {
  if (spec.output) {
    const r = toZod(spec.output).safeParse(value);
    if (!r.success) {
      // A definition whose output schema disagrees with its --json: a bug of ours, said as one.
      return errorResult(
        Object.assign(new Error(`${spec.tool}: the result does not match the tool's output schema`), {
          details: { issues: r.error.issues.slice(0, 10) },
        }),
      );
    }
  }
  const structured =
    value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  return {
    ...(spec.mcpIsError?.(value) ? { isError: true } : {}),
    content: [{ type: 'text', text: JSON.stringify(value) }],
    ...(structured ? { structuredContent: structured } : {}),
  };
}

export interface ToolHost {
  repo: string;
  roots: string[];
  specs: AnyCommandSpec[];
}

/** The server with its handlers; `inflight` holds the calls running now. */
export function createServer(host: ToolHost): { server: Server; inflight: Set<Promise<unknown>> } {
  const server = new Server(
    { name: 'git-xet', version: TOOL_VERSION },
    {
      capabilities: { tools: {} },
      instructions:
        `git xet tools for the repository ${host.repo}. Path arguments must lie inside its worktrees` +
        `${host.roots.length ? ` or ${host.roots.join(', ')}` : ''}; relative paths are relative to it.`,
    },
  );
  const byName = new Map(host.specs.map((s) => [s.tool as string, s]));
  const tools = host.specs.map(toolDefinition);
  const inflight = new Set<Promise<unknown>>();
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const spec = byName.get(req.params.name);
    if (!spec) throw new McpError(McpErrorCode.InvalidParams, `no tool ${req.params.name}`);
    const token = extra._meta?.progressToken;
    let n = 0;
    const progress =
      token === undefined
        ? undefined
        : (phase: string) => {
            extra
              .sendNotification({
                method: 'notifications/progress',
                params: { progressToken: token, progress: ++n, message: phase },
              })
              .catch(() => undefined);
          };
    const work = (async (): Promise<CallToolResult> => {
      try {
        const raw = { ...(spec.mcpDefaults ?? {}), ...(req.params.arguments ?? {}) };
        const parsed = parseInput(spec, raw);
        // The repository's worktrees and remotes (three git calls) only when a path argument is given.
        const paths = Object.keys(spec.paths ?? {}).some((k) => parsed[k] !== undefined && parsed[k] !== null);
        const input = confineInput(spec, parsed, paths ? await readReach(host.repo, host.roots) : null);
        const value = isLong(spec, input)
          ? await runChild({ spec, input, cwd: host.repo, signal: extra.signal, onProgress: progress })
          : await spec.run(input, {
              cwd: host.repo,
              progress,
              note: () => undefined,
              signal: extra.signal,
              via: 'mcp',
            });
        return valueResult(spec, value);
      } catch (e) {
        return errorResult(e);
      }
    })();
    inflight.add(work);
    const result = await work.finally(() => inflight.delete(work));
    if (extra.signal.aborted) {
      // The SDK sends nothing for a cancelled request; this answer (CANCELLED once the child is
      // gone) tells a client that waits for it when the repository is quiet again. Clients that
      // do not wait ignore it, as the protocol says they may.
      await server.transport
        ?.send({ jsonrpc: '2.0', id: extra.requestId, result: result as Record<string, unknown> })
        .catch(() => undefined);
    }
    return result;
  });
  return { server, inflight };
}

/** Runs the server on stdio until stdin closes (or SIGTERM/SIGINT): then stops the child CLIs, lets
 * the in-process calls end (10 s at most) and resolves. */
/** `git xet daemon <action> --json` in `dir`, with this server's environment (the children's, which
 * the daemon must share to be handed their lines). */
function daemonCli(dir: string, action: 'status' | 'start' | 'stop'): Promise<{ running?: boolean; pid?: number }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [XET_BIN, 'daemon', action, '--json'], { cwd: dir }, (err, stdout) => {
      if (err) return reject(err);
      try {
        resolve(JSON.parse(stdout) as { running?: boolean; pid?: number });
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

/** The worktree's daemon, started unless one runs; never fatal (the CLI does not need it). */
async function ensureDaemon(dir: string): Promise<{ started: boolean } | null> {
  try {
    if ((await daemonCli(dir, 'status')).running) return { started: false };
    await daemonCli(dir, 'start');
    return { started: true };
  } catch (e) {
    process.stderr.write(`git xet mcp: no daemon (${(e as Error).message.split('\n')[0]}); tools run without it\n`);
    return null;
  }
}

export async function serveStdio(opts: ServeOptions): Promise<void> {
  const repo = await findRepo(path.resolve(opts.cwd, opts.repo ?? '.'));
  const roots = opts.roots.map((r) => {
    const abs = path.resolve(opts.cwd, r);
    let real: string;
    try {
      real = fs.realpathSync(abs);
    } catch {
      throw new XetError('USAGE', `mcp --root: ${abs} does not exist`, { root: abs });
    }
    if (!fs.statSync(real).isDirectory()) throw new XetError('USAGE', `mcp --root: ${abs} is not a directory`);
    return real;
  });
  const specs = selectTools(COMMANDS, opts.tools, opts.readOnly);
  const top = fs.realpathSync(repo.worktree);
  // Calls act on this repository only: not on one a GIT_DIR of the host's names, not on the cwd.
  for (const k of Object.keys(callerRepoEnv())) delete process.env[k];
  process.chdir(top);
  // stdout is the protocol: anything printed by mistake goes to stderr.
  console.log = console.error;
  console.info = console.error;
  const { server, inflight } = createServer({ repo: top, roots, specs });
  const transport = new StdioServerTransport();
  // The long tools run as child CLIs, which hand capture and fork to a running daemon; with one
  // kept for the session they skip node's start-up and re-read only the directories that changed.
  // Started before the first call can come.
  const daemon = opts.daemon ? await ensureDaemon(top) : null;
  await server.connect(transport);
  await new Promise<void>((resolve) => {
    process.stdin.once('end', resolve);
    process.stdin.once('close', resolve);
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await stopChildren();
  if (daemon?.started) await daemonCli(top, 'stop').catch(() => undefined);
  await Promise.race([Promise.allSettled([...inflight]), new Promise((r) => setTimeout(r, 10_000).unref())]);
  await server.close().catch(() => undefined);
  // Whatever handle an in-process command left open must not keep a server without a client alive.
  setTimeout(() => process.exit(process.exitCode ?? 0), 200).unref();
}
