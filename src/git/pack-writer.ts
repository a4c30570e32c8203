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
import { promisify } from 'node:util';
import * as zlib from 'node:zlib';
import { XetError } from '../errors';

const deflate = promisify(zlib.deflate);

export type ObjectFormat = 'sha1' | 'sha256';

export interface PackItem {
  oid: string;
  type: 'blob' | 'tree' | 'commit' | 'tag';
  /** Content given directly (trees, small objects)… */
  data?: Buffer;
  /** …or read from this file (regular file) or link (symlink target) when written. */
  file?: string;
  symlink?: boolean;
}

export interface PackResult {
  pack: string | null;
  objects: number;
  bytes: number;
}

const TYPE_CODE = { commit: 1, tree: 2, blob: 3, tag: 4 } as const;
/** Files above this are streamed through zlib rather than read whole (keeps memory flat). */
const STREAM_THRESHOLD = 32 * 1024 * 1024;
/** Bytes of file content read ahead of the writer. */
const READ_AHEAD_BYTES = 64 * 1024 * 1024;
const READ_AHEAD_ITEMS = 64;

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

function objectHash(format: ObjectFormat, type: string, data: Buffer): string {
  return crypto.createHash(format).update(`${type} ${data.length}\0`).update(data).digest('hex');
}

/** A pack being written: bytes go to the file and into the running trailer hash. */
class PackFile {
  private readonly fd: number;
  private readonly hash: crypto.Hash;
  offset = 0;

  constructor(
    readonly file: string,
    format: ObjectFormat,
  ) {
    this.fd = fs.openSync(file, 'wx', 0o444);
    this.hash = crypto.createHash(format);
  }

  write(buf: Buffer): void {
    let done = 0;
    while (done < buf.length) done += fs.writeSync(this.fd, buf, done, buf.length - done, null);
    this.hash.update(buf);
    this.offset += buf.length;
  }

