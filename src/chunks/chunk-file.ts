// Chunking a file on disk: the cuts (gear.ts), every chunk's git blob id and the whole file's git
// blob id (the pointer's `blob`), in bounded memory. Nothing is stored here: the caller packs the
// chunks it lacks, reading them again by offset (the pack writer re-hashes what it reads, so a file
// that changes in between aborts the capture instead of storing a wrong chunk).
//
// A large file is chunked on every core: worker threads (chunk-worker.ts) cut regions of it, each
// as if a chunk began at the region's first byte, while this thread hashes the whole file (SHA-1 and
// SHA-256 are sequential). A region's guessed cuts are wrong until they meet a true one, and exact
// from there on: the chunker's state after a cut is always the same (h = 0, nothing in the chunk),
// so what follows a cut depends only on the bytes after it. Each region is cut a little past its end
// (`overrun`), so the true cuts of region k-1 run into region k; at the first true cut that is also
// a chunk start of region k, the two join, and the result is exactly the sequential chunker's cuts.
// Where they never meet inside region k (data with no content-defined cuts at all, such as a run of
// zeros cut only at `max`, whose phase a guess cannot know) this thread re-cuts sequentially from
// the last true cut until they do: slower, never different (test/chunks-engine.test.ts proves it on
// random, zero, periodic and adversarial data with region boundaries everywhere).

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { XetError } from '../errors';
import { NamingChunker } from './gear';
import { chunkParamsFor, type ChunkParams } from './params';
import type { ChunkRef } from './list-tree';
import type { RegionDone, RegionJob } from './chunk-worker';
import { createHash } from 'node:crypto';

const READ_BLOCK = 4 * 1024 * 1024;
/** Files below this are chunked in this thread: starting workers costs more than it gives. */
const PARALLEL_MIN_BYTES = 32 * 1024 * 1024;
/** A region of the parallel chunker: large enough that seams are rare, small enough that the
 * regions balance over the workers (and that a worker's buffer stays small). */
const REGION_BYTES = 16 * 1024 * 1024;

export interface ChunkedFile {
  size: number;
  /** The whole file's git blob id. */
  blob: string;
  params: ChunkParams;
  chunks: ChunkRef[];
}

export interface ChunkFileOptions {
  format: 'sha1' | 'sha256';
  /** The size lstat gave when the file was listed: a file of another size now changed meanwhile. */
  expectSize?: number;
  signal?: AbortSignal;
  /** Worker threads to cut with (default: the machine's parallelism, at most 4, for files of 32 MiB
   * and more); 0 cuts in this thread. */
  workers?: number;
  /** Bytes per region of the parallel chunker (tests use small ones to put seams everywhere). */
  regionBytes?: number;
}

/** Chunk a regular file (never through a symlink, never blocking on a fifo). */
export async function chunkFile(file: string, o: ChunkFileOptions): Promise<ChunkedFile> {
  let fd: fs.promises.FileHandle;
  try {
    fd = await fs.promises.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    // Gone, or a symlink or directory now, since it was listed (review 43: it was INTERNAL).
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP' || code === 'EISDIR')
      throw changed(file, 'it went away or is no longer a file');
    throw e;
  }
  try {
    const st = await fd.stat({ bigint: true });
    if (!st.isFile() || (o.expectSize !== undefined && Number(st.size) !== o.expectSize)) {
      throw changed(file, 'its size or type changed');
    }
    const size = Number(st.size);
    const params = chunkParamsFor(size);
    const workers = o.workers ?? (size >= PARALLEL_MIN_BYTES ? Math.min(os.availableParallelism(), MAX_POOL) : 0);
    if (workers < 1 || size === 0) {
      const whole = createHash(o.format).update(`blob ${size}\0`);
      const chunks: ChunkRef[] = [];
      const end = await cutSequentially(fd, file, 0, size, params, o, whole, (c) => {
        chunks.push(c);
        return false;
      });
      if (end !== size) throw changed(file, 'it shrank');
      return { size, blob: whole.digest('hex'), params, chunks };
    }
    const regionBytes = Math.max(1, o.regionBytes ?? REGION_BYTES);
    const overrun = Math.max(1024 * 1024, 4 * params.max);
    const jobs: RegionJob[] = [];
    for (let start = 0, id = 0; start < size; start += regionBytes, id++) {
      const end = Math.min(size, start + regionBytes);
      jobs.push({ id, file, format: o.format, params, start, end, limit: Math.min(size, end + overrun), size });
    }
    const pool = ensurePool(workers);
    const regions = Promise.all(jobs.map((j) => pool.run(j, o.signal)));
    regions.catch(() => undefined); // awaited below; a failure must not be unhandled meanwhile
    // Meanwhile this thread hashes the whole file.
    const whole = createHash(o.format).update(`blob ${size}\0`);
    await hashAll(fd, file, size, whole, o.signal);
    const done = await regions;
    for (const r of done) if (r.error) throw changed(file, r.error);
    const chunks = await joinRegions(fd, file, jobs, done, params, o);
    const after = await fd.stat({ bigint: true });
    if (after.size !== st.size || after.mtimeNs !== st.mtimeNs || after.ctimeNs !== st.ctimeNs) {
      throw changed(file, 'it was written to');
    }
    return { size, blob: whole.digest('hex'), params, chunks };
  } finally {
    await fd.close();
  }
}

