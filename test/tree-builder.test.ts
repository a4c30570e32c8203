// buildTrees (src/git/tree-builder.ts) against git's own write-tree: random sets of paths with the
// names that sort near '/' ('a-b', 'a.b', 'a0', 'a/…'), deep and shallow, every mode; the root id
// must be git's, and every tree listed must be the object its id names. And serializeIndex
// (src/git/index-writer.ts) with that build's cache-tree: the bytes git writes for the same index.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { STAT, STAT_BYTES, serializeCacheTree, serializeIndex } from '../src/git/index-writer';
import { buildTrees } from '../src/git/tree-builder';
import { native, nativeMissing } from '../src/native';
import { initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

const NAMES = ['a', 'a-b', 'a.b', 'a0', 'b', 'ab', 'z', 'é', 'x y', 'A'];
const MODES = [0o100644, 0o100755, 0o120000, 0o160000];

/** `count` random paths of up to `depth` components from NAMES (`extra` added), with none that is
 * another's directory (a path cannot be both). */
function randomPaths(rand: (n: number) => number, count: number, depth: number, extra: string[] = []): string[] {
  const set = new Set<string>();
  for (let i = 0; i < count; i++) {
    const d = rand(depth);
    set.add(Array.from({ length: d + 1 }, () => NAMES[rand(NAMES.length)]).join('/'));
  }
  for (const p of extra) set.add(p);
  const all = [...set];
  return all.filter((p) => !all.some((q) => q.startsWith(`${p}/`)));
}

test('buildTrees gives the root git write-tree gives, for random path sets', () => {
  // In CI the native build is the one compared with the JavaScript one (.ci/run builds the module).
  if (process.env.CI) assert.ok(native, `CI must build trees natively: ${nativeMissing}`);
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    let seed = 11;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
    for (let round = 0; round < 40; round++) {
      const files = randomPaths(rand, 1 + rand(round < 20 ? 12 : 400), 5);
      const entries = files
        .map((p) => ({
          path: Buffer.from(p, 'utf8'),
          mode: MODES[rand(MODES.length)],
          oid: crypto.createHash('sha1').update(p).digest(),
        }))
        .sort((x, y) => Buffer.compare(x.path, y.path));
      const columns = {
        paths: entries.map((e) => e.path.toString('utf8')),
        modes: entries.map((e) => e.mode),
        oids: Buffer.concat(entries.map((e) => e.oid)),
      };
      const built = buildTrees(columns, 'sha1');
      // The JavaScript build (no native module) gives the same trees and the same cache-tree.
      const inJs = buildTrees(columns, 'sha1', 'js');
      assert.deepEqual(
        inJs.trees.map((t) => [t.oid, t.data.toString('hex')]),
        built.trees.map((t) => [t.oid, t.data.toString('hex')]),
      );
      assert.ok(serializeCacheTree(inJs.cacheTree).equals(serializeCacheTree(built.cacheTree)), `round ${round}`);
      // And for SHA-256 repositories (32-byte ids; git's sha256 write-tree is run by fidelity's captures).
      const wide = {
        ...columns,
        oids: Buffer.concat(entries.map((e) => crypto.createHash('sha256').update(e.oid).digest())),
      };
      const w = buildTrees(wide, 'sha256');
      assert.deepEqual(
        buildTrees(wide, 'sha256', 'js').trees.map((t) => [t.oid, t.data.toString('hex')]),
        w.trees.map((t) => [t.oid, t.data.toString('hex')]),
      );
      assert.equal(w.root.length, 64);
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

test('serializeIndex writes, in versions 2 and 4, the bytes git writes for the same entries', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    const indexFile = path.join(r.dir, '.git', 'index');
    let seed = 5;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
    for (let round = 0; round < 12; round++) {
      // Unsorted rows, and a long name (its length is kept whole in neither version's 12 bits).
      const paths = randomPaths(rand, 1 + rand(round < 6 ? 10 : 300), 4, round === 3 ? ['n'.repeat(5000)] : []).sort(
        (x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)),
      );
      const n = paths.length;
      const rows = paths.map((_, k) => n - 1 - k);
      const stat = Buffer.alloc(n * STAT_BYTES);
      const oids = Buffer.alloc(n * 20);
      const modes: number[] = [];
      for (let k = 0; k < n; k++) {
        const row = rows[k];
        // Times in 2001, before the index file: no entry is racily clean (git would smudge it).
        for (const f of [STAT.ctime, STAT.mtime]) stat.writeUInt32BE(1_000_000_000 + rand(1000), row * STAT_BYTES + f);
        for (const f of [STAT.ctimeNs, STAT.mtimeNs, STAT.dev, STAT.ino, STAT.uid, STAT.gid, STAT.size])
          stat.writeUInt32BE(rand(2147483647), row * STAT_BYTES + f);
        const mode = MODES[rand(3)];
        stat.writeUInt32BE(mode, row * STAT_BYTES + STAT.mode);
        modes.push(mode);
        crypto
          .createHash('sha1')
          .update(paths[k])
          .digest()
          .copy(oids, row * 20);
      }
      const ordered = Buffer.concat(rows.map((row) => oids.subarray(row * 20, row * 20 + 20)));
      const built = buildTrees({ paths, modes, oids: ordered }, 'sha1');
      const names = Buffer.from(`${paths.join('\0')}\0`, 'utf8');
      const extensions = [{ signature: 'TREE', data: serializeCacheTree(built.cacheTree) }];
      const ours = (version: 2 | 4) => {
        const bytes = serializeIndex({ names, rows, stat, oid: oids }, { version, format: 'sha1', extensions });
        const inJs = serializeIndex({ names, rows, stat, oid: oids }, { version, format: 'sha1', extensions }, 'js');
        assert.ok(inJs.equals(bytes), `round ${round}: v${version} in JavaScript`);
        return bytes;
      };
      for (const [from, to] of [
        [4, 2],
        [2, 4],
      ] as const) {
        fs.writeFileSync(indexFile, ours(from));
        r.git('update-index', '--index-version', String(to));
        assert.ok(fs.readFileSync(indexFile).equals(ours(to)), `round ${round}: v${from} rewritten as v${to}`);
      }
      assert.equal(r.git('write-tree', '--missing-ok').trim(), built.root, `round ${round}: the cache-tree's root`);
      const listed = r.git('ls-files', '-s').split('\n').filter(Boolean);
      assert.equal(listed.length, n);
    }
  } finally {
    sb.cleanup();
  }
});

test('buildTrees and serializeIndex refuse what they cannot build, the same way on both routes', () => {
  const oids = Buffer.alloc(60, 1);
  const paths = ['a', 'b', 'c'];
  for (const how of ['auto', 'js'] as const) {
    // A mode no tree holds, named with its entry (the native code for entry 1 once read as a defect).
    assert.throws(
      () => buildTrees({ paths, modes: [0o100644, 0o40000, 0o100644], oids }, 'sha1', how),
      /tree entry b has mode 40000/,
      how,
    );
    // Columns that do not match, and a lone surrogate (two of them would be one name to git).
    assert.throws(() => buildTrees({ paths, modes: [0o100644, 0o100644], oids }, 'sha1', how), /3 paths, 2 modes/);
    assert.throws(() =>
      buildTrees({ paths, modes: [0o100644, 0o100644, 0o100644], oids: oids.subarray(1) }, 'sha1', how),
    );
    assert.throws(
      () =>
        buildTrees(
          { paths: ['a\uD800/x', 'a\uDC00/y'], modes: [0o100644, 0o100644], oids: oids.subarray(20) },
          'sha1',
          how,
        ),
      /not well-formed/,
    );
    const names = Buffer.from('a\0b\0');
    const stat = Buffer.alloc(80);
    for (const rows of [
      [0, 2],
      [0, -1],
      [0, 1.5],
    ]) {
      assert.throws(
        () => serializeIndex({ names, rows, stat, oid: oids.subarray(0, 40) }, { version: 4, format: 'sha1' }, how),
        /do not match their names, stat data or ids/,
        `${how}: rows ${rows}`,
      );
    }
  }
  // Names that hold fewer paths than the columns: refused, never a smaller tree.
  if (native) {
    assert.throws(
      () => buildTrees({ paths, modes: [0o100644, 0o100644, 0o100644], oids, names: Buffer.from('a\0') }, 'sha1'),
      /not a mode per name/,
    );
  }
});
