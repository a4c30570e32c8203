// Worker thread of the pack layer (lay-pack.ts): writes files and symlinks of a snapshot into a
// tree that held nothing but its git dir, reading each blob out of the repository's packs
// (src/git/pack-reader.ts: sizes checked before anything is allocated or inflated, deltas resolved,
// every object hashed and refused unless it is the blob its id names). Entries are claimed in
// batches from a counter shared by all workers, so a worker that meets large files takes fewer.
// Blobs a mapped pack holds whole are laid a run at a time in one native call (layMany: each
// inflated behind its header into a buffer kept for it, hashed, its directories made, created, its
// time set on the descriptor, fstat-ed into the stat block git's index records); the entry a run
// stops at, and a pack that is not mapped, take one native call each (layBlob); deltas, loose
// objects and a process without the native module take the same steps in JavaScript (createFile,
// else node's fs and the main thread's stamper).
//
// Nothing is written through a symlink: every directory is made by this thread one component at
// a time (or found to be a real directory, never a link), files are created with O_EXCL and
// O_NOFOLLOW, and the paths were validated before the first byte (paths.ts: none goes through a
// file or symlink of the snapshot, none has a `.git` component). A blob a pack does not hold (a
// loose object, an alternate) or one too large to hold in memory is reported back, for git.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { parentPort, workerData } from 'node:worker_threads';
import { XetError } from '../errors';
import { packIndexNames, PackReader, type PackObject } from '../git/pack-reader';
import { LocalPacks } from '../chunks/local-packs';
import type { ChunkedEntry } from '../chunks/snapshot-files';
import { writeChunkedFile } from './lay-chunked';
import { finishSparse, writeSparse } from './sparse-write';
import { tracePhase } from '../testing/trace';
import { errnoError, native, type XetNative } from '../native';

export interface LayJob {
  worktree: string;
  /** The object directory: its pack/ and its loose objects are read. */
  objectsDir: string;
  format: 'sha1' | 'sha256';
  /** Paths relative to the worktree, with their blob ids (hex) and git modes. */
  paths: string[];
  oids: string[];
  modes: number[];
  /** Each entry's mtime (seconds, nanoseconds), set as the file is written; nanoseconds -1: not
   * here (a hard-link group's file: its links move its ctime, so the main thread stamps it last). */
  mtimeSec: number[];
  mtimeNsec: number[];
  /** CREATE_STAT bytes per entry: the stat block git's index records, for the files stamped here. */
  stats: SharedArrayBuffer;
  /** Chunked files, largest first: reassembled by lay-chunked.ts (the packs read directly). */
  chunked: ChunkedEntry[];
  /** Where git finds the objects, for what the packs lack (chunk lists, loose chunks). */
  git: { cwd: string; env: Record<string, string | undefined> };
  /** Int32 [next entry to claim, failed flag, next chunked file to claim]. */
  shared: SharedArrayBuffer;
  batch: number;
  /** Blobs larger than this are left to git (one object is held in memory whole). */
  maxObject: number;
}

/** Per batch: the entries written, those left to git, and the chunked files written. */
export interface LayDone {
  done: number[];
  /** Those of `done` whose times were set here and whose stat block is in the job's `stats`. */
  stamped: number[];
  left: number[];
  chunked: number[];
}

export interface LayFailure {
  /** `xet`: a XetError (code is its code); else an errno failure (code is the errno's). */
  error: { xet: boolean; code: string; message: string; details: Record<string, unknown> };
}

const WINDOW = 256 * 1024;
/** Indexes larger than this are searched on disk, not held in memory (~24 bytes an object, per
 * worker), as chunks/local-packs.ts does. */
const PRELOAD_MAX_OBJECTS = 4_000_000;
/** Slots of the shared counter. */
const NEXT = 0;
const FAILED = 1;
const NEXT_CHUNKED = 2;
/** The step of a native createFile or layBlob that failed (native/xet-native.c STEP_*, out[0]). */
const STEPS = ['', 'open', 'write', 'futimens', 'fstat', 'close'];
/** layBlob's results other than 0 and -errno (native/xet-native.c LAY_*). */
const LAY_BAD_STREAM = -1001;
const LAY_HASH = -1002;
/** Bytes layBlob keeps before a blob in its scratch buffer, for the "blob <size>\0" it hashes. */
const LAY_HEADER_ROOM = 32;
/** layMany's reasons for stopping at an entry (native/xet-native.c MANY_*) other than 1, not its
 * plain case (the entry is then the per-entry path's): a file it could not create (errno in
 * result[1]), no digest of this length in the process, an object in another pack or none. */
