// A large tree's filemeta as a tree of parts (xet.snapshot/v4): cut where the paths say, so a
// re-capture stores only the parts whose files changed, and read back exactly as the single blob
// (times to the nanosecond, hard links) by restore, verify and forks. Crafted trees of parts are
// refused before anything is written. Runs the real CLI and git.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { native } from '../src/native';
import {
  FileMetaPartsMemo,
  FILEMETA_HEADER,
  FILEMETA_PARTED_MIN_ENTRIES,
  fileMetaColumns,
  parseFileMeta,
  setLinkRanks,
  storedFileMeta,
  type FileMeta,
  type FileMetaEntry,
  type StoredFileMeta,
} from '../src/snapshot/filemeta';
import { parseTreeObject } from '../src/git/tree-object';
import { git, initRepo, type Repo } from './support/git';
import { withMountSandbox } from './support/mounts';
import { withSandbox, type Sandbox } from './support/sandbox';
import { writeLooseObject } from '../src/git/loose-writer';
import { capture, expectError, expectExit, parseJson, restore, showManifest, verify, xet } from './support/xet';

const EXACT_TIMES = native !== null || spawnSync('python3', ['-c', 'pass']).status === 0;
const isRoot = process.getuid?.() === 0;

/** `count` files in directories of 40, each with its own time to the nanosecond; every 97th file a
 * hard link of the one before, every 101st a symlink. Returns the paths written. */
function populate(r: Repo, count: number, from = 0, tag = 'f'): string[] {
  const out: string[] = [];
  for (let i = from; i < from + count; i++) {
    const rel = `${tag}${String(Math.floor(i / 40)).padStart(3, '0')}/n${String(i).padStart(5, '0')}.txt`;
    fs.mkdirSync(path.dirname(r.p(rel)), { recursive: true });
    if (i % 101 === 100) fs.symlinkSync(`target-${i}`, r.p(rel));
    else if (i % 97 === 96 && out.length && !fs.lstatSync(r.p(out.at(-1) as string)).isSymbolicLink()) {
      fs.linkSync(r.p(out.at(-1) as string), r.p(rel));
    } else {
      fs.writeFileSync(r.p(rel), `file ${i}\n`);
      touchNs(r, rel, 1_600_000_000 + i * 7, 123_456_789 - i);
    }
    out.push(rel);
  }
  return out;
}

function touchNs(r: Repo, rel: string, sec: number, nsec: number): void {
  const st = spawnSync('touch', ['-h', '-d', `@${sec}.${String(nsec).padStart(9, '0')}`, rel], { cwd: r.dir });
  assert.equal(st.status, 0, `touch ${rel}`);
}

/** The snapshot's filemeta entry: its type and, for a tree, its parts in order (`group/part`,
 * blob, line count). */
function filemetaOf(r: Repo, snap: string): { type: string; parts: { name: string; oid: string; lines: number }[] } {
  const type = r.git('cat-file', '-t', `${snap}:filemeta`).trim();
  if (type !== 'tree') return { type, parts: [] };
  const parts = r
    .git('ls-tree', '-r', `${snap}:filemeta`)
    .trim()
    .split('\n')
    .map((l) => {
      const [meta, name] = l.split('\t');
      const oid = meta.split(' ')[2];
      return { name, oid, lines: r.git('cat-file', 'blob', oid).split('\n').length - 1 };
    });
  return { type, parts };
}

/** The objects `snap` has that `before` (a snapshot, with its whole tree) has not. */
function newObjects(r: Repo, snap: string, before: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of r.git('rev-list', '--objects', snap, '--not', before, `${before}^{tree}`).trim().split('\n')) {
    const sp = line.indexOf(' ');
    if (sp > 0) out.set(line.slice(0, sp), line.slice(sp + 1));
  }
  return out;
}

/** The files tree's blob paths in tree order (the order of filemeta's lines). */
function filesOrder(r: Repo, snap: string): string[] {
  return r.git('ls-tree', '-r', '-z', '--name-only', `${snap}:files`).split('\0').filter(Boolean);
}

/** Which part holds each path's line. */
function partOf(parts: { lines: number }[], order: string[], rel: string): number {
  let line = order.indexOf(rel);
  assert.ok(line >= 0, `${rel} is in the files tree`);
  for (let i = 0; i < parts.length; i++) {
    if (line < parts[i].lines) return i;
    line -= parts[i].lines;
  }
  throw new Error(`${rel}: past the last part`);
}

function mtimeNs(dir: string, rel: string): bigint {
  return fs.lstatSync(path.join(dir, rel), { bigint: true }).mtimeNs;
}

function assertSameTree(sb: Sandbox, src: Repo, dir: string, rels: string[], what: string): void {
  for (const rel of rels) {
    const a = fs.lstatSync(src.p(rel));
    const b = fs.lstatSync(path.join(dir, rel));
    if (EXACT_TIMES) assert.equal(mtimeNs(dir, rel), mtimeNs(src.dir, rel), `${what}: ${rel}'s time`);
    assert.equal(b.nlink > 1, a.nlink > 1, `${what}: ${rel} is a hard link where the source's is`);
  }
  assert.equal(git(sb, dir, ['status', '--porcelain']), src.git('status', '--porcelain'), `${what}: git status`);
}

