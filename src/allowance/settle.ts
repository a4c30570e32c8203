// Settling work's admission: gc and task recover free space or must run for recovery, so they are
// admitted into the repository root's headroom (a capture over limit − headroom is refused; these
// still run) and, like every writer, recount first when a writer died since the ledger was right.
// What they add themselves is journal rows in the sidecar: the bound below is what they are admitted
// for, measured by test/slow/allowance-growth.test.ts (docs/CLI.md "Commands that add nothing").

import type { Repo } from '../git/repo';
import { admitRepository, type Admission } from './admit';

/** The most a gc or task recover run adds to the repository root: its journal rows (a gc_runs row
 * with its plan and result, task events and status updates) and the pages and WAL frames they take.
 * Measured: a gc run of a small repository adds under 16 KiB, a task recover a few KiB. */
export const SETTLE_JOURNAL_BOUND_BYTES = 64 * 1024;

/** Admit a settling command (class 'settle'). Call `end()` in a finally. */
export function admitSettle(repo: Repo, what: 'gc' | 'task recover'): Promise<Admission> {
  return admitRepository(repo, { bytes: SETTLE_JOURNAL_BOUND_BYTES, files: 0 }, 'settle', what);
}
