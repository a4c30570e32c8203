// git xet task show, list, events (owner: task-store helper).
import type { Command } from 'commander';

// eslint-disable-next-line @typescript-eslint/no-unused-vars
export function registerTaskRead(task: Command): void {
  // filled in by issue 10's branches
}
