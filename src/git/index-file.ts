// Direct edits of a git index file, for the one thing no git command can set: the file size an
// entry's stat data records. Git treats "recorded size differs from the file's size" as modified
// without reading the file, so a source whose index holds such stale stat data shows files as
// modified that a fresh index would call clean; restore reproduces that by writing the same sizes.
// Only index versions 2 and 3 are edited (restore rewrites the index as v3 first, then converts it
// back with `git update-index --index-version`).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { copyBytes } from './copy-bytes';

const STAT_BYTES = 40; // ctime(8) mtime(8) dev ino mode uid gid size(4 each)
const SIZE_OFFSET = 36;

/** Set the recorded size of the named entries (stage 0); returns how many were changed. */
export function setRecordedSizes(indexFile: string, sizes: Map<string, number>, format: 'sha1' | 'sha256'): number {
  if (sizes.size === 0) return 0;
  const buf = fs.readFileSync(indexFile);
  const hashLen = format === 'sha256' ? 32 : 20;
  if (buf.toString('latin1', 0, 4) !== 'DIRC') throw new XetError('GIT_FAILED', `${indexFile} is not a git index`);
  const version = buf.readUInt32BE(4);
  if (version !== 2 && version !== 3) {
    throw new XetError('GIT_FAILED', `index version ${version} cannot be edited (expected 2 or 3)`, { version });
  }
  const count = buf.readUInt32BE(8);
  let off = 12;
  let changed = 0;
  for (let n = 0; n < count; n++) {
    const flagsAt = off + STAT_BYTES + hashLen;
    const flags = buf.readUInt16BE(flagsAt);
    const extended = version >= 3 && (flags & 0x4000) !== 0;
    const pathAt = flagsAt + 2 + (extended ? 2 : 0);
    const end = buf.indexOf(0, pathAt);
    if (end < 0) throw new XetError('GIT_FAILED', `${indexFile} is truncated`);
    const name = buf.toString('utf8', pathAt, end);
    const want = sizes.get(name);
    if (want !== undefined && ((flags >> 12) & 3) === 0) {
      buf.writeUInt32BE(want >>> 0, off + SIZE_OFFSET);
      changed++;
    }
    // Entries are NUL-padded to a multiple of 8 bytes (1 to 8 NULs).
    const len = pathAt - off + (end - pathAt);
    off += (len + 8) & ~7;
  }
  const body = buf.subarray(0, buf.length - hashLen);
  crypto
    .createHash(format)
    .update(body)
    .digest()
    .copy(buf, buf.length - hashLen);
  const tmp = `${indexFile}.xet-${process.pid}`;
  fs.writeFileSync(tmp, buf);
  fs.renameSync(tmp, indexFile);
  return changed;
}

// --- Reading entries and writing whole stat data (versions 2, 3 and 4) ---
// Layout of an entry (gitformat-index(5)): ctime sec, ctime nsec, mtime sec, mtime nsec, dev, ino,
// mode, uid, gid, size (each 32 bits, big-endian, truncated as git truncates: `(unsigned int)`),
// the object id, 16 bits of flags (name length, stage, extended), 16 more when extended (v3+),
// then the path: NUL-terminated and padded to a multiple of 8 (v2, v3), or prefix-compressed with a
// varint of bytes to drop from the previous path and no padding (v4). Stat data sits at a fixed
// place in every version, so it can be rewritten in place without touching anything else; the
// trailing checksum is recomputed (left zero when the writer skipped it, index.skipHash).

/** One entry as stored; `offset` is where its stat data starts in the file. The oid is read only
 * when asked for (most callers never do, and an index has hundreds of thousands of entries). */
export class RawIndexEntry {
  private decoded: string | undefined;

  constructor(
    private readonly buf: Buffer,
    /** Where the path's bytes are (the index itself, or for v4 the rebuilt names). */
    readonly names: Buffer,
    readonly nameStart: number,
    readonly nameEnd: number,
    readonly mode: number,
    readonly stage: number,
    readonly offset: number,
    private readonly hashLen: number,
    /** `git add -N`: an entry with no content of its own yet (extended flag 0x2000). */
    readonly intentToAdd = false,
    /** The extended flags as stored (v3 and v4; 0 otherwise). */
    readonly extendedFlags = 0,
  ) {}

