// The content-defined chunker (FastCDC family, "gear/v1"): where a byte stream is cut into chunks.
// A cut depends only on the bytes just before it (a 32-bit gear hash forgets a byte after 32
// shifts), so an edit moves the cuts near it and no others: inserting bytes re-cuts one or two
// chunks, not the rest of the file. Normalised chunking (a harder test before the average size, an
// easier one after) keeps sizes close to the average. The gear table is derived from SHA-256 so
// that anyone can rebuild it from docs/FORMAT.md; changing it, the masks or the skip rule changes
// every cut and needs a new CHUNKER_NAME.
//
// This is the hot loop of a large capture: typed arrays of int32 only, no allocation, one
// comparison per byte. (V8 keeps `h` an int32; a Uint32Array table would make it a double.)

import { createHash } from 'node:crypto';
import type { ChunkParams } from './params';

/** gear[i] = the first 4 bytes, little-endian, of SHA-256("git-xet gear/v1 " + i), as int32. */
export const GEAR: Int32Array = (() => {
  const t = new Int32Array(256);
  for (let i = 0; i < 256; i++) t[i] = createHash('sha256').update(`git-xet gear/v1 ${i}`).digest().readInt32LE(0);
  return t;
})();

/** The top `bits` bits of a 32-bit word: the bits of the gear hash that depend on the most bytes. */
function topBits(bits: number): number {
  return bits >= 32 ? -1 : (((1 << bits) - 1) << (32 - bits)) | 0;
}

/**
 * A streaming chunker: feed it the file's bytes in any pieces, it returns where chunks end. State
 * carries over between pieces, so the cuts do not depend on how the file was read.
 */
export class GearChunker {
  private readonly min: number;
  private readonly avg: number;
  private readonly max: number;
  private readonly maskS: number;
  private readonly maskL: number;
  /** Bytes of the current chunk seen so far. */
  private len = 0;
  private h = 0;

  constructor(p: ChunkParams) {
    this.min = p.min;
    this.avg = p.avg;
    this.max = p.max;
    const bits = Math.round(Math.log2(p.avg));
    // Normalisation level 2 (FastCDC): two more bits before the average, two fewer after.
    this.maskS = topBits(bits + 2);
    this.maskL = topBits(bits - 2);
  }

  /**
   * Ends of the chunks that end inside `buf`, as offsets into `buf` (exclusive), appended to `cuts`.
   * The bytes after the last cut stay in the current chunk; `finish` ends it.
   */
  push(buf: Uint8Array, cuts: number[]): void {
    const n = buf.length;
    let i = 0;
    let len = this.len;
    let h = this.h;
    while (i < n) {
      if (len < this.min) {
        // The first `min` bytes of a chunk are never a cut: skipped, not hashed.
        const skip = Math.min(this.min - len, n - i);
        i += skip;
        len += skip;
        if (len === this.min) h = 0;
        continue;
      }
      let cut: number;
      if (len < this.avg) {
        const stop = Math.min(n, i + (this.avg - len));
        cut = this.scan(buf, i, stop, h, this.maskS);
        if (cut < 0) {
          len += stop - i;
          i = stop;
          h = this.h;
          continue;
        }
      } else {
        const stop = Math.min(n, i + (this.max - len));
        cut = this.scan(buf, i, stop, h, this.maskL);
        if (cut < 0) {
          len += stop - i;
          i = stop;
          h = this.h;
          if (len < this.max) continue;
          cut = i;
        }
      }
      cuts.push(cut);
      i = cut;
      len = 0;
      h = 0;
    }
    this.len = len;
    this.h = h;
  }

  /**
   * Hash buf[i..stop) from state `h`; the end (exclusive) of the first byte after which `h & m` is
   * 0, or -1 with the state left in this.h. Unrolled by four: the same test after every byte, one
   * loop check per four (half the time of the plain loop in V8).
   */
  private scan(buf: Uint8Array, i: number, stop: number, h: number, m: number): number {
    const G = GEAR;
    for (const stop4 = stop - 3; i < stop4; i += 4) {
      h = ((h << 1) + G[buf[i]]) | 0;
      if ((h & m) === 0) return i + 1;
      h = ((h << 1) + G[buf[i + 1]]) | 0;
      if ((h & m) === 0) return i + 2;
      h = ((h << 1) + G[buf[i + 2]]) | 0;
      if ((h & m) === 0) return i + 3;
      h = ((h << 1) + G[buf[i + 3]]) | 0;
      if ((h & m) === 0) return i + 4;
    }
    for (; i < stop; i++) {
      h = ((h << 1) + G[buf[i]]) | 0;
      if ((h & m) === 0) return i + 1;
    }
    this.h = h;
    return -1;
  }

  /** The current chunk's length (bytes after the last cut): the file's last chunk when it ends. */
  get pending(): number {
    return this.len;
  }
}

/**
 * The chunker fed a stream in blocks, naming each chunk as a git blob as it ends: the bytes of a
 * chunk that runs on into the next block are carried (at most `max` of them, since a chunk is never
 * longer). The sequential chunker (chunk-file.ts) and every region of the parallel one
 * (chunk-worker.ts) cut and name through this.
 */
export class NamingChunker {
  private readonly chunker: GearChunker;
  private readonly carry: Buffer;
  private carried = 0;
  private readonly cuts: number[] = [];

  constructor(
    p: ChunkParams,
    private readonly format: 'sha1' | 'sha256',
  ) {
    this.chunker = new GearChunker(p);
    this.carry = Buffer.allocUnsafe(p.max);
  }

  /** Feeds the next block: `onChunk(size, oid)` for every chunk that ends in it, in order, until
   * it returns true (then so does this, and the rest of the block is not taken). */
  push(buf: Buffer, onChunk: (size: number, oid: string) => boolean): boolean {
    this.cuts.length = 0;
    this.chunker.push(buf, this.cuts);
    let from = 0;
    for (const cut of this.cuts) {
      const len = this.carried + cut - from;
      const h = createHash(this.format).update(`blob ${len}\0`);
      if (this.carried) h.update(this.carry.subarray(0, this.carried));
      const oid = h.update(buf.subarray(from, cut)).digest('hex');
      this.carried = 0;
      from = cut;
      if (onChunk(len, oid)) return true;
    }
    buf.copy(this.carry, this.carried, from);
    this.carried += buf.length - from;
    return false;
  }

  /** The bytes after the last cut as a chunk (the stream's last), or null when there are none. */
  finish(): { size: number; oid: string } | null {
    if (!this.carried) return null;
    const size = this.carried;
    const oid = createHash(this.format).update(`blob ${size}\0`).update(this.carry.subarray(0, size)).digest('hex');
    this.carried = 0;
    return { size, oid };
  }
}

/** Every chunk size of a whole buffer, in order (tests and small inputs). */
export function chunkSizes(data: Uint8Array, p: ChunkParams): number[] {
  const c = new GearChunker(p);
  const cuts: number[] = [];
  c.push(data, cuts);
  const sizes: number[] = [];
  let prev = 0;
  for (const e of cuts) {
    sizes.push(e - prev);
    prev = e;
  }
  if (data.length > prev) sizes.push(data.length - prev);
  return sizes;
}
