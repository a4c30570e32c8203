// A pack whose objects are not known when it is started: capture's one pass over the worktree
// decides what to store only as it hashes each file (pack-writer.ts writes packs of objects known in
// advance). Worker threads append entries at ranges they reserve with an atomic add on a shared
// end-of-pack counter (file-scan.ts, pack-worker.ts); the object count in the header is written
// once it is known, and the trailer is the SHA-1 of the finished file, read back from the page
// cache. The hash cannot start before the count (it is in the first bytes hashed); the caller's
// last append (`last`) knows it, so from there the bytes already written and each batch as it lands
// are hashed while the workers write the rest, and finish hashes only what is left (on the bench
// tree's cold capture finish went from ~315 to ~100 ms of one core; the rest of the pack grew by
// most of that, its two cores being busy already). Publishing is
// pack-writer.ts's: fsync, the .idx written, both renamed into place with the .idx last.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import * as zlib from 'node:zlib';
import { XetError } from '../errors';
import { entryHeader, processItem, type WorkBatch, type WorkDone } from './pack-worker';
import {
  fsyncDir,
  publishFile,
  writePackIndex,
  type BeforePublish,
  type PackItem,
  type PackResult,
} from './pack-writer';

const MAX_WORKERS = Number(process.env.XET_PACK_WORKERS ?? 4);
const WORKER_YOUNG_MB = Number(process.env.XET_WORKER_YOUNG_MB ?? 16);

/** Worker threads running pack-worker.ts, each given at most two messages at a time. */
export class WorkerPool {
  private readonly workers: Worker[];
  private readonly queue: { msg: unknown; resolve: (v: unknown) => void; reject: (e: Error) => void }[] = [];
  private readonly busy = new Map<Worker, { resolve: (v: unknown) => void; reject: (e: Error) => void }[]>();
  private failed: Error | null = null;