const MANY_ERRNO = 2;
const MANY_NO_DIGEST = 3;
const MANY_PACK = 4;
/** layMany's memory of the last directory made: its length, then up to PATH_MAX bytes. */
const DIR_MEMO = 4 + 4096;
/** Bytes of git's index stat block (ctime .. size) per entry in LayJob.stats. */
export const CREATE_STAT = 40;
const CREATE = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW;

function openPacks(dir: string, format: 'sha1' | 'sha256'): PackReader[] {
  const readers: PackReader[] = [];
  for (const n of packIndexNames(dir)) {
    try {
      // Read through a window: a batch's blobs are read in pack order (packOrder), and a tree's
      // blobs lie in the pack about in path order (capture writes them so), so most reads are
      // served from the window of the one before.
      const r = PackReader.open(path.join(dir, n.replace(/\.idx$/, '.pack')), path.join(dir, n), format, {
        window: WINDOW,
        reuseWindow: true,
        mapped: true,
      });
      if (r.index.count <= PRELOAD_MAX_OBJECTS) r.index.preload();
      readers.push(r);
    } catch {
      // a pack that does not open (mid-repack, damaged) is git's to read, or to say why not
    }
  }
  return readers;
}

const TOO_LARGE = Symbol('too large');

/**
 * A loose object (`objects/xx/yyyy…`: zlib of `<type> <size>\0<bytes>`), or null when there is
 * none. Hostile as a pack is: its compressed size is bounded before it is read, its output before
 * it is inflated, the header must state the size that follows, and the whole must hash to `oid`.
 */
