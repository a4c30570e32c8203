// The daemon's memo of its repository's ref listing (`git for-each-ref` of the namespaces a capture
// records): a git process in the busiest stretch of a re-capture otherwise, ~11 ms of CPU beside the
// lstat of every path. git's files backend changes a ref by renaming a lock file over it or removing
// it (its directory's mtime and ctime change), or by rewriting packed-refs whole (a new inode); a
// loose file rewritten in place by hand changes its own times. So the listing is reused while
// packed-refs, every directory under the listed namespaces and every file in them are as they were
// (inode, size, mode, mtime, ctime; or still absent), and refs/replace too (an object's type as
// for-each-ref reports it follows replacements), each older than the margin when the listing was
// taken (file-stamps.ts: the kernel's coarse clock). Not
// kept: another ref storage (a reftable directory), more than MAX_ENTRIES entries to stamp, a
// symbolic ref whose target is outside what is stamped, anything that changed while git read it
// (docs/DESIGN-NOTES.md "Fewer git processes in a daemon's re-capture").

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import type { GitOptions } from '../git/exec';
import { listRefs, type RefEntry } from '../git/plumbing';
import { nowNs, Stamps } from './file-stamps';

const MAX_ENTRIES = 4096;
/** Stamped besides the listed namespaces: what changes an object's type as listed. */
const ALSO_STAMPED = ['refs/replace/'];

type ListRefs = (patterns: string[], opts: GitOptions) => Promise<RefEntry[]>;

/** The stamps of every entry under `prefixes` (each "refs/<name>/" or a ref "refs/<name>") and of
 * packed-refs; null when there are too many to stamp, or one cannot be stamped (a directory removed
 * while it was read, a ref deleted meanwhile: git is asked and nothing kept, review 42). */
export function refStamp(commonDir: string, prefixes: string[]): Stamps | null {
  const stamps = new Stamps();
  const visit = (rel: string): boolean => {
    if (stamps.count >= MAX_ENTRIES) return false;
    const abs = path.join(commonDir, rel);
    const st = stamps.add(abs);
    if (!st?.isDirectory()) return true;
    for (const name of fs.readdirSync(abs).sort()) if (!visit(`${rel}/${name}`)) return false;
    return true;
  };
  try {
    for (const p of ['packed-refs', ...prefixes.map((x) => x.replace(/\/$/, ''))]) if (!visit(p)) return null;
  } catch {
    return null;
  }
  return stamps;
}

/** A ref lister for `commonDir` that asks git again only when a ref may have changed, or the config
 * (`readConfig`: the daemon's config memo, the same object while no config file changed; whether an
 * object's type follows replacements is core.useReplaceRefs). */
export function refListingMemo(
  commonDir: string,
  readConfig: () => Promise<GitConfig>,
  list: ListRefs = listRefs,
): ListRefs {
  let memo: { patterns: string; config: GitConfig; key: string; refs: RefEntry[] } | undefined;
  const copy = (refs: RefEntry[]) => refs.map((r) => ({ ...r }));
  return async (patterns, opts) => {
    // Only whole namespaces and plain refs under refs/ (what a capture lists) are stamped.
    const plain = patterns.every((p) => /^refs\/[^*?[\\]+$/.test(p) && !p.includes('..'));
    if (!plain || fs.existsSync(path.join(commonDir, 'reftable'))) return list(patterns, opts);
    const stamped = [...patterns, ...ALSO_STAMPED];
    const config = await readConfig();
    const startNs = nowNs();
    const before = refStamp(commonDir, stamped);
    const key = patterns.join('\0');
    if (before && memo && memo.patterns === key && memo.config === config && memo.key === before.key)
      return copy(memo.refs);
    const refs = await list(patterns, opts);
    const after = refStamp(commonDir, stamped);
    const old = before !== null && before.settledAt(startNs);
    const covered = refs.every(
      (r) => !r.symref || patterns.some((p) => r.symref === p || (p.endsWith('/') && r.symref!.startsWith(p))),
    );
    memo =
      old && covered && after?.key === before.key
        ? { patterns: key, config, key: before.key, refs: copy(refs) }
        : undefined;
    return refs;
  };
}
