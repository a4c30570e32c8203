// Capture's stat cache: the git index (v2-v4) a previous capture wrote for this worktree (or that
// restore laid with the files), and the record capture keeps beside it (`<index>.xet.json`, sealed
// with the index's checksum: a record that is not the index's own is ignored, so a crash between
// the two renames costs reads, never a wrong answer; docs/FORMAT.md "Stat cache"). The record is not
// an index extension: git prints "ignoring … extension" for every one it does not know. An entry's object id is reused without reading its file
// only when the file's stat data is the entry's, nanoseconds included, and the entry is not racy:
// its file was not modified in the second before the run that recorded it began (a write in the
// same clock tick as that read would leave the stat data as it was). A damaged or foreign file is
// no cache at all: the capture then reads every file, as the first one does.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { parseIndex, type ParsedIndex } from '../git/index-file';
import { readExtensions, writeIndexFile } from '../git/index-writer';
import { native } from '../native';
import type { ChunkRecord } from './chunked-scan';
import { fileStamp } from './fsutil';

export const STAT_CACHE_RECORD_SUFFIX = '.xet.json';
export const STAT_CACHE_SCHEMA = 'xet.statcache/2';

/** What capture records beside the entries. */
export interface StatCacheRecord {
  schema: typeof STAT_CACHE_SCHEMA;
  /** The checksum (hex) of the index this record belongs to. */
  index: string;
  /** Entries whose file was modified at or after this second (a run's start, less one) are read
   * again: their stat data cannot vouch for their content. */
  since: number;
  /** The files tree these entries make (every one of its objects was stored with it). */
  root: string;
  /** The filemeta stored with that tree: its blob, or its tree of parts. */
  meta?: string;
  /** Chunked paths: their pointers and chunks (chunked-scan.ts), at the threshold they were cut at. */
  chunks?: ChunkRecord;
}

export interface StatCache {
  /** The index file, whole. */
  buf: Buffer;
  hashLen: number;
  /** Where each entry's stat data starts in `buf` (every stage, in the index's order). */
  offsets: Int32Array;
  /** For each of `paths` (sorted by bytes; `names()` is joinNames of them), where its stage-0
   * entry's stat data starts in `buf`, or -1. */
  lookup(paths: readonly string[], names: () => Buffer): Int32Array;
  /** The entries as objects with their paths (parsed on first use: only a cache no tree vouches
   * for needs them). */
  parsed(): ParsedIndex;
  /** Entries modified at or after this second (full seconds since the epoch) are racy. */
  racyFrom: number;
  record: StatCacheRecord | null;
  /** Tree ids of the cache-tree extension (the trees of `record.root`), when it is whole. */
  trees: Set<string>;
}

/** A resident process (the daemon) keeps the last stat cache it loaded, parsed, keyed by the
 * identity of its two files (device, inode, size, times to the nanosecond): a capture replaces them
 * by rename, and anything else that writes them changes their ctime. The caches its own captures
 * write are loaded between requests (prewarmStatCaches), so the next capture finds them parsed. */
let memo: { file: string; format: string; key: string; cache: StatCache | null } | null = null;
let keepInMemory = false;
const written = new Map<string, 'sha1' | 'sha256'>();

export function keepStatCachesInMemory(): void {
  keepInMemory = true;
}

function identity(file: string): string | null {
  try {
    const ids = [file, `${file}${STAT_CACHE_RECORD_SUFFIX}`].map((f) => {
      const st = fs.statSync(f, { bigint: true, throwIfNoEntry: false });
      return st ? fileStamp(st) : '-';
    });
    return ids.join('|');
  } catch {
    return null;
  }
}

/** Loads the stat caches written since the last call into memory (a resident process, idle). */
export function prewarmStatCaches(): void {
  for (const [file, format] of written) loadStatCache(file, format);
  written.clear();
}

/** The stat cache at `file`, or null when there is none or it cannot be trusted. */
export function loadStatCache(file: string, format: 'sha1' | 'sha256'): StatCache | null {
  if (!keepInMemory) return readStatCache(file, format);
  const key = identity(file);
  if (key !== null && memo?.file === file && memo.format === format && memo.key === key) return memo.cache;
  const cache = readStatCache(file, format);
  // Kept only when the files did not change while they were read.
  memo = key !== null && identity(file) === key ? { file, format, key, cache } : null;
  return cache;
}

