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
import { catCommand } from './cat';
import { hydrateCommand } from './hydrate';
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
import { daemonCommand } from './daemon';
// specs-b
import { pushCommand } from './push';
import { fetchCommand } from './fetch';
import { pinCommand, pinsCommand, unpinCommand } from './pin';
import { gcCommand } from './gc';
import { taskCancelCommand, taskRunCommand } from './task-run';
import { taskEventsCommand, taskListCommand, taskShowCommand } from './task-read';
import { taskResultCommand } from './task-result';
import { taskRecoverCommand } from './task-recover';
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
  // The order `git xet --help` lists them in (a group where its first subcommand is).
  initCommand,
  captureCommand,
  snapshotsCommand,
  showCommand,
  restoreCommand,
  verifyCommand,
  diffCommand,
  forkCommand,
  forksCommand,
  changesCommand,
  discardCommand,
  reclaimCommand,
  exportCommand,
  handoffCreateCommand,
  handoffListCommand,
  handoffShowCommand,
  handoffVerifyCommand,
  handoffAcceptCommand,
  handoffSignCommand,
  pushCommand,
  fetchCommand,
  fsckCommand,
  gcCommand,
  archiveCommand,
  catCommand,
  hydrateCommand,
  statusCommand,
  versionCommand,
  pinCommand,
  unpinCommand,
  pinsCommand,
  dropCommand,
  undropCommand,
  taskRunCommand,
  taskCancelCommand,
  taskShowCommand,
  taskListCommand,
  taskEventsCommand,
  taskResultCommand,
  taskRecoverCommand,
  hooksInstallCommand,
  hooksUninstallCommand,
  hooksBlockCommand,
  hooksStatusCommand,
  allowanceCommand,
  mcpCommand,
  daemonCommand,
];

/** Descriptions of the group commands whose subcommands are definitions (`handoff create`). */
export const GROUPS: Record<string, string> = {
  handoff: 'hand a snapshot to other agents with an immutable, verifiable descriptor',
  task: 'run a command as a task: immutable manifest, events, result, capture, guard',
  // specs-a
  hooks: HOOKS_GROUP,
};
