// Finite growth (issue 11): the read-only commands add nothing to any root — the repository root
// (recountRepository's figure AND every file under .git byte for byte), a xet store, a fork — and
// gc and task recover add a bounded amount (their journal rows), are admitted as settling work into
// the headroom, and recount after a crash. docs/CLI.md "Commands that add nothing" lists the same.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { admitRepository } from '../../src/allowance/admit';
import { writersDir } from '../../src/allowance/crash';
import { recountRepository } from '../../src/allowance/repo-root';
import { SETTLE_JOURNAL_BOUND_BYTES } from '../../src/allowance/settle';
import { KEEP_FINISHED_RUNS } from '../../src/gc/journal';
import { isXetError } from '../../src/errors';
import { findRepo, type Repo as CoreRepo } from '../../src/git/repo';
import { withSidecar } from '../../src/sidecar/db';
import { workspaceId } from '../../src/sidecar/workspaces';
import { bootId } from '../../src/tasks/proc';
import { insertTask } from '../../src/tasks/store';
import { killAt } from '../support/faults';
import { fork } from '../support/forks';
import { initRepo, type Repo } from '../support/git';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { compareTrees, walkTree, type TreeListing } from '../support/state';
import { taskRow } from '../support/tasks';
import { capture, describeRun, expectError, expectExit, parseJson, xet } from '../support/xet';

interface Roots {
  /** recountRepository's figure for the repository root. */
  used: { bytes: number; files: number };
  /** Every entry under the common git dir (size + sha256 of files, directories, links). */
  git: TreeListing;
  store: TreeListing | null;
  fork: TreeListing | null;
}

interface World {
  sb: Sandbox;
  r: Repo;
  core: CoreRepo;
  store: string | null;
  forkDir: string | null;
}

const listings = (w: World) => ({
  git: walkTree(w.core.commonDir),
  store: w.store ? walkTree(w.store) : null,
  fork: w.forkDir ? walkTree(w.forkDir) : null,
});

/** The recount writes its own figure into the sidecar, so before a command it runs first and the
 * listings after it, and after the command the listings first: what they see is the command alone. */
function measureBefore(w: World): Roots {
  const used = recountRepository(w.core).used;
  return { used, ...listings(w) };
}

function measureAfter(w: World): Roots {
  const l = listings(w);
  return { ...l, used: recountRepository(w.core).used };
}

function assertUnchanged(label: string, before: Roots, after: Roots): void {
  const diffs = [
    ...compareTrees(before.git, after.git).map((d) => `.git${d}`),
    ...(before.store && after.store ? compareTrees(before.store, after.store).map((d) => `store${d}`) : []),
    ...(before.fork && after.fork ? compareTrees(before.fork, after.fork).map((d) => `fork${d}`) : []),
  ];
  assert.deepEqual(diffs, [], `${label} changed files:\n${diffs.join('\n')}`);
  assert.deepEqual(after.used, before.used, `${label} changed the repository root's recount`);
}

const READ_ONLY_EXIT = [0, 1]; // verify and diff --exit-code report differences with 1

/** A repository with two snapshots, a pin, a handoff, a xet store it pushed to, a copy fork and a
 * finished task: every table and directory the read-only commands look at has something in it. */
async function richWorld(sb: Sandbox): Promise<World & { s1: string; s2: string; handoff: string }> {
  const r = initRepo(sb, 'repo');
  r.commit('one', { 'a.txt': 'a\n', 'src/b.txt': 'b\n' });
  r.write('untracked.txt', 'u\n');
  const s1 = capture(sb, r.dir);
  r.write('a.txt', 'a2\n');
  const s2 = capture(sb, r.dir);
  expectExit(xet(sb, r.dir, ['pin', s1, '--reason', 'keep', '--json']), 0);
  const h = xet(sb, r.dir, ['handoff', 'create', s1, '--to', 'bob', '--from', 'al', '--title', 't', '--json']);
  expectExit(h, 0);
  const store = sb.path('store');
  r.git('remote', 'add', 'xs', `xet::${store}`);
  expectExit(xet(sb, r.dir, ['push', 'xs', s1, '--json']), 0);
  const forkDir = sb.path('fork');
  fork(sb, r.dir, s1, forkDir, ['--mode', 'copy']);
  expectExit(xet(sb, r.dir, ['task', 'run', '--json', '--', 'true']), 0);
  const core = await findRepo(r.dir);
  return { sb, r, core, store, forkDir, s1, s2, handoff: parseJson(h).id as string };
}