test('a large tree keeps its times in a tree of parts, and a re-capture stores only the parts its edits changed', async () => {
  await withMountSandbox((sb) => {
    const src = initRepo(sb, 'src');
    src.commit('base', { 'README.md': 'parts\n' });
    // At the threshold: the single blob every reader knows, and the version it needs (v1).
    let rels = populate(src, FILEMETA_PARTED_MIN_ENTRIES - 1);
    const small = capture(sb, src.dir);
    assert.equal(filemetaOf(src, small).type, 'blob');
    assert.equal(showManifest(sb, src.dir, small).schema, 'xet.snapshot/v1');

    // One path more: a tree of parts, v4 (a v1-v3 reader would restore without times or links).
    rels = rels.concat(populate(src, 1000, FILEMETA_PARTED_MIN_ENTRIES - 1));
    const first = capture(sb, src.dir);
    const m1 = filemetaOf(src, first);
    assert.equal(m1.type, 'tree');
    assert.equal(showManifest(sb, src.dir, first).schema, 'xet.snapshot/v4');
    // The sandbox's commits all have one date: with the blob-only snapshot dropped, `first` is the
    // one newest snapshot (the base of a fork's first capture, below).
    expectOk(xet(sb, src.dir, ['drop', small, '--json']));
    assert.ok(m1.parts.length >= 6, `${m1.parts.length} parts for ${rels.length + 1} entries`);
    // Groups of parts, each named by its position.
    const hex = (i: number) => i.toString(16).padStart(8, '0');
    const groups = new Map<string, string[]>();
    for (const p of m1.parts) {
      const [g, name] = p.name.split('/');
      groups.set(g, [...(groups.get(g) ?? []), name]);
    }
    assert.deepEqual(
      [...groups.keys()],
      [...groups.keys()].map((_, i) => hex(i)),
      'groups are named by position',
    );
    for (const names of groups.values())
      assert.deepEqual(
        names,
        names.map((_, i) => hex(i)),
        'so are parts',
      );
    const order = filesOrder(src, first);
    assert.equal(
      m1.parts.reduce((n, p) => n + p.lines, 0),
      order.length,
      'one line per blob entry of files/, across the parts',
    );
    const all = ['README.md', ...rels];

    // Restored exactly, by every path that reads filemeta: the default lay, git's checkout, forks.
    const viaDefault = sb.path('restored');
    restore(sb, src.dir, first, viaDefault);
    assertSameTree(sb, src, viaDefault, all, 'restore');
    expectExit(verify(sb, src.dir, first, viaDefault), 0);
    const viaGit = sb.path('restored-git');
    expectExit(xet(sb, src.dir, ['restore', first, viaGit, '--json'], { env: { GIT_XET_LAY: 'git' } }), 0);
    assertSameTree(sb, src, viaGit, all, 'restore through git checkout');
    const viaCopy = sb.path('fork-copy');
    expectExit(xet(sb, src.dir, ['fork', first, viaCopy, '--mode', 'copy', '--json']), 0);
    assertSameTree(sb, src, viaCopy, all, 'copy fork');
    {
      // A fork's first capture has the newest snapshot as its base: of the filemeta it stores the
      // part its edit changed, that part's group and the top tree, not the parts the base holds.
      const rel = rels[1500];
      spawnSync('touch', ['-h', '-d', '@1700000123.000000042', rel], { cwd: viaCopy });
      const before = packEntries(sb, viaCopy);
      const forked = parseJson(expectOk(xet(sb, viaCopy, ['capture', '--json']))).snapshot as string;
      // Every entry of the packs the capture wrote (an object stored again counts again).
      const written = [...packEntries(sb, viaCopy)].filter(([idx]) => !before.has(idx)).flatMap(([, oids]) => oids);
      const metaObjects = new Set(
        git(sb, viaCopy, ['ls-tree', '-r', '-t', '--format=%(objectname)', `${forked}:filemeta`])
          .trim()
          .split('\n'),
      );
      metaObjects.add(git(sb, viaCopy, ['rev-parse', `${forked}:filemeta`]).trim());
      const writtenMeta = written.filter((o) => metaObjects.has(o)).length;
      assert.ok(metaObjects.size >= 10, `${metaObjects.size} filemeta objects`);
      assert.equal(writtenMeta, 3, `the fork's first capture stored ${writtenMeta} filemeta objects`);
    }
    if (isRoot) {
      const viaOverlay = sb.path('fork-overlay');
      expectExit(xet(sb, src.dir, ['fork', first, viaOverlay, '--mode', 'overlay', '--json']), 0);
      assertSameTree(sb, src, viaOverlay, all, 'overlay fork');
      expectExit(verify(sb, src.dir, first, viaOverlay), 0);
    }

    // Three edits in one directory and one far away: exactly the parts holding their lines are new.
    const edited = [rels[1200], rels[1201], rels[1203], rels[2900]];
    for (const [k, rel] of edited.entries()) touchNs(src, rel, 1_700_000_000 + k, 5);
    const inPack = () => Number(/in-pack: (\d+)/.exec(src.git('count-objects', '-v'))?.[1]);
    const packedBefore = inPack();
    const second = capture(sb, src.dir);
    const packed = inPack() - packedBefore;
    const m2 = filemetaOf(src, second);
    assert.equal(m2.parts.length, m1.parts.length, 'times alone move no cut');
    const touched = new Set(edited.map((rel) => m2.parts[partOf(m2.parts, order, rel)].oid));
    const added = newObjects(src, second, first);
    const newParts = m2.parts.filter((p) => added.has(p.oid)).map((p) => p.oid);
    assert.deepEqual(new Set(newParts), touched, 'the new parts are those holding the edited lines');
    assert.ok(touched.size <= 2 && touched.size < m2.parts.length / 3);
    assert.ok(added.has(src.git('rev-parse', `${second}:filemeta`).trim()), 'and the parts tree');
    // And only those were written: the previous capture's parts are known held, not stored again.
    assert.ok(packed > 0 && packed <= added.size, `${packed} objects packed, ${added.size} new`);
    const viaSecond = sb.path('restored-2');
    restore(sb, src.dir, second, viaSecond);
    assertSameTree(sb, src, viaSecond, all, 'restore after edits');

    // A file added moves at most one cut: at most two parts are new. And a copy of a linked file
    // (its own inode, the same blob) between the link's first path and the link: the link now
    // names its first path by rank 2, counting the copy.
    src.write('f030/added.txt', 'new\n');
    assert.equal(fs.statSync(src.p('f002/n00096.txt')).ino, fs.statSync(src.p('f002/n00095.txt')).ino);
    fs.copyFileSync(src.p('f002/n00095.txt'), src.p('f002/n00095x.txt'));
    const third = capture(sb, src.dir);
    const m3 = filemetaOf(src, third);
    const added3 = newObjects(src, third, second);
    const new3 = m3.parts.filter((p) => added3.has(p.oid));
    assert.ok(new3.length >= 1 && new3.length <= 3, `${new3.length} parts new after two files added`);
    const lines3 = m3.parts.flatMap((p) => src.git('cat-file', 'blob', p.oid).split('\n').slice(0, -1));
    assert.match(
      lines3[filesOrder(src, third).indexOf('f002/n00096.txt')],
      / =\^2$/,
      'the link counts the copy before it',
    );
    const viaThird = sb.path('restored-3');
    restore(sb, src.dir, third, viaThird);
    assertSameTree(sb, src, viaThird, [...all, 'f030/added.txt', 'f002/n00095x.txt'], 'restore after an addition');
    expectExit(verify(sb, src.dir, third, viaThird), 0);
  });
});

