// Chunking parameters: which files are chunked (xet.chunk.threshold) and the chunker's sizes for a
// file of a given size. This module owns those numbers and why they are what they are; the
// chunker (gear.ts) and the chunk list (pointer.ts, list-tree.ts) only apply them.
//
// Why 8 KiB average chunks and not Xet's 64 KiB: the target workload rewrites pages of 4 KiB at
// random (SQLite, most databases). A chunk covering p pages is rewritten when any of them is, so
// 1% of pages rewritten touches 1 - 0.99^p of the chunks: ~15% at 64 KiB (p = 16), ~4% at 16 KiB,
// ~2% at 8 KiB. The goal is ≤ 5% of the file per such edit, chunk lists included, which
// leaves 8 KiB. Smaller chunks cost objects (a 1 GiB file is ~131k blobs and a ~6 MB chunk list), so
// the average grows with the file once it passes 2 GiB, keeping a file's chunk count near 2^18.
// The sizes of a file are a pure function of its size class, so an unchanged file, or one edited
// in place, is cut at the same places by every capture, on every machine. The minimum is 4 KiB
// (avg/4 above 16 KiB) so a 4 KiB read touches at most 2 chunks. docs/DESIGN-NOTES.md
// has the measurements (bench/chunks.mjs).

import { XetError } from '../errors';

/** The chunker's name as the pointer records it; a new cutting rule gets a new name. */
export const CHUNKER_NAME = 'gear/v1';

export interface ChunkParams {
  /** No cut before this many bytes of a chunk (the last chunk of a file may be shorter). */
  min: number;
  /** The normalised-chunking target: a harder cut test before it, an easier one after. */
  avg: number;
  /** A cut is forced here. */
  max: number;
}

/** Files at or above this size are chunked unless xet.chunk.threshold says otherwise. */
export const DEFAULT_CHUNK_THRESHOLD = 8 * 1024 * 1024;

/** The average chunk size for a file: 8 KiB up to 2 GiB, doubling per doubling of the file, at
 * most 64 KiB (Xet's own average) from 16 GiB on. */
export function chunkParamsFor(fileSize: number): ChunkParams {
  let avg = 8 * 1024;
  let limit = 2 * 1024 * 1024 * 1024;
  while (fileSize > limit && avg < 64 * 1024) {
    avg *= 2;
    limit *= 2;
  }
  return { min: minFor(avg), avg, max: avg * 8 };
}

/** The minimum chunk size: avg/4, but never below 4 KiB. A 4 KiB range (one database page) then
 * touches at most 2 chunks whatever its offset (the lazy-read goal); at the 8 KiB average
 * avg/4 = 2 KiB let one such read span 3 chunks (bench/chunks.mjs saw 2 in 200). */
function minFor(avg: number): number {
  return Math.max(4 * 1024, avg / 4);
}

/** Parameters a pointer may name: exactly those chunkParamsFor gives for some size. */
export function knownParams(p: ChunkParams): boolean {
  for (let avg = 8 * 1024; avg <= 64 * 1024; avg *= 2) {
    if (p.avg === avg && p.min === minFor(avg) && p.max === avg * 8) return true;
  }
  return false;
}

const SIZE_RE = /^(\d+)\s*([kmgt]?)(i?b)?$/i;
const UNIT: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/**
 * xet.chunk.threshold: a size in bytes, with an optional k/m/g/t suffix (git's own units, powers of
 * 1024; "8m", "8MiB", "8388608"), or "off" (also "false", "0") for never. Below 64 KiB a file is a
 * handful of chunks at best, so smaller values are refused rather than honoured badly.
 */
export function parseChunkThreshold(value: string | undefined): number | null {
  if (value === undefined) return DEFAULT_CHUNK_THRESHOLD;
  const v = value.trim();
  if (/^(off|false|no|0)$/i.test(v)) return null;
  const m = SIZE_RE.exec(v);
  const n = m ? Number(m[1]) * UNIT[m[2].toLowerCase()] : NaN;
  if (!Number.isSafeInteger(n) || n < 64 * 1024) {
    throw new XetError(
      'CONFIG_INVALID',
      `xet.chunk.threshold is ${JSON.stringify(value)}: give a size of at least 64k (such as 8m or 1g), or off`,
      { key: 'xet.chunk.threshold', value },
    );
  }
  return n;
}
