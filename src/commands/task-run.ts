// git xet task run, cancel (owner: runner helper). The runner itself is src/tasks/runner.ts.
// On the command line a task runs attached (its output streams, its exit code is ours) unless
// --detach; through MCP it always detaches: the task outlives the call, read back with task_show,
// task_events and task_result.
import { s, type InferShape } from './schema';
import { chatty, emit, emitError, type Out } from '../cli/output';
import type { PreparedTask } from '../tasks/runner';
import { defineCommand, type CommandContext } from './spec';

const taskRunInput = {
  command: s.array(s.string()).min(1).describe('the command and its arguments (after --)'),
  in: s.string().optional().describe('run in another worktree of this repository'),
  fork: s.string().optional().describe('run in a new fork of the snapshot'),
  mode: s.enum(['auto', 'overlay', 'clone', 'copy']).optional().describe('fork mode (with --fork)'),
  dir: s.string().optional().describe('directory of the fork (with --fork; default <main worktree>.tasks/<id>)'),
  timeout: s.string().optional().describe('deadline from now, frozen at creation (default 24h)'),
  correlationId: s.string().optional().describe('an opaque id copied into the manifest, events and handoffs'),
  sessionId: s.string().optional().describe("the agent's session id: a task whose runner is lost may be continued"),
  continueTask: s.string().optional().describe('continue the session of an interrupted task, in its workspace'),
  detach: s.boolean().optional().describe('print the task id at once; a runner of its own does the rest'),
  capture: s.boolean().default(true).describe('do not capture the workspace at the end'),
};
type TaskRunInput = InferShape<typeof taskRunInput>;

/** Creates the task (manifest, slot, lease), before its command starts: here or in a detached runner. */
async function prepare(input: TaskRunInput, ctx: CommandContext, detach: boolean) {
  if (ctx.via === 'cli') {
    // Only the command line's arguments can have been decoded lossily (an MCP client sends JSON).
    const { refuseLossyArgument } = await import('../cli/argv-bytes');
    refuseLossyArgument('--correlation-id', input.correlationId);
    refuseLossyArgument('--session-id', input.sessionId);
  }
  const runner = await import('../tasks/runner');
  const prep = await runner.startTask({
    cwd: ctx.cwd,
    argv: input.command,
    in: input.in,
    fork: input.fork,
    mode: input.mode,
    dir: input.dir,
    timeout: input.timeout,
    correlationId: input.correlationId,
    sessionId: input.sessionId,
    continueTask: input.continueTask,
    detach,
    capture: input.capture,
  });
  return { runner, prep };
}

function detached(runner: typeof import('../tasks/runner'), prep: PreparedTask) {
  runner.detachTask(prep);
  return { task: prep.task.id, status: 'created', detached: true, hooksWarning: prep.hooksWarning ?? null };
}

export const taskRunCommand = defineCommand({
  path: ['task', 'run'],
  tool: 'task_run',
  description: 'run COMMAND as a task in a workspace slot: lease, guard, manifest, events, result, capture',
  input: taskRunInput,
  args: ['command'],
  flags: {
    in: { value: '<dir>' },
    fork: { value: '<snapshot>' },
    mode: { value: '<mode>' },
    dir: { value: '<dir>' },
    timeout: { value: '<duration>' },
    correlationId: { value: '<id>' },
    sessionId: { value: '<id>' },
    continueTask: { flag: 'continue', value: '<task>' },
    capture: { negate: true },
  },
  paths: { in: 'existing', dir: 'target' },
  names: ['fork', 'continueTask'],
  annotations: { readOnly: false, destructive: false, idempotent: false },
  // --json of a detached run (MCP's only kind), and the attached run's fields beside it.
  output: s.looseObject({
    task: s.string(),
    status: s.string(),
    hooksWarning: s.string().nullable(),
    detached: s.boolean().optional(),
    errorCode: s.string().nullable().optional(),
    exitCode: s.number().nullable().optional(),
    exitSignal: s.string().nullable().optional(),
    correlationId: s.string().nullable().optional(),
    resultSnapshot: s.string().nullable().optional(),
    result: s.looseObject({}).nullable().optional(),
    resultRefusal: s.looseObject({}).nullable().optional(),
    captureError: s.looseObject({}).nullable().optional(),
    survivors: s.number().optional(),
  }),
  async run(input, ctx) {
    const { runner, prep } = await prepare(input, ctx, true);
    if (prep.hooksWarning) ctx.note(`git xet: warning: ${prep.hooksWarning}`);
    return detached(runner, prep);
  },
  async cliAction(input, ctx, out) {
    const { runner, prep } = await prepare(input, ctx, Boolean(input.detach));
    if (prep.hooksWarning && !out.json && !out.quiet) process.stderr.write(`git xet: warning: ${prep.hooksWarning}\n`);
    if (input.detach) {
      emit(out, detached(runner, prep), () => prep.task.id);
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
  },
});

export const taskCancelCommand = defineCommand({
  path: ['task', 'cancel'],
  tool: 'task_cancel',
  description: 'ask a task to stop: its processes are ended, its workspace captured',
  input: { task: s.string().describe('task id (or a unique prefix of 4+ hex digits)') },
  args: ['task'],
  names: ['task'],
  // Ends the task's processes (its workspace is captured first); asking again changes nothing more.
  annotations: { readOnly: false, destructive: true, idempotent: true },
  output: s.looseObject({
    task: s.string(),
    status: s.string(),
    cancelRequested: s.boolean(),
    signalled: s.boolean(),
  }),
  async run(input, ctx) {
    const { cancelTask } = await import('../tasks/runner');
    return cancelTask(ctx.cwd, input.task);
  },
  human: (r) =>
    r.cancelRequested
      ? `cancel requested for task ${r.task}${r.signalled ? '' : ' (its runner is gone: git xet task recover ends it)'}`
      : `task ${r.task} has already ended (${r.status})`,
});

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