  /** Decoded on first use: most callers look at a few paths of a large index. */
  get path(): string {
    this.decoded ??= this.names.toString('utf8', this.nameStart, this.nameEnd);
    return this.decoded;
  }

  get oid(): string {
    return this.buf.toString('hex', this.offset + STAT_BYTES, this.offset + STAT_BYTES + this.hashLen);
  }
}

/** Position of the stage-0 entry for `path` (entries are sorted by path bytes), or -1. */
export function findEntry(parsed: ParsedIndex, path: string): number {
  const key = Buffer.from(path, 'utf8');
  return findEntryBytes(parsed, key, 0, key.length);
}

/** findEntry for a path already in bytes: names[start, end) (another index's entry's name). */
export function findEntryBytes(parsed: ParsedIndex, names: Buffer, start: number, end: number): number {
  const { entries } = parsed;
  let lo = 0;
  let hi = entries.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const e = entries[mid];
    const c = e.names.compare(names, start, end, e.nameStart, e.nameEnd) || e.stage;
    if (c === 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

export interface ParsedIndex {
  buf: Buffer;
  version: number;
  hashLen: number;
  entries: RawIndexEntry[];
  /** Where the entries end (and the extensions, if any, begin). */
  entriesEnd: number;
}

/** A version 4 entry's name prefix (git's decode_varint): how many bytes of the previous name to
 * drop, and where the rest of the name starts; null when the number runs past `limit` or grows
 * past any name's length. */
function v4Prefix(buf: Buffer, at: number, limit: number): { drop: number; at: number } | null {
  let c: number;
  let drop = -1;
  do {
    if (at >= limit || drop > 1 << 24) return null;
    c = buf[at++];
    drop = drop < 0 ? c & 127 : ((drop + 1) << 7) | (c & 127);
  } while (c & 128);
  return { drop, at };
}

export function parseIndex(indexFile: string | Buffer, format: 'sha1' | 'sha256'): ParsedIndex {
  // A Buffer is an index already read (its name in messages: "the index").
  const buf = typeof indexFile === 'string' ? fs.readFileSync(indexFile) : indexFile;
  if (typeof indexFile !== 'string') indexFile = 'the index';
  const hashLen = format === 'sha256' ? 32 : 20;
  if (buf.length < 12 + hashLen || buf.toString('latin1', 0, 4) !== 'DIRC') {
    throw new XetError('GIT_FAILED', `${indexFile} is not a git index`);
  }
  const version = buf.readUInt32BE(4);
  if (version < 2 || version > 4)
    throw new XetError('GIT_FAILED', `index version ${version} is not known`, { version });
  const count = buf.readUInt32BE(8);
  // Every entry takes more than 60 bytes: a count the file cannot hold is damage, not a loop bound.
  if (count > buf.length / 60) throw new XetError('GIT_FAILED', `${indexFile} is damaged`);
  const entries: RawIndexEntry[] = [];
  const limit = buf.length - hashLen;
  let off = 12;
  // v4 names are rebuilt one after another in an arena (the previous name's prefix, then the suffix).
  let arena = version === 4 ? Buffer.allocUnsafe(Math.max(4096, buf.length * 2)) : buf;
  let arenaLen = 0;
  let prevStart = 0;
  let prevLen = 0;
  for (let n = 0; n < count; n++) {
    const flagsAt = off + STAT_BYTES + hashLen;
    if (flagsAt + 2 > limit) throw new XetError('GIT_FAILED', `${indexFile} is truncated`);
    const flags = buf.readUInt16BE(flagsAt);
    const extended = version >= 3 && (flags & 0x4000) !== 0;
    let at = flagsAt + 2 + (extended ? 2 : 0);
    let start: number;
    let stop: number;
    if (version === 4) {
      if (at >= limit) throw new XetError('GIT_FAILED', `${indexFile} is truncated`);
      const prefix = v4Prefix(buf, at, limit);
      if (!prefix) throw new XetError('GIT_FAILED', `${indexFile} is damaged`);
      const { drop } = prefix;
      at = prefix.at;
      const end = buf.indexOf(0, at);
      if (end < 0 || end >= limit || drop > prevLen) throw new XetError('GIT_FAILED', `${indexFile} is damaged`);
      const keep = prevLen - drop;
      const len = keep + end - at;
      if (arenaLen + len > arena.length) {
        const bigger = Buffer.allocUnsafe(2 * (arenaLen + len));
        arena.copy(bigger, 0, 0, arenaLen);
        arena = bigger;
      }
      copyBytes(arena, arena, arenaLen, prevStart, prevStart + keep);
      copyBytes(buf, arena, arenaLen + keep, at, end);
      start = arenaLen;
      stop = arenaLen + len;
      prevStart = start;
      prevLen = len;
      arenaLen = stop;
      off = end + 1;
    } else {
      const end = buf.indexOf(0, at);
      if (end < 0 || end >= limit) throw new XetError('GIT_FAILED', `${indexFile} is truncated`);
      start = at;
      stop = end;
      off += (end - off + 8) & ~7;
    }
    const statAt = flagsAt - hashLen - STAT_BYTES;
    const ext = extended ? buf.readUInt16BE(flagsAt + 2) : 0;
    const mode = buf.readUInt32BE(statAt + 24);
    entries.push(
      new RawIndexEntry(buf, arena, start, stop, mode, (flags >> 12) & 3, statAt, hashLen, (ext & 0x2000) !== 0, ext),
    );
  }
  // Entries made before the arena last grew point into the old buffer, which stays valid.
  return { buf, version, hashLen, entries, entriesEnd: off };
}

/** Stat data as lstat gives it (from a bigint lstat, so nanoseconds and 64-bit inodes survive),
 * with the 32-bit values git records precomputed: these are compared for every entry. */
export interface StatFields {
  ctimeSec: number;
  ctimeNsec: number;
  mtimeSec: number;
  mtimeNsec: number;
  dev: bigint;
  ino: bigint;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  /** (unsigned int) casts, as fill_stat_data does. */
  u32: { ctime: number; mtime: number; dev: number; ino: number; size: number };
}

const NS = 1_000_000_000n;
const u32 = (v: bigint): number => Number(BigInt.asUintN(32, v));

export function statFields(st: fs.BigIntStats): StatFields {
  // Floor, not BigInt's truncation toward zero: a time before 1970 is (seconds - 1, positive
  // nanoseconds), as the kernel's timespec and git's index have it.
  const floorDiv = (ns: bigint) => (ns >= 0n || ns % NS === 0n ? ns / NS : ns / NS - 1n);
  const ctime = floorDiv(st.ctimeNs);
  const mtime = floorDiv(st.mtimeNs);
  return {
    ctimeSec: Number(ctime),
    ctimeNsec: Number(st.ctimeNs - ctime * NS),
    mtimeSec: Number(mtime),
    mtimeNsec: Number(st.mtimeNs - mtime * NS),
    dev: st.dev,
    ino: st.ino,
    uid: Number(st.uid),
    gid: Number(st.gid),
    size: Number(st.size),
    nlink: Number(st.nlink),
    u32: { ctime: u32(ctime), mtime: u32(mtime), dev: u32(st.dev), ino: u32(st.ino), size: u32(st.size) },
  };
}

/** What git would record for this stat (fill_stat_data: every field cast to 32 bits). */
export function writeStat(buf: Buffer, offset: number, s: StatFields): void {
  buf.writeUInt32BE(s.u32.ctime, offset);
  buf.writeUInt32BE(s.ctimeNsec, offset + 4);
  buf.writeUInt32BE(s.u32.mtime, offset + 8);
  buf.writeUInt32BE(s.mtimeNsec, offset + 12);
  buf.writeUInt32BE(s.u32.dev, offset + 16);
  buf.writeUInt32BE(s.u32.ino, offset + 20);
  buf.writeUInt32BE(s.uid >>> 0, offset + 28);
  buf.writeUInt32BE(s.gid >>> 0, offset + 32);
  buf.writeUInt32BE(s.u32.size, offset + SIZE_OFFSET);
}

/** Whether git's own comparison (match_stat_data without USE_NSEC and USE_STDEV, the build every
 * distribution ships) would call the entry unchanged: seconds, inode, owner, size. */
export function statMatchesCoarse(buf: Buffer, offset: number, s: StatFields): boolean {
  return (
    buf.readUInt32BE(offset) === s.u32.ctime &&
    buf.readUInt32BE(offset + 8) === s.u32.mtime &&
    buf.readUInt32BE(offset + 20) === s.u32.ino &&
    buf.readUInt32BE(offset + SIZE_OFFSET) === s.u32.size &&
    buf.readUInt32BE(offset + 28) === s.uid >>> 0 &&
    buf.readUInt32BE(offset + 32) === s.gid >>> 0
  );
}

/**
 * Write an index whose stat data was edited in place: checksum recomputed, published by rename.
 * The file's mtime is set back to `notAfter` (when given) or to the replaced file's: git judges an
 * entry "racily clean" by comparing its mtime with the index file's, so an index that looked newer
 * than it is would make git trust entries it must re-read. An earlier mtime only makes it re-read
 * more (microseconds are all node can set; truncation errs on the early side).
 */
export function writeIndexBuffer(
  indexFile: string,
  parsed: ParsedIndex,
  notAfter?: Date,
  /** Keep the parse for one parseIndexWritten of the file soon after. */
  keep = false,
): void {
  const { buf, hashLen } = parsed;
  const before = fs.statSync(indexFile);
  const trailer = buf.subarray(buf.length - hashLen);
  if (trailer.some((b) => b !== 0)) {
    crypto
      .createHash(hashLen === 32 ? 'sha256' : 'sha1')
      .update(buf.subarray(0, buf.length - hashLen))
      .digest()
      .copy(buf, buf.length - hashLen);
  }
  const tmp = `${indexFile}.xet-${process.pid}`;
  fs.writeFileSync(tmp, buf);
  const when = notAfter && notAfter < before.mtime ? notAfter : before.mtime;
  fs.utimesSync(tmp, when, when);
  fs.renameSync(tmp, indexFile);
  lastWritten = null;
  if (keep) {
    const st = fs.statSync(indexFile, { bigint: true });
    lastWritten = { file: indexFile, parsed, ino: st.ino, size: st.size, mtimeNs: st.mtimeNs };
  }
}

/** The index writeIndexBuffer wrote last with `keep`, parsed, for a reader of the same file soon after (a
 * restore's sealed stat cache reads the files index its lay has just written: ~25 ms of parsing
 * 34,000 entries again). One only, so that a long-lived process holds no more than one. */
let lastWritten: { file: string; parsed: ParsedIndex; ino: bigint; size: bigint; mtimeNs: bigint } | null = null;

/** parseIndex of a file this process may have just written with writeIndexBuffer: that parse when
 * the file is still the one written (the same inode, size and mtime: git replaces an index by a
 * rename, so a new inode), else the file read and parsed. The memo is taken either way. */
export function parseIndexWritten(indexFile: string, format: 'sha1' | 'sha256'): ParsedIndex {
  const memo = lastWritten;
  lastWritten = null;
  if (memo && memo.file === indexFile && memo.parsed.hashLen === (format === 'sha256' ? 32 : 20)) {
    const st = fs.statSync(indexFile, { bigint: true, throwIfNoEntry: false });
    if (st && st.ino === memo.ino && st.size === memo.size && st.mtimeNs === memo.mtimeNs) return memo.parsed;
  }
  return parseIndex(indexFile, format);
}

// --- The listing `git ls-files -s --debug` gives, read from the file ---

/** One index entry as git xet uses it: what `git ls-files -s` prints, the flags below and the
 * recorded size. */
export interface IndexEntry {
  mode: string;
  oid: string;
  stage: number;
  path: string;
  /** Only CE_VALID, CE_INTENT_TO_ADD and CE_SKIP_WORKTREE (git's in-memory bits for them). */
  flags: number;
  /** File size recorded in the index (stat data; 0 when unknown). */
  size: number;
  /**
   * For an entry recorded at RECORDED_MIN_SIZE or more, read from the file (not from git's
   * listing): its stat data as recorded, and whether git's racy rule (mtime not older than the
   * index file's, here with a second to spare) would make git read the file before trusting it.
   * A capture compares only such large files with their stat data (to leave a clean one unchunked).
   */
  recorded?: { stat: Buffer; racy: boolean };
}

/** The smallest recorded size whose stat data a listing keeps (xet.chunk.threshold's minimum). */
export const RECORDED_MIN_SIZE = 64 * 1024;

export const CE_VALID = 0x8000; // assume-unchanged
export const CE_INTENT_TO_ADD = 1 << 29;
export const CE_SKIP_WORKTREE = 1 << 30;
export const ENTRY_FLAGS = CE_VALID | CE_INTENT_TO_ADD | CE_SKIP_WORKTREE;

/** The extended flags git knows (intent-to-add, skip-worktree); any other bit makes git refuse. */
const KNOWN_EXTENDED = 0x2000 | 0x4000;

/**
 * The entries of the index file `file` in the order and shape `git ls-files -z -s --debug` lists
 * them, without starting git; null when git must read it, so that whatever git makes of it (a
 * refusal included) is what the caller gets:
 *  - a split index (`link`) or a sparse one (`sdir`), whose entries live elsewhere or are trees,
 *    and any extension git requires (a name not starting with A–Z) that this reader does not know;
 *  - a trailing hash that is neither the hash of the rest nor zero (git does not check it when it
 *    reads, so a damaged file is git's to list or refuse);
 *  - an entry git would refuse (extended flags in a version 2 index, unknown extended bits), a
 *    name whose length in the flags is not its length, or bytes this reader cannot walk;
 *  - a skip-worktree entry (git's listing of it depends on the worktree: see below).
 * A missing file is an empty index, as git has it.
 */
export function listIndexFile(file: string, format: 'sha1' | 'sha256'): IndexEntry[] | null {
  let buf: Buffer;
  let indexMtimeSec: number;
  try {
    const fd = fs.openSync(file, 'r');
    try {
      // The file's own mtime (the one read, whatever replaces it meanwhile): git's racy rule.
      indexMtimeSec = Number(fs.fstatSync(fd, { bigint: true }).mtimeNs / 1_000_000_000n);
      buf = fs.readFileSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    return null;
  }
  const hashLen = format === 'sha256' ? 32 : 20;
  if (buf.length < 12 + hashLen || buf.toString('latin1', 0, 4) !== 'DIRC') return null;
  const version = buf.readUInt32BE(4);
  const count = buf.readUInt32BE(8);
  if (version < 2 || version > 4 || count > buf.length / 60) return null;
  const limit = buf.length - hashLen;
  const trailer = buf.subarray(limit);
  if (trailer.some((b) => b !== 0)) {
    const sum = crypto.createHash(format).update(buf.subarray(0, limit)).digest();
    if (!sum.equals(trailer)) return null;
  }
  // One pass gathers the names (NUL-separated), the object ids and the numbers; the strings are
  // then made in two decodes, not one per entry (a CLI capture reads the index once, cold: a
  // per-entry toString costs it several times the whole read).
  let names = Buffer.allocUnsafe(Math.max(4096, version === 4 ? buf.length * 2 : buf.length));
  let namesLen = 0;
  const oids = Buffer.allocUnsafe(count * hashLen);
  const modes = new Uint32Array(count);
  const flagsOf = new Int32Array(count);
  const stages = new Uint8Array(count);
  const sizes = new Uint32Array(count);
  const recorded = new Map<number, { stat: Buffer; racy: boolean }>();
  let prevStart = 0;
  let prevLen = 0;
  let off = 12;
  for (let n = 0; n < count; n++) {
    const flagsAt = off + STAT_BYTES + hashLen;
    if (flagsAt + 2 > limit) return null;
    const flags = (buf[flagsAt] << 8) | buf[flagsAt + 1];
    const extended = (flags & 0x4000) !== 0;
    // Extended flags in a version 2 index, or bits git does not know: git refuses, so git answers.
    if (extended && version === 2) return null;
    const ext = extended ? (buf[flagsAt + 2] << 8) | buf[flagsAt + 3] : 0;
    if (ext & ~KNOWN_EXTENDED) return null;
    // A skip-worktree entry's flag is not the file's alone: in a sparse checkout git clears it, as it
    // reads the index, for every such entry whose file is on disk (unless
    // sparse.expectFilesOutsideOfPatterns), so git's listing depends on the worktree and config.
    if (ext & 0x4000) return null;
    let at = flagsAt + 2 + (extended ? 2 : 0);
    let keep = 0;
    if (version === 4) {
      const prefix = v4Prefix(buf, at, limit);
      if (!prefix || prefix.drop > prevLen) return null;
      keep = prevLen - prefix.drop;
      at = prefix.at;
    }
    const end = buf.indexOf(0, at);
    if (end < 0 || end >= limit) return null;
    const len = keep + end - at;
    // Git takes the name's length from the flags (below 0xFFF), not from the NUL: a file where the
    // two disagree is one git reads otherwise or refuses.
    if ((flags & 0xfff) !== Math.min(len, 0xfff)) return null;
    if (namesLen + len + 1 > names.length) {
      const bigger = Buffer.allocUnsafe(2 * (namesLen + len + 1));
      names.copy(bigger, 0, 0, namesLen);
      names = bigger;
    }
    // (Plain loops: copyBytes makes a subarray per name past 64 bytes, and names are often longer.)
    for (let k = 0; k < keep; k++) names[namesLen + k] = names[prevStart + k];
    for (let k = at, d = namesLen + keep; k < end; k++, d++) names[d] = buf[k];
    prevStart = namesLen;
    prevLen = len;
    namesLen += len;
    names[namesLen++] = 0;
    const statAt = off;
    copyBytes(buf, oids, n * hashLen, statAt + STAT_BYTES, statAt + STAT_BYTES + hashLen);
    modes[n] = be32(buf, statAt + 24);
    sizes[n] = be32(buf, statAt + SIZE_OFFSET);
    if (sizes[n] >= RECORDED_MIN_SIZE) {
      // Racily clean by git's rule (an mtime not older than the index's), with a second to spare.
      const racy = be32(buf, statAt + 8) + 1 >= indexMtimeSec;
      recorded.set(n, { stat: Buffer.from(buf.subarray(statAt, statAt + STAT_BYTES)), racy });
    }
    stages[n] = (flags >> 12) & 3;
    flagsOf[n] = (flags & CE_VALID) | (ext << 16);
    off = version === 4 ? end + 1 : off + ((end - off + 8) & ~7);
  }
  if (off > limit) return null;
  for (let at = off; at < limit;) {
    if (at + 8 > limit) return null;
    const first = buf[at];
    if (first < 0x41 || first > 0x5a) return null; // required by git, unknown here
    at += 8 + buf.readUInt32BE(at + 4);
    if (at > limit) return null;
  }
  const paths = count ? names.toString('utf8', 0, namesLen - 1).split('\0') : [];
  const hex = oids.toString('hex');
  const hexLen = 2 * hashLen;
  const modeText = new Map<number, string>();
  const out: IndexEntry[] = new Array(count);
  for (let n = 0; n < count; n++) {
    let mode = modeText.get(modes[n]);
    if (mode === undefined) modeText.set(modes[n], (mode = modes[n].toString(8).padStart(6, '0')));
    out[n] = {
      mode,
      oid: hex.slice(n * hexLen, (n + 1) * hexLen),
      stage: stages[n],
      path: paths[n],
      flags: flagsOf[n],
      size: sizes[n],
    };
    const r = recorded.get(n);
    if (r) out[n].recorded = r;
  }
  return out;
}

/** A big-endian 32-bit value without Buffer's checks (the caller has checked the bounds). */
function be32(buf: Buffer, at: number): number {
  return ((buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3]) >>> 0;
}
