// The hook through which a resident process lends captures its watch of the worktree
// (src/daemon/tree-watch.ts): a capture of that worktree (not an inner repository's, not another
// view of it) asks for a memo of the last walk before it walks, and hands the new records back after.
// The CLI never registers one: without a watch every directory is read, as before.

import type { CapturePolicy } from './policy';
import type { DirRecord, WalkMemo } from './walk';

/** Everything the walk's decisions depend on besides the directories themselves. */
export interface WalkInputs {
  root: string;
  tracked: ReadonlySet<string>;
  ignored: ReadonlySet<string>;
  policy: CapturePolicy;
  gitDirs: readonly string[];
}

export interface WorktreeWatch {
  /** A memo for a walk with these inputs, or null (another root, the watch broken or refused). */
  begin(inputs: WalkInputs): WalkMemo | null;
  /** The walk finished (`records`: what it read and decided) or failed (null). */
  end(memo: WalkMemo, records: Map<string, DirRecord> | null): void;
}

let lent: WorktreeWatch | null = null;

/** Set by the daemon at start (null: none). One per process: a daemon serves one worktree. */
export function lendWorktreeWatch(watch: WorktreeWatch | null): void {
  lent = watch;
}

export function worktreeWatch(): WorktreeWatch | null {
  return lent;
}
