// Dropping and undropping snapshots: `git xet drop` moves refs/xet/snapshots/<id> to
// refs/xet/dropped/<id> (a drop marker commit whose parent is the snapshot, so nothing becomes
// unreachable until gc deletes the marker after the grace); `git xet undrop` moves it back, or, when
// gc already deleted the dropped ref, re-creates the snapshot ref if every object is still there.
// Also the id resolution pin, unpin, drop and undrop share: a snapshot may be known only by a
// dropped ref, a pin ref or the sidecar's record of what gc deleted. Every id is checked before
// anything is written; the refs of one call change in one `git update-ref --stdin` transaction,
// each with its old value checked, so a concurrent pin, drop or gc makes it fail whole.

import { XetError } from '../errors';
import { git, type GitOptions } from '../git/exec';
import { listRefs, type RefEntry } from '../git/plumbing';
import { repoOpts, type Repo } from '../git/repo';
import { withExistingSidecar } from '../sidecar/db';
import { deletedSnapshotIds } from '../sidecar/pins';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { readSnapshot, resolveSnapshotOid, snapshotRefIsSound } from '../snapshot/store';
import { faultPoint } from '../testing/fault-points';
import {
  DROP_SCHEMA,
  DROPPED_REF_PREFIX,
  PIN_REF_PREFIX,
  isoSeconds,
  markerRef,
  readMarkers,
  writeMarker,
  type DropRecord,
} from './markers';
import { holdObjectsShared } from './objects-lock';
import { readRoots, type Keeper } from './roots';

const HEX_ID = /^[0-9a-f]{4,64}$/;

export function zeroOid(repo: Repo): string {
  return '0'.repeat(repo.objectFormat === 'sha256' ? 64 : 40);
}

function fullIdLength(repo: Repo): number {
  return repo.objectFormat === 'sha256' ? 64 : 40;
}

/** The refs git xet keeps for one snapshot id. */
export interface SnapshotRefs {
  /** refs/xet/snapshots/<id> (its target: equal to the id when sound). */
  snapshot: string | null;
  /** refs/xet/dropped/<id>: the drop marker commit. */
  dropped: string | null;
  /** refs/xet/pins/<id>: the pin marker commit. */
  pin: string | null;
}

/** The snapshot, dropped and pin refs of these ids, in one for-each-ref. */
export async function refsOfSnapshots(ids: string[], opts: GitOptions): Promise<Map<string, SnapshotRefs>> {
  const want = new Set(ids);
  const out = new Map<string, SnapshotRefs>(ids.map((id) => [id, { snapshot: null, dropped: null, pin: null }]));
  for (const r of await listRefs([SNAPSHOT_REF_PREFIX, DROPPED_REF_PREFIX, PIN_REF_PREFIX], opts)) {
    for (const [prefix, key] of [
      [SNAPSHOT_REF_PREFIX, 'snapshot'],
      [DROPPED_REF_PREFIX, 'dropped'],
      [PIN_REF_PREFIX, 'pin'],
    ] as const) {
      if (!r.name.startsWith(prefix)) continue;
      const id = r.name.slice(prefix.length);
      if (want.has(id)) (out.get(id) as SnapshotRefs)[key] = r.oid;
    }
  }
  return out;
}

function misnamed(r: RefEntry): XetError {
  return new XetError(
    'INTEGRITY_MISMATCH',
    `the ref ${r.name} points at ${r.oid}, not at the commit its name says; it was not made by git xet (delete it with git update-ref -d)`,
    { snapshot: r.name.slice(SNAPSHOT_REF_PREFIX.length), ref: r.name, oid: r.oid },
  );
}

/**
 * Full snapshot ids for what a user typed: a full or abbreviated id (at least 4 hex digits) among
 * the snapshots, dropped snapshots, pins and the snapshots gc deleted (the sidecar remembers them),
 * or any name `git xet restore` takes (resolved as the store does). Duplicates are merged, in order.
 */
