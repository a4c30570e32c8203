// The fast chunking engine against the definition: the unrolled gear loop and the parallel chunker
// (worker regions joined at seams, chunk-file.ts) must give exactly the cuts of a byte-at-a-time
// chunker written here from docs/FORMAT.md's words, on data that makes seams hard (random, zeros
// with no content-defined cut at all, periodic, long cut-free runs spanning many regions, sparse
// bytes in zeros) and with region boundaries at every kind of offset. Also the
// pack writer's chunk ranges (a chunk that no longer hashes to its id is WORKTREE_CHANGED) and the
// reader's whole-file reads through a real pack.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import * as zlib from 'node:zlib';
import { isXetError } from '../src/errors';
import { writePack, type PackItem } from '../src/git/pack-writer';
import { sampleEntropy, storedZlib } from '../src/git/pack-worker';
import { AUTO_DEFLATE_MAX_BYTES, chunkLevelFor, parseChunkCompression } from '../src/chunks/compression';
import { buildChunkList } from '../src/chunks/list-tree';
import { pointerOf } from '../src/chunks/pointer';
import { ChunkList, readRange } from '../src/chunks/reader';
import { chunkFile } from '../src/chunks/chunk-file';
import { chunkSizes } from '../src/chunks/gear';
import { chunkParamsFor, type ChunkParams } from '../src/chunks/params';
import { git, initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

/** Deterministic pseudo-random bytes. */
function bytes(n: number, seed: string): Buffer {
  const out = Buffer.alloc(n);
  let at = 0;
  for (let i = 0; at < n; i++) at += crypto.createHash('sha256').update(`${seed}:${i}`).digest().copy(out, at);
  return out;
}

/** gear/v1 one byte at a time, as docs/FORMAT.md words it (its own table, from SHA-256). */
function referenceSizes(data: Uint8Array, p: ChunkParams): number[] {
  const table = Array.from({ length: 256 }, (_, i) =>
    crypto.createHash('sha256').update(`git-xet gear/v1 ${i}`).digest().readUInt32LE(0),
  );
  const bits = Math.round(Math.log2(p.avg));
  const top = (b: number) => Number((((1n << BigInt(b)) - 1n) << BigInt(32 - b)) & 0xffffffffn);
  const maskS = top(bits + 2);
  const maskL = top(bits - 2);
  const sizes: number[] = [];
  let len = 0;
  let h = 0;
  for (let i = 0; i < data.length; i++) {
    len++;
    if (len <= p.min) continue; // the first min bytes are not hashed
    h = (h * 2 + table[data[i]]) % 2 ** 32;
    const mask = len - 1 < p.avg ? maskS : maskL; // the chunk was shorter than avg before this byte
    if ((h & mask) >>> 0 === 0 || len === p.max) {
      sizes.push(len);
      len = 0;
      h = 0;
    }
  }
  if (len) sizes.push(len);
  return sizes;
}

/** Inputs that are hard for a chunker that guesses where a chunk starts. */
function inputs(n: number): [string, Buffer][] {
  const random = bytes(n, 'random');
  const zeros = Buffer.alloc(n);
  const periodic = Buffer.alloc(n);
  const pattern = bytes(1000, 'period');
  for (let i = 0; i < n; i += pattern.length) pattern.copy(periodic, i);
  // Random islands in long zero runs: many regions in a row with only forced (max) cuts.
  const islands = Buffer.alloc(n);
  for (let i = 0; i < n; i += 300_000) bytes(20_000, `island${i}`).copy(islands, i);
  // Sparse: zeros with one random byte every 5,000 (cuts only where a byte perturbs the hash).
  const sparse = Buffer.alloc(n);
  const r = bytes(n, 'sparse');
  for (let i = 0; i < n; i += 5000) sparse[i] = r[i] | 1;
  // A period of just over `max`: every forced cut sees the same bytes at another phase.
  const longPeriod = Buffer.alloc(n);
  const lp = bytes(65_537, 'long');
  for (let i = 0; i < n; i += lp.length) lp.copy(longPeriod, i);
  // Random data with zero runs of every length around min, avg and max.
  const mixed = Buffer.from(random);
  let at = 0;
  for (const run of [2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 65535, 65536, 65537, 131072]) {
    at += 37_000;
    if (at + run < n) mixed.fill(0, at, at + run);
    at += run;
  }
  return [
    ['random', random],
    ['zeros', zeros],
    ['periodic', periodic],
    ['islands', islands],
    ['sparse', sparse],
    ['long period', longPeriod],
    ['mixed', mixed],
  ];
}

const P = chunkParamsFor(1 << 20);

test('the unrolled gear loop cuts exactly where the byte-at-a-time definition does', () => {
  for (const [name, data] of inputs(1_500_000)) {
    assert.deepEqual(chunkSizes(data, P), referenceSizes(data, P), name);
  }
  // Larger size classes too (the masks and skips change with the average).
  const big = bytes(3_000_000, 'classes');
  for (const size of [4 << 30, 8 << 30, 32 << 30]) {
    const p = chunkParamsFor(size);
    assert.deepEqual(chunkSizes(big, p), referenceSizes(big, p), `avg ${p.avg}`);
  }
});

test('parallel chunking equals sequential chunking, whatever the data and wherever the seams fall', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo').dir;
    const file = sb.path('f.bin');
    const seeds = bytes(64, 'regions');
    for (const [name, data] of inputs(1_200_000)) {
      fs.writeFileSync(file, data);
      const seq = await chunkFile(file, { format: 'sha1', workers: 0 });
      assert.equal(seq.blob, git(sb, r, ['hash-object', file]).trim(), name);
      assert.deepEqual(
        seq.chunks.map((c) => c.size),
        referenceSizes(data, seq.params),
        name,
      );
      for (const c of seq.chunks.slice(0, 50)) {
        const expect = crypto
          .createHash('sha1')
          .update(`blob ${c.size}\0`)
          .update(data.subarray(c.offset, c.offset + c.size))
          .digest('hex');
        assert.equal(c.oid, expect, `${name}: chunk at ${c.offset}`);
      }
      // Region sizes below min, near min/avg/max, odd primes and one region per file.
      const sizes = [1999, 2048, 4096, 8191, 65536, 65537, 100_003, 400_000, 1_200_000];
      sizes.push(5000 + (seeds.readUInt32LE(sizes.length % 60) % 300_000));
      for (const regionBytes of sizes) {
        const par = await chunkFile(file, { format: 'sha1', workers: 2, regionBytes });
        assert.deepEqual(par, seq, `${name}, regions of ${regionBytes} bytes`);
      }
    }
    // sha256 repositories name chunks with sha256.
    const data = inputs(600_000)[0][1];
    fs.writeFileSync(file, data);
    assert.deepEqual(
      await chunkFile(file, { format: 'sha256', workers: 2, regionBytes: 77_777 }),
      await chunkFile(file, { format: 'sha256', workers: 0 }),
    );
  } finally {
    sb.cleanup();
  }
});

