// Choosing what `git xet push <remote> <id>…` publishes: snapshots and handoffs named by full or
// abbreviated id (at least 4 hex digits, as everywhere else). A handoff brings its snapshot's ref, so
// the receiver can restore it by id. Everything is resolved before anything is sent.

import { XetError } from '../errors';
import { gitText, type GitOptions } from '../git/exec';
import { listRefs } from '../git/plumbing';
import { HANDOFF_REF_PREFIX } from '../handoff/objects';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';

/** The refs/xet/* ref names to publish for these ids. */
export async function selectXetRefs(ids: string[], opts: GitOptions): Promise<Set<string>> {
  const refs = await listRefs(['refs/xet/'], opts);
  const snapshots = refs.filter((r) => r.name.startsWith(SNAPSHOT_REF_PREFIX));
  const handoffs = refs.filter((r) => r.name.startsWith(HANDOFF_REF_PREFIX));
  const out = new Set<string>();
  for (const id of ids) {
    if (!/^[0-9a-f]{4,64}$/.test(id)) {
      throw new XetError('USAGE', `${JSON.stringify(id)} is not a snapshot or handoff id (4 to 64 hex digits)`, { id });
    }
    const s = snapshots.filter((r) => r.name.slice(SNAPSHOT_REF_PREFIX.length).startsWith(id));
    const h = handoffs.filter((r) => r.name.slice(HANDOFF_REF_PREFIX.length).startsWith(id));
    if (s.length + h.length === 0) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot or handoff ${id} in this repository`, { id });
    }
    if (s.length + h.length > 1) {
      throw new XetError(
        'SNAPSHOT_NOT_FOUND',
        `${id} is ambiguous: ${s.length} snapshot(s) and ${h.length} handoff(s) start with it`,
        {
          id,
          matches: [...s, ...h].map((r) => r.name).slice(0, 20),
        },
      );
    }
    if (s.length) {
      out.add(s[0].name);
      continue;
    }
    out.add(h[0].name);
    // The handoff commit's parent is its snapshot; its ref goes along when this repository has it.
    const parents = await listParents(h[0].oid, opts);
    const snap =
      parents.length === 1
        ? snapshots.find((r) => r.name === `${SNAPSHOT_REF_PREFIX}${parents[0]}` && r.oid === parents[0])
        : undefined;
    if (snap) out.add(snap.name);
  }
  return out;
}

async function listParents(commit: string, opts: GitOptions): Promise<string[]> {
  const line = await gitText(['rev-list', '--parents', '-n', '1', commit], opts);
  return line.split(' ').slice(1).filter(Boolean);
}
