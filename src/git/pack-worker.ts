// Worker thread of the pack writer: reads, re-hashes and deflates batches of small objects so that
// every core compresses, and writes each finished batch straight into the pack file at a range it
// reserves with one atomic add on a counter shared by all workers (pack entries may come in any
// order; the index says where each is). Only offsets and CRCs go back to the main thread: the
// compressed bytes never cross threads, so they are neither copied nor left to the main thread's
// garbage collector (which held ~150 MB of them at the peak of a cold capture when they did).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { parentPort } from 'node:worker_threads';
import * as zlib from 'node:zlib';
import { native } from '../native';
import { scanBatch, type ScanJob } from './file-scan';
import { deflateBuffer, deflateInto, zlibStreamBound } from './zlib-fast';

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
  /** The pack file's descriptor (worker threads share the process's) and the shared end-of-pack
   * counter (a BigInt64Array over it): where the batch's entries go. */
  fd: number;
  end: SharedArrayBuffer;
}

export type WorkResult =
  { oid: string; size: number; body: Uint8Array } | { oid: string; error: string; file?: string; actual?: string };

/** A batch written into the pack: its range, and each entry's offset and CRC32 (header and body). */
export interface WorkDone {
  batch: number;
  offset: number;
  length: number;
  entries: { oid: string; offset: number; crc: number }[];
  /** The first item that could not be packed (nothing of the batch was written), or a failed write. */
  error?: { oid: string; error: string; file?: string; actual?: string; code?: string };
}

const TYPE_CODE: Record<string, number> = { commit: 1, tree: 2, blob: 3, tag: 4 };

