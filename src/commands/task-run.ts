// git xet task run, cancel (owner: runner helper). The runner itself is src/tasks/runner.ts.
import { Option, type Command } from 'commander';
import { chatty, emit, emitError, type Out } from '../cli/output';
import { run } from '../cli/run';

interface RunFlags {
  in?: string;
  fork?: string;
  mode?: 'auto' | 'overlay' | 'clone' | 'copy';
  dir?: string;
  timeout?: string;
  correlationId?: string;
  sessionId?: string;
  continue?: string;
  detach?: boolean;
  capture: boolean;
}

export function registerTaskRun(task: Command): void {
  task
    .command('run')
    .description('run COMMAND as a task in a workspace slot: lease, guard, manifest, events, result, capture')
    .argument('<command...>', 'the command and its arguments (after --)')
    .option('--in <dir>', 'run in another worktree of this repository')
    .option('--fork <snapshot>', 'run in a new fork of the snapshot')
    .addOption(new Option('--mode <mode>', 'fork mode (with --fork)').choices(['auto', 'overlay', 'clone', 'copy']))
    .option('--dir <dir>', 'directory of the fork (with --fork; default <main worktree>.tasks/<id>)')
    .option('--timeout <duration>', 'deadline from now, frozen at creation (default 24h)')
    .option('--correlation-id <id>', 'an opaque id copied into the manifest, events and handoffs')
    .option('--session-id <id>', "the agent's session id: a task whose runner is lost may be continued")
    .option('--continue <task>', 'continue the session of an interrupted task, in its workspace')
    .option('--detach', 'print the task id at once; a runner of its own does the rest')
    .option('--no-capture', 'do not capture the workspace at the end')
    .action(
      run(async (out, argv: string[], flags: RunFlags) => {
        const { refuseLossyArgument } = await import('../cli/argv-bytes');
        refuseLossyArgument('--correlation-id', flags.correlationId);
        refuseLossyArgument('--session-id', flags.sessionId);
        const runner = await import('../tasks/runner');
        const prep = await runner.startTask({
          cwd: process.cwd(),
          argv,
          in: flags.in,
          fork: flags.fork,
          mode: flags.mode,
          dir: flags.dir,
          timeout: flags.timeout,
          correlationId: flags.correlationId,
          sessionId: flags.sessionId,
          continueTask: flags.continue,
          detach: flags.detach,
          capture: flags.capture,
        });
        if (prep.hooksWarning && !out.json && !out.quiet)
          process.stderr.write(`git xet: warning: ${prep.hooksWarning}\n`);
        if (flags.detach) {
          runner.detachTask(prep);
          emit(
            out,
            { task: prep.task.id, status: 'created', detached: true, hooksWarning: prep.hooksWarning ?? null },
            () => prep.task.id,
          );
          return 0;
        }
        // A reader that went away (`task run -- yes | head -1`) ends the copying, never the runner:
        // an unhandled EPIPE would kill it between the command's end and the guard's removal.
        const open = { stdout: true, stderr: true };
        process.stdout.on('error', () => (open.stdout = false));
        process.stderr.on('error', () => (open.stderr = false));
        const end = await runner.runTask(prep, {
          onOutput: out.json
            ? undefined
            : (stream, chunk) => {
                if (open[stream]) (stream === 'stdout' ? process.stdout : process.stderr).write(chunk);
              },
        });
        return report(out, end, prep.repo.commonDir, runner.RUN_EXIT, prep.hooksWarning ?? null);
      }),
    );

  task
    .command('cancel')
    .description('ask a task to stop: its processes are ended, its workspace captured')
    .argument('<task>', 'task id (or a unique prefix of 4+ hex digits)')
    .action(
      run(async (out, spec: string) => {
        const { cancelTask } = await import('../tasks/runner');
        const r = await cancelTask(process.cwd(), spec);
        emit(out, r, () =>
          r.cancelRequested
            ? `cancel requested for task ${r.task}${r.signalled ? '' : ' (its runner is gone: git xet task recover ends it)'}`
            : `task ${r.task} has already ended (${r.status})`,
        );
        return 0;
      }),
    );
}

type End = Awaited<ReturnType<typeof import('../tasks/runner').runTask>>;

async function report(
  out: Out,
  end: End,
  commonDir: string,
  codes: { TIMED_OUT: number; CANCELLED: number },
  hooksWarning: string | null,
): Promise<number> {
  const { withSidecar } = await import('../sidecar/db');
  const { resultSummary } = await import('../tasks/result');
  const t = end.task;
  if (end.error) {
    // The result (or the slot) was refused: exit 3 with the error, the task's facts in its details.
    end.error.details.task = t.id;
    end.error.details.status = end.status;
    end.error.details.exitCode = end.exitCode;
    end.error.details.resultSnapshot = end.resultSnapshot;
    return emitError(out, end.error);
  }
  let summary: unknown;
  try {
    summary = end.result ? withSidecar(commonDir, (db) => resultSummary(db, commonDir, t)) : null;
  } catch {
    summary = null; // the result is kept; `task result` reads it
  }
  const value = {
    task: t.id,
    status: end.status,
    errorCode: end.errorCode,
    exitCode: end.exitCode,
    exitSignal: end.exitSignal,
    correlationId: t.correlationId,
    resultSnapshot: end.resultSnapshot,
    result: summary,
    resultRefusal: end.resultRefusal ? end.resultRefusal.toJSON() : null,
    captureError: end.captureError ? end.captureError.toJSON() : null,
    survivors: end.survivors.length,
    hooksWarning,
  };
  if (out.json) emit(out, value, () => '');
  else {
    const what =
      end.exit === codes.TIMED_OUT
        ? `timed out: its processes were ended [TASK_TIMED_OUT]`
        : end.exit === codes.CANCELLED
          ? `was cancelled [TASK_CANCELLED]`
          : `${end.status} (exit ${end.exitCode ?? end.exitSignal})`;
    if (end.errorCode || chatty(out)) {
      process.stderr.write(
        `git xet: task ${t.id} ${what}${end.resultSnapshot ? `; workspace captured as ${end.resultSnapshot.slice(0, 12)}` : ''}\n`,
      );
    }
    if (end.captureError)
      process.stderr.write(`git xet: capture failed: ${end.captureError.message} [${end.captureError.code}]\n`);
    if (end.survivors.length) {
      process.stderr.write(
        `git xet: ${end.survivors.length} process(es) of task ${t.id} outlived SIGKILL; the workspace stays guarded (git xet task recover)\n`,
      );
    }
  }
  return end.exit;
}
