// A snapshot's chunked files: which `files/` entries are pointers (the manifest's `chunked` list,
// nothing else), their pointers read and checked in one batch, and each pointer's list checked to be
// an entry of the snapshot's `chunks/` tree (so it travels with the snapshot). Every reader of
// `files/` (restore, verify, diff, export, archive, cat) asks here, and compares files by
// `contentId`: the same bytes are the same file whether stored whole or as chunks.

import { XetError } from '../errors';
import { gitZ, type GitOptions } from '../git/exec';
import { catFileBatch } from '../git/plumbing';
import type { Snapshot } from '../snapshot/store';
import { MAX_POINTER_BYTES, parsePointer, type ChunkPointer } from './pointer';

export interface ChunkedEntry {
  path: string;
  mode: string;
  /** The pointer blob's id (what `files/` names). */
  pointerOid: string;
  pointer: ChunkPointer;
}

/** The chunked files of a snapshot by path (empty for v1/v2 snapshots). */
export async function chunkedFiles(snap: Snapshot, opts: GitOptions): Promise<Map<string, ChunkedEntry>> {
  const out = new Map<string, ChunkedEntry>();
  const paths = snap.manifest.chunked ?? [];
  if (!paths.length) return out;
  const format = snap.manifest.git.objectFormat;
  const invalid = (msg: string, details: Record<string, unknown> = {}): XetError =>
    new XetError('SNAPSHOT_INVALID', `snapshot ${snap.oid.slice(0, 12)}: ${msg}`, { snapshot: snap.oid, ...details });
  for (let i = 1; i < paths.length; i++) {
    if (!(paths[i - 1] < paths[i])) throw invalid('its chunked list is not sorted or repeats a path');
  }
  if (!snap.chunksTree) throw invalid('it lists chunked files but has no chunks/ tree');
  // The entries of files/ at those paths (ls-tree with paths: only those entries are listed).
  const entries = new Map<string, { mode: string; type: string; oid: string }>();
  const listed = await gitZ(['ls-tree', '-z', '--full-tree', snap.filesTree, '--', ...paths.map(literal)], opts);
  for (const rec of listed) {
    const tab = rec.indexOf('\t');
    const [mode, type, oid] = rec.slice(0, tab).split(' ');
    entries.set(rec.slice(tab + 1), { mode, type, oid });
  }
  const lists = new Set<string>();
  for (const rec of await gitZ(['ls-tree', '-z', snap.chunksTree], opts)) {
    const tab = rec.indexOf('\t');
    const [mode, type, oid] = rec.slice(0, tab).split(' ');
    const name = rec.slice(tab + 1);
    if (mode !== '040000' || type !== 'tree' || name !== oid)
      throw invalid(`chunks/${name} is not a chunk list named by its id`);
    lists.add(oid);
  }
  const pointers = await catFileBatch(
    paths.map((p) => entries.get(p)?.oid ?? ''),
    opts,
    MAX_POINTER_BYTES,
  );
  for (const p of paths) {
    const e = entries.get(p);
    if (!e || e.type !== 'blob' || (e.mode !== '100644' && e.mode !== '100755')) {
      throw invalid(`${p} is listed as chunked but is not a regular file of files/`, { path: p });
    }
    if (pointers.oversized.has(e.oid)) parsePointer(Buffer.alloc(MAX_POINTER_BYTES + 1), format, p);
    const got = pointers.get(e.oid);
    if (!got) throw invalid(`the pointer of ${p} is missing`, { path: p });
    const pointer = parsePointer(got.data, format, p);
    if (!lists.has(pointer.list)) throw invalid(`the chunk list of ${p} is not in its chunks/ tree`, { path: p });
    out.set(p, { path: p, mode: e.mode, pointerOid: e.oid, pointer });
  }
  return out;
}

/** A pathspec that matches exactly this path (no globbing, no magic). */
function literal(p: string): string {
  return `:(literal)${p}`;
}

/** The id of a file's bytes: a pointer's `blob` for a chunked file, else the entry's own blob. */
export function contentId(path: string, oid: string, chunked: Map<string, ChunkedEntry>): string {
  return chunked.get(path)?.pointer.blob ?? oid;
}
