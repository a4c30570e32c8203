// git xet task recover (owner: recovery helper).
import type { Command } from 'commander';

// eslint-disable-next-line @typescript-eslint/no-unused-vars
export function registerTaskRecover(task: Command): void {
  // filled in by issue 10's branches
}