  finish(): Buffer {
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

interface Prepared {
  item: PackItem;
  size: number;
  /** Deflated body, or null when the item is streamed at write time. */
  body: Buffer | null;
  /** Bytes of read-ahead budget held until the item is written. */
  held: number;
}

/** Read-ahead memory budget, granted strictly in item order so the writer can never starve: only the
 * oldest request ever waits, and a request larger than the budget is granted when nothing is held. */
class Budget {
  private used = 0;
  private tail: Promise<void> = Promise.resolve();
  private waiter: (() => void) | null = null;

  constructor(private readonly max: number) {}

  acquire(n: number): Promise<void> {
    const turn = this.tail.then(() => this.grant(n));
    this.tail = turn;
    return turn;
  }

  release(n: number): void {
    this.used -= n;
    this.waiter?.();
  }

  private grant(n: number): Promise<void> {
    return new Promise((resolve) => {
      const attempt = () => {
        if (this.used !== 0 && this.used + n > this.max) return;
        this.used += n;
        this.waiter = null;
        resolve();
      };
      this.waiter = attempt;
      attempt();
    });
  }
}

// Reads are synchronous on purpose: for small files libuv's open/stat/read/close round trips cost
// more than the read itself, and the main thread has nothing better to do; zlib runs on the pool.
function readContent(item: PackItem): Buffer {
  if (item.data) return item.data;
  if (!item.file) throw new Error(`pack item ${item.oid} has neither data nor file`);
  if (item.symlink) return fs.readlinkSync(item.file, { encoding: 'buffer' });
  return fs.readFileSync(item.file);
}

function changedError(item: PackItem, actual: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${item.file} changed while it was being captured; capture again`, {
    path: item.file,
    expected: item.oid,
    actual,
  });
}

async function prepare(item: PackItem, format: ObjectFormat, level: number, budget: Budget): Promise<Prepared> {
  let size = item.data?.length ?? 0;
  if (item.file && !item.symlink) {
    const st = fs.lstatSync(item.file, { throwIfNoEntry: false });
    if (!st?.isFile()) throw changedError(item, 'not a regular file any more');
    size = st.size;
  }
  const streamed = size > STREAM_THRESHOLD;
  const held = streamed ? 0 : size;
  await budget.acquire(held);
  if (streamed) return { item, size, body: null, held };
  const data = readContent(item);
  const actual = objectHash(format, item.type, data);
  if (actual !== item.oid) {
    budget.release(held);
    throw changedError(item, actual);
  }
  // Tiny objects are deflated inline: a thread-pool round trip costs more than the work.
  const body = data.length < 4096 ? zlib.deflateSync(data, { level }) : await deflate(data, { level });
  return { item, size: data.length, body, held };
}

/** Stream a large file into the pack: hash and deflate chunk by chunk. */
async function writeStreamed(pack: PackFile, p: Prepared, format: ObjectFormat, level: number): Promise<number> {
  const file = p.item.file as string;
  const hash = crypto.createHash(format).update(`blob ${p.size}\0`);
  const header = entryHeader('blob', p.size);
  pack.write(header);
  let crc = zlib.crc32(header);
  let seen = 0;
  const deflater = zlib.createDeflate({ level });
  const done = new Promise<void>((resolve, reject) => {
    deflater.on('data', (chunk: Buffer) => {
      pack.write(chunk);
      crc = zlib.crc32(chunk, crc);
    });
    deflater.on('end', resolve);
    deflater.on('error', reject);
  });
  const input = fs.createReadStream(file, { highWaterMark: 1 << 20 });
  for await (const chunk of input as AsyncIterable<Buffer>) {
    seen += chunk.length;
    hash.update(chunk);
    if (!deflater.write(chunk)) await new Promise((r) => deflater.once('drain', r));
  }
  deflater.end();
  await done;
  const actual = hash.digest('hex');
  if (seen !== p.size || actual !== p.item.oid) throw changedError(p.item, actual);
  return crc;
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
): Promise<PackResult> {
  const unique = [...new Map(items.map((i) => [i.oid, i])).values()];
  if (unique.length === 0) return { pack: null, objects: 0, bytes: 0 };
  const packDir = path.join(objectsDir, 'pack');
  fs.mkdirSync(packDir, { recursive: true });
  const rand = crypto.randomBytes(6).toString('hex');
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

    // Read ahead with bounded items and bytes; write strictly in order.
    const budget = new Budget(READ_AHEAD_BYTES);
    const inflight: Promise<Prepared>[] = [];
    let next = 0;
    const launch = () => {
      while (next < unique.length && inflight.length < READ_AHEAD_ITEMS) {
        const p = prepare(unique[next++], format, level, budget);
        p.catch(() => undefined); // awaited in order below; avoid unhandled-rejection noise meanwhile
        inflight.push(p);
      }
    };
    launch();
    for (let i = 0; i < unique.length; i++) {
      const p = await (inflight.shift() as Promise<Prepared>);
      const offset = pack.offset;
      let crc: number;
      if (p.body === null) {
        crc = await writeStreamed(pack, p, format, level);
      } else {
        const h = entryHeader(p.item.type, p.size);
        pack.write(h);
        pack.write(p.body);
        crc = zlib.crc32(p.body, zlib.crc32(h));
      }
      budget.release(p.held);
      entries.push({ oid: p.item.oid, offset, crc });
      launch();
    }
    const checksum = pack.finish();
    writeIndex(tmpIdx, format, entries, checksum);
    const name = `pack-${checksum.toString('hex')}`;
    const finalPack = path.join(packDir, `${name}.pack`);
    const finalIdx = path.join(packDir, `${name}.idx`);
    publish(tmpPack, finalPack);
    publish(tmpIdx, finalIdx);
    fsyncDir(packDir);
    return { pack: name, objects: entries.length, bytes: pack.offset + checksum.length };
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
