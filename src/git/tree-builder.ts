// Tree objects from a sorted list of paths, as `git write-tree` makes them from an index: one tree
// per directory, entries in git's tree order, modes as git writes them (40000 for a tree), and the
// cache-tree that says which tree covers which entries. Capture builds its files tree here instead
// of writing thousands of loose trees through git and reading them back into its pack.
//
// Paths sorted by their bytes are already in tree order: a directory `d` sorts where `d/…` does,
// which is where git places it (it compares a tree's name as if it ended in '/').
//
// The input is columns (paths, modes, one buffer of ids), and the trees are built in C where the
// native module loaded (treesInto, native/xet-native.c), in JavaScript otherwise: a capture builds
// ~3,700 trees over ~34,000 entries on every run, a re-capture of ten edits too, in a process that
// has compiled nothing yet. A Buffer per entry made the garbage collector most of the old cost, and
// the loops run cold (`node bench/trees.mjs`: DESIGN-NOTES "Trees and the stat cache from columns").

import * as crypto from 'node:crypto';
import { native } from '../native';
import { copyBytes } from './copy-bytes';
import type { CacheTreeNode } from './index-writer';

/** The entries of a tree build, one column each. */
export interface TreeEntries {
  /** '/'-separated, sorted by their UTF-8 bytes, no duplicates, none a directory of another. */
  readonly paths: readonly string[];
  /** 0o100644, 0o100755, 0o120000 or 0o160000. */
  readonly modes: ArrayLike<number>;
  /** Entry k's id at k × the hash length. */
  readonly oids: Buffer;
  /** The paths as UTF-8, each ended by a NUL, when the caller has them (made here otherwise). */
  readonly names?: Buffer;
}

/** The paths as one Buffer of UTF-8 names, each ended by a NUL (a NUL cannot be in a path). A path
 * with a lone surrogate is refused: it would encode as U+FFFD's bytes, so two such paths could be
 * one name to git and two to the JavaScript build (the walk never gives one: a name that is not
 * UTF-8 is refused there). One check of the joined text (a NUL between paths pairs nothing). */
export function joinNames(paths: readonly string[]): Buffer {
  if (!paths.length) return Buffer.alloc(0);
  return Buffer.from(`${wellFormed(paths)}\0`, 'utf8');
}

/** The paths joined by NULs, once each is known to hold no lone surrogate (see joinNames). */
function wellFormed(paths: readonly string[]): string {
  const text = paths.join('\0');
  const ok = (t: string): boolean => (t as unknown as { isWellFormed(): boolean }).isWellFormed();
  if (!ok(text)) throw new Error(`${JSON.stringify(paths.find((p) => !ok(p)))} is not well-formed Unicode`);
  return text;
}

export interface BuiltTree {
  oid: string;
  data: Buffer;
}

export interface TreeBuild {
  /** The root tree's id (the empty tree's when there are no entries). */
  root: string;
  /** Every tree, children before their parents, the root last. */
  trees: BuiltTree[];
  /** The cache-tree of the same trees (for the index's TREE extension). */
  cacheTree: CacheTreeNode;
}

/** A tree entry's mode text, with its space, by mode (every file mode's is 7 bytes: tree-memo.ts
 * relies on that). */
export const MODE_TEXT = new Map<number, Uint8Array>(
  [0o100644, 0o100755, 0o120000, 0o160000].map((m) => [m, Buffer.from(`${m.toString(8)} `, 'latin1')]),
);
export const TREE_MODE = Buffer.from('40000 ', 'latin1');
/** Bytes an entry may take beyond its id: the mode, the name as UTF-8 (≤ 3 per UTF-16 unit), NUL. */
const entryBound = (name: number): number => 8 + 3 * name;
const ARENA_BYTES = 1 << 20;

/** Writes `text` from `from` as UTF-8 at `at` (room checked by the caller); returns the end. */
function writeName(dst: Buffer, at: number, text: string, from: number): number {
  for (let c = from; c < text.length; c++) {
    const u = text.charCodeAt(c);
    if (u >= 0x80) {
      const start = at - (c - from);
      return start + dst.write(text.substring(from), start, 'utf8');
    }
    dst[at++] = u;
  }
  return at;
}

interface Frame {
  /** The directory's name (its last component). */
  name: string;
  /** Where its entries start on the item stack. */
  itemStart: number;
  /** Entries (files) under it, at any depth. */
  count: number;
  children: CacheTreeNode[];
}

