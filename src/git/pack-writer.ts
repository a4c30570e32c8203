// A streaming pack writer: new objects -> one pack file (v2) and its index (v2) in objects/pack,
// published atomically (temporary names, fsync, rename; the .idx last, since git finds packs by it).
// Why not git's own writers: `update-index`/`hash-object` spend most of a cold capture on per-object
// overhead (a fresh zlib state and a pack-directory rescan per missing object) and run on one core.
// Here files are read and deflated concurrently (zlib runs on libuv's thread pool) and written in
// order; every blob is re-hashed as it is read and must match the oid git computed, so a file that
// changes during a capture aborts it instead of storing content under the wrong name.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as os from 'node:os';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { Worker } from 'node:worker_threads';
import * as zlib from 'node:zlib';
import { XetError } from '../errors';
import {
  closeRangeFile,
  processItem,
  type WorkBatch,
  type WorkDone,
  type WorkItem,
  type WorkResult,
} from './pack-worker';
import { faultPoint } from '../testing/fault-points';
import { chunkLevelFor, DEFAULT_CHUNK_COMPRESSION, type ChunkCompression } from '../chunks/compression';

export type ObjectFormat = 'sha1' | 'sha256';

export interface PackItem {
  oid: string;
  type: 'blob' | 'tree' | 'commit' | 'tag';
  /** Content given directly (trees, small objects)… */
  data?: Buffer;
  /** …or read from this file (regular file) or link (symlink target) when written. */
  file?: string;
  symlink?: boolean;
  /** Only these bytes of `file` (a chunk of a chunked file: src/chunks/). */
  range?: { offset: number; size: number };
}

export interface PackResult {
  pack: string | null;
  objects: number;
  bytes: number;
}

/** A finished pack and index still under their temporary names, about to be published. */
export interface PackToPublish {
  name: string;
  objects: number;
  packBytes: number;
  idxBytes: number;
}

/** Called with the complete temporaries before the renames (the storage allowance rechecks and
 * records the pack there); a throw removes the temporaries and is rethrown. */
export type BeforePublish = (p: PackToPublish) => void | Promise<void>;

export interface WritePackOptions {
  /** Deflate level of chunks (range items), from xet.chunk.compression (src/chunks/compression.ts
   * says why the default is what it is): `auto` (the default) picks it from the chunk bytes this
   * pack holds. Chunks whose sample looks random are stored whatever it is. */
  chunkLevel?: ChunkCompression;
}

const TYPE_CODE = { commit: 1, tree: 2, blob: 3, tag: 4 } as const;
/** Files above this are deflated chunk by chunk straight into the pack (keeps memory flat). */
const STREAM_THRESHOLD = 8 * 1024 * 1024;
/**
 * Compressed bodies arrive from the workers as ArrayBuffers. Once written they are garbage, but V8
 * collects them lazily and they would pile up to ~100 MB on a big capture; an explicit collection
 * every few tens of MB keeps the process well under its memory goal for a few milliseconds each.
 */
const COLLECT_EVERY_BYTES = 32 * 1024 * 1024;
let collect: (() => void) | null | undefined;
function collectGarbage(): void {
  if (collect === undefined) {
    try {
      v8.setFlagsFromString('--expose-gc');
      collect = vm.runInNewContext('gc') as () => void;
    } catch {
      collect = null;
    }
  }
  collect?.();
}

/** Work units for the compression workers, and how much work makes starting them worthwhile. */
const BATCH_ITEMS = 256;
const BATCH_BYTES = 2 * 1024 * 1024;
const MAX_WORKERS = Number(process.env.XET_PACK_WORKERS ?? 4);
const PARALLEL_MIN_BYTES = 8 * 1024 * 1024;
const WORKER_YOUNG_MB = Number(process.env.XET_WORKER_YOUNG_MB ?? 16);

