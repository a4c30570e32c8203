// How chunk blobs are compressed in packs: xet.chunk.compression, `auto` (the default) or a deflate
// level 0-9 for the chunks of chunked files (other objects keep the capture's own level).
//
// Why `auto`: chunks are nearly all the bytes of a large capture, and on this class of machine
// zlib's deflate runs at ~55-65 MB/s per core at level 1 on SQLite data (31 MB/s at level 6),
// against ~1 GB/s for stored blocks, ~1.1 GB/s for SHA-1 and ~300 MB/s for `zstd -1 -T0` on two
// cores. Deflating every chunk of a cold capture of a 1 GiB database at level 1 is ~9 s of deflate
// alone on two cores: over 2x zstd -1 -T0 (the goal) before a byte is hashed. But stored
// chunks miss the other goal: a re-capture after 1% of the pages were rewritten packs ~54 MiB of
// new chunks (5.24% of the file) plus a 0.44% list, 5.68% in all, over the 5% the issue allows;
// deflated at level 1 the same chunks are 2.96%, 3.40% with the list. A re-capture packs tens of
// MiB, which deflate takes well under a second for. So `auto` deflates a capture's chunks at level
// 1 when it packs at most AUTO_DEFLATE_MAX_BYTES of them, and stores them beyond (a cold capture of
// a large file). 128 MiB is ~1 s of deflate on two cores, and covers a 1% edit of any file up to
// ~2 GiB (the sizes chunked at the 8 KiB average). Chunks whose 1 KiB sample has more than 7.5
// bits of entropy per byte (random, compressed or encrypted data) are stored at every level, since
// deflate would only spend time on them. bench/chunks.mjs measures all of this;
// docs/DESIGN-NOTES.md has the numbers.

import { XetError } from '../errors';

/** A deflate level 0-9, or `auto` (chosen per capture by chunkLevelFor). */
export type ChunkCompression = number | 'auto';

export const DEFAULT_CHUNK_COMPRESSION: ChunkCompression = 'auto';
/** `auto` deflates a capture's chunks when it packs at most this many bytes of them. */
export const AUTO_DEFLATE_MAX_BYTES = 128 * 1024 * 1024;
/** The level `auto` deflates at. */
const AUTO_LEVEL = 1;

/** xet.chunk.compression: `auto`, a level 0-9, or `stored` for 0, `fast` for 1, `best` for 9. */
export function parseChunkCompression(value: string | undefined): ChunkCompression {
  if (value === undefined) return DEFAULT_CHUNK_COMPRESSION;
  const v = value.trim().toLowerCase();
  const named: Record<string, ChunkCompression> = {
    auto: 'auto',
    default: DEFAULT_CHUNK_COMPRESSION,
    stored: 0,
    none: 0,
    fast: 1,
    best: 9,
  };
  if (v in named) return named[v];
  if (/^[0-9]$/.test(v)) return Number(v);
  throw new XetError(
    'CONFIG_INVALID',
    `xet.chunk.compression is ${JSON.stringify(value)}: give auto, a deflate level 0-9, or stored, fast or best`,
    { key: 'xet.chunk.compression', value },
  );
}

/** The deflate level for the chunks of one pack that holds `chunkBytes` bytes of them. */
export function chunkLevelFor(setting: ChunkCompression, chunkBytes: number): number {
  if (setting !== 'auto') return setting;
  return chunkBytes <= AUTO_DEFLATE_MAX_BYTES ? AUTO_LEVEL : 0;
}
