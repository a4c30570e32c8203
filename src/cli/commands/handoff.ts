// git xet handoff: create, list, show, verify and accept handoff descriptors (xet.handoff/v1).
import type { Command } from 'commander';

export function registerHandoff(program: Command): void {
  program.command('handoff').description('publish and accept handoffs between agents (not built yet)');
}
