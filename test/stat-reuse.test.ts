// reuseUnchanged (src/snapshot/stat-reuse.ts): the native pass and its JavaScript twin must decide
// the same paths and fill the same columns, over random rows and stat cache entries near every
// edge the rule has (errors, types and modes, sizes at the bound, links, inode numbers past 32
// bits, times a nanosecond off, racy entries, missing entries), for SHA-1 and SHA-256 ids.
import assert from 'node:assert/strict';
import * as crypto from 'node:crypto';
import { test } from 'node:test';
import { STAT } from '../src/git/index-writer';
import { ROW, STAT_ROW } from '../src/git/lstat-many';
import { native, nativeMissing } from '../src/native';
import { REUSED, reuseUnchanged, type ReuseColumns } from '../src/snapshot/stat-reuse';
import { prng } from './support/random-tree';

function columns(n: number, hashLen: number): ReuseColumns {
  return {
    stat: Buffer.alloc(n * 40),
    oid: Buffer.alloc(n * hashLen),
    slot: new Uint8Array(n),
    mtimeSec: new Float64Array(n),
    nlinkSize: new Float64Array(2 * n),
  };
}

test('the native reuse pass decides what its JavaScript twin decides', (t) => {
  if (process.env.CI) assert.ok(native?.reuseUnchanged, `CI must build the native module: ${nativeMissing}`);
  if (!native?.reuseUnchanged) return t.diagnostic(`skipped: no native reuseUnchanged (${nativeMissing})`);
  const rnd = prng(5);
  const rand = (k: number) => Math.floor(rnd() * k);
  const pick = <T>(xs: T[]): T => xs[rand(xs.length)];
  let decided = 0;
  for (const hashLen of [20, 32]) {
    for (let round = 0; round < 100; round++) {
      const n = 1 + rand(400);
      const entryBytes = 40 + hashLen + 2;
      const buf = crypto.randomBytes(12 + n * entryBytes + 8);
      const rows = new Float64Array(n * STAT_ROW);
      const entryAt = new Int32Array(n);
      const racyFrom = 1_700_000_000 + rand(1000);
      const sizeBelow = pick([65536, 1000, 1]);
      for (let i = 0; i < n; i++) {
        const o = 12 + i * entryBytes;
        entryAt[i] = pick([o, o, o, o, o, -1, buf.length - 40]);
        const r = i * STAT_ROW;
        const mode = pick([0o100644, 0o100755, 0o100600, 0o120777, 0o40755, 0o10644, 0o140755]);
        const size = pick([0, 1, 999, 1000, 65535, 65536, rand(70000), -1]);
        const ino = pick([rand(1 << 30), rand(1 << 30), 4294967296 + rand(1000), -1, 2 ** 40 + 7]);
        const mtime = pick([
          racyFrom - 1 - rand(100),
          racyFrom - 1,
          racyFrom - 7,
          racyFrom,
          racyFrom + 5,
          -5,
          4294967296 + 3,
        ]);
        rows[r + ROW.errno] = pick([0, 0, 0, 0, 0, 0, 0, 2, 20]);
        rows[r + ROW.mode] = mode;
        rows[r + ROW.size] = size;
        rows[r + ROW.nlink] = pick([1, 1, 1, 2]);
        rows[r + ROW.ino] = ino;
        rows[r + ROW.dev] = rand(100);
        rows[r + ROW.uid] = pick([0, 1000, 4294967295]);
        rows[r + ROW.gid] = pick([0, 1000]);
        rows[r + ROW.mtime] = mtime;
        rows[r + ROW.mtimeNs] = rand(1e9);
        rows[r + ROW.ctime] = mtime + rand(2);
        rows[r + ROW.ctimeNs] = rand(1e9);
        if (entryAt[i] === o && rand(5) > 0) {
          // Mostly the entry this row would match, now and then a field off by one.
          const u32 = (v: number) => ((v % 4294967296) + 4294967296) % 4294967296;
          const type = mode & 0o170000;
          const canonical =
            type === 0o100000 ? (mode & 0o100 ? 0o100755 : 0o100644) : type === 0o120000 ? 0o120000 : mode;
          const fields: [number, number][] = [
            [STAT.ctime, rows[r + ROW.ctime]],
            [STAT.ctimeNs, rows[r + ROW.ctimeNs]],
            [STAT.mtime, mtime],
            [STAT.mtimeNs, rows[r + ROW.mtimeNs]],
            [STAT.dev, 0],
            [STAT.ino, ino],
            [STAT.mode, canonical],
            [STAT.uid, rows[r + ROW.uid]],
            [STAT.gid, rows[r + ROW.gid]],
            [STAT.size, size],
          ];
          const off = rand(4) === 0 ? rand(fields.length) : -1;
          fields.forEach(([at, v], k) => buf.writeUInt32BE(u32(v + (k === off ? 1 : 0)), o + at));
        }
      }
      const js = columns(n, hashLen);
      const nat = columns(n, hashLen);
      const a = reuseUnchanged(rows, entryAt, buf, hashLen, racyFrom, sizeBelow, js, 'js');
      const b = reuseUnchanged(rows, entryAt, buf, hashLen, racyFrom, sizeBelow, nat, 'auto');
      const what = `hash ${hashLen} round ${round}`;
      assert.equal(b, a, `${what}: count`);
      assert.deepEqual(nat.slot, js.slot, `${what}: slots`);
      assert.ok(nat.stat.equals(js.stat), `${what}: stat data`);
      assert.ok(nat.oid.equals(js.oid), `${what}: ids`);
      assert.deepEqual(nat.mtimeSec, js.mtimeSec, `${what}: times`);
      assert.deepEqual(nat.nlinkSize, js.nlinkSize, `${what}: links and sizes`);
      for (let i = 0; i < n; i++) if (js.slot[i] === REUSED) decided++;
    }
  }
  // The rounds must reach the plain case, not only its refusals.
  assert.ok(decided > 300, `only ${decided} paths decided`);
});

test('the reuse pass refuses columns that do not fit', (t) => {
  if (!native?.reuseUnchanged) return t.diagnostic(`skipped: no native reuseUnchanged (${nativeMissing})`);
  const rows = new Float64Array(2 * STAT_ROW);
  assert.throws(
    () => reuseUnchanged(rows, new Int32Array(2), Buffer.alloc(100), 20, 0, 10, columns(3, 20)),
    /reuseUnchanged's columns do not fit/,
  );
});
