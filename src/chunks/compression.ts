// How chunk blobs are compressed in packs: xet.chunk.compression, a deflate level 0-9 for the
// chunks of chunked files (other objects keep the capture's own level).
//
// Why the default is 0 (stored): chunks are nearly all the bytes of a large capture, and on this
// class of machine zlib's deflate runs at ~55-65 MB/s per core at level 1 on SQLite data (31 MB/s at
// level 6), against ~1 GB/s for stored blocks, ~1.1 GB/s for SHA-1 and ~300 MB/s for `zstd -1 -T0`
// on two cores. Deflating every chunk at level 1 makes a cold capture of a 1 GiB database ~9 s of
// deflate alone on two cores: over 2x zstd -1 -T0 (the goal) before a byte is hashed. Stored,
// the capture is bound by reading and hashing. The cost is disk: SQLite pages deflate to ~48% at
// level 1, so a first capture of such a file takes its size instead of half; the 1%-edit goal
// (≤ 5% of the file per snapshot) holds either way (2.7% new chunk bytes + 0.5% list, stored).
// Chunks whose 1 KiB sample has more than 7.5 bits of entropy per byte (random, compressed or
// encrypted data) are stored at every level, since deflate would only spend time on them.
// bench/chunker.mjs measures all of this; docs/DESIGN-NOTES.md has the numbers.

import { XetError } from '../errors';

export const DEFAULT_CHUNK_LEVEL = 0;

/** xet.chunk.compression: a level 0-9 (or `stored` for 0, `fast` for 1, `best` for 9). */
export function parseChunkCompression(value: string | undefined): number {
  if (value === undefined) return DEFAULT_CHUNK_LEVEL;
  const v = value.trim().toLowerCase();
  const named: Record<string, number> = { stored: 0, none: 0, fast: 1, best: 9, default: DEFAULT_CHUNK_LEVEL };
  if (v in named) return named[v];
  if (/^[0-9]$/.test(v)) return Number(v);
  throw new XetError(
    'CONFIG_INVALID',
    `xet.chunk.compression is ${JSON.stringify(value)}: give a deflate level 0-9, or stored, fast or best`,
    { key: 'xet.chunk.compression', value },
  );
}
