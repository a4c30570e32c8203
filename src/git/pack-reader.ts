// Reading single objects out of a git pack by id, through its pack index (v2), without git and
// without reading the pack whole: the index's fan-out narrows the search to one first byte, a
// binary search over the sorted names (positional reads of one id each) finds the entry, its offset
// (31-bit, or an index into the 64-bit table) names where the entry starts, and the entry is
// inflated from a window just big enough for it. Deltas (ofs-delta and ref-delta, the base found
// in the same pack) are resolved from the base up, one delta in memory at a time, to a depth bound.
//
// Both files may be forged (a store's packs and indexes are anyone's with write access): every size
// is checked before anything is allocated or inflated (the object's, a delta's source and result),
// offsets must fall inside the pack and an ofs-delta's base must lie before it, and the object a read
// returns is hashed and must have the id it was asked for. A wrong index therefore costs a refusal,
// never a wrong object. Memory per read: the object, its base and one delta.

import * as crypto from 'node:crypto';
import { constants as bufferConstants } from 'node:buffer';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { inflateExact, InflateFailure, zlibStreamBound } from './zlib-fast';
import { native } from '../native';

export type ObjectType = 'commit' | 'tree' | 'blob' | 'tag';
export interface PackObject {
  type: ObjectType;
  data: Buffer;
}

const IDX_MAGIC = 0xff744f63;
const TYPES: Record<number, ObjectType> = { 1: 'commit', 2: 'tree', 3: 'blob', 4: 'tag' };
const OFS_DELTA = 6;
const REF_DELTA = 7;
/** git never writes deeper chains (pack-objects clamps --depth to 4095). */
export const MAX_DELTA_DEPTH = 4095;
/** Default ceiling of one object (and of any base or delta on its way). */
export const DEFAULT_MAX_OBJECT_BYTES = 64 * 1024 * 1024;

function hashLen(format: 'sha1' | 'sha256'): number {
  return format === 'sha256' ? 32 : 20;
}

/** An open file read by position, counting what it reads (the store's transfer, when it is one). */
class RandomFile {
  bytesRead = 0;
  /** With `window`, reads are served from the last window read (a fresh buffer each time, so what
   * was returned stays valid): a reader walking a pack in order reads it in big pieces. */
  private win: Buffer | null = null;
  private winAt = 0;
  constructor(
    readonly file: string,
    readonly fd: number,
    readonly size: number,
    private readonly window = 0,
    /** Read every window into one buffer: only for callers that keep nothing returned past their
     * next read (PackReader.read inflates out of it; readUnhashed may return views into it). */
    private readonly reuse = false,
    /** The whole file mapped (native mapFile): every read is a view of it, valid while it is. */
    private map: Buffer | null = null,
  ) {}

  read(pos: number, len: number): Buffer {
    if (this.map) {
      const end = Math.min(pos + len, this.size);
      if (end <= pos) return this.map.subarray(0, 0);
      this.bytesRead += end - pos;
      return this.map.subarray(pos, end);
    }
    if (this.window && len <= this.window) {
      const w = this.win;
      if (!w || pos < this.winAt || pos + len > this.winAt + w.length) {
        this.win = this.reuse ? this.readInto(pos, this.window) : this.readDirect(pos, this.window);
        this.winAt = pos;
      }
      const at = pos - this.winAt;
      return (this.win as Buffer).subarray(at, Math.min(at + len, (this.win as Buffer).length));
    }
    return this.reuse ? this.readLarge(pos, len) : this.readDirect(pos, len);
  }

  private spare: Buffer | null = null;
  private large: Buffer | null = null;

  /** A read past the window's size into one buffer kept for them (reuse only): a fresh buffer of
   * megabytes per large blob cost its pages' faults and zeroing every time (~0.2 s of a restore's
   * worker on the bench tree). */
  private readLarge(pos: number, len: number): Buffer {
    const want = Math.max(0, Math.min(len, this.size - pos));
    if (!this.large || this.large.length < want) {
      this.large = Buffer.allocUnsafe(Math.max(want, 2 * (this.large?.length ?? 0)));
    }
    return this.fill(this.large, pos, want);
  }

