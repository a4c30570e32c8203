// Pins: durable roots a user or an agent sets on a snapshot. The truth is the ref
// refs/xet/pins/<snapshot> → a pin marker commit (src/gc/markers.ts) whose parent is the snapshot;
// the sidecar's pins table is a cache written after the ref, so losing the sidecar loses no pin.
// Pinning a dropped snapshot brings it back in the same ref transaction. Pin holds the objects
// lock shared for its whole run: it makes objects reachable again that a running gc may be
// reclaiming.

import { XetError } from '../errors';
import { catFileBatch } from '../git/plumbing';
import { repoOpts, type Repo } from '../git/repo';
import { withExistingSidecar, withSidecar } from '../sidecar/db';
import { deletePinRow, deletedSnapshotIds, pinRows, upsertPinRow, type PinRow } from '../sidecar/pins';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { readSnapshot } from '../snapshot/store';
import { faultPoint } from '../testing/fault-points';
import { checkRecoverable, refsOfSnapshots, refTransaction, zeroOid } from './drop';
import {
  PIN_SCHEMA,
  isoSeconds,
  markerRef,
  readMarkers,
  writeMarker,
  type MarkerEntry,
  type PinRecord,
} from './markers';
import { holdObjectsShared } from './objects-lock';

export interface PinResult {
  snapshot: string;
  ref: string;
  commit: string;
  reason: string;
  until: string | null;
  createdAt: string;
  /** false when an identical pin was already there. */
  created: boolean;
  /** true when the snapshot was dropped and this pin brought it back. */
  undropped: boolean;
  /** The sidecar could not be updated (the ref is the truth; fsck --rebuild refills it). */
  warnings: string[];
}

const REASON_MAX = 4096;
/** Attempts when another process changes the refs between our look and our transaction. */
const ATTEMPTS = 3;

async function onePin(repo: Repo, snapshot: string): Promise<MarkerEntry<PinRecord> | null> {
  return (await readMarkers('pin', repoOpts(repo))).find((m) => m.snapshot === snapshot) ?? null;
}

function checkFullId(repo: Repo, snapshot: string): void {
  const len = repo.objectFormat === 'sha256' ? 64 : 40;
  if (!new RegExp(`^[0-9a-f]{${len}}$`).test(snapshot)) {
    throw new XetError('USAGE', `${JSON.stringify(snapshot)} is not a full snapshot id (${len} hex digits)`, {
      snapshot,
    });
  }
}

function sidecarWrite(repo: Repo, fn: Parameters<typeof withSidecar>[1]): string[] {
  try {
    withSidecar(repo.commonDir, fn);
    return [];
  } catch (e) {
    return [`the sidecar was not updated (git xet fsck --rebuild refills it from the refs): ${(e as Error).message}`];
  }
}

