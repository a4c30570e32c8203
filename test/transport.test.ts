// Snapshots travel as ordinary refs: push refs/xet/* to any Git remote, restore elsewhere with --from.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { git, initRepo } from './support/git';
import { createSandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, verify, xet } from './support/xet';

test('restore --from a bare remote (path or remote name) outside any repository', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('one', { 'a.txt': 'a\n' });
    r.git('tag', '-a', 'v1', '-m', 'annotated');
    r.git('checkout', '-qb', 'topic');
    r.commit('two', { 'b.txt': 'b\n' });
    r.write('a.txt', 'edited\n');
    r.write('new/untracked.txt', 'u\n');
    r.git('add', 'new');
    const snap = capture(sb, r.dir);
    const bare = sb.path('remote.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    r.git('remote', 'add', 'hub', bare);
    r.git('push', '-q', 'hub', 'refs/xet/*:refs/xet/*');

    // From a directory that is not a repository: objects, tags and history come from the remote.
    const outside = sb.path('elsewhere');
    fs.mkdirSync(outside);
    const copy = sb.path('copy');
    const out = parseJson(xet(sb, outside, ['restore', snap.slice(0, 12), copy, '--from', bare, '--json']));
    assert.equal(out.snapshot, snap);
    expectExit(verify(sb, r.dir, snap, copy), 0);
    expectExit(verify(sb, outside, snap, copy), 0); // the copy holds the snapshot itself
    assert.equal(git(sb, copy, ['cat-file', '-t', 'v1']).trim(), 'tag');
    assert.equal(git(sb, copy, ['status', '--porcelain']), r.git('status', '--porcelain'));
    git(sb, copy, ['fsck', '--no-progress', '--strict']);

    // By remote name, from inside the source repository.
    const copy2 = sb.path('copy2');
    expectExit(xet(sb, r.dir, ['restore', snap, copy2, '--from', 'hub']), 0);
    expectExit(verify(sb, r.dir, snap, copy2), 0);

    expectError(
      xet(sb, outside, ['restore', 'deadbeef', sb.path('c3'), '--from', bare, '--json']),
      'SNAPSHOT_NOT_FOUND',
    );
    expectError(xet(sb, outside, ['restore', snap, sb.path('c4'), '--json']), 'NOT_A_REPOSITORY');
    assert.ok(!fs.existsSync(sb.path('c3')) && !fs.existsSync(sb.path('c4')));
  } finally {
    sb.cleanup();
  }
});

test('a sha256 repository round-trips: its own pack and index formats, restore and fsck', () => {
  const sb = createSandbox();
  try {
    const dir = sb.path('s256');
    git(sb, sb.root, ['init', '-q', '--object-format=sha256', dir]);
    fs.writeFileSync(`${dir}/a.txt`, 'a\n');
    git(sb, dir, ['add', 'a.txt']);
    git(sb, dir, ['commit', '-qm', 'one']);
    git(sb, dir, ['tag', '-a', 'v1', '-m', 'annotated']);
    fs.mkdirSync(`${dir}/deps`);
    for (let i = 0; i < 40; i++) fs.writeFileSync(`${dir}/deps/f${i}.bin`, Buffer.alloc(30000 + i, i));
    fs.writeFileSync(`${dir}/.gitignore`, 'deps/\n');
    fs.appendFileSync(`${dir}/a.txt`, 'edit\n');
    const out = parseJson(xet(sb, dir, ['capture', '--json']));
    assert.match(out.snapshot, /^[0-9a-f]{64}$/);
    git(sb, dir, ['fsck', '--no-progress', '--strict']);
    const copy = sb.path('copy');
    expectExit(xet(sb, dir, ['restore', out.snapshot, copy]), 0);
    expectExit(verify(sb, dir, out.snapshot, copy), 0);
    assert.equal(git(sb, copy, ['rev-parse', '--show-object-format']).trim(), 'sha256');
    assert.equal(git(sb, copy, ['status', '--porcelain']), git(sb, dir, ['status', '--porcelain']));
    git(sb, copy, ['fsck', '--no-progress', '--strict']);
  } finally {
    sb.cleanup();
  }
});