/** The read-only commands, each with the directory it runs in. `allowance` is the report helper's
 * command (wip/report): listed here so this test covers it once the branches are merged. */
function readOnlyCommands(w: { r: Repo; forkDir: string | null; s1: string; s2: string; handoff: string }) {
  const at = w.r.dir;
  const list: { cwd: string; args: string[] }[] = [
    { cwd: at, args: ['show', w.s1] },
    { cwd: at, args: ['snapshots'] },
    { cwd: at, args: ['verify', w.s1, at] },
    { cwd: at, args: ['diff', w.s1, w.s2] },
    { cwd: at, args: ['diff', w.s1] },
    { cwd: at, args: ['handoff', 'verify', w.handoff] },
    { cwd: at, args: ['handoff', 'list'] },
    { cwd: at, args: ['handoff', 'show', w.handoff] },
    { cwd: at, args: ['fsck'] },
    { cwd: at, args: ['status'] },
  ];
  if (w.forkDir) {
    list.push({ cwd: w.forkDir, args: ['verify', w.s1, w.forkDir] });
    list.push({ cwd: w.forkDir, args: ['status'] });
  }
  // Last, so that before the report helper's branch is merged every other command is still checked.
  list.push({ cwd: at, args: ['allowance'] });
  return list;
}

function runReadOnly(sb: Sandbox, cwd: string, args: string[]): void {
  const res = xet(sb, cwd, [...args, '--json']);
  assert.ok(READ_ONLY_EXIT.includes(res.status ?? -1), describeRun(res));
  assert.ok(!parseJson(res)?.error, `git xet ${args.join(' ')} failed:\n${describeRun(res)}`);
}

test('read-only commands add nothing to any root: .git byte for byte, the recount, the store and the fork', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    for (const { cwd, args } of readOnlyCommands(w)) {
      const before = measureBefore(w);
      runReadOnly(sb, cwd, args);
      assertUnchanged(`git xet ${args.join(' ')}${cwd === w.r.dir ? '' : ' (in the fork)'}`, before, measureAfter(w));
    }
  }));

test('read-only commands do not create a sidecar: in a repository that only fetched snapshots, nothing appears', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    const c = initRepo(sb, 'reader');
    c.commit('base', { 'x.txt': 'x\n' });
    c.git('fetch', '-q', w.r.dir, 'refs/xet/*:refs/xet/*');
    const commonDir = c.commonDir();
    assert.equal(fs.existsSync(path.join(commonDir, 'xet')), false);
    const cmds = readOnlyCommands({ ...w, r: c, forkDir: null });
    for (const { cwd, args } of cmds) {
      const before = walkTree(commonDir);
      runReadOnly(sb, cwd, args);
      const diffs = compareTrees(before, walkTree(commonDir));
      assert.deepEqual(
        diffs,
        [],
        `git xet ${args.join(' ')} wrote into a repository without a sidecar:\n${diffs.join('\n')}`,
      );
    }
    assert.equal(fs.existsSync(path.join(commonDir, 'xet')), false, 'a reader created .git/xet');
  }));

/** A task row left `running` by a runner that died (so task recover has something to write). */
function abandonedTask(core: CoreRepo): string {
  const id = crypto.randomBytes(8).toString('hex');
  const dead = spawnSync('true').pid ?? 999_999;
  withSidecar(core.commonDir, (db) =>
    insertTask(
      db,
      taskRow({
        id,
        slot: workspaceId(core.gitDir),
        worktree: core.worktree,
        gitDir: core.gitDir,
        status: 'running',
        createdAt: new Date(Date.now() - 3600_000).toISOString(),
        runnerPid: dead,
        runnerStart: '0',
        bootId: bootId(),
      }),
    ),
  );
  return id;
}