function entryHeader(type: PackItem['type'], size: number): Buffer {
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

/** A pack being written: bytes go to the file and into the running trailer hash. Small writes (a
 * chunk's header and body, ~8 KiB) are gathered into one buffer and written a MiB at a time. */
class PackFile {
  private readonly fd: number;
  private readonly hash: crypto.Hash;
  private readonly pending = Buffer.allocUnsafe(1 << 20);
  private used = 0;
  offset = 0;

  constructor(
    readonly file: string,
    format: ObjectFormat,
  ) {
    this.fd = fs.openSync(file, 'wx', 0o444);
    this.hash = crypto.createHash(format);
  }

  write(buf: Buffer): void {
    this.hash.update(buf);
    this.offset += buf.length;
    if (this.used + buf.length > this.pending.length) this.flush();
    if (buf.length >= this.pending.length) {
      this.writeOut(buf);
      return;
    }
    buf.copy(this.pending, this.used);
    this.used += buf.length;
  }

  private flush(): void {
    if (this.used) this.writeOut(this.pending.subarray(0, this.used));
    this.used = 0;
  }

  private writeOut(buf: Buffer): void {
    let done = 0;
    while (done < buf.length) done += fs.writeSync(this.fd, buf, done, buf.length - done, null);
  }

  finish(): Buffer {
    this.flush();
    const digest = this.hash.digest();
    fs.writeSync(this.fd, digest);
    fs.fsyncSync(this.fd);
    fs.closeSync(this.fd);
    return digest;
  }

  abort(): void {
    try {
      fs.closeSync(this.fd);
    } catch {
      /* already closed */
    }
    fs.rmSync(this.file, { force: true });
  }
}

function changedError(item: { oid: string; file?: string }, actual: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${item.file} changed while it was being captured; capture again`, {
    path: item.file,
    expected: item.oid,
    actual,
  });
}

/** Compress small objects on every core: batches go to worker threads, results come back tagged
 * and are handed to `write` strictly in item order, with a bounded number of batches in flight. */
async function processInWorkers(
  items: PackItem[],
  sizes: number[],
  format: ObjectFormat,
  level: number,
  chunkLevel: number,
  write: (r: WorkResult) => void,
): Promise<void> {
  const sizeMap = new Map(items.map((item, i) => [item, sizes[i]]));
  const batches: PackItem[][] = [];
  let cur: PackItem[] = [];
  let curBytes = 0;
  items.forEach((item, i) => {
    cur.push(item);
    curBytes += sizes[i];
    if (cur.length >= BATCH_ITEMS || curBytes >= BATCH_BYTES) {
      batches.push(cur);
      cur = [];
      curBytes = 0;
    }
  });
  if (cur.length) batches.push(cur);
  const n = Math.max(1, Math.min(os.availableParallelism(), MAX_WORKERS, batches.length));
  // Young generations of 16 MiB: small enough to keep each worker near its working set, large enough
  // that 2 MiB batches of chunks do not scavenge all the time (at 4 MiB that was a third of the CPU).
  const workers = Array.from(
    { length: n },
    () =>
      new Worker(path.join(__dirname, 'pack-worker.js'), {
        resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_MB },
      }),
  );
  try {
    await new Promise<void>((resolve, reject) => {
      const done = new Map<number, WorkResult[]>();
      let nextToSend = 0;
      let nextToWrite = 0;
      const send = (w: Worker) => {
        if (nextToSend >= batches.length || nextToSend - nextToWrite >= n * 2) return false;
        const batch = nextToSend++;
        const msg: WorkBatch = {
          batch,
          format,
          level,
          chunkLevel,
          items: batches[batch].map((i) => toWorkItem(i, sizeMap.get(i))),
        };
        w.postMessage(msg);
        return true;
      };
      const idle: Worker[] = [];
      for (const w of workers) {
        w.on('error', reject);
        w.on('message', (m: WorkDone) => {
          done.set(m.batch, m.results);
          try {
            while (done.has(nextToWrite)) {
              for (const r of done.get(nextToWrite) as WorkResult[]) write(r);
              done.delete(nextToWrite++);
            }
          } catch (e) {
            reject(e);
            return;
          }
          if (nextToWrite === batches.length) return resolve();
          if (!send(w)) idle.push(w);
          while (idle.length && send(idle[0])) idle.shift();
        });
        send(w);
        send(w);
      }
    });
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

function toWorkItem(i: PackItem, size?: number): WorkItem {
  return { oid: i.oid, type: i.type, file: i.file, symlink: i.symlink, data: i.data, size, range: i.range };
}

/** Deflate a large file straight into the pack as one entry, chunk by chunk (memory stays flat);
 * returns the entry's CRC32. Nothing else is written beside the pack: a large object is on disk once,
 * inside the pack, so the pack's admitted upper bound bounds what the capture has on disk at every
 * moment (a temporary copy beside the pack would hold it twice while it is appended). */
async function deflateIntoPack(pack: PackFile, item: PackItem, format: ObjectFormat, level: number): Promise<number> {
  const file = item.file as string;
  // Opened once, never through a symlink or blocking on a fifo; the size read is the size hashed.
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  let closed = false;
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw changedError(item, 'not a regular file any more');
    const size = st.size;
    const hash = crypto.createHash(format).update(`blob ${size}\0`);
    const header = entryHeader(item.type, size);
    pack.write(header);
    let crc = zlib.crc32(header);
    let seen = 0;
    const deflater = zlib.createDeflate({ level, chunkSize: 1 << 20 });
    deflater.on('data', (chunk: Buffer) => {
      try {
        pack.write(chunk);
        crc = zlib.crc32(chunk, crc);
      } catch (e) {
        deflater.destroy(e as Error); // ENOSPC and the like reach the caller, not the event loop
      }
    });
    const ended = new Promise<void>((resolve, reject) => {
      deflater.on('end', resolve);
      deflater.on('error', reject);
    });
    const input = fs.createReadStream('', { fd, highWaterMark: 1 << 20, end: size, autoClose: true });
    closed = true;
    for await (const chunk of input as AsyncIterable<Buffer>) {
      seen += chunk.length;
      hash.update(chunk);
      if (!deflater.write(chunk)) await Promise.race([new Promise((r) => deflater.once('drain', r)), ended]);
    }
    deflater.end();
    await ended;
    const actual = hash.digest('hex');
    if (seen !== size || actual !== item.oid) throw changedError(item, actual);
    return crc;
  } finally {
    if (!closed) fs.closeSync(fd);
  }
}

/**
 * Write `items` (deduplicated by oid) as one pack into `<objectsDir>/pack`. Returns the pack's
 * base name, or null when there was nothing to write.
 */
export async function writePack(
  objectsDir: string,
  format: ObjectFormat,
  items: PackItem[],
  level = 1,
  beforePublish?: BeforePublish,
  options: WritePackOptions = {},
): Promise<PackResult> {
  const unique = [...new Map(items.map((i) => [i.oid, i])).values()];
  const chunkBytes = unique.reduce((n, i) => n + (i.range ? i.range.size : 0), 0);
  const chunkLevel = chunkLevelFor(options.chunkLevel ?? DEFAULT_CHUNK_COMPRESSION, chunkBytes);
  if (unique.length === 0) return { pack: null, objects: 0, bytes: 0 };
  const packDir = path.join(objectsDir, 'pack');
  fs.mkdirSync(packDir, { recursive: true });
  // The pid says whose it is: a killed capture's leftovers are removed by a later one (leftovers.ts).
  const rand = `${process.pid}_${crypto.randomBytes(6).toString('hex')}`;
  const tmpPack = path.join(packDir, `tmp_pack_xet_${rand}`);
  const tmpIdx = path.join(packDir, `tmp_idx_xet_${rand}`);
  const pack = new PackFile(tmpPack, format);
  const entries: { oid: string; offset: number; crc: number }[] = [];
  try {
    const header = Buffer.alloc(12);
    header.write('PACK', 0, 'latin1');
    header.writeUInt32BE(2, 4);
    header.writeUInt32BE(unique.length, 8);
    pack.write(header);
    await faultPoint('pack:mid-write');

    // Small objects are compressed ahead (bounded items and bytes) and written in order; large
    // files are then deflated straight into the pack, one at a time (deflateIntoPack says why).
    const sizeCache = new Map<PackItem, number>();
    const sizeOf = (i: PackItem): number => {
      let n = sizeCache.get(i);
      if (n === undefined) {
        n = i.data
          ? i.data.length
          : i.range
            ? i.range.size
            : !i.file || i.symlink
              ? 0
              : (fs.lstatSync(i.file, { throwIfNoEntry: false })?.size ?? 0);
        sizeCache.set(i, n);
      }
      return n;
    };
    const isLarge = (i: PackItem) => !!i.file && !i.symlink && !i.range && sizeOf(i) > STREAM_THRESHOLD;
    const large = unique.filter(isLarge);
    const largeSet = new Set(large);
    const small = unique.filter((i) => !largeSet.has(i));
    const typeOf = new Map(small.map((i) => [i.oid, i.type]));
    let sinceCollect = 0;
    const writeResult = (r: WorkResult) => {
      if ('error' in r) {
        if (r.error === 'changed') throw changedError({ oid: r.oid, file: r.file }, r.actual ?? '');
        throw changedError({ oid: r.oid, file: r.file }, `unreadable: ${r.actual}`);
      }
      const body = Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength);
      sinceCollect += body.length;
      if (sinceCollect > COLLECT_EVERY_BYTES) {
        sinceCollect = 0;
        collectGarbage();
      }
      const offset = pack.offset;
      const h = entryHeader(typeOf.get(r.oid) as PackItem['type'], r.size);
      pack.write(h);
      pack.write(body);
      entries.push({ oid: r.oid, offset, crc: zlib.crc32(body, zlib.crc32(h)) });
    };
    const smallSizes = small.map((i) => sizeOf(i));
    const smallBytes = smallSizes.reduce((a, b) => a + b, 0);
    if (smallBytes < PARALLEL_MIN_BYTES || os.availableParallelism() < 2) {
      try {
        for (const item of small) writeResult(processItem(toWorkItem(item, sizeOf(item)), format, level, chunkLevel));
      } finally {
        closeRangeFile();
      }
    } else {
      await processInWorkers(small, smallSizes, format, level, chunkLevel, writeResult);
    }
    for (const item of large) {
      const offset = pack.offset;
      entries.push({ oid: item.oid, offset, crc: await deflateIntoPack(pack, item, format, level) });
    }
    const checksum = pack.finish();
    writeIndex(tmpIdx, format, entries, checksum);
    const name = `pack-${checksum.toString('hex')}`;
    const finalPack = path.join(packDir, `${name}.pack`);
    const finalIdx = path.join(packDir, `${name}.idx`);
    const packBytes = pack.offset + checksum.length;
    await beforePublish?.({ name, objects: entries.length, packBytes, idxBytes: fs.statSync(tmpIdx).size });
    publish(tmpPack, finalPack);
    publish(tmpIdx, finalIdx);
    fsyncDir(packDir);
    return { pack: name, objects: entries.length, bytes: packBytes };
  } catch (e) {
    pack.abort();
    fs.rmSync(tmpIdx, { force: true });
    throw e;
  }
}

function publish(tmp: string, final: string): void {
  if (fs.existsSync(final)) {
    // The same objects in the same order were packed before: identical bytes, keep the old file.
    fs.rmSync(tmp, { force: true });
    return;
  }
  fs.renameSync(tmp, final);
}

function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Pack index version 2: fan-out, sorted names, CRC32s, 31-bit offsets (+ 64-bit table), checksums. */
function writeIndex(
  file: string,
  format: ObjectFormat,
  entries: { oid: string; offset: number; crc: number }[],
  packChecksum: Buffer,
): void {
  const sorted = [...entries].sort((a, b) => (a.oid < b.oid ? -1 : a.oid > b.oid ? 1 : 0));
  const n = sorted.length;
  const oidLen = format === 'sha256' ? 32 : 20;
  const large = sorted.filter((e) => e.offset >= 0x80000000);
  const size = 8 + 256 * 4 + n * oidLen + n * 4 + n * 4 + large.length * 8 + oidLen * 2;
  const buf = Buffer.alloc(size);
  let o = 0;
  buf.writeUInt32BE(0xff744f63, o);
  buf.writeUInt32BE(2, o + 4);
  o += 8;
  const fanout = new Uint32Array(256);
  for (const e of sorted) fanout[parseInt(e.oid.slice(0, 2), 16)]++;
  let acc = 0;
  for (let i = 0; i < 256; i++) {
    acc += fanout[i];
    buf.writeUInt32BE(acc, o);
    o += 4;
  }
  for (const e of sorted) {
    buf.write(e.oid, o, 'hex');
    o += oidLen;
  }
  for (const e of sorted) {
    buf.writeUInt32BE(e.crc >>> 0, o);
    o += 4;
  }
  let li = 0;
  for (const e of sorted) {
    buf.writeUInt32BE(e.offset >= 0x80000000 ? (0x80000000 | li++) >>> 0 : e.offset, o);
    o += 4;
  }
  for (const e of large) {
    buf.writeBigUInt64BE(BigInt(e.offset), o);
    o += 8;
  }
  packChecksum.copy(buf, o);
  o += oidLen;
  crypto.createHash(format).update(buf.subarray(0, o)).digest().copy(buf, o);
  const fd = fs.openSync(file, 'wx', 0o444);
  try {
    fs.writeSync(fd, buf);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Read a loose object (zlib of "<type> <size>\0<content>") into type and content. */
export function readLooseObject(file: string): { type: PackItem['type']; data: Buffer } {
  const raw = zlib.inflateSync(fs.readFileSync(file));
  const nul = raw.indexOf(0);
  const [type] = raw.toString('latin1', 0, nul).split(' ');
  return { type: type as PackItem['type'], data: raw.subarray(nul + 1) };
}
