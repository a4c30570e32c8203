// Headroom (issue 11): once the repository root is into its headroom, new work (a task, a fork) is
// refused with ALLOWANCE_EXCEEDED before any effect, while work that settles what was admitted (a
// running task's final capture, discard keeping a fork's work) may still use the headroom.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { repositoryUsed } from './support/allowance-repo';
import { fork } from './support/forks';
import { initRepo, pseudoRandomBytes } from './support/git';
import { withSandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

test('into the headroom: task run and fork are refused, a fork discard (its capture settles) is admitted', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('first', { 'README.md': '# demo\n' });
    const snap = capture(sb, r.dir);
    const f = path.join(sb.root, 'f');
    fork(sb, r.dir, snap, f, ['--mode', 'copy']);
    // New work in the fork, so keeping it on discard stores a pack.
    fs.writeFileSync(path.join(f, 'work.bin'), pseudoRandomBytes(200_000, 5));
    const used = await repositoryUsed(r.dir);
    // limit − headroom is below what is used; the limit itself leaves room for the fork's work.
    r.git('config', 'xet.allowance.bytes', String(used.bytes + 600_000));
    r.git('config', 'xet.allowance.headroom', String(700_000));

    const taskRefused = expectError(xet(sb, r.dir, ['task', 'run', '--json', '--', 'true']), 'ALLOWANCE_EXCEEDED');
    assert.equal(taskRefused.details.operation, 'task run');
    assert.equal(taskRefused.details.admissionClass, 'grow');
    const tasks = parseJson(xet(sb, r.dir, ['task', 'list', '--json']));
    assert.deepEqual(tasks.tasks, [], 'a refused task leaves no task row');
    expectError(
      xet(sb, r.dir, ['fork', snap, path.join(sb.root, 'g'), '--mode', 'copy', '--json']),
      'ALLOWANCE_EXCEEDED',
    );
    assert.equal(fs.existsSync(path.join(sb.root, 'g')), false, 'a refused fork leaves no directory');

    const d = xet(sb, r.dir, ['discard', f, '--json']);
    expectExit(d, 0);
    const kept = parseJson(d);
    assert.ok(kept.snapshot && kept.dirty, 'discard kept the fork work in a snapshot, inside the headroom');
    const after = await repositoryUsed(r.dir);
    assert.ok(after.bytes > used.bytes + 100_000, 'the kept work was stored');
    assert.ok(after.bytes <= used.bytes + 600_000, 'and stayed within the limit');
  });
});
