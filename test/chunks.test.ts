// The chunker and the chunk list, against git itself: cuts are content-defined (an insertion
// re-cuts only near it), independent of how the bytes are fed, within the sizes; the list trees
// built here are trees git reads back entry for entry; a file read back through the reader is the
// file, and a forged list or chunk is refused.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { isXetError } from '../src/errors';
import { writePack, type PackItem } from '../src/git/pack-writer';
import { chunkFile } from '../src/chunks/chunk-file';
import { chunkSizes, GearChunker } from '../src/chunks/gear';
import { buildChunkList, offsetName } from '../src/chunks/list-tree';
import { chunkParamsFor, parseChunkThreshold } from '../src/chunks/params';
import { parsePointer, pointerOf, serializePointer } from '../src/chunks/pointer';
import { ChunkList, packsHolding, readRange } from '../src/chunks/reader';
import { LocalPacks } from '../src/chunks/local-packs';
import { native } from '../src/native';
import { PackReader } from '../src/git/pack-reader';
import { writeChunkedFile, writeChunkedFiles } from '../src/snapshot/lay-chunked';
import { finishSparse, writeSparse } from '../src/snapshot/sparse-write';
import { git, initRepo } from './support/git';
import { createSandbox } from './support/sandbox';

/** Deterministic pseudo-random bytes (tests must not depend on luck). */
function bytes(n: number, seed: string): Buffer {
  const out = Buffer.alloc(n);
  let at = 0;
  for (let i = 0; at < n; i++) {
    const h = crypto.createHash('sha256').update(`${seed}:${i}`).digest();
    at += h.copy(out, at);
  }
  return out;
}

test('cuts are within the sizes, the same however the bytes are fed, and local to an edit', () => {
  const p = chunkParamsFor(32 << 20);
  const data = bytes(4 << 20, 'a');
  const sizes = chunkSizes(data, p);
  assert.equal(
    sizes.reduce((a, b) => a + b, 0),
    data.length,
  );
  sizes.slice(0, -1).forEach((s) => assert.ok(s >= p.min && s <= p.max, `chunk of ${s} bytes`));
  const mean = data.length / sizes.length;
  assert.ok(mean > p.avg * 0.7 && mean < p.avg * 1.6, `mean chunk ${mean} for avg ${p.avg}`);
  // Fed in odd pieces: the same cuts.
  const c = new GearChunker(p);
  const cuts: number[] = [];
  let base = 0;
  for (const step of [1, 7, 4095, 65537, 3, 1 << 20]) {
    const part = data.subarray(base, Math.min(data.length, base + step));
    const local: number[] = [];
    c.push(part, local);
    for (const e of local) cuts.push(base + e);
    base += part.length;
  }
  const rest: number[] = [];
  c.push(data.subarray(base), rest);
  for (const e of rest) cuts.push(base + e);
  let prev = 0;
  const fed = cuts.map((e) => {
    const s = e - prev;
    prev = e;
    return s;
  });
  if (data.length > prev) fed.push(data.length - prev);
  assert.deepEqual(fed, sizes);
  // 100 bytes inserted at the start: all but the first few chunks are the same chunks.
  const edited = Buffer.concat([bytes(100, 'ins'), data]);
  const hashes = (buf: Buffer, ss: number[]): Set<string> => {
    const out = new Set<string>();
    let at = 0;
    for (const s of ss) {
      out.add(
        crypto
          .createHash('sha1')
          .update(buf.subarray(at, at + s))
          .digest('hex'),
      );
      at += s;
    }
    return out;
  };
  const before = hashes(data, sizes);
  const after = hashes(edited, chunkSizes(edited, p));
  const fresh = [...after].filter((h) => !before.has(h)).length;
  assert.ok(fresh <= 2, `${fresh} new chunks after a 100-byte insertion`);
});

test('the threshold setting: sizes with units, off, and a typed refusal', () => {
  assert.equal(parseChunkThreshold(undefined), 8 << 20);
  assert.equal(parseChunkThreshold('16m'), 16 << 20);
  assert.equal(parseChunkThreshold('1GiB'), 1 << 30);
  assert.equal(parseChunkThreshold('off'), null);
  assert.throws(
    () => parseChunkThreshold('12 parsecs'),
    (e: unknown) => isXetError(e) && e.code === 'CONFIG_INVALID',
  );
});

