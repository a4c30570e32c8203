// The zlib-fast cases, shared by test/native.test.ts and the child it runs with GIT_XET_NATIVE=0
// (a module of its own: requiring the test file would run its tests in the child).
import assert from 'node:assert/strict';
import * as zlib from 'node:zlib';
import { deflateBuffer, deflateInto, inflateExact, InflateFailure, zlibStreamBound } from '../../src/git/zlib-fast';
import { pseudoRandomBytes } from './git';

/** Inputs that exercise every block kind: empty, tiny, text, random (stored blocks), long runs. */
function samples(): Buffer[] {
  const text = Buffer.from('export function f(a, b) { return a + b; }\n'.repeat(3000));
  return [
    Buffer.alloc(0),
    Buffer.from('x'),
    text,
    pseudoRandomBytes(70_000, 7),
    Buffer.alloc(300_000),
    Buffer.concat([pseudoRandomBytes(40_000, 8), text, Buffer.alloc(9_000, 0x61)]),
  ];
}

export function roundTrips(): void {
  for (const data of samples()) {
    for (const level of [0, 1, 6, 9]) {
      const out = Buffer.alloc(7 + zlibStreamBound(data.length));
      const n = deflateInto(data, level, out, 7);
      assert.ok(n > 0 && 7 + n <= out.length);
      const stream = out.subarray(7, 7 + n);
      assert.deepEqual(zlib.inflateSync(stream), data, `zlib reads level ${level} of ${data.length} bytes`);
      // Bytes after the stream (the next pack entry) are not part of it.
      const tail = Buffer.concat([stream, Buffer.from('next entry')]);
      assert.deepEqual(inflateExact(tail, data.length), data);
      assert.deepEqual(zlib.inflateSync(deflateBuffer(data, level)), data);
    }
    for (const level of [1, 9]) {
      assert.deepEqual(inflateExact(zlib.deflateSync(data, { level }), data.length), data, 'reads what zlib wrote');
    }
    // The fast deflate (igzip where the module has it, else the same as level 1).
    const out = Buffer.alloc(3 + zlibStreamBound(data.length));
    const n = deflateInto(data, 1, out, 3, true);
    assert.ok(n > 0 && 3 + n <= out.length);
    assert.deepEqual(
      zlib.inflateSync(out.subarray(3, 3 + n)),
      data,
      `zlib reads the fast stream of ${data.length} bytes`,
    );
    assert.deepEqual(inflateExact(out.subarray(3, 3 + n), data.length), data);
  }
  // The same bytes make the same stream whatever was deflated before them in this thread.
  const all = samples();
  const fast = (d: Buffer) => {
    const out = Buffer.alloc(zlibStreamBound(d.length));
    return out.subarray(0, deflateInto(d, 1, out, 0, true));
  };
  const first = all.map(fast);
  const again = [...all].reverse().map(fast).reverse();
  assert.deepEqual(again, first, 'fast streams do not depend on what came before');
}

export function refusals(): void {
  const data = Buffer.from('some text to deflate, repeated. '.repeat(500));
  const good = zlib.deflateSync(data, { level: 6 });
  assert.throws(() => inflateExact(good, data.length + 1), InflateFailure, 'a stream shorter than its entry');
  assert.throws(() => inflateExact(good, data.length - 1), InflateFailure, 'a stream longer than its entry');
  assert.throws(() => inflateExact(good.subarray(0, good.length - 9), data.length), InflateFailure, 'cut short');
  assert.throws(() => inflateExact(Buffer.from('not a zlib stream at all'), 5), InflateFailure);
  const damaged = Buffer.from(good);
  damaged[damaged.length - 2] ^= 0x40; // the adler32
  assert.throws(() => inflateExact(damaged, data.length), InflateFailure, 'a checksum that does not match');
  const stored = Buffer.from(deflateBuffer(pseudoRandomBytes(5000, 2), 0));
  stored[100] ^= 1; // a byte of the data: only the adler32 can tell
  assert.throws(() => inflateExact(stored, 5000), InflateFailure, 'a damaged stored block');
  const room = Buffer.alloc(zlibStreamBound(10));
  assert.throws(
    () => deflateInto(Buffer.from('0123456789'), 1, room, room.length + 1),
    RangeError,
    'offset past the end',
  );
  assert.throws(() => deflateInto(Buffer.from('0123456789'), 1, room, -1), RangeError, 'negative offset');
  assert.throws(() => deflateInto(Buffer.from('0123456789'), 10, room, 0), RangeError, 'level 10');
  assert.throws(() => deflateBuffer(Buffer.from('0123456789'), 1.5), RangeError, 'a fractional level');
  const small = Buffer.alloc(8);
  assert.throws(() => deflateInto(pseudoRandomBytes(1000, 3), 1, small, 0), RangeError, 'no room is not a silent cut');
}