/**
 * The trees of `entries`. `how` is for tests: 'js' builds them in JavaScript even where the native
 * module would (both must give the same trees, byte for byte).
 */
export function buildTrees(entries: TreeEntries, format: 'sha1' | 'sha256', how: 'auto' | 'js' = 'auto'): TreeBuild {
  const { paths, modes, oids } = entries;
  const hashLen = format === 'sha256' ? 32 : 20;
  if (modes.length !== paths.length || oids.length < paths.length * hashLen)
    throw new Error(`tree build: ${paths.length} paths, ${modes.length} modes and ${oids.length / hashLen} ids`);
  if (how === 'auto') {
    const built = nativeTrees(entries, hashLen);
    if (built) return built;
  }
  if (!entries.names) wellFormed(paths); // joinNames' check, for the JavaScript build too
  return jsTrees(entries, format, hashLen);
}

const TREE_RECORD = 64;

/** The trees built by the native module, or null where it is missing or has no digest for `hashLen`. */
function nativeTrees(entries: TreeEntries, hashLen: number): TreeBuild | null {
  if (!native) return null;
  const { paths, oids } = entries;
  const names = entries.names ?? joinNames(paths);
  const modes = entries.modes instanceof Uint32Array ? entries.modes : new Uint32Array(entries.modes);
  const modeBytes = Buffer.from(modes.buffer, modes.byteOffset, modes.byteLength);
  // The first call only counts: how big the arena and the records must be.
  const sizes = Buffer.alloc(16);
  let r = native.treesInto(names, modeBytes, oids, hashLen, Buffer.alloc(0), sizes);
  if (r === -2) return null;
  if (r !== -1) throw new Error(`tree build: the native count gave ${r}`);
  const sized = new BigUint64Array(sizes.buffer, sizes.byteOffset, 2);
  const arena = Buffer.allocUnsafe(Number(sized[0]));
  const count = Number(sized[1]);
  const records = Buffer.alloc(Math.max(16, count * TREE_RECORD));
  r = native.treesInto(names, modeBytes, oids, hashLen, arena, records);
  if (r <= -4) {
    const k = -4 - r;
    throw new Error(`tree entry ${paths[k]} has mode ${modes[k].toString(8)}`);
  }
  if (r !== count) throw new Error(`tree build: the native build gave ${r} for ${count} trees`);
  const fields = new Uint32Array(records.buffer, records.byteOffset, records.length / 4);
  const trees: BuiltTree[] = new Array(count);
  // The records are in closing order (post-order): each takes its subtrees off the end of `open`.
  const open: CacheTreeNode[] = [];
  for (let t = 0; t < count; t++) {
    const f = t * (TREE_RECORD / 4);
    const id = records.subarray(t * TREE_RECORD + 32, t * TREE_RECORD + 32 + hashLen);
    trees[t] = { oid: id.toString('hex'), data: arena.subarray(fields[f], fields[f] + fields[f + 1]) };
    const children = fields[f + 3] ? open.splice(open.length - fields[f + 3]) : [];
    open.push({
      name: names.subarray(fields[f + 4], fields[f + 4] + fields[f + 5]),
      entryCount: fields[f + 2],
      oid: id,
      children,
    });
  }
  const root = open[0];
  return { root: trees[count - 1].oid, trees, cacheTree: { ...root, name: Buffer.alloc(0) } };
}