  private readInto(pos: number, len: number): Buffer {
    this.spare ??= Buffer.allocUnsafe(len);
    return this.fill(this.spare, pos, Math.max(0, Math.min(len, this.size - pos)));
  }

  private readDirect(pos: number, len: number): Buffer {
    const want = Math.max(0, Math.min(len, this.size - pos));
    return this.fill(Buffer.allocUnsafe(want), pos, want);
  }

  /** buf[0..want) read from `pos` (short only at the file's end), counted in bytesRead. */
  private fill(buf: Buffer, pos: number, want: number): Buffer {
    let n = 0;
    while (n < want) {
      const got = fs.readSync(this.fd, buf, n, want - n, pos + n);
      if (got === 0) break;
      n += got;
    }
    this.bytesRead += n;
    return buf.subarray(0, n);
  }

  get reusesWindow(): boolean {
    return this.reuse;
  }

  get mapped(): boolean {
    return this.map !== null;
  }

  /** The mapping itself (null when the file is read through a window). */
  get mapping(): Buffer | null {
    return this.map;
  }

  close(): void {
    this.map = null; // unmapped once the views into it are collected too
    fs.closeSync(this.fd);
  }
}

/** `fd` mapped whole, or null where the module is absent or the kernel refuses (the caller reads it
 * through a window instead). */
function mapWhole(fd: number, size: number): Buffer | null {
  // A pack past the largest Buffer (4 GiB in node 20) is read through the window (review 24: it
  // was dropped whole, its objects left to git).
  if (!native?.mapFile || size <= 0 || size > BUFFER_MAX) return null;
  try {
    const got = native.mapFile(fd, size);
    return typeof got === 'number' ? null : got;
  } catch {
    return null;
  }
}

const BUFFER_MAX = bufferConstants.MAX_LENGTH;

/** How a file is opened: `openStoreFile` for store files (regular files only, never followed). */
export type Opener = (file: string) => { fd: number; size: number } | null;

const plainOpen: Opener = (file) => {
  const fd = fs.openSync(file, 'r');
  return { fd, size: fs.fstatSync(fd).size };
};

function forged(file: string, why: string, details: Record<string, unknown> = {}): XetError {
  return new XetError('INTEGRITY_MISMATCH', `${file}: ${why}`, { file, ...details });
}

/** The pack index files of a pack directory, sorted by name (the order git's packs are searched in
 * by this project's readers), or none when it cannot be read. */
export function packIndexNames(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir)
      .filter((x) => /^pack-[0-9a-f]+\.idx$/.test(x))
      .sort();
  } catch {
    return [];
  }
}

/** A pack index (v2), read by position: only the fan-out is held in memory. */
export class PackIndex {
  private constructor(
    private readonly f: RandomFile,
    private readonly fanout: Uint32Array,
    readonly count: number,
    private readonly large: number,
    private readonly oidLen: number,
    /** The pack checksum the index says it indexes. */
    readonly packChecksum: string,
  ) {}

  static open(file: string, format: 'sha1' | 'sha256', open: Opener = plainOpen): PackIndex {
    const got = open(file);
    if (!got) throw Object.assign(new Error(`ENOENT: ${file}`), { code: 'ENOENT' });
    const f = new RandomFile(file, got.fd, got.size);
    try {
      const oidLen = hashLen(format);
      const head = f.read(0, 8 + 256 * 4);
      if (head.length < 8 + 1024 || head.readUInt32BE(0) !== IDX_MAGIC || head.readUInt32BE(4) !== 2) {
        throw forged(file, 'is not a version 2 pack index');
      }
      const fanout = new Uint32Array(256);
      for (let i = 0; i < 256; i++) {
        fanout[i] = head.readUInt32BE(8 + i * 4);
        if (i > 0 && fanout[i] < fanout[i - 1]) throw forged(file, 'has a fan-out table that is not ascending');
      }
      const n = fanout[255];
      const fixed = 8 + 1024 + n * (oidLen + 8) + 2 * oidLen;
      if (f.size < fixed || (f.size - fixed) % 8 !== 0) {
        throw forged(file, `is ${f.size} bytes, which no index of ${n} objects is`);
      }
      const packChecksum = f.read(f.size - 2 * oidLen, oidLen).toString('hex');
      return new PackIndex(f, fanout, n, (f.size - fixed) / 8, oidLen, packChecksum);
    } catch (e) {
      f.close();
      throw e;
    }
  }

