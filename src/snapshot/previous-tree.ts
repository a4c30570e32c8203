// Which earlier files tree a capture may store its changes against. A capture stores only the blobs
// that differ from that tree, trusting every other object of it to be in the repository — true
// only while something still reaches it. Once its snapshot was dropped and collected, the tree may
// survive a cruft prune that removed older blobs of it (objects expire by their own age), and a
// capture trusting it would write a snapshot that names missing objects. So the sidecar's record
// of this worktree's last files tree is used only while a snapshot, pin or drop ref still reaches a
// snapshot of that tree; otherwise the capture falls back to the newest retained snapshot, or looks
// every blob up.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, gitText, type GitOptions } from '../git/exec';
import { parseTopListing } from '../git/plumbing';
import { lexists } from './fsutil';
import { writtenSnapshotTop } from './store';
import { recentWorkspaceSnapshots } from './unchanged';

const HOLDING_REFS = ['refs/xet/snapshots/', 'refs/xet/pins/', 'refs/xet/dropped/'];

/** One of this worktree's recent snapshots that a ref still reaches, whose files tree is `tree`: its
 * `filemeta` entry (null when it has none), or null when there is no such snapshot. What a ref
 * reaches is in the repository, so a capture need not store that filemeta's objects again. */
export async function heldPreviousSnapshot(
  commonDir: string,
  wsId: string,
  tree: string,
  opts: GitOptions,
): Promise<{ filemeta: string | null; index: string | null } | null> {
  const recent = recentWorkspaceSnapshots(commonDir, wsId);
  if (!recent.length) return null;
  // The refs of these few snapshots, read from their files; git lists every holding ref only when
  // none of those the files say are held has this tree (a repository of hundreds of snapshots made
  // that listing cost each capture tens of milliseconds).
  const fromFiles = heldByRefFiles(commonDir, recent);
  const found = fromFiles.size ? await firstWithTree(commonDir, recent, fromFiles, tree, opts) : null;
  if (found) return found;
  const held = new Set(
    (await gitText(['for-each-ref', '--format=%(refname)', ...HOLDING_REFS], opts))
      .split('\n')
      .map((name) => /\/([0-9a-f]{40,64})$/.exec(name)?.[1])
      .filter((oid): oid is string => oid !== undefined),
  );
  return firstWithTree(commonDir, recent, held, tree, opts);
}

async function firstWithTree(
  commonDir: string,
  recent: string[],
  held: Set<string>,
  tree: string,
  opts: GitOptions,
): Promise<{ filemeta: string | null; index: string | null } | null> {
  for (const oid of recent) {
    if (!held.has(oid)) continue;
    const top = await snapshotTop(commonDir, oid, opts);
    if (top?.get('files')?.oid === tree) {
      return { filemeta: top.get('filemeta')?.oid ?? null, index: top.get('index')?.oid ?? null };
    }
  }
  return null;
}

/**
 * Which of `oids` a holding ref named after it (refs/xet/snapshots/<oid>, pins/, dropped/) points at,
 * by the files backend's own files: the loose ref's content, else its line in packed-refs. Only ever
 * a subset of what git would say (anything unexpected counts as not held, and then git is asked).
 * Git deletes a packed ref's loose file only after writing packed-refs, so a ref being packed is
 * seen in one or the other.
 */
export function heldByRefFiles(commonDir: string, oids: readonly string[]): Set<string> {
  const held = new Set<string>();
  let packed: Map<string, string> | null | undefined;
  for (const oid of oids) {
    if (!/^(?:[0-9a-f]{40}|[0-9a-f]{64})$/.test(oid)) continue;
    for (const prefix of HOLDING_REFS) {
      const name = `${prefix}${oid}`;
      let text: string | null;
      try {
        text = fs.readFileSync(path.join(commonDir, name), 'latin1');
      } catch (e) {
        // Only a name with nothing at it is the packed ref's (a dangling symlink is a broken ref).
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || lexists(path.join(commonDir, name))) continue;
        text = null;
      }
      if (text !== null) {
        if (text === `${oid}\n` || text === oid) held.add(oid);
      } else {
        packed ??= readPackedRefs(commonDir);
        if (packed?.get(name) === oid) held.add(oid);
      }
      if (held.has(oid)) break;
    }
  }
  return held;
}

/** packed-refs as name → value (peeled lines skipped), or null when there is none or it cannot be read. */
function readPackedRefs(commonDir: string): Map<string, string> | null {
  let text: string;
  try {
    text = fs.readFileSync(path.join(commonDir, 'packed-refs'), 'latin1');
  } catch {
    return null;
  }
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#' || line[0] === '^') continue;
    const sp = line.indexOf(' ');
    if (sp > 0) out.set(line.slice(sp + 1), line.slice(0, sp));
  }
  return out;
}

/** A few snapshots' top-level entries as git listed them, by repository and commit: a commit's tree
 * never changes (one git process less for each asked again; what this process wrote itself it knows
 * from store.ts's rememberSnapshot). Only asked for a commit a ref was just seen to reach. */
const tops = new Map<string, Map<string, { oid: string; type: string }>>();
const TOPS_KEPT = 16;

function keep(key: string, top: Map<string, { oid: string; type: string }>): void {
  if (tops.size >= TOPS_KEPT) tops.delete(tops.keys().next().value as string);
  tops.set(key, top);
}

/** The top-level entries of snapshot commit `oid` (null: not a commit this repository has). */
export async function snapshotTop(
  commonDir: string,
  oid: string,
  opts: GitOptions,
): Promise<Map<string, { oid: string; type: string }> | null> {
  const key = `${commonDir}\0${oid}`;
  // What this process wrote itself (a resident process's last capture) is not listed again.
  const kept = tops.get(key) ?? writtenSnapshotTop(commonDir, oid);
  if (kept) return kept;
  const r = await git(['ls-tree', '-z', oid], { ...opts, okCodes: [128] });
  if (r.code !== 0) return null;
  const top = parseTopListing(r.stdout.toString('utf8'));
  keep(key, top);
  return top;
}
