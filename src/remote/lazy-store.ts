// A xet store as a lazy source: objects read one by one out of the store's packs through their
// indexes (packs/pack-<h>.idx; src/git/pack-reader.ts), never a whole pack copied.
//
// `restore --from xet::<store> --lazy` calls `lazyStoreFetch` in place of restore's `git fetch`: it
// walks from the snapshot commit (its history, trees and blobs) and copies every object into one
// local pack except the chunks, the blobs under the segment trees of the snapshot's `chunks/` tree
// (the list and segment trees do come: a reader needs them to find any chunk). A chunk read later
// (`cat`, `hydrate`) asks the `xet` chunk source for exactly the chunks it lacks, which reads only
// those from the store. Everything read is hash-checked by the pack reader (the index and the pack
// may be forged); the readers check the chunks again as they read them.
//
// A pack the store holds without an index (pushed by an older git xet) is read as before: the whole
// pack is copied and indexed by git (transfer.ts importPacks), and nothing else changes.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, type GitOptions } from '../git/exec';
import { PackReader, type PackObject } from '../git/pack-reader';
import { writePack, type PackItem } from '../git/pack-writer';
import { findRepo } from '../git/repo';
import { parseTree } from '../chunks/list-tree';
import { LAZY_SCHEMA, registerChunkSource, writeLazy, type ChunkSource, type SourceContext } from '../chunks/source';
import type { Snapshot } from '../snapshot/store';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { DirectoryStore } from './store';
import { locatePack } from './store-intents';
import { openStoreFile, storeFileExists } from './storefile';
import { importPacks } from './transfer';
import { storePathFromUrl } from './url';

/** A local pack is written every this many bytes of objects (bounds the walk's memory). */
const BATCH_BYTES = 32 * 1024 * 1024;
/** Nothing in a snapshot read this way is bigger than git's own cat-file limit here. */
const MAX_OBJECT_BYTES = 64 * 1024 * 1024;

/** What a lazy copy or a chunk fetch read from the store (for reports and measurement). */
export interface StoreReadStats {
  /** Objects copied into the local repository. */
  objects: number;
  /** Bytes read from the store's pack and index files. */
  bytesRead: number;
  /** Packs without an index, copied whole instead (the old way). */
  imported: string[];
}

/** The newest state's packs, open for reading by id; packs without an index are listed apart. */
class StorePacks {
  readonly readers: PackReader[] = [];
  readonly unindexed: string[] = [];

