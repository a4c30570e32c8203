// Reading chunked files back: a pointer -> its chunk list (only the segments a range touches) -> the
// chunks' bytes, streamed through one `git cat-file --batch` at the pace the output accepts, so
// memory stays at a few chunks whatever the range. Every chunk is checked before its bytes go out
// (type, size from the list, its hash: git does not re-hash objects it reads), and a whole-file
// read checks the reassembled bytes against the pointer's blob id. Restore, archive, export, diff
// and `git xet cat` all read through here.
//
// A whole-file read whose output nobody uses before the read has returned (restore's temporary
// file, renamed only afterwards; verify's sink) is `withheld`: its chunks are checked for type and
// size but not hashed one by one, since the whole-file hash proves every byte. The pointer's `blob`
// is the git blob id of the whole content, so bytes that hash to it are the file (the same
// collision resistance every chunk id relies on): whatever chunk was read wrong (a flipped bit, a
// forged pack or index, a list naming another chunk) makes the whole hash differ, and the read
// fails with INTEGRITY_MISMATCH before anything is published. Per-chunk hashes only fail earlier;
// they cost a second pass over the bytes and a hash per ~8 KiB (~0.2 s on the bench's 170 MB).

import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { XetError } from '../errors';
import { gitStream, type GitOptions, type GitStream } from '../git/exec';
import type { PackObject, PackReader } from '../git/pack-reader';
import { catFileBatch } from '../git/plumbing';
import { parseListTree, parseSegment, SEGMENT_CHUNKS, type ChunkRef } from './list-tree';
import type { LocalPacks } from './local-packs';
import { MAX_POINTER_BYTES, parsePointer, type ChunkPointer } from './pointer';

/**
 * `git -c` flags for a cat-file that reads big data out of packs. Git mmaps packs in windows of
 * core.packedGitWindowSize (1 GiB on 64-bit) and keeps up to core.packedGitLimit (8 GiB) mapped, so
 * every page of a long read stays resident: the file-backed pages count in the process's RSS
 * (a 100 MiB range read left git at +106 MiB RssFile). Small windows under a small limit make git
 * unmap what it has read: memory stays flat whatever the range, at the cost of an mmap per 1 MiB.
 */
export const PACK_READ_FLAGS: readonly string[] = ['-c', 'core.packedGitWindowSize=1m', '-c', 'core.packedGitLimit=4m'];

/** Bytes gathered into one write to the output (readRange). */
const OUT_BATCH = 1024 * 1024;

export interface ReadContext {
  /** Where git finds the objects (cwd and env of the repository or a shadow). */
  git: GitOptions;
  format: 'sha1' | 'sha256';
  signal?: AbortSignal;
  /** The repository's packs, opened by the caller (who closes them): withheld reads take the chunks
   * these hold straight from them (local-packs.ts), and pointers, lists and segments are read from
   * them, hash-checked, instead of through two git processes per file. */
  packs?: LocalPacks;
}

/**
 * Small objects (pointers, list trees, segments) by id: those the packs of `ctx` hold are read and
 * hashed here; the rest, and any the packs fail to give (a damaged or forged entry, one over
 * `maxBytes`), through `git cat-file`, so that git's answer and its refusals stay the ones given.
 */
async function readSmall(
  oids: string[],
  ctx: ReadContext,
  maxBytes: number,
): Promise<Map<string, { type: string; data: Buffer } | null> & { oversized: Map<string, number> }> {
  const found = new Map<string, { type: string; data: Buffer } | null>();
  const rest: string[] = [];
  for (const oid of oids) {
    const reader = ctx.packs?.find(oid) ?? null;
    let obj: { type: string; data: Buffer } | null;
    try {
      obj = reader ? reader.read(oid, maxBytes) : null;
    } catch {
      obj = null; // git gives its own answer below
    }
    if (obj) found.set(oid, obj);
    else rest.push(oid);
  }
  if (!rest.length) return Object.assign(found, { oversized: new Map<string, number>() });
  const viaGit = await catFileBatch(rest, ctx.git, maxBytes);
  for (const [oid, obj] of found) viaGit.set(oid, obj);
  return viaGit;
}

