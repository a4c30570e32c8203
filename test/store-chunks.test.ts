// A xet store that serves chunks on demand: pushes publish each pack's index (packs/pack-<h>.idx),
// store gc and fsck --store keep them with their packs; the pack reader reads single objects by id
// out of packs git itself made (ofs- and ref-deltas, 64-bit offsets), refuses a forged index by
// hash and oversized objects before inflating; a lazy copy from a store holds everything but the
// chunks, and a 4 KiB range read copies only the chunks it overlaps.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { isXetError } from '../src/errors';
import { chunkFile } from '../src/chunks/chunk-file';
import { buildChunkList, chunksTree } from '../src/chunks/list-tree';
import { pointerOf, serializePointer } from '../src/chunks/pointer';
import { ChunkList, readRange } from '../src/chunks/reader';
import { PackIndex, PackReader } from '../src/git/pack-reader';
import { writePack, type PackItem } from '../src/git/pack-writer';
import { lazyStoreFetch, StoreChunkSource, xetLazyRestore } from '../src/remote/lazy-store';
import { openChunkSource, readLazy, type LazyRecord } from '../src/chunks/source';
import { chunkedFiles } from '../src/chunks/snapshot-files';
import { missingChunks } from '../src/snapshot/lazy';
import { readSnapshot } from '../src/snapshot/store';
import { git, gitTry, initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { capture, describeRun, expectExit, parseJson, xet } from './support/xet';

const XET = (store: string) => `xet::${store}`;

/** The pack (and its index) of a repository repacked into one. */
function onlyPack(r: Repo): { pack: string; idx: string } {
  const dir = path.join(r.dir, '.git', 'objects', 'pack');
  const packs = fs.readdirSync(dir).filter((n) => n.endsWith('.pack'));
  assert.equal(packs.length, 1, `one pack in ${dir}: ${packs.join(', ')}`);
  const pack = path.join(dir, packs[0]);
  return { pack, idx: pack.replace(/\.pack$/, '.idx') };
}

/** A history of small edits to the same files: git deltifies them against each other. */
function deltaHistory(sb: Sandbox): Repo {
  const r = initRepo(sb, 'hist');
  let text = Array.from({ length: 400 }, (_, i) => `line ${i} ${'x'.repeat(i % 37)}`);
  for (let i = 0; i < 40; i++) {
    text = text.map((l, j) => (j % 40 === i ? `${l} edit ${i}` : l));
    r.commit(`edit ${i}`, { 'a.txt': `${text.join('\n')}\n`, [`d${i % 3}/b.txt`]: `${text.slice(i).join('\n')}\n` });
  }
  return r;
}

function allObjects(r: Repo): { oid: string; type: string }[] {
  return r
    .git('cat-file', '--batch-all-objects', '--batch-check=%(objectname) %(objecttype)')
    .trim()
    .split('\n')
    .map((l) => {
      const [oid, type] = l.split(' ');
      return { oid, type };
    });
}

/** Max delta chain length `git verify-pack -v` reports (0: no deltas). */
function maxChain(r: Repo, idx: string): number {
  const out = r.git('verify-pack', '-v', idx);
  let max = 0;
  for (const m of out.matchAll(/^chain length = (\d+):/gm)) max = Math.max(max, Number(m[1]));
  return max;
}

function checkEveryObject(r: Repo, reader: PackReader): number {
  let n = 0;
  for (const { oid, type } of allObjects(r)) {
    const got = reader.read(oid);
    assert.ok(got, `${oid} is found`);
    assert.equal(got.type, type);
    const body = gitBuffer(r, ['cat-file', type, oid]);
    assert.ok(got.data.equals(body), `${oid} reads back as git reads it`);
    n++;
  }
  return n;
}

function gitBuffer(r: Repo, args: string[]): Buffer {
  const res = gitTry(r.sb, r.dir, args);
  assert.equal(res.status, 0, res.stderr.toString());
  return res.stdout;
}

test('the pack reader reads every object of packs git made with ofs- and ref-deltas and 64-bit offsets', () => {
  const sb = createSandbox();
  try {
    const r = deltaHistory(sb);
    r.git('repack', '-a', '-d', '-f', '--depth=10', '-q');
    let { pack, idx } = onlyPack(r);
    const depth = maxChain(r, idx);
    assert.ok(depth >= 2 && depth <= 10, `git made delta chains (longest ${depth})`);
    let reader = PackReader.open(pack, idx, 'sha1');
    const n = checkEveryObject(r, reader);
    assert.ok(n > 100, `${n} objects read`);
    assert.equal(reader.read('0'.repeat(40)), null, 'an id the index lacks is null');
    reader.close();

    // ref-deltas (the base named by id, found through the index).
    r.git('-c', 'repack.useDeltaBaseOffset=false', 'repack', '-a', '-d', '-f', '--depth=10', '-q');
    ({ pack, idx } = onlyPack(r));
    assert.ok(maxChain(r, idx) >= 2, 'ref-delta chains');
    assert.match(r.git('verify-pack', '-v', idx), /^[0-9a-f]{40} (blob|tree) +\d+ \d+ \d+ \d+ [0-9a-f]{40}$/m);
    reader = PackReader.open(pack, idx, 'sha1');
    checkEveryObject(r, reader);
    reader.close();

    // 64-bit offsets: git writes every offset above 0 into the large table with --index-version=2,0.
    const big = sb.path('big.idx');
    r.git('index-pack', '--index-version=2,0', '-o', big, pack);
    assert.ok(fs.statSync(big).size > fs.statSync(idx).size, 'the large-offset table is there');
    reader = PackReader.open(pack, big, 'sha1');
    checkEveryObject(r, reader);
    reader.close();
  } finally {
    sb.cleanup();
  }
});

test('the pack reader reads sha256 packs', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'sha256', ['--object-format=sha256']);
    for (let i = 0; i < 6; i++) r.commit(`c${i}`, { 'a.txt': `${'line\n'.repeat(200)}${i}\n` });
    r.git('repack', '-a', '-d', '-f', '--depth=10', '-q');
    const { pack, idx } = onlyPack(r);
    const reader = PackReader.open(pack, idx, 'sha256');
    assert.ok(checkEveryObject(r, reader) >= 18);
    assert.throws(
      () => PackReader.open(pack, idx, 'sha1'),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
    reader.close();
  } finally {
    sb.cleanup();
  }
});