  constructor(n = WorkerPool.size()) {
    this.workers = Array.from(
      { length: n },
      // Young generations of 16 MiB: small enough to keep each worker near its working set, large
      // enough that 2 MiB batches do not scavenge all the time.
      () =>
        new Worker(path.join(__dirname, 'pack-worker.js'), {
          resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_MB },
        }),
    );
    for (const w of this.workers) {
      this.busy.set(w, []);
      w.on('message', (m: unknown) => {
        const waiting = this.busy.get(w) as { resolve: (v: unknown) => void }[];
        waiting.shift()?.resolve(m);
        this.pump();
      });
      w.on('error', (e: Error) => this.fail(e));
      w.on('exit', (code) => {
        if (code !== 0) this.fail(new Error(`a pack worker exited with code ${code}`));
      });
    }
  }

  static size(): number {
    return Math.max(1, Math.min(os.availableParallelism(), MAX_WORKERS));
  }

  get threads(): number {
    return this.workers.length;
  }

  run<T>(msg: unknown): Promise<T> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ msg, resolve: resolve as (v: unknown) => void, reject });
      this.pump();
    });
  }

  private pump(): void {
    for (const w of this.workers) {
      const waiting = this.busy.get(w) as { resolve: (v: unknown) => void; reject: (e: Error) => void }[];
      while (waiting.length < 2 && this.queue.length) {
        const job = this.queue.shift() as (typeof this.queue)[number];
        waiting.push(job);
        w.postMessage(job.msg);
      }
    }
  }

  private fail(e: Error): void {
    if (this.failed) return;
    this.failed = e;
    for (const waiting of this.busy.values()) for (const j of waiting.splice(0)) j.reject(e);
    for (const j of this.queue.splice(0)) j.reject(e);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

export interface PackEntry {
  oid: string;
  offset: number;
  crc: number;
}

export class PackStream {
  readonly fd: number;
  /** The end of the pack so far (a BigInt64Array over it): every writer reserves its range here. */
  readonly end = new SharedArrayBuffer(8);
  readonly entries: PackEntry[] = [];
  private readonly oids = new Set<string>();
  private closed = false;
  /** Once the count is written (`fixCount`): the hash of the bytes before `hashed`, the count it
   * was started with, and the written ranges beyond `hashed` not yet joined to it. */
  private trailer: {
    hash: crypto.Hash;
    count: number;
    hashed: number;
    /** The end of the bytes written without a gap from the start. */
    joined: number;
    landed: Map<number, number>;
    /** Whether a pass of catchUp is under way. */
    running: boolean;
    /** What stopped catchUp (a read of the pack failed): finish() throws it. */
    failed?: Error;
  } | null = null;

  private constructor(
    readonly packDir: string,
    readonly file: string,
    readonly idxFile: string,
    readonly format: 'sha1' | 'sha256',
  ) {
    this.fd = fs.openSync(file, 'wx+', 0o444);
    const header = Buffer.alloc(12);
    header.write('PACK', 0, 'latin1');
    header.writeUInt32BE(2, 4);
    fs.writeSync(this.fd, header, 0, 12, 0);
    new BigInt64Array(this.end)[0] = 12n;
  }

  static open(objectsDir: string, format: 'sha1' | 'sha256'): PackStream {
    const packDir = path.join(objectsDir, 'pack');
    fs.mkdirSync(packDir, { recursive: true });
    // The pid says whose it is: a killed capture's leftovers are removed by a later one (leftovers.ts).
    const rand = `${process.pid}_${crypto.randomBytes(6).toString('hex')}`;
    const pack = new PackStream(
      packDir,
      path.join(packDir, `tmp_pack_xet_${rand}`),
      path.join(packDir, `tmp_idx_xet_${rand}`),
      format,
    );
    return pack;
  }

  get size(): number {
    return Number(new BigInt64Array(this.end)[0]);
  }

  /** Whether an entry for this object is already in the pack. */
  has(oid: string): boolean {
    return this.oids.has(oid);
  }

  add(entry: PackEntry): void {
    if (this.oids.has(entry.oid)) throw new XetError('GIT_FAILED', `object ${entry.oid} was packed twice`);
    this.oids.add(entry.oid);
    this.entries.push(entry);
  }

  /** Writes the object count into the header and sets the trailer's hash up from the start, with
   * everything below the end written (no writer may be running). finish() checks the count again. */
  private fixCount(count: number): void {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(count, 0);
    this.writeAt(header, 8);
    const joined = this.size;
    this.trailer = {
      hash: crypto.createHash(this.format),
      count,
      hashed: 0,
      joined,
      landed: new Map(),
      running: false,
    };
  }

  /** Hashes what is joined a block at a time, letting the event loop run between blocks: the
   * workers' next batches are handed out from it, and a long synchronous hash would leave them idle. */
  private catchUp(): void {
    const t = this.trailer;
    if (!t || t.running || t.hashed >= t.joined) return;
    t.running = true;
    const step = (): void => {
      if (this.trailer !== t || this.closed) return;
      if (t.hashed >= t.joined) {
        t.running = false;
        return;
      }
      try {
        this.hashTo(Math.min(t.joined, t.hashed + HASH_STEP));
      } catch (e) {
        // Out of every caller's reach here: kept for finish(), which fails the capture with it.
        t.failed = e as Error;
        return;
      }
      setImmediate(step);
    };
    setImmediate(step);
  }

  /** Hashes the file from where the trailer's hash stands to `end` (written, all of it). */
  private hashTo(end: number): void {
    const t = this.trailer as NonNullable<PackStream['trailer']>;
    const buf = hashBuffer();
    while (t.hashed < end) {
      const n = fs.readSync(this.fd, buf, 0, Math.min(buf.length, end - t.hashed), t.hashed);
      if (n === 0) throw new XetError('GIT_FAILED', `${this.file} is shorter than what was written to it`);
      t.hash.update(buf.subarray(0, n));
      t.hashed += n;
    }
  }

  /** A range a writer finished: hashed soon if it joins what is written before it (with any that
   * waited on it). */
  private landed(offset: number, length: number): void {
    const t = this.trailer;
    if (!t || length === 0) return;
    t.landed.set(offset, length);
    t.joined = joinLanded(t.landed, t.joined);
    this.catchUp();
  }

  private reserve(length: number): number {
    return Number(Atomics.add(new BigInt64Array(this.end), 0, BigInt(length)));
  }

  private writeAt(buf: Buffer, offset: number): void {
    let done = 0;
    while (done < buf.length) done += fs.writeSync(this.fd, buf, done, buf.length - done, offset + done);
  }

  /** Objects whose bytes are at hand or in files, written by the workers (or here, when few).
   * `last`: nothing is appended after these, so the count is known and the trailer's hash runs
   * beside the writes (an append after all the same only costs finish() a whole hash again). */
  async appendItems(
    items: PackItem[],
    level: number,
    chunkLevel: number,
    pool: WorkerPool | null,
    last = false,
  ): Promise<void> {
    const todo = [...new Map(items.filter((i) => !this.oids.has(i.oid)).map((i) => [i.oid, i])).values()];
    if (!todo.length) return;
    if (last && pool) {
      this.fixCount(this.entries.length + todo.length);
      this.catchUp();
    }
    if (!pool) {
      for (const item of todo) {
        const r = processItem(
          {
            oid: item.oid,
            type: item.type,
            file: item.file,
            symlink: item.symlink,
            data: item.data,
            range: item.range,
          },
          this.format,
          level,
          chunkLevel,
        );
        if ('error' in r) throw itemError(r);
        const h = entryHeader(item.type, r.size);
        const body = Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength);
        const offset = this.reserve(h.length + body.length);
        this.writeAt(Buffer.concat([h, body]), offset);
        this.add({ oid: item.oid, offset, crc: zlib.crc32(body, zlib.crc32(h)) });
      }
      return;
    }
    const batches: PackItem[][] = [];
    let cur: PackItem[] = [];
    let bytes = 0;
    for (const item of todo) {
      cur.push(item);
      bytes += item.data?.length ?? item.range?.size ?? 4096;
      if (cur.length >= 256 || bytes >= 2 << 20) {
        batches.push(cur);
        cur = [];
        bytes = 0;
      }
    }
    if (cur.length) batches.push(cur);
    const results = await Promise.all(
      batches.map((b, n) =>
        pool
          .run<WorkDone>({
            batch: n,
            format: this.format,
            level,
            chunkLevel,
            items: batchItems(b),
            fd: this.fd,
            end: this.end,
          } satisfies WorkBatch)
          .then((r) => {
            if (!r.error) this.landed(r.offset, r.length);
            return r;
          }),
      ),
    );
    for (const r of results) {
      if (r.error) throw itemError(r.error);
      for (const e of r.entries) this.add(e);
    }
  }

  /** A file too big to hold, deflated into the pack a MiB at a time (no other writer may be
   * running: its compressed length is not known in advance). Its bytes must hash to `oid`. */
  async appendBigFile(oid: string, file: string, level: number): Promise<void> {
    if (this.oids.has(oid)) return;
    let fd: number;
    try {
      fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR') throw changed(file, 'it went away');
      throw e;
    }
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile()) throw changed(file, 'not a regular file any more');
      const size = st.size;
      const start = this.size;
      let pos = start;
      const header = entryHeader('blob', size);
      this.writeAt(header, pos);
      pos += header.length;
      let crc = zlib.crc32(header);
      const hash = crypto.createHash(this.format).update(`blob ${size}\0`);
      const deflater = zlib.createDeflate({ level, chunkSize: 1 << 20 });
      let failure: Error | null = null;
      deflater.on('data', (chunk: Buffer) => {
        try {
          this.writeAt(chunk, pos);
          pos += chunk.length;
          crc = zlib.crc32(chunk, crc);
        } catch (e) {
          failure = e as Error;
          deflater.destroy(e as Error);
        }
      });
      const ended = new Promise<void>((resolve, reject) => {
        deflater.on('end', resolve);
        deflater.on('error', reject);
      });
      const buf = Buffer.allocUnsafe(1 << 20);
      let seen = 0;
      for (;;) {
        const n = fs.readSync(fd, buf, 0, Math.min(buf.length, size + 1 - seen), null);
        if (n === 0) break;
        seen += n;
        if (seen > size) break;
        const chunk = Buffer.from(buf.subarray(0, n));
        hash.update(chunk);
        if (!deflater.write(chunk)) await Promise.race([new Promise((r) => deflater.once('drain', r)), ended]);
      }
      deflater.end();
      await ended;
      if (failure) throw failure;
      const actual = hash.digest('hex');
      if (seen !== size || actual !== oid) throw changed(file, 'its content is not what was hashed before');
      new BigInt64Array(this.end)[0] = BigInt(pos);
      this.add({ oid, offset: start, crc });
    } finally {
      fs.closeSync(fd);
    }
  }

  /** Count, trailer, index; then `beforePublish` (the allowance's recheck) and the renames. A pack
   * with no entries is removed, and null returned. With `keep` (its text), a `.keep` file is made
   * before the pack is visible: its objects are unreferenced until the caller's ref exists, and a
   * `git repack -a -d` run meanwhile would otherwise delete them with the pack (git's own fetch
   * and push hold their packs the same way). The caller removes it (`kept`) after its ref. */
  async finish(beforePublish?: BeforePublish, keep?: string): Promise<PackResult> {
    if (!this.entries.length) {
      this.abort();
      return { pack: null, objects: 0, bytes: 0 };
    }
    const end = this.size;
    // A count fixed before the last append, or one that turned out wrong (something appended after
    // it): the count written now and the whole file hashed.
    if (this.trailer?.failed) throw this.trailer.failed;
    if (this.trailer?.count !== this.entries.length) this.fixCount(this.entries.length);
    this.hashTo(end);
    const t = this.trailer as NonNullable<PackStream['trailer']>;
    if (t.hashed !== end) throw new XetError('GIT_FAILED', `${this.file}: hashed ${t.hashed} of ${end} bytes`);
    const checksum = t.hash.digest();
    this.writeAt(checksum, end);
    fs.fsyncSync(this.fd);
    fs.closeSync(this.fd);
    this.closed = true;
    writePackIndex(this.idxFile, this.format, this.entries, checksum);
    const name = `pack-${checksum.toString('hex')}`;
    const packBytes = end + checksum.length;
    await beforePublish?.({
      name,
      objects: this.entries.length,
      packBytes,
      idxBytes: fs.statSync(this.idxFile).size,
    });
    const kept = keep === undefined ? undefined : holdPack(path.join(this.packDir, `${name}.keep`), keep);
    try {
      publishFile(this.file, path.join(this.packDir, `${name}.pack`));
      publishFile(this.idxFile, path.join(this.packDir, `${name}.idx`));
      fsyncDir(this.packDir);
    } catch (e) {
      if (kept) fs.rmSync(kept, { force: true });
      throw e;
    }
    return { pack: name, objects: this.entries.length, bytes: packBytes, kept };
  }

  abort(): void {
    if (!this.closed) {
      try {
        fs.closeSync(this.fd);
      } catch {
        /* already closed */
      }
      this.closed = true;
    }
    fs.rmSync(this.file, { force: true });
    fs.rmSync(this.idxFile, { force: true });
  }
}