/** A chunked file's list, its segments read on demand and kept. */
export class ChunkList {
  private readonly segmentCache = new Map<number, ChunkRef[]>();

  private constructor(
    readonly pointer: ChunkPointer,
    readonly where: string,
    private readonly segments: { offset: number; oid: string }[],
    private readonly ctx: ReadContext,
  ) {}

  /** Read and check a pointer blob and its list tree. */
  static async open(pointerOid: string, where: string, ctx: ReadContext): Promise<ChunkList> {
    const objs = await readSmall([pointerOid], ctx, MAX_POINTER_BYTES);
    const got = objs.get(pointerOid);
    if (objs.oversized.has(pointerOid)) parsePointer(Buffer.alloc(MAX_POINTER_BYTES + 1), ctx.format, where);
    if (!got || got.type !== 'blob') {
      throw new XetError('SNAPSHOT_INVALID', `${where}: the chunk pointer ${pointerOid} is missing`, { path: where });
    }
    return ChunkList.fromPointer(parsePointer(got.data, ctx.format, where), where, ctx);
  }

  static async fromPointer(pointer: ChunkPointer, where: string, ctx: ReadContext): Promise<ChunkList> {
    if (pointer.chunks === 0) return new ChunkList(pointer, where, [], ctx);
    const maxBytes = Math.ceil(pointer.chunks / SEGMENT_CHUNKS) * 60;
    const objs = await readSmall([pointer.list], ctx, maxBytes);
    const got = objs.get(pointer.list);
    if (!got || got.type !== 'tree') {
      throw new XetError('SNAPSHOT_INVALID', `${where}: the chunk list ${pointer.list} is missing or not a tree`, {
        path: where,
        list: pointer.list,
      });
    }
    return new ChunkList(pointer, where, parseListTree(got.data, pointer, ctx.format, where), ctx);
  }

  get size(): number {
    return this.pointer.size;
  }

  /** The chunks that overlap [start, end) (end exclusive), in order; reads only their segments
   * (those not read before, in one batch). */
  async chunksFor(start: number, end: number): Promise<ChunkRef[]> {
    if (end <= start) return [];
    const first = this.segmentIndex(start);
    const last = this.segmentIndex(end - 1);
    const wanted: number[] = [];
    for (let s = first; s <= last; s++) wanted.push(s);
    await this.readSegments(wanted.filter((s) => !this.segmentCache.has(s)));
    const out: ChunkRef[] = [];
    for (const s of wanted) {
      for (const c of this.segmentCache.get(s) as ChunkRef[])
        if (c.offset < end && c.offset + c.size > start) out.push(c);
    }
    return out;
  }

