// Finding and reading snapshots in a repository: resolving what a user typed (full or abbreviated
// oid, or a ref) to a snapshot commit, reading and validating its manifest, listing them all.

import { XetError } from '../errors';
import { git, gitText, type GitOptions } from '../git/exec';
import { catFileBatch, listRefs, parseTopListing } from '../git/plumbing';
import { parseManifest, type Manifest } from './manifest';
import { SNAPSHOT_REF_PREFIX } from './refs';

export interface Snapshot {
  oid: string;
  manifest: Manifest;
  /** Raw manifest bytes (hashed by handoffs). */
  manifestBytes: Buffer;
  filesTree: string;
  indexTree: string;
  tagsTree: string | null;
  objectsTree: string | null;
  /** The `filemeta` entry (times, hard links; docs/FORMAT.md): a blob, or a tree of parts (v4);
   * absent in older snapshots. */
  filemeta: string | null;
  /** The `chunks/` tree (chunk lists of chunked files, v3), absent without chunked files. */
  chunksTree: string | null;
}

/** A snapshot ref is named by the id of the commit it points to. Refs arrive by plain `git fetch`
 * from anyone, so one that points elsewhere is refused wherever refs are read. */
export function snapshotRefIsSound(r: { name: string; oid: string }): boolean {
  return r.name === `${SNAPSHOT_REF_PREFIX}${r.oid}`;
}

function misnamedRef(r: { name: string; oid: string }): XetError {
  const id = r.name.slice(SNAPSHOT_REF_PREFIX.length);
  return new XetError(
    'INTEGRITY_MISMATCH',
    `the ref ${r.name} points at ${r.oid}, not at the commit its name says; it was not made by git xet (delete it with git update-ref -d)`,
    { snapshot: id, ref: r.name, oid: r.oid },
  );
}

async function commitOf(spec: string, opts: GitOptions): Promise<string | null> {
  const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', `${spec}^{commit}`], {
    ...opts,
    okCodes: [1, 128],
  });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : null;
}

export async function resolveSnapshotOid(spec: string, opts: GitOptions): Promise<string> {
  if (!/^[\w./@{}^~-]+$/.test(spec) || spec.startsWith('-')) {
    throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot named ${JSON.stringify(spec)}`, { snapshot: spec });
  }
  // A snapshot ref typed by name means the id in its name, never where the ref happens to point.
  const asRef = /^(?:refs\/)?xet\/snapshots\/([0-9a-f]{4,64})$/.exec(spec);
  if (asRef) return resolveSnapshotOid(asRef[1], opts);
  if (/^[0-9a-f]{4,64}$/.test(spec)) {
    // A full id names an object: that object it is, whatever a ref of the same name says.
    if (spec.length === 40 || spec.length === 64) {
      if ((await commitOf(spec, opts)) === spec) return spec;
    }
    const matches = (await listRefs([SNAPSHOT_REF_PREFIX], opts)).filter((r) =>
      r.name.slice(SNAPSHOT_REF_PREFIX.length).startsWith(spec),
    );
    const bad = matches.find((r) => !snapshotRefIsSound(r));
    if (bad) throw misnamedRef(bad);
    if (matches.length === 1) return matches[0].oid;
    if (matches.length > 1) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} is ambiguous: ${matches.length} snapshots start with it`, {
        snapshot: spec,
      });
    }
  }
  const oid = await commitOf(spec, opts);
  if (oid) return oid;
  throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${spec} in this repository`, { snapshot: spec });
}

/** The `filemeta` entry's oid: a blob, or a tree of parts (v4). Another mode is no filemeta, as
 * before trees of parts existed. */
function filemetaOf(e: { mode: string; oid: string } | undefined): string | null {
  return e && (e.mode === '100644' || e.mode === '040000') ? e.oid : null;
}

/** `validated`: this snapshot id was fully validated before (its fork base exists), so its manifest
 * (the same bytes, named by the id) is not checked against the schema again. */
export async function readSnapshot(oid: string, opts: GitOptions, validated = false): Promise<Snapshot> {
  const names = [`${oid}^{tree}`, `${oid}:manifest.json`];
  const objs = await catFileBatch(names, opts);
  const tree = objs.get(names[0]);
  const manifestObj = objs.get(names[1]);
  for (const [name, size] of objs.oversized) {
    throw new XetError('SNAPSHOT_INVALID', `${name} is ${size} bytes, larger than any snapshot's (a forged ref?)`, {
      snapshot: oid,
      size,
    });
  }
  if (!tree) throw new XetError('SNAPSHOT_NOT_FOUND', `snapshot ${oid} is not in this repository`, { snapshot: oid });
  if (!manifestObj || manifestObj.type !== 'blob') {
    throw new XetError('SNAPSHOT_INVALID', `${oid} is not a git xet snapshot (no manifest.json)`, { snapshot: oid });
  }
  const entries = parseTopListing(await gitText(['ls-tree', '-z', oid], opts));
  return snapshotOf(oid, Buffer.from(manifestObj.data), entries, validated);
}

