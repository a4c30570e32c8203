// A fork's root: the storage a fork itself uses (an overlay fork's upper layer, a clone or copy
// fork's files), its allowance (`fork --allowance BYTES[,FILES]`, `xet.fork.allowance`), and the
// route that bounds what the fork's own processes write: upper and work dirs on a filesystem of the
// allowance's size (a loop-mounted image, or tmpfs), or a project quota where the kernel has one.
// OWNER: the forks helper (issue 11). Stub signatures; see /work/wt/ISSUE11.md.

import type { Repo } from '../git/repo';
import type { Db } from '../sidecar/db';
import type { ForkRow } from '../sidecar/forks';
import type { Amount, Limits } from './model';

export type LayerRoute = 'image' | 'tmpfs' | 'project-quota';

export interface ForkUsage {
  root: string; // 'fork:<id>'
  id: string;
  dir: string;
  mode: ForkRow['mode'];
  limits: Limits;
  used: Amount;
  /** What bounds the fork's own processes: covered only with a route the kernel enforces. */
  route: { kind: LayerRoute | null; covered: boolean; reason: string };
  /** When `used` was measured (a copy fork's files are not walked on every check). */
  measuredAt: string | null;
}

export function measureFork(repo: Repo, db: Db, row: ForkRow, recount: boolean): ForkUsage {
  void repo;
  void db;
  void row;
  void recount;
  throw new Error('measureFork: not implemented yet');
}
