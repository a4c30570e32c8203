// A resident process's memo of its last tree build: when a re-capture's paths are, byte for byte,
// the last build's (files edited, none added, removed or renamed), only the trees above the
// entries whose id or mode changed are written and hashed again; every other tree is the last
// build's. On the bench tree that is ~10 of ~3,700 trees, where a whole build takes 9–20 ms of a
// daemon capture (the native build's scan of ~34,000 paths, and the fresh pages of its arena).
// Anything else builds everything (buildTrees). The result is buildTrees' to the byte: its trees,
// their order, the root and the cache-tree (test/tree-memo.test.ts checks it against whole builds
// over random trees and edits).
//
// Why patching in place is exact: with the same paths, every tree has the same entries in the same
// order with the same names; a file's mode text is 7 bytes whatever the mode ("100644 ", "100755 ",
// "120000 ", "160000 "), so each entry's mode and id sit at the same offsets as before, and only
// those bytes can differ. The layout (which entry or subtree each item is, and where its bytes
// are) is read once from the last build's own trees, checked against its cache-tree, and kept
// while the paths stay the same.

import * as crypto from 'node:crypto';
import {
  buildTrees,
  joinNames,
  MODE_TEXT,
  TREE_MODE,
  type BuiltTree,
  type TreeBuild,
  type TreeEntries,
} from './tree-builder';
import type { CacheTreeNode } from './index-writer';

const FILE_MODE_BYTES = 7;
/** Entries compared at a time when looking for changed ids (one memcmp per block). */
const COMPARE_BLOCK = 64;

/** Where every item of every tree is, for builds with these paths. Trees are numbered as
 * TreeBuild.trees (post-order: children before their parent, the root last). */
interface Layout {
  /** Tree t's items are itemFrom[t] … itemTo[t] - 1. */
  itemFrom: Int32Array;
  itemTo: Int32Array;
  /** An item's entry k (≥ 0), or -(c + 1) for subtree c. */
  itemRef: Int32Array;
  /** Where an item's mode text and its id start in its tree's data. */
  itemModeAt: Int32Array;
  itemIdAt: Int32Array;
  /** The tree entry k is directly in; a tree's parent (-1 for the root). */
  entryTree: Int32Array;
  parent: Int32Array;
}

interface Last {
  format: 'sha1' | 'sha256';
  names: Buffer;
  modes: Uint32Array;
  oids: Buffer;
  result: TreeBuild;
  /** The cache-tree's nodes by tree number. */
  nodes: CacheTreeNode[];
  /** Read from the trees when the paths are first seen again (null: not yet; false: unreadable). */
  layout: Layout | null | false;
}

export interface TreeMemoStats {
  /** Builds of every tree, and builds that reused the last one's. */
  whole: number;
  reused: number;
  /** Trees written again by the last build. */
  lastWritten: number;
}

export class TreeBuildMemo {
  private last: Last | null = null;
  readonly stats: TreeMemoStats = { whole: 0, reused: 0, lastWritten: 0 };

  /** buildTrees(entries, format), from the last build where the paths are the same. */
  build(entries: TreeEntries, format: 'sha1' | 'sha256'): TreeBuild {
    const hashLen = format === 'sha256' ? 32 : 20;
    const n = entries.paths.length;
    const names = entries.names ?? joinNames(entries.paths);
    const last = this.last;
    if (last && n > 0 && last.format === format && last.names.length === names.length && last.names.equals(names)) {
      if (last.layout === null) last.layout = readLayout(last, n, hashLen) ?? false;
      if (last.layout) return this.patch(last, last.layout, entries, hashLen);
    }
    return this.whole(entries, names, format);
  }

  /** Forgets the last build (its memory too). */
  clear(): void {
    this.last = null;
  }

  private whole(entries: TreeEntries, names: Buffer, format: 'sha1' | 'sha256'): TreeBuild {
    const result = buildTrees({ ...entries, names }, format);
    const n = entries.paths.length;
    const hashLen = format === 'sha256' ? 32 : 20;
    this.stats.whole++;
    this.stats.lastWritten = result.trees.length;
    const nodes = postOrder(result.cacheTree);
    // Kept only when the cache-tree numbers its nodes as the trees are (always, from buildTrees).
    this.last =
      n > 0 && nodes.length === result.trees.length
        ? {
            format,
            // Copies: the caller's columns are its own to reuse.
            names: Buffer.from(names),
            modes: Uint32Array.from(entries.modes),
            oids: Buffer.from(entries.oids.subarray(0, n * hashLen)),
            result,
            nodes,
            layout: null,
          }
        : null;
    return result;
  }

