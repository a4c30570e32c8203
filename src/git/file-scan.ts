// One pass over a batch of worktree files: each is opened once (never through a symlink, never
// blocking on a fifo), its stat data taken from the open file, read whole, hashed as a git blob
// and, when no other thread has claimed the same content and the repository is not known to hold
// it, deflated and written into the pack being built, at a range reserved with one atomic add.
// What comes back is, per file, the stat data git would record for it (for capture's stat cache,
// written without git reading the file again), its object id, and where its pack entry is.
//
// Runs in the pack writer's worker threads (pack-worker.ts) and, for a handful of files, in the
// main thread. A file whose stat data changes while it is read is read again (a writer racing the
// capture); one that keeps changing is WORKTREE_CHANGED, and nothing of it is stored.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as zlib from 'node:zlib';
import { errnoError, native } from '../native';
import { canonicalMode, STAT_BYTES, statBlockInto, type StatFields } from './index-writer';
import { INSERTED, SharedOidSet } from './oid-set';
import { deflateInto, zlibStreamBound } from './zlib-fast';

export const enum FileState {
  /** Hashed (and packed when this batch owned it). */
  Hashed = 0,
  /** Gone since the walk (or no longer a file or link). */
  Vanished = 1,
  /** A regular file at or above `largeAt`: stat data only, not read (chunked by the caller). */
  Large = 2,
  /** A file with more than one link: stat data only, not read (the caller hashes one per inode). */
  Linked = 3,
  /** Hashed in pieces (too big to hold); the caller packs it when `owned`. */
  Big = 4,
}

export interface ScanJob {
  kind: 'scan';
  batch: number;
  format: 'sha1' | 'sha256';
  level: number;
  /** Deflate at level 1 with the faster, larger igzip where there is one (zlib-fast.ts). */
  fast?: boolean;
  root: string;
  paths: string[];
  /** Regular files of this many bytes or more are returned as Large, unread (0: none are). */
  largeAt: number;
  /** Return files with more than one link as Linked, unread. */
  deferLinks: boolean;
  /** 'hash': nothing is written. 'pack': objects this batch claims are written into the pack. */
  mode: 'hash' | 'pack';
  /** Ids the files must have (a second pass after an allowance admitted the first); '' for none. */
  expect?: string[];
  fd: number;
  end: SharedArrayBuffer;
  set: { state: SharedArrayBuffer; keys: SharedArrayBuffer };
}

export interface ScanDone {
  batch: number;
  state: Uint8Array;
  /** 40 bytes per file: git's stat data (valid unless Vanished). */
  stat: Uint8Array;
  /** The object id per file (Hashed and Big). */
  oid: Uint8Array;
  nlink: Float64Array;
  /** Sizes in full (the stat data keeps 32 bits of them). */
  size: Float64Array;
  /** Modification time in whole seconds, in full (the stat data keeps 32 bits of them). */
  mtimeSec: Float64Array;
  /** Big files this batch claimed: the caller packs them. */
  owned: Uint8Array;
  /** `dev:ino` of files with more than one link. */
  inode: (string | null)[];
  /** Pack entries written: the file's position in the batch, the entry's offset and CRC32. */
  packed: { index: number; offset: number; crc: number }[];
  bytesWritten: number;
  error?: { path: string; error: 'changed' | 'unreadable' | 'write'; detail: string; code?: string };
}

/** Files above this are hashed in pieces, not held whole. */
export const BIG_FILE_BYTES = 8 * 1024 * 1024;
const READ_TRIES = 3;
const TYPE_BLOB = 3;

// Per-thread buffers, reused: the read buffer grows to the largest file read, the output buffer to
// one batch's entries (both bounded: files above BIG_FILE_BYTES are never held whole).
let scratch = Buffer.allocUnsafe(1 << 20);
let out = Buffer.allocUnsafe(4 << 20);
const NS = 1_000_000_000n;

function room(used: number, more: number): void {
  if (used + more <= out.length) return;
  const bigger = Buffer.allocUnsafe(Math.max(2 * out.length, used + more + (1 << 20)));
  out.copy(bigger, 0, 0, used);
  out = bigger;
}