/**
 * Read the file from `from` in blocks, the next one read ahead while `onBlock` works on this one,
 * until `onBlock` returns true or the file ends. Returns the offset read to.
 */
async function readBlocks(
  fd: fs.promises.FileHandle,
  file: string,
  from: number,
  size: number,
  signal: AbortSignal | undefined,
  onBlock: (buf: Buffer) => boolean,
): Promise<number> {
  const blocks = spareBlocks.pop() ?? [Buffer.allocUnsafe(READ_BLOCK), Buffer.allocUnsafe(READ_BLOCK)];
  let which = 0;
  let pos = from;
  let next = fd.read(blocks[which], 0, READ_BLOCK, pos);
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { bytesRead } = await next;
      if (bytesRead === 0) return pos;
      const buf = blocks[which].subarray(0, bytesRead);
      pos += bytesRead;
      if (pos > size) throw changed(file, 'it grew');
      which ^= 1;
      next = fd.read(blocks[which], 0, READ_BLOCK, pos);
      if (onBlock(buf)) return pos;
    }
  } finally {
    await next.catch(() => undefined);
    spareBlocks.push(blocks);
  }
}

/** Read blocks of finished reads, kept for the next: fresh memory costs a page fault per 4 KiB
 * here (~12 us each under the hypervisor), 25 ms for a pair of new 4 MiB blocks. */
const spareBlocks: Buffer[][] = [];

/** Hash the whole file, one sequential read. */
async function hashAll(
  fd: fs.promises.FileHandle,
  file: string,
  size: number,
  whole: ReturnType<typeof createHash>,
  signal?: AbortSignal,
): Promise<void> {
  const pos = await readBlocks(fd, file, 0, size, signal, (buf) => {
    whole.update(buf);
    return false;
  });
  if (pos !== size) throw changed(file, 'it shrank');
}

/**
 * Cut from `from` (a true cut: a chunk starts there) towards the end of the file, naming each
 * chunk, until `stop` says so or the file ends (its last chunk then ends there). Bounded memory: one
 * read block and one chunk carried across blocks. `whole`, when given, hashes every byte read.
 * Returns the offset reached: the end of the last chunk given to `stop`.
 */
async function cutSequentially(
  fd: fs.promises.FileHandle,
  file: string,
  from: number,
  size: number,
  params: ChunkParams,
  o: ChunkFileOptions,
  whole: ReturnType<typeof createHash> | null,
  stop: (c: ChunkRef) => boolean,
): Promise<number> {
  const chunker = new NamingChunker(params, o.format);
  let offset = from; // file offset of the current chunk
  let stopped = false;
  const pos = await readBlocks(fd, file, from, size, o.signal, (buf) => {
    whole?.update(buf);
    return (stopped = chunker.push(buf, (len, oid) => {
      const c = { offset, size: len, oid };
      offset += len;
      return stop(c);
    }));
  });
  if (stopped) return offset;
  if (pos !== size) return pos;
  const last = chunker.finish();
  if (last) {
    stop({ offset, ...last });
    offset += last.size;
  }
  return offset;
}

/**
 * The true chunks from the regions' guesses. `out` holds true chunks only; region k's chunks are
 * taken from the first of its chunk starts that is also a true chunk end (after which both agree,
 * see the top of this file); when none is, true chunks are cut here until one is, or past it.
 */