function readStatCache(file: string, format: 'sha1' | 'sha256'): StatCache | null {
  let buf: Buffer;
  let mtimeSec: number;
  const hashLen = format === 'sha256' ? 32 : 20;
  try {
    buf = fs.readFileSync(file);
    mtimeSec = Math.floor(fs.statSync(file).mtimeMs / 1000);
  } catch {
    return null;
  }
  if (buf.length < 12 + hashLen) return null;
  const trailer = buf.subarray(buf.length - hashLen);
  // A checksum of zeros is git's index.skipHash; anything else must match, or the file is damaged.
  if (trailer.some((b) => b !== 0)) {
    const sum = crypto
      .createHash(format)
      .update(buf.subarray(0, buf.length - hashLen))
      .digest();
    if (!sum.equals(trailer)) return null;
  }
  const columns = indexColumns(buf, format);
  if (!columns) return null;
  const { offsets, entriesEnd, lookup, parsed } = columns;
  const ext = readExtensions(buf, hashLen, entriesEnd);
  let record: StatCacheRecord | null = null;
  try {
    const r = JSON.parse(fs.readFileSync(`${file}${STAT_CACHE_RECORD_SUFFIX}`, 'utf8')) as StatCacheRecord;
    if (
      r.schema === STAT_CACHE_SCHEMA &&
      r.index === trailer.toString('hex') &&
      Number.isSafeInteger(r.since) &&
      typeof r.root === 'string'
    ) {
      record = r;
    }
  } catch {
    record = null;
  }
  const trees = record ? cacheTreeIds(ext.get('TREE'), hashLen) : new Set<string>();
  // Without our record, git's own rule: an entry not older than the index file is racy.
  return { buf, hashLen, offsets, lookup, parsed, racyFrom: record ? record.since : mtimeSec, record, trees };
}

/** Smallest entry: stat data (40), an id, flags (2), a name of one byte and its NUL. */
const MIN_ENTRY = 40 + 20 + 2 + 2;

/** An index's entry offsets and a lookup of paths in it: the native module's merge of the two sorted
 * lists where it loaded (unless `how` is 'js': the tests hold the two to one answer), else the
 * entries parsed as objects and a Map by path. Null when the index is damaged (either way). */
