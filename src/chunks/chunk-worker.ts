// Worker thread of the parallel chunker (chunk-file.ts): cuts one region of a file as if a chunk
// started at the region's first byte, and names every chunk it cuts (git blob ids). The region is
// read `overrun` bytes past its end, so that the region before it can be joined to the next one
// where their cuts coincide (chunk-file.ts `joinRegions` says why that is exact).

import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { GearChunker } from './gear';
import type { ChunkParams } from './params';

export interface RegionJob {
  id: number;
  file: string;
  format: 'sha1' | 'sha256';
  params: ChunkParams;
  /** The region: [start, end) of the file; bytes are read up to `limit` (≥ end, ≤ the file's size). */
  start: number;
  end: number;
  limit: number;
  /** The file's size: a region whose `limit` is it also ends the file's last chunk there. */
  size: number;
}

export interface RegionDone {
  id: number;
  /** Chunk ends (absolute file offsets, ascending); the first chunk starts at `start`. */
  ends: number[];
  /** The chunks' blob ids, one per end. */
  oids: string[];
  /** Set when the region could not be read as expected (the file changed or went away). */
  error?: string;
}

// One read buffer per thread, grown to the largest region (a region is a few tens of MiB).
let scratch = Buffer.allocUnsafe(0);

/** Name the chunk `buf` as a git blob. */
export function blobId(format: 'sha1' | 'sha256', buf: Uint8Array): string {
  return createHash(format).update(`blob ${buf.length}\0`).update(buf).digest('hex');
}

export function chunkRegion(job: RegionJob): RegionDone {
  const want = job.limit - job.start;
  if (scratch.length < want) scratch = Buffer.allocUnsafe(want);
  let fd: number;
  try {
    fd = fs.openSync(job.file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    return { id: job.id, ends: [], oids: [], error: (e as Error).message };
  }
  let n = 0;
  try {
    while (n < want) {
      const got = fs.readSync(fd, scratch, n, want - n, job.start + n);
      if (got === 0) break;
      n += got;
    }
  } catch (e) {
    return { id: job.id, ends: [], oids: [], error: (e as Error).message };
  } finally {
    fs.closeSync(fd);
  }
  if (n !== want) return { id: job.id, ends: [], oids: [], error: 'it shrank' };
  const buf = scratch.subarray(0, want);
  const cuts: number[] = [];
  new GearChunker(job.params).push(buf, cuts);
  if (job.limit === job.size && (cuts.length === 0 || cuts[cuts.length - 1] !== want)) cuts.push(want);
  const ends = new Array<number>(cuts.length);
  const oids = new Array<string>(cuts.length);
  let prev = 0;
  for (let i = 0; i < cuts.length; i++) {
    oids[i] = blobId(job.format, buf.subarray(prev, cuts[i]));
    ends[i] = job.start + cuts[i];
    prev = cuts[i];
  }
  return { id: job.id, ends, oids };
}

if (parentPort) {
  const port = parentPort;
  port.on('message', (job: RegionJob) => port.postMessage(chunkRegion(job) satisfies RegionDone));
}
