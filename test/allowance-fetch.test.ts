// The repository allowance of `git xet fetch` from a xet store (issue 11): the packs a fetch would
// import and their sizes are known from the store's state, so a fetch that does not fit is refused
// before any effect, as ALLOWANCE_EXCEEDED with its figures, and leaves .git byte for byte as it was
// (no FETCH_HEAD, no refspec); a refusal by the helper itself (what it imports again after a local
// loss) comes back typed with the same details.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { assertUnchanged, gitDirListing, repositoryUsed } from './support/allowance-repo';
import { initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, parseJson, xet } from './support/xet';

/** A store holding a snapshot of 150 KB of incompressible data, and a repository `dst` with remote
 * `s` naming it, captured once (its sidecar exists). */
function storeAndFetcher(sb: Sandbox): { dst: Repo; store: string } {
  const src = initRepo(sb, 'src', ['-b', 'main']);
  src.commit('one', { 'README.md': '# one\n' });
  src.write('big.bin', pseudoRandomBytes(150_000, 5));
  capture(sb, src.dir);
  const store = sb.path('store');
  src.git('remote', 'add', 's', `xet::${store}`);
  const p = xet(sb, src.dir, ['push', 's', '--json']);
  assert.equal(p.status, 0, p.stdout);
  const dst = initRepo(sb, 'dst', ['-b', 'main']);
  dst.commit('local', { 'local.txt': 'local\n' });
  capture(sb, dst.dir);
  dst.git('remote', 'add', 's', `xet::${store}`);
  return { dst, store };
}

test('a fetch from a xet store that does not fit is ALLOWANCE_EXCEEDED with its figures, before any effect: no FETCH_HEAD, no refspec', async () => {
  await withSandbox(async (sb) => {
    const { dst } = storeAndFetcher(sb);
    const used = await repositoryUsed(dst.dir);
    dst.git('config', 'xet.allowance.bytes', String(used.bytes + 50_000));
    dst.git('config', 'xet.allowance.headroom', '0%');
    const gitDir = path.join(dst.dir, '.git');
    const before = gitDirListing(gitDir);
    const err = expectError(xet(sb, dst.dir, ['fetch', 's', '--json']), 'ALLOWANCE_EXCEEDED');
    assert.equal(err.details.root, 'repository');
    assert.equal(err.details.dimension, 'bytes');
    assert.equal(err.details.limit, used.bytes + 50_000);
    assert.equal(err.details.used, used.bytes);
    assert.ok(err.details.adding > 150_000, `adding ${err.details.adding}: the store's 150 KB pack`);
    assert.match(err.message, /fetch from .* would add \d+ bytes to repository/);
    assertUnchanged(gitDir, before, 'a refused git xet fetch');
    assert.equal(fs.existsSync(path.join(gitDir, 'FETCH_HEAD')), false);
    assert.equal(dst.gitTry('config', '--get-all', 'remote.s.fetch').stdout.toString().includes('refs/xet/'), false);

    dst.git('config', 'xet.allowance.bytes', '10M');
    const ok = parseJson(xet(sb, dst.dir, ['fetch', 's', '--json']));
    assert.equal(ok.refspecAdded, true);
    assert.ok(ok.fetched.some((f: { ref: string }) => f.ref.startsWith('refs/xet/snapshots/')));
    assert.match(dst.git('config', '--get-all', 'remote.s.fetch'), /\+refs\/xet\/\*:refs\/remotes\/s\/xet\/\*/);
  });
});

test("a refusal by the helper's own admission (a re-import after the objects were lost here) comes back typed with its details", async () => {
  await withSandbox(async (sb) => {
    const { dst } = storeAndFetcher(sb);
    const ok = parseJson(xet(sb, dst.dir, ['fetch', 's', '--json']));
    assert.ok(ok.fetched.length > 0);
    // Lose what the fetch brought (its pack and refs) while the imported-packs list still names the
    // pack: git xet fetch plans nothing, the helper finds the objects missing and imports again.
    const gitDir = path.join(dst.dir, '.git');
    const packDir = path.join(gitDir, 'objects', 'pack');
    const listDir = path.join(gitDir, 'xet', 'imported-packs');
    const imported = fs
      .readdirSync(listDir)
      .flatMap((f) => fs.readFileSync(path.join(listDir, f), 'utf8').split('\n'))
      .filter(Boolean);
    assert.ok(imported.length > 0, 'the fetch imported a pack');
    for (const n of fs.readdirSync(packDir)) {
      if (imported.some((p) => n.startsWith(`${p}.`))) fs.rmSync(path.join(packDir, n));
    }
    const refs = dst
      .git('for-each-ref', '--format=%(refname)', 'refs/xet/', 'refs/remotes/s/xet/')
      .split('\n')
      .filter(Boolean);
    const own = new Set(ok.fetched.map((f: { ref: string }) => f.ref));
    for (const ref of refs) if (own.has(ref) || ref.startsWith('refs/remotes/')) dst.git('update-ref', '-d', ref);
    const used = await repositoryUsed(dst.dir);
    dst.git('config', 'xet.allowance.bytes', String(used.bytes + 50_000));
    dst.git('config', 'xet.allowance.headroom', '0%');
    const err = expectError(xet(sb, dst.dir, ['fetch', 's', '--json']), 'ALLOWANCE_EXCEEDED');
    assert.equal(err.details.root, 'repository');
    assert.equal(err.details.dimension, 'bytes');
    assert.equal(err.details.limit, used.bytes + 50_000);
    assert.equal(typeof err.details.used, 'number');
    assert.ok(err.details.adding > 150_000, JSON.stringify(err.details));
    assert.equal(err.details.remote, 's');
    assert.equal(fs.existsSync(path.join(gitDir, 'FETCH_HEAD')), false);
  });
});
