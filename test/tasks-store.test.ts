// The task store and its reads (issue 10): the manifest is canonical JSON whose sha256 is recorded,
// and nothing changes it afterwards (config, updateTask, raw SQL); correlation ids are bounded and
// free of control characters; events are envelope v1 and metadata only; `task events --follow`
// ends when the task does; retention collects backdated terminal tasks with their private
// directories and never a task that has not ended; ids resolve from unique prefixes; show and list
// print the shapes docs/CLI.md promises. Tasks are made through the store API (the runner is
// another part), against real repositories, and read back through the real CLI.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, type TestContext } from 'node:test';
import { findRepo } from '../src/git/repo';
import { readConfig } from '../src/git/config';
import { openSidecar } from '../src/sidecar/db';
import { canonicalJson } from '../src/snapshot/canonical-json';
import { newTaskId } from '../src/tasks/ids';
import {
  buildManifest,
  commandName,
  parseTaskManifest,
  taskConfig,
  validateCorrelationId,
  type TaskPolicy,
} from '../src/tasks/manifest';
import { taskDir, taskFile, ensureTaskDir } from '../src/tasks/paths';
import { identify } from '../src/tasks/proc';
import { reconcile } from '../src/tasks/recover';
import { collectTasks, taskRoots } from '../src/tasks/retention';
import {
  appendEvent,
  getTask,
  inlineResult,
  insertTask,
  listEvents,
  recordExport,
  resolveTaskId,
  taskOfSnapshot,
  updateTask,
  type TaskPatch,
  type TaskRow,
} from '../src/tasks/store';
import { codeOf } from './support/errors';
import { initRepo, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, XET_BIN, xet } from './support/xet';
import { taskRow } from './support/tasks';

const HOUR = 3600_000;
const sha256 = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest('hex');