function jsTrees(entries: TreeEntries, format: 'sha1' | 'sha256', hashLen: number): TreeBuild {
  const { paths, modes, oids } = entries;
  const n = paths.length;
  const trees: BuiltTree[] = [];
  // Every directory's id, in the order they close (a subtree item names its index here).
  let treeIds = Buffer.allocUnsafe(Math.max(64, n >> 2) * hashLen);
  const treeNames: string[] = [];
  // The open directories' items: k ≥ 0 is entry k, -(t + 1) is closed directory t.
  let items = new Int32Array(Math.max(64, n + 16));
  let top = 0;
  const push = (v: number): void => {
    if (top === items.length) {
      const grown = new Int32Array(items.length * 2);
      grown.set(items);
      items = grown;
    }
    items[top++] = v;
  };
  let arena = Buffer.allocUnsafe(ARENA_BYTES);
  let used = 0;

  /** Writes the items from `from` up as one tree; its id goes to treeIds[t], returned raw. */
  const writeTree = (from: number, t: number): Buffer => {
    let bound = 0;
    for (let j = from; j < top; j++) {
      const v = items[j];
      const name = v >= 0 ? paths[v].length - paths[v].lastIndexOf('/') - 1 : treeNames[-v - 1].length;
      bound += entryBound(name) + hashLen;
    }
    if (arena.length - used < bound) {
      arena = Buffer.allocUnsafe(Math.max(ARENA_BYTES, bound));
      used = 0;
    }
    const start = used;
    let at = start;
    for (let j = from; j < top; j++) {
      const v = items[j];
      let name: string;
      let nameFrom: number;
      let mode: Uint8Array | undefined;
      let ids: Buffer;
      let id: number;
      if (v >= 0) {
        const p = paths[v];
        mode = MODE_TEXT.get(modes[v]);
        if (mode === undefined) throw new Error(`tree entry ${p} has mode ${modes[v].toString(8)}`);
        name = p;
        nameFrom = p.lastIndexOf('/') + 1;
        ids = oids;
        id = v * hashLen;
      } else {
        mode = TREE_MODE;
        name = treeNames[-v - 1];
        nameFrom = 0;
        ids = treeIds;
        id = (-v - 1) * hashLen;
      }
      // Byte loops (copy-bytes.ts), not Buffer#write/copy: those allocate a view per call in node 20.
      at += copyBytes(mode, arena, at, 0, mode.length);
      at = writeName(arena, at, name, nameFrom);
      arena[at++] = 0;
      at += copyBytes(ids, arena, at, id, id + hashLen);
    }
    used = at;
    const data = arena.subarray(start, at);
    const raw = crypto.createHash(format).update(`tree ${data.length}\0`).update(data).digest();
    if (treeIds.length < (t + 1) * hashLen) {
      const grown = Buffer.allocUnsafe(treeIds.length * 2);
      treeIds.copy(grown);
      treeIds = grown;
    }
    raw.copy(treeIds, t * hashLen);
    trees.push({ oid: raw.toString('hex'), data });
    return raw;
  };

  const root: Frame = { name: '', itemStart: 0, count: 0, children: [] };
  const stack: Frame[] = [root];
  // Where the '/' ending each open directory (the frames on the stack below the root) is, in the
  // path that opened it. The open directories are a prefix of the previous path, so a path shares
  // those whose '/' lies inside its common prefix with the previous one.
  const openEnds: number[] = [];
  const close = (): void => {
    const f = stack.pop() as Frame;
    openEnds.pop();
    const t = treeNames.length;
    treeNames.push(f.name);
    const raw = writeTree(f.itemStart, t);
    top = f.itemStart;
    push(-t - 1);
    const parent = stack[stack.length - 1];
    parent.count += f.count;
    parent.children.push({ name: Buffer.from(f.name, 'utf8'), entryCount: f.count, oid: raw, children: f.children });
  };
  let prev = '';
  // The previous path's directory, with its '/', and where that '/' is.
  let prevDir = '';
  let prevSlash = -2;
  for (let k = 0; k < n; k++) {
    const p = paths[k];
    const slash = p.lastIndexOf('/');
    // Most paths are in the directory of the one before: nothing to open or close.
    if (slash !== prevSlash || !p.startsWith(prevDir)) {
      const max = Math.min(prev.length, p.length);
      let common = 0;
      while (common < max && prev.charCodeAt(common) === p.charCodeAt(common)) common++;
      let depth = 0;
      while (depth < openEnds.length && openEnds[depth] < common) depth++;
      while (openEnds.length > depth) close();
      let from = depth ? openEnds[depth - 1] + 1 : 0;
      for (let i = p.indexOf('/', from); i >= 0; i = p.indexOf('/', from)) {
        stack.push({ name: p.substring(from, i), itemStart: top, count: 0, children: [] });
        openEnds.push(i);
        from = i + 1;
      }
      prevSlash = slash;
      prevDir = p.substring(0, slash + 1);
    }
    push(k);
    stack[stack.length - 1].count++;
    prev = p;
  }
  while (openEnds.length) close();
  const raw = writeTree(0, treeNames.length);
  return {
    root: raw.toString('hex'),
    trees,
    cacheTree: { name: Buffer.alloc(0), entryCount: root.count, oid: raw, children: root.children },
  };
}