test('a crafted tree of filemeta parts is refused before anything is written; the same lines cut elsewhere are accepted', async () => {
  await withMountSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('base', { 'README.md': 'parts\n' });
    populate(r, FILEMETA_PARTED_MIN_ENTRIES + 200);
    const snap = capture(sb, r.dir);
    const { parts } = filemetaOf(r, snap);
    const lines = parts.flatMap((p) => r.git('cat-file', 'blob', p.oid).split('\n').slice(0, -1));
    const top = r.git('ls-tree', snap).trim().split('\n');
    const blob = (data: string | Buffer) => r.gitInput(data, 'hash-object', '-w', '--stdin').trim();
    const hex = (i: number) => i.toString(16).padStart(8, '0');
    const mktree = (rows: string[]) => r.gitInput(rows.map((x) => `${x}\n`).join(''), 'mktree', '--missing').trim();
    /** A row of the filemeta tree: group `i`, of these rows (mktree lines). */
    const groupRow = (i: number, rows: string[]) => `040000 tree ${mktree(rows)}\t${hex(i)}`;
    /** The snapshot with its filemeta entry replaced by a tree of these rows. */
    const craft = (topRows: string[]): string => {
      const tree = mktree(topRows);
      const entries = top.map((l) => (l.endsWith('\tfilemeta') ? `040000 tree ${tree}\tfilemeta` : l));
      const root = r.gitInput(`${entries.join('\n')}\n`, 'mktree').trim();
      const commit = r.gitInput('crafted\n', 'commit-tree', root).trim();
      r.git('update-ref', `refs/xet/snapshots/${commit}`, commit);
      return commit;
    };
    /** One group of these parts. */
    const one = (rows: string[]) => [groupRow(0, rows)];
    const row = (i: number, oid: string, mode = '100644 blob') => `${mode} ${oid}\t${hex(i)}`;
    const cutAt = (ends: number[], from0 = lines): string[] => {
      const rows: string[] = [];
      let from = 0;
      for (const [i, end] of ends.entries()) {
        rows.push(row(i, blob(`${from0.slice(from, end).join('\n')}\n`)));
        from = end;
      }
      return rows;
    };
    const n = lines.length;
    // A link in a part names its first path by rank (=^n); the absolute form is a blob's.
    const linked = lines.findIndex((l) => / =\^\d+$/.test(l));
    assert.ok(linked > 0, 'the tree has hard links');
    const absolute = lines.map((l, i) => (i === linked ? l.replace(/ =\^\d+$/, ' =0') : l));
    const good = cutAt([1, 500, n]);
    const someTree = r.git('rev-parse', `${snap}:files`).trim();
    const renumber = (rows: string[], from: number) => rows.map((x, i) => x.replace(/\t\w+$/, `\t${hex(from + i)}`));
    const cases: [string, string[]][] = [
      ['a part missing from the names (00000000, 00000002)', one([good[0], good[2]])],
      ['parts named out of position', one([good[0], good[1].replace(/\t0+1$/, '\t00000005'), good[2]])],
      ['a part that is a tree', one([good[0], row(1, someTree, '040000 tree'), good[2]])],
      ['an executable part', one([good[0], good[1].replace('100644', '100755'), good[2]])],
      [
        'a line cut across two parts',
        one([
          row(0, blob(lines[0].slice(0, 5))),
          row(1, blob(`${lines[0].slice(5)}\n`)),
          ...renumber(cutAt([1, 500, n]).slice(1), 2),
        ]),
      ],
      ['a line left out', one(cutAt([1, 500, n - 1]))],
      ['an empty part', one([good[0], row(1, blob('')), ...renumber(good.slice(1), 2)])],
      ['a part that is absent', one([good[0], row(1, 'f'.repeat(40)), good[2]])],
      ['parts far larger than the tree needs', one([good[0], row(1, blob(Buffer.alloc(300_000, 0x31))), good[2]])],
      ['no groups at all', []],
      ['an empty group', [groupRow(0, good), groupRow(1, [])]],
      ['a part where a group belongs', [groupRow(0, good.slice(0, 2)), renumber(good.slice(2), 1)[0]]],
      ['groups named out of position', [groupRow(0, good.slice(0, 2)), groupRow(2, renumber(good.slice(2), 0))]],
      ['a group that is absent', [groupRow(0, good.slice(0, 2)), `040000 tree ${'e'.repeat(40)}\t${hex(1)}`]],
      ["a link in a blob's absolute form", one(cutAt([1, 500, n], absolute))],
    ];
    for (const [i, [what, rows]] of cases.entries()) {
      const bad = craft(rows);
      const dir = sb.path(`t-${i}`);
      const err = xet(sb, r.dir, ['restore', bad, dir, '--json']);
      expectError(err, 'SNAPSHOT_INVALID');
      assert.ok(!fs.existsSync(dir), `${what}: nothing is left behind`);
      if (i === 0) {
        // verify reads filemeta through the same reader (one case is enough to show it).
        const v = parseJson(xet(sb, r.dir, ['verify', bad, r.dir, '--json']));
        assert.equal(v.error?.code, 'SNAPSHOT_INVALID', `${what}: verify refuses it too`);
      }
    }
    // One group named over and over (every row the same small tree): refused by the size of what
    // the top tree names, counted with its repeats, before the group is expanded even once more.
    const same = groupRow(0, good).split(' ')[2].split('\t')[0];
    const repeated = craft(Array.from({ length: 2000 }, (_, i) => `040000 tree ${same}\t${hex(i)}`));
    const rep = expectError(xet(sb, r.dir, ['restore', repeated, sb.path('t-repeated'), '--json']), 'SNAPSHOT_INVALID');
    assert.match(rep.message, /has trees of \d+ bytes, too large/);
    // The same lines cut and grouped at other places say the same: a reader never depends on where
    // the cuts are.
    const recut = craft([groupRow(0, good.slice(0, 2)), groupRow(1, renumber(good.slice(2), 0))]);
    const dir = sb.path('recut');
    restore(sb, r.dir, recut, dir);
    if (EXACT_TIMES) {
      for (const rel of ['f000/n00000.txt', 'f050/n02001.txt']) assert.equal(mtimeNs(dir, rel), mtimeNs(r.dir, rel));
    }
    expectExit(verify(sb, r.dir, recut, dir), 0);
  });
});