function repoWithCommit(sb: Sandbox, name = 'w'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

interface MakeOpts {
  id?: string;
  status?: TaskRow['status'];
  createdAt?: string;
  endedAt?: string | null;
  correlationId?: string | null;
  baseSnapshot?: string | null;
  resultSnapshot?: string | null;
  argv0?: string;
  /** Measure the runtime's version as the runner does (default: skipped, null). */
  measure?: boolean;
  policy?: Partial<TaskPolicy>;
  /** More of the row (runner identity, ...). */
  patch?: TaskPatch;
  /** Files in the task's private directory (created when given). */
  files?: Partial<Record<'stdout' | 'stderr' | 'exit' | 'result' | 'result.spool', string>>;
}

/** A task as the runner makes it: manifest, row + task.created, then whatever state the test wants. */
async function makeTask(r: Repo, o: MakeOpts = {}): Promise<TaskRow> {
  const id = o.id ?? newTaskId();
  const createdAt = o.createdAt ?? new Date().toISOString();
  const config = taskConfig(await readConfig({ cwd: r.dir }));
  const built = await buildManifest({
    taskId: id,
    createdAt,
    argv0: o.argv0 ?? 'node',
    sessionId: null,
    continuesTask: null,
    correlationId: o.correlationId ?? null,
    workspace: { alias: path.basename(r.dir), slot: 'slot0000', cwd: '.', mode: 'worktree' },
    baseSnapshot: o.baseSnapshot ?? null,
    timeoutMs: 24 * HOUR,
    policy: { capture: true, ...config, ...o.policy },
    ...(o.measure ? {} : { runtimeVersion: null }),
  });
  const row: TaskRow = taskRow({
    id,
    createdAt,
    command: built.manifest.runtime.command,
    correlationId: o.correlationId ?? null,
    slot: 'slot0000',
    worktree: r.dir,
    gitDir: path.join(r.dir, '.git'),
    baseSnapshot: o.baseSnapshot ?? null,
    deadlineAt: built.manifest.deadlineAt,
    manifestJson: built.json,
    manifestSha256: built.sha256,
  });
  const db = openSidecar(r.commonDir());
  try {
    insertTask(db, row);
    const patch: TaskPatch = { ...o.patch };
    if (o.status && o.status !== 'created') patch.status = o.status;
    if (o.endedAt !== undefined) patch.endedAt = o.endedAt;
    if (o.resultSnapshot !== undefined) patch.resultSnapshot = o.resultSnapshot;
    updateTask(db, id, patch);
    if (o.files) {
      ensureTaskDir(r.commonDir(), id);
      for (const [name, text] of Object.entries(o.files)) {
        fs.writeFileSync(taskFile(r.commonDir(), id, name as 'stdout'), text as string, { mode: 0o600 });
      }
    }
    return getTask(db, id) as TaskRow;
  } finally {
    db.close();
  }
}

/** A live process to stand for a task's runner (recovery leaves a task with a live runner alone). */
function liveRunner(t: TestContext): TaskPatch {
  const runner = spawn('sleep', ['300'], { stdio: 'ignore' });
  t.after(() => runner.kill('SIGKILL'));
  const live = identify(runner.pid as number);
  assert.ok(live);
  return { runnerPid: live.pid, runnerStart: live.start, bootId: live.boot };
}

function withDb<T>(r: Repo, fn: (db: Database.Database) => T): T {
  const db = openSidecar(r.commonDir());
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function json(sb: Sandbox, cwd: string, args: string[]): any {
  const res = xet(sb, cwd, [...args, '--json']);
  expectExit(res, 0);
  return parseJson(res);
}

test('the manifest is canonical JSON with its sha256, and neither config, updateTask nor SQL changes it', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    r.git('config', 'xet.task.retention', '3d');
    r.git('config', 'xet.task.killGrace', '5s');
    const base = capture(sb, r.dir);
    const t = await makeTask(r, { baseSnapshot: base, correlationId: 'run-7', measure: true });

    // Stored bytes: canonical, hashed, valid v1, and what config said at creation.
    const stored = withDb(r, (db) =>
      db.prepare('SELECT manifest_json AS j, manifest_sha256 AS h FROM tasks WHERE id = ?').get(t.id),
    ) as { j: string; h: string };
    assert.equal(stored.h, sha256(stored.j));
    assert.equal(canonicalJson(JSON.parse(stored.j)), stored.j, 'sorted keys, compact');
    const m = parseTaskManifest(stored.j);
    assert.equal(m.schema, 'xet.task/v1');
    assert.equal(m.schemaVersion, 1);
    assert.equal(m.taskId, t.id);
    assert.equal(m.policy.retentionMs, 3 * 24 * HOUR);
    assert.equal(m.policy.killGraceMs, 5000);
    assert.equal(m.policySha256, sha256(canonicalJson(m.policy)));
    assert.equal(m.baseSnapshot, base);
    assert.equal(m.correlationId, 'run-7');
    assert.equal(m.deadlineAt, new Date(Date.parse(t.createdAt) + 24 * HOUR).toISOString());
    assert.deepEqual(m.limits, {
      timeoutMs: 24 * HOUR,
      resultInlineBytes: 256 * 1024,
      resultMaxBytes: 8 * 1024 * 1024,
      chunkMaxBytes: 65536,
    });
    // node is on the allowlist: its version is measured, and it is this node's.
    assert.deepEqual(m.runtime, {
      command: 'node',
      version: process.versions.node,
      versionSource: 'measured',
      inFlightRecovery: 'none',
      // makeTask gives no cache directory: measured by this task's start.
      versionCached: false,
      versionMeasuredAt: m.runtime.versionMeasuredAt,
    });
    assert.ok(Math.abs(Date.parse(m.runtime.versionMeasuredAt ?? '') - Date.parse(t.createdAt)) < 60_000);
    assert.match(m.git.version, /^\d+\.\d+\.\d+$/);
    assert.equal(m.continuation, null);

    const before = json(sb, r.dir, ['task', 'show', t.id]);
    assert.deepEqual(before.manifest, JSON.parse(stored.j));
    assert.equal(before.manifestSha256, stored.h);

    // Config changes after creation: the manifest and its hash stay, a new task sees the new config.
    r.git('config', 'xet.task.retention', '1h');
    r.git('config', 'xet.task.killGrace', '1s');
    const after = json(sb, r.dir, ['task', 'show', t.id]);
    assert.deepEqual(after.manifest, before.manifest);
    assert.equal(after.manifestSha256, before.manifestSha256);
    const later = await makeTask(r);
    assert.equal(parseTaskManifest(later.manifestJson).policy.retentionMs, HOUR);

    // No update path: updateTask refuses the field, and the trigger refuses SQL that tries.
    withDb(r, (db) => {
      assert.throws(
        () => updateTask(db, t.id, { manifestJson: '{}' } as unknown as TaskPatch),
        /manifestJson cannot change/,
      );
      assert.throws(
        () => updateTask(db, t.id, { manifestSha256: '0'.repeat(64) } as unknown as TaskPatch),
        /cannot change/,
      );
      assert.throws(
        () => db.prepare('UPDATE tasks SET manifest_json = ? WHERE id = ?').run('{}', t.id),
        /task manifests are immutable/,
      );
      assert.throws(
        () => db.prepare("UPDATE tasks SET manifest_sha256 = 'x' WHERE id = ?").run(t.id),
        /task manifests are immutable/,
      );
      // The mutable fields do change.
      updateTask(db, t.id, { status: 'running', startedAt: new Date().toISOString() });
    });
    const now = withDb(r, (db) => getTask(db, t.id) as TaskRow);
    assert.equal(now.status, 'running');
    assert.equal(now.manifestJson, stored.j);
    assert.equal(now.manifestSha256, stored.h);
  }));

