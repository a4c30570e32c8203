// git xet task result (owner: result helper).
import type { Command } from 'commander';

// eslint-disable-next-line @typescript-eslint/no-unused-vars
export function registerTaskResult(task: Command): void {
  // filled in by issue 10's branches
}
