// git xet version: this git xet's version, the git and Node.js it runs with, and whether its native
// module (libdeflate, mount(2); src/native.ts) loaded, with the reason when it did not, and whether it
// has ISA-L's igzip (scripts/build-native.mjs).
import { s } from './schema';
import { TOOL_VERSION } from '../version';
import { defineCommand } from './spec';

// Not a tool: an MCP client learns the server's version from its initialize answer.
export const versionCommand = defineCommand({
  path: ['version'],
  tool: null,
  description:
    'print the version of git xet (with --json: also of git and Node.js, and whether the native module loaded)',
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    version: s.string(),
    git: s.string(),
    node: s.string(),
    native: s.looseObject({ loaded: s.boolean(), missing: s.string().nullable(), igzip: s.boolean() }),
  }),
  async run() {
    const { gitVersion } = await import('../git/exec');
    const { native, nativeMissing } = await import('../native');
    const { fastDeflateAvailable } = await import('../git/zlib-fast');
    return {
      version: TOOL_VERSION,
      git: gitVersion().join('.'),
      node: process.versions.node,
      native: { loaded: native !== null, missing: nativeMissing, igzip: fastDeflateAvailable },
    };
  },
  human: () => TOOL_VERSION,
});