test('a stored manifest that is not what was hashed, or another major version, is refused by name', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const t = await makeTask(r);
    const m = JSON.parse(t.manifestJson);
    assert.equal(
      codeOf(() => parseTaskManifest({ ...m, schema: 'xet.task/v2', schemaVersion: 2 })),
      'SCHEMA_UNSUPPORTED',
    );
    assert.equal(
      codeOf(() => parseTaskManifest({ ...m, policy: { capture: 'yes' } })),
      'INTEGRITY_MISMATCH',
    );
    // Only by removing the trigger can the bytes change; `task show` then says they are not the hashed ones.
    withDb(r, (db) => {
      db.exec('DROP TRIGGER tasks_manifest_immutable');
      db.prepare('UPDATE tasks SET manifest_json = ? WHERE id = ?').run(
        canonicalJson({ ...m, correlationId: 'forged' }),
        t.id,
      );
    });
    const e = expectError(xet(sb, r.dir, ['task', 'show', t.id, '--json']), 'INTEGRITY_MISMATCH');
    assert.equal(e.details.task, t.id);
  }));

test('runtime versions: measured for the allowlist only, null when the command cannot say', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const git = parseTaskManifest((await makeTask(r, { argv0: 'git', measure: true })).manifestJson);
    assert.match(git.runtime.version ?? '', /^\d+\.\d+\.\d+/);
    assert.equal(git.runtime.versionSource, 'measured');
    const sh = parseTaskManifest((await makeTask(r, { argv0: '/bin/sh', measure: true })).manifestJson);
    assert.deepEqual([sh.runtime.command, sh.runtime.version, sh.runtime.versionSource], ['sh', null, 'unmeasured']);
    // An allowlisted name that is a script of the workspace is never run for its version.
    r.write('bin/node', `#!/bin/sh\necho ran >> ${JSON.stringify(r.p('ran.txt'))}\necho v1.2.3\n`, 0o755);
    const rel = parseTaskManifest((await makeTask(r, { argv0: 'bin/node', measure: true })).manifestJson);
    assert.deepEqual([rel.runtime.command, rel.runtime.version], ['node', null]);
    assert.equal(fs.existsSync(r.p('ran.txt')), false);
    // An absolute allowlisted one that hangs, with a child holding its output open: null after the
    // 2 s timeout, not a hung task start.
    r.write('slow/python3', '#!/bin/sh\nsleep 8 &\nsleep 8\n', 0o755);
    const t0 = Date.now();
    const slow = parseTaskManifest((await makeTask(r, { argv0: r.p('slow/python3'), measure: true })).manifestJson);
    assert.deepEqual([slow.runtime.version, slow.runtime.versionSource], [null, 'unmeasured']);
    assert.ok(Date.now() - t0 < 5000, `measured within the timeout (${Date.now() - t0} ms)`);
  }));

test('correlation ids: 1 to 256 UTF-8 bytes, no ASCII control characters, stored and copied as given', async () =>
  withSandbox(async (sb) => {
    assert.equal(validateCorrelationId('a'.repeat(256)), 'a'.repeat(256));
    const multi = 'é'.repeat(128); // 2 bytes each: 256 bytes in 128 characters
    assert.equal(validateCorrelationId(multi), multi);
    assert.equal(validateCorrelationId('🦊'.repeat(64)), '🦊'.repeat(64));
    for (const bad of [
      '',
      'a'.repeat(257),
      `${multi}a`,
      `${'🦊'.repeat(64)}a`,
      'run\u00017',
      'run\t7',
      'line\nbreak',
      'del\u007f',
      '\ud800lone',
    ]) {
      assert.equal(
        codeOf(() => validateCorrelationId(bad)),
        'USAGE',
        JSON.stringify(bad),
      );
    }
    assert.throws(() => validateCorrelationId('del\u007f'), /control character U\+007F/);
    assert.throws(() => validateCorrelationId(`${multi}a`), /257 bytes/);
    // Non-ASCII controls (C1) and anything that merely looks structured are opaque text.
    assert.equal(validateCorrelationId('x\u0085y'), 'x\u0085y');
    const r = repoWithCommit(sb);
    const id = `${'é'.repeat(110)} {"route":"/a"} ${'z'.repeat(5)}`;
    assert.ok(Buffer.byteLength(id) <= 256);
    const t = await makeTask(r, { correlationId: id });
    const shown = json(sb, r.dir, ['task', 'show', t.id]);
    assert.equal(shown.task.correlationId, id);
    assert.equal(shown.manifest.correlationId, id);
    assert.equal(json(sb, r.dir, ['task', 'list']).tasks[0].correlationId, id);
    const events = json(sb, r.dir, ['task', 'events', t.id]).events;
    assert.ok(events.length >= 1);
    for (const e of events) assert.equal(e.correlationId, id);
    // Opaque also means printed as it is, except that nothing can reorder what a terminal shows.
    const bidi = await makeTask(r, { correlationId: 'abc\u202edef' });
    const human = xet(sb, r.dir, ['task', 'show', bidi.id]);
    expectExit(human, 0);
    assert.match(human.stdout, /correlation {2}"abc\\u\{202e\}def"/);
    assert.equal(json(sb, r.dir, ['task', 'show', bidi.id]).task.correlationId, 'abc\u202edef');
    // buildManifest checks it too, before anything is stored.
    await assert.rejects(makeTask(r, { correlationId: 'a'.repeat(257) }), { code: 'USAGE' });
  }));