test('an empty file and a file smaller than a region chunk the same in parallel', async () => {
  const sb = createSandbox();
  try {
    for (const n of [0, 1, 2047, 2048, 2049, 4095, 4096, 4097, 70_000]) {
      const file = sb.path(`f${n}`);
      fs.writeFileSync(file, bytes(n, `small${n}`));
      const seq = await chunkFile(file, { format: 'sha1', workers: 0 });
      assert.deepEqual(await chunkFile(file, { format: 'sha1', workers: 2, regionBytes: 4096 }), seq, `${n} bytes`);
      assert.equal(
        seq.chunks.reduce((a, c) => a + c.size, 0),
        n,
      );
      assert.equal(seq.chunks.length, n === 0 ? 0 : chunkSizes(fs.readFileSync(file), P).length);
    }
  } finally {
    sb.cleanup();
  }
});

// Review 43: a large file gone (or a symlink, or a directory) between the listing and its chunking
// is the worktree changing under the capture, not an internal error.
test('a file gone, a symlink or a directory where a file was listed: WORKTREE_CHANGED', async () => {
  const sb = createSandbox();
  try {
    fs.writeFileSync(sb.path('target'), bytes(70_000, 'target'));
    fs.symlinkSync(sb.path('target'), sb.path('link'));
    fs.mkdirSync(sb.path('dir'));
    for (const name of ['gone', 'link', 'dir', 'gone/below']) {
      await assert.rejects(chunkFile(sb.path(name), { format: 'sha1' }), (e: unknown) => {
        assert.ok(isXetError(e, 'WORKTREE_CHANGED'), `${name}: ${String(e)}`);
        return true;
      });
    }
  } finally {
    sb.cleanup();
  }
});

