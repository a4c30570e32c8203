// MCP tools annotated read-only change nothing a policy would: the task reads (show, list, events,
// result) run task retention on the command line, never through MCP (review finding R7).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initRepo } from './support/git';
import { withSandbox } from './support/sandbox';
import { expectError, parseJson, xet } from './support/xet';
import { callOk, withMcp } from './support/mcp';

test('a task past xet.task.retention survives every read-only task tool, in-process and child; the CLI read collects it', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'a.txt': 'a\n' });
    const run: { task: string; status: string } = parseJson(
      xet(sb, r.dir, ['task', 'run', '--json', '--no-capture', '--', 'sh', '-c', 'echo done']),
    );
    assert.equal(run.status, 'succeeded');
    r.git('config', 'xet.task.retention', '1s');
    await new Promise((res) => setTimeout(res, 2100));
    await withMcp(sb, ['--repo', r.dir, '--read-only'], async (s) => {
      const list = await callOk(s, 'task_list', {});
      assert.ok(
        list.tasks.some((t: { id: string }) => t.id === run.task),
        'task_list still lists the expired task',
      );
      await callOk(s, 'task_show', { task: run.task });
      await callOk(s, 'task_events', { task: run.task });
      // task_result is a long tool: it runs as a child CLI, which must not collect either.
      await callOk(s, 'task_result', { task: run.task });
      await callOk(s, 'task_show', { task: run.task });
    });
    // The command line's read applies the policy, as it always did.
    xet(sb, r.dir, ['task', 'list', '--json']);
    expectError(xet(sb, r.dir, ['task', 'show', run.task, '--json']), 'TASK_NOT_FOUND', 3);
  });
});