test('events: envelope v1 in order, --after, and payloads that are not metadata refused before they are stored', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const t = await makeTask(r, { correlationId: 'c-1' });
    withDb(r, (db) => {
      appendEvent(db, t.id, 'task.started', { pid: 42, nested: { cwd: 'src/sub', list: ['a', 1, true, null] } });
      appendEvent(db, t.id, 'task.result_spooled', { sizeBytes: 300000, note: 'x'.repeat(512) });
      const refused: Record<string, unknown>[] = [
        { file: '/etc/passwd' },
        { output: 'x'.repeat(513) },
        { nested: { deeper: { path: '/home/user/secret' } } },
        { list: ['ok', '/abs'] },
      ];
      for (const p of refused) assert.throws(() => appendEvent(db, t.id, 'task.captured', p), /metadata only/);
      assert.throws(
        () => appendEvent(db, t.id, 'task.captured', { big: Array(40).fill('y'.repeat(500)) }),
        /8192 bytes/,
      );
      assert.equal(
        codeOf(() => appendEvent(db, 'ffffffffffffffff', 'task.started')),
        'TASK_NOT_FOUND',
      );
      assert.equal(listEvents(db, t.id).length, 3, 'nothing of the refused events was stored');
    });
    const all = json(sb, r.dir, ['task', 'events', t.id]).events;
    assert.deepEqual(
      all.map((e: { eventType: string }) => e.eventType),
      ['task.created', 'task.started', 'task.result_spooled'],
    );
    const ids = new Set<string>();
    let prev = 0;
    for (const e of all) {
      assert.deepEqual(Object.keys(e).sort(), [
        'correlationId',
        'createdAt',
        'eventId',
        'eventType',
        'payload',
        'schemaVersion',
        'seq',
        'taskId',
      ]);
      assert.equal(e.schemaVersion, 1);
      assert.equal(e.taskId, t.id);
      assert.equal(e.correlationId, 'c-1');
      assert.match(e.eventId, /^[0-9a-f-]{36}$/);
      assert.match(e.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.ok(e.seq > prev);
      prev = e.seq;
      ids.add(e.eventId);
    }
    assert.equal(ids.size, 3, 'event ids are unique');
    assert.equal(all[0].payload.manifestSha256, t.manifestSha256);
    assert.deepEqual(all[1].payload, { nested: { cwd: 'src/sub', list: ['a', 1, true, null] }, pid: 42 });
    // The stored payload is canonical JSON.
    const raw = withDb(r, (db) =>
      db.prepare('SELECT payload FROM task_events WHERE task_id = ? ORDER BY seq').all(t.id),
    ) as {
      payload: string;
    }[];
    for (const { payload } of raw) assert.equal(canonicalJson(JSON.parse(payload)), payload);
    const tail = json(sb, r.dir, ['task', 'events', t.id, '--after', String(all[0].seq)]).events;
    assert.deepEqual(
      tail.map((e: { seq: number }) => e.seq),
      [all[1].seq, all[2].seq],
    );
    const human = xet(sb, r.dir, ['task', 'events', t.id.slice(0, 6)]);
    expectExit(human, 0);
    assert.match(human.stdout, /task\.created[\s\S]*task\.started {2}\{"nested"/);
    expectError(xet(sb, r.dir, ['task', 'events', t.id, '--after', '-1', '--json']), 'USAGE', 2);
  }));