/** A snapshot from its manifest's bytes and its tree's top entries (by name: mode as `ls-tree`
 * prints it, id). */
function snapshotOf(
  oid: string,
  manifestBytes: Buffer,
  entries: ReadonlyMap<string, { mode: string; oid: string }>,
  validated: boolean,
): Snapshot {
  const manifest = parseManifest(manifestBytes, `${oid.slice(0, 12)}:manifest.json`, validated);
  const treeOf = (name: string, required: boolean): string | null => {
    const e = entries.get(name);
    if (!e || e.mode !== '040000') {
      if (required) throw new XetError('SNAPSHOT_INVALID', `snapshot ${oid} has no ${name}/ tree`, { snapshot: oid });
      return null;
    }
    return e.oid;
  };
  return {
    oid,
    manifest,
    manifestBytes,
    filesTree: treeOf('files', true) as string,
    indexTree: treeOf('index', true) as string,
    tagsTree: treeOf('tags', false),
    objectsTree: treeOf('objects', false),
    filemeta: filemetaOf(entries.get('filemeta')),
    chunksTree: treeOf('chunks', false),
  };
}

/** Snapshots this process wrote, by repository and id: what a resident process's next line reads
 * (a handoff of the snapshot it just captured, without five git processes; its next capture, the
 * top of its last snapshot: previous-tree.ts). A commit's id fixes its tree and manifest, so what is
 * kept can be wrong only about whether the commit is still in the repository: it is given only for
 * an id the caller has just found there, or that a ref was just seen to reach. */
const written = new Map<
  string,
  { manifestBytes: Buffer; entries: Map<string, { mode: string; type: string; oid: string }> }
>();
const WRITTEN_KEPT = 8;

/** What capture wrote: snapshot `oid` in the repository at `commonDir`, its manifest's bytes and
 * its tree's entries (modes as `ls-tree` prints them). */
export function rememberSnapshot(
  commonDir: string,
  oid: string,
  manifestBytes: Buffer,
  top: readonly { name: string; mode: string; type: string; oid: string }[],
): void {
  if (written.size >= WRITTEN_KEPT) written.delete(written.keys().next().value as string);
  const entries = new Map(
    top.map((e) => [e.name, { mode: e.type === 'tree' ? '040000' : e.mode, type: e.type, oid: e.oid }]),
  );
  written.set(`${commonDir}\0${oid}`, { manifestBytes: Buffer.from(manifestBytes), entries });
}

/** The top entries of snapshot `oid` if this process wrote it (rememberSnapshot), else undefined. */
export function writtenSnapshotTop(
  commonDir: string,
  oid: string,
): Map<string, { mode: string; type: string; oid: string }> | undefined {
  return written.get(`${commonDir}\0${oid}`)?.entries;
}

/** readSnapshot of a commit the caller has just found in the repository at `commonDir`
 * (resolveSnapshotOid), from what this process wrote when it can. */
export async function readFoundSnapshot(commonDir: string, oid: string, opts: GitOptions): Promise<Snapshot> {
  const kept = written.get(`${commonDir}\0${oid}`);
  if (kept) return snapshotOf(oid, Buffer.from(kept.manifestBytes), kept.entries, true);
  return readSnapshot(oid, opts);
}

export interface SnapshotSummary {
  snapshot: string;
  createdAt: string;
  message: string;
  head: string;
  files: number;
  bytes: number;
}

export async function listSnapshots(opts: GitOptions): Promise<SnapshotSummary[]> {
  const refs = await listRefs([SNAPSHOT_REF_PREFIX], opts);
  const objs = await catFileBatch(
    refs.filter(snapshotRefIsSound).map((r) => `${r.oid}:manifest.json`),
    opts,
  );
  const out: SnapshotSummary[] = [];
  for (const r of refs) {
    if (!snapshotRefIsSound(r)) {
      out.push({
        snapshot: r.name.slice(SNAPSHOT_REF_PREFIX.length),
        createdAt: '',
        message: `(invalid ref: points at ${r.oid})`,
        head: '',
        files: 0,
        bytes: 0,
      });
      continue;
    }
    const o = objs.get(`${r.oid}:manifest.json`);
    const big = objs.oversized.get(`${r.oid}:manifest.json`);
    if (big !== undefined) {
      const message = `(unreadable manifest: ${big} bytes)`;
      out.push({ snapshot: r.oid, createdAt: '', message, head: '', files: 0, bytes: 0 });
      continue;
    }
    if (!o) continue;
    try {
      const m = parseManifest(o.data);
      out.push({
        snapshot: r.oid,
        createdAt: m.createdAt,
        message: m.message,
        head: m.head.kind === 'branch' ? m.head.ref : `detached ${m.head.oid}`,
        files: m.counts.files,
        bytes: m.counts.bytes,
      });
    } catch {
      // A snapshot from a newer git xet, or a damaged one: still listed, flagged.
      out.push({ snapshot: r.oid, createdAt: '', message: '(unreadable manifest)', head: '', files: 0, bytes: 0 });
    }
  }
  out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
  return out;
}
