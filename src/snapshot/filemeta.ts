// File metadata a tree cannot hold: every captured file's and symlink's modification time (to the
// nanosecond) and which paths are hard links of one inode. This module owns the `filemeta` entry of
// a snapshot (format in docs/FORMAT.md: one blob, or for a large tree a tree of parts cut where the
// paths say, so a re-capture stores only the parts whose files changed), collecting it during
// capture's scan (hashing each inode once), and laying it back on restore (links, times, then the
// index's stat data from lstat, so git trusts every entry without reading a file).
//
// Capture reads stat data from the cache index that `update-index` just wrote instead of lstat-ing
// every file again: git keeps that data current, except that the git distributions ship compares
// only whole seconds, so an entry can keep stale nanoseconds (and hide a change) when its inode
// changed within the same second git looked at it. Those entries are recognisable: their ctime is
// not older than the start of the run that recorded them. Only they, new paths, and every path of
// a tree known to hold hard links are lstat-ed; an entry whose lstat differs in the nanoseconds is
// hashed again. The start of each run and the link counts (nlink > 1 only) live beside the cache
// index in `<index>.meta.json`, tied to it by its checksum.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { setTimes, type TimeEntry } from './set-times';
import { git, gitZ, joinZ, type GitOptions } from '../git/exec';
import { lsTree } from '../git/plumbing';
import { ObjectReader } from '../git/object-reader';
import { LocalFirstObjectReader } from '../remote/local-object-reader';

/** What reads a filemeta's objects: git's cat-file (ObjectReader), or the packs first (which
 * learns sizes by reading, within a budget: infoWithin). */
type MetaObjects = Pick<ObjectReader, 'info' | 'contents'> & {
  infoWithin?: LocalFirstObjectReader['infoWithin'];
};
import { parseTreeObject } from '../git/tree-object';
import {
  findEntry,
  parseIndex,
  type RawIndexEntry,
  statFields,
  statMatchesCoarse,
  writeIndexBuffer,
  writeStat,
  type ParsedIndex,
  type StatFields,
} from '../git/index-file';

export const FILEMETA_HEADER = 'xet.filemeta/v1';
export const FILEMETA_ENTRY = 'filemeta';

export interface FileMetaEntry {
  readonly path: string;
  mtimeSec: number;
  mtimeNsec: number;
  /** Index (in this list) of the first path of its hard-link group, or -1. */
  linkTo: number;
  /** For a link: its first path is the `linkRank`-th nearest earlier entry of the same blob and
   * mode that is not itself a link (1: the nearest). What filemeta's parts write (setLinkRanks):
   * unlike a position, it changes only when such an entry is added or removed in between. */
  linkRank?: number;
  /** The inode's link count when it exceeds the paths captured for it (links outside the tree). */
  externalNlink: number;
}

/** Set every link's `linkRank` from its entries' blob keys (mode and object id, as the files tree
 * holds them: `keyOf(k)` for entry k). */
export function setLinkRanks(entries: FileMetaEntry[], keyOf: (k: number) => string): void {
  const linkTo = Int32Array.from(entries, (e) => e.linkTo);
  const ranks = linkRanks(linkTo, keyOf);
  for (let k = 0; k < entries.length; k++) if (linkTo[k] >= 0) entries[k].linkRank = ranks[k];
}

/** Each link's rank (see FileMetaEntry.linkRank; 0 for an entry that is not a link), from the
 * entries' links (`linkTo`, -1: none) and blob keys. Only entries whose key is a link's are kept
 * track of: `keyOf` is asked of every entry, but a caller may answer cheaply with `mayLink`. */
export function linkRanks(
  linkTo: Int32Array,
  keyOf: (k: number) => string,
  /** False for an entry whose blob no link shares (its key then does not matter). */
  mayLink: (k: number) => boolean = () => true,
): Int32Array {
  const ranks = new Int32Array(linkTo.length);
  const firsts = new Map<string, number[]>();
  for (let k = 0; k < linkTo.length; k++) {
    if (linkTo[k] < 0 && !mayLink(k)) continue;
    const key = keyOf(k);
    const list = firsts.get(key);
    if (linkTo[k] < 0) {
      if (list) list.push(k);
      else firsts.set(key, [k]);
      continue;
    }
    // The list ascends: find the link's first path in it.
    const to = linkTo[k];
    let lo = 0;
    let hi = (list?.length ?? 0) - 1;
    while (list && lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid] < to) lo = mid + 1;
      else hi = mid - 1;
    }
    if (!list || list[lo] !== to) throw new Error(`entry ${k} links to ${to}, not an earlier entry of its blob`);
    ranks[k] = list.length - lo;
  }
  return ranks;
}

/** What a capture reports of its files' links. */
export interface FileMetaCounts {
  /** Paths that are hard links of an earlier path (restored as links, stored and counted once). */
  hardLinks: number;
  /** Inodes with links outside the captured paths (restored as separate files). */
  externalLinks: number;
  /** Apparent bytes of the paths in `hardLinks` (what counting each inode once saves). */
  linkedBytes: number;
}

export interface FileMeta extends FileMetaCounts {
  /** One per file or symlink of the files tree, in its order (paths sorted by bytes). */
  entries: FileMetaEntry[];
}

/**
 * The same lines as columns, as capture holds them (an object per file was most of a re-capture's
 * filemeta time, and the garbage collector's). Entry k is the k-th file or symlink in tree order.
 */
export interface FileMetaColumns {
  readonly count: number;
  readonly mtimeSec: ArrayLike<number>;
  readonly mtimeNsec: ArrayLike<number>;
  /** pathCuts of the entries' paths: where a tree of parts cuts (only read above
   * FILEMETA_PARTED_MIN_ENTRIES entries). */
  readonly cuts: Uint8Array;
  /** -1, or the entry's first path (see FileMetaEntry); null: no entry is a link. */
  readonly linkTo: Int32Array | null;
  /** Each link's rank (linkRanks), where the filemeta is stored in parts and has links. */
  readonly linkRank: Int32Array | null;
  /** 0, or the inode's link count (see FileMetaEntry); null: all 0. */
  readonly externalNlink: ArrayLike<number> | null;
}

/** An entry's path ends a part (bit 1) and its group of parts (bit 2 too): see PART_CUT_MASK. */
export const CUT_PART = 1;
export const CUT_GROUP = 2;

/** Where parts may end, one byte per path (it depends on the path alone: a resident process keeps
 * it for the next capture's same paths). */