/** A synthetic files tree's metadata, `pkgNNN/<name>` paths: a file under pkg200 and above is a
 * hard link of the same name 200 packages earlier (a `cp -al` copy); times depend on the path. */
function syntheticMeta(paths: string[]): { meta: FileMeta; blobs: { mode: number; oid: string }[] } {
  const at = new Map(paths.map((p, i) => [p, i]));
  const sourceOf = (p: string): string | null => {
    const m = /^pkg(\d{3})\/(.*)$/.exec(p);
    const d = m ? Number(m[1]) : 0;
    return m && d >= 200 ? `pkg${String(d - 200).padStart(3, '0')}/${m[2]}` : null;
  };
  const entries: FileMetaEntry[] = paths.map((p) => {
    const src = sourceOf(p);
    const h = crypto
      .createHash('sha1')
      .update(src ?? p)
      .digest();
    return {
      path: p,
      mtimeSec: 1_600_000_000 + h.readUInt16BE(0),
      mtimeNsec: h.readUInt32BE(2) % 1_000_000_000,
      linkTo: src !== null && at.has(src) ? (at.get(src) as number) : -1,
      externalNlink: h[6] === 0 ? 3 : 0,
    };
  });
  const blobs = paths.map((p) => ({
    mode: 0o100644,
    oid: crypto
      .createHash('sha1')
      .update(sourceOf(p) ?? p)
      .digest('hex'),
  }));
  for (const e of entries) if (e.linkTo >= 0) e.externalNlink = 0;
  setLinkRanks(entries, (k) => `${blobs[k].mode}:${blobs[k].oid}`);
  return { meta: { entries, hardLinks: 0, externalLinks: 0, linkedBytes: 0 }, blobs };
}

