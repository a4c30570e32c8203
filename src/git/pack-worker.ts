// Worker thread of the pack writer: reads, re-hashes and deflates batches of small objects so that
// every core compresses. Results go back in the order received, bodies transferred without copies.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { parentPort } from 'node:worker_threads';
import * as zlib from 'node:zlib';

export interface WorkItem {
  oid: string;
  type: string;
  file?: string;
  symlink?: boolean;
  data?: Uint8Array;
  /** Size seen when the item was listed; reading stops one byte past it. */
  size?: number;
  /** Only these bytes of the file (a chunk). */
  range?: { offset: number; size: number };
}

export interface WorkBatch {
  batch: number;
  format: 'sha1' | 'sha256';
  level: number;
  /** Deflate level for chunks (range items); `level` when absent. See chunkLevelFor. */
  chunkLevel?: number;
  items: WorkItem[];
}

export type WorkResult =
  { oid: string; size: number; body: Uint8Array } | { oid: string; error: string; file?: string; actual?: string };

export interface WorkDone {
  batch: number;
  results: WorkResult[];
}

// One growing read buffer per thread: file contents are only needed until they are deflated, and
// reusing the buffer keeps a worker's memory at its largest file instead of its garbage backlog.
let scratch = Buffer.allocUnsafe(1 << 20);

/** Read a regular file of `expected` bytes: never through a symlink, never blocking on a fifo, never
 * more than expected + 1 bytes (a file swapped for something endless cannot exhaust memory). */
function readWhole(file: string, expected: number): Buffer {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    if (!fs.fstatSync(fd).isFile()) throw new Error('not a regular file any more');
    const limit = expected + 1;
    if (scratch.length < limit) scratch = Buffer.allocUnsafe(limit + (limit >> 3));
    let n = 0;
    while (n < limit) {
      const got = fs.readSync(fd, scratch, n, limit - n, null);
      if (got === 0) break;
      n += got;
    }
    return scratch.subarray(0, n);
  } finally {
    fs.closeSync(fd);
  }
}

// The file of the last range read, kept open for the next: a chunked file's chunks come in file
// order, hundreds per batch, and one open/fstat/close per 8 KiB chunk would cost more than reading
// it. Closed at the end of every batch (closeRangeFile), so nothing is held between batches.
let rangeFile: { file: string; fd: number } | null = null;

export function closeRangeFile(): void {
  if (rangeFile) fs.closeSync(rangeFile.fd);
  rangeFile = null;
}

/** Read `size` bytes at `offset` of a regular file (fewer when it shrank: the hash then differs). */
function readRange(file: string, offset: number, size: number): Buffer {
  if (rangeFile?.file !== file) {
    closeRangeFile();
    const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    try {
      if (!fs.fstatSync(fd).isFile()) throw new Error('not a regular file any more');
    } catch (e) {
      fs.closeSync(fd);
      throw e;
    }
    rangeFile = { file, fd };
  }
  const fd = rangeFile.fd;
  if (scratch.length < size) scratch = Buffer.allocUnsafe(size + (size >> 3));
  let n = 0;
  while (n < size) {
    const got = fs.readSync(fd, scratch, n, size - n, offset + n);
    if (got === 0) break;
    n += got;
  }
  return scratch.subarray(0, n);
}

/**
 * Bits per byte of a sample's byte histogram (order-0 entropy). Deflate cannot do much below it
 * without long matches, and data near 8 bits (compressed media, encrypted or random bytes, most
 * model weights) does not deflate at all: a 1 KiB sample tells that in about a microsecond, where
 * deflating an 8 KiB chunk to learn it costs ~150 µs here.
 */
export function sampleEntropy(data: Uint8Array): number {
  const n = Math.min(data.length, 1024);
  if (n === 0) return 0;
  const from = (data.length - n) >> 1; // the middle: headers at the start say little
  const counts = new Uint16Array(256);
  for (let i = from; i < from + n; i++) counts[data[i]]++;
  let bits = 0;
  for (let b = 0; b < 256; b++) {
    const c = counts[b];
    if (c) bits -= c * Math.log2(c / n);
  }
  return bits / n;
}