test('a forged index is refused by hash, sizes are checked before inflating, and an index of another pack is refused', () => {
  const sb = createSandbox();
  try {
    const r = deltaHistory(sb);
    r.git('repack', '-a', '-d', '-f', '--depth=10', '-q');
    const { pack, idx } = onlyPack(r);
    const objs = allObjects(r);
    const blobs = objs.filter((o) => o.type === 'blob');
    // Swap the offsets of the first two objects in the index: each id now names the other's entry.
    const bytes = fs.readFileSync(idx);
    const n = bytes.readUInt32BE(8 + 255 * 4);
    const offsets = 8 + 1024 + n * 24;
    const a = bytes.readUInt32BE(offsets);
    bytes.writeUInt32BE(bytes.readUInt32BE(offsets + 4), offsets);
    bytes.writeUInt32BE(a, offsets + 4);
    const forged = sb.path('forged.idx');
    fs.writeFileSync(forged, bytes);
    const first = bytes.toString('hex', 8 + 1024, 8 + 1024 + 20);
    const reader = PackReader.open(pack, forged, 'sha1');
    assert.throws(
      () => reader.read(first),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH' && /hashes to/.test(e.message),
    );
    reader.close();

    // An object bigger than the reader allows is refused from its header, before anything inflates.
    const small = PackReader.open(pack, idx, 'sha1', { maxObjectBytes: 64 });
    const large = blobs.find((b) => Number(r.git('cat-file', '-s', b.oid).trim()) > 1000) as { oid: string };
    assert.throws(
      () => small.read(large.oid),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH' && /more than the 64 allowed/.test(e.message),
    );
    small.close();

    // An index of another pack (its trailer names another checksum) is not used at all.
    const other = initRepo(sb, 'other');
    other.commit('one', { f: 'x\n' });
    other.git('repack', '-a', '-d', '-q');
    assert.throws(
      () => PackReader.open(pack, onlyPack(other).idx, 'sha1'),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
    // A fan-out that descends is no index.
    const bad = Buffer.from(fs.readFileSync(idx));
    bad.writeUInt32BE(0xffffff, 8 + 4 * 10);
    fs.writeFileSync(forged, bad);
    assert.throws(
      () => PackIndex.open(forged, 'sha1'),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
  } finally {
    sb.cleanup();
  }
});

/** Snapshot S0 captured by git xet, then S1 = S0 plus `big.bin` stored as chunks (schema v3), made
 * with plumbing the way a capture lays it out (files/ pointer, chunks/ tree, manifest `chunked`). */
async function chunkedSnapshot(
  sb: Sandbox,
  r: Repo,
  data: Buffer,
): Promise<{ snap: string; chunks: { offset: number; size: number; oid: string }[]; pointer: string }> {
  r.commit('base', { 'README.md': 'hello\n', 'src/a.txt': 'a\n' });
  r.write('notes.txt', 'untracked work\n');
  const s0 = capture(sb, r.dir);
  const file = sb.path('big.bin');
  fs.writeFileSync(file, data);
  const cf = await chunkFile(file, { format: 'sha1' });
  const { list, segments } = buildChunkList(cf.chunks, 'sha1');
  const pointer = serializePointer(pointerOf(cf, list.oid));
  const pointerOid = crypto.createHash('sha1').update(`blob ${pointer.length}\0`).update(pointer).digest('hex');
  const manifest0 = JSON.parse(r.git('cat-file', 'blob', `${s0}:manifest.json`)) as Record<string, unknown>;
  const counts = { ...(manifest0.counts as Record<string, number>) };
  counts.files = (counts.files ?? 0) + 1;
  if (typeof counts.bytes === 'number') counts.bytes += cf.size;
  counts.chunkedFiles = 1;
  counts.chunks = cf.chunks.length;
  const manifest = Buffer.from(
    `${JSON.stringify({ ...manifest0, schema: 'xet.snapshot/v3', chunked: ['big.bin'], counts })}\n`,
  );
  const manifestOid = crypto.createHash('sha1').update(`blob ${manifest.length}\0`).update(manifest).digest('hex');
  const top = chunksTree([list.oid], 'sha1');
  const items: PackItem[] = cf.chunks.map((c) => ({
    oid: c.oid,
    type: 'blob',
    data: data.subarray(c.offset, c.offset + c.size),
  }));
  for (const t of [list, ...segments, top]) items.push({ oid: t.oid, type: 'tree', data: t.data });
  items.push({ oid: pointerOid, type: 'blob', data: pointer });
  items.push({ oid: manifestOid, type: 'blob', data: manifest });
  // files/ with the pointer added (entries in git's tree order).
  const files0 = r.git('rev-parse', `${s0}:files`).trim();
  const filesLines = r.git('ls-tree', files0).trim().split('\n');
  filesLines.push(`100644 blob ${pointerOid}\tbig.bin`);
  await writePack(path.join(r.dir, '.git', 'objects'), 'sha1', items);
  const files1 = r.gitInput(`${filesLines.join('\n')}\n`, 'mktree').trim();
  const rootLines = r
    .git('ls-tree', `${s0}^{tree}`)
    .trim()
    .split('\n')
    .map((l) => {
      if (l.endsWith('\tfiles')) return `040000 tree ${files1}\tfiles`;
      if (l.endsWith('\tmanifest.json')) return `100644 blob ${manifestOid}\tmanifest.json`;
      return l;
    });
  rootLines.push(`040000 tree ${top.oid}\tchunks`);
  const root = r.gitInput(`${rootLines.join('\n')}\n`, 'mktree').trim();
  const parents = r.git('rev-list', '--parents', '-n', '1', s0).trim().split(' ').slice(1);
  const message = r.git('log', '-1', '--format=%B', s0);
  const snap = r.gitInput(message, 'commit-tree', root, ...parents.flatMap((p) => ['-p', p])).trim();
  r.git('update-ref', `refs/xet/snapshots/${snap}`, snap);
  return { snap, chunks: cf.chunks, pointer: pointerOid };
}

function pushTo(sb: Sandbox, r: Repo, store: string, id: string): void {
  const res = xet(sb, r.dir, ['push', XET(store), id, '--json']);
  assert.equal(res.status, 0, describeRun(res));
}

function storeFiles(store: string, ext: string): string[] {
  return fs
    .readdirSync(path.join(store, 'packs'))
    .filter((n) => n.endsWith(ext))
    .map((n) => n.slice(0, -ext.length))
    .sort();
}

test('a push publishes each pack with its index (git’s own), fsck --store checks it, store gc keeps and removes it with its pack', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.commit('one', { 'a.txt': 'one\n' });
    const s1 = capture(sb, r.dir);
    const store = sb.path('store');
    pushTo(sb, r, store, s1);
    r.write('b.txt', 'two\n');
    const s2 = capture(sb, r.dir);
    pushTo(sb, r, store, s2);
    const packs = storeFiles(store, '.pack');
    assert.equal(packs.length, 2);
    assert.deepEqual(storeFiles(store, '.idx'), packs, 'every pack has its index');
    for (const p of packs) {
      const mine = sb.path(`${p}.idx`);
      git(sb, sb.root, ['index-pack', '-o', mine, path.join(store, 'packs', `${p}.pack`)]);
      assert.ok(fs.readFileSync(mine).equals(fs.readFileSync(path.join(store, 'packs', `${p}.idx`))), `${p}.idx`);
    }
    let check = xet(sb, r.dir, ['fsck', '--store', store, '--json']);
    expectExit(check, 0);
    assert.equal(parseJson(check).indexed, 2);

    // A forged index is damage fsck names (readers would refuse it by hash anyway).
    const idx = path.join(store, 'packs', `${packs[0]}.idx`);
    const good = fs.readFileSync(idx);
    const bad = Buffer.from(good);
    bad[8 + 1024 + 3] ^= 0xff;
    fs.rmSync(idx);
    fs.writeFileSync(idx, bad);
    check = xet(sb, r.dir, ['fsck', '--store', store, '--json']);
    expectExit(check, 1);
    assert.ok(
      (parseJson(check).problems as string[]).some((p) => p.includes(`${packs[0]}.idx is not the index of its pack`)),
      check.stdout,
    );
    fs.rmSync(idx);
    fs.writeFileSync(idx, good);

    // Compaction: the new pack comes with its index, the old packs' indexes go with them.
    const gc = xet(sb, r.dir, ['gc', '--store', store, '--grace', '0', '--json']);
    expectExit(gc, 0);
    const compacted = parseJson(gc).packs.compacted as string;
    assert.deepEqual(storeFiles(store, '.pack'), [compacted]);
    assert.deepEqual(storeFiles(store, '.idx'), [compacted]);
    check = xet(sb, r.dir, ['fsck', '--store', store, '--json']);
    expectExit(check, 0);
    assert.equal(parseJson(check).indexed, 1);
  } finally {
    sb.cleanup();
  }
});

