// What of git's packs stays git xet's after `git xet gc` repacked: the repack folds the packs git
// xet wrote (ledger parts `pack:<name>`) into one pack of git's, so the ledger would forget them
// while the same bytes stay on disk. Before the repack a `folded:pending` part holds what the
// ledger counted for packs (a gc killed during the repack leaves the root counting that, never
// less); after it, one `folded:<pack>` part holds the on-disk size of the objects reachable from git
// xet's refs (refs/xet/*, refs/remotes/*/xet/*) and from none of the user's (`git rev-list --objects
// --disk-usage`), counted while that pack exists (repo-root.ts). Each gc recomputes it; a recount
// keeps it (a recount walks files, it does not traverse the object graph).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitText } from '../git/exec';
import { repoOpts, type Repo } from '../git/repo';
import { forgetPart, partsOf, partsTotal, recordPart, REPOSITORY_ROOT } from '../allowance/ledger';
import { withSidecar } from '../sidecar/db';

export const FOLDED_PENDING = 'folded:pending';

/** Git xet's refs, and everything else (the user's: branches, tags, HEAD, other remotes, notes, stash). */
const XET_GLOBS = ['refs/xet/*', 'refs/remotes/*/xet/*'];

/** On-disk bytes of the objects only git xet's refs reach. */
export async function xetOnlyDiskUsage(repo: Repo): Promise<number> {
  const args = ['rev-list', '--objects', '--disk-usage'];
  for (const g of XET_GLOBS) args.push(`--glob=${g}`);
  args.push('--not');
  for (const g of XET_GLOBS) args.push(`--exclude=${g}`);
  args.push('--all');
  const n = Number((await gitText(args, repoOpts(repo))).trim());
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`git rev-list --disk-usage printed no size`);
  return n;
}

/** Record, before the repack, what the ledger counts for packs now. */
export function beforeFold(repo: Repo): void {
  withSidecar(repo.commonDir, (db) => {
    const packs = partsTotal(db, REPOSITORY_ROOT, 'pack:');
    const folded = partsTotal(db, REPOSITORY_ROOT, 'folded:');
    recordPart(db, REPOSITORY_ROOT, FOLDED_PENDING, { bytes: packs.bytes + folded.bytes, files: 0 });
  });
}

/** The pack `repack -a -d` made with the reachable objects: the largest that is not a cruft pack
 * (.mtimes), kept (.keep) or a promisor's. */
function mainPack(packDir: string): string | null {
  let names: string[];
  try {
    names = fs.readdirSync(packDir);
  } catch {
    return null;
  }
  const has = new Set(names);
  let best: { name: string; size: number } | null = null;
  for (const n of names) {
    if (!n.endsWith('.pack')) continue;
    const name = n.slice(0, -'.pack'.length);
    if (['.mtimes', '.keep', '.promisor'].some((s) => has.has(`${name}${s}`))) continue;
    const size = fs.statSync(path.join(packDir, n)).size;
    if (!best || size > best.size) best = { name, size };
  }
  return best?.name ?? null;
}

/** After the repack: forget the packs it merged away and the earlier folded figures; record what of
 * the new pack is git xet's. Returns that figure (bytes). */
export async function afterFold(repo: Repo): Promise<number> {
  const packDir = path.join(repo.objectsDir, 'pack');
  const bytes = await xetOnlyDiskUsage(repo);
  const main = mainPack(packDir);
  withSidecar(repo.commonDir, (db) =>
    db.transaction(() => {
      for (const p of partsOf(db, REPOSITORY_ROOT)) {
        if (p.part.startsWith('folded:')) forgetPart(db, REPOSITORY_ROOT, p.part);
        // `repack -a -d` rewrote every pack but kept ones (gone now, or the same name when the
        // content was the same): what of them is git xet's is in the folded figure.
        else if (p.part.startsWith('pack:') && !fs.existsSync(path.join(packDir, `${p.part.slice(5)}.keep`)))
          forgetPart(db, REPOSITORY_ROOT, p.part);
      }
      // Files 0: those bytes live in git's pack files, which are not git xet's to count.
      if (main && bytes > 0) recordPart(db, REPOSITORY_ROOT, `folded:${main}`, { bytes, files: 0 });
    })(),
  );
  return bytes;
}