/** Above this sample entropy (bits per byte) a chunk is stored, not deflated. */
export const INCOMPRESSIBLE_BITS = 7.5;

/** Adler-32 (zlib's trailer). Sums are reduced every 3800 bytes, which keeps them int32. */
function adler32(data: Uint8Array): number {
  let a = 1;
  let b = 0;
  const n = data.length;
  for (let i = 0; i < n;) {
    const stop = Math.min(n, i + 3800);
    for (; i < stop; i++) {
      a = (a + data[i]) | 0;
      b = (b + a) | 0;
    }
    a %= 65521;
    b %= 65521;
  }
  return ((b << 16) | a) >>> 0;
}

/**
 * A zlib stream of stored (uncompressed) blocks, written straight into a fresh ArrayBuffer that can
 * be transferred: no zlib state to set up and one copy of the data, where deflateSync at level 0
 * costs an init, its own copy and another to make it transferable (twice the time for 8 KiB chunks).
 */
export function storedZlib(data: Uint8Array): Uint8Array {
  const blocks = Math.max(1, Math.ceil(data.length / 65535));
  const out = new Uint8Array(2 + blocks * 5 + data.length + 4);
  out[0] = 0x78; // deflate, 32 KiB window
  out[1] = 0x01; // no dictionary, fastest; (0x78 << 8 | 0x01) % 31 === 0
  let o = 2;
  for (let at = 0, k = 0; k < blocks; k++) {
    const len = Math.min(65535, data.length - at);
    out[o] = k === blocks - 1 ? 1 : 0; // BFINAL, BTYPE 00 (stored)
    out[o + 1] = len & 0xff;
    out[o + 2] = len >> 8;
    out[o + 3] = ~len & 0xff;
    out[o + 4] = (~len >> 8) & 0xff;
    out.set(data.subarray(at, at + len), o + 5);
    o += 5 + len;
    at += len;
  }
  const sum = adler32(data);
  out[o] = sum >>> 24;
  out[o + 1] = (sum >>> 16) & 0xff;
  out[o + 2] = (sum >>> 8) & 0xff;
  out[o + 3] = sum & 0xff;
  return out;
}

export function processItem(item: WorkItem, format: 'sha1' | 'sha256', level: number, chunkLevel = level): WorkResult {
  let data: Buffer;
  try {
    if (item.data) data = Buffer.from(item.data.buffer, item.data.byteOffset, item.data.byteLength);
    else if (item.symlink) data = fs.readlinkSync(item.file as string, { encoding: 'buffer' });
    else if (item.range) data = readRange(item.file as string, item.range.offset, item.range.size);
    else data = readWhole(item.file as string, item.size ?? 0);
  } catch (e) {
    return { oid: item.oid, error: 'unreadable', file: item.file, actual: (e as Error).message };
  }
  const actual = crypto.createHash(format).update(`${item.type} ${data.length}\0`).update(data).digest('hex');
  if (actual !== item.oid) return { oid: item.oid, error: 'changed', file: item.file, actual };
  let use = item.range ? chunkLevel : level;
  if (use > 0 && item.range && sampleEntropy(data) > INCOMPRESSIBLE_BITS) use = 0;
  if (use === 0) return { oid: item.oid, size: data.length, body: storedZlib(data) };
  // A copy with its own ArrayBuffer, so it can be transferred rather than cloned.
  return { oid: item.oid, size: data.length, body: new Uint8Array(zlib.deflateSync(data, { level: use })) };
}

if (parentPort) {
  const port = parentPort;
  port.on('message', (msg: WorkBatch) => {
    let results: WorkResult[];
    try {
      results = msg.items.map((i) => processItem(i, msg.format, msg.level, msg.chunkLevel));
    } finally {
      closeRangeFile();
    }
    const transfer = results.flatMap((r) => ('body' in r ? [r.body.buffer as ArrayBuffer] : []));
    port.postMessage({ batch: msg.batch, results } satisfies WorkDone, transfer);
  });
}
