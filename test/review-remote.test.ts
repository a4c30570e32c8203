// Regressions from the independent review of git xet push/fetch/restore --from: push never
// publishes a refs/xet/* ref that does not name its own content (the remote would keep it for good),
// and no error puts a URL's password on stdout or stderr.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { git, gitTry, initRepo, type Repo } from './support/git';
import { type Sandbox, withSandbox } from './support/sandbox';
import { capture, describeRun, expectError, expectExit, parseJson, xet } from './support/xet';

function twoSnapshots(sb: Sandbox): { r: Repo; a: string; b: string } {
  const r = initRepo(sb, 'src');
  r.commit('init', { 'a.txt': 'one\n' });
  r.write('a.txt', 'state A\n');
  const a = capture(sb, r.dir);
  r.write('a.txt', 'state B\n');
  const b = capture(sb, r.dir);
  return { r, a, b };
}

/** refs/xet/* of a bare repository or xet store URL, as `git ls-remote` sees them. */
function remoteXetRefs(sb: Sandbox, cwd: string, url: string): string {
  const r = gitTry(sb, cwd, ['ls-remote', '--', url, 'refs/xet/*']);
  return r.status === 0 ? r.stdout.toString('utf8') : '';
}

test('push refuses a snapshot ref that names another commit, named or all, to a Git server and a xet store', async () => {
  await withSandbox((sb) => {
    const { r, a, b } = twoSnapshots(sb);
    // What a plain fetch of refs/xet/* from a hostile remote can leave behind.
    r.git('update-ref', `refs/xet/snapshots/${a}`, b);
    const bare = sb.path('b.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    const store = `xet::${sb.path('store')}`;
    for (const [url, ids] of [
      [bare, [a]],
      [bare, [a.slice(0, 8)]],
      [bare, []],
      [store, [a]],
      [store, []],
    ] as [string, string[]][]) {
      const e = expectError(xet(sb, r.dir, ['push', url, ...ids, '--json']), 'INTEGRITY_MISMATCH');
      assert.equal(e.details.ref, `refs/xet/snapshots/${a}`, JSON.stringify(e));
      assert.match(e.message, new RegExp(`refs/xet/snapshots/${a}`));
      assert.equal(remoteXetRefs(sb, r.dir, url), '', `push ${url} ${ids.join(' ')} sent something`);
    }
    // The honest snapshot alone still goes.
    expectExit(xet(sb, r.dir, ['push', bare, b, '--json']), 0);
    assert.equal(git(sb, bare, ['rev-parse', `refs/xet/snapshots/${b}`]).trim(), b);
    assert.equal(gitTry(sb, bare, ['rev-parse', '--verify', '-q', `refs/xet/snapshots/${a}`]).status, 1);
  });
});

test('push refuses a handoff ref whose descriptor does not hash to its name', async () => {
  await withSandbox((sb) => {
    const { r, a } = twoSnapshots(sb);
    const h = xet(sb, r.dir, ['handoff', 'create', a, '--to', 'bob', '--from', 'alice', '--title', 'A', '--json']);
    expectExit(h, 0);
    const { id, commit } = parseJson(h) as { id: string; commit: string };
    const forged = 'e'.repeat(64);
    r.git('update-ref', `refs/xet/handoffs/${forged}`, commit);
    const bare = sb.path('b.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    for (const ids of [[forged], []]) {
      const e = expectError(xet(sb, r.dir, ['push', bare, ...ids, '--json']), 'INTEGRITY_MISMATCH');
      assert.equal(e.details.ref, `refs/xet/handoffs/${forged}`, JSON.stringify(e));
      assert.equal(remoteXetRefs(sb, r.dir, bare), '', `push ${ids.join(' ')} sent something`);
    }
    // The genuine handoff (and its snapshot) still go.
    const ok = xet(sb, r.dir, ['push', bare, id, '--json']);
    expectExit(ok, 0);
    const sent = remoteXetRefs(sb, r.dir, bare);
    assert.match(sent, new RegExp(`refs/xet/handoffs/${id}`));
    assert.match(sent, new RegExp(`refs/xet/snapshots/${a}`));
  });
});

test('a URL password appears nowhere in the output of restore --from, fetch and push that cannot reach it', async () => {
  await withSandbox((sb) => {
    const { r, a } = twoSnapshots(sb);
    const url = 'http://user:s3cretPW@127.0.0.1:9/x.git';
    const runs = [
      xet(sb, r.dir, ['restore', a, sb.path('copy'), '--from', url, '--json']),
      xet(sb, r.dir, ['restore', a, sb.path('copy2'), '--from', url]),
      xet(sb, sb.root, ['restore', a, sb.path('copy3'), '--from', url, '--json']),
      xet(sb, r.dir, ['fetch', url, '--json']),
      xet(sb, r.dir, ['fetch', url]),
      xet(sb, r.dir, ['push', url, '--json']),
      xet(sb, r.dir, ['push', url]),
      xet(sb, r.dir, ['push', url, a, '--json']),
    ];
    for (const run of runs) {
      assert.notEqual(run.status, 0, describeRun(run));
      assert.ok(!`${run.stdout}${run.stderr}`.includes('s3cretPW'), `password leaked:\n${describeRun(run)}`);
      if (run.args.includes('--json')) {
        const e = expectError(run, 'REMOTE_UNAVAILABLE');
        // The user part stays, so the message still says which remote it is.
        assert.match(e.message, /user@127\.0\.0\.1:9/, describeRun(run));
      }
    }
  });
});