export async function resolveSnapshotIds(repo: Repo, specs: string[]): Promise<string[]> {
  const opts = repoOpts(repo);
  const refs = await listRefs([SNAPSHOT_REF_PREFIX, DROPPED_REF_PREFIX, PIN_REF_PREFIX], opts);
  const known = new Map<string, RefEntry | null>();
  for (const r of refs) {
    for (const prefix of [SNAPSHOT_REF_PREFIX, DROPPED_REF_PREFIX, PIN_REF_PREFIX]) {
      if (!r.name.startsWith(prefix)) continue;
      const id = r.name.slice(prefix.length);
      if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(id)) continue;
      // Remember a snapshot ref that names another commit: naming it is refused, as everywhere.
      if (prefix === SNAPSHOT_REF_PREFIX && !snapshotRefIsSound(r)) known.set(id, r);
      else if (!known.has(id)) known.set(id, null);
    }
  }
  for (const id of withExistingSidecar(repo.commonDir, deletedSnapshotIds) ?? []) {
    if (!known.has(id)) known.set(id, null);
  }
  const out: string[] = [];
  for (const spec of specs) {
    let id: string;
    if (HEX_ID.test(spec)) {
      const matches = [...known.keys()].filter((k) => k.startsWith(spec));
      if (matches.length > 1) {
        throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} is ambiguous: ${matches.length} snapshots start with it`, {
          snapshot: spec,
          matches: matches.slice(0, 20),
        });
      }
      if (!matches.length) {
        throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot ${spec} in this repository`, { snapshot: spec });
      }
      id = matches[0];
    } else {
      id = await resolveSnapshotOid(spec, opts);
      if (!known.has(id)) {
        throw new XetError('SNAPSHOT_NOT_FOUND', `${spec} (${id}) is not a snapshot of this repository`, {
          snapshot: spec,
        });
      }
    }
    const bad = known.get(id);
    if (bad) throw misnamed(bad);
    if (id.length !== fullIdLength(repo)) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `${id} is not an object id of this repository's format`, {
        snapshot: id,
      });
    }
    if (!out.includes(id)) out.push(id);
  }
  return out;
}

/**
 * Whether every object a snapshot reaches is in the repository (one `rev-list --objects`): what
 * makes a snapshot whose refs gc deleted still recoverable. Returns the missing count (-1: the
 * snapshot commit itself is gone).
 */
export async function missingObjects(oid: string, opts: GitOptions): Promise<number> {
  const r = await git(['rev-list', '--objects', '--missing=print', oid, '--'], { ...opts, okCodes: [128] });
  if (r.code !== 0) return -1;
  const text = r.stdout.toString('utf8');
  let missing = 0;
  for (let at = text.indexOf('\n?'); at !== -1; at = text.indexOf('\n?', at + 1)) missing++;
  if (text.startsWith('?')) missing++;
  return missing;
}

/** Where a snapshot that is not retained can be brought back from; throws when it cannot. */
export type UndropSource = 'dropped' | 'collected';

/**
 * Check that a snapshot with no snapshot ref can be brought back (`refs.dropped` set, or gc deleted
 * its refs but every object is still here), and that it is a snapshot. Call with the objects lock
 * held shared, so no gc can reclaim what was found between this check and the new ref.
 */
