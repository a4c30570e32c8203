// A resident process's memos of the last capture of its worktree (a daemon serves one): its tree
// build (src/git/tree-memo.ts) and its filemeta's parts (filemeta.ts). Each is only a shortcut to
// the bytes a whole build gives, checked against its own last input; the CLI has none (one capture
// per process, nothing to begin from).

import { TreeBuildMemo } from '../git/tree-memo';
import { FileMetaPartsMemo } from './filemeta';

export interface CaptureMemos {
  trees: TreeBuildMemo;
  fileMeta: FileMetaPartsMemo;
}

let resident: { root: string; memos: CaptureMemos } | null = null;

/** The memos for captures of `root` (another root starts afresh). */
export function residentCaptureMemos(root: string): CaptureMemos {
  if (resident?.root !== root)
    resident = { root, memos: { trees: new TreeBuildMemo(), fileMeta: new FileMetaPartsMemo() } };
  return resident.memos;
}
