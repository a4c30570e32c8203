// Entry point of a detached task runner: `node dist/src/tasks/runner-main.js <commonDir> <taskId>
// -- COMMAND [ARG...]` (started by `task run --detach` after it created the task), or
// `<commonDir> <taskId> --adopt` (started by recovery to supervise a command whose runner died:
// src/tasks/adopt.ts, superviseAdopted). Its stdio is the task dir's runner.log; nothing here
// prints but a failure the runner could not record.
import { XetError } from '../errors';
import { findRepo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { faultPoint } from '../testing/fault-points';
import { runTask } from './runner';
import { getTask } from './store';

async function main(argv: string[]): Promise<number> {
  const [commonDir, taskId, ...rest] = argv;
  await faultPoint('runner-main:start');
  if (!commonDir || !/^[0-9a-f]{16}$/.test(taskId ?? '')) {
    throw new XetError('USAGE', 'usage: runner-main <commonDir> <taskId> (-- COMMAND [ARG...] | --adopt)');
  }
  const task = withSidecar(commonDir, (db) => getTask(db, taskId));
  if (!task) throw new XetError('TASK_NOT_FOUND', `no task ${taskId}`, { task: taskId });
  const repo = await findRepo(task.worktree);
  if (rest[0] === '--adopt') {
    // Loaded only here: a plain detached runner never needs the supervisor.
    const { superviseAdopted } = await import('./adopt');
    await superviseAdopted(repo, taskId);
    return 0;
  }
  if (rest[0] !== '--' || rest.length < 2) throw new XetError('USAGE', 'runner-main: no command after --');
  const slot = { id: task.slot, worktree: task.worktree, gitDir: task.gitDir, commonDir: repo.commonDir };
  // The parent already left out a foreign caller's GIT_DIR: this environment is the command's.
  const end = await runTask({ repo, slot, task, argv: rest.slice(1), foreignSlot: false });
  return end.exit;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(
      e instanceof XetError
        ? `git xet: ${e.message} [${e.code}]\n`
        : `git xet: internal error: ${(e as Error)?.stack ?? e}\n`,
    );
    process.exitCode = e instanceof XetError ? 3 : 70;
  },
);
