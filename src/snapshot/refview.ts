// One consistent view of HEAD and the refs a capture records. HEAD and the branches are read by
// separate git processes (concurrently), so a commit landing between the reads would give a
// manifest whose HEAD and branch disagree, and a snapshot whose own restore fails verify. The view
// is checked (HEAD's branch, when recorded, must name HEAD's commit) and re-read until it holds.

import { XetError } from '../errors';
import type { GitOptions } from '../git/exec';
import { listRefs, readHead, type HeadState, type RefEntry } from '../git/plumbing';

// Each attempt is two short git processes; on a loaded machine a commit loop can outpace a few.
const ATTEMPTS = 12;

/** Whether HEAD and the listed refs describe one moment: HEAD's branch, if listed, is HEAD's commit
 * (and an unborn HEAD's branch is not listed at all). */
export function refViewConsistent(head: HeadState, refs: RefEntry[]): boolean {
  if (head.kind !== 'branch') return true;
  const branch = refs.find((r) => r.name === head.ref);
  if (!branch) return head.oid === null || !head.ref.startsWith('refs/heads/');
  return branch.oid === head.oid;
}

export async function readRefView(
  patterns: string[],
  opts: GitOptions,
): Promise<{ head: HeadState; refs: RefEntry[] }> {
  for (let n = 0; ; n++) {
    const [head, refs] = await Promise.all([readHead(opts), listRefs(patterns, opts)]);
    if (refViewConsistent(head, refs)) return { head, refs };
    if (n + 1 >= ATTEMPTS) {
      throw new XetError(
        'WORKTREE_CHANGED',
        `HEAD and ${head.kind === 'branch' ? head.ref : 'the branches'} kept moving while they were read (commits are landing); capture again`,
        { head },
      );
    }
  }
}
