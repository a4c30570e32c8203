// "Nothing changed since the last snapshot": agents checkpoint after every step, and a capture of a
// worktree identical to the last snapshot it made returns that snapshot instead of a new one.
// Identical means everything a snapshot holds: its top tree (files, index, tags, objects, whatever
// later formats add) entry for entry, and its manifest (HEAD, refs, stash, index flags, config, info
// files, policy, empty dirs, skipped entries, counts, tool and git versions) byte for byte once the
// two fields that describe the capture rather than the tree, createdAt and message, are set aside.

import type { GitOptions } from '../git/exec';
import { git, gitZ } from '../git/exec';
import type { TreeEntryInput } from '../git/plumbing';
import { withExistingSidecar } from '../sidecar/db';
import { canonicalJson } from './canonical-json';
import type { Manifest } from './manifest';
import { SNAPSHOT_REF_PREFIX } from './refs';
import { readSnapshot } from './store';

/** The newest snapshot this workspace captured whose ref still names it, or null. */
/** The newest snapshots the sidecar says this worktree captured (newest first; at most 8). */
export function recentWorkspaceSnapshots(commonDir: string, wsId: string): string[] {
  const rows =
    withExistingSidecar(
      commonDir,
      (db) =>
        db
          .prepare('SELECT oid FROM snapshots WHERE workspace_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 8')
          .all(wsId) as { oid: string }[],
    ) ?? [];
  return rows.map((r) => r.oid);
}

export async function lastWorkspaceSnapshot(commonDir: string, wsId: string, opts: GitOptions): Promise<string | null> {
  for (const oid of recentWorkspaceSnapshots(commonDir, wsId)) {
    // A snapshot ref must name its own commit; one that was deleted or moved is not "the last one".
    const r = await git(['rev-parse', '-q', '--verify', `${SNAPSHOT_REF_PREFIX}${oid}^{commit}`], {
      ...opts,
      okCodes: [1, 128],
    });
    if (r.code === 0 && r.stdout.toString('utf8').trim() === oid) return oid;
  }
  return null;
}

const sansCapture = (m: Record<string, unknown>): string => {
  const rest = { ...m };
  delete rest.createdAt;
  delete rest.message;
  return canonicalJson(rest);
};

/** Whether snapshot `oid` holds exactly what a new snapshot with `manifest` and these top-level
 * entries (all but manifest.json) would hold. */
export async function sameSnapshotContent(
  oid: string,
  manifest: Manifest,
  top: TreeEntryInput[],
  opts: GitOptions,
): Promise<boolean> {
  let old;
  try {
    old = await readSnapshot(oid, opts, true);
  } catch {
    return false; // unreadable: make a new one
  }
  const entries = (await gitZ(['ls-tree', '-z', oid], opts))
    .filter((e) => !e.endsWith('\tmanifest.json'))
    .map((e) => e.replace(/^(\d+) \w+ /, '$1 '))
    .sort();
  const want = top.map((e) => `${e.mode} ${e.oid}\t${e.name}`).sort();
  if (entries.join('\0') !== want.join('\0')) return false;
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(old.manifestBytes.toString('utf8')) as Record<string, unknown>;
  } catch {
    return false;
  }
  return sansCapture(raw) === sansCapture(manifest as unknown as Record<string, unknown>);
}