/** The parts of a stored filemeta by walking its trees from the top: [group][part] -> bytes. */
function walkParts(stored: StoredFileMeta): Buffer[][] {
  const byId = new Map(stored.objects.map((o) => [o.oid, o]));
  const rows = (oid: string) => parseTreeObject((byId.get(oid) as { data: Buffer }).data, 20).entries;
  return rows(stored.oid).map((g) => {
    assert.equal(g.mode, '40000');
    return rows(g.oid).map((p) => {
      assert.equal(p.mode, '100644');
      return (byId.get(p.oid) as { data: Buffer }).data;
    });
  });
}

test('parts and groups are cut by the paths alone: an edit stores one part, one group and the top tree', () => {
  const paths: string[] = [];
  for (let d = 0; d < 400; d++) for (let f = 0; f < 60; f++) paths.push(`pkg${String(d).padStart(3, '0')}/f${f}.js`);
  paths.sort();
  const { meta, blobs } = syntheticMeta(paths);
  const first = storedFileMeta(meta, 'sha1');
  assert.equal(first.parted, true);
  assert.equal(first.objects.at(-1)?.oid, first.oid, 'the top tree comes last');
  assert.equal(new Set(first.objects.map((o) => o.oid)).size, first.objects.length, 'each object once');
  const groups = walkParts(first);
  const parts = groups.flat();
  assert.ok(groups.length >= 3 && groups.every((g) => g.length >= 1 && g.length <= 64), `${groups.length} groups`);
  assert.ok(parts.length >= 40 && parts.every((p) => p.toString().split('\n').length - 1 <= 4096));
  // The parts, in order, are the lines; links are by rank (=^1 here), read back as positions.
  const whole = Buffer.concat([Buffer.from(`${FILEMETA_HEADER}\n${paths.length}\n`), ...parts]);
  const parsed = parseFileMeta(whole, blobs, true);
  for (let i = 0; i < paths.length; i++) {
    assert.equal(parsed.mtimeSec[i], meta.entries[i].mtimeSec);
    assert.equal(parsed.mtimeNsec[i], meta.entries[i].mtimeNsec);
    assert.equal(parsed.linkTo[i], meta.entries[i].linkTo);
    assert.equal(parsed.externalNlink[i], meta.entries[i].externalNlink);
  }
  assert.throws(() => parseFileMeta(whole, blobs, false), /link of the other form/, 'a blob reader refuses =^n');

  const ids = new Set(first.objects.map((o) => o.oid));
  const fresh = (s: StoredFileMeta) => s.objects.filter((o) => !ids.has(o.oid));
  // One time changed: its part, its group, the top.
  meta.entries[12_345].mtimeNsec += 1;
  const edited = fresh(storedFileMeta(meta, 'sha1'));
  assert.deepEqual(edited.map((o) => o.type).sort(), ['blob', 'tree', 'tree']);
  meta.entries[12_345].mtimeNsec -= 1;
  // A path added between the copied packages and their copies (every link spans it): at most two
  // parts and two groups (when its own path is a cut), and the top. No link's line changes.
  const grown = fresh(storedFileMeta(syntheticMeta([...paths, 'pkg100/f0a.js'].sort()).meta, 'sha1'));
  const blobsNew = grown.filter((o) => o.type === 'blob').length;
  const treesNew = grown.filter((o) => o.type === 'tree').length;
  assert.ok(
    blobsNew >= 1 && blobsNew <= 2 && treesNew >= 2 && treesNew <= 3,
    `${blobsNew} parts, ${treesNew} trees new`,
  );
  // A hard-link group with two firsts of one blob (two copies, each with links): ranks pick each.
  const twin = syntheticMeta(paths);
  const shared = twin.blobs[5].oid;
  twin.blobs[7].oid = shared; // entry 7 is another first of entry 5's blob
  for (const [i, e] of twin.meta.entries.entries()) e.linkTo = i === 9 ? 5 : i === 11 ? 7 : -1;
  twin.blobs[9].oid = shared;
  twin.blobs[11].oid = shared;
  setLinkRanks(twin.meta.entries, (k) => `${twin.blobs[k].mode}:${twin.blobs[k].oid}`);
  assert.deepEqual([twin.meta.entries[9].linkRank, twin.meta.entries[11].linkRank], [2, 1]);
  const twinParts = walkParts(storedFileMeta(twin.meta, 'sha1')).flat();
  const twinParsed = parseFileMeta(
    Buffer.concat([Buffer.from(`${FILEMETA_HEADER}\n${paths.length}\n`), ...twinParts]),
    twin.blobs,
    true,
  );
  assert.deepEqual([twinParsed.linkTo[9], twinParsed.linkTo[11]], [5, 7]);
  // At the threshold and below: one blob, as before.
  const small = storedFileMeta(syntheticMeta(paths.slice(0, FILEMETA_PARTED_MIN_ENTRIES)).meta, 'sha1');
  assert.equal(small.parted, false);
  assert.deepEqual(
    small.objects.map((o) => o.type),
    ['blob'],
  );
});

