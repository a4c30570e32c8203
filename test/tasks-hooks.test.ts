// task run where the guard hooks cannot be installed: the task runs, and says so.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
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

test("task run --fork of a husky project (core.hooksPath=.husky/_): the guard hooks go into the fork's own hooks dir (they are what refuses a commit there after its runner dies)", () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n', '.husky/pre-commit': 'exit 0\n' });
    // husky 9's layout, made before git xet ever ran here: the snapshot's .husky/_ has no guard.
    r.write('.husky/_/.gitignore', '*\n');
    r.write('.husky/_/h', '#!/usr/bin/env sh\nexit 0\n', 0o755);
    r.write('.husky/_/pre-commit', '#!/usr/bin/env sh\n. "$(dirname "$0")/h"\n', 0o755);
    r.git('config', 'core.hooksPath', '.husky/_');
    const snap = parseJson(xet(sb, r.dir, ['capture', '--json'])).snapshot as string;
    const dir = sb.path('fork');
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--json',
      '--no-capture',
      '--fork',
      snap,
      '--mode',
      'copy',
      '--dir',
      dir,
      '--',
      'sh',
      '-c',
      'cat .husky/_/pre-commit .husky/_/reference-transaction',
    ]);
    expectExit(res, 0);
    const v = parseJson(res) as { task: string; hooksWarning: string | null };
    assert.equal(v.hooksWarning, null);
    assert.match(fs.readFileSync(`${dir}/.husky/_/pre-commit`, 'utf8'), /git xet guard v1/, "the fork's pre-commit");
    assert.match(fs.readFileSync(`${dir}/.husky/_/reference-transaction`, 'utf8'), /git xet guard v1/);
  }));

test("a task whose command removes the guard hooks (a project's install step) gets them back while it runs: task.hooks_restored", () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    const seen = sb.path('seen');
    const res = xet(sb, r.dir, [
      'task',
      'run',
      '--json',
      '--no-capture',
      '--',
      'sh',
      '-c',
      `rm -f .git/hooks/pre-commit .git/hooks/reference-transaction; sleep 3; ls .git/hooks > '${seen}'`,
    ]);
    expectExit(res, 0);
    const v = parseJson(res) as { task: string };
    const hooks = fs.readFileSync(seen, 'utf8').split('\n');
    assert.ok(
      hooks.includes('pre-commit') && hooks.includes('reference-transaction'),
      `hooks back: ${hooks.join(' ')}`,
    );
    const db = openSidecar(r.commonDir());
    try {
      assert.ok(listEvents(db, v.task).some((e) => e.eventType === 'task.hooks_restored'));
    } finally {
      db.close();
    }
  }));
