// git xet task run, cancel (owner: runner helper).
import type { Command } from 'commander';

// eslint-disable-next-line @typescript-eslint/no-unused-vars
export function registerTaskRun(task: Command): void {
  // filled in by issue 10's branches
}
