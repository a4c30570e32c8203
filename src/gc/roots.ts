// Marking: what keeps each snapshot alive. A root is a pin, a live fork (its snapshot, its base,
// the snapshot its discard kept), an unexpired handoff, a task that is not collected; a rule is the
// retention policy (or its absence) and xet.gc.keepUnpushed. Roots refuse an explicit drop; rules
// only decide what gc lets go by itself. Everything is read from refs and worktrees first and the
// sidecar second, so marking after the sidecar was lost keeps every pin and live fork.
//
// STUB (lead): interface only; the implementation lands with the pins/retention branch.

import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import type { DropRecord, MarkerEntry, PinRecord } from './markers';

/** Roots refuse `drop`; rules (retention, unpushed, no-policy) only guide gc. */
export type RootKind = 'pin' | 'fork' | 'fork-base' | 'fork-kept' | 'handoff' | 'task';
export type RuleKind = 'retention' | 'unpushed' | 'no-policy';

export interface Keeper {
  kind: RootKind | RuleKind;
  /** What it is: the pin's reason, the fork's id and dir, the handoff id, the rule (`keepLast 5`). */
  name: string;
}

export interface SnapshotRef {
  oid: string;
  ref: string;
  /** The snapshot commit's committer time. */
  createdAt: string;
  /** manifest.source.worktree: the retention group; null when unreadable. */
  worktree: string | null;
}

export interface Marking {
  now: Date;
  /** Every refs/xet/snapshots/* ref (the retained candidates). */
  snapshots: SnapshotRef[];
  /** For every snapshot kept, why (never empty for a kept one). */
  kept: Map<string, Keeper[]>;
  /** Snapshots the retention policy lets go (no root, no keeping rule). */
  released: { oid: string; ref: string; why: string }[];
  /** refs/xet/dropped/*: dropped snapshots awaiting reclamation. */
  dropped: MarkerEntry<DropRecord>[];
  /** Pins past their `until` (no longer roots). */
  expiredPins: MarkerEntry<PinRecord>[];
  /** Handoff refs past their expiresAt. */
  expiredHandoffs: { ref: string; id: string; snapshot: string | null; expiresAt: string }[];
  /** Snapshots whose base (bases/<oid>/) a live fork uses. */
  liveBases: Set<string>;
  /** Roots that could not be read exactly (a malformed pin ref…): reported, and kept on the safe side. */
  problems: string[];
}

export async function markRoots(repo: Repo, now: Date): Promise<Marking> {
  void repo;
  void now;
  throw new XetError('USAGE', 'markRoots is not built yet');
}

/** The roots (not rules) that keep one snapshot: what `drop` refuses on. */
export async function rootsOf(repo: Repo, snapshot: string, now: Date): Promise<Keeper[]> {
  void repo;
  void snapshot;
  void now;
  throw new XetError('USAGE', 'rootsOf is not built yet');
}