test('chunks packed as file ranges read back byte for byte at levels 0 and 1; a changed chunk, a missing one', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo').dir;
    const file = sb.path('big.bin');
    // Half compressible text, half random: both sides of the stored-if-random rule.
    const text = Buffer.from('INSERT INTO t VALUES (1, "hello world");\n'.repeat(40_000));
    const data = Buffer.concat([text, bytes(9 << 20, 'rand')]);
    fs.writeFileSync(file, data);
    assert.ok(sampleEntropy(text) < 7.5 && sampleEntropy(bytes(8192, 'x')) > 7.5);
    const cf = await chunkFile(file, { format: 'sha1' });
    const { list, segments } = buildChunkList(cf.chunks, 'sha1');
    const pointer = pointerOf(cf, list.oid);
    const ctx = { git: { cwd: r }, format: 'sha1' as const };
    const sizes: number[] = [];
    // Level 0, level 1, and the default (`auto`: a pack of a few MiB of chunks is deflated at 1).
    for (const level of [0, 1, undefined]) {
      fs.rmSync(`${r}/.git/objects/pack`, { recursive: true, force: true });
      const items: PackItem[] = cf.chunks.map((c) => ({
        oid: c.oid,
        type: 'blob',
        file,
        range: { offset: c.offset, size: c.size },
      }));
      for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
      const opts = level === undefined ? {} : { chunkLevel: level };
      const res = await writePack(`${r}/.git/objects`, 'sha1', items, 1, undefined, opts);
      sizes.push(res.bytes);
      git(sb, r, ['verify-pack', `${r}/.git/objects/pack/${res.pack}.idx`]);
      const out = new PassThrough();
      const parts: Buffer[] = [];
      out.on('data', (b: Buffer) => parts.push(b));
      const cl = await ChunkList.fromPointer(pointer, 'big.bin', ctx);
      assert.equal(await readRange(cl, 0, data.length, out, ctx), data.length);
      assert.ok(Buffer.concat(parts).equals(data), `level ${level}`);
      const mid = new PassThrough();
      const got: Buffer[] = [];
      mid.on('data', (b: Buffer) => got.push(b));
      await readRange(cl, 1_000_001, 3_500_000, mid, ctx);
      assert.ok(Buffer.concat(got).equals(data.subarray(1_000_001, 3_500_000)));
    }
    // Level 1 deflates the text and stores the random half; level 0 stores everything.
    assert.ok(sizes[1] < sizes[0] - text.length / 2, `packs of ${sizes.join(' and ')} bytes`);
    assert.ok(sizes[1] > 9 << 20);
    assert.equal(sizes[2], sizes[1], 'the default deflates a small capture at level 1');
    // A chunk that no longer hashes to its id: WORKTREE_CHANGED, and no pack is published.
    fs.rmSync(`${r}/.git/objects/pack`, { recursive: true, force: true });
    const edited = Buffer.from(data);
    edited[cf.chunks[3].offset + 5] ^= 1;
    fs.writeFileSync(file, edited);
    await assert.rejects(
      writePack(
        `${r}/.git/objects`,
        'sha1',
        cf.chunks.map((c) => ({ oid: c.oid, type: 'blob', file, range: { offset: c.offset, size: c.size } })),
      ),
      (e: unknown) => isXetError(e) && e.code === 'WORKTREE_CHANGED',
    );
    assert.deepEqual(fs.readdirSync(`${r}/.git/objects/pack`), []);
    // The list without one of its chunks: a read that needs it is CHUNK_MISSING, one that does not
    // still reads.
    fs.writeFileSync(file, data);
    const lacking: PackItem[] = cf.chunks
      .filter((_, i) => i !== 7)
      .map((c) => ({ oid: c.oid, type: 'blob', file, range: { offset: c.offset, size: c.size } }));
    for (const t of [list, ...segments]) lacking.push({ oid: t.oid, type: 'tree', data: t.data });
    await writePack(`${r}/.git/objects`, 'sha1', lacking);
    const cl = await ChunkList.fromPointer(pointer, 'big.bin', ctx);
    await assert.rejects(
      readRange(cl, 0, data.length, new PassThrough().resume(), ctx),
      (e: unknown) => isXetError(e) && e.code === 'CHUNK_MISSING',
    );
    assert.equal(await readRange(cl, 0, cf.chunks[7].offset, new PassThrough().resume(), ctx), cf.chunks[7].offset);
  } finally {
    sb.cleanup();
  }
});

test('xet.chunk.compression: auto, levels, names, and a typed refusal', () => {
  assert.equal(parseChunkCompression(undefined), 'auto');
  assert.equal(parseChunkCompression(' Auto'), 'auto');
  assert.equal(parseChunkCompression('default'), 'auto');
  assert.equal(parseChunkCompression('0'), 0);
  assert.equal(parseChunkCompression('fast'), 1);
  assert.equal(parseChunkCompression(' 6 '), 6);
  assert.equal(parseChunkCompression('stored'), 0);
  // auto: level 1 up to AUTO_DEFLATE_MAX_BYTES of chunks in the pack, stored beyond; levels as given.
  assert.equal(chunkLevelFor('auto', 54 << 20), 1);
  assert.equal(chunkLevelFor('auto', AUTO_DEFLATE_MAX_BYTES), 1);
  assert.equal(chunkLevelFor('auto', AUTO_DEFLATE_MAX_BYTES + 1), 0);
  assert.equal(chunkLevelFor('auto', 1 << 30), 0);
  assert.equal(chunkLevelFor(0, 1), 0);
  assert.equal(chunkLevelFor(6, 1 << 30), 6);
  assert.throws(
    () => parseChunkCompression('11'),
    (e: unknown) => isXetError(e) && e.code === 'CONFIG_INVALID',
  );
});

test('stored zlib streams of the pack worker inflate with zlib (its adler32 checks), at every block edge', () => {
  for (const n of [0, 1, 15, 16, 17, 5551, 5552, 5553, 65535, 65536, 65537, 200_000, 1 << 20]) {
    // All 0xff is the adler32 sums' worst case (the largest `b` before a reduction).
    for (const data of [crypto.randomBytes(n), Buffer.alloc(n, 0xff)]) {
      const out = zlib.inflateSync(Buffer.from(storedZlib(data)));
      assert.ok(out.equals(data), `${n} bytes`);
    }
  }
});
