// Small filesystem helpers shared by capture, restore and verify (and the restore's workers: keep
// this module's imports few).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';

/** What tells one state of a file from another without reading it: which file (device, inode),
 * its size and both times. */
export function fileStamp(st: fs.BigIntStats): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** The last `max` bytes of a regular file (all of it when smaller) and its size, read without
 * following a symlink at its name (nor waiting on a fifo there); null when it cannot be read so. */
export function readTail(file: string, max: number): { size: number; tail: Buffer; stat: fs.BigIntStats } | null {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const stat = fs.fstatSync(fd, { bigint: true });
    if (!stat.isFile()) return null;
    const size = Number(stat.size);
    const n = Math.min(size, max);
    const tail = Buffer.alloc(n);
    const got = fs.readSync(fd, tail, 0, n, size - n);
    return { size, tail: tail.subarray(0, got), stat };
  } finally {
    fs.closeSync(fd);
  }
}

/** Whether anything is at `p` (a dangling symlink included). */
export function lexists(p: string): boolean {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/** A text file's content, or null when it does not exist or cannot be read. */
export function readOptional(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** PATH_ESCAPE when a component of `abs` below `root` is a symlink (checked up to the first that
 * does not exist yet): a directory is never made through one. */
export function assertNoSymlinkBetween(root: string, abs: string): void {
  const rel = path.relative(root, abs).split(path.sep);
  let cur = root;
  for (const comp of rel) {
    cur = path.join(cur, comp);
    try {
      if (fs.lstatSync(cur).isSymbolicLink()) {
        throw new XetError('PATH_ESCAPE', `refusing to create a directory through the symlink ${cur}`, { path: abs });
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
  }
}

/** Enough of an index's end to hold either format's trailer (SHA-1 20 bytes, SHA-256 32). */
const INDEX_TAIL = 32;

/**
 * What stands for an index file's content: its last bytes (git writes an index whole, ending with
 * the hash of everything before it) and which file it is (device, inode, times: an index rewritten
 * away and back to the same bytes while it was read is another file). Null when the end says
 * nothing of the rest: written without its hash (a zero trailer), too short, unreadable.
 */
export function indexFileKey(file: string): string | null {
  const read = readTail(file, INDEX_TAIL);
  if (!read || read.size < 12 + INDEX_TAIL || read.tail.length !== INDEX_TAIL) return null;
  if (read.tail.subarray(INDEX_TAIL - 20).every((b) => b === 0)) return null;
  return `${read.tail.toString('hex')}:${fileStamp(read.stat)}`;
}
