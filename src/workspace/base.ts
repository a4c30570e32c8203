// Bases: a snapshot materialised once, read-only by contract, for overlay forks (their lower layer)
// and clone forks (the source of their reflinks). A base is `<sidecar>/bases/<snapshot>/` holding
// `tree/` (the files), `files.index` (the files tree with stat data: capture's cache for a fork) and
// `index` (the snapshot's index with stat data). It is built in a temporary sibling and renamed into
// place, so a base that exists is complete; nothing ever writes to it after that.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Admission } from '../allowance/admit';
import { treeAmount } from '../allowance/repo-root';
import type { Amount } from '../allowance/model';
import type { Repo } from '../git/repo';
import { sidecarDir } from '../sidecar/db';
import { acquireLock } from '../sidecar/lock';
import { layFiles, layIndex } from '../snapshot/lay';
import type { Snapshot } from '../snapshot/store';
import { faultPoint } from '../testing/fault-points';

export interface Base {
  dir: string;
  tree: string;
  filesIndex: string;
  index: string;
}

export function basesDir(repo: Repo): string {
  return path.join(sidecarDir(repo.commonDir), 'bases');
}

function layoutAt(dir: string): Base {
  return {
    dir,
    tree: path.join(dir, 'tree'),
    filesIndex: path.join(dir, 'files.index'),
    index: path.join(dir, 'index'),
  };
}

export function baseFor(repo: Repo, snapshot: string): Base {
  return layoutAt(path.join(basesDir(repo), snapshot));
}

/** What admits a base into the repository root: checked again once its files are laid (with `more`
 * still to come after it), and the base recorded before its rename. */
export interface BaseAdmission {
  admission: Admission;
  more: Amount;
}

/** The base for a snapshot, building it if it does not exist yet. */
export async function ensureBase(
  repo: Repo,
  snap: Snapshot,
  admit?: BaseAdmission,
): Promise<{ base: Base; built: boolean }> {
  const base = baseFor(repo, snap.oid);
  if (fs.existsSync(base.index)) return { base, built: false };
  // One builder per base: others wait for it and then use its result instead of building their own.
  const lock = acquireLock(
    path.join(sidecarDir(repo.commonDir), 'locks', `base-${snap.oid}.lockdb`),
    'materialising this base',
    600_000,
  );
  try {
    if (fs.existsSync(base.index)) return { base, built: false };
    return await buildBase(repo, snap, base, admit);
  } finally {
    lock.release();
  }
}

async function buildBase(
  repo: Repo,
  snap: Snapshot,
  base: Base,
  admit?: BaseAdmission,
): Promise<{ base: Base; built: boolean }> {
  fs.mkdirSync(basesDir(repo), { recursive: true });
  // The pid says whose it is: a killed fork's half-built base is found and removed by a recount.
  const tmp = path.join(
    basesDir(repo),
    `.build-${process.pid}-${snap.oid.slice(0, 12)}-${crypto.randomBytes(4).toString('hex')}`,
  );
  const building = layoutAt(tmp);
  try {
    fs.mkdirSync(building.tree, { recursive: true });
    const spec = {
      snap,
      worktree: building.tree,
      objectsDir: repo.objectsDir,
      filesIndex: building.filesIndex,
      indexFile: building.index,
      scratchParent: tmp,
      repoGitDir: repo.commonDir,
    };
    await layFiles(spec);
    await faultPoint('fork:mid-base');
    await layIndex(spec);
    if (admit) {
      // The temporary base is complete and counted from disk now; concurrent writers may have taken
      // the space meanwhile. Recorded before the rename: a kill in between counts it, never misses it.
      admit.admission.recheck(admit.more);
      admit.admission.record(`base:${snap.oid}`, treeAmount(tmp));
    }
    try {
      fs.renameSync(tmp, base.dir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      // Another fork built the same base meanwhile: theirs is as good as ours.
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
      return { base, built: false };
    }
    return { base, built: true };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