  constructor(
    readonly store: DirectoryStore,
    packs: string[],
  ) {
    try {
      for (const name of packs) {
        const pack = locatePack(this.store, name);
        if (!pack) {
          throw new XetError('INTEGRITY_MISMATCH', `the store names pack ${name}, which it does not hold`, {
            store: store.root,
            pack: name,
          });
        }
        // The index sits beside its pack (packs/ or trash/, where a dying gc left both).
        const idx = pack.replace(/\.pack$/, '.idx');
        if (!storeFileExists(idx)) {
          this.unindexed.push(name);
          continue;
        }
        const reader = PackReader.open(pack, idx, store.objectFormat, {
          open: openStoreFile,
          maxObjectBytes: MAX_OBJECT_BYTES,
        });
        if (reader.name !== name) {
          reader.close();
          throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} does not end with the checksum that names it`, {
            store: store.root,
            pack: name,
          });
        }
        this.readers.push(reader);
      }
    } catch (e) {
      this.close();
      throw e;
    }
  }

  static latest(store: DirectoryStore): { packs: StorePacks; refs: Record<string, string> } {
    const latest = store.latest();
    return { packs: new StorePacks(store, latest?.state.packs ?? []), refs: latest?.state.refs ?? {} };
  }

  read(oid: string): PackObject | null {
    for (const r of this.readers) {
      const got = r.read(oid);
      if (got) return got;
    }
    return null;
  }

  get bytesRead(): number {
    return this.readers.reduce((n, r) => n + r.bytesRead, 0);
  }

  close(): void {
    for (const r of this.readers.splice(0)) r.close();
  }
}

async function objectsDirOf(opts: GitOptions): Promise<string> {
  const r = await git(['rev-parse', '--path-format=absolute', '--git-common-dir'], opts);
  return path.join(r.stdout.toString('utf8').trim(), 'objects');
}

/** Objects collected into local packs, a pack per BATCH_BYTES. */
class LocalPacker {
  private items: PackItem[] = [];
  private bytes = 0;
  objects = 0;

  constructor(
    private readonly objectsDir: string,
    private readonly format: 'sha1' | 'sha256',
  ) {}

  async add(oid: string, obj: PackObject): Promise<void> {
    this.items.push({ oid, type: obj.type, data: obj.data });
    this.bytes += obj.data.length;
    this.objects++;
    if (this.bytes >= BATCH_BYTES) await this.flush();
  }

  async flush(): Promise<void> {
    if (!this.items.length) return;
    const items = this.items;
    this.items = [];
    this.bytes = 0;
    await writePack(this.objectsDir, this.format, items);
  }
}

function parseCommitLinks(data: Buffer, oid: string): { tree: string; parents: string[] } {
  const end = data.indexOf('\n\n');
  const head = data.toString('utf8', 0, end < 0 ? data.length : end).split('\n');
  let tree = '';
  const parents: string[] = [];
  for (const line of head) {
    if (line.startsWith('tree ')) tree = line.slice(5);
    else if (line.startsWith('parent ')) parents.push(line.slice(7));
  }
  if (!/^[0-9a-f]{40,64}$/.test(tree)) throw new XetError('SNAPSHOT_INVALID', `commit ${oid} names no tree`);
  return { tree, parents };
}

type Role = 'any' | 'root' | 'chunks' | 'list' | 'segment';

/**
 * restore --lazy from a xet store, in place of restore's fetch: everything the snapshot `oid`
 * reaches except its chunks, into the fresh repository at `opts`, and the snapshot's ref. `url` is
 * the `xet::` URL (relative paths against `cwd`). Returns what it read, and the store's absolute
 * URL for the lazy record.
 */
export async function lazyStoreFetch(
  url: string,
  oid: string,
  opts: GitOptions,
  cwd: string,
  signal?: AbortSignal,
): Promise<StoreReadStats & { url: string }> {
  const root = storePathFromUrl(url, cwd);
  const store = DirectoryStore.open(root);
  const ref = `${SNAPSHOT_REF_PREFIX}${oid}`;
  const { packs, refs } = StorePacks.latest(store);
  try {
    if (refs[ref] !== oid) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${oid} at xet::${root}`, { snapshot: oid, from: root });
    }
    const stats: StoreReadStats = { objects: 0, bytesRead: 0, imported: [] };
    if (packs.unindexed.length) {
      // Some pack has no index: read as before, every pack copied whole (git checks them all).
      stats.imported = await importPacks(store, await findRepo(opts.cwd as string), store.latest()?.state.packs ?? []);
    } else {
      const packer = new LocalPacker(await objectsDirOf(opts), store.objectFormat);
      await walkSnapshot(oid, packs, packer, signal);
      await packer.flush();
      stats.objects = packer.objects;
    }
    stats.bytesRead = packs.bytesRead;
    await git(['update-ref', ref, oid], opts);
    return { ...stats, url: `xet::${root}` };
  } finally {
    packs.close();
  }
}

async function walkSnapshot(oid: string, packs: StorePacks, packer: LocalPacker, signal?: AbortSignal): Promise<void> {
  const copied = new Set<string>();
  const visited = new Set<string>();
  const queue: { oid: string; role: Role }[] = [{ oid, role: 'any' }];
  const format = packs.store.objectFormat;
  while (queue.length) {
    signal?.throwIfAborted();
    const next = queue.pop() as { oid: string; role: Role };
    const key = `${next.role === 'segment' ? 's' : 'a'}${next.oid}`;
    if (visited.has(key)) continue;
    visited.add(key);
    const obj = packs.read(next.oid);
    if (!obj) {
      throw new XetError('INTEGRITY_MISMATCH', `the store lacks ${next.oid}, which snapshot ${oid} reaches`, {
        snapshot: oid,
        oid: next.oid,
      });
    }
    if (!copied.has(next.oid)) {
      copied.add(next.oid);
      await packer.add(next.oid, obj);
    }
    if (obj.type === 'commit') {
      const links = parseCommitLinks(obj.data, next.oid);
      queue.push({ oid: links.tree, role: next.oid === oid ? 'root' : 'any' });
      for (const p of links.parents) queue.push({ oid: p, role: 'any' });
    } else if (obj.type === 'tag') {
      const m = /^object ([0-9a-f]{40,64})$/m.exec(obj.data.toString('utf8', 0, Math.min(obj.data.length, 200)));
      if (m) queue.push({ oid: m[1], role: 'any' });
    } else if (obj.type === 'tree') {
      for (const e of parseTree(obj.data, format, next.oid)) {
        if (e.mode === '160000') continue; // a gitlink: not an object of this repository
        const isTree = e.mode === '40000';
        if (next.role === 'segment') continue; // its blobs are the chunks: left in the store
        const role: Role =
          next.role === 'root' && isTree && e.name === 'chunks'
            ? 'chunks'
            : next.role === 'chunks' && isTree
              ? 'list'
              : next.role === 'list' && isTree
                ? 'segment'
                : 'any';
        queue.push({ oid: e.oid, role });
      }
    }
  }
}