async function joinRegions(
  fd: fs.promises.FileHandle,
  file: string,
  jobs: RegionJob[],
  done: RegionDone[],
  params: ChunkParams,
  o: ChunkFileOptions,
): Promise<ChunkRef[]> {
  const size = jobs[jobs.length - 1].size;
  const out: ChunkRef[] = [];
  const take = (r: RegionDone, job: RegionJob, from: number) => {
    for (let i = from; i < r.ends.length; i++) {
      const offset = i === 0 ? job.start : r.ends[i - 1];
      out.push({ offset, size: r.ends[i] - offset, oid: r.oids[i] });
    }
  };
  take(done[0], jobs[0], 0); // region 0 starts at a true cut: the file's start
  for (let k = 1; k < jobs.length; k++) {
    const job = jobs[k];
    const r = done[k];
    const trueEnd = out.length ? out[out.length - 1].offset + out[out.length - 1].size : 0;
    if (trueEnd >= size) break;
    // Region k's chunk starts, by offset: index of the chunk that starts there.
    const starts = new Map<number, number>();
    starts.set(job.start, 0);
    for (let i = 0; i + 1 < r.ends.length; i++) starts.set(r.ends[i], i + 1);
    // Region k's guesses reach this far; beyond it they say nothing.
    const reach = r.ends.length ? r.ends[r.ends.length - 1] : job.start;
    // The first true end at or after the region's start that is one of its starts.
    let joined = -1;
    let j = out.length - 1;
    while (j > 0 && out[j - 1].offset + out[j - 1].size >= job.start) j--;
    for (; j < out.length; j++) {
      const e = out[j].offset + out[j].size;
      if (e >= job.start && starts.has(e)) {
        joined = e;
        out.length = j + 1;
        break;
      }
    }
    if (joined < 0 && trueEnd < reach) {
      // No meeting yet: cut for real from the last true cut until a true end is a start of region k.
      await cutSequentially(fd, file, trueEnd, size, params, o, null, (c) => {
        out.push(c);
        const e = c.offset + c.size;
        if (starts.has(e)) joined = e;
        return joined >= 0 || e >= reach;
      });
    }
    if (joined >= 0) take(r, job, starts.get(joined) as number);
  }
  const last = out.length ? out[out.length - 1].offset + out[out.length - 1].size : 0;
  if (last < size) {
    await cutSequentially(fd, file, last, size, params, o, null, (c) => {
      out.push(c);
      return false;
    });
  }
  const end = out.length ? out[out.length - 1].offset + out[out.length - 1].size : 0;
  if (end !== size) throw changed(file, 'it shrank');
  return out;
}

// ---------------------------------------------------------------------------------------------
// The worker pool: started on first use, kept for the next file (a capture chunks many), and
// unreferenced while idle so that it never keeps the process alive.

const MAX_POOL = 4;

interface Pending {
  job: RegionJob;
  resolve: (r: RegionDone) => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal;
}

class RegionPool {
  private readonly idle: Worker[] = [];
  private readonly busy = new Map<Worker, Pending>();
  private readonly queue: Pending[] = [];
  private size = 0;

  constructor(private limit: number) {}

  grow(limit: number): void {
    this.limit = Math.max(this.limit, limit);
  }

  /** Nothing running or waiting. */
  quiet(): boolean {
    return this.busy.size === 0 && this.queue.length === 0;
  }

  async stop(): Promise<void> {
    const all = this.idle.splice(0);
    this.limit = 0;
    await Promise.all(all.map((w) => w.terminate()));
  }

  run(job: RegionJob, signal?: AbortSignal): Promise<RegionDone> {
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject, signal });
      this.pump();
    });
  }

  private spawn(): Worker {
    const w = new Worker(path.join(__dirname, 'chunk-worker.js'));
    this.size++;
    w.on('message', (r: RegionDone) => {
      const p = this.busy.get(w);
      this.busy.delete(w);
      this.idle.push(w);
      w.unref();
      p?.resolve(r);
      this.pump();
    });
    let dead = false;
    const gone = (e: unknown) => {
      if (dead) return; // 'error' is followed by 'exit'
      dead = true;
      const p = this.busy.get(w);
      this.busy.delete(w);
      const at = this.idle.indexOf(w);
      if (at >= 0) this.idle.splice(at, 1);
      this.size--;
      p?.reject(e);
      this.pump();
    };
    w.on('error', gone);
    w.on('exit', (code) => gone(new Error(`chunk worker exited (${code})`)));
    return w;
  }

  private pump(): void {
    while (this.queue.length) {
      const p = this.queue[0];
      if (p.signal?.aborted) {
        this.queue.shift();
        p.reject(p.signal.reason);
        continue;
      }
      let w = this.idle.pop();
      if (!w && this.size < this.limit) w = this.spawn();
      if (!w) return;
      this.queue.shift();
      this.busy.set(w, p);
      w.ref();
      w.postMessage(p.job);
    }
  }
}

let pool: RegionPool | null = null;

/**
 * Stop the pool's workers once the files of a capture are chunked: each holds a region-sized read
 * buffer and its own V8 heap (~30 MiB together), which the pack writer's workers would otherwise
 * share the machine's memory with at the peak of a cold capture.
 */
export async function releaseChunkWorkers(): Promise<void> {
  const p = pool;
  if (!p?.quiet()) return;
  pool = null;
  await p.stop();
}

function ensurePool(n: number): RegionPool {
  if (!pool) pool = new RegionPool(n);
  else pool.grow(n);
  return pool;
}

function changed(file: string, why: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${file} changed while it was being captured (${why}); capture again`, {
    path: file,
  });
}
