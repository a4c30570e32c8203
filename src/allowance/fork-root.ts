// A fork's root: the storage a fork itself uses (an overlay fork's upper and work dirs, or its layer
// filesystem; a clone or copy fork's files) plus its worktree admin dir's index, its allowance
// (`fork --allowance BYTES[,FILES]`, `xet.fork.allowance`, on the fork's row), and the route that
// bounds what the fork's own processes write (src/workspace/layer.ts).
//
// Measuring is cheap where it can be: a layer is a statfs; a clone or copy fork's files are the
// ledger's figure (its base's counts, recorded at creation), walked only on a recount. An overlay
// fork without a layer has its upper dir walked (it holds only what the fork changed).
//
// A fork's allowance has no headroom: nothing settles into a fork (discard and reclaim free it whole,
// and write into the repository root), so holding part back would only shrink what its processes
// may write.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Repo } from '../git/repo';
import { sidecarDir, type Db } from '../sidecar/db';
import type { ForkRow } from '../sidecar/forks';
import { describeRoute, imageUsage, layerMounted, layerPaths, layerUsage, type LayerRoute } from '../workspace/layer';
import { forkRoot, lastCount, partsOf, recordCount, recordPart } from './ledger';
import type { Amount, Limits } from './model';
import { treeAmount } from './repo-root';

export type { LayerRoute };

export interface ForkUsage {
  root: string; // 'fork:<id>'
  id: string;
  dir: string;
  mode: ForkRow['mode'];
  limits: Limits;
  used: Amount;
  /** What bounds the fork's own processes: covered only with a route the kernel enforces. */
  route: { kind: LayerRoute | null; covered: boolean; reason: string };
  /** When `used` was measured (a copy fork's files are not walked on every check). */
  measuredAt: string | null;
}

/** The ledger part of a clone or copy fork's files. */
export const FORK_FILES_PART = 'files';

export function forkLimits(row: Pick<ForkRow, 'allowanceBytes' | 'allowanceFiles'>): Limits {
  return {
    bytes: row.allowanceBytes ?? null,
    files: row.allowanceFiles ?? null,
    headroomBytes: 0,
    headroomFiles: 0,
  };
}

export function forkOwnDir(repo: Pick<Repo, 'commonDir'>, id: string): string {
  return path.join(sidecarDir(repo.commonDir), 'forks', id);
}

const add = (a: Amount, b: Amount): Amount => ({ bytes: a.bytes + b.bytes, files: a.files + b.files });

/** The fork's worktree admin dir files git xet writes: its index (and a files index while made). */
function adminAmount(row: ForkRow): Amount {
  const total = { bytes: 0, files: 0 };
  if (!row.gitDir) return total;
  for (const f of ['index', 'xet-files.index']) {
    const st = fs.statSync(path.join(row.gitDir, f), { throwIfNoEntry: false });
    if (st) {
      total.bytes += st.size;
      total.files++;
    }
  }
  return total;
}

export function forkRoute(repo: Pick<Repo, 'commonDir'>, row: ForkRow): ForkUsage['route'] {
  if (row.mode !== 'overlay') {
    return {
      kind: null,
      covered: false,
      reason:
        `a ${row.mode} fork's files are ordinary files in ${row.dir}, on that directory's filesystem: nothing in ` +
        'the kernel stops its processes from writing past the allowance (git xet counts them; a recount walks them)',
    };
  }
  const route = row.layerRoute ?? null;
  if (!route) {
    return {
      kind: null,
      covered: false,
      reason:
        row.allowanceBytes == null
          ? 'the fork has no allowance (fork --allowance BYTES[,FILES], xet.fork.allowance): its upper dir is on ' +
            "the repository's filesystem"
          : "no kernel route was available when the fork was made: its upper dir is on the repository's filesystem",
    };
  }
  const p = layerPaths(forkOwnDir(repo, row.id));
  const limits = { bytes: row.allowanceBytes ?? null };
  if (layerMounted(p, route)) return { kind: route, covered: true, reason: describeRoute(p, route, limits) };
  if (route === 'image' && fs.existsSync(p.image)) {
    // Unmounted (a reboot): every way into the fork mounts the layer before the overlay.
    return { kind: route, covered: true, reason: `${describeRoute(p, route, limits)} (not mounted now)` };
  }
  return {
    kind: route,
    covered: false,
    reason: `the fork's ${route} layer is gone${route === 'tmpfs' ? ' (a reboot or an unmount loses a tmpfs layer)' : ''}`,
  };
}

export function measureFork(repo: Repo, db: Db, row: ForkRow, recount: boolean): ForkUsage {
  const root = forkRoot(row.id);
  const now = new Date().toISOString();
  let used: Amount;
  let measuredAt: string | null = now;
  const own = forkOwnDir(repo, row.id);
  if (row.mode === 'overlay') {
    const layer = row.layerRoute ? layerUsage(layerPaths(own), row.layerRoute) : null;
    if (layer) used = add(layer, adminAmount(row));
    else if (row.layerRoute) {
      // An unmounted layer (a reboot): an image's superblock says what it held at its unmount;
      // otherwise the last count (a tmpfs layer unmounted is gone: nothing is left of it).
      const sb = row.layerRoute === 'image' ? imageUsage(layerPaths(own)) : null;
      const last = sb ? null : lastCount(db, root);
      used = sb ? add(sb, adminAmount(row)) : (last ?? { bytes: 0, files: 0 });
      measuredAt = sb?.at ?? last?.countedAt ?? null;
    } else if (row.upper && row.work) {
      used = add(add(treeAmount(row.upper), treeAmount(row.work)), adminAmount(row));
    } else used = adminAmount(row);
  } else {
    const part = partsOf(db, root).find((p) => p.part === FORK_FILES_PART);
    if (recount || !part) {
      const files = treeAmount(row.dir);
      if (recount) recordPart(db, root, FORK_FILES_PART, files);
      used = add(files, adminAmount(row));
    } else {
      used = add(part, adminAmount(row));
      measuredAt = part.recordedAt;
    }
  }
  if (recount) recordCount(db, root, used, 0);
  return {
    root,
    id: row.id,
    dir: row.dir,
    mode: row.mode,
    limits: forkLimits(row),
    used,
    route: forkRoute(repo, row),
    measuredAt,
  };
}
