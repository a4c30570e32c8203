// Pins: durable roots a user or an agent sets on a snapshot (refs/xet/pins/<snapshot>, mirrored in
// the sidecar's pins table).
//
// STUB (lead): interface only; the implementation lands with the pins/retention branch.

import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import type { PinRecord } from './markers';

export interface PinResult {
  snapshot: string;
  ref: string;
  commit: string;
  reason: string;
  until: string | null;
  createdAt: string;
  /** false when an identical pin was already there. */
  created: boolean;
}

/** Pin a snapshot (full id; a dropped snapshot is brought back first). Holds the objects lock shared. */
export async function pinSnapshot(
  repo: Repo,
  snapshot: string,
  opts: { reason?: string; until?: Date | null; now?: Date },
): Promise<PinResult> {
  void repo;
  void snapshot;
  void opts;
  throw new XetError('USAGE', 'pinSnapshot is not built yet');
}

export type { PinRecord };