  private segmentIndex(offset: number): number {
    let lo = 0;
    let hi = this.segments.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.segments[mid].offset <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private async readSegments(indexes: number[]): Promise<void> {
    if (!indexes.length) return;
    const oids = indexes.map((i) => this.segments[i].oid);
    const objs = await readSmall(oids, this.ctx, SEGMENT_CHUNKS * 60);
    for (const index of indexes) {
      const seg = this.segments[index];
      const got = objs.get(seg.oid);
      if (!got || got.type !== 'tree') {
        throw new XetError('SNAPSHOT_INVALID', `${this.where}: chunk list segment ${seg.oid} is missing`, {
          path: this.where,
        });
      }
      const end = index + 1 < this.segments.length ? this.segments[index + 1].offset : this.pointer.size;
      const chunks = parseSegment(
        got.data,
        { offset: seg.offset, end, index },
        this.pointer,
        this.ctx.format,
        this.where,
      );
      this.segmentCache.set(index, chunks);
    }
  }
}

export interface ReadOptions {
  /** Nothing written to `out` is used (published, sent, trusted) before the read has returned: the
   * whole-file hash alone proves the bytes (see the top of this file). Whole-file reads only. */
  withheld?: boolean;
}

/**
 * Write bytes [start, end) of a chunked file to `out` (end exclusive, clamped to the file's size).
 * Returns the number of bytes written. A read of the whole file also checks the pointer's blob id.
 */
export async function readRange(
  list: ChunkList,
  start: number,
  end: number,
  out: Writable,
  ctx: ReadContext,
  opts: ReadOptions = {},
): Promise<number> {
  end = Math.min(end, list.size);
  const isWhole = start === 0 && end === list.size;
  if (opts.withheld && !isWhole) throw new Error('readRange: a withheld read must be of the whole file');
  if (start >= end) return 0;
  const chunks = await list.chunksFor(start, end);
  const whole = isWhole ? createHash(ctx.format).update(`blob ${list.size}\0`) : null;
  let written = 0;
  // Chunks are ~8 KiB: gathered into writes of up to OUT_BATCH bytes (one write per chunk costs a
  // stream write, and for a file a syscall, each). The gathered bytes are a copy: a caller may keep
  // what it was given.
  let batch = Buffer.allocUnsafe(OUT_BATCH);
  let used = 0;
  const flush = async (): Promise<void> => {
    if (!used) return;
    const full = batch.subarray(0, used);
    batch = Buffer.allocUnsafe(OUT_BATCH);
    used = 0;
    if (!out.write(full)) await once(out, 'drain', { signal: ctx.signal });
  };
  for await (const { chunk, data } of readChunks(chunks, ctx, list.where, {
    parallel: whole !== null,
    hash: !opts.withheld,
  })) {
    const from = Math.max(start - chunk.offset, 0);
    const to = Math.min(end - chunk.offset, chunk.size);
    const part = from === 0 && to === chunk.size ? data : data.subarray(from, to);
    whole?.update(part);
    written += part.length;
    if (used + part.length > OUT_BATCH) await flush();
    if (part.length >= OUT_BATCH) {
      if (!out.write(Buffer.from(part))) await once(out, 'drain', { signal: ctx.signal });
    } else {
      part.copy(batch, used);
      used += part.length;
    }
  }
  await flush();
  if (whole && whole.digest('hex') !== list.pointer.blob) {
    throw new XetError(
      'INTEGRITY_MISMATCH',
      `${list.where}: the reassembled file does not hash to ${list.pointer.blob}`,
      {
        path: list.where,
        expected: list.pointer.blob,
      },
    );
  }
  return written;
}

/** Chunks per run: a read of more than one run alternates runs between two cat-file processes. */
const RUN_CHUNKS = 256;
/** Bytes a cat-file's output may run ahead of the reader before it is paused (per process). */
const READ_AHEAD = 2 * 1024 * 1024;

/**
 * One cat-file's output, read as fast as git writes it (up to READ_AHEAD bytes ahead of the
 * consumer), so git never waits on the pipe while the reader hashes: with two of them reading
 * alternate runs, one git fills while the other's bytes are checked.
 */
class Prefetch {
  private pieces: Buffer[] = [];
  private head = 0; // bytes of pieces[0] already taken
  private queued = 0;
  private ended = false;
  private failed: unknown = null;
  private wake: (() => void) | null = null;
  private paused = false;

