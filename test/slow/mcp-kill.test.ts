// git xet mcp when a call is stopped: a cancelled capture, a client that closes stdin mid-capture and
// a server SIGKILLed mid-capture. The capture runs as a child CLI held at a fault point (so "mid
// capture" is exact: its objects written, no ref yet); each way, the child is gone afterwards,
// nothing is half written (git xet fsck and git fsck are clean, no snapshot ref appeared) and the
// next capture works.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { PAUSE_AT_ENV, PAUSE_DIR_ENV } from '../../src/testing/fault-points';
import { initRepo, type Repo } from '../support/git';
import { alive, callOk, startMcp, waitGone, type McpSession } from '../support/mcp';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { expectExit, parseJson, xet } from '../support/xet';

const POINT = 'capture:before-ref';

function repo(sb: Sandbox): Repo {
  const r = initRepo(sb, 'repo');
  r.commit('c1', { 'a.txt': 'a\n' });
  for (let i = 0; i < 50; i++) r.write(`u/${i}.txt`, `file ${i}\n`);
  return r;
}

/** A server whose child captures stop at POINT; `reached()` waits for one and returns its pid,
 * `release()` lets every later one through. */
async function pausedServer(
  sb: Sandbox,
  r: Repo,
): Promise<{ s: McpSession; reached: () => Promise<number>; release: () => void }> {
  const dir = sb.path('pause');
  fs.mkdirSync(dir);
  const s = await startMcp(sb, ['--repo', r.dir], { [PAUSE_AT_ENV]: POINT, [PAUSE_DIR_ENV]: dir });
  const file = path.join(dir, `${POINT}.reached`);
  return {
    s,
    reached: async () => {
      const deadline = Date.now() + 60_000;
      while (!fs.existsSync(file) || !fs.readFileSync(file, 'utf8').trim()) {
        assert.ok(Date.now() < deadline, `no capture reached ${POINT}; server stderr: ${s.stderr()}`);
        await new Promise((res) => setTimeout(res, 20));
      }
      return Number(fs.readFileSync(file, 'utf8').trim());
    },
    release: () => fs.writeFileSync(path.join(dir, `${POINT}.go`), ''),
  };
}

/** Nothing half written: the sidecar and objects check out, no snapshot was recorded. */
function assertClean(sb: Sandbox, r: Repo, snapshotsBefore: string): void {
  const fsck = xet(sb, r.dir, ['fsck', '--json']);
  expectExit(fsck, 0);
  assert.equal(parseJson(fsck).ok, true, fsck.stdout);
  assert.equal(r.gitTry('fsck', '--connectivity-only', '--no-progress').status, 0);
  assert.equal(r.git('for-each-ref', 'refs/xet/snapshots'), snapshotsBefore, 'no snapshot recorded');
}

/** The next capture (the CLI's) works and its snapshot verifies. */
function assertCaptureWorks(sb: Sandbox, r: Repo): void {
  const c = xet(sb, r.dir, ['capture', '--json']);
  expectExit(c, 0);
  const snap = parseJson(c).snapshot as string;
  const v = xet(sb, r.dir, ['verify', snap, '.', '--json']);
  expectExit(v, 0);
}

test('a cancelled capture answers CANCELLED once its child is gone, with nothing half written', async () => {
  await withSandbox(async (sb) => {
    const r = repo(sb);
    const before = r.git('for-each-ref', 'refs/xet/snapshots');
    const { s, reached, release } = await pausedServer(sb, r);
    try {
      // The SDK client forgets a request it cancelled; the server's late answer is seen here.
      const seen: JSONRPCMessage[] = [];
      const onmessage = s.transport.onmessage;
      s.transport.onmessage = (m: JSONRPCMessage) => {
        seen.push(m);
        onmessage?.(m);
      };
      const ac = new AbortController();
      const call = s.client.callTool({ name: 'capture', arguments: { always: true } }, undefined, {
        signal: ac.signal,
        timeout: 120_000,
      });
      const pid = await reached();
      assert.ok(alive(pid), 'the child capture runs');
      ac.abort('the agent changed its mind');
      await assert.rejects(call);
      await waitGone(pid, 15_000, 'the cancelled child capture');
      const deadline = Date.now() + 15_000;
      let answer: { result?: { isError?: boolean; structuredContent?: { error?: { code?: string } } } } | undefined;
      while (!answer) {
        answer = seen.find((m) => 'result' in m && (m.result as { isError?: boolean }).isError) as typeof answer;
        assert.ok(answer || Date.now() < deadline, `no CANCELLED answer: ${JSON.stringify(seen)}`);
        await new Promise((res) => setTimeout(res, 20));
      }
      assert.equal(answer.result?.structuredContent?.error?.code, 'CANCELLED');
      assertClean(sb, r, before);
      // The server goes on: the next capture through it works.
      release();
      const cap = await callOk(s, 'capture', {});
      assert.match(cap.snapshot, /^[0-9a-f]{40}$/);
    } finally {
      release();
      await s.close();
    }
    assertCaptureWorks(sb, r);
  });
});

/** A capture held at POINT, then `stop` (which returns when the child `pid` should be gone); the
 * child must go, nothing be half written and the next capture work. */
async function stoppedMidCapture(what: string, stop: (s: McpSession, pid: number) => Promise<void>): Promise<void> {
  await withSandbox(async (sb) => {
    const r = repo(sb);
    const before = r.git('for-each-ref', 'refs/xet/snapshots');
    const { s, reached, release } = await pausedServer(sb, r);
    try {
      const call = s.client.callTool({ name: 'capture', arguments: {} }, undefined, { timeout: 120_000 });
      call.catch(() => undefined);
      const pid = await reached();
      await stop(s, pid);
      await waitGone(pid, 15_000, what);
      assertClean(sb, r, before);
    } finally {
      release();
      await s.close().catch(() => undefined);
    }
    assertCaptureWorks(sb, r);
  });
}

test('a client that closes stdin mid-capture: the server stops its child and exits 0', async () => {
  await stoppedMidCapture('the child capture after stdin closed', async (s, pid) => {
    const exit = new Promise<{ code: number | null; signal: string | null }>((res) =>
      s.process.once('exit', (code, signal) => res({ code, signal })),
    );
    s.process.stdin?.end();
    await waitGone(pid, 15_000, 'the child capture after stdin closed');
    assert.deepEqual(await exit, { code: 0, signal: null });
  });
});

test('a SIGKILLed server mid-capture: its child goes too, nothing half written, the next capture works', async () => {
  // No signal reaches the child; its stdin's end does (src/mcp/orphan-guard.ts).
  await stoppedMidCapture('the child capture of a SIGKILLed server', (s) => {
    s.process.kill('SIGKILL');
    return Promise.resolve();
  });
});
