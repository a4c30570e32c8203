// Finding and reading snapshots in a repository: resolving what a user typed (full or abbreviated
// oid, or a ref) to a snapshot commit, reading and validating its manifest, listing them all.

import { XetError } from '../errors';
import { git, gitText, type GitOptions } from '../git/exec';
import { catFileBatch, listRefs } from '../git/plumbing';
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
  /** The `filemeta` blob (times, hard links; docs/FORMAT.md), absent in older snapshots. */
  filemetaBlob: string | null;
}

export async function resolveSnapshotOid(spec: string, opts: GitOptions): Promise<string> {
  if (!/^[\w./@{}^~-]+$/.test(spec) || spec.startsWith('-')) {
    throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot named ${JSON.stringify(spec)}`, { snapshot: spec });
  }
  const candidates = /^[0-9a-f]{4,64}$/.test(spec) ? [`${SNAPSHOT_REF_PREFIX}${spec}`, spec] : [spec];
  for (const c of candidates) {
    const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', `${c}^{commit}`], {
      ...opts,
      okCodes: [1, 128],
    });
    if (r.code === 0) return r.stdout.toString('utf8').trim();
  }
  if (/^[0-9a-f]{4,63}$/.test(spec)) {
    const matches = (await listRefs([SNAPSHOT_REF_PREFIX], opts)).filter((r) =>
      r.name.slice(SNAPSHOT_REF_PREFIX.length).startsWith(spec),
    );
    if (matches.length === 1) return matches[0].oid;
    if (matches.length > 1) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} is ambiguous: ${matches.length} snapshots start with it`, {
        snapshot: spec,
      });
    }
  }
  throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${spec} in this repository`, { snapshot: spec });
}

/** `validated`: this snapshot id was fully validated before (its fork base exists), so its manifest
 * (the same bytes, named by the id) is not checked against the schema again. */
export async function readSnapshot(oid: string, opts: GitOptions, validated = false): Promise<Snapshot> {
  const names = [`${oid}^{tree}`, `${oid}:manifest.json`];
  const objs = await catFileBatch(names, opts);
  const tree = objs.get(names[0]);
  const manifestObj = objs.get(names[1]);
  if (!tree) throw new XetError('SNAPSHOT_NOT_FOUND', `snapshot ${oid} is not in this repository`, { snapshot: oid });
  if (!manifestObj || manifestObj.type !== 'blob') {
    throw new XetError('SNAPSHOT_INVALID', `${oid} is not a git xet snapshot (no manifest.json)`, { snapshot: oid });
  }
  const manifest = parseManifest(manifestObj.data, `${oid.slice(0, 12)}:manifest.json`, validated);
  const entries = new Map<string, { mode: string; oid: string }>();
  const text = await gitText(['ls-tree', '-z', oid], opts);
  for (const rec of text.split('\0')) {
    if (!rec) continue;
    const tab = rec.indexOf('\t');
    const [mode, , o] = rec.slice(0, tab).split(' ');
    entries.set(rec.slice(tab + 1), { mode, oid: o });
  }
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
    manifestBytes: Buffer.from(manifestObj.data),
    filesTree: treeOf('files', true) as string,
    indexTree: treeOf('index', true) as string,
    tagsTree: treeOf('tags', false),
    objectsTree: treeOf('objects', false),
    filemetaBlob: entries.get('filemeta')?.mode === '100644' ? (entries.get('filemeta')?.oid ?? null) : null,
  };
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
    refs.map((r) => `${r.oid}:manifest.json`),
    opts,
  );
  const out: SnapshotSummary[] = [];
  for (const r of refs) {
    const o = objs.get(`${r.oid}:manifest.json`);
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