/** Pin a snapshot (full id; a dropped snapshot is brought back first). Holds the objects lock shared. */
export async function pinSnapshot(
  repo: Repo,
  snapshot: string,
  opts: { reason?: string; until?: Date | null; now?: Date },
): Promise<PinResult> {
  const now = opts.now ?? new Date();
  const reason = opts.reason ?? '';
  checkFullId(repo, snapshot);
  if (reason.length > REASON_MAX || reason.includes('\0')) {
    throw new XetError('USAGE', `a pin reason is at most ${REASON_MAX} characters, without NUL`, {
      length: reason.length,
    });
  }
  const untilDate = opts.until ?? null;
  if (untilDate && Number.isNaN(untilDate.getTime())) throw new XetError('USAGE', 'the --until time is not a date');
  const until = untilDate ? isoSeconds(untilDate) : null;
  if (until && Date.parse(until) <= now.getTime()) {
    throw new XetError('USAGE', `--until ${until} is not in the future; a pin that has already expired keeps nothing`, {
      until,
    });
  }
  const git = repoOpts(repo);
  const lock = holdObjectsShared(repo.commonDir);
  try {
    for (let attempt = 1; ; attempt++) {
      const refs = (await refsOfSnapshots([snapshot], git)).get(snapshot) as {
        snapshot: string | null;
        dropped: string | null;
        pin: string | null;
      };
      if (refs.snapshot && refs.snapshot !== snapshot) {
        throw new XetError(
          'INTEGRITY_MISMATCH',
          `the ref ${SNAPSHOT_REF_PREFIX}${snapshot} points at ${refs.snapshot}, not at the commit its name says`,
          { snapshot, ref: `${SNAPSHOT_REF_PREFIX}${snapshot}`, oid: refs.snapshot },
        );
      }
      let source: 'retained' | 'dropped' | 'collected' = 'retained';
      if (refs.snapshot) await readSnapshot(snapshot, git);
      else {
        const deleted = new Set(withExistingSidecar(repo.commonDir, deletedSnapshotIds) ?? []);
        source = await checkRecoverable(repo, snapshot, refs, deleted);
      }
      const existing = refs.pin ? await onePin(repo, snapshot) : null;
      const ref = markerRef('pin', snapshot);
      if (
        source === 'retained' &&
        existing?.record &&
        existing.commit === refs.pin &&
        existing.record.reason === reason &&
        existing.record.until === until
      ) {
        const row: PinRow = { snapshot, commit: existing.commit, reason, until, createdAt: existing.record.createdAt };
        const warnings = sidecarWrite(repo, (db) => upsertPinRow(db, row));
        return { ...row, ref, created: false, undropped: false, warnings };
      }
      const record: PinRecord = { schema: PIN_SCHEMA, snapshot, reason, until, createdAt: isoSeconds(now) };
      const commit = await writeMarker('pin', record, repo.objectFormat, git);
      await faultPoint('pin:after-objects');
      const lines = [refs.pin ? `update ${ref} ${commit} ${refs.pin}` : `create ${ref} ${commit}`];
      const snapRef = `${SNAPSHOT_REF_PREFIX}${snapshot}`;
      if (source === 'retained') lines.push(`verify ${snapRef} ${snapshot}`);
      else {
        if (refs.dropped) lines.push(`delete ${markerRef('drop', snapshot)} ${refs.dropped}`);
        else lines.push(`verify ${markerRef('drop', snapshot)} ${zeroOid(repo)}`);
        lines.push(`create ${snapRef} ${snapshot}`);
      }
      if (!(await refTransaction(repo, lines, `git xet pin: ${reason || 'pinned'}`.slice(0, 200)))) {
        // A concurrent pin, unpin or drop moved a ref since we looked: look again.
        if (attempt < ATTEMPTS) continue;
        throw new XetError(
          'BUSY',
          `the refs of snapshot ${snapshot} keep changing (other git xet processes); try again`,
          {
            snapshot,
          },
        );
      }
      await faultPoint('pin:after-ref');
      const row: PinRow = { snapshot, commit, reason, until, createdAt: record.createdAt };
      const warnings = sidecarWrite(repo, (db) => upsertPinRow(db, row));
      return { ...row, ref, created: true, undropped: source !== 'retained', warnings };
    }
  } finally {
    lock.release();
  }
}

export interface UnpinResult {
  snapshot: string;
  ref: string;
  /** The pin commit the ref pointed to. */
  commit: string;
  /** The removed pin's reason and until; null when its marker was unreadable. */
  reason: string | null;
  until: string | null;
  warnings: string[];
}

/** Remove a snapshot's pin (full id). NOT_PINNED when it has none. */
export async function unpinSnapshot(repo: Repo, snapshot: string): Promise<UnpinResult> {
  checkFullId(repo, snapshot);
  const ref = markerRef('pin', snapshot);
  const existing = await onePin(repo, snapshot);
  if (!existing) {
    // A sidecar row without its ref is no pin: the ref is the truth. Forget the row.
    const warnings = sidecarWrite(repo, (db) => deletePinRow(db, snapshot));
    throw new XetError('NOT_PINNED', `snapshot ${snapshot} has no pin (${ref} does not exist)`, {
      snapshot,
      ref,
      ...(warnings.length ? { warnings } : {}),
    });
  }
  if (!(await refTransaction(repo, [`delete ${ref} ${existing.commit}`], 'git xet unpin'))) {
    throw new XetError('BUSY', `the pin of ${snapshot} changed while it was being removed; try again`, { snapshot });
  }
  const warnings = sidecarWrite(repo, (db) => deletePinRow(db, snapshot));
  return {
    snapshot,
    ref,
    commit: existing.commit,
    reason: existing.record?.reason ?? null,
    until: existing.record?.until ?? null,
    warnings,
  };
}