test(`gc and task recover add a bounded amount (journal rows, ≤ ${SETTLE_JOURNAL_BOUND_BYTES} bytes a run), and repeated runs add no files`, () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    const grown: Record<string, number[]> = { gc: [], 'task recover': [] };
    const rowBytes: Record<string, number[]> = { gc: [], 'task recover': [] };
    // The rows' own bytes: the database file grows by whole pages, and only once its free pages are
    // used up, so the file size alone would call a run that wrote rows free.
    const journalBytes = () =>
      withSidecar(w.core.commonDir, (db) => {
        const q = (sql: string) => (db.prepare(sql).get() as { n: number | null }).n ?? 0;
        return {
          gc: q(`SELECT sum(length(id) + length(target) + length(started_at) + length(coalesce(finished_at, ''))
                  + length(state) + length(coalesce(cutoff, '')) + length(coalesce(step, ''))
                  + length(coalesce(plan, '')) + length(coalesce(result, '')) + 24) AS n FROM gc_runs`),
          'task recover': q(`SELECT sum(length(event_id) + length(task_id) + length(coalesce(correlation_id, ''))
                  + length(event_type) + length(created_at) + length(payload) + 8) AS n FROM task_events`),
        };
      });
    const run = (what: 'gc' | 'task recover', args: string[]) => {
      const rowsBefore = journalBytes()[what];
      const before = recountRepository(w.core).used;
      expectExit(xet(sb, w.r.dir, [...args, '--json']), 0);
      const after = recountRepository(w.core).used;
      const added = after.bytes - before.bytes;
      const rows = journalBytes()[what] - rowsBefore;
      grown[what].push(added);
      rowBytes[what].push(rows);
      assert.ok(
        added <= SETTLE_JOURNAL_BOUND_BYTES,
        `${what} added ${added} bytes (bound ${SETTLE_JOURNAL_BOUND_BYTES})`,
      );
      assert.ok(
        rows <= SETTLE_JOURNAL_BOUND_BYTES,
        `${what} wrote ${rows} bytes of rows (bound ${SETTLE_JOURNAL_BOUND_BYTES})`,
      );
      return { before, after };
    };
    // The first gc merges git xet's packs into git's own (they leave the root), so it may shrink it.
    run('gc', ['gc']);
    for (let i = 0; i < 4; i++) {
      const { before, after } = run('gc', ['gc']);
      assert.ok(after.files <= before.files, `gc run ${i + 2} added files: ${before.files} -> ${after.files}`);
    }
    for (let i = 0; i < 3; i++) {
      abandonedTask(w.core);
      const { before, after } = run('task recover', ['task', 'recover', '--all']);
      // its events and status are rows; the task's own directory existed already (ensured at insert or not)
      assert.ok(after.files - before.files <= 1, `task recover added ${after.files - before.files} files`);
    }
    // Nothing left to recover: a run adds nothing at all.
    const before = measureBefore(w);
    expectExit(xet(sb, w.r.dir, ['task', 'recover', '--all', '--json']), 0);
    assertUnchanged('task recover with nothing to recover', before, measureAfter(w));
    process.stdout.write(`# root growth per run (bytes): ${JSON.stringify(grown)}\n`);
    process.stdout.write(`# journal row bytes per run: ${JSON.stringify(rowBytes)}\n`);
  }));

/** Put the repository root over limit − headroom but with room for settling work. */
function squeeze(w: World): void {
  const used = recountRepository(w.core).used.bytes;
  const headroom = 200 * 1024;
  // limit − headroom is 100 KiB below what is used (the sidecar alone is more than 100 KiB, so the
  // limit is more than the headroom); limit is 100 KiB above it, more than the settle bound.
  w.r.git('config', 'xet.allowance.bytes', String(used + headroom / 2));
  w.r.git('config', 'xet.allowance.headroom', String(headroom));
}

test('over limit − headroom, growing work is refused but gc and task recover are admitted into the headroom', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    squeeze(w);
    await assert.rejects(admitRepository(w.core, { bytes: 1, files: 0 }, 'grow', 'capture'), (e) => {
      assert.equal(isXetError(e) && e.code, 'ALLOWANCE_EXCEEDED');
      return true;
    });
    abandonedTask(w.core);
    const rec = xet(sb, w.r.dir, ['task', 'recover', '--all', '--json']);
    expectExit(rec, 0);
    assert.equal(parseJson(rec).tasks.length, 1, describeRun(rec));
    expectExit(xet(sb, w.r.dir, ['gc', '--json']), 0);
    // And with the limit so tight that not even the journal bound fits, gc is refused before any effect.
    const used = recountRepository(w.core).used.bytes;
    w.r.git('config', 'xet.allowance.bytes', String(used + 1024));
    w.r.git('config', 'xet.allowance.headroom', '512');
    const before = measureBefore(w);
    const refused = expectError(xet(sb, w.r.dir, ['gc', '--json']), 'ALLOWANCE_EXCEEDED');
    assert.match(refused.message, /gc would add/);
    assertUnchanged('a refused gc', before, measureAfter(w));
  }));

test('over limit − headroom, a capture is refused with ALLOWANCE_EXCEEDED and leaves .git as it was', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    squeeze(w);
    w.r.write('new.txt', 'more\n');
    const before = measureBefore(w);
    expectError(xet(sb, w.r.dir, ['capture', '--json']), 'ALLOWANCE_EXCEEDED');
    assertUnchanged('a refused capture', before, measureAfter(w));
    expectExit(xet(sb, w.r.dir, ['gc', '--json']), 0);
  }));