/** A pack entry's header: type and inflated size, 7 bits at a time (4 in the first byte). */
export function entryHeader(type: string, size: number): Buffer {
  const out: number[] = [];
  let c = (TYPE_CODE[type] << 4) | (size & 0x0f);
  let rest = Math.floor(size / 16);
  while (rest > 0) {
    out.push(c | 0x80);
    c = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  out.push(c);
  return Buffer.from(out);
}

// One growing output buffer per thread: a batch's entries are laid out in it and written with one
// pwrite, so neither a chunk's stored body nor a small file's deflated one is a new allocation.
let out = Buffer.allocUnsafe(4 << 20);

function room(used: number, more: number): void {
  if (used + more <= out.length) return;
  const bigger = Buffer.allocUnsafe(Math.max(2 * out.length, used + more + (1 << 20)));
  out.copy(bigger, 0, 0, used);
  out = bigger;
}

/** Pack one batch and write it into the pack at a freshly reserved range (see the head comment). */
export function writeBatch(msg: WorkBatch): WorkDone {
  const entries: WorkDone['entries'] = [];
  let length = 0;
  try {
    for (const item of msg.items) {
      const r = readChecked(item, msg.format);
      if ('error' in r) return { batch: msg.batch, offset: 0, length: 0, entries: [], error: r };
      const data = r.data;
      const h = entryHeader(item.type, data.length);
      const start = length;
      const use = levelFor(item, data, msg.level, msg.chunkLevel ?? msg.level);
      if (use === 0) {
        room(length, h.length + storedZlibSize(data.length));
        length += h.copy(out, length);
        length = storedZlibInto(data, out, length);
      } else {
        room(length, h.length + zlibStreamBound(data.length));
        length += h.copy(out, length);
        length += deflateInto(data, use, out, length);
      }
      entries.push({ oid: item.oid, offset: start, crc: zlib.crc32(out.subarray(start, length)) });
    }
  } finally {
    closeRangeFile();
  }
  const offset = Number(Atomics.add(new BigInt64Array(msg.end), 0, BigInt(length)));
  try {
    let done = 0;
    // A write may be short (a signal, a nearly full disk): go on from there.
    while (done < length) done += fs.writeSync(msg.fd, out, done, length - done, offset + done);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    return {
      batch: msg.batch,
      offset,
      length,
      entries: [],
      error: { oid: '', error: 'write', actual: err.message, code: err.code },
    };
  }
  for (const e of entries) e.offset += offset;
  return { batch: msg.batch, offset, length, entries };
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

/** Adler-32 (zlib's trailer), where the native module (libdeflate's, vectorised) is absent. Sums are reduced every 5552 bytes (zlib's NMAX: the largest run that
 * keeps `b` below 2^32, exact in a double), and the loop is unrolled 16 bytes at a time: 2.4x the
 * speed of the byte loop it replaced (~1 GB/s here), which mattered for the 171 MB of chunks a cold
 * capture of the benchmark stores. */
function adler32(data: Uint8Array): number {
  let a = 1;
  let b = 0;
  const n = data.length;
  let i = 0;
  while (i < n) {
    const stop = Math.min(n, i + 5552);
    const stop16 = stop - ((stop - i) & 15);
    for (; i < stop16; i += 16) {
      a += data[i];
      b += a;
      a += data[i + 1];
      b += a;
      a += data[i + 2];
      b += a;
      a += data[i + 3];
      b += a;
      a += data[i + 4];
      b += a;
      a += data[i + 5];
      b += a;
      a += data[i + 6];
      b += a;
      a += data[i + 7];
      b += a;
      a += data[i + 8];
      b += a;
      a += data[i + 9];
      b += a;
      a += data[i + 10];
      b += a;
      a += data[i + 11];
      b += a;
      a += data[i + 12];
      b += a;
      a += data[i + 13];
      b += a;
      a += data[i + 14];
      b += a;
      a += data[i + 15];
      b += a;
    }
    for (; i < stop; i++) {
      a += data[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return (b * 65536 + a) >>> 0;
}

/** Bytes of `storedZlibInto`'s stream for `n` bytes of data. */
function storedZlibSize(n: number): number {
  return 2 + Math.max(1, Math.ceil(n / 65535)) * 5 + n + 4;
}

/**
 * A zlib stream of stored (uncompressed) blocks, written into `dst` at `at`; returns where it ends.
 * No zlib state to set up and one copy of the data, where deflateSync at level 0 costs an init and
 * its own copies (twice the time for 8 KiB chunks).
 */
function storedZlibInto(data: Uint8Array, dst: Uint8Array, at: number): number {
  const blocks = Math.max(1, Math.ceil(data.length / 65535));
  dst[at] = 0x78; // deflate, 32 KiB window
  dst[at + 1] = 0x01; // no dictionary, fastest; (0x78 << 8 | 0x01) % 31 === 0
  let o = at + 2;
  for (let from = 0, k = 0; k < blocks; k++) {
    const len = Math.min(65535, data.length - from);
    dst[o] = k === blocks - 1 ? 1 : 0; // BFINAL, BTYPE 00 (stored)
    dst[o + 1] = len & 0xff;
    dst[o + 2] = len >> 8;
    dst[o + 3] = ~len & 0xff;
    dst[o + 4] = (~len >> 8) & 0xff;
    dst.set(data.subarray(from, from + len), o + 5);
    o += 5 + len;
    from += len;
  }
  const sum = native ? native.adler32(data) : adler32(data);
  dst[o] = sum >>> 24;
  dst[o + 1] = (sum >>> 16) & 0xff;
  dst[o + 2] = (sum >>> 8) & 0xff;
  dst[o + 3] = sum & 0xff;
  return o + 4;
}

export function storedZlib(data: Uint8Array): Uint8Array {
  const dst = new Uint8Array(storedZlibSize(data.length));
  storedZlibInto(data, dst, 0);
  return dst;
}

/** Trees are deflated as git deflates its own packs: they are small (1.6 MB of trees for 34,000
 * files: 5 ms more than level 1), and they are kept, pushed and fetched with every snapshot that
 * shares them (a 26 KB directory tree: 17.3 KB at level 1, 16.8 KB at 6). Blobs keep the caller's
 * level: a copy of a store's objects (lazy restore) passes file contents as data too. */
const TREE_LEVEL = 6;

/** The level an item is stored at: chunks at the chunk level, and stored when they look random;
 * trees at least at TREE_LEVEL (unless storing is asked for). */
function levelFor(item: WorkItem, data: Uint8Array, level: number, chunkLevel: number): number {
  if (!item.range) return item.type === 'tree' && level > 0 ? Math.max(level, TREE_LEVEL) : level;
  return chunkLevel > 0 && sampleEntropy(data) > INCOMPRESSIBLE_BITS ? 0 : chunkLevel;
}

/** An item's bytes, checked against its object id (a file changed since git hashed it is refused). */
function readChecked(
  item: WorkItem,
  format: 'sha1' | 'sha256',
): { data: Buffer } | { oid: string; error: string; file?: string; actual?: string } {
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
  return { data };
}

export function processItem(item: WorkItem, format: 'sha1' | 'sha256', level: number, chunkLevel = level): WorkResult {
  const r = readChecked(item, format);
  if ('error' in r) return r;
  const use = levelFor(item, r.data, level, chunkLevel);
  return { oid: item.oid, size: r.data.length, body: use === 0 ? storedZlib(r.data) : deflateBuffer(r.data, use) };
}

if (parentPort) {
  const port = parentPort;
  // Two kinds of work: lists of known objects (writeBatch), and worktree files to hash and pack in
  // one pass (file-scan.ts).
  port.on('message', (msg: WorkBatch | ScanJob) => {
    if ('kind' in msg && msg.kind === 'scan') {
      const done = scanBatch(msg);
      port.postMessage(done, [done.state.buffer, done.stat.buffer, done.oid.buffer] as ArrayBuffer[]);
    } else port.postMessage(writeBatch(msg as WorkBatch) satisfies WorkDone);
  });
}