  get bytesRead(): number {
    return this.f.bytesRead;
  }

  /** Names and 31-bit offsets read into memory (~(id + 4) bytes per object), for a reader that looks
   * up many objects: a lookup then reads nothing instead of a dozen positional reads. */
  private names: Buffer | null = null;
  private offsets: Buffer | null = null;

  /** Hold the name and offset tables in memory from now on. */
  preload(): void {
    if (this.names) return;
    const n = this.count;
    const names = this.f.read(8 + 1024, n * this.oidLen);
    const offsets = this.f.read(8 + 1024 + n * (this.oidLen + 4), n * 4);
    if (names.length !== n * this.oidLen || offsets.length !== n * 4) throw forged(this.f.file, 'is truncated');
    this.names = names;
    this.offsets = offsets;
  }

  /** The whole index mapped (native mapFile), for a caller that searches it itself (a restore's
   * native layAllLater, which checks its tables again); null where it cannot be mapped. */
  mapped(): Buffer | null {
    return mapWhole(this.f.fd, this.f.size);
  }

  /** The entry's offset in the pack, or null when the index does not list `oid`. */
  find(oid: string): number | null {
    return this.findRaw(Buffer.from(oid, 'hex'));
  }

  /** find() for an id already in bytes (a caller that asks several packs decodes it once). */
  findRaw(want: Buffer): number | null {
    if (want.length !== this.oidLen) return null;
    let lo = want[0] === 0 ? 0 : this.fanout[want[0] - 1];
    let hi = this.fanout[want[0]]; // exclusive
    const names = 8 + 1024;
    const len = this.oidLen;
    const held = this.names;
    // Held names: their first four bytes decide almost every step without a call into C
    // (Buffer.compare's was ~0.1 s of a restore worker's 17,000 lookups).
    const head = want.readUInt32BE(0);
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      let c: number;
      if (held) {
        const at = held.readUInt32BE(mid * len);
        c = at < head ? -1 : at > head ? 1 : held.compare(want, 0, len, mid * len, mid * len + len);
      } else c = this.f.read(names + mid * len, len).compare(want);
      if (c === 0) return this.offsetAt(mid);
      if (c < 0) lo = mid + 1;
      else hi = mid;
    }
    return null;
  }

  private offsetAt(i: number): number {
    const n = this.count;
    const small = this.offsets
      ? this.offsets.readUInt32BE(i * 4)
      : this.f.read(8 + 1024 + n * (this.oidLen + 4) + i * 4, 4).readUInt32BE(0);
    if (!(small & 0x80000000)) return small;
    const li = small & 0x7fffffff;
    if (li >= this.large) throw forged(this.f.file, `names 64-bit offset ${li} of a table of ${this.large}`);
    const big = this.f.read(8 + 1024 + n * (this.oidLen + 8) + li * 8, 8).readBigUInt64BE(0);
    if (big > BigInt(Number.MAX_SAFE_INTEGER)) throw forged(this.f.file, 'names an offset past 2^53');
    return Number(big);
  }

  close(): void {
    this.f.close();
  }
}

