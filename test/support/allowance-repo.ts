// The repository root of the storage allowance as tests observe it: its usage measured the way
// admission does (and by a full recount), and a byte-exact listing of a git dir for "a refusal
// changed nothing" checks.
import assert from 'node:assert/strict';
import { measureRepositoryAtRest, recountRepository } from '../../src/allowance/repo-root';
import type { Amount } from '../../src/allowance/model';
import { findRepo } from '../../src/git/repo';
import { compareTrees, walkTree, withoutPaths, type TreeListing } from './state';

/** What admission sees as used in the repository at `dir` (ledger parts + the rest from disk). */
export async function repositoryUsed(dir: string): Promise<Amount> {
  const repo = await findRepo(dir);
  return measureRepositoryAtRest(repo).used;
}

/** A full recount (dead writers' temporaries removed, the count recorded). */
export async function repositoryRecount(dir: string): Promise<Amount & { leftoversRemoved: number }> {
  const r = recountRepository(await findRepo(dir));
  return { ...r.used, leftoversRemoved: r.leftoversRemoved };
}

/** Every entry of a git dir with its size and sha256 (directories too). */
export function gitDirListing(gitDir: string): TreeListing {
  return walkTree(gitDir);
}

/** The git dir is byte for byte as it was, but for `except` (paths relative to it, '/'-ended for
 * directories). */
export function assertUnchanged(gitDir: string, before: TreeListing, what: string, except: string[] = []): void {
  const diffs = compareTrees(withoutPaths(before, except), withoutPaths(gitDirListing(gitDir), except));
  assert.deepEqual(diffs, [], `${what} changed the repository:\n${diffs.join('\n')}`);
}
