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
import { parseTreeObject } from '../git/tree-object';

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

export interface PushObject {
  oid: string;
  /** The name it has in its tree (pack-objects' delta heuristics); '' for commits and root trees. */
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
  const treeCache = new Map<string, Map<string, { mode: string; oid: string }>>();
  while (level.length) {
    // Every tree of this level not read yet, new ones and bases, in one batch.
    const unread = [...new Set(level.flatMap((l) => [l.tree, ...l.bases]))].filter((t) => !treeCache.has(t));
    const objs = await reader.contents(unread, MAX_TREE_BYTES);
    unread.forEach((oid, i) => {
      const obj = objs[i];
      const entries = new Map<string, { mode: string; oid: string }>();
      if (obj && obj.type === 'tree') {
        const parsed = parseTreeObject(obj.data, oidBytes);
        if (!parsed.complete) throw new TooBig(`tree ${oid} does not parse`);
        for (const e of parsed.entries) entries.set(e.name, { mode: e.mode, oid: e.oid });
      } else if (level.some((l) => l.tree === oid)) {
        // A tree of the push itself that this repository lacks or that is no tree: walk instead.
        throw new TooBig(`tree ${oid} is missing`);
      }
      treeCache.set(oid, entries);
    });
    const next: typeof level = [];
    for (const l of level) {
      if (l.bases.includes(l.tree) || !add(l.tree, l.name)) continue;
      const baseEntries = l.bases.map((b) => treeCache.get(b) as Map<string, { mode: string; oid: string }>);
      const held = new Set<string>();
      for (const m of baseEntries) for (const e of m.values()) held.add(e.oid);
      for (const [name, e] of treeCache.get(l.tree) as Map<string, { mode: string; oid: string }>) {
        // An id a base names is the store's, with everything under it.
        if (held.has(e.oid)) continue;
        if (e.mode === '160000') continue; // a gitlink names a commit of another repository
        if (e.mode === '40000' || e.mode === '040000') {
          const sub = baseEntries
            .map((m) => m.get(name))
            .filter((x): x is { mode: string; oid: string } => !!x && (x.mode === '40000' || x.mode === '040000'))
            .map((x) => x.oid);
          if (l.below && (name === 'files' || name === 'index')) sub.push(...l.below);
          next.push({ tree: e.oid, bases: [...new Set(sub)], name });
        } else add(e.oid, name);
      }
    }
    level = next;
  }
  return out;
}
