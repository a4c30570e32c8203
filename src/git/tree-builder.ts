// Tree objects from a sorted list of paths, as `git write-tree` makes them from an index: one tree
// per directory, entries in git's tree order, modes as git writes them (40000 for a tree), and the
// cache-tree that says which tree covers which entries. Capture builds its files tree here instead
// of writing thousands of loose trees through git and reading them back into its pack.
//
// Paths sorted by their bytes are already in tree order: a directory `d` sorts where `d/…` does,
// which is where git places it (it compares a tree's name as if it ended in '/').

import * as crypto from 'node:crypto';
import type { CacheTreeNode } from './index-writer';

export interface TreeInput {
  /** UTF-8 bytes, '/'-separated, sorted by bytes, no duplicates. */
  path: Buffer;
  /** 0o100644, 0o100755, 0o120000 or 0o160000. */
  mode: number;
  oid: Buffer;
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

const MODE_TEXT = new Map<number, Buffer>([
  [0o100644, Buffer.from('100644 ')],
  [0o100755, Buffer.from('100755 ')],
  [0o120000, Buffer.from('120000 ')],
  [0o160000, Buffer.from('160000 ')],
]);
const TREE_MODE = Buffer.from('40000 ');
const NUL = Buffer.from([0]);

interface Frame {
  name: Buffer;
  parts: Buffer[];
  count: number;
  children: CacheTreeNode[];
}

export function buildTrees(entries: readonly TreeInput[], format: 'sha1' | 'sha256'): TreeBuild {
  const trees: BuiltTree[] = [];
  const stack: Frame[] = [{ name: Buffer.alloc(0), parts: [], count: 0, children: [] }];
  // Where the '/' ending each open directory (the frames on the stack below the root) is, in the
  // path that opened it. The open directories are a prefix of the previous path, so a path shares
  // those whose '/' lies inside its common prefix with the previous one: found by comparing bytes,
  // without splitting every path into components.
  const openEnds: number[] = [];
  const close = (): void => {
    const f = stack.pop() as Frame;
    openEnds.pop();
    const data = Buffer.concat(f.parts);
    const raw = crypto.createHash(format).update(`tree ${data.length}\0`).update(data).digest();
    const oid = raw.toString('hex');
    trees.push({ oid, data });
    const parent = stack[stack.length - 1];
    parent.parts.push(TREE_MODE, f.name, NUL, raw);
    parent.count += f.count;
    parent.children.push({ name: f.name, entryCount: f.count, oid: raw, children: f.children });
  };
  let prev: Buffer | null = null;
  for (const e of entries) {
    const mode = MODE_TEXT.get(e.mode);
    if (!mode) throw new Error(`tree entry ${e.path.toString('utf8')} has mode ${e.mode.toString(8)}`);
    const p = e.path;
    let common = 0;
    if (prev !== null) {
      const max = Math.min(prev.length, p.length);
      while (common < max && prev[common] === p[common]) common++;
    }
    let depth = 0;
    while (depth < openEnds.length && openEnds[depth] < common) depth++;
    while (openEnds.length > depth) close();
    let from = depth ? openEnds[depth - 1] + 1 : 0;
    for (let i = p.indexOf(0x2f, from); i >= 0; i = p.indexOf(0x2f, from)) {
      stack.push({ name: p.subarray(from, i), parts: [], count: 0, children: [] });
      openEnds.push(i);
      from = i + 1;
    }
    const top = stack[stack.length - 1];
    top.parts.push(mode, p.subarray(from), NUL, e.oid);
    top.count++;
    prev = p;
  }
  while (openEnds.length) close();
  const rootFrame = stack[0];
  const data = Buffer.concat(rootFrame.parts);
  const raw = crypto.createHash(format).update(`tree ${data.length}\0`).update(data).digest();
  trees.push({ oid: raw.toString('hex'), data });
  return {
    root: raw.toString('hex'),
    trees,
    cacheTree: { name: Buffer.alloc(0), entryCount: rootFrame.count, oid: raw, children: rootFrame.children },
  };
}
