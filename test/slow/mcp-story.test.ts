// The two-agent story of issue 12, end to end and only through MCP: each agent is a real SDK Client
// (StdioClientTransport) spawning its own `git xet mcp --repo <repo>` process. Agent A captures,
// forks, runs a task in the fork (task_run detaches; task_show is polled until it ends), hands the
// task's result snapshot to agent B signed with an ssh key, and pushes to a directory xet store.
// Agent B, on a clone with A's key in its allowed signers, fetches, lists what is addressed to it,
// verifies the signature, accepts with requireSigned into a directory under its --root, reads A's
// task result in chunks, works on it in a task of its own and hands it back; A fetches, lists it,
// is refused accepting it unsigned with requireSigned, and accepts it plainly. The end state is
// checked on disk: both accepted directories verify against their snapshots.
//
// A's task result travels with the handoff (its task record, refs/xet/tasks/<id>), so B reads it
// through its own server. A third server, --read-only on A's repository, checks what read-only offers.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git, initRepo } from '../support/git';
import { callError, callOk, startMcp, waitGone, type McpSession } from '../support/mcp';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { describeRun, xet } from '../support/xet';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'interrupted']);

/** Polls task_show until the task has ended (a detached task outlives the task_run call). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function waitForTask(agent: McpSession, task: string, timeoutMs = 120_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const shown = await callOk(agent, 'task_show', { task });
    assert.equal(shown.task.id, task);
    if (TERMINAL.has(shown.task.status)) return shown;
    assert.ok(Date.now() < deadline, `task ${task} still ${shown.task.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** An ed25519 key pair without a passphrase; returns the private key's path and the public key line. */
function sshKey(sb: Sandbox, name: string): { key: string; pub: string } {
  fs.mkdirSync(sb.path('keys'), { recursive: true, mode: 0o700 });
  const key = sb.path('keys', name);
  const r = spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', name, '-f', key], { env: sb.env });
  assert.equal(r.status, 0, `ssh-keygen: ${r.stderr}`);
  return { key, pub: fs.readFileSync(`${key}.pub`, 'utf8').trim() };
}

const sha256 = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest('hex');

// A's task prints 30,000 lines (168,894 bytes): more than two chunks of 65,536, kept inline.
const RESULT = Array.from({ length: 30_000 }, (_, i) => `${i + 1}`).join('\n') + '\n';
const CHUNK = 65_536;

