// The daemon's memo of its worktree's index listing (a read, a hash and a parse of the whole file
// per capture otherwise). An index file ends with the hash of everything before it, and git
// replaces the file whole (index.lock renamed over it), so the same size and the same trailing hash
// are the same entries, flags and stat data. The key also names the file (device, inode and times),
// so that one rewritten away and back while it was read is not taken for the one read. Only a
// listing read from the file is kept: what git lists where that reader leaves it to git (a split
// or sparse index, skip-worktree entries, whose flags git clears for files present in a sparse
// checkout) may depend on more than the file. Not kept either: an index written without its hash
// (index.skipHash, a zero trailer), one named by GIT_INDEX_FILE, a missing one, one that changed
// while it was read.

import * as path from 'node:path';
import { readIndexListing, type IndexEntry, type IndexFileRef } from '../git/plumbing';
import { indexRef, repoOpts, type Repo } from '../git/repo';
import { indexFileKey as indexKey } from '../snapshot/fsutil';

type IndexReader = (index?: IndexFileRef) => Promise<{ entries: IndexEntry[]; fromFile: boolean }>;

/** A reader of the index listing that reads it again only when the index file is another. `read` is
 * the reader behind it (the file itself, or git where that reader leaves it to git). */
export function indexEntriesMemo(
  repo: Repo,
  env: NodeJS.ProcessEnv = process.env,
  read: IndexReader = (index) => readIndexListing(repoOpts(repo), index),
): () => Promise<IndexEntry[]> {
  const file = env.GIT_INDEX_FILE === undefined ? path.join(repo.gitDir, 'index') : null;
  let memo: { key: string; entries: IndexEntry[] } | undefined;
  return async () => {
    const before = file ? indexKey(file) : null;
    if (before !== null && memo?.key === before) return memo.entries.slice();
    const { entries, fromFile } = await read(file ? indexRef(repo) : undefined);
    const keep = fromFile && before !== null && indexKey(file!) === before;
    memo = keep ? { key: before, entries: entries.slice() } : undefined;
    return entries;
  };
}