/** The chunk source of a lazy copy restored from a xet store: reads the chunks asked for, and only
 * those, out of the store's packs into a local pack. `stats` is what the last fetch read. */
export class StoreChunkSource implements ChunkSource {
  readonly name: string;
  stats: StoreReadStats = { objects: 0, bytesRead: 0, imported: [] };

  constructor(
    private readonly root: string,
    private readonly ctx: SourceContext,
  ) {
    this.name = `xet::${root}`;
  }

  async fetch(oids: string[], signal?: AbortSignal): Promise<void> {
    const want = [...new Set(oids)];
    if (!want.length) return;
    signal?.throwIfAborted();
    const store = DirectoryStore.open(this.root);
    const { packs } = StorePacks.latest(store);
    const stats: StoreReadStats = { objects: 0, bytesRead: 0, imported: [] };
    try {
      // A local pack per BATCH_BYTES: hydrating a 1 GiB file never holds more than that.
      const packer = new LocalPacker(await objectsDirOf(this.ctx.git), store.objectFormat);
      const missing: string[] = [];
      for (const oid of want) {
        signal?.throwIfAborted();
        const obj = packs.read(oid);
        if (obj) await packer.add(oid, obj);
        else missing.push(oid);
      }
      await packer.flush();
      stats.bytesRead = packs.bytesRead;
      stats.objects = packer.objects;
      // Chunks in packs without an index come the old way; chunks nowhere stay missing (the reader
      // then says CHUNK_MISSING, naming the chunk).
      if (missing.length && packs.unindexed.length) {
        stats.imported = await importPacks(store, await findRepo(this.ctx.git.cwd as string), packs.unindexed);
      }
    } finally {
      packs.close();
      this.stats = stats;
    }
  }
}

/**
 * restore --lazy's hook for a xet store (the shape of src/snapshot/lazy.ts's LazyRestore, plus
 * `fetch`, which takes the place of restore's `git fetch` of the snapshot: through git-remote-xet
 * that would copy every pack). `defer` is lazy.ts's step that takes the chunked files out of the
 * laid copy; the record names the store by its absolute URL, kind `xet`.
 */
export function xetLazyRestore(
  url: string,
  cwd: string,
  defer: (snap: Snapshot, worktree: string, filesIndex: string, opts: GitOptions) => Promise<string[]>,
): {
  fetchArgs: string[];
  fetch(oid: string, opts: GitOptions): Promise<void>;
  afterFetch(oid: string, opts: GitOptions): Promise<void>;
  afterLay(snap: Snapshot, worktree: string, filesIndex: string, opts: GitOptions): Promise<void>;
  afterOrigin(gitDir: string, opts: GitOptions): Promise<void>;
  result(): { source: string; deferred: string[]; store: StoreReadStats | null };
} {
  let oid = '';
  let source = url;
  let deferred: string[] = [];
  let stats: StoreReadStats | null = null;
  return {
    fetchArgs: [],
    async fetch(snapshot, opts) {
      oid = snapshot;
      const got = await lazyStoreFetch(url, snapshot, opts, cwd);
      source = got.url;
      stats = { objects: got.objects, bytesRead: got.bytesRead, imported: got.imported };
    },
    afterFetch: async () => undefined,
    async afterLay(snap, worktree, filesIndex, opts) {
      deferred = await defer(snap, worktree, filesIndex, opts);
    },
    async afterOrigin(gitDir) {
      writeLazy(gitDir, { schema: LAZY_SCHEMA, source: { kind: 'xet', url: source }, snapshot: oid, deferred });
    },
    result: () => ({ source, deferred, store: stats }),
  };
}

export function storeChunkSource(url: string, ctx: SourceContext): StoreChunkSource {
  const root = storePathFromUrl(url, (ctx.git.cwd as string | undefined) ?? process.cwd());
  if (!fs.existsSync(root)) {
    throw new XetError('STORE_UNAVAILABLE', `no xet store at ${root} (the source of this lazy copy)`, { store: root });
  }
  return new StoreChunkSource(root, ctx);
}
registerChunkSource('xet', storeChunkSource);