export interface PackReaderOptions {
  /** How files are opened (default: plain open). */
  open?: Opener;
  /** Largest object, base or delta a read may inflate (default 64 MiB). */
  maxObjectBytes?: number;
  maxDepth?: number;
  /** Read the pack in windows of this many bytes (for readers of many neighbouring objects). */
  window?: number;
  /** With `window`: one window buffer, read into again and again instead of a fresh one per
   * window (for a reader of hundreds of thousands of objects). What `readUnhashed` and
   * `wholeEntry` return may be a view into it, valid until the reader's next read. */
  reuseWindow?: boolean;
  /** Map the pack whole and read it in place (a restore's workers, which read most of a pack: its
   * windows' read calls were ~0.2 s of each). What reads return then stays valid while the reader
   * is open. Without the native module, or where the kernel refuses, `window` applies. git maps
   * its packs the same way: a pack is never rewritten in place, only replaced by a new file. */
  mapped?: boolean;
}

interface EntryHead {
  kind: number;
  size: number;
  /** Where the zlib stream starts. */
  dataAt: number;
  /** ofs-delta: the base's offset; ref-delta: the base's id. */
  baseOffset?: number;
  baseOid?: string;
}

/** A pack and its index: objects by id, hash-checked. */
export class PackReader {
  private constructor(
    readonly name: string,
    private readonly pack: RandomFile,
    readonly index: PackIndex,
    private readonly format: 'sha1' | 'sha256',
    private readonly maxBytes: number,
    private readonly maxDepth: number,
  ) {}

  /** Open `pack` with `idx`; the index must name the pack's own trailer checksum. */
  static open(packFile: string, idxFile: string, format: 'sha1' | 'sha256', o: PackReaderOptions = {}): PackReader {
    const open = o.open ?? plainOpen;
    const index = PackIndex.open(idxFile, format, open);
    let pack: RandomFile | null = null;
    try {
      const got = open(packFile);
      if (!got) throw Object.assign(new Error(`ENOENT: ${packFile}`), { code: 'ENOENT' });
      const map = o.mapped ? mapWhole(got.fd, got.size) : null;
      pack = new RandomFile(packFile, got.fd, got.size, o.window ?? 0, o.reuseWindow === true, map);
      const len = hashLen(format);
      const head = pack.read(0, 12);
      if (pack.size < 12 + len || head.toString('latin1', 0, 4) !== 'PACK' || head.readUInt32BE(4) !== 2) {
        throw forged(packFile, 'is not a version 2 git pack');
      }
      if (head.readUInt32BE(8) !== index.count) {
        throw forged(idxFile, `indexes ${index.count} objects; its pack holds ${head.readUInt32BE(8)}`);
      }
      if (pack.read(pack.size - len, len).toString('hex') !== index.packChecksum) {
        throw forged(idxFile, `is the index of another pack than ${packFile}`);
      }
      const name = `pack-${index.packChecksum}`;
      return new PackReader(
        name,
        pack,
        index,
        format,
        o.maxObjectBytes ?? DEFAULT_MAX_OBJECT_BYTES,
        o.maxDepth ?? MAX_DELTA_DEPTH,
      );
    } catch (e) {
      pack?.close();
      index.close();
      throw e;
    }
  }

  private get reusesWindow(): boolean {
    return this.pack.reusesWindow;
  }

  /** The pack is mapped whole and read in place (PackReaderOptions.mapped took effect). */
  get readsInPlace(): boolean {
    return this.pack.mapped;
  }

  /**
   * The mapped pack for a caller that reads whole entries in place itself (a restore's native
   * layMany): the mapping, where its objects end (its trailer follows), and the largest object a
   * read of `maxBytes` takes here, as wholeEntry bounds it; null when the pack is not mapped. What
   * such a caller does not take as a plain blob it leaves to wholeEntry and read.
   */
  inPlace(maxBytes = this.maxBytes): { map: Buffer; end: number; limit: number } | null {
    const map = this.pack.mapping;
    if (!map) return null;
    return { map, end: this.pack.size - hashLen(this.format), limit: Math.min(maxBytes, this.maxBytes) };
  }