test('a lazy copy from a store holds all but the chunks; a 4 KiB range read copies only the chunks it overlaps', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    const data = pseudoRandomBytes(3 * 1024 * 1024 + 777, 11);
    const { snap, chunks, pointer } = await chunkedSnapshot(sb, r, data);
    assert.ok(chunks.length > 100, `${chunks.length} chunks`);
    const store = sb.path('store');
    pushTo(sb, r, store, snap);
    assert.deepEqual(storeFiles(store, '.idx'), storeFiles(store, '.pack'));

    const copy = initRepo(sb, 'copy');
    const opts = { cwd: copy.dir, env: { GIT_DIR: path.join(copy.dir, '.git') } };
    const got = await lazyStoreFetch(XET(store), snap, opts, sb.root);
    assert.equal(got.url, XET(store));
    assert.deepEqual(got.imported, []);
    const storeBytes = storeFiles(store, '.pack').reduce(
      (n, p) => n + fs.statSync(path.join(store, 'packs', `${p}.pack`)).size,
      0,
    );
    assert.ok(got.bytesRead < storeBytes / 4, `the copy read ${got.bytesRead} of the store's ${storeBytes} bytes`);
    assert.equal(copy.git('rev-parse', `refs/xet/snapshots/${snap}`).trim(), snap);
    // Exactly the chunks are missing: everything else the snapshot reaches is here.
    const missing = copy
      .git('rev-list', '--objects', '--missing=print', snap)
      .split('\n')
      .filter((l) => l.startsWith('?'))
      .map((l) => l.slice(1))
      .sort();
    assert.deepEqual(missing, [...new Set(chunks.map((c) => c.oid))].sort());
    const present = copy.git('rev-list', '--objects', '--missing=allow-any', snap).trim().split('\n').length;
    assert.equal(got.objects, present, 'every object it copied is one the snapshot reaches');
    // The copy reads as the snapshot it is: manifest, files/ pointer, chunks/ tree.
    const snapshot = await readSnapshot(snap, opts);
    assert.deepEqual([...(await chunkedFiles(snapshot, opts)).keys()], ['big.bin']);

    // A range across a chunk boundary needs the two chunks on either side, and only those.
    const edge = chunks[40].offset - 2048;
    const two = new StoreChunkSource(store, { gitDir: path.join(copy.dir, '.git'), git: opts, format: 'sha1' });
    const across = await missingChunks(
      await (await ChunkList.open(pointer, 'big.bin', { git: opts, format: 'sha1' })).chunksFor(edge, edge + 4096),
      opts,
    );
    assert.equal(across.length, 2);
    await two.fetch(across.map((c) => c.oid));
    assert.equal(two.stats.objects, 2);
    const acrossBytes = across.reduce((n, c) => n + c.size, 0);
    assert.ok(two.stats.bytesRead < acrossBytes + 4096, `${two.stats.bytesRead} bytes read for ${acrossBytes}`);
    process.stdout.write(
      `# 4 KiB range across a boundary: 2 chunks (${acrossBytes} bytes), ${two.stats.bytesRead} bytes read\n`,
    );

    // A 4 KiB read in the middle of the file: the reader finds its chunks in the local list trees,
    // the source copies just those (at most 2) out of the store.
    const ctx = { git: opts, format: 'sha1' as const };
    const list = await ChunkList.open(pointer, 'big.bin', ctx);
    const start = Math.floor(data.length / 2) - 100;
    const need = await missingChunks(await list.chunksFor(start, start + 4096), opts);
    assert.ok(need.length >= 1 && need.length <= 2, `${need.length} chunks overlap`);
    // Before the source is asked, the chunk is simply not there.
    await assert.rejects(
      readRange(list, start, start + 4096, new PassThrough().resume(), ctx),
      (e: unknown) => isXetError(e) && e.code === 'CHUNK_MISSING',
    );
    const source = new StoreChunkSource(store, { gitDir: path.join(copy.dir, '.git'), git: opts, format: 'sha1' });
    await source.fetch(need.map((c) => c.oid));
    assert.equal(source.stats.objects, need.length, 'only the needed chunks are copied');
    const chunkBytes = need.reduce((n, c) => n + c.size, 0);
    assert.ok(
      source.stats.bytesRead < chunkBytes + 4096,
      `read ${source.stats.bytesRead} bytes from the store for ${chunkBytes} bytes of chunks`,
    );
    process.stdout.write(
      `# 4 KiB range: ${need.length} chunks (${chunkBytes} bytes) copied, ${source.stats.bytesRead} bytes read from the store; ` +
        `lazy copy read ${got.bytesRead} of ${storeBytes} pack bytes\n`,
    );
    const out = new PassThrough();
    const parts: Buffer[] = [];
    out.on('data', (b: Buffer) => parts.push(b));
    await readRange(list, start, start + 4096, out, ctx);
    assert.ok(Buffer.concat(parts).equals(data.subarray(start, start + 4096)));
    // Still missing: every other chunk.
    assert.equal(
      (await missingChunks(await list.chunksFor(0, data.length), opts)).length,
      new Set(chunks.map((c) => c.oid)).size - need.length - 2,
    );

    // restore --lazy's hook for stores: the same copy, and a lazy record naming the store, which
    // opens as this chunk source.
    const copy2 = initRepo(sb, 'copy2');
    const opts2 = { cwd: copy2.dir, env: { GIT_DIR: path.join(copy2.dir, '.git') } };
    const hook = xetLazyRestore(`xet::${path.relative(sb.root, store)}`, sb.root, async (s) => {
      assert.equal(s.oid, snap);
      return ['big.bin'];
    });
    await hook.fetch(snap, opts2);
    await hook.afterLay(await readSnapshot(snap, opts2), copy2.dir, '', opts2);
    await hook.afterOrigin(path.join(copy2.dir, '.git'), opts2);
    assert.deepEqual(hook.result().deferred, ['big.bin']);
    assert.equal(hook.result().source, XET(store), 'the record names the store by its absolute path');
    assert.equal(hook.result().store?.objects, got.objects);
    const record = readLazy(path.join(copy2.dir, '.git'));
    assert.deepEqual(record?.source, { kind: 'xet', url: XET(store) });
    const opened = await openChunkSource(record as LazyRecord, {
      gitDir: path.join(copy2.dir, '.git'),
      git: opts2,
      format: 'sha1',
    });
    assert.ok(opened instanceof StoreChunkSource);
    await opened.fetch([chunks[0].oid]);
    assert.equal(gitTry(sb, copy2.dir, ['cat-file', '-e', chunks[0].oid]).status, 0);
  } finally {
    sb.cleanup();
  }
});