export interface PinInfo {
  snapshot: string;
  ref: string;
  commit: string;
  /** null when the ref holds no readable pin (`problem` says why). */
  reason: string | null;
  until: string | null;
  createdAt: string | null;
  /** Past its `until`: no longer a root (gc may let the snapshot go). */
  expired: boolean;
  /** Why the ref is not a valid pin; null when it is. A malformed pin is listed, never hidden. */
  problem: string | null;
  /** The sidecar's row against the ref: the same, missing, or different. */
  sidecar: 'same' | 'missing' | 'differs';
}

export interface PinsResult {
  pins: PinInfo[];
  /** Sidecar rows with no pin ref (no longer pins: the ref is the truth). */
  sidecarOnly: { snapshot: string; commit: string }[];
}

/** Every pin, from the refs; compared with the sidecar, which is read but never written. */
export async function listPins(repo: Repo, now = new Date()): Promise<PinsResult> {
  const markers = await readMarkers('pin', repoOpts(repo));
  const rows = new Map((withExistingSidecar(repo.commonDir, pinRows) ?? []).map((r) => [r.snapshot, r]));
  const pins: PinInfo[] = markers.map((m) => {
    const row = rows.get(m.snapshot);
    rows.delete(m.snapshot);
    const r = m.record;
    const same =
      row &&
      r &&
      row.commit === m.commit &&
      row.reason === r.reason &&
      row.until === r.until &&
      row.createdAt === r.createdAt;
    return {
      snapshot: m.snapshot,
      ref: m.ref,
      commit: m.commit,
      reason: r?.reason ?? null,
      until: r?.until ?? null,
      createdAt: r?.createdAt ?? null,
      expired: r?.until ? Date.parse(r.until) <= now.getTime() : false,
      problem: m.problem ?? null,
      sidecar: !row ? 'missing' : same ? 'same' : 'differs',
    };
  });
  pins.sort((a, b) => ((a.createdAt ?? '') < (b.createdAt ?? '') ? 1 : -1));
  return { pins, sidecarOnly: [...rows.values()].map((r) => ({ snapshot: r.snapshot, commit: r.commit })) };
}

/** Unexpired, readable pins (what `git xet snapshots` flags). */
export async function pinnedSnapshots(repo: Repo, now = new Date()): Promise<Set<string>> {
  const markers = await readMarkers('pin', repoOpts(repo));
  return new Set(
    markers
      .filter((m) => m.record && (!m.record.until || Date.parse(m.record.until) > now.getTime()))
      .map((m) => m.snapshot),
  );
}

export interface WorktreePin {
  snapshot: string;
  reason: string | null;
  until: string | null;
  expired: boolean;
}

/**
 * The pins of snapshots captured in `worktree` (manifest.source.worktree), for `git xet status`:
 * read from the refs and the manifests, so they show without the sidecar too.
 */
export async function pinsOfWorktree(repo: Repo, worktree: string, now = new Date()): Promise<WorktreePin[]> {
  const { pins } = await listPins(repo, now);
  if (!pins.length) return [];
  const names = pins.map((p) => `${p.snapshot}:manifest.json`);
  const objs = await catFileBatch(names, repoOpts(repo), 1024 * 1024);
  return pins
    .filter((p) => {
      const o = objs.get(`${p.snapshot}:manifest.json`);
      if (!o) return false;
      try {
        return (
          (JSON.parse(o.data.toString('utf8')) as { source?: { worktree?: unknown } }).source?.worktree === worktree
        );
      } catch {
        return false;
      }
    })
    .map((p) => ({ snapshot: p.snapshot, reason: p.reason, until: p.until, expired: p.expired }));
}

export type { PinRecord };
