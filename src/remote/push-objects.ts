// Which objects a push to a directory store must send, found by comparing trees instead of walking
// history: the store holds everything reachable from its refs, so a new snapshot needs only its
// commit and what its tree holds that the store's newest snapshots' trees do not (a subtree whose
// id one of them has at the same path is the store's already, whole). The walk reads only the trees
// along the paths that changed, through one `git cat-file --batch-command` (object-reader.ts), a
// level at a time.
//
// It covers the pushes git xet makes: new snapshot and handoff commits (and signatures, task
// records, pins, or a branch's new commit) whose parents the store has or the same push sends. For
// anything else (a commit whose parents the store lacks, an annotated tag, an object bigger than
// its kind ever is, a store tip that is not a commit here) it answers null and the caller walks
// with pack-objects --revs as before (transfer.ts). Sending an object the store has is only bytes;
// leaving one out would break the store, so every shortcut here only ever skips an object whose id
// a tree or commit the store holds names.

import { ObjectReader, TooBig, type ObjectContents, type ObjectInfo } from '../git/object-reader';
import { LocalFirstObjectReader } from './local-object-reader';
import type { GitOptions } from '../git/exec';
import { parseTreeObject, walkTreeObject } from '../git/tree-object';

/** A commit or a tree is never bigger than this in a repository git xet made (a tree of 100,000
 * entries is ~4 MB); a bigger one is not worth a shortcut. */
const MAX_TREE_BYTES = 64 * 1024 * 1024;
const MAX_COMMIT_BYTES = 1024 * 1024;

/** What the comparison asks of an object reader. */
interface Reader {
  info(oids: string[]): Promise<(ObjectInfo | null)[]>;
  contents(oids: string[], max: number): Promise<(ObjectContents | null)[]>;
  close(): void;
}

/** How many of a directory's bases are parsed to find its unchanged entries by name. */
const NEAR_BASES = 2;

/**
 * Of `wanted` ids, those some tree of `trees` names (raw tree bytes; null: none), and for each tree
 * the subtree ids it names under `names` (in the order of `trees`), read without a string or an
 * object per entry but for those. A tree that does not parse is refused (TooBig: walk instead).
 */
function idsNamed(
  trees: (Buffer | null)[],
  wanted: Set<string>,
  names: Set<string>,
  oidBytes: number,
): { ids: Set<string>; subtrees: Map<string, string>[] } {
  const prefixes = new Set<number>();
  for (const w of wanted) prefixes.add(Number.parseInt(w.slice(0, 8), 16));
  const ids = new Set<string>();
  const subtrees: Map<string, string>[] = [];
  for (const data of trees) {
    const sub = new Map<string, string>();
    subtrees.push(sub);
    if (!data) continue;
    const complete = walkTreeObject(data, oidBytes, (at, sp, nul) => {
      if (prefixes.has(data.readUInt32BE(nul + 1))) {
        const id = data.toString('hex', nul + 1, nul + 1 + oidBytes);
        if (wanted.has(id)) ids.add(id);
      }
      // A tree's entry: "40000 " as git writes it ("040000" too); the '4' is tested first, so a
      // blob's "100644" makes no string.
      const mode = sp - at;
      if (
        names.size &&
        (mode === 5 || mode === 6) &&
        data[sp - 5] === 0x34 &&
        isTreeMode(data.toString('latin1', at, sp))
      ) {
        const name = data.toString('latin1', sp + 1, nul);
        if (names.has(name)) sub.set(name, data.toString('hex', nul + 1, nul + 1 + oidBytes));
      }
    });
    if (!complete) throw new TooBig('a base tree does not parse');
  }
  return { ids, subtrees };
}

/** Whether a tree entry's mode is a tree's ('40000' as git writes it, '040000' as ls-tree prints it). */
function isTreeMode(mode: string): boolean {
  return mode === '40000' || mode === '040000';
}

export interface PushObject {
  oid: string;
  /** The name it has in its tree, a character per byte (pack-objects' delta heuristics); '' for commits
   * and root trees. */
  name: string;
}

interface Commit {
  tree: string;
  parents: string[];
  time: number;
}

