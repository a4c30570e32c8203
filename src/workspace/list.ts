// Listing forks with their live state (read from the system, not only the registry) and the bytes
// each one uses of its own.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { findRepo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { listForks, type ForkRow } from '../sidecar/forks';
import { isMounted } from './overlay';
import { XetError } from '../errors';

const SEP = Buffer.from(path.sep);

export type ForkState = 'active' | 'unmounted' | 'incomplete' | 'missing' | 'broken' | 'discarded';

export interface ForkInfo {
  id: string;
  dir: string;
  mode: ForkRow['mode'];
  snapshot: string;
  head: string | null;
  branch: string | null;
  state: ForkState;
  createdAt: string;
  /** Bytes allocated to the fork itself: its upper layer (overlay) or its tree (clone: extents
   * shared with the base are counted, as du counts them). Null when there is nothing to measure. */
  bytes: number | null;
  keptSnapshot: string | null;
  /** When `git xet reclaim` took the fork down (its keptSnapshot is pinned); null otherwise. */
  reclaimedAt: string | null;
  /** Why this fork could not be looked at fully (the others are listed as usual). */
  error?: { code: string; message: string };
}

export async function listForkInfo(cwd: string, all: boolean): Promise<ForkInfo[]> {
  const repo = await findRepo(cwd, true);
  const rows = withSidecar(repo.commonDir, (db) => listForks(db, all));
  return rows.map((r): ForkInfo => {
    const state = stateOf(r);
    const measured = r.mode === 'overlay' ? r.upper : r.dir;
    const info: ForkInfo = {
      id: r.id,
      dir: r.dir,
      mode: r.mode,
      snapshot: r.snapshot,
      head: r.headOid,
      branch: r.branch,
      state,
      createdAt: r.createdAt,
      bytes: null,
      keptSnapshot: r.keptSnapshot,
      reclaimedAt: r.reclaimedAt ?? null,
    };
    if (state === 'discarded' || !measured || !fs.existsSync(measured)) return info;
    try {
      info.bytes = allocatedBytes(measured);
    } catch (e) {
      // One fork's unreadable tree must not hide every other fork.
      const code = e instanceof XetError ? e.code : ((e as NodeJS.ErrnoException).code ?? 'GIT_FAILED');
      info.error = { code, message: (e as Error).message };
    }
    return info;
  });
}

export function stateOf(r: ForkRow): ForkState {
  if (r.state === 'discarded') return 'discarded';
  if (r.state === 'creating') return 'incomplete';
  if (r.mode === 'overlay') {
    if (isMounted(r.dir)) return 'active';
    if (r.upper && fs.existsSync(path.join(r.upper, '.git'))) return 'unmounted';
    // A layer image not mounted (a reboot): its upper dir is inside; a remount mounts both.
    return r.layerRoute === 'image' && fs.existsSync(path.join(path.dirname(path.dirname(r.upper ?? '')), 'layer.img'))
      ? 'unmounted'
      : 'broken';
  }
  return fs.existsSync(path.join(r.dir, '.git')) ? 'active' : 'missing';
}

/** du(1): blocks allocated under a directory, hard links counted once, symlinks not followed. */
export function allocatedBytes(root: string): number {
  const seen = new Set<string>();
  let total = 0;
  // Names as bytes: a name that is not UTF-8 would not lead back to its file as a string.
  const visit = (p: Buffer) => {
    const st = fs.lstatSync(p, { bigint: false });
    const key = `${st.dev}:${st.ino}`;
    if (st.nlink > 1) {
      if (seen.has(key)) return;
      seen.add(key);
    }
    total += st.blocks * 512;
    if (st.isDirectory()) {
      for (const name of fs.readdirSync(p, { encoding: 'buffer' })) visit(Buffer.concat([p, SEP, name]));
    }
  };
  visit(Buffer.from(root));
  return total;
}