/** A pack entry's header (type and inflated size, 7 bits at a time, 4 in the first byte) at `at`. */
function headerInto(type: number, size: number, dst: Buffer, at: number): number {
  let c = (type << 4) | (size & 0x0f);
  let rest = Math.floor(size / 16);
  while (rest > 0) {
    dst[at++] = c | 0x80;
    c = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  dst[at++] = c;
  return at;
}

class Changed extends Error {}

/** A file's stat data as the scan uses it. */
type FileStat = StatFields & Pick<fs.BigIntStats, 'nlink'>;

interface ReadFile {
  st: FileStat;
  data: Buffer | null;
  link: boolean;
}

const OPEN_FLAGS = fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK;

// The native read's results other than a length or -errno (native/xet-native.c READ_*).
const READ_NOT_FILE = -1000;
const READ_UNREAD = -1001;
const READ_ROOM = -1002;
const READ_CHANGED = -1003;
/** A time int64 nanoseconds cannot hold (after 2262): read through node's fs, whose bigint stat can. */
const READ_TIME_RANGE = -1004;
const nativeStat = new BigInt64Array(9);
const nativeStatBytes = Buffer.from(nativeStat.buffer);

/** Stat and (unless it is Large, Linked or Big) read one path, consistently: the stat data is taken
 * before and after the read, and must agree with each other and with the bytes read. */
function readOne(abs: string, largeAt: number, deferLinks: boolean): ReadFile | null {
  for (let attempt = 0; ; attempt++) {
    const r = native
      ? native.readFile(abs, largeAt, deferLinks ? 1 : 0, BIG_FILE_BYTES, scratch, nativeStatBytes)
      : null;
    if (r !== null && r !== READ_TIME_RANGE) {
      if (r === READ_ROOM) {
        const limit = Number(nativeStat[6]) + 1;
        scratch = Buffer.allocUnsafe(limit + (limit >> 3));
        attempt--; // not a change: the same file again with room for it
        continue;
      }
      if (r === READ_CHANGED) {
        if (attempt >= READ_TRIES) throw new Changed('it changed while it was read');
        continue;
      }
      if (r === -fsErrno.ELOOP) {
        const link = readLink(abs);
        if (link) return link;
        if (attempt >= READ_TRIES) throw new Changed('its link target changed while it was read');
        continue;
      }
      if (r === -fsErrno.ENOENT || r === -fsErrno.ENOTDIR || r === READ_NOT_FILE) return null;
      if (r < 0 && r > READ_NOT_FILE) throw errnoError(-r, 'open', abs);
      if (r < 0 && r !== READ_UNREAD) throw new Error(`readFile returned ${r} for ${abs}`);
      const c = nativeStat;
      const st: FileStat = {
        dev: c[0],
        ino: c[1],
        mode: c[2],
        nlink: c[3],
        uid: c[4],
        gid: c[5],
        size: c[6],
        mtimeNs: c[7],
        ctimeNs: c[8],
      };
      return { st, data: r === READ_UNREAD ? null : scratch.subarray(0, r), link: false };
    }
    let fd: number;
    try {
      fd = fs.openSync(abs, OPEN_FLAGS);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return null;
      if (code !== 'ELOOP') throw e;
      const link = readLink(abs);
      if (link) return link;
      if (attempt >= READ_TRIES) throw new Changed('its link target changed while it was read');
      continue;
    }
    try {
      const st = fs.fstatSync(fd, { bigint: true });
      if (!st.isFile()) return null; // a fifo or device took its place: not a file to capture
      if (deferLinks && st.nlink > 1n) return { st, data: null, link: false };
      const size = Number(st.size);
      if ((largeAt > 0 && size >= largeAt) || size > BIG_FILE_BYTES) return { st, data: null, link: false };
      const limit = size + 1;
      if (scratch.length < limit) scratch = Buffer.allocUnsafe(limit + (limit >> 3));
      let n = 0;
      while (n < limit) {
        const got = fs.readSync(fd, scratch, n, limit - n, null);
        if (got === 0) break;
        n += got;
      }
      const after = fs.fstatSync(fd, { bigint: true });
      if (n === size && after.size === st.size && after.mtimeNs === st.mtimeNs && after.ctimeNs === st.ctimeNs) {
        return { st, data: scratch.subarray(0, n), link: false };
      }
      if (attempt >= READ_TRIES) throw new Changed('it changed while it was read');
    } finally {
      fs.closeSync(fd);
    }
  }
}

const fsErrno = os.constants.errno;

/** A symlink: its blob is its target. The lstat before and after brackets the readlink; null when
 * it is gone, was replaced meanwhile, or changed while it was read (the caller looks again). */
function readLink(abs: string): ReadFile | null {
  const st = lstatOrNull(abs);
  if (!st || !st.isSymbolicLink()) return null;
  const target = fs.readlinkSync(abs, { encoding: 'buffer' });
  const again = lstatOrNull(abs);
  if (again && again.ctimeNs === st.ctimeNs && again.ino === st.ino && BigInt(target.length) === st.size) {
    return { st, data: target, link: true };
  }
  return null;
}

function lstatOrNull(abs: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(abs, { bigint: true });
  } catch {
    return null;
  }
}