// A resident process's memo of its last filemeta's parts (FileMetaPartsMemo) writes only the parts
// whose lines changed: its objects must be a whole build's, in order and to the byte, through
// edits of times, links and outside link counts, columns that appear and go, and other paths.
test("a filemeta memo's parts are a whole build's, and it writes only the parts that changed", () => {
  const paths: string[] = [];
  for (let d = 0; d < 400; d++) for (let f = 0; f < 30; f++) paths.push(`pkg${String(d).padStart(3, '0')}/f${f}.js`);
  paths.sort();
  let seed = 3;
  const rand = (k: number) => Math.floor(((seed = (seed * 16807) % 2147483647) / 2147483647) * k);
  for (const format of ['sha1', 'sha256'] as const) {
    const memo = new FileMetaPartsMemo();
    let current = syntheticMeta(paths).meta;
    let partial = 0;
    for (let step = 0; step < 30; step++) {
      const kind = step === 0 ? 'first' : ['time', 'time', 'links', 'outside', 'none', 'paths', 'no links'][rand(7)];
      const entries = current.entries.map((e) => ({ ...e }));
      if (kind === 'time') for (let e = 1 + rand(5); e > 0; e--) entries[rand(entries.length)].mtimeNsec = rand(1e9);
      if (kind === 'outside') entries[rand(entries.length)].externalNlink = 2 + rand(3);
      if (kind === 'links') {
        const k = rand(entries.length);
        entries[k].linkTo = -1;
        entries[k].linkRank = undefined;
      }
      if (kind === 'no links') for (const e of entries) e.linkTo = -1;
      current =
        kind === 'paths'
          ? syntheticMeta([...paths.slice(0, rand(paths.length)), `pkg${rand(400)}/new${step}.js`].sort()).meta
          : { ...current, entries };
      if (kind === 'no links' || kind === 'links') for (const e of current.entries) e.linkRank = undefined;
      setLinkRanks(current.entries, (k) => `100644:${current.entries[k].linkTo >= 0 ? current.entries[k].linkTo : k}`);
      const cols = fileMetaColumns(current.entries);
      const want = storedFileMeta(cols, format);
      const got = storedFileMeta(cols, format, memo);
      const what = `${format} step ${step} (${kind})`;
      assert.equal(got.oid, want.oid, what);
      assert.deepEqual(
        got.objects.map((o) => [o.oid, o.type]),
        want.objects.map((o) => [o.oid, o.type]),
        what,
      );
      got.objects.forEach((o, i) => assert.ok(o.data.equals(want.objects[i].data), `${what}: object ${i}`));
      const partCount = want.objects.filter((o) => o.type === 'blob').length;
      if (kind === 'time' || kind === 'none') {
        assert.ok(memo.lastWritten <= 5, `${what}: ${memo.lastWritten} parts written`);
        partial++;
      } else if (kind === 'first') assert.ok(memo.lastWritten >= partCount);
    }
    assert.ok(partial >= 5, `${format}: only ${partial} partial writes`);
  }
});