export async function checkRecoverable(
  repo: Repo,
  oid: string,
  refs: SnapshotRefs,
  deleted: Set<string>,
): Promise<UndropSource> {
  const opts = repoOpts(repo);
  let source: UndropSource;
  if (refs.dropped) source = 'dropped';
  else if (deleted.has(oid) || refs.pin) {
    // Known from gc's record, or only an expired pin is left (it keeps the objects reachable, but
    // the sidecar that remembered the drop may be gone): whatever is missing decides.
    const missing = await missingObjects(oid, opts);
    if (missing !== 0) {
      throw new XetError(
        'SNAPSHOT_RECLAIMED',
        `snapshot ${oid} was dropped and git xet gc has reclaimed ${
          missing < 0 ? 'its commit' : `${missing} of its objects`
        }; it cannot be brought back here (fetch it from a remote that has it)`,
        { snapshot: oid, missing: missing < 0 ? null : missing },
      );
    }
    source = 'collected';
  } else {
    throw new XetError('SNAPSHOT_NOT_FOUND', `snapshot ${oid} is neither retained nor dropped here`, {
      snapshot: oid,
    });
  }
  // The parent of a dropped ref is whatever its name says only if it was made by git xet: read it.
  await readSnapshot(oid, opts);
  return source;
}

/** Run one `update-ref --stdin` transaction; false when git refused it (an old value changed). */
export async function refTransaction(repo: Repo, lines: string[], message: string): Promise<boolean> {
  const r = await git(['update-ref', '-m', message, '--stdin'], {
    ...repoOpts(repo),
    input: lines.map((l) => `${l}\n`).join(''),
    okCodes: [128],
  });
  return r.code === 0;
}

export interface DropEntry {
  snapshot: string;
  /** refs/xet/dropped/<snapshot>. */
  ref: string;
  /** The drop marker commit (null when an existing dropped ref holds something else). */
  commit: string;
  droppedAt: string | null;
  /** false when the snapshot was already dropped. */
  created: boolean;
}

export interface DropResult {
  dropped: DropEntry[];
}

function deletedSet(repo: Repo): Set<string> {
  return new Set(withExistingSidecar(repo.commonDir, deletedSnapshotIds) ?? []);
}

/**
 * Stop retaining snapshots (`git xet drop`). Refuses, before anything is written, any id that is
 * unknown or still a root (SNAPSHOT_RETAINED, details.roots); an already dropped one is reported
 * with created:false.
 */
export async function dropSnapshots(repo: Repo, ids: string[], now = new Date()): Promise<DropResult> {
  if (!ids.length) throw new XetError('USAGE', 'name at least one snapshot to drop');
  const opts = repoOpts(repo);
  const oids = await resolveSnapshotIds(repo, ids);
  const state = await refsOfSnapshots(oids, opts);
  const markers = new Map((await readMarkers('drop', opts)).map((m) => [m.snapshot, m]));
  const todo: string[] = [];
  const result: DropResult = { dropped: [] };
  for (const oid of oids) {
    const refs = state.get(oid) as SnapshotRefs;
    if (refs.snapshot) {
      todo.push(oid);
      continue;
    }
    if (refs.dropped) {
      const m = markers.get(oid);
      result.dropped.push({
        snapshot: oid,
        ref: markerRef('drop', oid),
        commit: refs.dropped,
        droppedAt: m?.record?.droppedAt ?? null,
        created: false,
      });
      continue;
    }
    throw new XetError(
      'SNAPSHOT_NOT_FOUND',
      `snapshot ${oid} is not retained here (it was dropped and collected, or only a pin of it is left)`,
      { snapshot: oid },
    );
  }
  const refused = await rootsAmong(repo, todo, now);
  if (refused.length) throw retained(refused);
  await faultPoint('drop:after-check');
  const droppedAt = isoSeconds(now);
  const lines: string[] = [];
  const zero = zeroOid(repo);
  for (const oid of todo) {
    const record: DropRecord = { schema: DROP_SCHEMA, snapshot: oid, droppedAt, reason: 'explicit' };
    const commit = await writeMarker('drop', record, repo.objectFormat, opts);
    const refs = state.get(oid) as SnapshotRefs;
    lines.push(
      `delete ${SNAPSHOT_REF_PREFIX}${oid} ${oid}`,
      `create ${markerRef('drop', oid)} ${commit}`,
      // A pin made since the check (pin takes no lock against drop) fails the whole transaction.
      `verify ${markerRef('pin', oid)} ${refs.pin ?? zero}`,
    );
    result.dropped.push({ snapshot: oid, ref: markerRef('drop', oid), commit, droppedAt, created: true });
  }
  if (lines.length && !(await refTransaction(repo, lines, 'git xet drop'))) {
    // Something changed between the check and the transaction: say what, from a fresh look.
    const again = await refsOfSnapshots(todo, opts);
    const late = await rootsAmong(repo, todo, now);
    if (late.length) throw retained(late);
    throw new XetError(
      'BUSY',
      'the snapshots changed while they were being dropped (another git xet ran); nothing was dropped, try again',
      {
        snapshots: todo,
        refs: Object.fromEntries(again),
      },
    );
  }
  await faultPoint('drop:after-refs');
  result.dropped.sort((a, b) => oids.indexOf(a.snapshot) - oids.indexOf(b.snapshot));
  return result;
}

