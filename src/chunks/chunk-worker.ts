// Worker thread of the parallel chunker (chunk-file.ts): cuts one region of a file as if a chunk
// started at the region's first byte, and names every chunk it cuts (git blob ids). The region is
// read `overrun` bytes past its end, so that the region before it can be joined to the next one
// where their cuts coincide (chunk-file.ts `joinRegions` says why that is exact).

import * as fs from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { NamingChunker } from './gear';
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

// One read block per thread, reused: fresh memory costs a page fault per 4 KiB on these machines
// (~12 us each under the hypervisor), and a region-sized buffer made the first region of every
// worker 100 ms slower than the next.
const BLOCK_BYTES = 1024 * 1024;
let block = Buffer.allocUnsafe(0);

export function chunkRegion(job: RegionJob): RegionDone {
  const want = job.limit - job.start;
  if (block.length < BLOCK_BYTES) block = Buffer.allocUnsafe(BLOCK_BYTES);
  let fd: number;
  try {
    fd = fs.openSync(job.file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    return { id: job.id, ends: [], oids: [], error: (e as Error).message };
  }
  const chunker = new NamingChunker(job.params, job.format);
  const ends: number[] = [];
  const oids: string[] = [];
  let end = job.start; // where the current chunk starts
  const take = (size: number, oid: string): boolean => {
    end += size;
    ends.push(end);
    oids.push(oid);
    return false;
  };
  let pos = 0;
  try {
    while (pos < want) {
      const n = fs.readSync(fd, block, 0, Math.min(BLOCK_BYTES, want - pos), job.start + pos);
      if (n === 0) return { id: job.id, ends: [], oids: [], error: 'it shrank' };
      chunker.push(block.subarray(0, n), take);
      pos += n;
    }
  } catch (e) {
    return { id: job.id, ends: [], oids: [], error: (e as Error).message };
  } finally {
    fs.closeSync(fd);
  }
  // A region that reaches the file's end also ends its last chunk there.
  const last = job.limit === job.size ? chunker.finish() : null;
  if (last) take(last.size, last.oid);
  return { id: job.id, ends, oids };
}

if (parentPort) {
  const port = parentPort;
  port.on('message', (job: RegionJob) => port.postMessage(chunkRegion(job) satisfies RegionDone));
}