export function indexColumns(
  buf: Buffer,
  format: 'sha1' | 'sha256',
  how: 'auto' | 'js' = 'auto',
): (Pick<StatCache, 'offsets' | 'lookup' | 'parsed'> & { entriesEnd: number }) | null {
  const hashLen = format === 'sha256' ? 32 : 20;
  let parsedIndex: ParsedIndex | undefined;
  const parsed = (): ParsedIndex => (parsedIndex ??= parseIndex(buf, format));
  if (native && how === 'auto') {
    const n = native;
    if (buf.toString('latin1', 0, 4) !== 'DIRC') return null;
    const count = buf.readUInt32BE(8);
    if (count > buf.length / MIN_ENTRY) return null;
    const offsets = new Int32Array(count);
    const none = new Int32Array(0);
    const view = (a: Int32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const entriesEnd = n.indexMatch(buf, hashLen, Buffer.alloc(0), view(none), view(offsets));
    if (entriesEnd < 0) return null;
    const lookup = (paths: readonly string[], names: () => Buffer): Int32Array => {
      const match = new Int32Array(paths.length);
      if (!paths.length) return match;
      const scratch = new Int32Array(count);
      // The same index parsed again (a few ms): the offsets above stay the cache's, untouched.
      if (n.indexMatch(buf, hashLen, names(), view(match), view(scratch)) !== entriesEnd)
        throw new Error('indexMatch: the stat cache changed in memory');
      return match;
    };
    return { offsets, entriesEnd, lookup, parsed };
  }
  let p: ParsedIndex;
  try {
    p = parsed();
  } catch {
    return null;
  }
  const offsets = Int32Array.from(p.entries, (e) => e.offset);
  let byPath: Map<string, number> | undefined;
  const lookup = (paths: readonly string[]): Int32Array => {
    if (!byPath) {
      byPath = new Map();
      for (const e of p.entries) if (e.stage === 0) byPath.set(e.path, e.offset);
    }
    const match = new Int32Array(paths.length);
    for (let i = 0; i < paths.length; i++) match[i] = byPath.get(paths[i]) ?? -1;
    return match;
  };
  return { offsets, entriesEnd: p.entriesEnd, lookup, parsed };
}

/** Every valid tree id in a cache-tree extension (an invalid node, entry count -1, has none). */
function cacheTreeIds(data: Buffer | undefined, hashLen: number): Set<string> {
  const out = new Set<string>();
  if (!data) return out;
  let at = 0;
  while (at < data.length) {
    const nul = data.indexOf(0, at);
    const nl = nul < 0 ? -1 : data.indexOf(0x0a, nul);
    if (nl < 0) return new Set();
    const [count] = data.toString('latin1', nul + 1, nl).split(' ');
    at = nl + 1;
    if (Number(count) >= 0) {
      if (at + hashLen > data.length) return new Set();
      out.add(data.toString('hex', at, at + hashLen));
      at += hashLen;
    }
  }
  return out;
}

/** Publish a stat cache: its record (sealed with the index's checksum), then the index. */
export function writeStatCache(
  file: string,
  index: Buffer,
  record: Omit<StatCacheRecord, 'index'>,
  hashLen: number,
): void {
  const sealed: StatCacheRecord = { ...record, index: index.toString('hex', index.length - hashLen) };
  writeIndexFile(`${file}${STAT_CACHE_RECORD_SUFFIX}`, recordBytes(sealed));
  writeIndexFile(file, index);
  if (keepInMemory) written.set(file, hashLen === 32 ? 'sha256' : 'sha1');
}

/** The JSON of the last record's chunked files, each kept while its entry stays the same. */
let chunkEntryJson = new Map<string, { entry: object; bytes: Buffer }>();
const FILES_MARK = '\u0000xet: the chunked files\u0000';

/**
 * A record's bytes: JSON.stringify's, in pieces. A chunked file's entry holds its chunk ids (~75 KB
 * of hex for a 20 MB file, twice: the pointer names its list), and the record is written on every
 * capture: encoding it whole took 5–10 ms of a ~170 ms daemon re-capture of the bench tree (three
 * such files), so an entry equal to the last record's (every own field, by value) is not encoded
 * again. The pieces are the same bytes JSON.stringify gives (test/stat-cache-record.test.ts).
 */
export function recordBytes(sealed: StatCacheRecord): Buffer[] {
  const files = sealed.chunks?.files;
  if (!files) return [Buffer.from(JSON.stringify(sealed), 'utf8')];
  const text = JSON.stringify({ ...sealed, chunks: { ...sealed.chunks, files: FILES_MARK } });
  const mark = JSON.stringify(FILES_MARK);
  const at = text.indexOf(mark);
  const pieces: Buffer[] = [Buffer.from(`${text.slice(0, at)}{`, 'utf8')];
  const next = new Map<string, { entry: object; bytes: Buffer }>();
  // Own keys in JSON.stringify's order (Object.entries and JSON.stringify both follow it).
  for (const [p, entry] of Object.entries(files as Record<string, object>)) {
    const kept = chunkEntryJson.get(p);
    const bytes = kept && sameFields(kept.entry, entry) ? kept.bytes : Buffer.from(JSON.stringify(entry), 'utf8');
    next.set(p, { entry, bytes });
    pieces.push(Buffer.from(`${next.size > 1 ? ',' : ''}${JSON.stringify(p)}:`, 'utf8'), bytes);
  }
  pieces.push(Buffer.from(`}${text.slice(at + mark.length)}`, 'utf8'));
  chunkEntryJson = next;
  return pieces;
}

/** Whether two entries have the same own fields with the same primitive values, in the same order
 * (anything else is encoded again). */
function sameFields(a: object, b: object): boolean {
  if (a === b) return true;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] !== kb[i]) return false;
    const va = (a as Record<string, unknown>)[ka[i]];
    if (va !== (b as Record<string, unknown>)[kb[i]] || (typeof va === 'object' && va !== null)) return false;
  }
  return true;
}