function parseCommit(o: ObjectContents): Commit | null {
  if (o.type !== 'commit') return null;
  const text = o.data.toString('latin1');
  const end = text.indexOf('\n\n');
  const head = (end < 0 ? text : text.slice(0, end)).split('\n');
  const tree = /^tree ([0-9a-f]+)$/.exec(head[0] ?? '')?.[1];
  if (!tree) return null;
  const parents: string[] = [];
  let time = 0;
  for (const line of head.slice(1)) {
    const p = /^parent ([0-9a-f]+)$/.exec(line);
    if (p) parents.push(p[1]);
    const c = /^committer .* (\d+) [+-]\d{4}$/.exec(line);
    if (c) time = Number(c[1]);
  }
  return { tree, parents, time };
}

/**
 * The objects reachable from `tips` that the store (`storeRefs`) may lack, by tree comparison
 * against up to `bases` of the store's newest snapshots; null when the push is not of a shape this
 * covers (the caller then walks).
 */
export async function objectsToPush(
  o: GitOptions,
  tips: string[],
  storeRefs: Record<string, string>,
  bases: number,
  objectFormat: 'sha1' | 'sha256',
  /** The repository's object directory, to read there first (local-object-reader.ts). */
  objectsDir?: string,
): Promise<PushObject[] | null> {
  const reader: Reader = objectsDir ? new LocalFirstObjectReader(o, objectsDir, objectFormat) : new ObjectReader(o);
  try {
    return await compare(reader, tips, storeRefs, bases, objectFormat === 'sha256' ? 32 : 20);
  } catch (e) {
    if (e instanceof TooBig) return null;
    throw e;
  } finally {
    reader.close();
  }
}

async function readCommits(reader: Reader, oids: string[]): Promise<Map<string, Commit>> {
  const out = new Map<string, Commit>();
  const infos = await reader.info(oids);
  // Only commits of a commit's size are read: a store's ref may name anything here (a big blob).
  const wanted = oids.filter((_, i) => infos[i]?.type === 'commit' && (infos[i]?.size ?? 0) <= MAX_COMMIT_BYTES);
  const objs = await reader.contents(wanted, MAX_COMMIT_BYTES);
  wanted.forEach((oid, i) => {
    const c = objs[i] ? parseCommit(objs[i] as ObjectContents) : null;
    if (c) out.set(oid, c);
  });
  return out;
}