// A part that fails to write (a link without a rank: an invariant broken upstream) must leave the
// memo as it was, not half updated (review 41): the next good call is still a whole build's.
test('a filemeta memo is unchanged by a call that throws', () => {
  const paths: string[] = [];
  // pkg200 and above are hard links of pkg000 and above (syntheticMeta): the link columns exist.
  for (let d = 0; d < 300; d++) for (let f = 0; f < 14; f++) paths.push(`pkg${String(d).padStart(3, '0')}/f${f}.js`);
  paths.sort();
  const memo = new FileMetaPartsMemo();
  const base = syntheticMeta(paths).meta;
  assert.ok(base.entries.some((e) => e.linkTo >= 0));
  storedFileMeta(fileMetaColumns(base.entries), 'sha1', memo);
  const edited = base.entries.map((e) => ({ ...e }));
  edited[5].mtimeNsec = (edited[5].mtimeNsec + 1) % 1e9; // an early part
  const broken = edited.map((e) => ({ ...e }));
  let last = broken.length - 1; // a late part: a link without a rank
  while (broken[last].linkTo < 0) last--;
  broken[last].linkRank = 0;
  assert.throws(() => storedFileMeta(fileMetaColumns(broken), 'sha1', memo), /link without a rank/);
  const cols = fileMetaColumns(edited);
  const want = storedFileMeta(cols, 'sha1');
  const got = storedFileMeta(cols, 'sha1', memo);
  assert.equal(got.oid, want.oid);
  assert.deepEqual(
    got.objects.map((o) => o.oid),
    want.objects.map((o) => o.oid),
  );
});

// A resident process answers "which objects does the previous filemeta name" from what the capture
// that built it stored (capture-files.ts keepFileMetaObjects), not from `git ls-tree -r -t`: the two
// must be one set, in both object formats.
test("a stored filemeta's objects are the filemeta and everything git lists under it", async () => {
  const paths: string[] = [];
  for (let d = 0; d < 120; d++) for (let f = 0; f < 40; f++) paths.push(`pkg${String(d).padStart(3, '0')}/f${f}.js`);
  paths.sort();
  const { meta } = syntheticMeta(paths);
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const dir = sb.path(`meta-${format}`);
      fs.mkdirSync(dir);
      spawnSync('git', ['init', '-q', `--object-format=${format}`, dir]);
      const objectsDir = path.join(dir, '.git', 'objects');
      const stored = storedFileMeta(meta, format);
      assert.equal(stored.parted, true);
      for (const o of stored.objects) assert.equal(writeLooseObject(objectsDir, format, o.type, o.data), o.oid);
      const listed = spawnSync('git', ['ls-tree', '-r', '-t', '-z', '--format=%(objectname)', stored.oid], {
        cwd: dir,
        encoding: 'latin1',
      });
      assert.equal(listed.status, 0, listed.stderr);
      const viaGit = new Set([stored.oid, ...listed.stdout.split('\0').filter(Boolean)]);
      assert.deepEqual([...new Set(stored.objects.map((o) => o.oid))].sort(), [...viaGit].sort(), format);
    }
  });
});

function expectOk(r: ReturnType<typeof xet>): ReturnType<typeof xet> {
  expectExit(r, 0);
  return r;
}

/** The entries of every pack of the repository at `dir` (its own object directory), by index file. */
function packEntries(sb: Sandbox, dir: string): Map<string, string[]> {
  const packs = path.resolve(dir, git(sb, dir, ['rev-parse', '--git-path', 'objects/pack']).trim());
  const out = new Map<string, string[]>();
  for (const idx of fs.readdirSync(packs).filter((f) => f.endsWith('.idx'))) {
    const listed = spawnSync('git', ['show-index'], {
      input: fs.readFileSync(path.join(packs, idx)),
      encoding: 'utf8',
    });
    out.set(
      idx,
      listed.stdout
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((line) => line.split(' ')[1]),
    );
  }
  return out;
}

/** The filemeta line parser as it was before stop 35 (a regular expression per line), kept as the
 * reference the byte-by-byte parser must agree with. */
function referenceParse(data: Buffer, blobs: { mode: number; oid: string }[], parts: boolean): unknown {
  const bad = (why: string) => new Error(`the snapshot's filemeta ${why}`);
  const lines = data.toString('utf8').split('\n');
  if (lines[0] !== FILEMETA_HEADER) throw bad(`does not start with ${FILEMETA_HEADER}`);
  const count = Number(lines[1]);
  if (!/^\d+$/.test(lines[1] ?? '') || count !== blobs.length) {
    throw bad(`counts ${lines[1]} entries; the files tree has ${blobs.length}`);
  }
  if (lines.length !== count + 3 || lines[count + 2] !== '') throw bad('has the wrong number of lines');
  const re = /^(-?\d{1,15})\.(\d{9})(?: =(\^?)(\d{1,10}))?(?: \+(\d{1,10}))?$/;
  const out = {
    mtimeSec: new Array<number>(count),
    mtimeNsec: new Array<number>(count),
    linkTo: new Int32Array(count).fill(-1),
    externalNlink: new Array<number>(count).fill(0),
  };
  const firsts = parts ? new Map<string, number[]>() : null;
  for (let i = 0; i < count; i++) {
    const m = re.exec(lines[i + 2]);
    if (!m) throw bad(`line ${i + 3} is malformed`);
    out.mtimeSec[i] = Number(m[1]);
    out.mtimeNsec[i] = Number(m[2]);
    const key = firsts ? `${blobs[i].mode}:${blobs[i].oid}` : '';
    if (m[4] !== undefined) {
      if ((m[3] === '^') !== parts) throw bad(`line ${i + 3} has a link of the other form`);
      const list = firsts?.get(key);
      const n = Number(m[4]);
      const k = !firsts ? n : list && n >= 1 && n <= list.length ? list[list.length - n] : -1;
      if (k < 0 || k >= i || out.linkTo[k] !== -1 || blobs[k].mode !== blobs[i].mode || blobs[k].oid !== blobs[i].oid) {
        throw bad(`links entry ${i} to entry ${k}, which is not the same file`);
      }
      out.linkTo[i] = k;
    } else if (firsts) {
      const list = firsts.get(key);
      if (list) list.push(i);
      else firsts.set(key, [i]);
    }
    if (m[5] !== undefined) out.externalNlink[i] = Number(m[5]);
  }
  return out;
}

