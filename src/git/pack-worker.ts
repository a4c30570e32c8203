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

/** Read `size` bytes at `offset` of a regular file (fewer when it shrank: the hash then differs). */
function readRange(file: string, offset: number, size: number): Buffer {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    if (!fs.fstatSync(fd).isFile()) throw new Error('not a regular file any more');
    if (scratch.length < size) scratch = Buffer.allocUnsafe(size + (size >> 3));
    let n = 0;
    while (n < size) {
      const got = fs.readSync(fd, scratch, n, size - n, offset + n);
      if (got === 0) break;
      n += got;
    }
    return scratch.subarray(0, n);
  } finally {
    fs.closeSync(fd);
  }
}

export function processItem(item: WorkItem, format: 'sha1' | 'sha256', level: number): WorkResult {
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
  // A copy with its own ArrayBuffer, so it can be transferred rather than cloned.
  return { oid: item.oid, size: data.length, body: new Uint8Array(zlib.deflateSync(data, { level })) };
}

if (parentPort) {
  const port = parentPort;
  port.on('message', (msg: WorkBatch) => {
    const results = msg.items.map((i) => processItem(i, msg.format, msg.level));
    const transfer = results.flatMap((r) => ('body' in r ? [r.body.buffer as ArrayBuffer] : []));
    port.postMessage({ batch: msg.batch, results } satisfies WorkDone, transfer);
  });
}
