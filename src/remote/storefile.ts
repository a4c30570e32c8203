// Reading files of a directory store, which anyone with write access to it can forge: only a
// regular file is ever opened (a FIFO would block open(2) or read(2) for ever, a directory or a
// device is no pack), nothing is followed through a symlink, and a size is known before any read.
// A file of the wrong kind or size is INTEGRITY_MISMATCH: the store holds something that is not
// what its name says, like a pack that does not hash to its name.

import * as fs from 'node:fs';
import { XetError } from '../errors';

const CHUNK = 1024 * 1024;

function kindOf(st: fs.Stats): string {
  if (st.isFIFO()) return 'a FIFO';
  if (st.isDirectory()) return 'a directory';
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isSocket()) return 'a socket';
  if (st.isBlockDevice() || st.isCharacterDevice()) return 'a device';
  return 'not a regular file';
}

function notRegular(file: string, st: fs.Stats): XetError {
  return new XetError('INTEGRITY_MISMATCH', `${file} is ${kindOf(st)}, not a regular file; the store is damaged`, {
    file,
  });
}

/** Open a store file for reading, or null when it does not exist. Never blocks: lstat first, then
 * O_NOFOLLOW|O_NONBLOCK (a FIFO swapped in after the lstat opens without waiting) and fstat. */
export function openStoreFile(file: string): { fd: number; size: number } | null {
  const st = fs.lstatSync(file, { throwIfNoEntry: false });
  if (!st) return null;
  if (!st.isFile()) throw notRegular(file, st);
  const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;
  let fd: number;
  try {
    fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') throw notRegular(file, fs.lstatSync(file));
    throw e;
  }
  const fst = fs.fstatSync(fd);
  if (!fst.isFile()) {
    fs.closeSync(fd);
    throw notRegular(file, fst);
  }
  return { fd, size: fst.size };
}

/** Whether `file` exists as a regular file (anything else there is INTEGRITY_MISMATCH). */
export function storeFileExists(file: string): boolean {
  const st = fs.lstatSync(file, { throwIfNoEntry: false });
  if (!st) return false;
  if (!st.isFile()) throw notRegular(file, st);
  return true;
}

/** The whole of a small store file, refused unread past `maxBytes`; null when absent. */
export function readStoreFile(file: string, maxBytes: number): Buffer | null {
  const f = openStoreFile(file);
  if (!f) return null;
  try {
    if (f.size > maxBytes) {
      throw new XetError('INTEGRITY_MISMATCH', `${file} is ${f.size} bytes, more than the ${maxBytes} it may hold`, {
        file,
        size: f.size,
        maxBytes,
      });
    }
    const buf = Buffer.alloc(f.size);
    let n = 0;
    while (n < f.size) {
      const got = fs.readSync(f.fd, buf, n, f.size - n, n);
      if (got === 0) break;
      n += got;
    }
    return buf.subarray(0, n);
  } finally {
    fs.closeSync(f.fd);
  }
}

/** Copy a store file to a new file `dst` (created exclusively), in chunks; false when absent.
 * `halfway` runs once half of it is written (a fault point of the tests). */
export function copyStoreFile(src: string, dst: string, halfway?: () => void): boolean {
  const f = openStoreFile(src);
  if (!f) return false;
  try {
    const out = fs.openSync(dst, 'wx');
    try {
      const buf = Buffer.alloc(CHUNK);
      let pos = 0;
      let half = halfway;
      for (;;) {
        const want = half ? Math.max(1, Math.min(CHUNK, Math.floor(f.size / 2) - pos)) : CHUNK;
        const got = fs.readSync(f.fd, buf, 0, want, pos);
        if (got === 0) break;
        let w = 0;
        while (w < got) w += fs.writeSync(out, buf, w, got - w);
        pos += got;
        if (half && pos >= Math.floor(f.size / 2)) {
          half();
          half = undefined;
        }
      }
    } finally {
      fs.closeSync(out);
    }
    return true;
  } finally {
    fs.closeSync(f.fd);
  }
}

/** Whether two files have the same bytes; `b` is a store file (checked), `a` ours. */
export function sameBytes(a: string, b: string): boolean {
  const fb = openStoreFile(b);
  if (!fb) return false;
  const fa = fs.openSync(a, 'r');
  try {
    if (fs.fstatSync(fa).size !== fb.size) return false;
    const ba = Buffer.alloc(CHUNK);
    const bb = Buffer.alloc(CHUNK);
    for (let pos = 0; pos < fb.size; pos += CHUNK) {
      const na = fs.readSync(fa, ba, 0, CHUNK, pos);
      const nb = fs.readSync(fb.fd, bb, 0, CHUNK, pos);
      if (na !== nb || !ba.subarray(0, na).equals(bb.subarray(0, nb))) return false;
    }
    return true;
  } finally {
    fs.closeSync(fa);
    fs.closeSync(fb.fd);
  }
}