test('events --follow prints events as they come and ends when the task has ended', async (tc) =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const t = await makeTask(r, { patch: liveRunner(tc) });
    const child = spawn(process.execPath, [XET_BIN, 'task', 'events', t.id, '--follow', '--json'], {
      cwd: r.dir,
      env: sb.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let ended = false;
    void exited.then(() => (ended = true));
    const waitFor = async (what: () => boolean, label: string) => {
      const until = Date.now() + 20_000;
      while (!what()) {
        if (Date.now() > until) {
          child.kill('SIGKILL');
          assert.fail(`${label}: stdout ${stdout} stderr ${stderr}`);
        }
        await new Promise((res) => setTimeout(res, 50));
      }
    };
    try {
      await waitFor(() => stdout.includes('task.created'), 'the existing event is printed');
      withDb(r, (db) => {
        updateTask(db, t.id, { status: 'running', startedAt: new Date().toISOString() });
        appendEvent(db, t.id, 'task.started', { pid: 1 });
      });
      await waitFor(() => stdout.includes('task.started'), 'a new event is printed');
      await new Promise((res) => setTimeout(res, 600));
      assert.equal(ended, false, 'still following a running task');
      // The status changes before the final event is appended (as a runner may do it): the
      // follower must not stop in between.
      withDb(r, (db) => updateTask(db, t.id, { status: 'succeeded', endedAt: new Date().toISOString(), exitCode: 0 }));
      await new Promise((res) => setTimeout(res, 500));
      withDb(r, (db) => appendEvent(db, t.id, 'task.succeeded', { exitCode: 0 }));
      const code = await Promise.race([exited, new Promise<'hung'>((res) => setTimeout(() => res('hung'), 10_000))]);
      assert.equal(code, 0, `follow ended with the task: ${stdout} ${stderr}`);
    } finally {
      if (!ended) child.kill('SIGKILL');
    }
    const lines = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((e) => e.eventType),
      ['task.created', 'task.started', 'task.succeeded'],
    );
    for (const e of lines) assert.equal(e.schemaVersion, 1);
    // An ended task: --follow prints what there is and returns at once.
    const t0 = Date.now();
    const again = xet(sb, r.dir, ['task', 'events', t.id, '--follow']);
    expectExit(again, 0);
    assert.equal(again.stdout.trim().split('\n').length, 3);
    assert.ok(Date.now() - t0 < 5000);
  }));

