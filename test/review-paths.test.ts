// Paths near and past PATH_MAX in fork, discard and restore: refused before anything is made, removed
// however deep, and measured against the directory the tree ends up in.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, run, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

const NAME = 'd'.repeat(200);

/** Make `levels` nested 200-byte directories under `dir` with a file `f` at the bottom, by relative
 * paths (the only way past PATH_MAX); returns the relative path of `f`. */
function deepTree(sb: Sandbox, dir: string, levels: number): string {
  run(sb, dir, 'bash', ['-c', `for i in $(seq ${levels}); do mkdir ${NAME} && cd ${NAME} || exit 1; done; echo x > f`]);
  return [...Array<string>(levels).fill(NAME), 'f'].join('/');
}

/** rm(1) walks relatively; the sandbox's own cleanup (node's rmSync) fails on trees past PATH_MAX. */
function rmDeep(sb: Sandbox, dir: string): void {
  if (fs.existsSync(dir)) run(sb, sb.root, 'rm', ['-rf', '--', dir]);
}

/** A repository whose snapshot holds one untracked path of 19 * 201 + 1 = 3820 bytes. */
function longSnapshot(sb: Sandbox): { r: Repo; snap: string; longest: number } {
  const r = initRepo(sb, 'src');
  r.commit('init', { 'a.txt': 'a\n' });
  const rel = deepTree(sb, r.dir, 19);
  return { r, snap: capture(sb, r.dir), longest: Buffer.byteLength(rel) };
}

/** An absolute path of exactly `bytes` bytes under the sandbox, ending in `leaf`. */
function pathOfLength(sb: Sandbox, bytes: number, leaf: string): string {
  let p = sb.path('p');
  const room = () => bytes - Buffer.byteLength(p) - 1 - leaf.length - 1;
  while (room() > 200) p = path.join(p, 'q'.repeat(200));
  assert.ok(room() >= 1, 'the sandbox path leaves room');
  return path.join(p, 'q'.repeat(room()), leaf);
}

function forkRows(sb: Sandbox, cwd: string) {
  const r = xet(sb, cwd, ['forks', '--all', '--json']);
  expectExit(r, 0);
  return parseJson(r).forks as { id: string; dir: string; state: string }[];
}

test('fork refuses PATH_TOO_LONG before creating anything when the longest snapshot path does not fit under the target', async () => {
  await withSandbox((sb) => {
    const { r, snap, longest } = longSnapshot(sb);
    try {
      const target = pathOfLength(sb, 4095 - longest, 'fork');
      for (const mode of ['copy', 'clone', 'overlay', 'auto']) {
        const e = expectError(xet(sb, r.dir, ['fork', snap, target, '--mode', mode, '--json']), 'PATH_TOO_LONG');
        assert.ok(e.details.bytes > 4095, JSON.stringify(e.details));
        assert.equal(fs.existsSync(sb.path('p')), false, `${mode}: no directory was made`);
      }
      assert.deepEqual(forkRows(sb, r.dir), [], 'no fork is registered');
      // One byte shorter, it fits.
      const fits = pathOfLength(sb, 4094 - longest, 'fork');
      const ok = xet(sb, r.dir, ['fork', snap, fits, '--mode', 'copy', '--json']);
      expectExit(ok, 0);
      expectExit(xet(sb, r.dir, ['discard', fits, '--json']), 0);
      assert.equal(fs.existsSync(fits), false);
    } finally {
      rmDeep(sb, sb.path('p'));
      rmDeep(sb, r.dir);
    }
  });
});

test('discard removes an incomplete copy fork that holds a tree deeper than PATH_MAX', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const dir = sb.path('f');
    try {
      const killed = xet(sb, r.dir, ['fork', snap, dir, '--mode', 'copy', '--json'], {
        env: { GIT_XET_TEST_DIE_AT: 'fork:before-active' },
      });
      assert.equal(killed.signal, 'SIGKILL');
      assert.equal(forkRows(sb, r.dir)[0]?.state, 'incomplete');
      deepTree(sb, dir, 25);
      expectExit(xet(sb, r.dir, ['discard', dir, '--json']), 0);
      assert.equal(fs.existsSync(dir), false, 'the fork is gone');
      assert.deepEqual(
        forkRows(sb, r.dir).filter((f) => f.state !== 'discarded'),
        [],
      );
    } finally {
      rmDeep(sb, dir);
    }
  });
});