  /** Bytes read from the pack and the index so far. */
  get bytesRead(): number {
    return this.pack.bytesRead + this.index.bytesRead;
  }

  has(oid: string): boolean {
    return this.index.find(oid) !== null;
  }

  /** The object `oid`, or null when the index does not list it. Hash-checked. */
  read(oid: string, maxBytes = this.maxBytes): PackObject | null {
    const at = this.index.find(oid);
    if (at === null) return null;
    const obj = this.resolve(at, Math.min(maxBytes, this.maxBytes), oid);
    const got = crypto
      .createHash(this.format)
      .update(`${obj.type} ${obj.data.length}\0`)
      .update(obj.data)
      .digest('hex');
    if (got !== oid) {
      throw forged(this.pack.file, `the object its index names ${oid} hashes to ${got}`, { oid, actual: got });
    }
    return obj;
  }

  /**
   * Where the object `oid` is, for a caller that inflates and hashes it itself (a restore's
   * native layBlob): its type, size and zlib stream (a view into the window, valid until the next
   * read) when it is stored whole; 'delta' when it is a delta (read() resolves those); null when
   * the index does not list it. The size is checked against `maxBytes` as read() checks it.
   */
  wholeEntry(
    oid: string,
    maxBytes = this.maxBytes,
    /** Where the index puts it, when the caller has looked already. */
    at: number | null = this.index.find(oid),
  ): { type: PackObject['type']; size: number; z: Buffer } | 'delta' | null {
    if (at === null) return null;
    const head = this.head(at, oid);
    if (head.kind === OFS_DELTA || head.kind === REF_DELTA) return 'delta';
    const type = this.wholeType(head, oid, Math.min(maxBytes, this.maxBytes));
    return { type, size: head.size, z: this.stream(head) };
  }

  /** The error read() throws for an entry that does not inflate to its size (for wholeEntry's
   * callers, which inflate it themselves). */
  notInflating(oid: string, why: string): XetError {
    return forged(this.pack.file, `${oid}: the entry does not inflate to its size (${why})`, { oid });
  }

  /** The error read() throws for an object that does not hash to its id (wholeEntry's callers). */
  misnamed(oid: string): XetError {
    return forged(this.pack.file, `the object its index names ${oid} hashes to another id`, { oid });
  }

  /**
   * The object `oid` NOT hashed, or null when the index does not list it: only for a caller that
   * proves the bytes another way (chunks/reader.ts's withheld reads hash the whole file they make
   * up). Everything else is checked as for read (sizes before any allocation, offsets, deltas).
   * The data may be a view into the pack's window: on a reader that reuses its window, it is valid
   * only until this reader's next read (a caller that copies or writes it at once, as readRange does).
   */
  readUnhashed(oid: string, maxBytes = this.maxBytes): PackObject | null {
    const at = this.index.find(oid);
    if (at === null) return null;
    return this.resolve(at, Math.min(maxBytes, this.maxBytes), oid, true);
  }

  private resolve(offset: number, limit: number, oid: string, unhashed = false): PackObject {
    // Walk down to the base, remembering each delta's entry; then apply them base-up.
    const chain: EntryHead[] = [];
    let head = this.head(offset, oid);
    const seen = new Set<number>([offset]);
    while (head.kind === OFS_DELTA || head.kind === REF_DELTA) {
      if (chain.length >= this.maxDepth) {
        throw forged(this.pack.file, `${oid} is a delta chain deeper than ${this.maxDepth}`, { oid });
      }
      chain.push(head);
      let base: number;
      if (head.kind === OFS_DELTA) base = head.baseOffset as number;
      else {
        const found = this.index.find(head.baseOid as string);
        if (found === null) {
          throw forged(this.pack.file, `${oid} is a delta against ${head.baseOid}, which the pack lacks`, { oid });
        }
        base = found;
      }
      if (seen.has(base)) throw forged(this.pack.file, `${oid} is a delta chain that loops`, { oid });
      seen.add(base);
      head = this.head(base, oid);
    }
    const type = this.wholeType(head, oid, limit);
    // A base under deltas is inflated into its own buffer: a stored view into a reused window
    // would be overwritten by the next read (the delta's).
    let data = this.inflate(head, oid, unhashed && chain.length === 0);
    for (let i = chain.length - 1; i >= 0; i--) {
      // A delta is at most a little more than its result (inserts carry a length byte per 127).
      if (chain[i].size > limit + Math.ceil(limit / 127) + 32) throw tooBig(this.pack.file, oid, chain[i].size, limit);
      data = applyDelta(data, this.inflate(chain[i], oid), limit, this.pack.file, oid);
    }
    return { type, data };
  }

