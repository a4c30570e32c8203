// The chunk list: a file's chunks, in order, as git trees, so git's reachability keeps every chunk
// of a snapshot alive and moves it with the snapshot (push, fetch, any Git server, our gc).
//
//   list tree      entries "40000 <offset>" -> segment trees, at most SEGMENT_CHUNKS chunks each
//   segment tree   entries "100644 <offset>" -> chunk blobs
//
// <offset> is the chunk's (or the segment's first chunk's) byte offset in the file, 16 lowercase hex
// digits, so tree order is file order and a reader finds the chunks of a range by binary search
// after reading one list tree and the segments the range touches, never the whole list. A chunk's
// size is the next offset minus its own (the file's size for the last), so a reader knows every
// size before it reads a chunk, and can check the blob git hands it against it. Segments bound each
// tree object (4096 entries, ~180 KB) whatever the file's size.
//
// The trees are built here, byte for byte, without git: a 1 GiB file's list is ~33 trees of
// ~131k entries in all, written into the capture's pack with its chunks.

import { createHash } from 'node:crypto';
import { XetError } from '../errors';
import { parseTreeObject, type TreeEntry } from '../git/tree-object';
import type { ChunkPointer } from './pointer';

export const SEGMENT_CHUNKS = 4096;
/** Bytes of one entry: mode ("40000" for a segment, "100644" for a chunk), space, 16-digit name,
 * NUL, raw id. */
const RAW = { sha1: 20, sha256: 32 } as const;
const SEGMENT_ENTRY = (f: 'sha1' | 'sha256'): number => 5 + 1 + 16 + 1 + RAW[f];
const CHUNK_ENTRY = (f: 'sha1' | 'sha256'): number => 6 + 1 + 16 + 1 + RAW[f];

export interface ChunkRef {
  /** Byte offset of the chunk in the file. */
  offset: number;
  size: number;
  /** The chunk's git blob id. */
  oid: string;
}

export interface TreeObject {
  oid: string;
  data: Buffer;
}

export function offsetName(offset: number): string {
  return offset.toString(16).padStart(16, '0');
}

/** A git tree object of entries already in name order (here: fixed-width offsets, ascending). */
export function treeObject(
  entries: { mode: string; name: string; oid: string }[],
  format: 'sha1' | 'sha256',
): TreeObject {
  const raw = format === 'sha1' ? 20 : 32;
  let size = 0;
  for (const e of entries) size += e.mode.length + 1 + Buffer.byteLength(e.name) + 1 + raw;
  const data = Buffer.allocUnsafe(size);
  let at = 0;
  for (const e of entries) {
    at += data.write(`${e.mode} ${e.name}\0`, at, 'utf8');
    at += data.write(e.oid, at, 'hex');
  }
  const oid = createHash(format).update(`tree ${size}\0`).update(data).digest('hex');
  return { oid, data };
}

/** The list tree and its segments for chunks in file order (contiguous from 0). */
export function buildChunkList(
  chunks: ChunkRef[],
  format: 'sha1' | 'sha256',
): { list: TreeObject; segments: TreeObject[] } {
  const segments: TreeObject[] = [];
  const top: { mode: string; name: string; oid: string }[] = [];
  for (let s = 0; s < chunks.length; s += SEGMENT_CHUNKS) {
    const part = chunks.slice(s, s + SEGMENT_CHUNKS);
    const seg = treeObject(
      part.map((c) => ({ mode: '100644', name: offsetName(c.offset), oid: c.oid })),
      format,
    );
    segments.push(seg);
    top.push({ mode: '40000', name: offsetName(part[0].offset), oid: seg.oid });
  }
  return { list: treeObject(top, format), segments };
}

/** The snapshot's top-level `chunks/` tree: every chunk list a chunked file of it names, by id. */
export function chunksTree(lists: Iterable<string>, format: 'sha1' | 'sha256'): TreeObject {
  const ids = [...new Set(lists)].sort();
  return treeObject(
    ids.map((oid) => ({ mode: '40000', name: oid, oid })),
    format,
  );
}

export type { TreeEntry };

/** Parse a raw tree object of a chunk list (from `cat-file --batch`); malformed is SNAPSHOT_INVALID. */
export function parseTree(data: Buffer, format: 'sha1' | 'sha256', where: string): TreeEntry[] {
  const { entries, complete } = parseTreeObject(data, format === 'sha1' ? 20 : 32);
  if (!complete) throw new XetError('SNAPSHOT_INVALID', `${where}: a chunk list tree is malformed`, { path: where });
  return entries;
}

const OFFSET_RE = /^[0-9a-f]{16}$/;

/** The segments a list tree names, checked: names are offsets, ascending, the first 0, modes trees,
 * no more than the pointer's chunk count allows. */
export function parseListTree(
  data: Buffer,
  pointer: ChunkPointer,
  format: 'sha1' | 'sha256',
  where: string,
): { offset: number; oid: string }[] {
  const bad = (why: string): XetError =>
    new XetError('SNAPSHOT_INVALID', `${where}: the chunk list ${why}`, { path: where, list: pointer.list });
  const want = Math.ceil(pointer.chunks / SEGMENT_CHUNKS);
  if (data.length !== want * SEGMENT_ENTRY(format)) throw bad(`is ${data.length} bytes, not ${want} segments`);
  const segs = parseTree(data, format, where).map((e) => {
    if (e.mode !== '40000' || !OFFSET_RE.test(e.name))
      throw bad(`has an entry ${JSON.stringify(e.name)} that is not a segment`);
    return { offset: parseInt(e.name, 16), oid: e.oid };
  });
  segs.forEach((s, i) => {
    if (i === 0 ? s.offset !== 0 : s.offset <= segs[i - 1].offset || s.offset >= pointer.size) {
      throw bad('has segments out of order');
    }
  });
  return segs;
}

/**
 * One segment's chunks with their sizes, checked: offsets ascending from the segment's own, every
 * size 1..max, the segment ending where the next begins (`end`: the next segment's offset, or the
 * file's size). `index` is the segment's position (all but the last hold exactly SEGMENT_CHUNKS).
 */
export function parseSegment(
  data: Buffer,
  seg: { offset: number; end: number; index: number },
  pointer: ChunkPointer,
  format: 'sha1' | 'sha256',
  where: string,
): ChunkRef[] {
  const bad = (why: string): XetError =>
    new XetError('SNAPSHOT_INVALID', `${where}: chunk list segment ${offsetName(seg.offset)} ${why}`, {
      path: where,
      list: pointer.list,
    });
  const last = seg.index === Math.ceil(pointer.chunks / SEGMENT_CHUNKS) - 1;
  const count = last ? pointer.chunks - seg.index * SEGMENT_CHUNKS : SEGMENT_CHUNKS;
  if (data.length !== count * CHUNK_ENTRY(format)) throw bad(`is ${data.length} bytes, not ${count} chunks`);
  const entries = parseTree(data, format, where);
  const out: ChunkRef[] = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (e.mode !== '100644' || !OFFSET_RE.test(e.name))
      throw bad(`has an entry ${JSON.stringify(e.name)} that is not a chunk`);
    const offset = parseInt(e.name, 16);
    const next = i + 1 < entries.length ? parseInt(entries[i + 1].name, 16) : seg.end;
    if ((i === 0 && offset !== seg.offset) || !(next > offset) || next - offset > pointer.params.max) {
      throw bad('has chunks out of order or of an impossible size');
    }
    out.push({ offset, size: next - offset, oid: e.oid });
  }
  return out;
}
