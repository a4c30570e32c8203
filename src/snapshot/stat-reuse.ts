// When a re-capture may take a file's id from its stat cache without reading it: the file's lstat
// is exactly what the cache's entry recorded (sameAsEntry), and the entry is not racy. Capture's
// classify (capture-files.ts) decides every path with this rule and its exceptions (chunked and
// large files, hard links). The plain case, a small file with one link whose entry matches, is
// ~all of a re-capture's ~34,000 paths: reuseUnchanged decides those in one native pass (~1 ms
// where the JavaScript loop took ~12 ms of a daemon re-capture), and leaves the rest to classify.
// Its JavaScript twin here is the rule the native pass must match (test/stat-reuse.test.ts).

import { STAT, canonicalMode } from '../git/index-writer';
import { ROW, STAT_ROW } from '../git/lstat-many';
import { native } from '../native';

/** Whether an lstat (row r of lstatMany's rows) is the file a stat-cache entry recorded: every field
 * git records but the device (an overlay or NFS mount may renumber it; git leaves it out too), times
 * to the nanosecond. A value the entry's 32 bits cannot hold (a time past 2106 or before 1970, an
 * inode or size past 2^53, which lstatMany gives as -1) never matches: the file is read again. */
export function sameAsEntry(buf: Buffer, o: number, rows: Float64Array, r: number, mode: number): boolean {
  const U32 = 4294967296;
  const size = rows[r + ROW.size];
  const ino = rows[r + ROW.ino];
  return (
    buf.readUInt32BE(o + STAT.mode) === mode &&
    size >= 0 &&
    buf.readUInt32BE(o + STAT.size) === size % U32 &&
    ino >= 0 &&
    buf.readUInt32BE(o + STAT.ino) === ino % U32 &&
    buf.readUInt32BE(o + STAT.uid) === rows[r + ROW.uid] >>> 0 &&
    buf.readUInt32BE(o + STAT.gid) === rows[r + ROW.gid] >>> 0 &&
    buf.readUInt32BE(o + STAT.mtime) === rows[r + ROW.mtime] &&
    buf.readUInt32BE(o + STAT.mtimeNs) === rows[r + ROW.mtimeNs] &&
    buf.readUInt32BE(o + STAT.ctime) === rows[r + ROW.ctime] &&
    buf.readUInt32BE(o + STAT.ctimeNs) === rows[r + ROW.ctimeNs]
  );
}

/** The columns a capture fills for each path (capture-files.ts), `nlink` and `size` one buffer. */
export interface ReuseColumns {
  stat: Buffer;
  oid: Buffer;
  /** 1 where the path was decided here (capture-files' Slot.Reused), untouched elsewhere. */
  slot: Uint8Array;
  mtimeSec: Float64Array;
  /** nlink for path i at i, its size at n + i. */
  nlinkSize: Float64Array;
}

export const REUSED = 1;

/**
 * The plain case of the rule, for every path at once: a path whose row (lstatMany's) is a regular
 * file or symlink with one link and under `sizeBelow` bytes, whose entry (at `entryAt[i]` of the
 * index `buf`, -1 for none) has the same stat data and a modification time before `racyFrom`,
 * gets that entry's stat data and id, its time, links and size, and slot REUSED. Every other path
 * is left as it was. How many it decided. `how`: 'js' decides here even where the native module
 * loaded (tests hold the two to the same columns).
 */
export function reuseUnchanged(
  rows: Float64Array,
  entryAt: Int32Array,
  buf: Buffer,
  hashLen: number,
  racyFrom: number,
  sizeBelow: number,
  cols: ReuseColumns,
  how: 'auto' | 'js' = 'auto',
): number {
  const n = cols.slot.length;
  if (how === 'auto' && native?.reuseUnchanged) {
    const bytes = (a: ArrayBufferView): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    return native.reuseUnchanged(
      bytes(rows),
      bytes(entryAt),
      buf,
      hashLen,
      racyFrom,
      sizeBelow,
      cols.stat,
      cols.oid,
      bytes(cols.slot),
      bytes(cols.mtimeSec),
      bytes(cols.nlinkSize),
    );
  }
  const U32 = 4294967296;
  let count = 0;
  for (let i = 0; i < n; i++) {
    const r = i * STAT_ROW;
    const o = entryAt[i];
    if (rows[r + ROW.errno] !== 0 || o < 0 || o + 40 + hashLen > buf.length) continue;
    const mode = canonicalMode(rows[r + ROW.mode]);
    const size = rows[r + ROW.size];
    if (mode === 0 || !(size >= 0 && size < sizeBelow && size < U32) || rows[r + ROW.nlink] !== 1) continue;
    // Values no lstat gives: left to the caller's own rule, as the native pass leaves them.
    const ino = rows[r + ROW.ino];
    const uid = rows[r + ROW.uid];
    const gid = rows[r + ROW.gid];
    if (!Number.isInteger(ino) || !(uid >= 0 && uid < U32) || !(gid >= 0 && gid < U32)) continue;
    if (!sameAsEntry(buf, o, rows, r, mode) || !(buf.readUInt32BE(o + STAT.mtime) < racyFrom)) continue;
    buf.copy(cols.stat, i * 40, o, o + 40);
    buf.copy(cols.oid, i * hashLen, o + 40, o + 40 + hashLen);
    cols.slot[i] = REUSED;
    cols.mtimeSec[i] = buf.readUInt32BE(o + STAT.mtime);
    cols.nlinkSize[i] = 1;
    cols.nlinkSize[n + i] = size;
    count++;
  }
  return count;
}
