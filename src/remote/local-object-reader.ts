// The push's tree comparison (push-objects.ts) reads a few dozen commits and trees, a level at a
// time. Through `git cat-file --batch-command` that was a process started for each push and a round
// trip per level (~40 ms of a relayed `handoff create --push`'s ~150 ms here); this reader answers
// from the repository's own object directory instead: its loose objects (what capture and handoff
// create just wrote) and its packs (src/git/pack-reader.ts, every object hashed to its id), and
// asks git, through one ObjectReader started only then, for whatever it does not find or cannot
// read here (an object in an alternate, a pack mid-repack, one bigger than it reads here).
//
// The same answers as ObjectReader's for every object either reads: the type, the size and the
// bytes of an object are its id's. `diskSize` is not known here: 0 (the comparison does not read
// it; the allowance's estimate asks git).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { LocalPacks } from '../chunks/local-packs';
import type { GitOptions } from '../git/exec';
import { ObjectReader, type ObjectContents, type ObjectInfo } from '../git/object-reader';

/** What info() reads here to answer (a commit's or a tree's size); a bigger object's info is git's. */
const INFO_READ_BYTES = 1024 * 1024;
const TYPES = new Set(['commit', 'tree', 'blob', 'tag']);

export class LocalFirstObjectReader {
  private packs: LocalPacks | null = null;
  private git: ObjectReader | null = null;

  constructor(
    private readonly opts: GitOptions,
    private readonly objectsDir: string,
    private readonly format: 'sha1' | 'sha256',
  ) {}

  /** As ObjectReader.info. */
  async info(oids: string[]): Promise<(ObjectInfo | null)[]> {
    const here = oids.map((oid) => this.local(oid, INFO_READ_BYTES));
    const rest = oids.filter((_, i) => !here[i]);
    const asked = rest.length ? await this.fallback().info(rest) : [];
    let k = 0;
    return here.map((h) => {
      if (!h) return asked[k++];
      return { oid: h.oid, type: h.type, size: h.size, diskSize: 0 };
    });
  }

  /**
   * As info, reading here at most `budget` bytes of objects in all: what is past it (or bigger than
   * what is left of it) is git's to answer, from headers only. For a reader that checks a total
   * against a limit before reading (a snapshot's filemeta, hostile until checked: review 50 found
   * info reading 3,000 forged parts of 1 MiB, 3 GB, before the limit refused them). The objects
   * read are kept for the next contents() that asks for them (read once, not twice).
   */
  async infoWithin(oids: string[], budget: number): Promise<(ObjectInfo | null)[]> {
    let left = budget;
    const here = oids.map((oid) => {
      if (left <= 0) return null;
      const h = this.local(oid, Math.min(INFO_READ_BYTES, left));
      if (!h) return null;
      left -= h.size;
      this.held.set(oid, h);
      return { oid: h.oid, type: h.type, size: h.size, diskSize: 0 };
    });
    const rest = oids.filter((_, i) => !here[i]);
    const asked = rest.length ? await this.fallback().info(rest) : [];
    let k = 0;
    return here.map((h) => (h ? h : asked[k++]));
  }

  /** Objects infoWithin read, until contents takes them. */
  private readonly held = new Map<string, ObjectContents>();

  /** As ObjectReader.contents (an object over `max` is git's to refuse: TooBig). */
  async contents(oids: string[], max: number): Promise<(ObjectContents | null)[]> {
    const here = oids.map((oid) => {
      const h = this.held.get(oid);
      this.held.delete(oid);
      return h && h.size <= max ? h : this.local(oid, max);
    });
    const rest = oids.filter((_, i) => !here[i]);
    const asked = rest.length ? await this.fallback().contents(rest, max) : [];
    let k = 0;
    return here.map((h) => (h ? h : asked[k++]));
  }

  close(): void {
    this.held.clear();
    // Kept open for the next reader (a resident process pushes again and again).
    this.packs?.giveBack();
    this.packs = null;
    this.git?.close();
  }

  private fallback(): ObjectReader {
    this.git ??= new ObjectReader(this.opts);
    return this.git;
  }

  /** The object read here, or null: git is asked (not here, over `max`, or not readable here). */
  private local(oid: string, max: number): ObjectContents | null {
    if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(oid) || oid.length !== (this.format === 'sha256' ? 64 : 40)) return null;
    // One window per pack, reused, of 64 KiB: read() returns objects of their own (inflated, or
    // made from deltas), never views into it; a fresh 1 MiB window per object copied ~100 MiB a
    // push, and a mapping would keep a deleted pack's space until the garbage collector ran.
    this.packs ??= LocalPacks.borrow(this.objectsDir, this.format, { reuseWindow: true, window: 64 * 1024 });
    // Packs first: most objects are packed, and a loose lookup is a system call each.
    try {
      const got = this.packs.find(oid)?.read(oid, max);
      if (got) return { oid, type: got.type, size: got.data.length, diskSize: 0, data: got.data };
    } catch {
      return null; // too big for `max`, or not readable here (a pack replaced meanwhile): git's
    }
    return this.loose(oid, max);
  }

  private loose(oid: string, max: number): ObjectContents | null {
    const file = path.join(this.objectsDir, oid.slice(0, 2), oid.slice(2));
    let z: Buffer;
    try {
      // Most ids are packed: no exception made for each one not found loose.
      const st = fs.statSync(file, { throwIfNoEntry: false });
      // Deflate makes at most a little more than it is given: a bigger file is not one to read here.
      if (!st || !st.isFile() || st.size > max + (max >> 8) + 1024) return null;
      z = fs.readFileSync(file);
    } catch {
      return null;
    }
    let raw: Buffer;
    try {
      raw = zlib.inflateSync(z, { maxOutputLength: max + 64 });
    } catch {
      return null;
    }
    const nul = raw.indexOf(0);
    // git's own header: no leading zero in the size (git calls such an object missing).
    const m = nul > 0 ? /^([a-z]+) (0|[1-9]\d*)$/.exec(raw.toString('latin1', 0, nul)) : null;
    if (!m || !TYPES.has(m[1]) || Number(m[2]) !== raw.length - nul - 1 || Number(m[2]) > max) return null;
    if (crypto.createHash(this.format).update(raw).digest('hex') !== oid) return null;
    const data = Buffer.from(raw.subarray(nul + 1));
    return { oid, type: m[1], size: data.length, diskSize: 0, data };
  }
}