export function pathCuts(paths: readonly string[], rows?: ArrayLike<number>): Uint8Array {
  const n = rows ? rows.length : paths.length;
  const cuts = new Uint8Array(n);
  for (let k = 0; k < n; k++) {
    const h = pathHash(paths[rows ? rows[k] : k]);
    if ((h & PART_CUT_MASK) === 0) cuts[k] = (h & GROUP_CUT_MASK) === 0 ? CUT_PART | CUT_GROUP : CUT_PART;
  }
  return cuts;
}

/** The columns of a list of entries. */
export function fileMetaColumns(entries: readonly FileMetaEntry[]): FileMetaColumns {
  const linked = entries.some((e) => e.linkTo >= 0);
  return {
    count: entries.length,
    mtimeSec: entries.map((e) => e.mtimeSec),
    mtimeNsec: entries.map((e) => e.mtimeNsec),
    cuts: pathCuts(entries.map((e) => e.path)),
    linkTo: linked ? Int32Array.from(entries, (e) => e.linkTo) : null,
    linkRank: linked ? Int32Array.from(entries, (e) => e.linkRank ?? 0) : null,
    externalNlink: entries.some((e) => e.externalNlink > 0) ? entries.map((e) => e.externalNlink) : null,
  };
}

/** A FileMetaEntry whose path is decoded only when asked for (verify does, capture does not). */
class MetaEntry implements FileMetaEntry {
  linkTo = -1;
  externalNlink = 0;
  constructor(
    private readonly raw: RawIndexEntry,
    readonly mtimeSec: number,
    readonly mtimeNsec: number,
  ) {}

  get path(): string {
    return this.raw.path;
  }
}

interface Record {
  schema: 'xet.statcache-meta/1';
  /** Trailing checksum (hex) of the cache index this describes. */
  index: string;
  /** No entry of that index was recorded before this second (a run's start, less a second). */
  since: number;
  /** Link counts above 1, by path. */
  links: { [path: string]: number };
}

const BLOB_MODE = new Set([0o100644, 0o100755, 0o120000]);
const ODD_SECONDS = 2 ** 31; // a u32 seconds field past 2038 may be a wrapped negative time

type Stat = StatFields;

function lstatBig(abs: string): Stat | null {
  try {
    const st = fs.lstatSync(abs, { bigint: true });
    if (!st.isFile() && !st.isSymbolicLink()) return null;
    return statFields(st);
  } catch {
    return null; // vanished: git reports it through update-index
  }
}

