// git xet task …: runs of a command in a workspace slot (src/tasks/). Each subcommand lives in its
// own file; this one only makes the group.
import type { Command } from 'commander';
import { registerTaskRun } from './task-run';
import { registerTaskRead } from './task-read';
import { registerTaskResult } from './task-result';
import { registerTaskRecover } from './task-recover';

export function registerTask(program: Command): void {
  const task = program
    .command('task')
    .description('run a command as a task: immutable manifest, events, result, capture, guard');
  registerTaskRun(task); // run, cancel
  registerTaskRead(task); // show, list, events
  registerTaskResult(task); // result
  registerTaskRecover(task); // recover
}
