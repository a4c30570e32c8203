// The definitions of push, fetch, pin, unpin, pins, gc and the task commands (src/commands/, helper
// specs-b of issue 12): their --json through the real CLI matches each one's `output` schema (what
// MCP announces as outputSchema), their --help still lists the arguments and flags of the
// commander wiring they replaced, `task result --wait` waits for the end, and the MCP forms (`run`
// called as the MCP server calls it): task_run always detaches, task_events waits a bounded time,
// a cancelled task_result wait is CANCELLED.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { z } from 'zod';
import { initRepo, type Repo } from '../support/git';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { capture, describeRun, expectError, expectExit, parseJson, xet } from '../support/xet';
import { isLong, type AnyCommandSpec, type CommandContext } from '../../src/commands/spec';
import { XetError } from '../../src/errors';
import { fetchCommand } from '../../src/commands/fetch';
import { gcCommand } from '../../src/commands/gc';
import { pinCommand, pinsCommand, unpinCommand } from '../../src/commands/pin';
import { pushCommand } from '../../src/commands/push';
import { taskCancelCommand, taskRunCommand } from '../../src/commands/task-run';
import { taskEventsCommand, taskListCommand, taskShowCommand } from '../../src/commands/task-read';
import { taskResultCommand } from '../../src/commands/task-result';
import { taskRecoverCommand } from '../../src/commands/task-recover';
import { COMMANDS } from '../../src/commands/registry';
import { openSidecar } from '../../src/sidecar/db';
import { getTask, updateTask } from '../../src/tasks/store';
import { parseInput } from '../../src/cli/from-spec';