test('retention: backdated terminal tasks go with their directories and spool files; unfinished tasks never', async (t) =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const snap = capture(sb, r.dir);
    const old = new Date(Date.now() - 200 * HOUR).toISOString();
    const ancient = '2020-01-01T00:00:00.000Z';
    const files = { stdout: 'out\n', stderr: '', exit: '0\n', 'result.spool': 'r'.repeat(300_000) };
    const due: TaskRow[] = [];
    for (const status of ['succeeded', 'failed', 'cancelled', 'interrupted'] as const) {
      due.push(await makeTask(r, { status, createdAt: ancient, endedAt: old, files, resultSnapshot: snap }));
    }
    withDb(r, (db) => recordExport(db, due[0].id, r.git('rev-parse', 'HEAD').trim(), 'main'));
    const recent = await makeTask(r, {
      status: 'succeeded',
      endedAt: new Date(Date.now() - HOUR).toISOString(),
      files,
    });
    // Unfinished tasks, however old, and even with an ended_at set by mistake. Their runner is a
    // live process (recovery, which every task command runs first, leaves such a task alone).
    const alive = liveRunner(t);
    const running = await makeTask(r, {
      status: 'running',
      createdAt: ancient,
      files,
      baseSnapshot: snap,
      patch: alive,
    });
    const created = await makeTask(r, { status: 'created', createdAt: ancient, endedAt: ancient, files, patch: alive });
    for (const t of [...due, recent, running, created]) assert.ok(fs.existsSync(taskDir(r.commonDir(), t.id)));

    // A dry run lists and keeps.
    const repo = await findRepo(r.dir);
    const dry = collectTasks(repo, { dryRun: true });
    assert.deepEqual([...dry.collected].sort(), due.map((t) => t.id).sort());
    assert.ok(fs.existsSync(taskFile(r.commonDir(), due[0].id, 'result.spool')));
    const roots = withDb(r, (db) => taskRoots(db));
    assert.ok(roots.some((x) => x.task === due[0].id && x.why === 'result' && x.snapshot === snap));
    assert.ok(roots.some((x) => x.task === running.id && x.why === 'base' && x.snapshot === snap));

    // Any task command collects first.
    const listed = json(sb, r.dir, ['task', 'list']).tasks.map((t: { id: string }) => t.id);
    assert.deepEqual([...listed].sort(), [recent.id, running.id, created.id].sort());
    for (const t of due) {
      assert.equal(fs.existsSync(taskDir(r.commonDir(), t.id)), false, `${t.status} task dir removed`);
      expectError(xet(sb, r.dir, ['task', 'show', t.id, '--json']), 'TASK_NOT_FOUND');
    }
    const left = withDb(r, (db) => ({
      events: (db.prepare('SELECT DISTINCT task_id AS t FROM task_events').all() as { t: string }[]).map((x) => x.t),
      exports: (db.prepare('SELECT COUNT(*) AS n FROM task_exports').get() as { n: number }).n,
      roots: taskRoots(db),
    }));
    assert.deepEqual(left.events.sort(), [recent.id, running.id, created.id].sort(), 'events went with their rows');
    assert.equal(left.exports, 0, 'exports went with their rows');
    assert.ok(!left.roots.some((x) => due.some((t) => t.id === x.task)), 'their result roots are gone');
    for (const t of [recent, running, created]) assert.ok(fs.existsSync(taskDir(r.commonDir(), t.id)));

    // A shorter retention takes the recent one too; never the unfinished ones.
    r.git('config', 'xet.task.retention', '30m');
    assert.deepEqual(collectTasks(repo).collected, [recent.id]);
    r.git('config', 'xet.task.retention', 'now');
    assert.deepEqual(collectTasks(repo).collected, []);
    assert.deepEqual(
      json(sb, r.dir, ['task', 'list'])
        .tasks.map((t: { id: string }) => t.id)
        .sort(),
      [running.id, created.id].sort(),
    );
    assert.ok(fs.existsSync(taskFile(r.commonDir(), running.id, 'result.spool')));

    // `never` keeps everything; a value that is no duration is CONFIG_INVALID.
    const kept = await makeTask(r, { status: 'failed', endedAt: ancient });
    r.git('config', 'xet.task.retention', 'never');
    assert.deepEqual(collectTasks(repo).collected, []);
    r.git('config', 'xet.task.retention', 'soon');
    expectError(xet(sb, r.dir, ['task', 'list', '--json']), 'CONFIG_INVALID');
    r.git('config', '--unset', 'xet.task.retention');
    assert.deepEqual(collectTasks(repo).collected, [kept.id]);

    // Config from anywhere git reads it counts (git xet skips asking git only when no config file
    // could name the key): -c (GIT_CONFIG_*), the global file, an included file.
    const hourAgo = () => new Date(Date.now() - HOUR).toISOString();
    const listedIds = (env?: NodeJS.ProcessEnv) => {
      const res = xet(sb, r.dir, ['task', 'list', '--json'], { env });
      expectExit(res, 0);
      return parseJson(res).tasks.map((t: { id: string }) => t.id);
    };
    const viaEnv = await makeTask(r, { status: 'succeeded', endedAt: hourAgo() });
    assert.ok(listedIds().includes(viaEnv.id), 'kept under the default 168 h');
    assert.ok(
      !listedIds({ GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'xet.task.retention', GIT_CONFIG_VALUE_0: '30m' }).includes(
        viaEnv.id,
      ),
    );
    const viaGlobal = await makeTask(r, { status: 'succeeded', endedAt: hourAgo() });
    fs.appendFileSync(path.join(sb.home, '.gitconfig'), '[xet "task"]\n\tretention = 30m\n');
    assert.ok(!listedIds().includes(viaGlobal.id));
    fs.writeFileSync(
      path.join(sb.home, '.gitconfig'),
      fs.readFileSync(path.join(sb.home, '.gitconfig'), 'utf8').replace(/\[xet "task"\][^[]*/, ''),
    );
    const viaInclude = await makeTask(r, { status: 'succeeded', endedAt: hourAgo() });
    assert.ok(listedIds().includes(viaInclude.id));
    fs.writeFileSync(sb.path('extra.cfg'), '[xet "task"]\n\tretention = 30m\n');
    r.git('config', 'include.path', sb.path('extra.cfg'));
    assert.ok(!listedIds().includes(viaInclude.id));
  }));

