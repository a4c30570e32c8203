// task run where the guard hooks cannot be installed: the task runs, and says so.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openSidecar } from '../src/sidecar/db';
import { listEvents } from '../src/tasks/store';
import { initRepo } from './support/git';
import { withSandbox } from './support/sandbox';
import { expectExit, parseJson, xet } from './support/xet';

test('task run with core.hooksPath=/dev/null: the task runs, its JSON warns, task.hooks_missing is recorded; with hooks in place no warning', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    const ok = xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', 'true']);
    expectExit(ok, 0);
    assert.equal(parseJson(ok).hooksWarning, null, 'hooks installed: no warning');
    r.git('config', 'core.hooksPath', '/dev/null');
    const res = xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', 'true']);
    expectExit(res, 0);
    const v = parseJson(res) as { task: string; status: string; hooksWarning: string | null };
    assert.equal(v.status, 'succeeded');
    assert.match(v.hooksWarning ?? '', /guard hooks are disabled/);
    const db = openSidecar(r.commonDir());
    try {
      const events = listEvents(db, v.task);
      const missing = events.filter((e) => e.eventType === 'task.hooks_missing');
      assert.equal(missing.length, 1);
      assert.deepEqual(missing[0].payload, { state: 'disabled' });
    } finally {
      db.close();
    }
    const human = xet(sb, r.dir, ['task', 'run', '--no-capture', '--', 'true']);
    expectExit(human, 0);
    assert.match(human.stderr, /warning: the guard hooks are disabled/);
  }));