test('gc and task recover recount after a crash: a dead writer marker makes them recount and removes it', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    for (const args of [['gc'], ['task', 'recover', '--all']]) {
      const dir = writersDir(w.core.commonDir);
      fs.mkdirSync(dir, { recursive: true });
      const dead = spawnSync('true').pid ?? 999_999;
      const marker = path.join(dir, `${dead}-1`);
      fs.writeFileSync(marker, '');
      // A dead writer's temporary pack: the recount removes it.
      const tmp = path.join(w.core.objectsDir, 'pack', `tmp_pack_xet_${dead}_abc`);
      fs.writeFileSync(tmp, Buffer.alloc(4096));
      withSidecar(w.core.commonDir, (db) => db.prepare('DELETE FROM allowance_counts').run());
      expectExit(xet(sb, w.r.dir, [...args, '--json']), 0);
      assert.equal(fs.existsSync(marker), false, `${args.join(' ')} left the dead writer's marker`);
      assert.equal(fs.existsSync(tmp), false, `${args.join(' ')} did not remove the dead writer's temporary file`);
      const n = withSidecar(w.core.commonDir, (db) =>
        db.prepare('SELECT count(*) AS n FROM allowance_counts').get(),
      ) as {
        n: number;
      };
      assert.equal(n.n, 1, `${args.join(' ')} did not record a recount`);
    }
  }));

test(`repeated gc runs do not grow the journal without limit: it keeps the newest ${KEEP_FINISHED_RUNS} finished runs, runs that deleted refs, and other targets' runs`, () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    withSidecar(w.core.commonDir, (db) => {
      const ins = db.prepare(
        `INSERT INTO gc_runs(id, target, pid, started_at, finished_at, state, plan, result)
         VALUES (?, ?, 1, ?, ?, 'done', '{}', '{}')`,
      );
      for (let i = 0; i < 100; i++) {
        const at = new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString();
        ins.run(`old-${String(i).padStart(3, '0')}`, 'repository', at, at);
      }
      ins.run('store-run', '/elsewhere/store', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z');
      db.prepare('INSERT INTO gc_deleted_refs(run_id, ref, oid, deleted_at) VALUES (?, ?, ?, ?)').run(
        'old-000',
        'refs/xet/dropped/x',
        '0'.repeat(40),
        '2026-01-01T00:00:00Z',
      );
    });
    const out = parseJson(xet(sb, w.r.dir, ['gc', '--json']));
    const ids = withSidecar(w.core.commonDir, (db) =>
      (db.prepare('SELECT id, target FROM gc_runs').all() as { id: string; target: string }[]).map((r) => r.id),
    );
    const repo = ids.filter((id) => id !== 'store-run' && id !== 'old-000');
    assert.equal(repo.length, KEEP_FINISHED_RUNS, `kept ${repo.length} runs: ${repo.join(' ')}`);
    assert.ok(repo.includes(out.runId), 'the run itself was forgotten');
    assert.ok(ids.includes('old-000'), 'a run that deleted refs was forgotten (undrop needs it)');
    assert.ok(ids.includes('store-run'), "another target's run was forgotten");
    assert.ok(!ids.includes('old-035'), 'an old run beyond the newest 64 was kept');
  }));

test('a gc SIGKILLed right after its admission leaves its writer marker; the next task recover recounts and removes it', () =>
  withSandbox(async (sb) => {
    const w = await richWorld(sb);
    const dir = writersDir(w.core.commonDir);
    const before = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
    killAt(sb, w.r.dir, ['gc', '--json'], 'allowance:after-admit');
    const left = fs.readdirSync(dir).filter((n) => !before.includes(n));
    assert.equal(left.length, 1, `the killed gc left ${left.length} markers`);
    withSidecar(w.core.commonDir, (db) => db.prepare('DELETE FROM allowance_counts').run());
    expectExit(xet(sb, w.r.dir, ['task', 'recover', '--all', '--json']), 0);
    assert.deepEqual(fs.readdirSync(dir), [], 'the dead gc marker is still there');
    const counted = withSidecar(w.core.commonDir, (db) =>
      db.prepare(`SELECT bytes FROM allowance_counts WHERE root = 'repository'`).get(),
    ) as { bytes: number } | undefined;
    assert.equal(counted?.bytes, recountRepository(w.core).used.bytes, 'task recover did not recount');
  }));
