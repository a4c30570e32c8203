// Writing a whole git index file (gitformat-index(5), versions 2 and 4) from entries we already
// hold, so that capture's stat cache is filled from the one read that hashed and stored each file,
// without git reading and hashing every file a second time (`update-index`). The bytes are what git
// writes for the same entries: stat data as `fill_stat_data` records it (every field cast to 32
// bits), the canonical mode, name-length flags, v4 prefix compression, and a cache-tree (TREE)
// extension git itself can use. test/index-writer.test.ts holds it to git's own output.
//
// Extensions whose signature starts with an upper-case letter are optional: git skips those it does
// not know, and drops them when it rewrites the file. Capture keeps its own record in one (XETC), so
// the record and the entries it vouches for are one file, published by one rename.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { native } from '../native';
import { copyBytes } from './copy-bytes';

export const STAT_BYTES = 40;

/** Offsets inside an entry's 40 bytes of stat data. */
export const STAT = {
  ctime: 0,
  ctimeNs: 4,
  mtime: 8,
  mtimeNs: 12,
  dev: 16,
  ino: 20,
  mode: 24,
  uid: 28,
  gid: 32,
  size: 36,
};

/** The entries of an index, one column each (an object per entry was most of the cost). */
export interface IndexEntries {
  /** The entries' paths in order, UTF-8 ('/'-separated), each ended by a NUL. */
  names: Buffer;
  /** Entry k's row: its 40 bytes of stat data (mode at STAT.mode) are at row × STAT_BYTES of
   * `stat`, its raw id at row × the hash length of `oid`. */
  rows: ArrayLike<number>;
  stat: Uint8Array;
  oid: Uint8Array;
}

/** One directory of the cache-tree: its tree id (null: invalid) and how many entries it covers. */
export interface CacheTreeNode {
  /** The directory's own name (empty at the root). */
  name: Buffer;
  entryCount: number;
  oid: Buffer | null;
  children: CacheTreeNode[];
}

export interface IndexExtension {
  signature: string;
  data: Buffer;
}

const NS = 1_000_000_000n;
const u32 = (v: bigint): number => Number(BigInt.asUintN(32, v));
const floorDiv = (ns: bigint): bigint => (ns >= 0n || ns % NS === 0n ? ns / NS : ns / NS - 1n);

/** The mode git records for what lstat saw (create_ce_mode with core.filemode and core.symlinks on):
 * a regular file is 100755 when its owner may execute it, else 100644. 0 for anything else. */
export function canonicalMode(stMode: number): number {
  const type = stMode & 0o170000;
  if (type === 0o100000) return stMode & 0o100 ? 0o100755 : 0o100644;
  if (type === 0o120000) return 0o120000;
  return 0;
}

/** The 40 bytes git records for this lstat (fill_stat_data), written at `at` of `out`. */
/** What git's stat data is made of (an fs.BigIntStats has it; so does the native read's). */
export type StatFields = Pick<fs.BigIntStats, 'dev' | 'ino' | 'mode' | 'uid' | 'gid' | 'size' | 'mtimeNs' | 'ctimeNs'>;

export function statBlockInto(st: StatFields, out: Buffer, at: number): void {
  const ctime = floorDiv(st.ctimeNs);
  const mtime = floorDiv(st.mtimeNs);
  out.writeUInt32BE(u32(ctime), at);
  out.writeUInt32BE(Number(st.ctimeNs - ctime * NS), at + 4);
  out.writeUInt32BE(u32(mtime), at + 8);
  out.writeUInt32BE(Number(st.mtimeNs - mtime * NS), at + 12);
  out.writeUInt32BE(u32(st.dev), at + 16);
  out.writeUInt32BE(u32(st.ino), at + 20);
  out.writeUInt32BE(canonicalMode(Number(st.mode)), at + 24);
  out.writeUInt32BE(Number(st.uid) >>> 0, at + 28);
  out.writeUInt32BE(Number(st.gid) >>> 0, at + 32);
  out.writeUInt32BE(u32(st.size), at + 36);
}