test(
  'MCP story: A captures, forks, runs a task, hands its result to B signed, through a xet store; ' +
    'B fetches, verifies, accepts requiring a signature, reads the result in chunks, hands back',
  { timeout: 900_000 },
  async () => {
    await withSandbox(async (sb) => {
      // ---- the sandbox: A's repository and key, B's clone trusting A's key, an empty store ----
      const a = initRepo(sb, 'repo-a');
      a.write('.gitignore', 'build/\n');
      a.commit('app', { 'README.md': '# app\n', 'src/app.js': 'module.exports = 1;\n' });
      a.write('notes.txt', 'untracked notes\n');
      a.write('build/out.bin', Buffer.alloc(4096, 7));
      a.write('src/app.js', 'module.exports = 2; // edited, not staged\n');
      const keyA = sshKey(sb, 'agent-a');
      a.git('config', 'xet.agent', 'agent-a');
      a.git('config', 'gpg.format', 'ssh');
      a.git('config', 'user.signingKey', keyA.key);

      git(sb, sb.root, ['clone', '-q', a.dir, sb.path('repo-b')]);
      const repoB = sb.path('repo-b');
      git(sb, repoB, ['config', 'xet.agent', 'agent-b']);
      const allowed = sb.path('keys', 'allowed_signers');
      fs.writeFileSync(allowed, `agent-a ${keyA.pub}\n`);
      git(sb, repoB, ['config', 'gpg.ssh.allowedSignersFile', allowed]);

      const store = sb.path('store');
      const storeUrl = `xet::${store}`;
      for (const d of ['store', 'a-work', 'b-work']) fs.mkdirSync(sb.path(d));

      const agentA = await startMcp(sb, ['--repo', a.dir, '--root', sb.path('a-work'), '--root', store]);
      const agentB = await startMcp(sb, ['--repo', repoB, '--root', sb.path('b-work'), '--root', store]);
      const readerB = await startMcp(sb, ['--repo', a.dir, '--read-only']);
      try {
        const toolsA = (await agentA.client.listTools()).tools.map((t) => t.name);
        for (const t of ['capture', 'fork', 'task_run', 'task_show', 'handoff_create', 'push', 'fetch']) {
          assert.ok(toolsA.includes(t), `A's server offers ${t}: ${toolsA.join(', ')}`);
        }
        const readOnly = (await readerB.client.listTools()).tools;
        const readOnlyNames = readOnly.map((t) => t.name);
        assert.ok(readOnlyNames.includes('task_result'), `--read-only offers task_result: ${readOnlyNames}`);
        for (const t of ['capture', 'task_run', 'handoff_accept', 'push']) {
          assert.ok(!readOnlyNames.includes(t), `--read-only does not offer ${t}`);
        }
        assert.ok(
          readOnly.every((t) => t.annotations?.readOnlyHint === true),
          '--read-only tools are all readOnly',
        );

        // ---- agent A: capture, fork, a task in the fork ----------------------------------------
        const captured = await callOk(agentA, 'capture', { message: 'before the fix' });
        assert.match(captured.snapshot, /^[0-9a-f]{40}$/);
        assert.equal(captured.unchanged, false);
        assert.ok(captured.files >= 5, `capture took the tracked, untracked and ignored files: ${captured.files}`);
        const listed = await callOk(agentA, 'snapshots', {});
        assert.deepEqual(
          listed.snapshots.map((s: { snapshot: string }) => s.snapshot),
          [captured.snapshot],
        );

        const forkDir = sb.path('a-work', 'fix');
        const forked = await callOk(agentA, 'fork', { snapshot: captured.snapshot, dir: forkDir, mode: 'copy' });
        assert.equal(forked.dir, forkDir);
        assert.equal(forked.mode, 'copy');
        assert.equal(forked.snapshot, captured.snapshot);
        assert.equal(fs.readFileSync(path.join(forkDir, 'notes.txt'), 'utf8'), 'untracked notes\n');
        const forksListed = await callOk(agentA, 'forks', {});
        assert.ok(
          forksListed.forks.some((f: { id: string }) => f.id === forked.id),
          `forks lists ${forked.id}: ${JSON.stringify(forksListed)}`,
        );

        const started = await callOk(agentA, 'task_run', {
          in: forkDir,
          command: ['sh', '-c', 'echo "fixed by agent a" > FIX.txt && seq 1 30000'],
        });
        assert.match(started.task, /^[0-9a-f]{16}$/);
        assert.equal(started.detached, true, 'a task started through MCP is detached');
        const taskA = started.task as string;
        const endedA = await waitForTask(agentA, taskA);
        assert.equal(endedA.task.status, 'succeeded', JSON.stringify(endedA.task));
        assert.equal(endedA.task.exitCode, 0);
        assert.match(endedA.task.resultSnapshot, /^[0-9a-f]{40}$/);
        assert.equal(endedA.result.sizeBytes, Buffer.byteLength(RESULT));
        assert.equal(endedA.result.sha256, sha256(RESULT));
        assert.equal(endedA.result.truncated, true, 'the preview is shorter than the result');
        assert.equal(endedA.result.retrievable, true);
        const resultSnapshot = endedA.task.resultSnapshot as string;

        // ---- A hands the task's result to B, signed, and pushes it to the store -----------------
        const created = await callOk(agentA, 'handoff_create', {
          task: taskA,
          to: ['agent-b'],
          title: 'the fix, with its test output',
          summary: 'FIX.txt added in a fork; the task printed the numbers',
          finding: ['seq prints one number a line'],
          artifact: ['FIX.txt'],
          sign: true,
        });
        assert.match(created.id, /^[0-9a-f]{64}$/);
        assert.equal(created.created, true);
        assert.equal(created.snapshot, resultSnapshot, 'the handoff defaults to the task result snapshot');
        const handoffA = created.id as string;
        const signatureRefs = a
          .git('for-each-ref', '--format=%(refname)', `refs/xet/signatures/${handoffA}/`)
          .split('\n')
          .filter(Boolean);
        assert.equal(signatureRefs.length, 1, `one signature ref for ${handoffA}`);
        assert.equal(created.signature.ref, signatureRefs[0]);
        assert.equal(created.signature.format, 'ssh');

        const pushedA = await callOk(agentA, 'push', { remote: storeUrl });
        assert.equal(pushedA.kind, 'xet');
        const pushedRefs = new Map(pushedA.refs.map((r: { ref: string; status: string }) => [r.ref, r.status]));
        assert.equal(pushedRefs.get(`refs/xet/handoffs/${handoffA}`), 'new', JSON.stringify(pushedA.refs));
        assert.equal(pushedRefs.get(`refs/xet/snapshots/${resultSnapshot}`), 'new');
        assert.equal(pushedRefs.get(signatureRefs[0]), 'new', 'the signature travels with its handoff');

        // ---- agent B: fetch, list what is addressed to it, verify, accept requiring a signature --
        const fetchedB = await callOk(agentB, 'fetch', { remote: storeUrl });
        const fetchedRefs = fetchedB.fetched.map((f: { ref: string }) => f.ref);
        for (const ref of [`refs/xet/handoffs/${handoffA}`, signatureRefs[0], `refs/xet/snapshots/${resultSnapshot}`]) {
          assert.ok(
            fetchedRefs.some((r: string) => r.endsWith(ref.slice('refs/'.length))),
            `B fetched ${ref}: ${fetchedRefs}`,
          );
        }
        const forB = await callOk(agentB, 'handoff_list', { to: 'agent-b' });
        assert.equal(forB.handoffs.length, 1, JSON.stringify(forB));
        const entry = forB.handoffs[0];
        assert.equal(entry.id, handoffA);
        assert.equal(entry.valid, true);
        assert.equal(entry.from, 'agent-a');
        assert.deepEqual(entry.to, ['agent-b']);
        assert.equal(entry.task, taskA);
        assert.equal(entry.snapshot, resultSnapshot);
        assert.equal(entry.signed, 1);
        assert.deepEqual((await callOk(agentB, 'handoff_list', { to: 'agent-a' })).handoffs, []);

        const verified = await callOk(agentB, 'handoff_verify', { id: handoffA });
        assert.equal(verified.ok, true);
        assert.equal(verified.descriptor.task, taskA);
        assert.equal(verified.signatures.length, 1, JSON.stringify(verified.signatures));
        const sig = verified.signatures[0];
        assert.equal(sig.valid, true, JSON.stringify(sig));
        assert.equal(sig.format, 'ssh');
        assert.match(sig.fingerprint, /^SHA256:/);
        assert.deepEqual(sig.principals, ['agent-a'], JSON.stringify(sig));

        // Confinement: a directory outside B's repository and roots is refused before anything.
        const outside = sb.path('outside');
        await callError(
          agentB,
          'handoff_accept',
          { id: handoffA, dir: outside, requireSigned: true },
          'ARGUMENT_NOT_ALLOWED',
        );
        assert.equal(fs.existsSync(outside), false);

        const acceptedDir = sb.path('b-work', 'review');
        const accepted = await callOk(agentB, 'handoff_accept', {
          id: handoffA,
          dir: acceptedDir,
          requireSigned: true,
          signer: 'agent-a',
          fork: true,
          mode: 'copy',
        });
        assert.equal(accepted.handoff, handoffA);
        assert.equal(accepted.from, 'agent-a');
        assert.equal(accepted.snapshot, resultSnapshot);
        assert.equal(accepted.action, 'fork');
        assert.equal(accepted.mode, 'copy');
        assert.equal(accepted.dir, acceptedDir);
        assert.deepEqual(accepted.signedBy, ['agent-a']);
        assert.equal(fs.readFileSync(path.join(acceptedDir, 'FIX.txt'), 'utf8'), 'fixed by agent a\n');
        const acceptedOk = await callOk(agentB, 'verify', { snapshot: resultSnapshot, dir: acceptedDir });
        assert.equal(acceptedOk.ok, true, JSON.stringify(acceptedOk.differences));
        assert.equal(acceptedOk.scope, 'fork');

        // ---- B reads A's task result in chunks, through its own server (the record came with the handoff)
        const chunks: string[] = [];
        let offset = 0;
        let last;
        do {
          last = await callOk(agentB, 'task_result', { task: entry.task, offset, maxBytes: CHUNK });
          assert.equal(last.offsetBytes, offset);
          assert.equal(last.sizeBytes, Buffer.byteLength(RESULT));
          assert.ok(Buffer.byteLength(last.text) <= CHUNK);
          chunks.push(last.text);
          offset = last.nextOffsetBytes;
          assert.ok(chunks.length <= 10, 'task_result makes progress');
        } while (!last.eof);
        assert.ok(chunks.length >= 3, `the result came in ${chunks.length} chunks`);
        assert.equal(chunks.join(''), RESULT);
        assert.equal(sha256(chunks.join('')), last.sha256);

        // ---- B works on it in a task of its own and hands it back --------------------------------
        const startedB = await callOk(agentB, 'task_run', {
          in: acceptedDir,
          command: ['sh', '-c', 'echo "reviewed by agent b" > REVIEW.txt && echo reviewed'],
        });
        const endedB = await waitForTask(agentB, startedB.task);
        assert.equal(endedB.task.status, 'succeeded', JSON.stringify(endedB.task));
        const backSnapshot = endedB.task.resultSnapshot as string;
        assert.match(backSnapshot, /^[0-9a-f]{40}$/);
        const back = await callOk(agentB, 'handoff_create', {
          task: startedB.task,
          to: ['agent-a'],
          title: 'reviewed',
          supersedes: handoffA,
        });
        assert.equal(back.snapshot, backSnapshot);
        const pushedB = await callOk(agentB, 'push', { remote: storeUrl, ids: [back.id] });
        assert.ok(
          pushedB.refs.some(
            (r: { ref: string; status: string }) => r.ref === `refs/xet/handoffs/${back.id}` && r.status === 'new',
          ),
          JSON.stringify(pushedB.refs),
        );

        // ---- A fetches and lists the hand-back; unsigned, it is refused when a signature is required
        const fetchedA = await callOk(agentA, 'fetch', { remote: storeUrl });
        assert.ok(fetchedA.fetched.some((f: { ref: string }) => f.ref.endsWith(`xet/handoffs/${back.id}`)));
        const forA = await callOk(agentA, 'handoff_list', { to: 'agent-a' });
        assert.equal(forA.handoffs.length, 1, JSON.stringify(forA));
        assert.equal(forA.handoffs[0].id, back.id);
        assert.equal(forA.handoffs[0].from, 'agent-b');
        assert.equal(forA.handoffs[0].supersedes, handoffA);
        assert.deepEqual((await callOk(agentA, 'handoff_verify', { id: back.id })).signatures, []);
        const backDir = sb.path('a-work', 'back');
        await callError(
          agentA,
          'handoff_accept',
          { id: back.id, dir: backDir, requireSigned: true },
          'HANDOFF_UNTRUSTED',
        );
        assert.equal(fs.existsSync(backDir), false, 'a refused accept writes nothing');
        const acceptedBack = await callOk(agentA, 'handoff_accept', { id: back.id, dir: backDir });
        assert.equal(acceptedBack.action, 'restore');
        assert.equal(acceptedBack.snapshot, backSnapshot);
      } finally {
        const servers = [agentA, agentB, readerB];
        await Promise.allSettled(servers.map((s) => s.close()));
        // Each server exits when its client closes stdin, and leaves no process behind.
        for (const s of servers) if (s.process.pid) await waitGone(s.process.pid, 15_000, 'an MCP server');
      }

      // ---- the end state on disk, checked by the CLI ---------------------------------------------
      const backDir = sb.path('a-work', 'back');
      assert.equal(fs.readFileSync(path.join(backDir, 'FIX.txt'), 'utf8'), 'fixed by agent a\n');
      assert.equal(fs.readFileSync(path.join(backDir, 'REVIEW.txt'), 'utf8'), 'reviewed by agent b\n');
      assert.equal(fs.readFileSync(path.join(backDir, 'notes.txt'), 'utf8'), 'untracked notes\n');
      assert.deepEqual(fs.readFileSync(path.join(backDir, 'build', 'out.bin')), Buffer.alloc(4096, 7));
      const backSnapshot = JSON.parse(xet(sb, a.dir, ['handoff', 'list', '--to', 'agent-a', '--json']).stdout)
        .handoffs[0].snapshot;
      for (const [cwd, snapshot, dir] of [
        [a.dir, backSnapshot, backDir],
        [repoB, backSnapshot, sb.path('b-work', 'review')],
      ]) {
        const r = xet(sb, cwd, ['verify', snapshot, dir, '--json']);
        assert.equal(r.status, 0, describeRun(r));
      }
    });
  },
);