test('a chunked file round-trips through a pack git verifies, and every range reads back exactly', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo').dir;
    const file = sb.path('big.bin');
    const data = bytes(3 * 1024 * 1024 + 123, 'file');
    fs.writeFileSync(file, data);
    const cf = await chunkFile(file, { format: 'sha1' });
    assert.equal(cf.blob, git(sb, r, ['hash-object', file]).trim());
    const { list, segments } = buildChunkList(cf.chunks, 'sha1');
    const items: PackItem[] = cf.chunks.map((c) => ({
      oid: c.oid,
      type: 'blob',
      data: data.subarray(c.offset, c.offset + c.size),
    }));
    for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
    await writePack(`${r}/.git/objects`, 'sha1', items);
    // git reads the list as the tree it is.
    const names = git(sb, r, ['ls-tree', '-r', '--name-only', list.oid]).trim().split('\n');
    assert.equal(names.length, cf.chunks.length);
    assert.equal(names[0], `${offsetName(0)}/${offsetName(0)}`);
    const pointer = pointerOf(cf, list.oid);
    assert.deepEqual(parsePointer(serializePointer(pointer), 'sha1', 'big.bin'), pointer);
    const ctx = { git: { cwd: r }, format: 'sha1' as const };
    const cl = await ChunkList.fromPointer(pointer, 'big.bin', ctx);
    const read = async (s: number, e: number): Promise<Buffer> => {
      const out = new PassThrough();
      const parts: Buffer[] = [];
      out.on('data', (b: Buffer) => parts.push(b));
      await readRange(cl, s, e, out, ctx);
      return Buffer.concat(parts);
    };
    assert.ok((await read(0, data.length)).equals(data));
    const c5 = cf.chunks[5];
    for (const [s, e] of [
      [0, 1],
      [c5.offset, c5.offset + c5.size],
      [c5.offset - 1, c5.offset + 1],
      [data.length - 10, data.length + 100],
      [17, 17],
    ]) {
      assert.ok((await read(s, e)).equals(data.subarray(s, e)), `range ${s}-${e}`);
    }
    // A pointer whose blob id is wrong: the whole-file read says so.
    const forged = await ChunkList.fromPointer({ ...pointer, blob: '0'.repeat(40) }, 'big.bin', ctx);
    await assert.rejects(
      readRange(forged, 0, data.length, new PassThrough().resume(), ctx),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
    // Withheld (chunks not hashed one by one; the whole-file hash proves them): the same bytes, and
    // the same refusal of a wrong blob id; never for a part of the file.
    const withheld = new PassThrough();
    const got: Buffer[] = [];
    withheld.on('data', (b: Buffer) => got.push(b));
    await readRange(cl, 0, data.length, withheld, ctx, { withheld: true });
    assert.ok(Buffer.concat(got).equals(data));
    await assert.rejects(
      readRange(forged, 0, data.length, new PassThrough().resume(), ctx, { withheld: true }),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
    await assert.rejects(readRange(cl, 1, data.length, new PassThrough().resume(), ctx, { withheld: true }));
    // Restore's writer under a wrong blob id: INTEGRITY_MISMATCH, and nothing under the real name
    // nor a temporary file left beside it.
    const wt = sb.path('wt');
    fs.mkdirSync(wt);
    const entry = { path: 'd/big.bin', mode: '100644', pointerOid: '1'.repeat(40) };
    await assert.rejects(
      writeChunkedFiles(wt, [{ ...entry, pointer: { ...pointer, blob: '0'.repeat(40) } }], ctx),
      (e: unknown) => isXetError(e) && e.code === 'INTEGRITY_MISMATCH',
    );
    assert.deepEqual(fs.readdirSync(`${wt}/d`), []);
    await writeChunkedFiles(wt, [{ ...entry, pointer }], ctx);
    assert.deepEqual(fs.readdirSync(`${wt}/d`), ['big.bin']);
    assert.ok(fs.readFileSync(`${wt}/d/big.bin`).equals(data));
    // A worker's synchronous writer (straight from the packs, through windows it reuses): the same
    // bytes, and the same refusal with nothing left behind. Then again after a repack that stores
    // the chunks as deltas of each other (a base must not be a view the delta's read overwrites).
    for (const repack of [false, true]) {
      if (repack) {
        // Chunks that share most bytes: git deltifies them against each other.
        const base = bytes(10_000, 'base'); // one stored block: a view, unless copied
        const near = Buffer.from(base);
        near[5_000] ^= 1;
        const near2 = Buffer.concat([base.subarray(0, 7_000), bytes(3_000, 'tail')]);
        const parts = [base, near, near2];
        const offsets = [0, base.length, 2 * base.length];
        const sims = parts.map((d, k) => ({
          oid: git(sb, r, ['hash-object', '-w', '--stdin'], { input: d }).trim(),
          offset: offsets[k],
          size: d.length,
        }));
        // Unreachable, so no repack would keep them: pack them by name, deltas searched.
        git(sb, r, ['pack-objects', '-q', '--window=10', '--depth=5', '.git/objects/pack/pack'], {
          input: sims.map((c) => `${c.oid}\n`).join(''),
        });
        const deltas = git(sb, r, [
          'verify-pack',
          '-v',
          ...fs
            .readdirSync(`${r}/.git/objects/pack`)
            .filter((n) => n.endsWith('.idx'))
            .map((n) => `${r}/.git/objects/pack/${n}`),
        ]);
        assert.ok(
          sims.some((c) => new RegExp(`^${c.oid} blob\\s+\\d+ \\d+ \\d+ \\d+ [0-9a-f]{40}`, 'm').test(deltas)),
          'a chunk is stored as a delta',
        );
        // Through a window smaller than the entries, every read lands in the one buffer kept for
        // large reads: the base must not be a view of it when the delta is read after it.
        const packDir = `${r}/.git/objects/pack`;
        for (const idx of fs.readdirSync(packDir).filter((n) => n.endsWith('.idx'))) {
          const small = PackReader.open(`${packDir}/${idx.replace(/\.idx$/, '.pack')}`, `${packDir}/${idx}`, 'sha1', {
            window: 16,
            reuseWindow: true,
          });
          // Mapped whole (a restore's workers): the same objects, read in place.
          const mapped = PackReader.open(`${packDir}/${idx.replace(/\.idx$/, '.pack')}`, `${packDir}/${idx}`, 'sha1', {
            window: 16,
            reuseWindow: true,
            mapped: true,
          });
          try {
            assert.equal(mapped.readsInPlace, !!native?.mapFile);
            sims.forEach((c, k) => {
              const got = small.readUnhashed(c.oid);
              if (got) assert.ok(got.data.equals(parts[k]), `chunk ${k} read whole through a small window`);
              const inPlace = mapped.readUnhashed(c.oid);
              if (inPlace) assert.ok(inPlace.data.equals(parts[k]), `chunk ${k} read whole from the mapping`);
              assert.equal(!!inPlace, !!got);
              if (inPlace) {
                assert.ok(
                  mapped.read(c.oid)?.data.equals(parts[k]),
                  `chunk ${k} read and hash-checked from the mapping`,
                );
              }
            });
          } finally {
            small.close();
            mapped.close();
          }
        }
        await layListed(sims, Buffer.concat(parts), 'wt-sync-repacked');
      } else await checkSync(pointer, data, 'wt-sync');
    }
    /** A chunked file of `sims` (chunks already in the repository) holding `whole`: its list packed,
     * then laid by the worker's writer (checkSync); the laid file's path. */
    async function layListed(sims: { oid: string; offset: number; size: number }[], whole: Buffer, name: string) {
      const built = buildChunkList(sims, 'sha1');
      await writePack(
        `${r}/.git/objects`,
        'sha1',
        [built.list, ...built.segments].map((t) => ({ oid: t.oid, type: 'tree' as const, data: t.data })),
      );
      const blob = crypto.createHash('sha1').update(`blob ${whole.length}\0`).update(whole).digest('hex');
      return checkSync(
        pointerOf({ blob, size: whole.length, chunks: sims, params: cf.params }, built.list.oid),
        whole,
        name,
      );
    }
    async function checkSync(p: ReturnType<typeof pointerOf>, want: Buffer, name: string): Promise<string> {
      const dir = sb.path(name);
      fs.mkdirSync(dir);
      const packs = LocalPacks.openDir(`${r}/.git/objects`, 'sha1', { reuseWindow: true });
      try {
        const sync = { ...ctx, packs };
        const e = { path: 'd/big.bin', mode: '100644', pointerOid: '1'.repeat(40), pointer: p };
        const cl2 = await ChunkList.fromPointer(p, 'big.bin', sync);
        assert.ok(packsHolding(await cl2.chunksFor(0, p.size), packs), 'every chunk is in a pack');
        await assert.rejects(
          writeChunkedFile(dir, { ...e, pointer: { ...p, blob: '0'.repeat(40) } }, sync, { sync: true }),
          (err: unknown) => isXetError(err) && err.code === 'INTEGRITY_MISMATCH',
        );
        assert.deepEqual(fs.readdirSync(`${dir}/d`), [], 'nothing left beside it');
        await writeChunkedFile(dir, e, sync, { sync: true });
        assert.ok(fs.readFileSync(`${dir}/d/big.bin`).equals(want), `${name}: the file's bytes`);
        return `${dir}/d/big.bin`;
      } finally {
        packs.close();
      }
    }
    // A chunk that a repack stored as a delta of a large blob (git gc does this against a tracked
    // file with the same bytes): its base is over the 1 MiB a chunk read starts with, and is read.
    {
      const large = bytes(1_800_000, 'large base');
      const piece = Buffer.from(large.subarray(0, 64_000));
      piece[32_000] ^= 1;
      const ids = [large, piece].map((d) => git(sb, r, ['hash-object', '-w', '--stdin'], { input: d }).trim());
      git(sb, r, ['pack-objects', '-q', '--window=10', '--depth=5', '.git/objects/pack/pack'], {
        input: ids.map((o) => `${o}\n`).join(''),
      });
      const packDir = `${r}/.git/objects/pack`;
      const listed = git(sb, r, [
        'verify-pack',
        '-v',
        ...fs
          .readdirSync(packDir)
          .filter((n) => n.endsWith('.idx'))
          .map((n) => `${packDir}/${n}`),
      ]);
      assert.match(
        listed,
        new RegExp(`^${ids[1]} blob\\s+\\d+ \\d+ \\d+ 1 ${ids[0]}`, 'm'),
        'the chunk is a delta of the large blob',
      );
      await layListed([{ oid: ids[1], offset: 0, size: piece.length }], piece, 'wt-sync-large-base');
    }
    // Mostly zeros, in chunks of 10,000 bytes: the writer's batches end off the 16 KiB blocks, and
    // a block of zeros split between two of them must still be a hole, as one write makes it.
    {
      const zero = Buffer.alloc(10_000);
      const blip = Buffer.alloc(10_000);
      blip[5_000] = 1;
      const ids = [zero, blip].map((d) => git(sb, r, ['hash-object', '-w', '--stdin'], { input: d }).trim());
      git(sb, r, ['pack-objects', '-q', '.git/objects/pack/pack'], { input: ids.map((o) => `${o}\n`).join('') });
      const parts = Array.from({ length: 250 }, (_, k) => (k === 150 ? blip : zero));
      const sims = parts.map((d, k) => ({ oid: ids[d === blip ? 1 : 0], offset: k * 10_000, size: d.length }));
      const whole = Buffer.concat(parts);
      const laid = await layListed(sims, whole, 'wt-sync-sparse');
      const reference = sb.path('sparse-reference.bin');
      const fd = fs.openSync(reference, 'wx');
      try {
        finishSparse(fd, writeSparse(fd, whole, 0), whole.length);
      } finally {
        fs.closeSync(fd);
      }
      assert.ok(fs.statSync(reference).blocks * 512 < 100_000, 'one write leaves holes here');
      assert.equal(fs.statSync(laid).blocks, fs.statSync(reference).blocks, 'the holes of one write');
    }
    assert.throws(
      () => parsePointer(Buffer.from('xet.chunked/v9\n'), 'sha1', 'big.bin'),
      (e: unknown) => isXetError(e) && e.code === 'SCHEMA_UNSUPPORTED',
    );
  } finally {
    sb.cleanup();
  }
});