/** The snapshots among `oids` that are roots, with what keeps each (one reading of the roots). */
async function rootsAmong(repo: Repo, oids: string[], now: Date): Promise<{ snapshot: string; roots: Keeper[] }[]> {
  if (!oids.length) return [];
  const { roots } = await readRoots(repo, now);
  return oids.flatMap((oid) => (roots.get(oid)?.length ? [{ snapshot: oid, roots: roots.get(oid) as Keeper[] }] : []));
}

function retained(refused: { snapshot: string; roots: Keeper[] }[]): XetError {
  const first = refused[0];
  const what = first.roots.map((k) => `${k.kind} ${k.name}`).join(', ');
  return new XetError(
    'SNAPSHOT_RETAINED',
    `snapshot ${first.snapshot} is still a root (${what}); nothing was dropped` +
      (refused.length > 1 ? ` (${refused.length} snapshots refused)` : ''),
    { snapshot: first.snapshot, roots: first.roots, refused },
  );
}

export interface UndropEntry {
  snapshot: string;
  /** refs/xet/snapshots/<snapshot>. */
  ref: string;
  /** `dropped`: from its dropped ref; `collected`: gc had deleted its refs, every object was still
   * here; `retained`: it was not dropped (nothing done). */
  from: 'dropped' | 'collected' | 'retained';
  created: boolean;
}

export interface UndropResult {
  undropped: UndropEntry[];
}

/** Bring dropped snapshots back (`git xet undrop`). Holds the objects lock shared. */
export async function undropSnapshots(repo: Repo, ids: string[]): Promise<UndropResult> {
  if (!ids.length) throw new XetError('USAGE', 'name at least one snapshot to undrop');
  const lock = holdObjectsShared(repo.commonDir);
  try {
    const opts = repoOpts(repo);
    const oids = await resolveSnapshotIds(repo, ids);
    const state = await refsOfSnapshots(oids, opts);
    const deleted = deletedSet(repo);
    const result: UndropResult = { undropped: [] };
    const lines: string[] = [];
    for (const oid of oids) {
      const refs = state.get(oid) as SnapshotRefs;
      const ref = `${SNAPSHOT_REF_PREFIX}${oid}`;
      if (refs.snapshot) {
        result.undropped.push({ snapshot: oid, ref, from: 'retained', created: false });
        continue;
      }
      const from = await checkRecoverable(repo, oid, refs, deleted);
      if (refs.dropped) lines.push(`delete ${markerRef('drop', oid)} ${refs.dropped}`);
      lines.push(`create ${ref} ${oid}`);
      result.undropped.push({ snapshot: oid, ref, from, created: true });
    }
    if (lines.length && !(await refTransaction(repo, lines, 'git xet undrop'))) {
      throw new XetError(
        'BUSY',
        'the snapshots changed while they were being brought back (another git xet ran); nothing was changed, try again',
        { snapshots: oids },
      );
    }
    return result;
  } finally {
    lock.release();
  }
}
