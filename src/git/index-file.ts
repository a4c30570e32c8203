// Direct edits of a git index file, for the one thing no git command can set: the file size an
// entry's stat data records. Git treats "recorded size differs from the file's size" as modified
// without reading the file, so a source whose index holds such stale stat data shows files as
// modified that a fresh index would call clean; restore reproduces that by writing the same sizes.
// Only index versions 2 and 3 are edited (restore rewrites the index as v3 first, then converts it
// back with `git update-index --index-version`).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { XetError } from '../errors';

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