test('discard --no-capture removes a copy fork with a path past PATH_MAX, entirely', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'b/c.txt': 'c\n' });
    const snap = capture(sb, r.dir);
    const dir = sb.path('f');
    try {
      expectExit(xet(sb, r.dir, ['fork', snap, dir, '--mode', 'copy', '--json']), 0);
      deepTree(sb, dir, 25);
      fs.writeFileSync(path.join(dir, 'z.txt'), 'z\n');
      // Capturing it would fail: the plain discard refuses and removes nothing.
      expectError(xet(sb, r.dir, ['discard', dir, '--json']), 'PATH_TOO_LONG');
      assert.ok(fs.existsSync(path.join(dir, 'a.txt')) && fs.existsSync(path.join(dir, 'z.txt')));
      const out = xet(sb, r.dir, ['discard', dir, '--no-capture', '--json']);
      expectExit(out, 0);
      assert.equal(fs.existsSync(dir), false, 'the whole fork is gone');
      assert.equal(forkRows(sb, r.dir)[0]?.state, 'discarded');
      assert.equal(r.git('worktree', 'list', '--porcelain').includes(dir), false, 'its worktree is gone');
    } finally {
      rmDeep(sb, dir);
    }
  });
});

test('restore measures PATH_MAX against the target, not its hidden sibling, and a refusal creates no parent', async () => {
  await withSandbox((sb) => {
    const { r, snap, longest } = longSnapshot(sb);
    try {
      // The tree fits under the target with no byte to spare; the sibling's long name would not.
      const target = pathOfLength(sb, 4094 - longest, 'c'.repeat(30));
      // A dead restore's sibling under the short name is a leftover the next restore removes.
      fs.mkdirSync(path.dirname(target), { recursive: true });
      const dead = spawnSync('true').pid as number;
      const leftover = path.join(path.dirname(target), `.xr-${dead}-0123abcd`);
      fs.mkdirSync(leftover);
      expectExit(xet(sb, r.dir, ['restore', snap, target, '--json']), 0);
      assert.equal(fs.readFileSync(path.join(target, ...Array<string>(19).fill(NAME), 'f'), 'utf8'), 'x\n');
      assert.equal(fs.existsSync(leftover), false, 'the dead restore’s short-named sibling was removed');
      assert.deepEqual(fs.readdirSync(path.dirname(target)), [path.basename(target)], 'no sibling is left');

      // The same through --from (the snapshot's paths are known only after the fetch).
      const target2 = pathOfLength(sb, 4094 - longest, 'e'.repeat(30));
      expectExit(xet(sb, sb.root, ['restore', snap, target2, '--from', r.dir, '--json']), 0);
      assert.ok(fs.existsSync(path.join(target2, ...Array<string>(19).fill(NAME), 'f')));
      assert.deepEqual(fs.readdirSync(path.dirname(target2)).sort(), [path.basename(target), path.basename(target2)]);

      // One byte more is refused, before any of the target's missing parents is made.
      const tooLong = path.join(sb.path('new'), path.relative(sb.path('p'), pathOfLength(sb, 4093 - longest, 'c')));
      expectError(xet(sb, r.dir, ['restore', snap, tooLong, '--json']), 'PATH_TOO_LONG');
      assert.equal(fs.existsSync(sb.path('new')), false, 'no parent was created');
      expectError(xet(sb, sb.root, ['restore', snap, tooLong, '--from', r.dir, '--json']), 'PATH_TOO_LONG');
      assert.equal(fs.existsSync(sb.path('new')), false, 'no parent is left after a refused --from');
    } finally {
      rmDeep(sb, sb.path('p'));
      rmDeep(sb, r.dir);
    }
  });
});