  private patch(last: Last, layout: Layout, entries: TreeEntries, hashLen: number): TreeBuild {
    const { paths, oids } = entries;
    const modes = entries.modes;
    const n = paths.length;
    const trees = last.result.trees;
    const dirty = new Uint8Array(trees.length);
    const changed: number[] = [];
    const mark = (k: number): void => {
      changed.push(k);
      for (let t = layout.entryTree[k]; t >= 0 && !dirty[t]; t = layout.parent[t]) dirty[t] = 1;
    };
    for (let k = 0; k < n; k++) if (modes[k] !== last.modes[k]) mark(k);
    for (let from = 0; from < n; from += COMPARE_BLOCK) {
      const to = Math.min(n, from + COMPARE_BLOCK);
      if (oids.compare(last.oids, from * hashLen, to * hashLen, from * hashLen, to * hashLen) === 0) continue;
      for (let k = from; k < to; k++) {
        if (modes[k] !== last.modes[k]) continue; // marked above
        if (oids.compare(last.oids, k * hashLen, (k + 1) * hashLen, k * hashLen, (k + 1) * hashLen) !== 0) mark(k);
      }
    }
    this.stats.reused++;
    if (!changed.length) {
      this.stats.lastWritten = 0;
      return last.result;
    }
    const newTrees: BuiltTree[] = trees.slice();
    const nodes = last.nodes.slice();
    const ids: Buffer[] = new Array(trees.length);
    let written = 0;
    // Post-order: a tree's subtrees are written before it.
    for (let t = 0; t < trees.length; t++) {
      if (!dirty[t]) continue;
      const data = Buffer.from(trees[t].data);
      const children: CacheTreeNode[] = [];
      for (let i = layout.itemFrom[t]; i < layout.itemTo[t]; i++) {
        const ref = layout.itemRef[i];
        if (ref >= 0) {
          const text = MODE_TEXT.get(modes[ref]);
          if (!text) throw new Error(`tree entry ${paths[ref]} has mode ${modes[ref].toString(8)}`);
          data.set(text, layout.itemModeAt[i]);
          oids.copy(data, layout.itemIdAt[i], ref * hashLen, (ref + 1) * hashLen);
        } else {
          const c = -ref - 1;
          if (dirty[c]) ids[c].copy(data, layout.itemIdAt[i]);
          children.push(nodes[c]);
        }
      }
      const id = crypto.createHash(last.format).update(`tree ${data.length}\0`, 'latin1').update(data).digest();
      ids[t] = id;
      newTrees[t] = { oid: id.toString('hex'), data };
      nodes[t] = { name: nodes[t].name, entryCount: nodes[t].entryCount, oid: id, children };
      written++;
    }
    const root = nodes[nodes.length - 1];
    const result: TreeBuild = { root: newTrees[newTrees.length - 1].oid, trees: newTrees, cacheTree: root };
    // The changed entries copied into the memo's own columns.
    for (const k of changed) {
      last.modes[k] = modes[k];
      oids.copy(last.oids, k * hashLen, k * hashLen, (k + 1) * hashLen);
    }
    last.result = result;
    last.nodes = nodes;
    this.stats.lastWritten = written;
    return result;
  }
}

/** The cache-tree's nodes in post-order (the order of TreeBuild.trees). */
function postOrder(root: CacheTreeNode): CacheTreeNode[] {
  const out: CacheTreeNode[] = [];
  const visit = (node: CacheTreeNode): void => {
    for (const c of node.children) visit(c);
    out.push(node);
  };
  visit(root);
  return out;
}

/** The layout of the last build's trees, or null when they do not read as this module expects
 * (then every build with these paths is a whole one). */
function readLayout(last: Last, n: number, hashLen: number): Layout | null {
  const { trees } = last.result;
  const { nodes } = last;
  const count = trees.length;
  const index = new Map<CacheTreeNode, number>();
  for (let t = 0; t < count; t++) {
    if (nodes[t].oid?.toString('hex') !== trees[t].oid) return null;
    index.set(nodes[t], t);
  }
  if (nodes[count - 1].entryCount !== n) return null;
  let items = 0;
  for (let t = 0; t < count; t++) items += nodes[t].children.length;
  items += n;
  const itemRef = new Int32Array(items);
  const itemModeAt = new Int32Array(items);
  const itemIdAt = new Int32Array(items);
  const entryTree = new Int32Array(n).fill(-1);
  const parent = new Int32Array(count).fill(-1);
  const start = new Int32Array(count);
  // Parents before their children: from the root down (reverse post-order).
  let next = 0;
  const itemFrom = new Int32Array(count);
  const itemTo = new Int32Array(count);
  for (let t = count - 1; t >= 0; t--) {
    const data = trees[t].data;
    const node = nodes[t];
    let pos = start[t];
    let child = 0;
    let o = 0;
    itemFrom[t] = next;
    while (o < data.length) {
      const space = data.indexOf(0x20, o);
      const nul = space < 0 ? -1 : data.indexOf(0, space + 1);
      if (nul < 0 || nul + 1 + hashLen > data.length) return null;
      if (next >= items) return null;
      itemModeAt[next] = o;
      itemIdAt[next] = nul + 1;
      if (space - o + 1 === TREE_MODE.length && data.compare(TREE_MODE, 0, TREE_MODE.length, o, space + 1) === 0) {
        const c = index.get(node.children[child++]);
        if (c === undefined || c >= t) return null;
        start[c] = pos;
        parent[c] = t;
        pos += nodes[c].entryCount;
        itemRef[next] = -(c + 1);
      } else {
        if (space - o + 1 !== FILE_MODE_BYTES || pos >= n) return null;
        entryTree[pos] = t;
        itemRef[next] = pos++;
      }
      next++;
      o = nul + 1 + hashLen;
    }
    if (child !== node.children.length || pos !== start[t] + node.entryCount) return null;
    itemTo[t] = next;
  }
  if (next !== items) return null;
  for (let k = 0; k < n; k++) if (entryTree[k] < 0) return null;
  return { itemFrom, itemTo, itemRef, itemModeAt, itemIdAt, entryTree, parent };
}
