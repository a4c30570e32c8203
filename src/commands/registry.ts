// Every command definition, in the order help lists them: the one list both front ends read (the
// CLI in src/cli/main.ts, the MCP server's tools in src/mcp/).
import type { AnyCommandSpec } from './spec';
import { captureCommand } from './capture';
import { restoreCommand } from './restore';
import { verifyCommand } from './verify';
// specs-a
import { initCommand } from './init';
import { snapshotsCommand } from './snapshots';
import { showCommand } from './show';
import { diffCommand } from './diff';
import { forkCommand } from './fork';
import { forksCommand } from './forks';
import { changesCommand } from './changes';
import { discardCommand } from './discard';
import { reclaimCommand } from './reclaim';
import { exportCommand } from './export';
import { fsckCommand } from './fsck';
import { archiveCommand } from './archive';
import { statusCommand } from './status';
import { versionCommand } from './version';
import { dropCommand, undropCommand } from './drop';
import {
  HOOKS_GROUP,
  hooksBlockCommand,
  hooksInstallCommand,
  hooksStatusCommand,
  hooksUninstallCommand,
} from './hooks';
import { allowanceCommand } from './allowance';
// mcp
import { mcpCommand } from './mcp';
// specs-b
import { pushCommand } from './push';
import { fetchCommand } from './fetch';
import { pinCommand, pinsCommand, unpinCommand } from './pin';
import { gcCommand } from './gc';
// signing
import {
  handoffAcceptCommand,
  handoffCreateCommand,
  handoffListCommand,
  handoffShowCommand,
  handoffSignCommand,
  handoffVerifyCommand,
} from './handoff';
import { taskCancelCommand, taskRunCommand } from './task-run';
import { taskEventsCommand, taskListCommand, taskShowCommand } from './task-read';
import { taskResultCommand } from './task-result';
import { taskRecoverCommand } from './task-recover';

export const COMMANDS: AnyCommandSpec[] = [
  captureCommand,
  restoreCommand,
  verifyCommand,
  // specs-a
  initCommand,
  snapshotsCommand,
  showCommand,
  diffCommand,
  forkCommand,
  forksCommand,
  changesCommand,
  discardCommand,
  reclaimCommand,
  exportCommand,
  fsckCommand,
  archiveCommand,
  statusCommand,
  versionCommand,
  dropCommand,
  undropCommand,
  hooksInstallCommand,
  hooksUninstallCommand,
  hooksBlockCommand,
  hooksStatusCommand,
  allowanceCommand,
  // mcp
  mcpCommand,
  // specs-b
  pushCommand,
  fetchCommand,
  gcCommand,
  pinCommand,
  unpinCommand,
  pinsCommand,
  // signing
  handoffCreateCommand,
  handoffListCommand,
  handoffShowCommand,
  handoffVerifyCommand,
  handoffAcceptCommand,
  handoffSignCommand,
  taskRunCommand,
  taskCancelCommand,
  taskShowCommand,
  taskListCommand,
  taskEventsCommand,
  taskResultCommand,
  taskRecoverCommand,
];

/** Descriptions of the group commands whose subcommands are definitions (`handoff create`). */
export const GROUPS: Record<string, string> = {
  handoff: 'hand a snapshot to other agents with an immutable, verifiable descriptor',
  task: 'run a command as a task: immutable manifest, events, result, capture, guard',
  // specs-a
  hooks: HOOKS_GROUP,
};
