// Whole-buffer zlib streams of pack entries: through libdeflate (the native module, src/native.ts)
// when it loaded, else node's zlib; `fast` ones through ISA-L's igzip when the module has it. All
// write standard zlib streams any git reads, and read any stream git or the others wrote; only the
// compressed bytes differ (object ids do not). Streams of files too big to hold stay with node's
// zlib (pack-stream.ts).

import * as zlib from 'node:zlib';
import { native } from '../native';

/**
 * The longest a zlib stream of `n` bytes written by zlib or libdeflate can be (libdeflate's bound is
 * larger for big inputs: five bytes per block of at least 5,000). A reader's window of this size
 * holds the whole stream of an entry either wrote.
 */
export function zlibStreamBound(n: number): number {
  const formula = n + 5 * (Math.floor(n / 4096) + 1) + 77;
  // The loaded library's own bound too, should another libdeflate bound its output differently.
  return native ? Math.max(formula, native.deflateBound(n)) : formula;
}

/** Deflate levels are zlib's 0-9 on both paths (libdeflate would take 10-12, zlib would not). */
function checkLevel(level: number): void {
  if (!Number.isInteger(level) || level < 0 || level > 9) throw new RangeError(`deflate level ${level} is not 0-9`);
}

/** An output chunk near the input's size: the default 16 KiB made every small file a 16 KiB
 * allocation, garbage that piled up in the workers between collections. */
function chunkSizeFor(n: number): number {
  return Math.max(64, Math.min(n + (n >> 6) + 64, 1 << 20));
}

/** Whether `fast` deflates differently here (the native module was built with ISA-L). */
export const fastDeflateAvailable = typeof native?.deflateFastInto === 'function';

/** Deflate `data` at `level` into `out` at `at` (which must have zlibStreamBound(data.length) bytes
 * of room there); the bytes written. `fast` at level 1 takes igzip where the module has it: about
 * twice libdeflate's speed for ~6% more bytes (docs/DESIGN-NOTES.md "A faster deflate for large
 * captures, one call to read a file, the trailer beside the writes"); anything igzip cannot fit
 * goes through libdeflate. */
export function deflateInto(data: Buffer, level: number, out: Buffer, at: number, fast = false): number {
  checkLevel(level);
  if (!Number.isInteger(at) || at < 0 || at > out.length)
    throw new RangeError(`deflateInto: offset ${at} is outside the buffer`);
  if (fast && level === 1 && native?.deflateFastInto) {
    const n = native.deflateFastInto(data, out, at);
    if (n >= 0) return n;
  }
  if (native) {
    const n = native.deflateInto(data, level, out, at);
    if (n >= 0) return n;
    throw new RangeError(`deflateInto: ${out.length - at} bytes of room for ${data.length} bytes`);
  }
  const body = zlib.deflateSync(data, { level, chunkSize: chunkSizeFor(data.length) });
  if (body.length > out.length - at) {
    throw new RangeError(`deflateInto: ${out.length - at} bytes of room for ${body.length}`);
  }
  return body.copy(out, at);
}

/** `data` deflated at `level`, in a buffer of its own. */
export function deflateBuffer(data: Buffer, level: number): Buffer {
  checkLevel(level);
  if (!native) return zlib.deflateSync(data, { level, chunkSize: chunkSizeFor(data.length) });
  const out = Buffer.allocUnsafe(native.deflateBound(data.length));
  return Buffer.from(out.subarray(0, deflateInto(data, level, out, 0)));
}

/** What a stream that does not inflate to exactly the expected size did instead. */
export class InflateFailure extends Error {}

/**
 * The zlib stream at the start of `src` inflated into a new buffer of exactly `size` bytes (bytes
 * after the stream are ignored). Throws InflateFailure when it is not a zlib stream, its checksum
 * fails, or it holds fewer or more bytes than `size`.
 */
export function inflateExact(src: Buffer, size: number): Buffer {
  if (native) {
    const out = Buffer.allocUnsafe(size);
    const r = native.inflateInto(src, out);
    if (r >= 0) return out;
    throw new InflateFailure(
      r === -2
        ? `the stream ends before ${size} bytes`
        : r === -3
          ? `the stream holds more than ${size} bytes`
          : 'not a valid zlib stream',
    );
  }
  let out: Buffer;
  try {
    // One output buffer of the object's size (plus the byte that lets zlib see the end): with the
    // default 16 KiB chunks every larger object was inflated into pieces and copied again.
    out = zlib.inflateSync(src, { maxOutputLength: Math.max(1, size), chunkSize: Math.max(64, size + 1) });
  } catch (e) {
    throw new InflateFailure((e as Error).message);
  }
  if (out.length !== size) {
    throw new InflateFailure(
      out.length < size ? `the stream ends before ${size} bytes` : `the stream holds more than ${size} bytes`,
    );
  }
  return out;
}