export function statBlock(st: fs.BigIntStats): Buffer {
  const b = Buffer.allocUnsafe(STAT_BYTES);
  statBlockInto(st, b, 0);
  return b;
}

/** Git's varint (the offset encoding of pack and index v4): 7 bits a byte, most significant first,
 * each continued byte storing one less. */
const varintScratch = new Uint8Array(16);

/** Writes `value` as an index v4 offset varint at `at`; returns the bytes written. */
function writeVarint(value: number, buf: Uint8Array, at: number): number {
  const tmp = varintScratch;
  let pos = 15;
  tmp[pos] = value & 127;
  while ((value = Math.floor(value / 128)) > 0) tmp[--pos] = 128 | (--value & 127);
  return copyBytes(tmp, buf, at, pos, 16);
}

/** Each node's serialized subtree, while the node lives. A resident process's tree memo
 * (tree-memo.ts) hands the same node objects for every subtree an edit did not reach, so its next
 * stat cache writes only the nodes above the edits again (~3 ms of ~3,700 nodes, per capture, on
 * the bench tree). A node is never changed once built (tree-builder.ts, tree-memo.ts). */
const subtreeBytes = new WeakMap<CacheTreeNode, Buffer>();

/** The cache-tree extension's body: nodes in pre-order, subtrees in git's order (by name length,
 * then bytes: cache-tree.c's subtree_name_cmp), so git reads back exactly the tree it would build. */
export function serializeCacheTree(root: CacheTreeNode): Buffer {
  const walk = (n: CacheTreeNode): Buffer => {
    const kept = subtreeBytes.get(n);
    if (kept) return kept;
    const parts = [n.name, Buffer.from(`\0${n.entryCount} ${n.children.length}\n`, 'latin1')];
    if (n.entryCount >= 0 && n.oid) parts.push(n.oid);
    const kids = [...n.children].sort((x, y) => x.name.length - y.name.length || Buffer.compare(x.name, y.name));
    for (const c of kids) parts.push(walk(c));
    const bytes = Buffer.concat(parts);
    subtreeBytes.set(n, bytes);
    return bytes;
  };
  return walk(root);
}

/**
 * An index file's bytes. Entries must be sorted by path bytes, stage 0, with no duplicates (git
 * refuses an index that is not). Version 4 compresses each path against the one before it. The
 * entries are written in C where the native module loaded (indexEntriesInto); `how` is for tests:
 * 'js' writes them in JavaScript even there (both must give the same bytes).
 */
export function serializeIndex(
  entries: IndexEntries,
  options: { version: 2 | 4; format: 'sha1' | 'sha256'; extensions?: IndexExtension[] },
  how: 'auto' | 'js' = 'auto',
): Buffer {
  const { names, rows } = entries;
  const hashLen = options.format === 'sha256' ? 32 : 20;
  const v4 = options.version === 4;
  const n = rows.length;
  // A bound, not the size: v4's prefix lengths take 1-4 bytes, v2 pads each entry with 1-8 NULs.
  let size = 12 + n * (STAT_BYTES + hashLen + 2 + (v4 ? 4 : 8)) + names.length;
  for (const x of options.extensions ?? []) size += 8 + x.data.length;
  const buf = Buffer.alloc(size + hashLen);
  buf.write('DIRC', 0, 'latin1');
  buf.writeUInt32BE(options.version, 4);
  buf.writeUInt32BE(n, 8);
  let at =
    how === 'auto' && native
      ? nativeEntries(entries, hashLen, options.version, buf)
      : jsEntries(entries, hashLen, v4, buf);
  for (const x of options.extensions ?? []) {
    buf.write(x.signature, at, 'latin1');
    buf.writeUInt32BE(x.data.length, at + 4);
    x.data.copy(buf, at + 8);
    at += 8 + x.data.length;
  }
  crypto.createHash(options.format).update(buf.subarray(0, at)).digest().copy(buf, at);
  return buf.subarray(0, at + hashLen);
}