/** Where the bytes written without a gap end, given where they ended (`joined`) and the ranges
 * written beyond it (offset → length; the ones joined are taken out). */
export function joinLanded(landed: Map<number, number>, joined: number): number {
  for (let next = landed.get(joined); next !== undefined; next = landed.get(joined)) {
    landed.delete(joined);
    joined += next;
  }
  return joined;
}

/** Bytes catchUp hashes before it lets the event loop run (~0.7 ms here). */
const HASH_STEP = 1 << 20;
let hashBlock: Buffer | null = null;
/** One read buffer for the trailer's hash, kept: fresh memory costs a page fault per 4 KiB here. */
function hashBuffer(): Buffer {
  hashBlock ??= Buffer.allocUnsafe(4 << 20);
  return hashBlock;
}

function changed(file: string, why: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${file} changed while it was being captured (${why}); capture again`, {
    path: file,
  });
}

/** A worker's failure as the main thread's: a changed or unreadable file, or a failed write (its
 * errno code kept, so a full disk is told as one). */
function itemError(e: { oid: string; error: string; file?: string; actual?: string; code?: string }): Error {
  if (e.error === 'write') return Object.assign(new Error(e.actual ?? 'write failed'), { code: e.code });
  if (e.error === 'changed') {
    return new XetError('WORKTREE_CHANGED', `${e.file} changed while it was being captured; capture again`, {
      path: e.file,
      expected: e.oid,
      actual: e.actual,
    });
  }
  return new XetError('WORKTREE_CHANGED', `${e.file} changed while it was being captured; capture again`, {
    path: e.file,
    expected: e.oid,
    actual: `unreadable: ${e.actual}`,
  });
}

/** Makes `file` (a pack's `.keep`) unless one is there: a `.keep` someone else made (the same pack
 * written before and kept by its user) is theirs, neither taken over nor removed later. */
function holdPack(file: string, text: string): string | undefined {
  try {
    fs.writeFileSync(file, text, { flag: 'wx', mode: 0o644 });
    return file;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return undefined;
    throw e;
  }
}

/** A batch's items as a worker gets them, their data copied into one buffer of the batch's own:
 * postMessage clones the whole buffer under a view, so a view into a larger one (the tree
 * builder's arena: 3 MB for the bench tree) was cloned whole into every batch (+35 MiB of RSS). */
export function batchItems(batch: PackItem[]): WorkBatch['items'] {
  let total = 0;
  for (const i of batch) total += i.data?.length ?? 0;
  const own = Buffer.allocUnsafeSlow(total);
  let at = 0;
  return batch.map((i) => {
    let data: Buffer | undefined;
    if (i.data) {
      data = own.subarray(at, at + i.data.copy(own, at));
      at += data.length;
    }
    return {
      oid: i.oid,
      type: i.type,
      file: i.file,
      symlink: i.symlink,
      data,
      range: i.range,
      size: data?.length ?? i.range?.size,
    };
  });
}