function readLoose(
  objectsDir: string,
  oid: string,
  format: 'sha1' | 'sha256',
  maxObject: number,
): PackObject | null | typeof TOO_LARGE {
  const file = path.join(objectsDir, oid.slice(0, 2), oid.slice(2));
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch {
    return null;
  }
  let z: Buffer;
  try {
    const st = fs.fstatSync(fd);
    // Something at an object's name that is not a file is a damaged store (git's checkout would
    // fail on it with an mmap error: review 49).
    if (!st.isFile()) throw new XetError('INTEGRITY_MISMATCH', `${file}: is not an object file`, { file, oid });
    // Beyond what deflate makes of the largest object held here: git's to stream.
    if (st.size > maxObject + (maxObject >> 8) + 1024) return TOO_LARGE;
    z = Buffer.allocUnsafe(st.size);
    let at = 0;
    while (at < z.length) {
      const got = fs.readSync(fd, z, at, z.length - at, at);
      if (got === 0) break;
      at += got;
    }
    z = z.subarray(0, at);
  } finally {
    fs.closeSync(fd);
  }
  const bad = (why: string) => new XetError('INTEGRITY_MISMATCH', `${file}: ${why}`, { file, oid });
  let raw: Buffer;
  try {
    raw = zlib.inflateSync(z, { maxOutputLength: maxObject + 64 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return TOO_LARGE;
    throw bad(`does not inflate (${(e as Error).message})`);
  }
  const nul = raw.indexOf(0);
  const m =
    nul > 0 && nul < 32 ? /^(blob|tree|commit|tag) (0|[1-9][0-9]*)$/.exec(raw.toString('latin1', 0, nul)) : null;
  if (!m || Number(m[2]) !== raw.length - nul - 1) throw bad('is not a loose object of the size it states');
  const got = crypto.createHash(format).update(raw).digest('hex');
  if (got !== oid) throw bad(`hashes to ${got}`);
  return { type: m[1] as PackObject['type'], data: raw.subarray(nul + 1) };
}

/** Positions [start, end) sorted by where their objects lie (pack, then offset; the others last),
 * so the pack is read forward through its window, not back and forth (a blob shared by paths far
 * apart, a loose object between packed ones). */
function packOrder(readers: PackReader[], oids: string[], start: number, end: number): Placed[] {
  const keys: (Placed & { at: number })[] = [];
  for (let i = start; i < end; i++) {
    let at = Number.MAX_SAFE_INTEGER;
    let reader = -1;
    let offset = 0;
    const raw = Buffer.from(oids[i], 'hex');
    for (let r = 0; r < readers.length; r++) {
      const off = readers[r].index.findRaw(raw);
      if (off !== null) {
        at = r * 2 ** 40 + off;
        reader = r;
        offset = off;
        break;
      }
    }
    keys.push({ i, at, reader, offset, raw });
  }
  keys.sort((a, b) => a.at - b.at || a.i - b.i);
  return keys;
}

/** A batch's entries as layMany reads them (native/xet-native.c), a value per position in the
 * batch's pack order: ids, paths (NUL-ended) and where each starts, the pack and offset of its
 * object, modes, times (seconds, nanoseconds), and which entry it is. Kept from batch to batch. */
class ManyRun {
  private names = Buffer.allocUnsafe(64 * 1024);
  private oids: Buffer;
  private readonly nameAt: Uint32Array;
  private readonly packs: Int32Array;
  private readonly offsets: Float64Array;
  private readonly modes: Uint32Array;
  private readonly times: Float64Array;
  readonly entries: Uint32Array;
  /** The columns in layMany's order. */
  columns: Buffer[] = [];

  constructor(
    batch: number,
    private readonly hashLen: number,
  ) {
    this.oids = Buffer.allocUnsafe(batch * hashLen);
    this.nameAt = new Uint32Array(batch);
    this.packs = new Int32Array(batch);
    this.offsets = new Float64Array(batch);
    this.modes = new Uint32Array(batch);
    this.times = new Float64Array(2 * batch);
    this.entries = new Uint32Array(batch);
  }

  /** Fills the columns from `list` (at most `batch` long). */
  fill(list: Placed[], job: LayJob): void {
    let at = 0;
    for (let j = 0; j < list.length; j++) {
      const { i, reader, offset, raw } = list[j];
      const name = job.paths[i];
      // UTF-8 takes at most 3 bytes per UTF-16 unit: room is made before a write could fall short.
      if (at + 3 * name.length + 1 > this.names.length) {
        const grown = Buffer.allocUnsafe(Math.max(2 * this.names.length, at + 3 * name.length + 1));
        this.names.copy(grown, 0, 0, at);
        this.names = grown;
      }
      this.nameAt[j] = at;
      at += this.names.write(name, at);
      this.names[at++] = 0;
      raw.copy(this.oids, j * this.hashLen);
      this.packs[j] = raw.length === this.hashLen ? reader : -1;
      this.offsets[j] = offset;
      this.modes[j] = job.modes[i];
      this.times[2 * j] = job.mtimeSec[i];
      this.times[2 * j + 1] = job.mtimeNsec[i];
      this.entries[j] = i;
    }
    const view = (a: Uint32Array | Int32Array | Float64Array): Buffer => Buffer.from(a.buffer, 0, a.byteLength);
    this.columns = [
      this.oids,
      this.names.subarray(0, at),
      view(this.nameAt),
      view(this.packs),
      view(this.offsets),
      view(this.modes),
      view(this.times),
      view(this.entries),
    ];
  }
}

/** An entry of a batch and where its object is: the first pack whose index lists it (reader -1:
 * none does) and its offset there, looked up once for both the sort and the read. */
interface Placed {
  i: number;
  reader: number;
  offset: number;
  /** The id in bytes, decoded once for the lookups and the native call. */
  raw: Buffer;
}

export async function layEntries(job: LayJob, post: (m: LayDone) => void): Promise<void> {
  const notBlob = (i: number, type: string): XetError =>
    new XetError('INTEGRITY_MISMATCH', `${job.paths[i]}: ${job.oids[i]} is a ${type}, not a blob`, {
      path: job.paths[i],
      oid: job.oids[i],
    });
  const counter = new Int32Array(job.shared);
  const readers = openPacks(path.join(job.objectsDir, 'pack'), job.format);
  const made = new Set<string>([job.worktree]);
  const ensureDir = (dir: string): void => {
    if (made.has(dir)) return;
    ensureDir(path.dirname(dir));
    try {
      fs.mkdirSync(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      // Another worker made it, or it is in the way: only a real directory is gone through.
      if (!fs.lstatSync(dir).isDirectory()) {
        throw new XetError('PATH_ESCAPE', `refusing to write through ${dir}, which is not a directory`, { path: dir });
      }
    }
    made.add(dir);
  };
  const n = job.paths.length;
  const create = native?.createFile;
  const stats = Buffer.from(job.stats);
  const tooLarge = (e: unknown, oid: string): boolean =>
    e instanceof XetError && e.details.limit === job.maxObject && e.details.oid === oid;
  let scratch = Buffer.alloc(0);
  /** Entry i laid in one native call (inflated, hash-checked, written, stamped) when a pack holds
   * its blob whole; 'large' when it is too large to hold (git streams it); 'no' for the rest (a
   * delta, a loose object: read() and readLoose below resolve and check them). */
  // Entries come in pack order, which is about path order: most share the directory of the one
  // before, whose check ensureDir need not repeat. Paths are validated (no empty, `.` or `..`
  // component), so joining with a slash is path.join's result without its normalising pass.
  const base = job.worktree.endsWith('/') ? job.worktree : `${job.worktree}/`;
  let lastDir = '';
  const layWhole = ({ i, reader, offset, raw }: Placed): 'laid' | 'large' | 'no' => {
    if (reader < 0) return 'no';
    const oid = job.oids[i];
    const r = readers[reader];
    let e: ReturnType<PackReader['wholeEntry']>;
    try {
      e = r.wholeEntry(oid, job.maxObject, offset);
    } catch (err) {
      if (tooLarge(err, oid)) return 'large';
      throw err;
    }
    if (e === null || e === 'delta') return 'no';
    if (e.type !== 'blob') throw notBlob(i, e.type);
    const abs = base + job.paths[i];
    const dir = abs.slice(0, abs.lastIndexOf('/'));
    if (dir !== lastDir) {
      ensureDir(dir);
      lastDir = dir;
    }
    if (scratch.length < e.size + LAY_HEADER_ROOM)
      scratch = Buffer.allocUnsafe(Math.max(e.size + LAY_HEADER_ROOM, 2 * scratch.length, 1 << 20));
    const perm = job.modes[i] === 0o100755 ? 0o777 : 0o666;
    const out = stats.subarray(i * CREATE_STAT);
    const code = (native as XetNative).layBlob(
      e.z,
      e.size,
      raw,
      scratch,
      abs,
      perm,
      job.mtimeSec[i],
      job.mtimeNsec[i],
      out,
    );
    if (code === 0) return 'laid';
    if (code === LAY_BAD_STREAM) throw r.notInflating(oid, 'bad or short zlib data');
    if (code === LAY_HASH) {
      r.read(oid, job.maxObject); // throws, naming the id the bytes hash to
      throw r.misnamed(oid);
    }
    if (code <= LAY_BAD_STREAM) return 'no'; // no digest of this length here: node hashes it
    throw errnoError(-code, STEPS[out[0]] ?? 'open', abs);
  };

  /** Entry `placed` laid one way or another: laid whole in one native call, or read (deltas
   * resolved, every object hashed) and written here, or left to git (too large, not in a pack). */
  const layOne = (placed: Placed, done: number[], stamped: number[], left: number[]): void => {
    const { i } = placed;
    const oid = job.oids[i];
    const laid = native?.layBlob && job.modes[i] !== 0o120000 ? layWhole(placed) : 'no';
    if (laid === 'laid') {
      done.push(i);
      if (job.mtimeNsec[i] >= 0) stamped.push(i);
      return;
    }
    if (laid === 'large') {
      left.push(i);
      return;
    }
    let obj: PackObject | null = null;
    let large = false;
    for (const r of readers) {
      try {
        obj = r.read(oid, job.maxObject);
      } catch (e) {
        // Too large to hold here is not damage: git streams it. (A forged size lands there too.)
        if (tooLarge(e, oid)) {
          large = true;
          break;
        }
        throw e;
      }
      if (obj) break;
    }
    if (!obj && !large) {
      const loose = readLoose(job.objectsDir, oid, job.format, job.maxObject);
      if (loose !== null && loose !== TOO_LARGE) obj = loose;
    }
    if (!obj) {
      left.push(i);
      return;
    }
    if (obj.type !== 'blob') throw notBlob(i, obj.type);
    const abs = path.join(job.worktree, job.paths[i]);
    ensureDir(path.dirname(abs));
    const mode = job.modes[i];
    if (mode === 0o120000) {
      fs.symlinkSync(obj.data, abs);
    } else if (create) {
      // One call: create, write, set the time, fstat into the stat block git will record.
      const perm = mode === 0o100755 ? 0o777 : 0o666;
      const out = stats.subarray(i * CREATE_STAT);
      const r = create(abs, obj.data, obj.data.length, perm, job.mtimeSec[i], job.mtimeNsec[i], out);
      if (r < 0) throw errnoError(-r, STEPS[out[0]] ?? 'open', abs);
      if (job.mtimeNsec[i] >= 0) stamped.push(i);
    } else {
      // As git creates files: 0777 or 0666, less the umask.
      const fd = fs.openSync(abs, CREATE, mode === 0o100755 ? 0o777 : 0o666);
      try {
        finishSparse(fd, writeSparse(fd, obj.data, 0), obj.data.length);
      } finally {
        fs.closeSync(fd);
      }
    }
    done.push(i);
  };

  // Plain blobs in mapped packs go to layMany, a batch's entries in a few calls.
  const inPlace = readers.map((r) => r.inPlace(job.maxObject));
  const hashLen = job.format === 'sha256' ? 32 : 20;
  let many = native?.layMany && inPlace.some(Boolean) ? new ManyRun(job.batch, hashLen) : null;
  const result = Buffer.alloc(8);
  const verdict = new Int32Array(result.buffer, result.byteOffset, 2);
  const dirMemo = Buffer.alloc(DIR_MEMO);
  const baseBytes = Buffer.from(base);
  if (many) scratch = Buffer.allocUnsafe(1 << 20);

  let chunkPacks: LocalPacks | null = null;
  try {
    for (;;) {
      if (Atomics.load(counter, FAILED) !== 0) return;
      // Chunked files first (largest first): one of them is as much work as thousands of files.
      const c = Atomics.add(counter, NEXT_CHUNKED, 1);
      if (c < job.chunked.length) {
        chunkPacks ??= LocalPacks.openDir(job.objectsDir, job.format, { reuseWindow: true, mapped: true });
        await writeChunkedFile(
          job.worktree,
          job.chunked[c],
          { git: job.git, format: job.format, packs: chunkPacks },
          { sync: true },
        );
        tracePhase(`lay worker: chunked file ${c} done`);
        post({ done: [], stamped: [], left: [], chunked: [c] });
        continue;
      }
      const start = Atomics.add(counter, NEXT, job.batch);
      if (start >= n) return;
      const done: number[] = [];
      const stamped: number[] = [];
      const left: number[] = [];
      const list = packOrder(readers, job.oids, start, Math.min(n, start + job.batch));
      many?.fill(list, job);
      for (let k = 0; k < list.length;) {
        const reader = list[k].reader;
        const view = many && reader >= 0 ? inPlace[reader] : null;
        if (many && view) {
          const m = many;
          const stop = (native as Required<XetNative>).layMany(
            view.map,
            view.end,
            reader,
            hashLen,
            view.limit,
            m.columns,
            k,
            list.length,
            baseBytes,
            stats,
            scratch,
            dirMemo,
            result,
          );
          for (; k < stop; k++) {
            const i = m.entries[k];
            done.push(i);
            if (job.mtimeNsec[i] >= 0) stamped.push(i);
          }
          if (k === list.length) break;
          const why = verdict[0];
          // The next call reads that entry's pack (a pack it names that is not this one).
          if (why === MANY_PACK && list[k].reader !== reader) continue;
          if (why === MANY_ERRNO) {
            const i = list[k].i;
            throw errnoError(verdict[1], STEPS[stats[i * CREATE_STAT]] ?? 'open', base + job.paths[i]);
          }
          if (why === MANY_NO_DIGEST) many = null;
        }
        layOne(list[k], done, stamped, left);
        k++;
      }
      post({ done, stamped, left, chunked: [] });
    }
  } catch (e) {
    Atomics.store(counter, FAILED, 1);
    throw e;
  } finally {
    for (const r of readers) r.close();
    chunkPacks?.close();
  }
}

if (parentPort && workerData?.layPool) {
  const port = parentPort;
  // Booted early (lay-pack.ts LayPool): the job comes as the first message.
  port.once('message', (job: LayJob) => {
    layEntries(job, (m) => port.postMessage(m)).then(
      () => {
        tracePhase('lay worker: done');
        port.postMessage({ end: true });
        port.close();
      },
      (e: unknown) => {
        const x = e as XetError & NodeJS.ErrnoException;
        const failure: LayFailure = {
          error: {
            xet: e instanceof XetError,
            code: e instanceof XetError ? x.code : (x.code ?? 'INTERNAL'),
            message: x.message,
            details: e instanceof XetError ? x.details : { errno: x.code, path: x.path },
          },
        };
        port.postMessage(failure);
        port.close();
      },
    );
  });
}
