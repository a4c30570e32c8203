// TreeBuildMemo (src/git/tree-memo.ts) against whole builds: a sequence of random trees and random
// edits (ids, modes, several at once, none, paths added and removed), each built through one memo
// and by buildTrees afresh; every tree, its order, the root and the cache-tree's bytes must be the
// same, and the memo must have reused its last build where the paths were the same. Then one check
// against git itself: the memo's root is the one `git write-tree` gives for the edited index.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { serializeCacheTree } from '../src/git/index-writer';
import { buildTrees, type TreeBuild } from '../src/git/tree-builder';
import { TreeBuildMemo } from '../src/git/tree-memo';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

const NAMES = ['a', 'a-b', 'a.b', 'a0', 'b', 'ab', 'z', 'é', 'x y', 'A'];
const FILE_MODES = [0o100644, 0o100755, 0o120000, 0o160000];

function randomPaths(rand: (n: number) => number, count: number, depth: number): string[] {
  const set = new Set<string>();
  for (let i = 0; i < count; i++) {
    const d = rand(depth);
    set.add(Array.from({ length: d + 1 }, () => NAMES[rand(NAMES.length)]).join('/'));
  }
  const all = [...set];
  return all
    .filter((p) => !all.some((q) => q.startsWith(`${p}/`)))
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

function assertSameBuild(got: TreeBuild, want: TreeBuild, what: string): void {
  assert.equal(got.root, want.root, `${what}: root`);
  assert.equal(got.trees.length, want.trees.length, `${what}: tree count`);
  for (let t = 0; t < want.trees.length; t++) {
    assert.equal(got.trees[t].oid, want.trees[t].oid, `${what}: tree ${t}`);
    assert.ok(got.trees[t].data.equals(want.trees[t].data), `${what}: tree ${t}'s bytes`);
  }
  assert.ok(serializeCacheTree(got.cacheTree).equals(serializeCacheTree(want.cacheTree)), `${what}: cache-tree`);
}

test('a memo gives whole builds byte for byte, and reuses the last build when the paths are the same', () => {
  let seed = 7;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  for (const format of ['sha1', 'sha256'] as const) {
    const hashLen = format === 'sha256' ? 32 : 20;
    for (let round = 0; round < 12; round++) {
      const memo = new TreeBuildMemo();
      let paths = randomPaths(rand, 1 + rand(300), 1 + rand(6));
      let modes = paths.map(() => FILE_MODES[rand(FILE_MODES.length)]);
      let oids = crypto.randomBytes(paths.length * hashLen);
      let reusable = 0;
      for (let step = 0; step < 25; step++) {
        const what = `${format} round ${round} step ${step}`;
        const lastPaths = paths.join('\0');
        const kind = step === 0 ? 'first' : ['ids', 'ids', 'modes', 'none', 'paths', 'many'][rand(6)];
        if (kind === 'ids' || kind === 'many') {
          const edits = kind === 'many' ? 1 + rand(paths.length) : 1 + rand(4);
          for (let e = 0; e < edits; e++) crypto.randomBytes(hashLen).copy(oids, rand(paths.length) * hashLen);
        }
        if (kind === 'modes' || kind === 'many') modes[rand(paths.length)] = FILE_MODES[rand(FILE_MODES.length)];
        if (kind === 'paths') {
          // A path added or removed: the layout is read again from a whole build.
          const next = randomPaths(rand, 1 + rand(300), 1 + rand(6));
          const keep = new Map(paths.map((p, k) => [p, k]));
          const nextOids = Buffer.alloc(next.length * hashLen);
          const nextModes = next.map((p, k) => {
            const old = keep.get(p);
            if (old === undefined) {
              crypto.randomBytes(hashLen).copy(nextOids, k * hashLen);
              return FILE_MODES[rand(FILE_MODES.length)];
            }
            oids.copy(nextOids, k * hashLen, old * hashLen, (old + 1) * hashLen);
            return modes[old];
          });
          paths = next;
          modes = nextModes;
          oids = nextOids;
        }
        // (A new random set can be the last one again.)
        const sameAsLast = kind !== 'first' && paths.join('\0') === lastPaths;
        if (sameAsLast) reusable++;
        const before = memo.stats.reused;
        // The caller's columns are its own: the memo must not keep them (they are reused below).
        const got = memo.build({ paths, modes: Uint32Array.from(modes), oids }, format);
        assertSameBuild(got, buildTrees({ paths, modes, oids }, format), what);
        assert.equal(memo.stats.reused - before, sameAsLast ? 1 : 0, `${what}: reused (${kind})`);
        oids = Buffer.from(oids);
      }
      assert.ok(reusable > 0);
    }
  }
});

test('a memo refuses a mode a tree cannot hold, as a whole build does', () => {
  const memo = new TreeBuildMemo();
  const paths = ['a/b', 'a/c', 'd'];
  const oids = crypto.randomBytes(3 * 20);
  memo.build({ paths, modes: [0o100644, 0o100644, 0o100644], oids }, 'sha1');
  const bad = { paths, modes: [0o100644, 0o100666, 0o100644], oids };
  assert.throws(() => buildTrees(bad, 'sha1'), /tree entry a\/c has mode 100666/);
  assert.throws(() => memo.build(bad, 'sha1'), /tree entry a\/c has mode 100666/);
  // The refused build left the memo as it was: the next good one is still exact.
  const good = { paths, modes: [0o100755, 0o100644, 0o100644], oids };
  assertSameBuild(memo.build(good, 'sha1'), buildTrees(good, 'sha1'), 'after a refusal');
});

test("a memo's root after edits is git write-tree's", () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    const files = ['a/x.js', 'a/b/y.js', 'a/b/z.txt', 'c.md', 'd/e/f/g', 'd/e/h'];
    for (const f of files) {
      fs.mkdirSync(path.dirname(path.join(r.dir, f)), { recursive: true });
      fs.writeFileSync(path.join(r.dir, f), `first ${f}\n`);
    }
    r.git('add', '-A');
    const memo = new TreeBuildMemo();
    const build = (): string => {
      const listed = r
        .git('ls-files', '-s', '-z')
        .split('\0')
        .filter(Boolean)
        .map((l) => {
          const [info, p] = l.split('\t');
          const [mode, oid] = info.split(' ');
          return { p, mode: parseInt(mode, 8), oid };
        });
      return memo.build(
        {
          paths: listed.map((e) => e.p),
          modes: listed.map((e) => e.mode),
          oids: Buffer.from(listed.map((e) => e.oid).join(''), 'hex'),
        },
        'sha1',
      ).root;
    };
    assert.equal(build(), r.git('write-tree').trim());
    for (const [round, f] of ['a/b/y.js', 'd/e/h', 'c.md'].entries()) {
      fs.appendFileSync(path.join(r.dir, f), `edit ${round}\n`);
      if (round === 1) fs.chmodSync(path.join(r.dir, 'a/x.js'), 0o755);
      r.git('add', '-A');
      assert.equal(build(), r.git('write-tree').trim(), `after edit ${round}`);
    }
    assert.equal(memo.stats.reused, 3);
  } finally {
    sb.cleanup();
  }
});
