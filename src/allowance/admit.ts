// Admission: the one place a writer asks "may I add this much to this root?" before its first
// effect, and records what it published. The order every writer follows:
//
//   admit(upper bound)   refuses with ALLOWANCE_EXCEEDED before anything is written; recounts first
//                        when a writer died since the ledger was last right (crash.ts)
//   write temporaries    under names that carry the pid (they are counted while written)
//   recheck(rest)        with the temporaries complete and counted from disk: refuses, and the
//                        caller removes its temporaries, if concurrent writers took the space
//   record(part)         the ledger learns the part before it is published
//   publish              rename into place
//   end()                in a finally
//
// There is no reservation across processes (no daemon, no lock held while writing): two writers
// that check at the same moment both see the space free. The recheck closes most of that window;
// what is left is bounded (docs/DESIGN-NOTES.md "Storage allowance") and the headroom covers it.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import { readConfig } from '../git/config';
import { repoOpts, type Repo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { faultPoint } from '../testing/fault-points';
import { repositoryLimits } from './config';
import { deadWriters, markWriting, removeMarkers, writersDir, type WriterMarker } from './crash';
import { forgetPart, recordPart, REPOSITORY_ROOT } from './ledger';
import { allowanceError, refusalOf, type AdmissionClass, type Amount, type Limits } from './model';
import { measureRepositoryAtRest, recountRepository, type MeasureOptions } from './repo-root';

/** Throw ALLOWANCE_EXCEEDED if `adding` does not fit. */
export function enforce(
  root: string,
  limits: Limits,
  used: Amount,
  adding: Amount,
  cls: AdmissionClass,
  what: string,
): void {
  const r = refusalOf(limits, used, adding, cls);
  if (r) throw allowanceError(root, what, r, cls);
}

export const unlimited = (l: Limits): boolean => l.bytes === null && l.files === null;

export interface Admission {
  readonly root: string;
  readonly limits: Limits;
  /** Check again, counting from disk what is there now (this writer's complete temporaries too) and
   * `more` still to be written. Throws ALLOWANCE_EXCEEDED; the caller then removes its temporaries. */
  recheck(more: Amount): void;
  /** Record a part before publishing it. Never throws: a failure keeps the crash marker so the next
   * writer recounts, and is returned as a warning; the effect is not repeated. */
  record(part: string, amount: Amount): string | null;
  forget(part: string): string | null;
  end(): void;
}

/** `dir` and its ancestors that do not exist yet, deepest first. */
function missingDirs(dir: string): string[] {
  const out: string[] = [];
  for (let d = dir; !fs.existsSync(d) && path.dirname(d) !== d; d = path.dirname(d)) out.push(d);
  return out;
}

/** Recount the repository root, then remove the markers of writers that were dead before it: the
 * recount makes the ledger right for them. */
export function recountClearingDead(
  repo: Repo,
  dead = deadWriters(repo.commonDir),
): ReturnType<typeof recountRepository> {
  const counted = recountRepository(repo);
  removeMarkers(dead);
  return counted;
}

/** Recount the repository root if a writer died since its ledger was last right. */
export function recountAfterCrash(repo: Repo): boolean {
  const dead = deadWriters(repo.commonDir);
  if (!dead.length) return false;
  recountClearingDead(repo, dead);
  return true;
}

/**
 * Admit `adding` (an upper bound of what the operation will write) into the repository root. Cheap
 * when no allowance is set: no measuring, only the crash check and the marker. `own.exclude`: the
 * writer's own scratch already inside `adding`, left out of what is used at every check. (Its crash
 * marker and held lock's journal, two small files, are counted while it runs.)
 */
export async function admitRepository(
  repo: Repo,
  adding: Amount,
  cls: AdmissionClass,
  what: string,
  config?: GitConfig,
  own: MeasureOptions = {},
): Promise<Admission> {
  const limits = repositoryLimits(config ?? (await readConfig(repoOpts(repo))));
  recountAfterCrash(repo);
  // A check is a read: without a sidecar there is no ledger (and none is made for a refusal).
  const check = (more: Amount) => {
    if (unlimited(limits)) return;
    const used = measureRepositoryAtRest(repo, { exclude: own.exclude }).used;
    enforce(REPOSITORY_ROOT, limits, used, more, cls, what);
  };
  // The marker is this writer's too and is there at every recheck, so it is there at the first
  // check; a refusal removes it with the directories it needed (the root as it was found).
  const made = missingDirs(writersDir(repo.commonDir));
  const marker: WriterMarker = markWriting(repo.commonDir);
  try {
    check(adding);
  } catch (e) {
    marker.end();
    for (const d of made) {
      try {
        fs.rmdirSync(d);
      } catch {
        break; // a concurrent writer's marker is in it now
      }
    }
    throw e;
  }
  await faultPoint('allowance:after-admit');
  const ledger = (fn: () => void): string | null => {
    try {
      fn();
      return null;
    } catch (e) {
      marker.keepForRecount();
      return `the allowance ledger was not updated (the next writer recounts): ${(e as Error).message}`;
    }
  };
  return {
    root: REPOSITORY_ROOT,
    limits,
    recheck: check,
    record: (part, amount) =>
      ledger(() => withSidecar(repo.commonDir, (db) => recordPart(db, REPOSITORY_ROOT, part, amount))),
    forget: (part) => ledger(() => withSidecar(repo.commonDir, (db) => forgetPart(db, REPOSITORY_ROOT, part))),
    end: () => marker.end(),
  };
}