test('task ids resolve from a unique prefix of 4 or more hex digits; ambiguous is USAGE, unknown TASK_NOT_FOUND', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    // Before any task (no sidecar): not found, and a list is empty.
    expectError(xet(sb, r.dir, ['task', 'show', 'abcd', '--json']), 'TASK_NOT_FOUND');
    assert.deepEqual(json(sb, r.dir, ['task', 'list']), { tasks: [] });
    const a1 = await makeTask(r, { id: 'abcd000000000001' });
    await makeTask(r, { id: 'abcd000000000002' });
    const b = await makeTask(r, { id: 'abce000000000000' });
    withDb(r, (db) => {
      assert.equal(resolveTaskId(db, 'abce'), b.id);
      assert.equal(resolveTaskId(db, 'ABCE0'), b.id);
      assert.equal(resolveTaskId(db, a1.id), a1.id);
      assert.equal(
        codeOf(() => resolveTaskId(db, 'abcd0000000000')),
        'USAGE',
      );
      assert.equal(
        codeOf(() => resolveTaskId(db, 'abcd0000000003')),
        'TASK_NOT_FOUND',
      );
    });
    const amb = expectError(xet(sb, r.dir, ['task', 'show', 'abcd', '--json']), 'USAGE', 2);
    assert.deepEqual([...amb.details.matches].sort(), ['abcd000000000001', 'abcd000000000002']);
    assert.equal(json(sb, r.dir, ['task', 'show', 'abce']).task.id, b.id);
    assert.equal(json(sb, r.dir, ['task', 'show', 'abcd000000000001']).task.id, a1.id);
    for (const bad of ['abc', 'abcd0000000000011', 'xyz1', 'ab-c']) {
      expectError(xet(sb, r.dir, ['task', 'show', bad, '--json']), 'USAGE', 2);
    }
    expectError(xet(sb, r.dir, ['task', 'show', 'ffff', '--json']), 'TASK_NOT_FOUND');
    expectError(xet(sb, r.dir, ['task', 'events', 'abcf', '--json']), 'TASK_NOT_FOUND');
    const human = xet(sb, r.dir, ['task', 'show', 'ffff']);
    expectExit(human, 3);
    assert.match(human.stderr, /no task ffff.*\[TASK_NOT_FOUND\]/);
  }));

