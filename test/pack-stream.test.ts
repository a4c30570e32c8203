// PackStream (src/git/pack-stream.ts): the trailer's hash that runs beside the last append. A pack
// whose count was fixed before its last batches landed (out of order, on worker threads) is the pack
// git verifies; one appended to after that (the count then wrong) is hashed again whole at finish
// and is as valid; each object reads back as it was given, in SHA-1 and SHA-256 repositories.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { joinLanded, PackStream, WorkerPool } from '../src/git/pack-stream';
import type { PackItem } from '../src/git/pack-writer';
import { initRepo, pseudoRandomBytes } from './support/git';
import { createSandbox } from './support/sandbox';

function blob(data: Buffer, format: 'sha1' | 'sha256'): PackItem {
  const oid = crypto.createHash(format).update(`blob ${data.length}\0`).update(data).digest('hex');
  return { oid, type: 'blob', data };
}

/** Blobs of assorted sizes (many batches of the pool's 256 items or 2 MiB), all different. */
function blobs(n: number, seed: number, format: 'sha1' | 'sha256'): PackItem[] {
  const out: PackItem[] = [];
  for (let i = 0; i < n; i++) {
    const size = i % 97 === 0 ? 300_000 + i : 40 + ((i * 7919) % 9000);
    const data =
      i % 3 === 0 ? pseudoRandomBytes(size, seed * 100_000 + i) : Buffer.from(`${seed}:${i}:`.repeat(size / 8));
    out.push(blob(data, format));
  }
  return out;
}

test('joinLanded: only ranges that meet what is joined are joined, in any order they land', () => {
  const landed = new Map<number, number>();
  let joined = 12;
  landed.set(112, 50); // lands before the range under it
  joined = joinLanded(landed, joined);
  assert.equal(joined, 12, 'a gap [12, 112) is not written yet');
  landed.set(200, 10); // another gap [162, 200)
  landed.set(12, 100);
  joined = joinLanded(landed, joined);
  assert.equal(joined, 162, 'joined up to the next gap');
  assert.deepEqual([...landed], [[200, 10]]);
  landed.set(162, 38);
  joined = joinLanded(landed, joined);
  assert.equal(joined, 210);
  assert.equal(landed.size, 0);
});

for (const format of ['sha1', 'sha256'] as const) {
  test(`PackStream (${format}): the trailer hashed beside the last append, or again after a later one`, async () => {
    const sb = createSandbox();
    const pool = new WorkerPool(2);
    try {
      const r = initRepo(sb, `repo-${format}`, format === 'sha256' ? ['--object-format=sha256'] : []);
      const objectsDir = path.join(r.commonDir(), 'objects');
      const cases: { name: string; run: (pk: PackStream) => Promise<PackItem[]> }[] = [
        {
          name: 'one last append on workers',
          run: async (pk) => {
            const items = blobs(1500, 1, format);
            await pk.appendItems(items, 1, 1, pool, true);
            return items;
          },
        },
        {
          name: 'an append first, then the last one',
          run: async (pk) => {
            const first = blobs(400, 2, format);
            const then = blobs(900, 3, format);
            await pk.appendItems(first, 1, 1, pool);
            await pk.appendItems([...then, ...first], 1, 1, pool, true); // the repeats are skipped
            return [...first, ...then];
          },
        },
        {
          name: 'appended to after the last append',
          run: async (pk) => {
            const last = blobs(700, 4, format);
            const after = blobs(30, 5, format);
            await pk.appendItems(last, 1, 1, pool, true);
            await pk.appendItems(after, 1, 1, null);
            return [...last, ...after];
          },
        },
      ];
      for (const c of cases) {
        const pk = PackStream.open(objectsDir, format);
        const items = await c.run(pk);
        const done = await pk.finish();
        assert.ok(done.pack, c.name);
        assert.equal(done.objects, items.length, c.name);
        const idx = path.join(objectsDir, 'pack', `${done.pack}.idx`);
        // git's own check of the whole pack: every entry hashed against its id, the index, the trailer.
        r.git('verify-pack', idx);
        for (const it of [items[0], items[items.length - 1], items[Math.floor(items.length / 2)]]) {
          assert.equal(r.git('cat-file', '-s', it.oid).trim(), String(it.data?.length), `${c.name}: ${it.oid}`);
        }
        const sum = fs
          .readFileSync(path.join(objectsDir, 'pack', `${done.pack}.pack`))
          .subarray(-(format === 'sha256' ? 32 : 20));
        assert.equal(`pack-${sum.toString('hex')}`, done.pack, `${c.name}: the name is the trailer`);
      }
      r.git('fsck', '--strict', '--no-dangling');
    } finally {
      await pool.close();
      sb.cleanup();
    }
  });
}
