// The chunk pointer (xet.chunked/v1): the blob a chunked file's entry in a snapshot's `files/` tree
// holds instead of the file's bytes. It names the file's size, the id git would give the whole file
// as one blob (its hash: restore and verify check the reassembled bytes against it), the chunk list
// tree and the chunker. docs/FORMAT.md ("Chunked files") is the same thing for humans.
//
// A pointer is only ever a pointer because the manifest's `chunked` list names its path: content
// that merely looks like one is an ordinary file. It is parsed strictly (fixed lines, fixed order,
// canonical numbers), so one file has exactly one pointer and equal files have equal pointers.

import { XetError } from '../errors';
import { CHUNKER_NAME, knownParams, type ChunkParams } from './params';

export const POINTER_HEADER = 'xet.chunked/v1';
/** A pointer is a few lines; anything bigger is not one (checked before it is read). */
export const MAX_POINTER_BYTES = 512;

export interface ChunkPointer {
  /** The file's size in bytes. */
  size: number;
  /** The git blob id of the whole file (what `git hash-object` prints for it). */
  blob: string;
  /** The chunk list tree (list-tree.ts). */
  list: string;
  /** How many chunks the list holds. */
  chunks: number;
  params: ChunkParams;
}

/** The pointer of a chunked file whose chunk list tree is `list`. */
export function pointerOf(
  file: { size: number; blob: string; params: ChunkParams; chunks: readonly unknown[] },
  list: string,
): ChunkPointer {
  return { size: file.size, blob: file.blob, list, chunks: file.chunks.length, params: file.params };
}

export function serializePointer(p: ChunkPointer): Buffer {
  return Buffer.from(
    `${POINTER_HEADER}\nsize ${p.size}\nblob ${p.blob}\nlist ${p.list}\nchunks ${p.chunks}\n` +
      `chunker ${CHUNKER_NAME} ${p.params.min} ${p.params.avg} ${p.params.max}\n`,
    'utf8',
  );
}

const NUM = '(0|[1-9][0-9]{0,15})';
const POINTER_RE = new RegExp(
  `^xet\\.chunked/v1\\nsize ${NUM}\\nblob ([0-9a-f]{40}|[0-9a-f]{64})\\nlist ([0-9a-f]{40}|[0-9a-f]{64})\\n` +
    `chunks ${NUM}\\nchunker gear/v1 ${NUM} ${NUM} ${NUM}\\n$`,
);

/** Parse a pointer's bytes; `where` names it in errors (a path). SNAPSHOT_INVALID when it is not one. */
export function parsePointer(data: Buffer, format: 'sha1' | 'sha256', where: string): ChunkPointer {
  const bad = (why: string): XetError =>
    new XetError('SNAPSHOT_INVALID', `${where} is listed as chunked but its pointer ${why}`, { path: where });
  if (data.length > MAX_POINTER_BYTES) throw bad(`is ${data.length} bytes, more than a pointer's ${MAX_POINTER_BYTES}`);
  const text = data.toString('utf8');
  if (text.startsWith(`${POINTER_HEADER.split('/')[0]}/`) && !text.startsWith(`${POINTER_HEADER}\n`)) {
    const version = text.slice(0, text.indexOf('\n'));
    throw new XetError(
      'SCHEMA_UNSUPPORTED',
      `${where} is chunked as ${version}; this git xet reads ${POINTER_HEADER}`,
      {
        path: where,
        schema: version,
        supported: [POINTER_HEADER],
      },
    );
  }
  const m = POINTER_RE.exec(text);
  if (!m) throw bad('is not a xet.chunked/v1 pointer');
  const [, size, blob, list, chunks, min, avg, max] = m;
  const hexLen = format === 'sha1' ? 40 : 64;
  if (blob.length !== hexLen || list.length !== hexLen) throw bad(`names ids that are not ${format} ids`);
  const p: ChunkPointer = {
    size: Number(size),
    blob,
    list,
    chunks: Number(chunks),
    params: { min: Number(min), avg: Number(avg), max: Number(max) },
  };
  if (!Number.isSafeInteger(p.size)) throw bad('gives a size past 2^53');
  if (!knownParams(p.params)) throw bad(`names chunk sizes ${min}/${avg}/${max} that gear/v1 never uses`);
  // Every chunk is 1..max bytes, and only an empty file has none.
  if (p.size === 0 ? p.chunks !== 0 : p.chunks < Math.ceil(p.size / p.params.max) || p.chunks > p.size) {
    throw bad(`counts ${p.chunks} chunks for ${p.size} bytes`);
  }
  return p;
}
