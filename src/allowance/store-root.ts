// A xet store's root: everything under the store directory (packs, the state log, intents, trash,
// temporaries), and the store's own allowance, recorded in the store itself (`<store>/ALLOWANCE`,
// xet.store-allowance/v1) so every client that pushes to it sees the same limit.
// OWNER: the stores helper (issue 11). Stub signatures; see /work/wt/ISSUE11.md.

import type { DirectoryStore } from '../remote/store';
import type { Amount, Limits } from './model';

export interface StoreUsage {
  root: string; // 'store:<path>'
  path: string;
  limits: Limits;
  used: Amount;
  temporary: Amount;
}

export function measureStore(store: DirectoryStore): StoreUsage {
  void store;
  throw new Error('measureStore: not implemented yet');
}