  /** The entry header at `offset`: type, size and (for deltas) where the base is. */
  private head(offset: number, oid: string): EntryHead {
    const len = hashLen(this.format);
    const end = this.pack.size - len;
    if (!Number.isSafeInteger(offset) || offset < 12 || offset >= end) {
      throw forged(this.pack.file, `${oid}: offset ${offset} is outside the pack`, { oid });
    }
    const b = this.pack.read(offset, Math.min(32 + len, end - offset));
    let i = 0;
    const byte = (): number => {
      if (i >= b.length) throw forged(this.pack.file, `${oid}: a truncated entry header at ${offset}`, { oid });
      return b[i++];
    };
    let c = byte();
    const kind = (c >> 4) & 7;
    let size = c & 0x0f;
    let mul = 16;
    while (c & 0x80) {
      c = byte();
      size += (c & 0x7f) * mul;
      mul *= 128;
      if (mul > 2 ** 56) throw forged(this.pack.file, `${oid}: an entry size past 2^53 at ${offset}`, { oid });
    }
    const out: EntryHead = { kind, size, dataAt: 0 };
    if (kind === OFS_DELTA) {
      c = byte();
      let rel = c & 0x7f;
      while (c & 0x80) {
        c = byte();
        rel = (rel + 1) * 128 + (c & 0x7f);
        if (rel > offset) break;
      }
      if (rel <= 0 || rel > offset - 12) {
        throw forged(this.pack.file, `${oid}: an ofs-delta at ${offset} whose base is not before it`, { oid });
      }
      out.baseOffset = offset - rel;
    } else if (kind === REF_DELTA) {
      if (i + len > b.length) throw forged(this.pack.file, `${oid}: a truncated ref-delta at ${offset}`, { oid });
      out.baseOid = b.toString('hex', i, i + len);
      i += len;
    }
    out.dataAt = offset + i;
    return out;
  }

  /** The type of an entry stored whole (not a delta), refused when unknown or over `limit`. */
  private wholeType(h: EntryHead, oid: string, limit: number): ObjectType {
    const type = TYPES[h.kind];
    if (!type) throw forged(this.pack.file, `${oid}: an entry of unknown type ${h.kind}`, { oid });
    if (h.size > limit) throw tooBig(this.pack.file, oid, h.size, limit);
    return type;
  }

  /** The entry's zlib stream: as many bytes as deflate may make of its size, short at the pack's
   * end (a view into the window on a reader that has one). */
  private stream(h: EntryHead): Buffer {
    const end = this.pack.size - hashLen(this.format);
    return this.pack.read(h.dataAt, Math.min(zlibStreamBound(h.size), end - h.dataAt));
  }

  /** The entry's zlib stream inflated to exactly its size (sizes were checked by the caller). With
   * `unhashed`, a stream of stored blocks (how capture packs most chunks) is taken as it is, its
   * adler32 unchecked: the caller proves the bytes (readUnhashed). */
  private inflate(h: EntryHead, oid: string, unhashed = false): Buffer {
    const window = this.stream(h);
    if (unhashed) {
      const stored = storedBlocks(window, h.size);
      if (stored) return stored;
    }
    try {
      return inflateExact(window, h.size);
    } catch (e) {
      if (!(e instanceof InflateFailure)) throw e;
      throw forged(
        this.pack.file,
        `${oid}: the entry of ${h.size} bytes at ${h.dataAt} does not inflate to them (${e.message})`,
        { oid },
      );
    }
  }