test('through a forged store index nothing is copied; a pack without an index is copied whole, as before', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    const data = pseudoRandomBytes(1024 * 1024, 5);
    const { snap, chunks } = await chunkedSnapshot(sb, r, data);
    const store = sb.path('store');
    pushTo(sb, r, store, snap);
    const [pack] = storeFiles(store, '.pack');
    const idxFile = path.join(store, 'packs', `${pack}.idx`);
    const good = fs.readFileSync(idxFile);
    // Point the first chunk's id at another entry (the offsets of two neighbours swapped).
    const n = good.readUInt32BE(8 + 255 * 4);
    const names = good.subarray(8 + 1024, 8 + 1024 + n * 20);
    const want = chunks[0].oid;
    let i = 0;
    while (names.toString('hex', i * 20, i * 20 + 20) !== want) i++;
    const j = i === 0 ? 1 : i - 1;
    const forged = Buffer.from(good);
    const at = 8 + 1024 + n * 24;
    forged.writeUInt32BE(good.readUInt32BE(at + j * 4), at + i * 4);
    forged.writeUInt32BE(good.readUInt32BE(at + i * 4), at + j * 4);
    fs.rmSync(idxFile);
    fs.writeFileSync(idxFile, forged);
    const copy = initRepo(sb, 'copy');
    const opts = { cwd: copy.dir, env: { GIT_DIR: path.join(copy.dir, '.git') } };
    const source = new StoreChunkSource(store, { gitDir: path.join(copy.dir, '.git'), git: opts, format: 'sha1' });
    await assert.rejects(source.fetch([want]), (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH');
    assert.notEqual(gitTry(sb, copy.dir, ['cat-file', '-e', want]).status, 0, 'nothing was copied');

    // Without the index: the whole pack comes, checked by git, and the copy is complete.
    fs.rmSync(idxFile);
    const got = await lazyStoreFetch(XET(store), snap, opts, sb.root);
    assert.deepEqual(got.imported, [pack]);
    assert.equal(copy.git('rev-list', '--objects', '--missing=print', snap).includes('\n?'), false);
    // fsck --store: a pack without an index is fine.
    const check = xet(sb, r.dir, ['fsck', '--store', store, '--json']);
    expectExit(check, 0);
    assert.equal(parseJson(check).indexed, 0);
  } finally {
    sb.cleanup();
  }
});