export function trailerHex(indexFile: string, hashLen: number): string | null {
  try {
    const fd = fs.openSync(indexFile, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const b = Buffer.alloc(hashLen);
      fs.readSync(fd, b, 0, hashLen, size - hashLen);
      return b.toString('hex');
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return null;
  }
}

/** Collects file metadata around one `update-index` run of a scan. */
export class MetaCollector {
  private readonly hashLen: number;
  private record: Record | null = null;
  private readonly stats = new Map<string, Stat>();
  /** follower path -> the path git hashes for its inode */
  private readonly followers = new Map<string, string>();
  private runStart = 0;
  /** Paths whose entries we made ourselves with stat data checked around their read (chunked
   * files): their stat is trusted even when git smudged a racy entry's size, never hashed again. */
  private readonly trusted = new Set<string>();

  constructor(
    private readonly worktree: string,
    private readonly indexFile: string,
    private readonly format: 'sha1' | 'sha256',
  ) {
    this.hashLen = format === 'sha256' ? 32 : 20;
  }

  private get recordFile(): string {
    return `${this.indexFile}.meta.json`;
  }

  private readRecord(): Record | null {
    try {
      const r = JSON.parse(fs.readFileSync(this.recordFile, 'utf8')) as Record;
      if (r.schema !== 'xet.statcache-meta/1' || !Number.isSafeInteger(r.since) || typeof r.links !== 'object') {
        return null;
      }
      return r.index === trailerHex(this.indexFile, this.hashLen) ? r : null;
    } catch {
      return null;
    }
  }

  /** Before update-index: lstat what must be, group hard links; returns the paths git should hash
   * (one per inode). */
  prepare(paths: string[], previous: string[]): string[] {
    this.runStart = Date.now();
    this.record = this.readRecord();
    const full = !this.record || Object.keys(this.record.links).length > 0;
    const known = full ? null : new Set(previous);
    const byInode = new Map<string, string[]>();
    for (const p of paths) {
      if (known?.has(p)) continue;
      const s = lstatBig(path.join(this.worktree, p));
      if (!s) continue;
      this.stats.set(p, s);
      if (s.nlink > 1) {
        const key = `${s.dev}:${s.ino}`;
        const g = byInode.get(key);
        if (g) g.push(p);
        else byInode.set(key, [p]);
      }
    }
    for (const g of byInode.values()) {
      if (g.length < 2) continue;
      g.sort();
      for (const f of g.slice(1)) this.followers.set(f, g[0]);
    }
    return this.followers.size ? paths.filter((p) => !this.followers.has(p)) : paths;
  }

  /** Entries entered with stat data the caller checked (chunked-scan.ts), with that stat. */
  trust(stats: ReadonlyMap<string, Stat>): void {
    for (const [p, st] of stats) {
      this.stats.set(p, st);
      this.trusted.add(p);
    }
  }

  /** Hard links that git does not hash (follower path -> the first path of its inode). */
  linkedPaths(): ReadonlyMap<string, string> {
    return this.followers;
  }

  /** After update-index (before write-tree): followers enter the index with their inode's blob and
   * stat data, suspicious entries are hashed again, and the metadata is read off the index. */
  async finish(opts: GitOptions): Promise<FileMeta> {
    // Nothing to capture: git wrote no index at all.
    if (!fs.existsSync(this.indexFile)) return { entries: [], hardLinks: 0, externalLinks: 0, linkedBytes: 0 };
    if (this.followers.size) await this.addFollowers(opts);
    let parsed = parseIndex(this.indexFile, this.format);
    const suspects = this.suspects(parsed);
    if (suspects.length) {
      // Same seconds, other nanoseconds: git trusted an entry it should not have. Hash those again.
      await git(['update-index', '--force-remove', '-z', '--stdin'], { ...opts, input: joinZ(suspects) });
      await git(['update-index', '--add', '--info-only', '-z', '--stdin'], { ...opts, input: joinZ(suspects) });
      for (const p of suspects) {
        const s = lstatBig(path.join(this.worktree, p));
        if (s) this.stats.set(p, s);
      }
      parsed = parseIndex(this.indexFile, this.format);
    }
    return this.collect(parsed);
  }

  private async addFollowers(opts: GitOptions): Promise<void> {
    const parsed = parseIndex(this.indexFile, this.format);
    const byPath = new Map(parsed.entries.map((e) => [e.path, e]));
    const lines: string[] = [];
    const orphans: string[] = [];
    for (const [f, rep] of this.followers) {
      const e = byPath.get(rep);
      if (!e) {
        // The representative vanished meanwhile: the follower is hashed as a file of its own.
        this.followers.delete(f);
        orphans.push(f);
        continue;
      }
      lines.push(`${e.mode.toString(8)} ${e.oid}\t${f}`);
    }
    if (lines.length) await git(['update-index', '-z', '--index-info'], { ...opts, input: joinZ(lines) });
    if (orphans.length) {
      await git(['update-index', '--add', '--remove', '--replace', '--info-only', '-z', '--stdin'], {
        ...opts,
        input: joinZ(orphans),
      });
    }
  }

  /** The lstat-ed paths (and followers) by position in the index: looked up by binary search, so
   * the index's other paths are never decoded. */
  private locate(parsed: ParsedIndex): {
    at: Map<number, Stat>;
    repOf: Map<number, number>;
    trustedAt: Set<number>;
  } {
    const trustedAt = new Set<number>();
    for (const p of this.trusted) {
      const i = findEntry(parsed, p);
      if (i >= 0) trustedAt.add(i);
    }
    const at = new Map<number, Stat>();
    for (const [p, s] of this.stats) {
      const i = findEntry(parsed, p);
      if (i >= 0) at.set(i, s);
    }
    const repOf = new Map<number, number>();
    for (const [f, rep] of this.followers) {
      const i = findEntry(parsed, f);
      const r = findEntry(parsed, rep);
      if (i >= 0 && r >= 0) repOf.set(i, r);
    }
    return { at, repOf, trustedAt };
  }

  /** Entries whose stat may be stale (see the top of this module), lstat-ed now. */
  private suspects(parsed: ParsedIndex): string[] {
    const { buf } = parsed;
    const since = this.record?.since;
    const { at, repOf, trustedAt } = this.locate(parsed);
    const out: string[] = [];
    const entries = parsed.entries;
    for (let i = 0; i < entries.length; i++) {
      if (repOf.has(i) || trustedAt.has(i)) continue;
      const e = entries[i];
      let s = at.get(i);
      if (!s) {
        const ctime = buf.readUInt32BE(e.offset);
        const mtime = buf.readUInt32BE(e.offset + 8);
        if (since !== undefined && ctime < since && mtime < ODD_SECONDS && ctime < ODD_SECONDS) continue;
        const fresh = lstatBig(path.join(this.worktree, e.path));
        if (!fresh) continue;
        s = fresh;
        this.stats.set(e.path, s);
      }
      if (!statMatchesCoarse(buf, e.offset, s)) continue; // changed after git read it: git's data stands
      if (buf.readUInt32BE(e.offset + 4) !== s.ctimeNsec || buf.readUInt32BE(e.offset + 12) !== s.mtimeNsec) {
        out.push(e.path);
      }
    }
    return out;
  }

  private collect(parsed: ParsedIndex): FileMeta {
    const { buf } = parsed;
    const { at, repOf, trustedAt } = this.locate(parsed);
    const entries: MetaEntry[] = [];
    const nlinks: number[] = [];
    const groups = new Map<string, { n: number; mode: number; oid: string; size: number }>();
    let dirty = false;
    let hardLinks = 0;
    let linkedBytes = 0;
    const all = parsed.entries;
    for (let i = 0; i < all.length; i++) {
      const e = all[i];
      if (e.stage !== 0 || !BLOB_MODE.has(e.mode)) continue;
      const rep = repOf.get(i);
      let s = at.get(i);
      if (rep !== undefined && s) {
        // A follower's entry came from --index-info without stat data; its inode's is the
        // representative's, provided git recorded the representative as it is now.
        if (trustedAt.has(rep) || statMatchesCoarse(buf, all[rep].offset, s)) {
          writeStat(buf, e.offset, s);
          dirty = true;
        } else s = undefined;
      }
      const exact = s && (trustedAt.has(i) || statMatchesCoarse(buf, e.offset, s)) ? s : null;
      const entry = new MetaEntry(
        e,
        exact ? exact.mtimeSec : buf.readUInt32BE(e.offset + 8),
        exact ? exact.mtimeNsec : buf.readUInt32BE(e.offset + 12),
      );
      // Not lstat-ed means trusted from the cache: its link count is 1 (a tree with links is
      // lstat-ed whole).
      const nlink = exact ? exact.nlink : 1;
      if (exact && nlink > 1) {
        const key = `${exact.dev}:${exact.ino}`;
        const g = groups.get(key);
        // One inode is one blob; a member that hashed otherwise changed during the capture.
        if (g && g.mode === e.mode && g.oid === e.oid) {
          entry.linkTo = g.n;
          g.size++;
          hardLinks++;
          linkedBytes += exact.size;
        } else if (!g) {
          groups.set(key, { n: entries.length, mode: e.mode, oid: e.oid, size: 1 });
        }
      }
      entries.push(entry);
      nlinks.push(nlink);
    }
    const groupSize = new Map<number, number>();
    for (const g of groups.values()) groupSize.set(g.n, g.size);
    let externalLinks = 0;
    for (let i = 0; i < entries.length; i++) {
      if (nlinks[i] > 1 && entries[i].linkTo < 0 && nlinks[i] > (groupSize.get(i) ?? 1)) {
        entries[i].externalNlink = nlinks[i];
        externalLinks++;
      }
    }
    if (dirty) writeIndexBuffer(this.indexFile, parsed);
    return { entries, hardLinks, externalLinks, linkedBytes };
  }

  /** Once git has written the index for the last time in this run (write-tree stores its
   * cache-tree there): remember the run's start and link counts, tied to that exact index. */
  saveRecord(): void {
    const links: Record['links'] = {};
    for (const [p, s] of this.stats) if (s.nlink > 1) links[p] = s.nlink;
    for (const [p, n] of Object.entries(this.record?.links ?? {})) if (!this.stats.has(p)) links[p] = n;
    const index = trailerHex(this.indexFile, this.hashLen);
    if (!index) return;
    const rec: Record = {
      schema: 'xet.statcache-meta/1',
      index,
      since: Math.floor(this.runStart / 1000) - 1,
      links,
    };
    const tmp = `${this.recordFile}.${process.pid}`;
    fs.writeFileSync(tmp, JSON.stringify(rec));
    fs.renameSync(tmp, this.recordFile);
  }
}

// --- the blob, or the tree of its parts ---

export function serializeFileMeta(meta: FileMeta | FileMetaColumns): Buffer {
  const cols = 'entries' in meta ? fileMetaColumns(meta.entries) : meta;
  const head = `${FILEMETA_HEADER}\n${cols.count}\n`;
  return writeLines(cols, head, 0, cols.count, false);
}

/** Where a part ends: after entry `end - 1`, and whether its group ends there too. */
export interface PartEnd {
  end: number;
  group: boolean;
}

/** The parts of a filemeta in parts: where each ends (by the entries' cuts alone, see
 * PART_CUT_MASK), in order; the last ends the last group. */
export function partEnds(cols: FileMetaColumns): PartEnd[] {
  const ends: PartEnd[] = [];
  let lines = 0;
  for (let i = 0; i < cols.count; i++) {
    const c = cols.cuts[i];
    if (++lines === PART_MAX_LINES || c & CUT_PART) {
      // A cut whose hash has more bits clear also ends the group of parts (see storedFileMeta).
      ends.push({ end: i + 1, group: (c & CUT_GROUP) !== 0 });
      lines = 0;
    }
  }
  if (lines) ends.push({ end: cols.count, group: true });
  if (ends.length) ends[ends.length - 1].group = true;
  return ends;
}

/** Writes the decimal digits of a non-negative safe integer at `at`; returns the end. */
function writeDigits(buf: Buffer, at: number, value: number): number {
  let digits = 1;
  for (let v = value; v >= 10; v = Math.floor(v / 10)) digits++;
  for (let d = digits - 1, v = value; d >= 0; d--, v = Math.floor(v / 10)) buf[at + d] = 0x30 + (v % 10);
  return at + digits;
}

/** The header and the lines of entries [from, to), straight into one buffer (this runs on every
 * capture, for every file). `parted`: the lines of a part (links by rank). */
export function writeLines(cols: FileMetaColumns, head: string, from: number, to: number, parted: boolean): Buffer {
  const { mtimeSec, mtimeNsec, linkTo, linkRank, externalNlink } = cols;
  const buf = Buffer.allocUnsafe(head.length + (to - from) * 48);
  let at = buf.write(head, 0, 'latin1');
  for (let i = from; i < to; i++) {
    const sec = mtimeSec[i];
    if (sec >= 0 && Number.isSafeInteger(sec)) at = writeDigits(buf, at, sec);
    else at += buf.write(String(sec), at, 'latin1');
    buf[at++] = 0x2e; // '.'
    let ns = mtimeNsec[i];
    for (let d = 8; d >= 0; d--) {
      buf[at + d] = 0x30 + (ns % 10);
      ns = Math.floor(ns / 10);
    }
    at += 9;
    // In parts a link names its first path by rank among the earlier entries of its blob (see
    // FileMetaEntry): a position would change the line of every link across a file added or removed.
    if (linkTo && linkTo[i] >= 0) {
      const rank = linkRank ? linkRank[i] : 0;
      if (parted && !rank) throw new Error(`filemeta entry ${i} is a link without a rank`);
      at += buf.write(parted ? ` =^${rank}` : ` =${linkTo[i]}`, at, 'latin1');
    }
    if (externalNlink && externalNlink[i] > 0) at += buf.write(` +${externalNlink[i]}`, at, 'latin1');
    buf[at++] = 0x0a;
  }
  return buf.subarray(0, at);
}

/** A files tree with more blob entries than this has its filemeta stored as a tree of parts
 * (`xet.snapshot/v4`); a smaller one keeps the single blob every reader knows. At 2,048 entries the
 * blob is ~45 KB, ~15 KB compressed: below that the parts' tree costs more than it saves. */
export const FILEMETA_PARTED_MIN_ENTRIES = 2048;
/** A part ends after a path whose hash has these bits clear: 1 path in 256, so a part is ~256
 * lines (~5 KB, ~2 KB compressed). The cut depends on the path alone, never on its time or its
 * neighbours: an edit changes its own part, and a file added or removed changes one part (two when
 * its own path is a cut). */
const PART_CUT_MASK = 0xff;
/** And at the latest after this many lines (a run of paths without a cut). */
const PART_MAX_LINES = 4096;
/** The parts are grouped in trees the same way: a group ends with a part whose last path's hash
 * has 12 bits clear (~16 parts), or at the latest after 64 parts. An edit then stores its part,
 * its group (~16 rows) and the top tree (one row per group), not one row for every part. */
const GROUP_CUT_MASK = 0xfff;
const GROUP_MAX_PARTS = 64;

/** 32-bit FNV-1a over the path's UTF-16 units, finished with murmur3's mix: FNV's low bits alone
 * depend only on the low bits of each unit. Only where parts are cut depends on it. */
function pathHash(p: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < p.length; i++) h = Math.imul(h ^ p.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A part's name in the filemeta tree: its position, 8 hex digits (so byte order is position order). */
function partName(i: number): string {
  return i.toString(16).padStart(8, '0');
}

export interface FileMetaObject {
  oid: string;
  type: 'blob' | 'tree';
  data: Buffer;
}

/** A capture's `filemeta` entry and the objects it takes. */
export interface StoredFileMeta {
  /** The snapshot tree's `filemeta` entry: the blob, or the tree of the parts. */
  oid: string;
  parted: boolean;
  /** Every object it needs, each once: the parts, then the entry's own object (last). */
  objects: FileMetaObject[];
}

/** The objects of a capture's filemeta: one blob (docs/FORMAT.md `filemeta`), or above
 * FILEMETA_PARTED_MIN_ENTRIES entries a tree of groups, each a tree of part blobs, whose lines in name order are
 * the blob's lines (links by rank: `=^n`, see FileMetaEntry). */
export function storedFileMeta(
  meta: FileMeta | FileMetaColumns,
  format: 'sha1' | 'sha256',
  memo: FileMetaPartsMemo | null = null,
): StoredFileMeta {
  const cols = 'entries' in meta ? fileMetaColumns(meta.entries) : meta;
  if (cols.count <= FILEMETA_PARTED_MIN_ENTRIES) {
    const data = serializeFileMeta(cols);
    const oid = blobOid(data, format);
    return { oid, parted: false, objects: [{ oid, type: 'blob', data }] };
  }
  const ends = partEnds(cols);
  const parts = memo ? memo.parts(cols, ends, format) : ends.map((_, k) => writePart(cols, ends, k, format));
  const objects: FileMetaObject[] = [];
  const seen = new Set<string>();
  const add = (type: 'blob' | 'tree', data: Buffer, known?: string): string => {
    const oid = known ?? objectOid(type, data, format);
    // Parts with the same lines (a package's files all extracted with one time) are one blob.
    if (!seen.has(oid)) {
      seen.add(oid);
      objects.push({ oid, type, data });
    }
    return oid;
  };
  const row = (mode: string, i: number, oid: string): Buffer[] => [
    Buffer.from(`${mode} ${partName(i)}\0`, 'latin1'),
    Buffer.from(oid, 'hex'),
  ];
  const top: Buffer[] = [];
  let group: Buffer[] = [];
  for (let k = 0; k < ends.length; k++) {
    group.push(...row('100644', group.length / 2, add('blob', parts[k].data, parts[k].oid)));
    if (ends[k].group || group.length / 2 === GROUP_MAX_PARTS) {
      top.push(...row('40000', top.length / 2, add('tree', Buffer.concat(group))));
      group = [];
    }
  }
  const oid = add('tree', Buffer.concat(top));
  return { oid, parted: true, objects };
}

/** The object id git gives a blob of these bytes. */
export function blobOid(data: Buffer, format: 'sha1' | 'sha256'): string {
  return objectOid('blob', data, format);
}

function objectOid(type: 'blob' | 'tree', data: Buffer, format: 'sha1' | 'sha256'): string {
  return crypto.createHash(format).update(`${type} ${data.length}\0`).update(data).digest('hex');
}

/** The first entry of part k. */
function partFrom(ends: PartEnd[], k: number): number {
  return k ? ends[k - 1].end : 0;
}

/** Part k's lines and its blob's id. */
function writePart(
  cols: FileMetaColumns,
  ends: PartEnd[],
  k: number,
  format: 'sha1' | 'sha256',
): { data: Buffer; oid: string } {
  const data = writeLines(cols, '', partFrom(ends, k), ends[k].end, true);
  return { data, oid: objectOid('blob', data, format) };
}

/**
 * A resident process's memo of its last filemeta in parts: when the next capture's entries cut
 * into the same parts (the same paths: cuts depend on them alone), only the parts holding an
 * entry whose line changed (its time, link or outside link count) are written and hashed again.
 * After ten edits that is ~10 of ~130 parts, where writing every line took 5–10 ms of a daemon
 * re-capture of the bench tree. The parts are byte for byte a whole build's
 * (test/filemeta-parts.test.ts).
 */
export class FileMetaPartsMemo {
  private last: {
    format: 'sha1' | 'sha256';
    cuts: Uint8Array;
    ends: PartEnd[];
    mtimeSec: Float64Array;
    mtimeNsec: Float64Array;
    linkTo: Int32Array | null;
    linkRank: Int32Array | null;
    externalNlink: Float64Array | null;
    parts: { data: Buffer; oid: string }[];
  } | null = null;
  /** Parts written by the last call (all of them when nothing could be reused). */
  lastWritten = 0;

  parts(cols: FileMetaColumns, ends: PartEnd[], format: 'sha1' | 'sha256'): { data: Buffer; oid: string }[] {
    const n = cols.count;
    const last = this.last;
    const same =
      last !== null &&
      last.format === format &&
      last.cuts.length === n &&
      Buffer.from(last.cuts.buffer, last.cuts.byteOffset, n).equals(
        Buffer.from(cols.cuts.buffer, cols.cuts.byteOffset, cols.cuts.length),
      ) &&
      last.ends.length === ends.length &&
      (last.linkTo === null) === (cols.linkTo === null) &&
      (last.linkRank === null) === (cols.linkRank === null) &&
      (last.externalNlink === null) === (cols.externalNlink === null);
    let parts: { data: Buffer; oid: string }[];
    if (!same || !last) {
      parts = ends.map((_, k) => writePart(cols, ends, k, format));
      this.lastWritten = parts.length;
    } else {
      parts = last.parts.slice();
      // The parts written again: the memo's columns take their entries only once all are written
      // (a part that fails to write leaves the memo as it was).
      const rewritten: number[] = [];
      let k = 0;
      for (let i = 0; i < n; i++) {
        while (i >= ends[k].end) k++;
        if (
          cols.mtimeSec[i] === last.mtimeSec[i] &&
          cols.mtimeNsec[i] === last.mtimeNsec[i] &&
          (!cols.linkTo || cols.linkTo[i] === (last.linkTo as Int32Array)[i]) &&
          (!cols.linkRank || cols.linkRank[i] === (last.linkRank as Int32Array)[i]) &&
          (!cols.externalNlink || cols.externalNlink[i] === (last.externalNlink as Float64Array)[i])
        )
          continue;
        parts[k] = writePart(cols, ends, k, format);
        rewritten.push(k);
        i = ends[k].end - 1; // the rest of this part is written with it
      }
      for (const r of rewritten) {
        for (let j = partFrom(ends, r); j < ends[r].end; j++) {
          last.mtimeSec[j] = cols.mtimeSec[j];
          last.mtimeNsec[j] = cols.mtimeNsec[j];
          if (cols.linkTo) (last.linkTo as Int32Array)[j] = cols.linkTo[j];
          if (cols.linkRank) (last.linkRank as Int32Array)[j] = cols.linkRank[j];
          if (cols.externalNlink) (last.externalNlink as Float64Array)[j] = cols.externalNlink[j];
        }
      }
      this.lastWritten = rewritten.length;
      last.parts = parts;
      return parts;
    }
    this.last = {
      format,
      cuts: Uint8Array.from(cols.cuts),
      ends,
      mtimeSec: Float64Array.from(cols.mtimeSec),
      mtimeNsec: Float64Array.from(cols.mtimeNsec),
      linkTo: cols.linkTo ? Int32Array.from(cols.linkTo) : null,
      linkRank: cols.linkRank ? Int32Array.from(cols.linkRank) : null,
      externalNlink: cols.externalNlink ? Float64Array.from(cols.externalNlink) : null,
      parts,
    };
    return parts;
  }
}

export interface ParsedFileMeta {
  mtimeSec: number[];
  mtimeNsec: number[];
  linkTo: Int32Array;
  externalNlink: number[];
}

/** Parse a filemeta blob for a files tree whose blob entries (files and symlinks, in tree order)
 * have these modes and oids; `parts`: the lines of a tree of parts, whose links are by rank (`=^n`:
 * the n-th nearest earlier entry of the same blob and mode that is not a link), where a blob's are
 * absolute (`=k`). Anything malformed, or a link
 * between entries that are not the same blob with the same mode, is SNAPSHOT_INVALID: a hostile
 * snapshot may only say what git could.
 *
 * Each line is `-?<1-15 digits>.<9 digits>[ =[^]<1-10 digits>][ +<1-10 digits>]`, read byte by
 * byte: a regular expression and a string per line, and a key per entry for the links by rank,
 * were ~0.1 s of a restore of the bench tree's 33,800 entries before its files could be laid (the
 * keys are now made only once a link by rank is met). */
export function parseFileMeta(data: Buffer, blobs: { mode: number; oid: string }[], parts = false): ParsedFileMeta {
  const bad = (why: string) => new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${why}`);
  const headEnd = data.indexOf(NL);
  if (headEnd < 0 || data.toString('utf8', 0, headEnd) !== FILEMETA_HEADER) {
    throw bad(`does not start with ${FILEMETA_HEADER}`);
  }
  const countEnd = data.indexOf(NL, headEnd + 1);
  const countText = data.toString('utf8', headEnd + 1, countEnd < 0 ? data.length : countEnd);
  const count = Number(countText);
  if (!/^\d+$/.test(countText) || count !== blobs.length) {
    throw bad(`counts ${countText} entries; the files tree has ${blobs.length}`);
  }
  // Exactly `count` lines after the two, each ended by a newline, before any line is judged; where
  // each ends is kept for the parse below.
  const ends = new Int32Array(count);
  let lines = 0;
  let last = countEnd;
  for (
    let at = data.indexOf(NL, countEnd + 1);
    countEnd >= 0 && at >= 0 && lines <= count;
    at = data.indexOf(NL, at + 1)
  ) {
    if (lines < count) ends[lines] = at;
    last = at;
    lines++;
  }
  if (countEnd < 0 || lines !== count || last !== data.length - 1) throw bad('has the wrong number of lines');
  const out: ParsedFileMeta = {
    mtimeSec: new Array<number>(count),
    mtimeNsec: new Array<number>(count),
    linkTo: new Int32Array(count).fill(-1),
    externalNlink: new Array<number>(count).fill(0),
  };
  // With parts: per blob and mode, the entries so far that are not links (ascending); made at the
  // first link by rank from the entries before it.
  let firsts: Map<string, number[]> | null = null;
  const keyOf = (k: number) => `${blobs[k].mode}:${blobs[k].oid}`;
  const noteFirst = (into: Map<string, number[]>, k: number) => {
    const list = into.get(keyOf(k));
    if (list) list.push(k);
    else into.set(keyOf(k), [k]);
  };
  let p = countEnd + 1;
  for (let i = 0; i < count; i++) {
    const end = ends[i];
    const malformed = () => bad(`line ${i + 3} is malformed`);
    // -?\d{1,15}
    const negative = data[p] === MINUS;
    if (negative) p++;
    let sec = 0;
    let digits = 0;
    while (p < end && data[p] >= D0 && data[p] <= D9 && digits < 16) {
      sec = sec * 10 + (data[p++] - D0);
      digits++;
    }
    if (digits < 1 || digits > 15 || data[p] !== DOT) throw malformed();
    p++;
    // \.\d{9}
    let nsec = 0;
    for (digits = 0; digits < 9; digits++, p++) {
      if (p >= end || data[p] < D0 || data[p] > D9) throw malformed();
      nsec = nsec * 10 + (data[p] - D0);
    }
    out.mtimeSec[i] = negative ? -sec : sec;
    out.mtimeNsec[i] = nsec;
    // (?: =(\^?)(\d{1,10}))?(?: \+(\d{1,10}))?$ : the whole line is read before its link is judged.
    let link: { value: number; end: number } | null = null;
    let byRank = false;
    if (p < end && data[p] === SPACE && data[p + 1] === EQUALS) {
      byRank = data[p + 2] === CARET;
      link = numberAt(data, p + (byRank ? 3 : 2), end);
      if (link === null) throw malformed();
      p = link.end;
    }
    if (p < end && data[p] === SPACE && data[p + 1] === PLUS) {
      const n = numberAt(data, p + 2, end);
      if (n === null) throw malformed();
      p = n.end;
      out.externalNlink[i] = n.value;
    }
    if (p !== end) throw malformed();
    if (link) {
      if (byRank !== parts) throw bad(`line ${i + 3} has a link of the other form`);
      if (parts && !firsts) {
        firsts = new Map();
        for (let j = 0; j < i; j++) if (out.linkTo[j] === -1) noteFirst(firsts, j);
      }
      const list = firsts?.get(keyOf(i));
      const n = link.value;
      const k = !parts ? n : list && n >= 1 && n <= list.length ? list[list.length - n] : -1;
      if (k < 0 || k >= i || out.linkTo[k] !== -1 || blobs[k].mode !== blobs[i].mode || blobs[k].oid !== blobs[i].oid) {
        throw bad(`links entry ${i} to entry ${k}, which is not the same file`);
      }
      out.linkTo[i] = k;
    } else if (firsts) noteFirst(firsts, i);
    p = end + 1;
  }
  return out;
}

const NL = 0x0a;
const SPACE = 0x20;
const PLUS = 0x2b;
const MINUS = 0x2d;
const DOT = 0x2e;
const EQUALS = 0x3d;
const CARET = 0x5e;
const D0 = 0x30;
const D9 = 0x39;

/** The 1 to 10 digits at data[at..end) (not followed by another digit), or null. */
function numberAt(data: Buffer, at: number, end: number): { value: number; end: number } | null {
  let value = 0;
  let p = at;
  while (p < end && data[p] >= D0 && data[p] <= D9) {
    if (p - at === 10) return null;
    value = value * 10 + (data[p++] - D0);
  }
  return p === at ? null : { value, end: p };
}

/** At most this many bytes per entry (a signed 15-digit time, both fields at 10 digits) plus the header. */
export function maxFileMetaBytes(entries: number): number {
  return 64 + entries * 64;
}

// --- restore ---

/** Paths of the files index's blob entries, in order, with what parseFileMeta checks. */
export function indexBlobs(parsed: ParsedIndex): { path: string; mode: number; oid: string; offset: number }[] {
  return parsed.entries.filter((e) => e.stage === 0 && !e.intentToAdd && BLOB_MODE.has(e.mode));
}

/** Set the recorded times (and make the recorded hard links) in a laid-out tree. Followers must not
 * exist yet; their parents may not either. */
export function applyLinksAndTimes(
  worktree: string,
  blobs: { path: string }[],
  meta: ParsedFileMeta,
  mkdirSafe: (abs: string) => void,
): void {
  for (let i = 0; i < blobs.length; i++) {
    const k = meta.linkTo[i];
    if (k < 0) continue;
    const abs = path.join(worktree, blobs[i].path);
    mkdirSafe(path.dirname(abs));
    fs.linkSync(path.join(worktree, blobs[k].path), abs);
  }
  const times: TimeEntry[] = [];
  for (let i = 0; i < blobs.length; i++) {
    if (meta.linkTo[i] >= 0) continue; // one inode, one time
    times.push({ abs: path.join(worktree, blobs[i].path), sec: Number(meta.mtimeSec[i]), nsec: meta.mtimeNsec[i] });
  }
  setTimes(times);
}

/** Record every blob entry's stat data from lstat, without reading a file: for an index whose
 * entries name exactly the files on disk (just written, linked, copied), after times changed. */
export function refreshIndexStat(indexFile: string, worktree: string, format: 'sha1' | 'sha256'): number {
  const parsed = parseIndex(indexFile, format);
  let n = 0;
  for (const e of indexBlobs(parsed)) {
    const s = lstatBig(path.join(worktree, e.path));
    if (!s) continue;
    writeStat(parsed.buf, e.offset, s);
    n++;
  }
  if (n) writeIndexBuffer(indexFile, parsed);
  return n;
}

/** Microseconds since the epoch: the precision restore can set, and verify compares. */
export function microseconds(sec: number, nsec: number): bigint {
  return BigInt(sec) * 1_000_000n + BigInt(Math.floor(nsec / 1000));
}

export function formatTime(sec: number, nsec: number): string {
  return `${sec}.${String(nsec).padStart(9, '0')}`;
}

/** What layFiles needs from a snapshot's filemeta: which paths to check out (followers are linked
 * instead), and how to finish (links, times, stat data) once the files are there. */
export interface FileMetaPlan {
  /** Paths for checkout-index, or null for all of them. */
  checkout: string[] | null;
  finish(mkdirSafe: (abs: string) => void): void;
}

export async function planFileMeta(
  filemeta: string | null,
  filesIndex: string,
  worktree: string,
  format: 'sha1' | 'sha256',
  opts: GitOptions,
): Promise<FileMetaPlan | null> {
  if (!filemeta) return null;
  const blobs = fs.existsSync(filesIndex) ? indexBlobs(parseIndex(filesIndex, format)) : [];
  const meta = await readFileMeta(filemeta, blobs, opts);
  const anyLink = meta.linkTo.some((k) => k >= 0);
  return {
    checkout: anyLink ? blobs.filter((_, i) => meta.linkTo[i] < 0).map((b) => b.path) : null,
    finish(mkdirSafe) {
      if (!blobs.length) return;
      applyLinksAndTimes(worktree, blobs, meta, mkdirSafe);
      refreshIndexStat(filesIndex, worktree, format);
    },
  };
}

/** The most bytes the trees of one level of a filemeta of `entries` lines can hold: at most one
 * part per line (and one group per part), each row `100644 <8 hex digits>\0<id>`. */
function maxPartsTreeBytes(entries: number, hashLen: number): number {
  return Math.max(entries, 1) * (16 + hashLen);
}

/** The objects `ids` of one level of a filemeta tree (each read once, however often named), after
 * checking that each is a `type` and that their sizes, counted as often as they are named, add up
 * to at most `limit`: what a tree named many times holds is expanded each time, so the next level
 * is bounded by what this one names. `total` is that sum. */
async function readChecked(
  ids: string[],
  type: 'blob' | 'tree',
  limit: number,
  objects: MetaObjects,
): Promise<{ data: Map<string, Buffer>; total: number }> {
  const what = type === 'tree' ? 'tree' : 'part';
  const bad = (why: string) => new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${why}`);
  const unique = [...new Set(ids)];
  // Sizes before contents, and no more read to learn them than the limit allows.
  const infos = objects.infoWithin ? await objects.infoWithin(unique, limit) : await objects.info(unique);
  const sizeOf = new Map<string, number>();
  unique.forEach((id, i) => {
    const info = infos[i];
    if (!info) throw new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${what} ${id} is missing`);
    if (info.type !== type) throw bad(`has ${id}, a ${info.type}, where a ${type} belongs`);
    sizeOf.set(id, info.size);
  });
  let total = 0;
  for (const id of ids) total += sizeOf.get(id) as number;
  if (total > limit) throw bad(`has ${what}s of ${total} bytes, too large for its files tree`);
  // Each is at most the total checked above.
  const read = await objects.contents(unique, limit);
  const data = new Map<string, Buffer>();
  unique.forEach((id, i) => {
    const obj = read[i];
    if (!obj || obj.type !== type || obj.data.length !== sizeOf.get(id)) throw bad(`${what} ${id} could not be read`);
    data.set(id, obj.data);
  });
  return { data, total };
}

/** The rows of the trees `ids` (one level of a filemeta tree), in order: each must be `mode`
 * `type` and named by its position in its tree; a tree may be empty only with `emptyAllowed` (the
 * top tree of a files tree without files). Their sizes together are checked against `limit`
 * before any is read (readChecked). */
async function readLevel(
  ids: string[],
  mode: string,
  type: 'blob' | 'tree',
  limit: number,
  emptyAllowed: boolean,
  hashLen: number,
  objects: MetaObjects,
): Promise<string[]> {
  const bad = (why: string) => new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${why}`);
  const { data } = await readChecked(ids, 'tree', limit, objects);
  const rowsOf = new Map<string, string[]>();
  for (const [t, tree] of data) {
    const { entries, complete } = parseTreeObject(tree, hashLen);
    if (!complete) throw bad(`tree ${t} is malformed`);
    if (!entries.length && !emptyAllowed) throw bad(`tree ${t} is empty`);
    rowsOf.set(
      t,
      entries.map((e, i) => {
        if (e.mode !== mode || e.name !== partName(i)) {
          throw bad(`tree ${t}'s entry ${i} is ${e.mode} ${JSON.stringify(e.name)}, not ${type} ${partName(i)}`);
        }
        return e.oid;
      }),
    );
  }
  const out: string[] = [];
  for (const t of ids) for (const row of rowsOf.get(t) as string[]) out.push(row);
  return out;
}

/** Read and check a snapshot's filemeta, a blob or a tree of parts, for a files tree whose blob
 * entries are `blobs` (in its order). Anything from a ref is hostile: every size is checked
 * before anything is read, and the parts' lines must add up to what a blob would hold. */
export async function readFileMeta(
  oid: string,
  blobs: { mode: number; oid: string }[],
  opts: GitOptions,
  /** The object directory of the repository `opts` names, when the caller knows it: the levels are
   * read from its packs in this process (git is asked only for what is not there), where a
   * `cat-file` process's start and its four round trips were ~40 ms of a restore's critical path. */
  local?: { objectsDir: string; format: 'sha1' | 'sha256' },
): Promise<ParsedFileMeta> {
  // One cat-file process answers every level in turn (sizes before contents): seven short git
  // processes, one after the other, were ~0.1 s of a restore before its files could be laid.
  const objects: MetaObjects & { close(): void } = local
    ? new LocalFirstObjectReader(opts, local.objectsDir, local.format)
    : new ObjectReader(opts);
  try {
    return await readFileMetaFrom(oid, blobs, objects);
  } finally {
    objects.close();
  }
}

async function readFileMetaFrom(
  oid: string,
  blobs: { mode: number; oid: string }[],
  objects: MetaObjects,
): Promise<ParsedFileMeta> {
  const bad = (why: string) => new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${why}`);
  const limit = maxFileMetaBytes(blobs.length);
  const [info] = objects.infoWithin ? await objects.infoWithin([oid], limit) : await objects.info([oid]);
  if (!info) throw new XetError('SNAPSHOT_INVALID', `the snapshot's filemeta ${oid} is missing`);
  if (info.type === 'blob') {
    if (info.size > limit) throw bad(`is ${info.size} bytes, too large for its files tree`);
    const [data] = await objects.contents([oid], limit);
    if (!data || data.type !== 'blob') throw bad('is not a blob');
    return parseFileMeta(data.data, blobs);
  }
  if (info.type !== 'tree') throw bad(`is a ${info.type}, neither a blob nor a tree of parts`);
  // A tree of groups, each a tree of parts: every name its position, every level checked (sizes
  // first) before the next is read.
  const hashLen = oid.length / 2;
  const treeLimit = maxPartsTreeBytes(blobs.length, hashLen);
  if (info.size > treeLimit) throw bad(`is a tree of ${info.size} bytes, too large for its files tree`);
  const groupIds = await readLevel([oid], '40000', 'tree', treeLimit, true, hashLen, objects);
  const partIds = await readLevel(groupIds, '100644', 'blob', treeLimit, false, hashLen, objects);
  const { data: parts, total } = await readChecked(partIds, 'blob', limit, objects);
  const head = Buffer.from(`${FILEMETA_HEADER}\n${blobs.length}\n`, 'latin1');
  const whole = Buffer.allocUnsafe(head.length + total);
  let at = head.copy(whole, 0);
  for (const p of partIds) {
    const part = parts.get(p) as Buffer;
    if (!part.length) throw bad(`part ${p} is not a blob of lines`);
    // A part holds whole lines: one cut short would join its last line to the next part's first.
    if (part[part.length - 1] !== 0x0a) throw bad(`part ${p} does not end with a line`);
    at += part.copy(whole, at);
  }
  return parseFileMeta(whole, blobs, true);
}

export interface MetaDifference {
  kind: 'mtime' | 'hardlink';
  path: string;
  expected: string | null;
  actual: string | null;
}

/** Times (to the microsecond, what restore can set) and hard-link groups of the paths both the
 * snapshot and the directory have, except `skip` (paths already reported as other differences). */
export async function fileMetaDifferences(
  filesTree: string,
  filemeta: string | null,
  actual: FileMeta | null,
  skip: Set<string>,
  opts: GitOptions,
): Promise<MetaDifference[]> {
  if (!filemeta || !actual) return [];
  const listing = (await lsTree(filesTree, opts)).filter((e) => e.type === 'blob');
  const want = await readFileMeta(
    filemeta,
    listing.map((e) => ({ mode: parseInt(e.mode, 8), oid: e.oid })),
    opts,
  );
  const have = new Map(actual.entries.map((e) => [e.path, e]));
  const out: MetaDifference[] = [];
  for (let i = 0; i < listing.length; i++) {
    const p = listing[i].path;
    const a = have.get(p);
    if (!a || skip.has(p)) continue;
    if (microseconds(want.mtimeSec[i], want.mtimeNsec[i]) !== microseconds(a.mtimeSec, a.mtimeNsec)) {
      out.push({
        kind: 'mtime',
        path: p,
        expected: formatTime(want.mtimeSec[i], want.mtimeNsec[i]),
        actual: formatTime(a.mtimeSec, a.mtimeNsec),
      });
    }
    const wantRep = want.linkTo[i] >= 0 ? listing[want.linkTo[i]].path : null;
    const haveRep = a.linkTo >= 0 ? actual.entries[a.linkTo].path : null;
    if (wantRep !== haveRep) out.push({ kind: 'hardlink', path: p, expected: wantRep, actual: haveRep });
  }
  return out;
}

/** The captured modification times of some paths of a snapshot's files tree (a link's is its
 * group's), read from its filemeta, and for each path that is a hard link of an earlier path of
 * the tree, that path (the first of its inode); both empty when the snapshot has no filemeta. For
 * writing files later than the restore that laid the rest (hydrate). */
export async function capturedTimes(
  filesTree: string,
  filemeta: string | null,
  paths: string[],
  opts: GitOptions,
): Promise<{ times: Map<string, { sec: number; nsec: number }>; linkOf: Map<string, string> }> {
  const out = new Map<string, { sec: number; nsec: number }>();
  const linkOf = new Map<string, string>();
  if (!filemeta || !paths.length) return { times: out, linkOf };
  const blobs: { path: string; mode: number; oid: string }[] = [];
  for (const rec of await gitZ(['ls-tree', '-r', '-z', '--full-tree', filesTree], opts)) {
    const tab = rec.indexOf('\t');
    const [mode, type, oid] = rec.slice(0, tab).split(' ');
    if (type === 'blob') blobs.push({ path: rec.slice(tab + 1), mode: parseInt(mode, 8), oid });
  }
  const meta = await readFileMeta(filemeta, blobs, opts);
  const at = new Map(blobs.map((b, i) => [b.path, i]));
  for (const p of paths) {
    let i = at.get(p);
    if (i === undefined) continue;
    if (meta.linkTo[i] >= 0) {
      i = meta.linkTo[i];
      linkOf.set(p, blobs[i].path);
    }
    out.set(p, { sec: meta.mtimeSec[i], nsec: meta.mtimeNsec[i] });
  }
  return { times: out, linkOf };
}
