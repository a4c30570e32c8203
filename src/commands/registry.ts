// Every command definition, in the order help lists them: the one list both front ends read (the
// CLI in src/cli/main.ts, the MCP server's tools in src/mcp/).
import type { AnyCommandSpec } from './spec';
import { captureCommand } from './capture';
import { restoreCommand } from './restore';
import { verifyCommand } from './verify';
// signing
import {
  handoffAcceptCommand,
  handoffCreateCommand,
  handoffListCommand,
  handoffShowCommand,
  handoffSignCommand,
  handoffVerifyCommand,
} from './handoff';

export const COMMANDS: AnyCommandSpec[] = [
  captureCommand,
  restoreCommand,
  verifyCommand,
  // signing
  handoffCreateCommand,
  handoffListCommand,
  handoffShowCommand,
  handoffVerifyCommand,
  handoffAcceptCommand,
  handoffSignCommand,
];

/** Descriptions of the group commands whose subcommands are definitions (`handoff create`). */
export const GROUPS: Record<string, string> = {
  handoff: 'hand a snapshot to other agents with an immutable, verifiable descriptor',
  task: 'run a command as a task: immutable manifest, events, result, capture, guard',
};