test('the filemeta parser agrees with the regular-expression reference on 6,000 generated and damaged inputs', () => {
  // xorshift32: every bit of it is usable (an LCG's low bits cycle too soon for `% n`).
  let seed = 0x9e3779b9;
  const rand = (n: number) => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % n;
  };
  const digits = (n: number) => Array.from({ length: n }, () => String(rand(10))).join('');
  const outcome = (f: () => unknown) => {
    try {
      const r = f() as { mtimeSec: number[]; mtimeNsec: number[]; linkTo: Int32Array; externalNlink: number[] };
      return { ok: [r.mtimeSec, r.mtimeNsec, [...r.linkTo], r.externalNlink] };
    } catch (e) {
      return { error: (e as Error).message };
    }
  };
  // Edges the random rounds seldom make: bytes after the last line, a missing last newline, an
  // empty line, no lines at all.
  const one = [{ mode: 0o100644, oid: 'a'.repeat(40) }];
  for (const text of [
    `${FILEMETA_HEADER}\n1\n1.000000000\nx`,
    `${FILEMETA_HEADER}\n1\n1.000000000\n\n`,
    `${FILEMETA_HEADER}\n1\n1.000000000`,
    `${FILEMETA_HEADER}\n1\n\n`,
    `${FILEMETA_HEADER}\n1`,
    `${FILEMETA_HEADER}\n0\n`,
    `${FILEMETA_HEADER}\n0\nx`,
  ]) {
    const data = Buffer.from(text, 'utf8');
    const blobs = text.includes('\n0') ? [] : one;
    assert.deepEqual(
      outcome(() => parseFileMeta(data, blobs, false)),
      outcome(() => referenceParse(data, blobs, false)),
      JSON.stringify(text),
    );
  }
  let parsedOk = 0;
  let refused = 0;
  for (let round = 0; round < 6000; round++) {
    const parts = rand(2) === 1;
    const count = rand(12);
    const oids = ['a'.repeat(40), 'b'.repeat(40), 'c'.repeat(40)];
    const blobs = Array.from({ length: count }, () => ({
      mode: rand(4) === 0 ? 0o100755 : 0o100644,
      oid: oids[rand(3)],
    }));
    const lines: string[] = [];
    for (let i = 0; i < count; i++) {
      let line = `${rand(5) === 0 ? '-' : ''}${digits(1 + rand(rand(8) === 0 ? 17 : 11))}.${digits(rand(12) === 0 ? 8 + rand(3) : 9)}`;
      if (i > 0 && rand(3) === 0)
        line += ` =${parts ? '^' : ''}${rand(6) === 0 ? digits(11) : String(rand(parts ? 4 : i + 1))}`;
      if (rand(4) === 0) line += ` +${rand(8) === 0 ? digits(11) : String(rand(1000))}`;
      lines.push(line);
    }
    let text = `${FILEMETA_HEADER}\n${rand(20) === 0 ? count + 1 : count}\n${lines.map((l) => `${l}\n`).join('')}`;
    // Damage: a byte changed, dropped or added somewhere, in a fifth of the inputs.
    if (rand(5) === 0 && text.length) {
      const at = rand(text.length);
      const bytes = '0123456789 .=^+-\nx\u00e9';
      const how = rand(3);
      const c = bytes[rand(bytes.length)];
      text =
        how === 0
          ? text.slice(0, at) + c + text.slice(at + 1)
          : how === 1
            ? text.slice(0, at) + text.slice(at + 1)
            : text.slice(0, at) + c + text.slice(at);
    }
    const data = Buffer.from(text, 'utf8');
    const want = outcome(() => referenceParse(data, blobs, parts));
    const got = outcome(() => parseFileMeta(data, blobs, parts));
    assert.deepEqual(got, want, `round ${round}: ${JSON.stringify(text)} (parts ${parts})`);
    if ('ok' in want) parsedOk++;
    else refused++;
  }
  assert.ok(parsedOk > 1000 && refused > 1000, `both outcomes exercised: ${parsedOk} parsed, ${refused} refused`);
});
