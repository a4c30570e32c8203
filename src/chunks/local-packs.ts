// The packs of a repository's own object directory, opened for reading chunks straight out of them
// (src/git/pack-reader.ts) instead of through `git cat-file`: a whole-file read of a 143 MB file is
// ~14,500 chunks, and through cat-file each one is copied by git into a pipe, read back from it by
// this process and copied again (plus two git processes per file); read here, each is one or two
// positional reads and an inflate. chunks/reader.ts reads through it: a withheld whole file's chunks
// (not hashed one by one: the whole file's hash proves them), and the pointers, chunk lists and
// segments before them (hash-checked object by object, being small); anything these packs do not
// hold (loose objects, alternates, a lazy copy's source) is read through git instead.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitText, type GitOptions } from '../git/exec';
import { PackReader } from '../git/pack-reader';

/** Indexes larger than this are searched on disk rather than held in memory. */
const PRELOAD_MAX_OBJECTS = 4_000_000;

/** Packs given back (giveBack), by directory, format and options, for the next borrow. */
const kept = new Map<string, LocalPacks>();
const KEPT_DIRS = 4;
/** Packs not borrowed again for this long are closed: a pack deleted meanwhile (a `git gc`) keeps
 * its space while it is open (review 39: a daemon left idle held a repacked repository's old packs).
 * A capture's look-up and its handoff's push follow each other within it. */
const KEPT_MS = 10_000;
/** KEPT_MS, or the tests' shorter GIT_XET_TEST_PACKS_KEPT_MS. */
function keptMs(): number {
  const t = Number(process.env.GIT_XET_TEST_PACKS_KEPT_MS);
  return Number.isSafeInteger(t) && t > 0 ? t : KEPT_MS;
}

export class LocalPacks {
  /** Where giveBack keeps these packs (set by borrow). */
  private keptAs: string | null = null;

  private constructor(
    private readonly readers: PackReader[],
    /** Each reader's index file name (readers[i] reads files[i]). */
    private readonly files: string[] = [],
  ) {}

  /**
   * openDir, taking over the packs the last borrower of this directory gave back: a resident
   * process (the daemon) looks objects up at every capture and push, and opening a pack and loading
   * its index costs ~1.3 ms (~20 ms for a repository of 16 packs). A pack's name is its content's
   * hash, so one still listed is the one opened; one no longer listed (repacked) is closed at the
   * next borrow, and all are closed when none borrows them for KEPT_MS, so a deleted pack's space is
   * held at most that long. A borrower gives them back with giveBack.
   */
  static borrow(
    objects: string,
    format: 'sha1' | 'sha256',
    opts: { reuseWindow?: boolean; window?: number } = {},
  ): LocalPacks {
    const key = `${objects}\0${format}\0${opts.reuseWindow === true}\0${opts.window ?? 0}`;
    const reuse = kept.get(key);
    kept.delete(key);
    const packs = LocalPacks.openDir(objects, format, { ...opts, reuse });
    packs.keptAs = key;
    return packs;
  }

  /** Done with borrowed packs: kept for the next borrower (closed when not borrowed). */
  giveBack(): void {
    const key = this.keptAs;
    if (key === null) {
      this.close();
      return;
    }
    this.keptAs = null;
    kept.get(key)?.close();
    kept.delete(key);
    kept.set(key, this);
    setTimeout(() => {
      if (kept.get(key) !== this) return;
      kept.delete(key);
      this.close();
    }, keptMs()).unref();
    while (kept.size > KEPT_DIRS) {
      const oldest = kept.keys().next().value as string;
      kept.get(oldest)?.close();
      kept.delete(oldest);
    }
  }

  /** The packs of the object directory `git` reads (GIT_OBJECT_DIRECTORY honoured). A pack that
   * does not open (mid-repack, damaged, not a v2 index) is left to git. */
  static async open(git: GitOptions, format: 'sha1' | 'sha256'): Promise<LocalPacks> {
    const objects = path.resolve(
      git.cwd ?? process.cwd(),
      (await gitText(['rev-parse', '--git-path', 'objects'], git)).trim(),
    );
    return LocalPacks.openDir(objects, format);
  }

  /** The packs of the object directory `objects` (for a caller that knows it: no git asked). With
   * `reuseWindow`, each pack is read through one buffer kept for it (PackReader's reuseWindow): for
   * a caller that uses what a read returns before its next read (a restore's chunked files, ~17,000
   * chunk reads whose fresh 1 MiB windows each cost their pages' faults). `mapped`: each pack mapped
   * whole where the native module can (PackReader's mapped). `window`: the bytes read at a time
   * (1 MiB unless given). `reuse`: the same directory's packs
   * opened before with the same options, taken over (a pack's name is its content's hash, so a pack
   * still listed is the one opened; ~1.3 ms a pack to open and load its index); the ones no longer
   * listed are closed, and `reuse` is left empty. */
  static openDir(
    objects: string,
    format: 'sha1' | 'sha256',
    opts: { reuseWindow?: boolean; mapped?: boolean; window?: number; reuse?: LocalPacks } = {},
  ): LocalPacks {
    const dir = path.join(objects, 'pack');
    const readers: PackReader[] = [];
    const files: string[] = [];
    const kept = new Map<string, PackReader>();
    if (opts.reuse) {
      opts.reuse.files.forEach((f, i) => kept.set(f, opts.reuse?.readers[i] as PackReader));
      opts.reuse.readers.length = 0;
      opts.reuse.files.length = 0;
    }
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      names = [];
    }
    for (const n of names.filter((n) => /^pack-[0-9a-f]+\.idx$/.test(n)).sort()) {
      const old = kept.get(n);
      if (old) {
        kept.delete(n);
        readers.push(old);
        files.push(n);
        continue;
      }
      try {
        const r = PackReader.open(path.join(dir, n.replace(/\.idx$/, '.pack')), path.join(dir, n), format, {
          window: opts.window ?? 1 << 20,
          reuseWindow: opts.reuseWindow === true,
          mapped: opts.mapped === true,
        });
        if (r.index.count <= PRELOAD_MAX_OBJECTS) r.index.preload();
        readers.push(r);
        files.push(n);
      } catch {
        // git reads it, or says why it cannot
      }
    }
    for (const r of kept.values()) r.close();
    return new LocalPacks(readers, files);
  }

  /** The pack holding `oid`, or null. */
  find(oid: string): PackReader | null {
    for (const r of this.readers) if (r.has(oid)) return r;
    return null;
  }

  close(): void {
    for (const r of this.readers) r.close();
    this.readers.length = 0;
    this.files.length = 0;
  }
}
