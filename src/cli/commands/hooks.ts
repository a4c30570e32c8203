// git xet hooks install|uninstall|status (owner: hooks helper).
import type { Command } from 'commander';

// eslint-disable-next-line @typescript-eslint/no-unused-vars
export function registerHooks(program: Command): void {
  // filled in by issue 10's branches
}
