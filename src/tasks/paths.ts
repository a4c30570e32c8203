// Where a task's private files live: <common>/xet/tasks/<id>/ (0700), shared by every worktree.
//   stdout, stderr   the command's output (files, not pipes: they outlive a runner that dies)
//   exit             the command's exit status, written by the wrapper shell when it ends
//   result           $XET_TASK_RESULT: a file the command may write its result to
//   result.spool     a result over 256 KiB, published atomically (0600)
import * as fs from 'node:fs';
import * as path from 'node:path';
import { sidecarDir } from '../sidecar/db';

export function tasksDir(commonDir: string): string {
  return path.join(sidecarDir(commonDir), 'tasks');
}
export function taskDir(commonDir: string, id: string): string {
  return path.join(tasksDir(commonDir), id);
}
export function taskFile(
  commonDir: string,
  id: string,
  name: 'stdout' | 'stderr' | 'exit' | 'result' | 'result.spool',
): string {
  return path.join(taskDir(commonDir, id), name);
}

/** Create the task's private directory (0700, whatever the umask). */
export function ensureTaskDir(commonDir: string, id: string): string {
  const dir = taskDir(commonDir, id);
  fs.mkdirSync(tasksDir(commonDir), { recursive: true, mode: 0o700 });
  fs.mkdirSync(dir, { mode: 0o700 });
  fs.chmodSync(dir, 0o700);
  return dir;
}
