// States git xet must refuse to capture (typed errors, exit 3, nothing written), plus
// special files that are skipped, and restore/show/capture argument failures.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { test } from 'node:test';
import { treeFingerprint } from './support/fixtures';
import { git, initRepo, Repo, run } from './support/git';
import { assertVerifies, roundTrip } from './support/roundtrip';
import { withSandbox, type Sandbox } from './support/sandbox';
import { sha256 } from './support/state';
import { capture, describeRun, expectError, showManifest, xet } from './support/xet';

/** Everything capture could write: refs under refs/xet, the index, the object store. */
function writableState(r: Repo): { xetRefs: string; index: string; objects: string } {
  const indexPath = r.gitPath('index');
  const objectsDir = path.join(r.commonDir(), 'objects');
  const objects = (fs.readdirSync(objectsDir, { recursive: true }) as string[])
    .map(String)
    .filter((p) => fs.statSync(path.join(objectsDir, p)).isFile())
    .sort()
    .join('\n');
  return {
    xetRefs: r.git('for-each-ref', 'refs/xet'),
    index: fs.existsSync(indexPath) ? sha256(fs.readFileSync(indexPath)) : '(no index)',
    objects,
  };
}

/** capture --json must exit 3 with the code, and must not have written anything. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function expectRefusal(r: Repo, code: string): any {
  const before = writableState(r);
  const res = xet(r.sb, r.dir, ['capture', '--json']);
  const error = expectError(res, code, 3);
  const after = writableState(r);
  assert.equal(after.xetRefs, before.xetRefs, 'a refused capture must not create refs under refs/xet');
  assert.equal(after.index, before.index, 'a refused capture must not change .git/index');
  assert.equal(after.objects, before.objects, 'a refused capture must not write objects');
  return error;
}

function baseRepo(sb: Sandbox, name = 'src'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'f.txt': 'base\n', 'other.txt': 'other\n' });
  return r;
}

// Conflicts and operations in progress are captured (test/operations.test.ts); what is refused is
// only what a restore could not reproduce.
test('unmerged entry whose blob the repository lacks -> UNMERGED_INDEX', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    const o1 = r.gitInput('base version\n', 'hash-object', '-w', '--stdin').trim();
    const o2 = r.gitInput('our version\n', 'hash-object', '-w', '--stdin').trim();
    const absent = r.gitInput('never written\n', 'hash-object', '--stdin').trim();
    r.gitInput(
      `100644 ${o1} 1\tconflict.txt\n100644 ${o2} 2\tconflict.txt\n100644 ${absent} 3\tconflict.txt\n`,
      'update-index',
      '--index-info',
    );
    r.write('conflict.txt', '<<<<<<< ours\nour version\n=======\ntheir version\n>>>>>>> theirs\n');
    assert.equal(r.git('ls-files', '-u').trim().split('\n').length, 3, 'fixture: three stages');
    const err = expectRefusal(r, 'UNMERGED_INDEX');
    assert.deepEqual(err.details?.paths, ['conflict.txt']);
  }));

test('operation state git xet does not know (a new file in rebase-merge/) -> OPERATION_IN_PROGRESS', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    r.commit('c2', { 'f.txt': 'two\n' });
    r.commit('c3', { 'f.txt': 'three\n' });
    assert.notEqual(r.gitTry('rebase', '--exec', 'false', 'HEAD~2').status, 0, 'fixture: rebase must stop');
    fs.writeFileSync(r.gitPath('rebase-merge/from-a-newer-git'), 'x\n');
    const err = expectRefusal(r, 'OPERATION_IN_PROGRESS');
    assert.equal(err.details?.operation, 'rebase-merge', `details: ${JSON.stringify(err.details)}`);
    assert.equal(err.details?.path, 'rebase-merge/from-a-newer-git');
  }));

test('operation state that is not a regular file (MERGE_MSG a symlink) -> OPERATION_IN_PROGRESS', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    r.git('checkout', '-q', '-b', 'other');
    r.commit('theirs', { 'theirs.txt': 'theirs\n' });
    r.git('checkout', '-q', 'main');
    r.git('merge', '-q', '--no-commit', '--no-ff', 'other');
    fs.rmSync(r.gitPath('MERGE_MSG'));
    fs.symlinkSync('/etc/passwd', r.gitPath('MERGE_MSG'));
    const err = expectRefusal(r, 'OPERATION_IN_PROGRESS');
    assert.equal(err.details?.operation, 'merge');
  }));

test('sparse checkout whose patterns file is not a regular file -> SPARSE_CHECKOUT', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('c1', { 'dir/in.txt': 'in\n', 'out/out.txt': 'out\n', 'top.txt': 'top\n' });
    r.git('sparse-checkout', 'set', 'dir');
    assert.equal(fs.existsSync(r.p('out/out.txt')), false, 'fixture: out/ is not checked out');
    fs.rmSync(r.gitPath('info/sparse-checkout'));
    fs.mkdirSync(r.gitPath('info/sparse-checkout'));
    expectRefusal(r, 'SPARSE_CHECKOUT');
  }));

test('Git LFS pointer without its object -> LFS_CONTENT_MISSING', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    const pointer =
      'version https://git-lfs.github.com/spec/v1\n' +
      `oid sha256:${'4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393'}\n` +
      'size 123\n';
    r.commit('lfs', {
      '.gitattributes': '*.bin filter=lfs diff=lfs merge=lfs -text\n',
      'assets/model.bin': pointer,
      'readme.txt': 'hi\n',
    });
    assert.equal(r.git('cat-file', 'blob', 'HEAD:assets/model.bin'), pointer, 'fixture: the blob is the pointer');
    assert.equal(fs.existsSync(path.join(r.commonDir(), 'lfs')), false, 'fixture: no LFS object store');
    expectRefusal(r, 'LFS_CONTENT_MISSING');
  }));

test('a fifo and a unix socket are skipped, named in show --json skipped[], and capture succeeds', async () =>
  withSandbox(async (sb) => {
    const r = baseRepo(sb);
    r.write('run/keep.txt', 'keep\n');
    const mk = run(sb, r.dir, 'mkfifo', ['pipe.fifo']);
    assert.equal(mk.status, 0, `mkfifo failed: ${mk.stderr.toString()}`);
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(r.p('run/app.sock'), () => resolve());
    });
    try {
      assert.ok(fs.lstatSync(r.p('pipe.fifo')).isFIFO());
      assert.ok(fs.lstatSync(r.p('run/app.sock')).isSocket());
      const res = roundTrip(sb, r.dir, { expectAbsent: ['pipe.fifo', 'run/app.sock'] });
      assert.equal(fs.existsSync(path.join(res.copy, 'pipe.fifo')), false);
      assert.equal(fs.existsSync(path.join(res.copy, 'run/app.sock')), false);
      const m = showManifest(sb, r.dir, res.snapshot);
      assert.ok(Array.isArray(m.skipped), `manifest.skipped should be an array: ${JSON.stringify(m.skipped)}`);
      for (const p of ['pipe.fifo', 'run/app.sock']) {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        const entry = m.skipped.find((s: any) => s && s.path === p);
        assert.ok(entry, `skipped[] should contain {path: ${JSON.stringify(p)}}: ${JSON.stringify(m.skipped)}`);
        assert.equal(typeof entry.reason, 'string', `skipped entry for ${p} needs a reason`);
        assert.ok(entry.reason.length > 0, `skipped entry for ${p} needs a non-empty reason`);
      }
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }));

test('restore into a non-empty directory -> TARGET_NOT_EMPTY and the directory is unchanged', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    r.write('u.txt', 'u\n');
    const snap = capture(sb, r.dir);
    const target = sb.path('occupied');
    fs.mkdirSync(path.join(target, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(target, 'precious.txt'), 'do not touch\n');
    fs.writeFileSync(path.join(target, 'sub', 'nested.txt'), 'nested\n');
    const before = treeFingerprint(target);
    expectError(xet(sb, r.dir, ['restore', snap, target, '--json']), 'TARGET_NOT_EMPTY');
    assert.equal(treeFingerprint(target), before, 'the non-empty target must be left unchanged');
    assert.equal(fs.existsSync(path.join(target, '.git')), false, 'no .git may be created in the target');

    const hidden = sb.path('only-hidden');
    fs.mkdirSync(hidden);
    fs.writeFileSync(path.join(hidden, '.keep'), '');
    expectError(xet(sb, r.dir, ['restore', snap, hidden, '--json']), 'TARGET_NOT_EMPTY');
    assert.deepEqual(fs.readdirSync(hidden), ['.keep']);
  }));

test('restore into an existing empty directory succeeds', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    r.write('f.txt', 'edited\n');
    r.write('u.txt', 'u\n');
    const snap = capture(sb, r.dir);
    const target = sb.path('empty-target');
    fs.mkdirSync(target);
    const res = xet(sb, r.dir, ['restore', snap, target, '--json']);
    assert.equal(res.status, 0, describeRun(res));
    assert.equal(fs.readFileSync(path.join(target, 'u.txt'), 'utf8'), 'u\n');
    assert.equal(git(sb, target, ['status', '--porcelain']), ' M f.txt\n?? u.txt\n');
    assertVerifies(sb, r.dir, snap, target);
  }));

test('unknown snapshot -> SNAPSHOT_NOT_FOUND (show and restore)', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    capture(sb, r.dir); // the repository has snapshots, just not this one
    const bogus = 'deadbeef'.repeat(5);
    expectError(xet(sb, r.dir, ['show', bogus, '--json']), 'SNAPSHOT_NOT_FOUND');
    const target = sb.path('never');
    expectError(xet(sb, r.dir, ['restore', bogus, target, '--json']), 'SNAPSHOT_NOT_FOUND');
    assert.ok(
      !fs.existsSync(target) || fs.readdirSync(target).length === 0,
      'a failed restore must not leave a populated target behind',
    );
  }));

test('capture outside a repository -> NOT_A_REPOSITORY', () =>
  withSandbox((sb) => {
    const dir = sb.path('not-a-repo');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'file.txt'), 'x\n');
    const res = xet(sb, dir, ['capture', '--json']);
    expectError(res, 'NOT_A_REPOSITORY');
    assert.deepEqual(fs.readdirSync(dir), ['file.txt'], 'nothing may be created outside a repository');
  }));

test('restore <snapshot> <relative dir> resolves the directory against the current directory', () =>
  withSandbox((sb) => {
    const r = baseRepo(sb);
    r.write('u.txt', 'u\n');
    const snap = capture(sb, r.dir);
    const res = xet(sb, r.dir, ['restore', snap, '../relative-copy', '--json']);
    assert.equal(res.status, 0, describeRun(res));
    const copy = sb.path('relative-copy');
    assert.equal(fs.readFileSync(path.join(copy, 'u.txt'), 'utf8'), 'u\n');
    assert.equal(fs.existsSync(path.join(r.dir, 'relative-copy')), false);
    assertVerifies(sb, r.dir, snap, copy);
  }));
