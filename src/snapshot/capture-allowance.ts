// A capture's storage allowance (issue 11): what its pack may add to the repository root is admitted
// after hashing and before the first object is written, rechecked with the finished temporary pack
// and index on disk, and recorded in the ledger before they are renamed into place. A capture that
// stores nothing new (an unchanged re-capture) adds nothing and is always admitted, even over the
// limit. The loose objects a capture makes through git (the commit, its top tree, the manifest blob)
// and its sidecar rows are not in a pack: a fixed amount in the bound covers them.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import type { BeforePublish } from '../git/pack-writer';
import type { Repo } from '../git/repo';
import { admitRepository, recountAfterCrash, unlimited, type Admission } from '../allowance/admit';
import { repositoryLimits } from '../allowance/config';
import { forgetPart, partsOf, recordPart, REPOSITORY_ROOT } from '../allowance/ledger';
import { packUpperBound, type AdmissionClass, type Amount } from '../allowance/model';
import { withSidecar } from '../sidecar/db';

/** The commit, top tree and manifest blob a capture writes loose, and its sidecar rows: a manifest
 * is a few KiB, the rows a few pages of WAL. */
export const CAPTURE_LOOSE_BYTES = 64 * 1024;

/** What scanToTree's storeTree asks before it writes the pack. */
export interface PackAdmission {
  /** Admit a pack of `objects` objects of these inflated sizes (asked only when a limit is set: an
   * lstat per new file). Throws ALLOWANCE_EXCEEDED, nothing written. */
  admit(objects: number, sizes: () => number[], scratch?: string): Promise<void>;
  beforePublish: BeforePublish;
  /** Whether a limit is set: the pack's objects must then be admitted before any is written. */
  readonly limited?: boolean;
}

const oidBytes = (repo: Repo): 20 | 32 => (repo.objectFormat === 'sha256' ? 32 : 20);

/** The upper bound a capture admits for a pack of objects of these sizes. */
export function captureBound(sizes: number[], format: 'sha1' | 'sha256'): Amount {
  if (!sizes.length) return { bytes: 0, files: 0 };
  const b = packUpperBound(sizes, format === 'sha256' ? 32 : 20);
  return { bytes: b.bytes + CAPTURE_LOOSE_BYTES, files: b.files };
}

export class CaptureAllowance implements PackAdmission {
  private admission: Admission | null = null;
  /** Ledger updates that failed (the next writer recounts); reported as the capture's warnings. */
  readonly warnings: string[] = [];

  constructor(
    private readonly repo: Repo,
    private readonly config: GitConfig,
    private readonly cls: AdmissionClass = 'grow',
  ) {
    // A writing command recounts first when a writer died since the ledger was last right, before
    // it makes temporary files of its own (they would be counted in the recorded figure).
    recountAfterCrash(repo);
  }

  /**
   * `scratch`: the capture's scratch dir, not charged as used at admission or recheck. By then its
   * trees are read into the pack's items and removed (scan.ts), so all it holds is the stat cache
   * copy: a hard link of the cached index until git rewrites it, then the new index that replaces
   * the cached one when the capture ends. The transient peak left outside the bound is that one
   * index (about 100 B per file of the worktree, once, while the old one still exists); it is
   * counted again by every other writer's check, and by this root once the capture ends.
   */
  get limited(): boolean {
    return !unlimited(repositoryLimits(this.config));
  }

  async admit(objects: number, sizes: () => number[], scratch?: string): Promise<void> {
    if (!objects) return;
    // Without a limit the figure is never compared: the objects' sizes are not read for it.
    const bound = unlimited(repositoryLimits(this.config))
      ? { bytes: CAPTURE_LOOSE_BYTES, files: 3 }
      : captureBound(sizes(), this.repo.objectFormat);
    this.admission = await admitRepository(this.repo, bound, this.cls, 'capture', this.config, {
      exclude: scratch ? [scratch] : [],
    });
  }

  readonly beforePublish: BeforePublish = (p) => {
    const a = this.admission;
    if (!a) return;
    // The temporaries are complete and counted from disk; the .rev git may write beside them later
    // is all that is still to come.
    a.recheck({ bytes: 12 + 4 * p.objects + 2 * oidBytes(this.repo), files: 1 });
    this.note(a.record(`pack:${p.name}`, { bytes: p.packBytes + p.idxBytes, files: 2 }));
  };

  /** After git's geometric repack (consolidatePacks): when it merged away packs of ours, the packs it
   * made hold our objects and are recorded as ours; the removed ones are forgotten. */
  repacked(packDir: string, before: string[], after: string[]): void {
    const now = new Set(after);
    const was = new Set(before);
    const removed = before.filter((n) => !now.has(n));
    const made = after.filter((n) => !was.has(n));
    if (!removed.length) return;
    try {
      withSidecar(this.repo.commonDir, (db) =>
        db.transaction(() => {
          const ours = new Set(partsOf(db, REPOSITORY_ROOT).map((p) => p.part));
          // A pack git xet's gc made (`folded:<name>`, src/gc/fold.ts) holds our objects too.
          const merged = removed.filter((n) => ours.has(`pack:${n}`) || ours.has(`folded:${n}`));
          if (!merged.length) return;
          for (const n of made) recordPart(db, REPOSITORY_ROOT, `pack:${n}`, packAmount(packDir, n));
          for (const n of merged) {
            forgetPart(db, REPOSITORY_ROOT, `pack:${n}`);
            forgetPart(db, REPOSITORY_ROOT, `folded:${n}`);
          }
        })(),
      );
    } catch (e) {
      this.warnings.push(`the allowance ledger was not updated after repacking: ${(e as Error).message}`);
    }
  }

  end(): void {
    this.admission?.end();
    this.admission = null;
  }

  private note(w: string | null): void {
    if (w) this.warnings.push(w);
  }
}

function packAmount(packDir: string, name: string): Amount {
  const a = { bytes: 0, files: 0 };
  for (const s of ['.pack', '.idx', '.rev']) {
    const st = fs.statSync(path.join(packDir, `${name}${s}`), { throwIfNoEntry: false });
    if (st) {
      a.bytes += st.size;
      a.files++;
    }
  }
  return a;
}