/** Hash a file too big to hold, a MiB at a time, and check it did not change meanwhile. */
function hashBig(abs: string, st: FileStat, format: 'sha1' | 'sha256'): Buffer {
  const fd = fs.openSync(abs, OPEN_FLAGS);
  try {
    const size = Number(st.size);
    const hash = crypto.createHash(format).update(`blob ${size}\0`);
    if (scratch.length < 1 << 20) scratch = Buffer.allocUnsafe(1 << 20);
    let seen = 0;
    for (;;) {
      const got = fs.readSync(fd, scratch, 0, Math.min(scratch.length, size + 1 - seen), null);
      if (got === 0) break;
      hash.update(scratch.subarray(0, got));
      seen += got;
      if (seen > size) break;
    }
    const after = fs.fstatSync(fd, { bigint: true });
    if (seen !== size || after.mtimeNs !== st.mtimeNs || after.ctimeNs !== st.ctimeNs || after.size !== st.size) {
      throw new Changed('it changed while it was read');
    }
    return hash.digest();
  } finally {
    fs.closeSync(fd);
  }
}

export function scanBatch(job: ScanJob): ScanDone {
  const n = job.paths.length;
  const hashLen = job.format === 'sha256' ? 32 : 20;
  const done: ScanDone = {
    batch: job.batch,
    state: new Uint8Array(n),
    stat: new Uint8Array(n * STAT_BYTES),
    oid: new Uint8Array(n * hashLen),
    nlink: new Float64Array(n),
    size: new Float64Array(n),
    mtimeSec: new Float64Array(n),
    owned: new Uint8Array(n),
    inode: new Array<string | null>(n).fill(null),
    packed: [],
    bytesWritten: 0,
  };
  const statBuf = Buffer.from(done.stat.buffer, done.stat.byteOffset, done.stat.byteLength);
  const oidBuf = Buffer.from(done.oid.buffer, done.oid.byteOffset, done.oid.byteLength);
  const set = new SharedOidSet(job.set, hashLen);
  const prefix = job.root.endsWith('/') ? job.root : `${job.root}/`;
  let length = 0;
  const starts: number[] = [];
  for (let i = 0; i < n; i++) {
    const rel = job.paths[i];
    const abs = prefix + rel;
    let r: ReadFile | null;
    try {
      r = readOne(abs, job.largeAt, job.deferLinks);
    } catch (e) {
      if (e instanceof Changed) done.error = { path: rel, error: 'changed', detail: e.message };
      else done.error = { path: rel, error: 'unreadable', detail: (e as Error).message };
      return done;
    }
    if (!r || canonicalMode(Number(r.st.mode)) === 0) {
      done.state[i] = FileState.Vanished;
      continue;
    }
    const st = r.st;
    statBlockInto(st, statBuf, i * STAT_BYTES);
    done.nlink[i] = Number(st.nlink);
    done.size[i] = Number(st.size);
    const m = st.mtimeNs >= 0n || st.mtimeNs % NS === 0n ? st.mtimeNs / NS : st.mtimeNs / NS - 1n;
    done.mtimeSec[i] = Number(m);
    if (st.nlink > 1n) done.inode[i] = `${st.dev}:${st.ino}`;
    if (!r.data) {
      if (!r.link && job.deferLinks && st.nlink > 1n) {
        done.state[i] = FileState.Linked;
        continue;
      }
      if (job.largeAt > 0 && Number(st.size) >= job.largeAt) {
        done.state[i] = FileState.Large;
        continue;
      }
      let oid: Buffer;
      try {
        oid = hashBig(abs, st, job.format);
      } catch (e) {
        done.error = {
          path: rel,
          error: e instanceof Changed ? 'changed' : 'unreadable',
          detail: (e as Error).message,
        };
        return done;
      }
      if (job.expect?.[i] && job.expect[i] !== oid.toString('hex')) {
        done.error = { path: rel, error: 'changed', detail: 'its content is not what was hashed before' };
        return done;
      }
      oid.copy(oidBuf, i * hashLen);
      done.state[i] = FileState.Big;
      if (job.mode === 'pack' && set.add(oid) === INSERTED) done.owned[i] = 1;
      continue;
    }
    const data = r.data;
    const oid = crypto.createHash(job.format).update(`blob ${data.length}\0`).update(data).digest();
    if (job.expect?.[i] && job.expect[i] !== oid.toString('hex')) {
      done.error = { path: rel, error: 'changed', detail: 'its content is not what was hashed before' };
      return done;
    }
    oid.copy(oidBuf, i * hashLen);
    done.state[i] = FileState.Hashed;
    if (job.mode !== 'pack' || set.add(oid) !== INSERTED) continue;
    room(length, 16 + zlibStreamBound(data.length));
    const start = length;
    length = headerInto(TYPE_BLOB, data.length, out, length);
    length += deflateInto(data, job.level, out, length, job.fast);
    starts.push(start);
    done.packed.push({ index: i, offset: start, crc: zlib.crc32(out.subarray(start, length)) });
  }
  if (length === 0) return done;
  const offset = Number(Atomics.add(new BigInt64Array(job.end), 0, BigInt(length)));
  try {
    let w = 0;
    while (w < length) w += fs.writeSync(job.fd, out, w, length - w, offset + w);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    done.error = { path: '', error: 'write', detail: err.message, code: err.code };
    return done;
  }
  for (const p of done.packed) p.offset += offset;
  done.bytesWritten = length;
  return done;
}
