// The stat cache record of a restored copy: restore lays the files index with each file's stat data
// (lay.ts), and this seals it with the record capture writes (stat-cache.ts), so the copy's first
// capture reads no file it laid. Without the record a capture reads again every file of 64 KiB or
// more (it could not tell a chunked file's pointer entry from a blob) and chunks every chunked
// file again.
//
// The record vouches for objects: `root` says every object of the entries is in this repository,
// and a chunked path's entry says its pointer and chunk list are. So it is written only for a
// complete restore (not a lazy one, whose chunks stay on the server), and a chunked path whose file
// is not as laid (its stat data differs from the files index's entry) gets no entry to reuse: it is
// chunked again, as after any edit.

import * as fs from 'node:fs';
import { LocalPacks } from '../chunks/local-packs';
import { ChunkList } from '../chunks/reader';
import { parseChunkThreshold } from '../chunks/params';
import { serializePointer } from '../chunks/pointer';
import { readConfig } from '../git/config';
import type { GitOptions } from '../git/exec';
import { findEntry, parseIndexWritten } from '../git/index-file';
import { STAT } from '../git/index-writer';
import type { ChunkRecord } from './chunked-scan';
import { blobOid } from './filemeta';
import { chunkedOf } from './lay';
import { laidChunkIds } from './lay-chunked';
import { STAT_CACHE_RECORD_SUFFIX, STAT_CACHE_SCHEMA, type StatCacheRecord } from './stat-cache';
import type { Snapshot } from './store';

/** Write the record beside the files index at `indexFile` of the restored worktree `worktree`.
 * `startedAt` (ms) is when the restore began: files modified since then are read again. */
export async function sealRestoredCache(
  indexFile: string,
  worktree: string,
  snap: Snapshot,
  startedAt: number,
  opts: GitOptions,
): Promise<void> {
  const format = snap.manifest.git.objectFormat;
  const hashLen = format === 'sha256' ? 32 : 20;
  // The files index the lay has just written: its parse, unless the file changed since.
  const parsed = parseIndexWritten(indexFile, format);
  const { buf } = parsed;
  const threshold = parseChunkThreshold((await readConfig(opts)).get('xet.chunk.threshold'));
  const chunks: ChunkRecord = {
    schema: 'xet.statcache-chunks/1',
    startedAt,
    ...(threshold !== null ? { threshold } : {}),
    files: {},
  };
  const chunked = await chunkedOf(snap, opts);
  // The lists of the laid files, read from the restored repository's packs (no git per file).
  const packs = [...chunked.values()].some((c) => laidChunkIds(c) === undefined)
    ? await LocalPacks.open(opts, format)
    : null;
  try {
    for (const [p, c] of chunked) {
      const data = serializePointer(c.pointer);
      const k = findEntry(parsed, p);
      const entry = k >= 0 ? parsed.entries[k] : null;
      const st = fs.lstatSync(`${worktree}/${p}`, { bigint: true, throwIfNoEntry: false });
      const laid =
        entry !== null &&
        st !== undefined &&
        st.isFile() &&
        blobOid(data, format) === c.pointerOid &&
        entry.oid === c.pointerOid &&
        sameStat(buf, entry.offset, st);
      // The ids the lay wrote it from, when this thread wrote it; else its list is read again.
      const known = laid ? laidChunkIds(c) : undefined;
      const list =
        laid && known === undefined
          ? await ChunkList.fromPointer(c.pointer, p, { git: opts, format, ...(packs ? { packs } : {}) })
          : null;
      const oids = known ?? (list ? (await list.chunksFor(0, c.pointer.size)).map((r) => r.oid).join('') : '');
      // A path not as laid is listed all the same (its entry is a pointer, never to be taken for a
      // blob), with stat data no file has.
      chunks.files[p] = {
        size: laid && st ? Number(st.size) : -1,
        mtimeNs: laid && st ? String(st.mtimeNs) : '-1',
        ctimeNs: laid && st ? String(st.ctimeNs) : '-1',
        ino: laid && st ? String(st.ino) : '-1',
        dev: laid && st ? String(st.dev) : '-1',
        mode: c.mode,
        pointer: data.toString('utf8'),
        oids,
      };
    }
  } finally {
    packs?.close();
  }
  const record: StatCacheRecord = {
    schema: STAT_CACHE_SCHEMA,
    index: buf.toString('hex', buf.length - hashLen),
    since: Math.floor(startedAt / 1000) - 1,
    root: snap.filesTree,
    chunks,
  };
  const tmp = `${indexFile}${STAT_CACHE_RECORD_SUFFIX}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(record));
  fs.renameSync(tmp, `${indexFile}${STAT_CACHE_RECORD_SUFFIX}`);
}

/** Whether a files index entry's stat data is this file's (times to the nanosecond, size, inode). */
function sameStat(buf: Buffer, at: number, st: fs.BigIntStats): boolean {
  const NS = 1_000_000_000n;
  const u32 = (v: bigint) => Number(v & 0xffffffffn);
  return (
    buf.readUInt32BE(at + STAT.mtime) === u32(st.mtimeNs / NS) &&
    buf.readUInt32BE(at + STAT.mtimeNs) === Number(st.mtimeNs % NS) &&
    buf.readUInt32BE(at + STAT.ctime) === u32(st.ctimeNs / NS) &&
    buf.readUInt32BE(at + STAT.ctimeNs) === Number(st.ctimeNs % NS) &&
    buf.readUInt32BE(at + STAT.ino) === u32(st.ino) &&
    buf.readUInt32BE(at + STAT.size) === u32(st.size)
  );
}