async function compare(
  reader: Reader,
  tips: string[],
  storeRefs: Record<string, string>,
  bases: number,
  oidBytes: number,
): Promise<PushObject[] | null> {
  const storeTips = new Set(Object.values(storeRefs));
  const storeSnapshots = [
    ...new Set(
      Object.entries(storeRefs)
        .filter(([name]) => name.startsWith('refs/xet/snapshots/'))
        .map(([, oid]) => oid),
    ),
  ];
  const fresh = [...new Set(tips)].filter((t) => !storeTips.has(t));
  if (!fresh.length) return [];
  const [mine, theirs] = await Promise.all([readCommits(reader, fresh), readCommits(reader, storeSnapshots)]);
  // Every tip must be a commit (an annotated tag, a tree or a blob as a tip: walk instead).
  if (mine.size !== fresh.length) return null;
  // Commits the store has for certain: its tips and their parents (the parents of its snapshots are
  // the repository's commits of the time; a new snapshot usually has the same).
  const known = new Set(storeTips);
  for (const c of theirs.values()) for (const p of c.parents) known.add(p);
  const sending = new Set(fresh);
  for (const c of mine.values()) {
    if (c.parents.some((p) => !known.has(p) && !sending.has(p))) return null;
  }
  const newest = [...theirs.entries()]
    .sort((a, b) => b[1].time - a[1].time)
    .slice(0, bases)
    .map(([, c]) => c.tree);

  const out: PushObject[] = [];
  const seen = new Set<string>();
  const add = (oid: string, name: string) => {
    if (seen.has(oid)) return false;
    seen.add(oid);
    out.push({ oid, name });
    return true;
  };
  // The trees each new commit's tree is compared with: the store's newest snapshots' trees for a
  // snapshot (whose parents' trees hold the repository's paths, not files/ and index/), else its
  // parents' trees (a handoff's parent is its snapshot; a branch commit's is the last one). A parent
  // this push sends is a base too: its objects are in this pack.
  const parentTrees = await readCommits(
    reader,
    [...new Set([...mine.values()].flatMap((c) => c.parents))].filter((p) => !mine.has(p)),
  );
  // A snapshot's files/ and index/ hold its parents' paths: their trees are bases there too (a first
  // snapshot pushed to a store that has the branch it was taken on sends only the work in progress).
  let level: { tree: string; bases: string[]; name: string; below?: string[] }[] = [];
  for (const tip of fresh) {
    const c = mine.get(tip) as Commit;
    add(tip, '');
    const parents = c.parents
      .map((p) => mine.get(p)?.tree ?? parentTrees.get(p)?.tree)
      .filter((t): t is string => t !== undefined);
    level.push({ tree: c.tree, bases: [...new Set([...newest, ...parents])], name: '', below: parents });
  }
  // Each tree's bytes as read (null: not a tree here), and parsed only where entries by name are
  // needed: the new trees and the nearest bases. A directory every snapshot changed (the bench's
  // lodash/, 1,000 entries) has 16 different base trees; parsing them all made ~16,000 strings and
  // objects per push, most of its time in the garbage collector.
  const raw = new Map<string, Buffer | null>();
  const parsedTrees = new Map<string, Map<string, { mode: string; oid: string }>>();
  const parsed = (oid: string): Map<string, { mode: string; oid: string }> => {
    let entries = parsedTrees.get(oid);
    if (entries) return entries;
    entries = new Map();
    const data = raw.get(oid);
    if (data) {
      // Names by their bytes: two that differ only in bytes that are not UTF-8 are two entries
      // (decoded, they were one, and the other's objects were never sent: review 39).
      const tree = parseTreeObject(data, oidBytes, 'latin1');
      if (!tree.complete) throw new TooBig(`tree ${oid} does not parse`);
      for (const e of tree.entries) entries.set(e.name, { mode: e.mode, oid: e.oid });
    }
    parsedTrees.set(oid, entries);
    return entries;
  };
  while (level.length) {
    // Every tree of this level not read yet, new ones and bases, in one batch.
    const unread = [...new Set(level.flatMap((l) => [l.tree, ...l.bases]))].filter((t) => !raw.has(t));
    const objs = await reader.contents(unread, MAX_TREE_BYTES);
    unread.forEach((oid, i) => {
      const obj = objs[i];
      if (obj && obj.type === 'tree') raw.set(oid, obj.data);
      else if (level.some((l) => l.tree === oid)) {
        // A tree of the push itself that this repository lacks or that is no tree: walk instead.
        throw new TooBig(`tree ${oid} is missing`);
      } else raw.set(oid, null);
    });
    const next: typeof level = [];
    for (const l of level) {
      if (l.bases.includes(l.tree) || !add(l.tree, l.name)) continue;
      const entries = [...parsed(l.tree)];
      // An id a base names is the store's, with everything under it. Most entries are named the
      // same in one of the nearest bases; the others are looked for in every base's bytes.
      const near = l.bases.slice(0, NEAR_BASES).map(parsed);
      const missed = entries.filter(([name, e]) => !near.some((m) => m.get(name)?.oid === e.oid));
      if (!missed.length) continue;
      const named = idsNamed(
        l.bases.map((b) => raw.get(b) ?? null),
        new Set(missed.map(([, e]) => e.oid)),
        new Set(missed.filter(([, e]) => isTreeMode(e.mode)).map(([name]) => name)),
        oidBytes,
      );
      for (const [name, e] of missed) {
        if (named.ids.has(e.oid)) continue;
        if (e.mode === '160000') continue; // a gitlink names a commit of another repository
        if (isTreeMode(e.mode)) {
          const sub = named.subtrees.map((m) => m.get(name)).filter((x): x is string => x !== undefined);
          if (l.below && (name === 'files' || name === 'index')) sub.push(...l.below);
          next.push({ tree: e.oid, bases: [...new Set(sub)], name });
        } else add(e.oid, name);
      }
    }
    level = next;
  }
  return out;
}