  constructor(private readonly cat: GitStream) {
    cat.stdout.on('data', (b: Buffer) => {
      this.pieces.push(b);
      this.queued += b.length;
      if (this.queued > READ_AHEAD && !this.paused) {
        this.paused = true;
        cat.stdout.pause();
      }
      this.notify();
    });
    cat.stdout.on('end', () => {
      this.ended = true;
      this.notify();
    });
    cat.stdout.on('error', (e) => {
      this.failed = e;
      this.notify();
    });
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  private async more(): Promise<boolean> {
    if (this.failed) throw this.failed;
    if (this.ended) return false;
    await new Promise<void>((resolve) => (this.wake = resolve));
    if (this.failed) throw this.failed;
    return true;
  }

  private consumed(n: number): void {
    this.queued -= n;
    if (this.paused && this.queued <= READ_AHEAD / 2) {
      this.paused = false;
      this.cat.stdout.resume();
    }
  }

  /** The next line (without its newline), or null at the end of the output. */
  async line(max: number): Promise<string | null> {
    for (;;) {
      let seen = 0;
      for (let p = 0; p < this.pieces.length; p++) {
        const piece = this.pieces[p];
        const from = p === 0 ? this.head : 0;
        const nl = piece.indexOf(10, from);
        if (nl >= 0) {
          const line = this.take(seen + nl - from).toString('latin1');
          this.take(1);
          return line;
        }
        seen += piece.length - from;
        if (seen > max) throw new XetError('GIT_FAILED', 'cat-file --batch: header line too long');
      }
      if (!(await this.more())) return null;
    }
  }

  /** Exactly n bytes (a view into git's output when they arrived in one piece), or null at the end. */
  async bytes(n: number): Promise<Buffer | null> {
    while (this.queued < n) if (!(await this.more())) return null;
    return this.take(n);
  }

  private take(n: number): Buffer {
    const first = this.pieces[0];
    if (n === 0) return Buffer.alloc(0);
    let out: Buffer;
    if (first && first.length - this.head >= n) {
      out = first.subarray(this.head, this.head + n);
      this.advance(n);
    } else {
      out = Buffer.allocUnsafe(n);
      for (let filled = 0; filled < n;) {
        const piece = this.pieces[0];
        const k = Math.min(n - filled, piece.length - this.head);
        piece.copy(out, filled, this.head, this.head + k);
        filled += k;
        this.advance(k);
      }
    }
    this.consumed(n);
    return out;
  }

  /** Past k bytes of the first piece (never more than it has). */
  private advance(k: number): void {
    this.head += k;
    if (this.head === this.pieces[0].length) {
      this.pieces.shift();
      this.head = 0;
    }
  }
}

/** The pack holding each chunk, or null when the packs lack one of them. */
export function packsHolding(chunks: ChunkRef[], packs: LocalPacks): PackReader[] | null {
  const from: PackReader[] = [];
  for (const c of chunks) {
    const r = packs.find(c.oid);
    if (!r) return null;
    from.push(r);
  }
  return from;
}

/** A chunk's bytes from its pack, NOT hashed (for a withheld read, whose caller hashes the whole
 * file), its type and size checked; null when the pack gives it only past the reader's bound (a
 * delta whose chain ends in a base over 64 MiB), for the caller to read through git
 * (chunkThroughGit). On a reader that reuses its window the bytes are valid only until that
 * reader's next read. */
export function chunkFromPack(reader: PackReader, c: ChunkRef, where: string): Buffer | null {
  // Bounded at 1 MiB (over any chunk's size) first, so that a wrong size is told as such. A repack
  // may store a chunk as a delta whose chain ends in a large blob (git gc does, against a tracked
  // file of the same bytes): the base is then read within the reader's own bound.
  let got: PackObject | null = null;
  for (const bound of [Math.max(c.size, 1 << 20), undefined]) {
    try {
      got = reader.readUnhashed(c.oid, bound);
      break;
    } catch (e) {
      const over = e instanceof XetError && e.details.oid === c.oid && e.details.limit !== undefined;
      if (!over) throw e;
      if (bound === undefined) return null;
    }
  }
  return checkedChunk(got, c, where);
}

/** A chunk read through git (`cat-file`, which knows every way git stores an object), checked as
 * chunkFromPack checks it: for the chunks the packs give only past their bound. */
export async function chunkThroughGit(c: ChunkRef, ctx: ReadContext, where: string): Promise<Buffer> {
  const objs = await readSmall([c.oid], { ...ctx, packs: undefined }, Math.max(c.size, 1 << 20));
  const got = objs.get(c.oid) ?? null;
  return checkedChunk(got ? { type: got.type as PackObject['type'], data: got.data } : null, c, where);
}

function checkedChunk(got: PackObject | null, c: ChunkRef, where: string): Buffer {
  if (!got || got.type !== 'blob' || got.data.length !== c.size) {
    const what = got ? `${got.type} ${got.data.length}` : 'missing';
    throw new XetError('SNAPSHOT_INVALID', `${where}: chunk ${c.oid} is not a blob of ${c.size} bytes (${what})`, {
      path: where,
      chunk: c.oid,
    });
  }
  return got.data;
}

/**
 * The chunks' contents in order, each checked (type, size, hash) before it is yielded. `parallel`
 * (whole-file reads: restore, archive, hydrate) reads alternate runs through two cat-files, for
 * throughput; otherwise one, for memory (a 100 MiB range: +50 MiB with one, +63 with two).
 * `hash: false` leaves out the hash check (a withheld whole-file read, whose caller checks the whole).
 */
export async function* readChunks(
  chunks: ChunkRef[],
  ctx: ReadContext,
  where: string,
  opts: { parallel?: boolean; hash?: boolean } = {},
): AsyncGenerator<{ chunk: ChunkRef; data: Buffer }> {
  if (!chunks.length) return;
  if (opts.hash === false && ctx.packs) {
    // Straight from the packs when they hold every chunk (else all through git, which knows
    // loose objects, alternates and promisors, and says which chunk is missing).
    const from = packsHolding(chunks, ctx.packs);
    if (from) {
      for (let i = 0; i < chunks.length; i++) {
        ctx.signal?.throwIfAborted();
        const data = chunkFromPack(from[i], chunks[i], where) ?? (await chunkThroughGit(chunks[i], ctx, where));
        yield { chunk: chunks[i], data };
      }
      return;
    }
  }
  // Runs of RUN_CHUNKS chunks, alternating between two processes when there is more than one run.
  const runs: ChunkRef[][] = [];
  for (let i = 0; i < chunks.length; i += RUN_CHUNKS) runs.push(chunks.slice(i, i + RUN_CHUNKS));
  const procs = opts.parallel ? Math.min(2, runs.length) : 1;
  const cats: GitStream[] = [];
  const feeds: Prefetch[] = [];
  for (let p = 0; p < procs; p++) {
    const input = runs
      .filter((_, r) => r % procs === p)
      .flat()
      .map((c) => `${c.oid}\n`)
      .join('');
    const cat = gitStream([...PACK_READ_FLAGS, 'cat-file', '--batch', '--buffer'], { ...ctx.git, input });
    cats.push(cat);
    feeds.push(new Prefetch(cat));
  }
  const abort = (): void => {
    for (const cat of cats) cat.kill();
  };
  ctx.signal?.addEventListener('abort', abort, { once: true });
  try {
    for (let r = 0; r < runs.length; r++) {
      const feed = feeds[r % procs];
      for (const c of runs[r]) {
        ctx.signal?.throwIfAborted();
        const header = await feed.line(200);
        if (header === null) {
          ctx.signal?.throwIfAborted();
          await cats[r % procs].done;
          throw new XetError('GIT_FAILED', `${where}: git cat-file ended before chunk ${c.oid}`, { path: where });
        }
        if (header === `${c.oid} missing`) {
          throw new XetError(
            'CHUNK_MISSING',
            `${where}: chunk ${c.oid} (at byte ${c.offset}) is not in this repository`,
            {
              path: where,
              chunk: c.oid,
              offset: c.offset,
            },
          );
        }
        if (header !== `${c.oid} blob ${c.size}`) {
          throw new XetError(
            'SNAPSHOT_INVALID',
            `${where}: chunk ${c.oid} is not a blob of ${c.size} bytes (${header})`,
            {
              path: where,
              chunk: c.oid,
            },
          );
        }
        const body = await feed.bytes(c.size + 1); // the body and its newline
        if (body === null) {
          ctx.signal?.throwIfAborted();
          await cats[r % procs].done;
          throw new XetError('GIT_FAILED', `${where}: git cat-file ended before chunk ${c.oid}`, { path: where });
        }
        const data = body.subarray(0, c.size);
        if (
          opts.hash !== false &&
          createHash(ctx.format).update(`blob ${c.size}\0`).update(data).digest('hex') !== c.oid
        ) {
          throw new XetError('INTEGRITY_MISMATCH', `${where}: chunk ${c.oid} does not hash to its id`, {
            path: where,
            chunk: c.oid,
          });
        }
        yield { chunk: c, data };
      }
    }
  } finally {
    ctx.signal?.removeEventListener('abort', abort);
    for (const cat of cats) cat.kill();
    await Promise.all(cats.map((cat) => cat.done.catch(() => undefined)));
  }
}