  close(): void {
    this.pack.close();
    this.index.close();
  }
}

/**
 * The bytes of a zlib stream made only of stored blocks, when it is one holding exactly `size`
 * bytes (a view into `z`, no copy); null for anything else (compressed blocks, a preset dictionary,
 * a stream that is short or holds another size), which zlib then inflates. The adler32 is not
 * checked: for callers that prove the bytes otherwise.
 */
function storedBlocks(z: Buffer, size: number): Buffer | null {
  if (z.length < 2 || (z[0] & 0x0f) !== 8 || ((z[0] << 8) | z[1]) % 31 !== 0 || z[1] & 0x20) return null;
  let i = 2;
  const parts: Buffer[] = [];
  let got = 0;
  for (;;) {
    if (i + 5 > z.length) return null;
    const head = z[i];
    if ((head & 0x06) !== 0) return null; // not BTYPE 00
    const len = z[i + 1] | (z[i + 2] << 8);
    const nlen = z[i + 3] | (z[i + 4] << 8);
    if ((len ^ 0xffff) !== nlen) return null;
    i += 5;
    if (i + len > z.length || got + len > size) return null;
    parts.push(z.subarray(i, i + len));
    got += len;
    i += len;
    if (head & 0x01) break; // BFINAL
  }
  if (got !== size) return null;
  return parts.length === 1 ? parts[0] : Buffer.concat(parts, size);
}

function tooBig(file: string, oid: string, size: number, limit: number): XetError {
  return new XetError('INTEGRITY_MISMATCH', `${file}: ${oid} needs ${size} bytes, more than the ${limit} allowed`, {
    file,
    oid,
    size,
    limit,
  });
}

/** git's delta format: source size, result size (varints), then copy and insert instructions. */
export function applyDelta(base: Buffer, delta: Buffer, limit: number, file: string, oid: string): Buffer {
  let i = 0;
  const bad = (why: string): XetError => forged(file, `${oid}: a delta ${why}`, { oid });
  const varint = (): number => {
    let v = 0;
    let mul = 1;
    for (;;) {
      if (i >= delta.length) throw bad('is truncated');
      const c = delta[i++];
      v += (c & 0x7f) * mul;
      mul *= 128;
      if (!(c & 0x80)) return v;
      if (mul > 2 ** 56) throw bad('gives a size past 2^53');
    }
  };
  const src = varint();
  const dst = varint();
  if (src !== base.length) throw bad(`names a base of ${src} bytes; the base is ${base.length}`);
  if (dst > limit) throw tooBig(file, oid, dst, limit);
  const out = Buffer.allocUnsafe(dst);
  let o = 0;
  while (i < delta.length) {
    const op = delta[i++];
    if (op & 0x80) {
      let off = 0;
      let size = 0;
      for (let k = 0; k < 4; k++) {
        if (op & (1 << k)) {
          if (i >= delta.length) throw bad('is truncated');
          off += delta[i++] * 2 ** (8 * k);
        }
      }
      for (let k = 0; k < 3; k++) {
        if (op & (0x10 << k)) {
          if (i >= delta.length) throw bad('is truncated');
          size += delta[i++] << (8 * k);
        }
      }
      if (size === 0) size = 0x10000;
      if (off + size > base.length || o + size > dst) throw bad('copies past its base or its result');
      base.copy(out, o, off, off + size);
      o += size;
    } else if (op) {
      if (i + op > delta.length || o + op > dst) throw bad('inserts past its end or its result');
      delta.copy(out, o, i, i + op);
      i += op;
      o += op;
    } else throw bad('has the reserved instruction 0');
  }
  if (o !== dst) throw bad(`makes ${o} bytes, not the ${dst} it names`);
  return out;
}
