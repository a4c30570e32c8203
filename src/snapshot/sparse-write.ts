// Writing a restored file's bytes as git's checkout does: every whole block of HOLE_BLOCK zeros,
// counted from the file's start, is left as a hole instead of written (git's stream_blob_to_fd), so
// a mostly empty file (a disk image, a sparse database) takes its data's blocks, not its length.
// native/xet-native.c write_sparse applies the same rule in the native module's createFile and
// layBlob; this is it for node's fs (the worker without the module, chunked files).

import * as fs from 'node:fs';

export const HOLE_BLOCK = 16 * 1024;
const ZEROS = Buffer.alloc(HOLE_BLOCK);

/**
 * Write `data` at offset `at` of `fd`, positionally, leaving a hole for each whole block of zeros
 * it covers (blocks aligned to the file's start). A block split between two calls is written, not
 * left: a caller writing a file in pieces ends each piece but the last on a block boundary to get
 * the holes one call would make. Returns the offset after the last byte written (not skipped): a
 * caller whose file ends in a hole sets its length with `finishSparse`.
 */
export function writeSparse(fd: number, data: Buffer, at: number): number {
  let end = at;
  let i = 0;
  while (i < data.length) {
    // The run from i to the next whole zero block (or the end), written in one call.
    let j = i;
    let hole = -1;
    while (j < data.length) {
      const blockEnd = Math.min(data.length, j + (HOLE_BLOCK - ((at + j) % HOLE_BLOCK)));
      if ((at + j) % HOLE_BLOCK === 0 && blockEnd - j === HOLE_BLOCK && data.subarray(j, blockEnd).equals(ZEROS)) {
        hole = blockEnd;
        break;
      }
      j = blockEnd;
    }
    for (let k = i; k < j;) k += fs.writeSync(fd, data, k, j - k, at + k);
    if (j > i) end = at + j;
    if (hole < 0) break;
    i = hole;
  }
  return end;
}

/** Give a file whose last bytes were holes its length (`written`: what writeSparse returned last):
 * its last byte is written, a zero, as git's checkout writes it. */
export function finishSparse(fd: number, written: number, size: number): void {
  if (written < size) fs.writeSync(fd, ZEROS, 0, 1, size - 1);
}
