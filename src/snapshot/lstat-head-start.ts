// A resident process's head start on a re-capture's lstat of every path, the slowest step of a
// daemon capture (~60 ms of a ~240 ms one here): the paths the last capture of the worktree had are
// lstat'ed on other threads from the moment a request arrives, while the capture waits for its git
// reads and walks. The capture takes those rows only when its own sorted paths are, byte for byte,
// the ones lstat'ed (else it lstats as before), and then starts its racy window when they began:
// stat data taken earlier vouches for less, never for more. The CLI has none (one capture per
// process, nothing to begin from).

import { lstatManyLater } from '../git/lstat-many';

export interface LstatHeadStart {
  /** When the lstat began (ms since the epoch). */
  readonly begun: number;
  /** The paths lstat'ed (joinNames), or null when there was no last capture to begin from. */
  readonly names: Buffer | null;
  /** Their rows (lstatMany's), or null when the lstat could not be done this way. */
  readonly rows: Promise<Float64Array | null>;
  /** The paths this capture lstat'ed, for the next one to begin from; `used`: whether it took
   * the head start's rows. */
  keep(names: Buffer, count: number, used: boolean): void;
}

/** How many captures took a head start's rows, and how many lstat'ed themselves (`daemon status`). */
const counts = { used: 0, unused: 0 };

export function headStartCounts(): { used: number; unused: number } {
  return { ...counts };
}

/** The last capture's paths, for one worktree at a time (a daemon serves one). */
let last: { root: string; names: Buffer; count: number } | null = null;

export function beginLstatHeadStart(root: string): LstatHeadStart {
  const prior = last?.root === root ? last : null;
  const begun = Date.now();
  return {
    begun,
    names: prior?.names ?? null,
    rows: prior ? lstatManyLater(root, prior.names, prior.count) : Promise.resolve(null),
    keep(names: Buffer, count: number, used: boolean): void {
      last = { root, names, count };
      counts[used ? 'used' : 'unused']++;
    },
  };
}