const asBuffer = (u: Uint8Array): Buffer =>
  Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/** The entries written by the native module, from byte 12 of `buf`; where they end. */
function nativeEntries(entries: IndexEntries, hashLen: number, version: 2 | 4, buf: Buffer): number {
  const rows = entries.rows instanceof Uint32Array ? entries.rows : Uint32Array.from(entries.rows);
  // Uint32Array.from makes 1.5 a 1 and -1 a 4294967295: a row that is not one is refused here.
  for (let k = 0; k < rows.length; k++) if (rows[k] !== entries.rows[k]) throw rowsError(rows.length);
  const rowBytes = Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength);
  const end = (native as NonNullable<typeof native>).indexEntriesInto(
    entries.names,
    rowBytes,
    asBuffer(entries.stat),
    asBuffer(entries.oid),
    hashLen,
    version,
    buf,
    12,
  );
  if (end < 0) throw rowsError(rows.length);
  return end;
}

const rowsError = (n: number): Error => new Error(`index: ${n} entries do not match their names, stat data or ids`);

/** The same entries written in JavaScript (no native module). */
function jsEntries(entries: IndexEntries, hashLen: number, v4: boolean, buf: Buffer): number {
  const { names, rows, stat, oid } = entries;
  const n = rows.length;
  let at = 12;
  let prevAt = 0;
  let prevLen = -1;
  let from = 0;
  for (let k = 0; k < n; k++) {
    const end = names.indexOf(0, from);
    if (end < 0) throw new Error(`index: ${n} entries but ${k} names`);
    const len = end - from;
    const start = at;
    const row = rows[k];
    if (!Number.isInteger(row) || row < 0 || (row + 1) * STAT_BYTES > stat.length || (row + 1) * hashLen > oid.length)
      throw rowsError(n);
    at += copyBytes(stat, buf, at, row * STAT_BYTES, (row + 1) * STAT_BYTES);
    at += copyBytes(oid, buf, at, row * hashLen, (row + 1) * hashLen);
    buf[at++] = Math.min(len, 0xfff) >> 8;
    buf[at++] = Math.min(len, 0xfff) & 0xff;
    if (v4) {
      let common = 0;
      if (prevLen >= 0) {
        const max = Math.min(prevLen, len);
        while (common < max && names[prevAt + common] === names[from + common]) common++;
      }
      at += writeVarint(prevLen >= 0 ? prevLen - common : 0, buf, at);
      at += copyBytes(names, buf, at, from + common, end);
      buf[at++] = 0;
    } else {
      at += copyBytes(names, buf, at, from, end);
      at = start + ((at - start + 8) & ~7); // 1 to 8 NULs (the buffer is zeroed)
    }
    prevAt = from;
    prevLen = len;
    from = end + 1;
  }
  if (from !== names.length) throw new Error(`index: more names than ${n} entries`);
  return at;
}

/** Publish an index file: written beside it under a temporary name, then renamed over it (git's
 * readers never see half a file). Its mtime is the moment it is written, as git's is: entries
 * whose files changed in that second are "racily clean" to git, which then reads them. */
export function writeIndexFile(file: string, data: Buffer | readonly Buffer[]): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.xet-${process.pid}`);
  const fd = fs.openSync(tmp, 'w', 0o644);
  try {
    for (const piece of Buffer.isBuffer(data) ? [data] : data) {
      let done = 0;
      while (done < piece.length) done += fs.writeSync(fd, piece, done, piece.length - done);
    }
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
}

/** The optional extensions of an index file, by signature (a damaged or foreign file gives none). */
export function readExtensions(buf: Buffer, hashLen: number, entriesEnd: number): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let at = entriesEnd;
  const limit = buf.length - hashLen;
  while (at + 8 <= limit) {
    const sig = buf.toString('latin1', at, at + 4);
    const len = buf.readUInt32BE(at + 4);
    if (at + 8 + len > limit) return new Map();
    out.set(sig, buf.subarray(at + 8, at + 8 + len));
    at += 8 + len;
  }
  return at === limit ? out : new Map();
}
