// Garbage collection of a xet directory store (git xet gc --store).
//
// STUB (lead): interface only; the implementation lands with the store-gc branch.

import { XetError } from '../errors';

export interface StoreGcOptions {
  dryRun: boolean;
  /** Seconds; undefined: the default (28 days). */
  graceSeconds?: number;
  now?: Date;
}

export type StoreGcResult = Record<string, unknown>;

export async function gcStore(cwd: string, store: string, opts: StoreGcOptions): Promise<StoreGcResult> {
  void cwd;
  void store;
  void opts;
  throw new XetError('USAGE', 'gc --store is not built yet');
}

export function describeStoreGc(r: StoreGcResult): string {
  return JSON.stringify(r);
}
