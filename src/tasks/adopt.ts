// The supervisor of a REATTACHED task: a detached process (runner-main.js <commonDir> <id> --adopt)
// that takes over a command whose runner died, follows it to its end as the runner would have, and
// finishes the task through the runner's own finishTask. OWNER: recovery helper.
//
// The command is not our child: its end is seen by polling its identity (pid + start + boot), its
// status read from the `exit` file the wrapper shell writes. The deadline is the frozen one of the
// row; a cancel is SIGTERM/SIGINT to this process or cancelRequestedAt on the row.
import * as fs from 'node:fs';
import type { Repo } from '../git/repo';
import { openSidecar } from '../sidecar/db';
import { isTerminal } from './model';
import { identify, liveness, type ProcessIdentity } from './proc';
import { readExitFile } from './exit-file';
import { finishTask, taskContext } from './runner';
import { GUARD_SCHEMA, publishGuard, tryAcquireLease, type Lease, type Slot } from './slot';
import { getTask, updateTask, type TaskRow } from './store';

/** How often the command's identity, the deadline and a cancel are looked at. */
const POLL_MS = 250;
/** A supervisor started by a recovery waits this long for the lease the recovery is letting go. */
const LEASE_WAIT_MS = 15_000;
/** The wrapper shell writes `exit` just before it ends: how long to look for it once it is gone. */
const EXIT_FILE_WAIT_MS = 500;

export type AdoptedEnd = { kind: 'exited'; exitCode: number | null } | { kind: 'timed_out' } | { kind: 'cancelled' };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function superviseAdopted(repo: Repo, taskId: string): Promise<void> {
  const self = identify(process.pid);
  if (!self) return; // without /proc nothing can be proven: leave the task to the next recovery
  let cancelled = false;
  const onSignal = () => {
    cancelled = true;
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const db = openSidecar(repo.commonDir);
  let lease: Lease | null = null;
  try {
    const first = getTask(db, taskId);
    if (!first || isTerminal(first.status)) return;
    const slot: Slot = { id: first.slot, worktree: first.worktree, gitDir: first.gitDir, commonDir: repo.commonDir };
    if (fs.existsSync(slot.gitDir)) {
      lease = tryAcquireLease(slot, LEASE_WAIT_MS);
      if (!lease) return; // another live process writes the slot: it is not ours to finish
    }
    const row = getTask(db, taskId);
    if (!row || isTerminal(row.status)) return;
    // The recovery that started us named us in the row; anyone else named there and alive owns it.
    if (row.runnerPid !== self.pid && row.runnerPid !== null && row.runnerStart && row.bootId) {
      if (liveness({ pid: row.runnerPid, start: row.runnerStart, boot: row.bootId }) !== 'gone') return;
    }
    const cmd =
      row.pid !== null && row.pidStart && row.bootId ? { pid: row.pid, start: row.pidStart, boot: row.bootId } : null;
    if (!cmd) return;
    updateTask(db, taskId, { runnerPid: self.pid, runnerStart: self.start });
    if (lease) {
      publishGuard(slot, {
        schema: GUARD_SCHEMA,
        task: taskId,
        slot: slot.id,
        runner: self,
        command: cmd,
        createdAt: new Date().toISOString(),
      });
    }
    const end = await follow(repo.commonDir, db, row, cmd, () => cancelled);
    await finishAdopted(repo, getTask(db, taskId) ?? row, lease, end);
    lease = null; // finishTask released it
  } finally {
    lease?.release();
    db.close();
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}

/** Wait for the command's end, its deadline or a cancel, whichever comes first. */
async function follow(
  commonDir: string,
  db: ReturnType<typeof openSidecar>,
  row: TaskRow,
  cmd: ProcessIdentity,
  cancelled: () => boolean,
): Promise<AdoptedEnd> {
  const deadline = Date.parse(row.deadlineAt);
  for (;;) {
    // 'unknown' is not an end: the command may still run, and the deadline still holds.
    if (liveness(cmd) === 'gone') {
      let code = readExitFile(commonDir, row.id);
      const until = Date.now() + EXIT_FILE_WAIT_MS;
      while (code === null && Date.now() < until) {
        await sleep(50);
        code = readExitFile(commonDir, row.id);
      }
      return { kind: 'exited', exitCode: code };
    }
    if (Number.isFinite(deadline) && Date.now() >= deadline) return { kind: 'timed_out' };
    if (cancelled() || getTask(db, row.id)?.cancelRequestedAt) return { kind: 'cancelled' };
    await sleep(POLL_MS);
  }
}

/** Hand the end to the runner's finishTask: it ends the group, keeps the result, captures, records
 * the final status, removes the guard and releases the lease, exactly as for a runner that lived. */
async function finishAdopted(repo: Repo, row: TaskRow, lease: Lease | null, end: AdoptedEnd): Promise<void> {
  await finishTask(taskContext(repo, row, lease), end);
}
