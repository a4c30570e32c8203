// The daemon's memo of its repository's ref listing (`git for-each-ref` of the namespaces a capture
// records): a git process in the busiest stretch of a re-capture otherwise, ~11 ms of CPU beside the
// lstat of every path. git's files backend changes a ref by renaming a lock file over it or removing
// it (its directory's mtime and ctime change), or by rewriting packed-refs whole (a new inode); a
// loose file rewritten in place by hand changes its own times. So the listing is reused while
// packed-refs, every directory under the listed namespaces and every file in them are as they were
// (inode, size, mode, mtime, ctime; or still absent), and refs/replace too (an object's type as
// for-each-ref reports it follows replacements). File times come from the kernel's coarse clock: two
// changes within one tick leave the same times, so a listing is kept only when every time it was
// checked against is older than MARGIN_MS (a change after the listing then has a later time). Not
// kept: another ref storage (a reftable directory), more than MAX_ENTRIES entries to stamp, a
// symbolic ref whose target is outside what is stamped, anything that changed while git read it
// (docs/DESIGN-NOTES.md "Fewer git processes in a daemon's re-capture").

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import type { GitOptions } from '../git/exec';
import { listRefs, type RefEntry } from '../git/plumbing';

const MARGIN_MS = 100n;
const MAX_ENTRIES = 4096;
/** Stamped besides the listed namespaces: what changes an object's type as listed. */
const ALSO_STAMPED = ['refs/replace/'];

type ListRefs = (patterns: string[], opts: GitOptions) => Promise<RefEntry[]>;

/** The stamp of every entry under `prefixes` (each "refs/<name>/" or a ref "refs/<name>") and of
 * packed-refs, with the newest time among them; null when there are too many to stamp. */
export function refStamp(commonDir: string, prefixes: string[]): { key: string; newestNs: bigint } | null {
  try {
    return stampUnder(commonDir, prefixes);
  } catch {
    // A directory removed while it was read (a ref deleted meanwhile), or one not readable: git is
    // asked, and nothing is kept (review 42).
    return null;
  }
}

function stampUnder(commonDir: string, prefixes: string[]): { key: string; newestNs: bigint } | null {
  const parts: string[] = [];
  let newestNs = 0n;
  const visit = (rel: string): boolean => {
    if (parts.length >= MAX_ENTRIES) return false;
    const abs = path.join(commonDir, rel);
    const st = fs.lstatSync(abs, { bigint: true, throwIfNoEntry: false });
    parts.push(st ? `${rel}\0${st.ino}:${st.mode}:${st.size}:${st.mtimeNs}:${st.ctimeNs}` : `${rel}\0-`);
    if (!st) return true;
    if (st.mtimeNs > newestNs) newestNs = st.mtimeNs;
    if (st.ctimeNs > newestNs) newestNs = st.ctimeNs;
    if (!st.isDirectory()) return true;
    for (const name of fs.readdirSync(abs).sort()) if (!visit(`${rel}/${name}`)) return false;
    return true;
  };
  for (const p of ['packed-refs', ...prefixes.map((x) => x.replace(/\/$/, ''))]) if (!visit(p)) return null;
  return { key: parts.join('\n'), newestNs };
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
    const startNs = BigInt(Date.now()) * 1_000_000n;
    const before = refStamp(commonDir, stamped);
    const key = patterns.join('\0');
    if (before && memo && memo.patterns === key && memo.config === config && memo.key === before.key)
      return copy(memo.refs);
    const refs = await list(patterns, opts);
    const after = refStamp(commonDir, stamped);
    const old = before !== null && before.newestNs < startNs - MARGIN_MS * 1_000_000n;
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