function repo(sb: Sandbox, name = 'src'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

/** Runs `args --json` (exit 0), and checks the value against the command's output schema. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function jsonOf(sb: Sandbox, cwd: string, spec: AnyCommandSpec, args: string[]): any {
  const dash = args.indexOf('--');
  const r = xet(sb, cwd, dash < 0 ? [...args, '--json'] : [...args.slice(0, dash), '--json', ...args.slice(dash)]);
  expectExit(r, 0);
  const value = parseJson(r);
  const parsed = (spec.output as z.ZodType).safeParse(value);
  assert.ok(
    parsed.success,
    `${args.join(' ')}: --json does not match ${spec.tool}'s output schema: ${parsed.error}\n${describeRun(r)}`,
  );
  return value;
}

/** Polls `task show` until the task has ended; returns its row. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function ended(sb: Sandbox, cwd: string, id: string, timeoutMs = 60_000): Promise<any> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const t = parseJson(xet(sb, cwd, ['task', 'show', id, '--json'])).task;
    if (!['created', 'running'].includes(t.status)) return t;
    assert.ok(Date.now() < until, `task ${id} did not end: ${JSON.stringify(t)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('push, fetch, pin, unpin, pins, gc and gc --store: --json matches each output schema', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const store = sb.path('store');
    r.git('remote', 'add', 'st', `xet::${store}`);
    r.git('push', '-q', 'st', 'main');
    r.write('scratch.txt', 'untracked\n');
    const s1 = capture(sb, r.dir);
    const pushed = jsonOf(sb, r.dir, pushCommand, ['push', 'st', s1]);
    assert.equal(pushed.kind, 'xet');
    assert.ok(pushed.refs.some((x: { status: string }) => x.status === 'new'));

    const other = repo(sb, 'other');
    other.git('remote', 'add', 'st', `xet::${store}`);
    const fetched = jsonOf(sb, other.dir, fetchCommand, ['fetch', 'st']);
    assert.ok(fetched.fetched.some((x: { ref: string }) => x.ref === `refs/xet/snapshots/${s1}`));

    const pinned = jsonOf(sb, r.dir, pinCommand, ['pin', s1.slice(0, 8), '--reason', 'kept', '--until', '2w']);
    assert.equal(pinned.created, true);
    assert.equal(jsonOf(sb, r.dir, pinCommand, ['pin', s1]).until, null, 'a pin without --until never expires');
    assert.equal(jsonOf(sb, r.dir, pinsCommand, ['pins']).pins[0].snapshot, s1);
    assert.equal(jsonOf(sb, r.dir, unpinCommand, ['unpin', s1]).snapshot, s1);
    assert.deepEqual(jsonOf(sb, r.dir, pinsCommand, ['pins']).pins, []);

    assert.equal(jsonOf(sb, r.dir, gcCommand, ['gc', '--dry-run']).dryRun, true);
    const gc = jsonOf(sb, r.dir, gcCommand, ['gc', '--grace', 'now']);
    assert.equal(gc.dryRun, false);
    assert.equal(typeof gc.runId, 'string');
    const sgc = jsonOf(sb, r.dir, gcCommand, ['gc', '--store', `xet::${store}`, '--dry-run']);
    assert.equal(sgc.dryRun, true);
    assert.equal(typeof sgc.store, 'string');
    assert.equal(jsonOf(sb, r.dir, gcCommand, ['gc', '--store', store]).dryRun, false);
    // A repository's result fails the schema if a field is typed wrong: the schema is no formality.
    assert.equal((gcCommand.output as z.ZodType).safeParse({ ...gc, graceSeconds: 'two weeks' }).success, false);
  }));

test('task run (detached and attached), cancel, show, list, events, result, recover: --json matches each output schema', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const attached = jsonOf(sb, r.dir, taskRunCommand, ['task', 'run', '--', 'sh', '-c', 'echo hello']);
    assert.equal(attached.status, 'succeeded');
    assert.equal(attached.result.sizeBytes, 6);
    const slow = jsonOf(sb, r.dir, taskRunCommand, ['task', 'run', '--detach', '--no-capture', '--', 'sleep', '60']);
    assert.equal(slow.detached, true);
    const listed = jsonOf(sb, r.dir, taskListCommand, ['task', 'list', '--limit', '5']);
    assert.deepEqual(listed.tasks.map((t: { id: string }) => t.id).sort(), [attached.task, slow.task].sort());
    const cancelled = jsonOf(sb, r.dir, taskCancelCommand, ['task', 'cancel', slow.task]);
    assert.equal(cancelled.cancelRequested, true);
    assert.equal((await ended(sb, r.dir, slow.task)).status, 'cancelled');
    const shown = jsonOf(sb, r.dir, taskShowCommand, ['task', 'show', attached.task.slice(0, 6)]);
    assert.equal(shown.provenance.task, attached.task);
    assert.equal(shown.result.sizeBytes, 6);
    const evs = jsonOf(sb, r.dir, taskEventsCommand, ['task', 'events', attached.task]).events;
    assert.ok(evs.some((e: { eventType: string }) => e.eventType === 'task.succeeded'));
    const tail = jsonOf(sb, r.dir, taskEventsCommand, ['task', 'events', attached.task, '--after', String(evs[0].seq)]);
    assert.equal(tail.events.length, evs.length - 1);
    // --follow prints envelopes a line (not one result): each line is an event of the schema's kind.
    const followed = xet(sb, r.dir, ['task', 'events', attached.task, '--follow', '--json']);
    expectExit(followed, 0);
    const lines = followed.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.equal(lines.length, evs.length);
    assert.equal(
      (taskEventsCommand.output as z.ZodType).safeParse({ events: lines }).success,
      true,
      'followed envelopes are the events --json lists',
    );
    const chunk = jsonOf(sb, r.dir, taskResultCommand, ['task', 'result', attached.task]);
    assert.equal(chunk.text, 'hello\n');
    assert.equal(chunk.eof, true);
    jsonOf(sb, r.dir, taskRecoverCommand, ['task', 'recover', '--all']);
    const one = jsonOf(sb, r.dir, taskRecoverCommand, ['task', 'recover', attached.task]);
    assert.equal(one.skipped[0].state, 'ended');
    // Checked before any effect, as the old action did.
    assert.match(
      expectError(xet(sb, r.dir, ['task', 'recover', attached.task, '--all', '--json']), 'USAGE', 2).message,
      /give a task or --all, not both/,
    );
    expectError(xet(sb, r.dir, ['task', 'list', '--limit', '0', '--json']), 'USAGE', 2);
  }));

test('task result --wait waits until the task has ended, then prints the whole result (or its chunk with --json)', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const script = 'sleep 2; printf "done at last\\n"';
    const t = parseJson(
      xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--json', '--', 'sh', '-c', script]),
    );
    // Without --wait, a task that has not ended has no result yet.
    expectError(xet(sb, r.dir, ['task', 'result', t.task, '--json']), 'RESULT_NOT_AVAILABLE');
    const waited = xet(sb, r.dir, ['task', 'result', t.task, '--wait']);
    expectExit(waited, 0);
    assert.equal(waited.stdout, 'done at last\n');
    const u = parseJson(
      xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--json', '--', 'sh', '-c', script]),
    );
    const chunk = jsonOf(sb, r.dir, taskResultCommand, ['task', 'result', u.task, '--wait', '--max-bytes', '4']);
    assert.equal(chunk.text, 'done');
    assert.equal(chunk.eof, false);
    expectError(xet(sb, r.dir, ['task', 'result', 'ffffffffffffffff', '--wait', '--json']), 'TASK_NOT_FOUND');
  }));

test('task result --wait on a task whose runner died and recovery can only say UNKNOWN: the wait ends, WORKDIR_RECOVERY_REQUIRED', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const t = parseJson(xet(sb, r.dir, ['task', 'run', '--detach', '--no-capture', '--json', '--', 'sleep', '60']));
    let cmd = 0;
    try {
      const db = openSidecar(r.commonDir());
      try {
        const until = Date.now() + 30_000;
        while (getTask(db, t.task)?.status !== 'running' || !getTask(db, t.task)?.pid) {
          assert.ok(Date.now() < until, 'the command starts');
          await new Promise((res) => setTimeout(res, 100));
        }
        const row = getTask(db, t.task)!;
        cmd = row.pid!;
        // The command's start time lost from the row: its pid alone proves nothing, so UNKNOWN.
        updateTask(db, t.task, { pidStart: null });
        process.kill(row.runnerPid!, 'SIGKILL');
      } finally {
        db.close();
      }
      const err = expectError(
        xet(sb, r.dir, ['task', 'result', t.task, '--wait', '--json']),
        'WORKDIR_RECOVERY_REQUIRED',
      );
      assert.equal(err.details.classification, 'UNKNOWN');
      assert.match(err.message, /the wait ends/);
    } finally {
      try {
        if (cmd) process.kill(-cmd, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }));

/** A call as the MCP server makes it (for a tool that is not `long`): the input validated by the
 * spec's schema, then its `run` in this process. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function call(spec: AnyCommandSpec, raw: Record<string, unknown>, ctx: CommandContext): Promise<any> {
  return spec.run(parseInput(spec, raw), ctx);
}

/** Runs `fn` with the sandbox's environment in this process (the MCP server runs `run` in its own). */
async function inSandboxEnv<T>(sb: Sandbox, fn: () => Promise<T>): Promise<T> {
  const saved = { ...process.env };
  for (const k of Object.keys(process.env)) if (!(k in sb.env)) delete process.env[k];
  Object.assign(process.env, sb.env);
  try {
    return await fn();
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

test('the MCP forms: task_run always detaches, task_events waits a bounded time for a new event, a cancelled task_result wait is CANCELLED', () =>
  withSandbox((sb) =>
    inSandboxEnv(sb, async () => {
      const r = repo(sb);
      const notes: string[] = [];
      const ctx: CommandContext = { cwd: r.dir, note: (t) => notes.push(t), via: 'mcp' };
      const started = Date.now();
      // Not --detach: through MCP the task outlives the call whatever the input says.
      const t = await call(taskRunCommand, { command: ['sh', '-c', 'sleep 1; echo through mcp'], capture: false }, ctx);
      assert.deepEqual(Object.keys(t).sort(), ['detached', 'hooksWarning', 'status', 'task']);
      assert.equal(t.detached, true);
      assert.equal(t.status, 'created');
      assert.ok(Date.now() - started < 10_000, 'the call returns before the command ends');
      assert.equal((taskRunCommand.output as z.ZodType).safeParse(t).success, true);

      // With follow, the call answers once an event after `after` is there (or the task ended).
      const first = await call(taskEventsCommand, { task: t.task }, ctx);
      const last = first.events[first.events.length - 1].seq;
      const more = await call(taskEventsCommand, { task: t.task, after: last, follow: true }, ctx);
      assert.ok(
        more.events.length > 0 && more.events.every((e: { seq: number }) => e.seq > last),
        JSON.stringify(more),
      );

      const chunk = await call(taskResultCommand, { task: t.task, wait: true }, ctx);
      assert.equal(chunk.text, 'through mcp\n');
      const shown = await call(taskShowCommand, { task: t.task }, ctx);
      assert.equal(shown.task.status, 'succeeded');

      // A wait the caller gives up on ends with CANCELLED, and leaves the task running.
      const long = await call(taskRunCommand, { command: ['sleep', '60'], capture: false }, ctx);
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 500);
      await assert.rejects(
        call(taskResultCommand, { task: long.task, wait: true }, { ...ctx, signal: ac.signal }),
        (e: unknown) => e instanceof XetError && e.code === 'CANCELLED',
      );
      const still = (await call(taskShowCommand, { task: long.task }, ctx)).task.status;
      assert.ok(['created', 'running'].includes(still), `the task goes on after the wait (${still})`);
      await call(taskCancelCommand, { task: long.task }, ctx);
      await ended(sb, r.dir, long.task);
      // A bounded follow on an ended task answers at once with nothing new.
      const after = (await call(taskEventsCommand, { task: long.task }, ctx)).events.at(-1).seq;
      const waitStart = Date.now();
      const none = await call(taskEventsCommand, { task: long.task, after, follow: true }, ctx);
      assert.deepEqual(none.events, []);
      assert.ok(Date.now() - waitStart < 5000, 'no wait on an ended task');
    }),
  ));

const TOOLS = [
  'push',
  'fetch',
  'pin',
  'unpin',
  'pins',
  'gc',
  'task_run',
  'task_cancel',
  'task_show',
  'task_list',
  'task_events',
  'task_result',
  'task_recover',
];

test("the specs' MCP metadata: tool names, gc a dry run unless asked, long, paths and names", () => {
  const mine = TOOLS.map((name) => {
    const spec = COMMANDS.find((c) => c.tool === name);
    assert.ok(spec, `${name} is in COMMANDS`);
    return spec;
  });
  assert.deepEqual(gcCommand.mcpDefaults, { dryRun: true });
  assert.deepEqual(
    mine.filter((s) => s.long === true).map((s) => s.tool),
    ['push', 'fetch', 'gc', 'task_result', 'task_recover'],
  );
  // handoff create is long only when it pushes too.
  assert.deepEqual(
    COMMANDS.filter((s) => typeof s.long === 'function').map((s) => s.tool),
    ['handoff_create'],
  );
  const create = COMMANDS.find((s) => s.tool === 'handoff_create');
  assert.equal(isLong(create as AnyCommandSpec, { title: 't' }), false);
  assert.equal(isLong(create as AnyCommandSpec, { title: 't', push: 'store' }), true);
  assert.deepEqual(pushCommand.paths, { remote: 'source' });
  assert.deepEqual(gcCommand.paths, { store: 'source' });
  assert.deepEqual(taskRunCommand.paths, { in: 'existing', dir: 'target' });
  assert.equal(pushCommand.annotations.openWorld && fetchCommand.annotations.openWorld, true);
  for (const s of [pinsCommand, taskShowCommand, taskListCommand, taskEventsCommand, taskResultCommand])
    assert.equal(s.annotations.readOnly, true, `${s.tool} is read-only`);
  assert.equal(gcCommand.annotations.destructive, true);
});

/** The usage line and option flags of each command's --help before the conversion (14cebf8). */
const HELP: [string[], string, string[]][] = [
  [['push'], 'push [options] [remote] [ids...]', []],
  [['fetch'], 'fetch [options] [remote]', []],
  [['pin'], 'pin [options] <snapshot>', ['--reason <text>', '--until <duration|date>']],
  [['unpin'], 'unpin [options] <snapshot>', []],
  [['pins'], 'pins [options]', []],
  [['gc'], 'gc [options]', ['--dry-run', '--grace <duration>', '--store <url>']],
  [
    ['task', 'run'],
    'task run [options] <command...>',
    [
      '--in <dir>',
      '--fork <snapshot>',
      '--mode <mode>',
      '--dir <dir>',
      '--timeout <duration>',
      '--correlation-id <id>',
      '--session-id <id>',
      '--continue <task>',
      '--detach',
      '--no-capture',
    ],
  ],
  [['task', 'cancel'], 'task cancel [options] <task>', []],
  [['task', 'show'], 'task show [options] <task>', []],
  [['task', 'list'], 'task list [options]', ['--status <statuses>', '--limit <n>']],
  [['task', 'events'], 'task events [options] <task>', ['--after <seq>', '--follow']],
  // --wait is new (issue 12).
  [['task', 'result'], 'task result [options] <task>', ['--offset <bytes>', '--max-bytes <n>', '--wait']],
  [['task', 'recover'], 'task recover [options] [task]', ['--all']],
];

test('--help of each still shows the usage and the flags it did before the conversion', () =>
  withSandbox((sb) => {
    for (const [words, usage, flags] of HELP) {
      const r = xet(sb, sb.root, [...words, '--help']);
      expectExit(r, 0);
      assert.equal(r.stdout.split('\n')[0], `Usage: git xet ${usage}`);
      const listed = [...r.stdout.matchAll(/^ {2}(?:-[a-zA-Z], )?(--[a-z][a-z-]*(?: <[^>]+>)?)/gm)].map((m) => m[1]);
      assert.deepEqual(listed, [...flags, '--help'], `${words.join(' ')} --help`);
    }
    // task run's --mode still lists its choices.
    assert.match(xet(sb, sb.root, ['task', 'run', '--help']).stdout, /choices: "auto", "overlay",\s+"clone", "copy"/);
  }));
