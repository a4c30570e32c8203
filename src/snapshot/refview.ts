// One consistent view of HEAD and the refs a capture records. HEAD and the branches are read
// separately (HEAD from its file when it names a branch plainly, else by git processes beside the
// listing), so a commit landing between the reads would give a manifest whose HEAD and branch
// disagree, and a snapshot whose own restore fails verify. The view is checked (HEAD's branch, when
// recorded, must name HEAD's commit) and re-read until it holds.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitOptions } from '../git/exec';
import { listRefs, readHead, type HeadState, type RefEntry } from '../git/plumbing';
import { fileStamp, readTail } from './fsutil';

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

/** A branch name git itself would accept (git check-ref-format's rules), so that a name read from a
 * file means what git would make of it. */
// eslint-disable-next-line no-control-regex
const REFUSED_REF_NAME = /[\x00-\x20\x7f~^:?*[\\]|\.\.|@\{|\/\/|\/\.|\.lock(?:\/|$)|[/.]$|\uFFFD/;

/**
 * The branch HEAD names, read from `<gitDir>/HEAD` as git's files backend writes it
 * ("ref: refs/heads/<name>" and a newline), with the file's stamp (fileStamp), or null
 * for anything else: a detached HEAD, a symlink, another namespace, a name git would refuse (a
 * reftable repository's "refs/heads/.invalid"), any other spelling git would still accept. Null
 * means: ask git (readHead). One read of a small file where readHead starts two git processes on
 * every capture.
 */
export function headBranchFromFile(gitDir: string): { ref: string; file: string } | null {
  const read = readTail(path.join(gitDir, 'HEAD'), 4096);
  if (!read || read.size > 4096) return null;
  const m = /^ref: (refs\/heads\/[^\n]+)\n$/.exec(read.tail.toString('utf8'));
  if (!m || REFUSED_REF_NAME.test(m[1])) return null;
  return { ref: m[1], file: fileStamp(read.stat) };
}

/** Whether a loose ref file is at `ref`'s path (a broken one, which the listing leaves out). */
function looseRefThere(commonDir: string, ref: string): boolean {
  try {
    fs.lstatSync(path.join(commonDir, ref));
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code !== 'ENOENT' && code !== 'ENOTDIR';
  }
}

/**
 * `dirs`, when given, are the worktree's own git directory and the common one: HEAD is read from
 * its file when it names a branch plainly, and the branch's commit taken from the listing (two git
 * processes fewer). The file is read again after the listing and must be the same file naming the
 * same branch (a checkout between the two is read again, as the git processes' view is). Anything
 * else (detached, a branch that is a symbolic ref or holds a tag, one whose loose file the listing
 * left out as broken) is read by git, as without it.
 */
export async function readRefView(
  patterns: string[],
  opts: GitOptions,
  dirs?: { gitDir: string; commonDir: string },
  list: (patterns: string[], opts: GitOptions) => Promise<RefEntry[]> = listRefs,
): Promise<{ head: HeadState; refs: RefEntry[] }> {
  const branchesListed = patterns.includes('refs/heads/');
  for (let n = 0; ; n++) {
    const before = dirs && branchesListed ? headBranchFromFile(dirs.gitDir) : null;
    if (dirs && before) {
      const refs = await list(patterns, opts);
      const after = headBranchFromFile(dirs.gitDir);
      if (after?.ref === before.ref && after.file === before.file) {
        const branch = before.ref;
        const entry = refs.find((r) => r.name === branch);
        // Not listed and no file of its own: unborn, as git says (HEAD^{commit} fails the same way).
        if (!entry && !looseRefThere(dirs.commonDir, branch))
          return { head: { kind: 'branch', ref: branch, oid: null }, refs };
        if (entry?.type === 'commit' && !entry.symref)
          return { head: { kind: 'branch', ref: branch, oid: entry.oid }, refs };
      } else if (n + 1 < ATTEMPTS) continue;
    }
    const [head, refs] = await Promise.all([readHead(opts), list(patterns, opts)]);
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
