// git xet version: this git xet's version, and the git and Node.js it runs with.
import { s } from './schema';
import { TOOL_VERSION } from '../version';
import { defineCommand } from './spec';

// Not a tool: an MCP client learns the server's version from its initialize answer.
export const versionCommand = defineCommand({
  path: ['version'],
  tool: null,
  description: 'print the version of git xet (with --json: also of git and Node.js)',
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({ version: s.string(), git: s.string(), node: s.string() }),
  async run() {
    const { gitVersion } = await import('../git/exec');
    return { version: TOOL_VERSION, git: gitVersion().join('.'), node: process.versions.node };
  },
  human: () => TOOL_VERSION,
});
