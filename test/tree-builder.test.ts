// buildTrees (src/git/tree-builder.ts) against git's own write-tree: random sets of paths with the
// names that sort near '/' ('a-b', 'a.b', 'a0', 'a/…'), deep and shallow, every mode; the root id
// must be git's, and every tree listed must be the object its id names.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import { buildTrees, type TreeInput } from '../src/git/tree-builder';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

const NAMES = ['a', 'a-b', 'a.b', 'a0', 'b', 'ab', 'z', 'é', 'x y', 'A'];
const MODES = [0o100644, 0o100755, 0o120000, 0o160000];

test('buildTrees gives the root git write-tree gives, for random path sets', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    let seed = 11;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
    for (let round = 0; round < 40; round++) {
      const paths = new Set<string>();
      const count = 1 + rand(round < 20 ? 12 : 400);
      for (let i = 0; i < count; i++) {
        const depth = rand(5);
        paths.add(Array.from({ length: depth + 1 }, () => NAMES[rand(NAMES.length)]).join('/'));
      }
      // A path cannot be both a file and a directory: drop files that are some other path's dir.
      const all = [...paths];
      const files = all.filter((p) => !all.some((q) => q.startsWith(`${p}/`)));
      const entries: TreeInput[] = files
        .map((p) => ({
          path: Buffer.from(p, 'utf8'),
          mode: MODES[rand(MODES.length)],
          oid: crypto.createHash('sha1').update(p).digest(),
        }))
        .sort((x, y) => Buffer.compare(x.path, y.path));
      const built = buildTrees(entries, 'sha1');
      const info = entries
        .map((e) => {
          const type = e.mode === 0o160000 ? 'commit' : 'blob';
          return `${e.mode.toString(8)} ${type} ${e.oid.toString('hex')}\t${e.path.toString('utf8')}\n`;
        })
        .join('');
      r.git('read-tree', '--empty');
      r.gitInput(info, 'update-index', '--index-info');
      const want = r.git('write-tree', '--missing-ok').trim();
      assert.equal(built.root, want, `round ${round}: ${files.length} paths`);
      for (const t of built.trees) {
        const id = crypto.createHash('sha1').update(`tree ${t.data.length}\0`).update(t.data).digest('hex');
        assert.equal(id, t.oid);
      }
      assert.equal(built.cacheTree.entryCount, entries.length);
    }
  } finally {
    sb.cleanup();
  }
});
