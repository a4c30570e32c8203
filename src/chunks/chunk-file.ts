// Chunking a file on disk: one sequential read that finds the cuts (gear.ts), names every chunk
// (its git blob id) and the whole file (its git blob id, the pointer's `blob`), in bounded memory
// (one read block plus one chunk carried across blocks). Nothing is stored here: the caller packs
// the chunks it lacks, reading them again by offset (the pack writer re-hashes what it reads, so a
// file that changes in between aborts the capture instead of storing a wrong chunk).

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { GearChunker } from './gear';
import { chunkParamsFor, type ChunkParams } from './params';
import type { ChunkRef } from './list-tree';

const READ_BLOCK = 4 * 1024 * 1024;

export interface ChunkedFile {
  size: number;
  /** The whole file's git blob id. */
  blob: string;
  params: ChunkParams;
  chunks: ChunkRef[];
}

export interface ChunkFileOptions {
  format: 'sha1' | 'sha256';
  /** The size lstat gave when the file was listed: a file of another size now changed meanwhile. */
  expectSize?: number;
  signal?: AbortSignal;
}

/** Chunk a regular file (never through a symlink, never blocking on a fifo). */
export async function chunkFile(file: string, o: ChunkFileOptions): Promise<ChunkedFile> {
  const fd = await fs.promises.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    const st = await fd.stat();
    if (!st.isFile() || (o.expectSize !== undefined && st.size !== o.expectSize)) {
      throw changed(file, 'its size or type changed');
    }
    const size = st.size;
    const params = chunkParamsFor(size);
    const chunker = new GearChunker(params);
    const whole = createHash(o.format).update(`blob ${size}\0`);
    const chunks: ChunkRef[] = [];
    // Bytes of the current chunk that came in earlier blocks (at most params.max).
    const carry = Buffer.allocUnsafe(params.max);
    let carried = 0;
    let offset = 0; // file offset of the current chunk
    const blocks = [Buffer.allocUnsafe(READ_BLOCK), Buffer.allocUnsafe(READ_BLOCK)];
    let which = 0;
    let pos = 0;
    const cuts: number[] = [];
    const name = (parts: Uint8Array[], len: number): string => {
      const h = createHash(o.format).update(`blob ${len}\0`);
      for (const p of parts) h.update(p);
      return h.digest('hex');
    };
    let next = fd.read(blocks[which], 0, READ_BLOCK, pos);
    for (;;) {
      o.signal?.throwIfAborted();
      const { bytesRead } = await next;
      if (bytesRead === 0) break;
      const buf = blocks[which].subarray(0, bytesRead);
      pos += bytesRead;
      if (pos > size) throw changed(file, 'it grew');
      which ^= 1;
      next = fd.read(blocks[which], 0, READ_BLOCK, pos); // read ahead while this block is hashed
      whole.update(buf);
      cuts.length = 0;
      chunker.push(buf, cuts);
      let start = 0;
      for (const end of cuts) {
        const part = buf.subarray(start, end);
        const len = carried + part.length;
        chunks.push({ offset, size: len, oid: name(carried ? [carry.subarray(0, carried), part] : [part], len) });
        offset += len;
        carried = 0;
        start = end;
      }
      buf.copy(carry, carried, start);
      carried += buf.length - start;
    }
    await next.catch(() => undefined);
    if (pos !== size) throw changed(file, 'it shrank');
    if (carried) {
      chunks.push({ offset, size: carried, oid: name([carry.subarray(0, carried)], carried) });
    }
    return { size, blob: whole.digest('hex'), params, chunks };
  } finally {
    await fd.close();
  }
}

function changed(file: string, why: string): XetError {
  return new XetError('WORKTREE_CHANGED', `${file} changed while it was being captured (${why}); capture again`, {
    path: file,
  });
}