test('task show and list: the shapes of docs/CLI.md, provenance from base snapshot to exported commits', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    const base = capture(sb, r.dir);
    r.write('b.txt', 'work of the task\n');
    const result = capture(sb, r.dir);
    const first = await makeTask(r, {
      createdAt: new Date(Date.now() - 2000).toISOString(),
      status: 'failed',
      endedAt: new Date().toISOString(),
    });
    const t = await makeTask(r, { baseSnapshot: base, correlationId: 'corr' });
    const commit = r.commit('exported', { 'c.txt': 'c\n' });
    withDb(r, (db) => {
      updateTask(db, t.id, {
        status: 'succeeded',
        startedAt: new Date().toISOString(),
        endedAt: new Date().toISOString(),
        exitCode: 0,
        resultSnapshot: result,
      });
      recordExport(db, t.id, commit, 'feature');
      recordExport(db, t.id, commit, 'feature'); // once
      assert.equal(inlineResult(db, t.id), null);
      updateTask(db, first.id, { resultInline: Buffer.from('é\u0000x') });
      assert.deepEqual(inlineResult(db, first.id), Buffer.from('é\u0000x'), 'the bytes, exactly');
      assert.equal(taskOfSnapshot(db, result)?.id, t.id);
      assert.equal(taskOfSnapshot(db, base), null);
      assert.equal(
        codeOf(() => recordExport(db, 'ffffffffffffffff', commit, null)),
        'TASK_NOT_FOUND',
      );
    });
    const shown = json(sb, r.dir, ['task', 'show', t.id]);
    assert.deepEqual(Object.keys(shown).sort(), [
      'manifest',
      'manifestSha256',
      'origin',
      'provenance',
      'result',
      'task',
    ]);
    assert.equal(shown.origin, 'local', 'a task of this sidecar is shown from it');
    assert.equal(shown.task.id, t.id);
    assert.equal(shown.task.status, 'succeeded');
    assert.equal(shown.task.exitCode, 0);
    assert.equal(shown.task.detached, false);
    assert.equal('manifestJson' in shown.task, false, 'the manifest is printed parsed, once');
    assert.equal(shown.manifestSha256, t.manifestSha256);
    assert.equal(shown.provenance.baseSnapshot, base);
    assert.equal(shown.provenance.task, t.id);
    assert.equal(shown.provenance.resultSnapshot, result);
    assert.equal(shown.provenance.exports.length, 1);
    assert.deepEqual(
      { commit: shown.provenance.exports[0].commit, branch: shown.provenance.exports[0].branch },
      { commit, branch: 'feature' },
    );
    assert.equal(shown.result, null, 'no result was stored');
    const human = xet(sb, r.dir, ['task', 'show', t.id]);
    expectExit(human, 0);
    assert.match(
      human.stdout,
      new RegExp(
        `provenance +snapshot ${base.slice(0, 12)} -> task ${t.id} -> snapshot ${result.slice(0, 12)} -> commit ${commit.slice(0, 12)} \\(feature\\)`,
      ),
    );

    const list = json(sb, r.dir, ['task', 'list']);
    assert.deepEqual(
      list.tasks.map((x: { id: string }) => x.id),
      [t.id, first.id],
      'newest first',
    );
    assert.equal('manifestJson' in list.tasks[0], false);
    assert.equal(list.tasks[0].correlationId, 'corr');
    assert.deepEqual(
      json(sb, r.dir, ['task', 'list', '--status', 'failed']).tasks.map((x: { id: string }) => x.id),
      [first.id],
    );
    assert.deepEqual(
      json(sb, r.dir, ['task', 'list', '--status', 'terminal', '--limit', '1']).tasks.map((x: { id: string }) => x.id),
      [t.id],
    );
    assert.deepEqual(json(sb, r.dir, ['task', 'list', '--status', 'active']).tasks, []);
    expectError(xet(sb, r.dir, ['task', 'list', '--status', 'done', '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['task', 'list', '--limit', '0', '--json']), 'USAGE', 2);
    const lines = xet(sb, r.dir, ['task', 'list']);
    expectExit(lines, 0);
    assert.match(lines.stdout, new RegExp(`^${t.id}  succeeded exit 0 .*node`, 'm'));
  }));

// Waits for the recovery part of issue 10 (src/tasks/recover.ts): while it is the stub, reconcile
// changes nothing and the follower would rightly keep waiting.
const RECOVERY_STUB = /void opts;\s*return \{ tasks: \[\] \}/.test(String(reconcile));

test(
  'events --follow of a task whose runner dies while followed reconciles it and ends',
  { skip: RECOVERY_STUB && 'waits for src/tasks/recover.ts (reconcile is the stub)' },
  async () =>
    withSandbox(async (sb) => {
      const r = repoWithCommit(sb);
      const t = await makeTask(r);
      const runner = spawn('sleep', ['60'], { stdio: 'ignore' });
      const id = identify(runner.pid as number);
      assert.ok(id);
      withDb(r, (db) => {
        updateTask(db, t.id, {
          status: 'running',
          startedAt: new Date().toISOString(),
          runnerPid: id.pid,
          runnerStart: id.start,
          bootId: id.boot,
        });
        appendEvent(db, t.id, 'task.started', {});
      });
      const child = spawn(process.execPath, [XET_BIN, 'task', 'events', t.id, '--follow', '--json'], {
        cwd: r.dir,
        env: sb.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      try {
        const until = Date.now() + 20_000;
        while (!stdout.includes('task.started') && Date.now() < until) await new Promise((res) => setTimeout(res, 50));
        runner.kill('SIGKILL');
        const code = await Promise.race([exited, new Promise<'hung'>((res) => setTimeout(() => res('hung'), 20_000))]);
        assert.equal(code, 0, `the follow ended: ${stdout}`);
      } finally {
        child.kill('SIGKILL');
        runner.kill('SIGKILL');
      }
      const types = stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).eventType);
      assert.ok(types.includes('task.interrupted'), types.join());
      assert.equal(
        withDb(r, (db) => getTask(db, t.id)?.status),
        'interrupted',
      );
    }),
);

test('command names: cut at the first whitespace or control character, then the basename, at most 64 bytes on a character boundary', () => {
  assert.equal(commandName('node'), 'node');
  assert.equal(commandName('/usr/bin/python3'), 'python3');
  assert.equal(commandName('claude -p "Refactor billing; key sk-LIVE-123"'), 'claude');
  assert.equal(commandName('run\u0000x'), 'run');
  assert.equal(commandName('a\u0085b'), 'a', 'C1 controls cut too');
  assert.equal(commandName('tool\u00a0--key=s'), 'tool', 'Unicode spaces cut too');
  assert.equal(commandName('tool a/b/secret'), 'tool');
  assert.equal(commandName('  lead'), 'lead');
  assert.equal(commandName('€'.repeat(30)), '€'.repeat(21), '63 bytes: the 22nd character would cross 64');
  assert.equal(commandName('/'), '');
  assert.equal(commandName(' \t'), '');
});

test('task config out of range is CONFIG_INVALID: killGrace over 1d, retention over 100y (never is fine)', async () =>
  withSandbox(async (sb) => {
    const r = repoWithCommit(sb);
    r.git('config', 'xet.task.killGrace', '2d');
    const grace = await readConfig({ cwd: r.dir });
    assert.equal(
      codeOf(() => taskConfig(grace)),
      'CONFIG_INVALID',
    );
    r.git('config', 'xet.task.killGrace', '1d');
    r.git('config', 'xet.task.retention', '99999999999999d');
    const retention = await readConfig({ cwd: r.dir });
    assert.equal(
      codeOf(() => taskConfig(retention)),
      'CONFIG_INVALID',
    );
    expectError(xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', 'true']), 'CONFIG_INVALID');
    r.git('config', 'xet.task.retention', 'never');
    assert.deepEqual(taskConfig(await readConfig({ cwd: r.dir })), { killGraceMs: 86400_000, retentionMs: null });
  }));
