// git xet mcp: the Model Context Protocol server on stdio (src/mcp/server.ts). A definition like any
// command's, but not a tool itself; it runs until its client closes stdin.
import { s } from './schema';
import { XetError } from '../errors';
import { defineCommand, repeatable } from './spec';

export const mcpCommand = defineCommand({
  path: ['mcp'],
  tool: null,
  description: "serve git xet's commands as MCP tools on stdio, confined to one repository (until stdin closes)",
  input: {
    repo: s.string().optional().describe('the repository the tools work on (default: the current directory)'),
    root: repeatable('another directory path arguments may name (fork and restore targets; repeatable)'),
    tools: s.string().optional().describe('offer only these tools (comma-separated names, e.g. capture,verify)'),
    readOnly: s.boolean().optional().describe('offer only the read-only tools'),
    daemon: s
      .boolean()
      .optional()
      .describe(
        "keep the worktree's daemon running while serving (started if none runs, stopped at exit if this server started it): captures and forks skip a start-up and re-read only the directories that changed",
      ),
  },
  flags: { repo: { value: '<dir>' }, root: { value: '<dir>' }, tools: { value: '<list>' } },
  annotations: { readOnly: false, destructive: false, idempotent: false },
  // Not a tool: the command line runs cliAction, never this.
  run(): Promise<Record<string, never>> {
    return Promise.reject(new XetError('USAGE', 'git xet mcp runs only as a command'));
  },
  async cliAction(input, ctx) {
    const { serveStdio } = await import('../mcp/server');
    await serveStdio({
      cwd: ctx.cwd,
      repo: input.repo,
      roots: input.root,
      tools: input.tools,
      readOnly: input.readOnly === true,
      daemon: input.daemon === true,
    });
  },
});
