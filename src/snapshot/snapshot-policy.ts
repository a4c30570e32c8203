// Looking at a worktree through a snapshot's own capture policy (manifest.policy): what that capture
// would have taken, and what the policy left out on purpose (secrets, --exclude patterns, ignored
// files under `ignored: none`). verify and status compare only what the policy takes, and report the
// rest separately, so a copy that holds a secret the capture left out is not "different".

import * as fs from 'node:fs';
import * as path from 'node:path';
import { gitZ } from '../git/exec';
import { readIndexEntries } from '../git/plumbing';
import { indexRef, repoOpts, type Repo } from '../git/repo';
import type { Manifest } from './manifest';
import { PatternMatcher, type CapturePolicy } from './policy';
import { scanToTree } from './scan';
import { walkWorktree, type FoundRepository } from './walk';
import type { FileMeta } from './filemeta';

/** What a snapshot's policy left out of a worktree: reported, never a difference. */
export interface ExcludedByPolicy {
  /** Untracked or ignored files matching a secret pattern (paths). */
  secrets: string[];
  /** Entries matching an exclude pattern (`--exclude`, `xet.capture.exclude`). */
  byPattern: number;
  /** Ignored entries not taken because the policy is `ignored: none` (a whole directory counts once). */
  ignored: number;
}

/** The policy a snapshot was captured with, exactly as its manifest records it (today's
 * `git config xet.capture.*` plays no part: the snapshot says what it took). */
export function policyOfSnapshot(p: Manifest['policy']): CapturePolicy {
  const inc = new PatternMatcher(p.include);
  const exc = new PatternMatcher(p.exclude);
  const sec = new PatternMatcher(p.secretPatterns);
  return {
    ignored: p.ignored,
    include: p.include,
    exclude: p.exclude,
    secretPatterns: p.secretPatterns,
    isIncluded: (x) => inc.matches(x),
    isExcluded: (x) => exc.matches(x),
    isSecret: (x) => sec.matches(x),
  };
}

/** What a scan of a worktree under some policy found. */
export interface PolicyScan {
  tree: string;
  emptyDirs: string[];
  excludedByPolicy: ExcludedByPolicy;
  meta: FileMeta | null;
  repositories: FoundRepository[];
  skipped: { path: string; reason: string }[];
}

/** The worktree's files as the snapshot's capture would have taken them, as a tree; nothing is
 * stored (trees go to `objects`). `statCache`: an index with stat data of an earlier files tree of
 * this worktree (copied, never written), so only files whose stat data changed are hashed. */
export async function scanUnderSnapshotPolicy(
  target: Repo,
  manifest: Manifest,
  scratch: string,
  objects: string,
  alternates: string[],
  statCache?: string,
  meta = false,
): Promise<PolicyScan> {
  return scanUnderPolicy(
    target,
    policyOfSnapshot(manifest.policy),
    'policy',
    scratch,
    objects,
    alternates,
    statCache,
    meta,
  );
}

/** The worktree's files as a capture with `policy` would take them (see scanUnderSnapshotPolicy);
 * `name` keeps the scratch files of scans under different policies apart. */
export async function scanUnderPolicy(
  target: Repo,
  policy: CapturePolicy,
  name: string,
  scratch: string,
  objects: string,
  alternates: string[],
  statCache?: string,
  meta = false,
): Promise<PolicyScan> {
  const opts = repoOpts(target);
  const [entries, ignored] = await Promise.all([
    readIndexEntries(opts, indexRef(target)),
    // Only needed to tell ignored files apart when the policy leaves them out.
    policy.ignored === 'none'
      ? gitZ(['ls-files', '-z', '-o', '-i', '--exclude-standard', '--directory'], opts)
      : Promise.resolve([] as string[]),
  ]);
  const walk = walkWorktree({
    root: target.worktree,
    tracked: new Set(entries.map((e) => e.path)),
    ignored: new Set(ignored),
    policy,
    gitDirs: [target.gitDir, target.commonDir],
  });
  const indexFile = path.join(scratch, `${name}-files.index`);
  if (statCache && fs.existsSync(statCache)) fs.copyFileSync(statCache, indexFile);
  const { tree, entries: fileMeta } = await scanToTree({
    meta,
    worktree: target.worktree,
    objectFormat: target.objectFormat,
    objectsDir: objects,
    alternates,
    indexFile,
    scratchDir: path.join(scratch, `shadow-${name}`),
    paths: walk.paths,
    write: false,
  });
  return {
    tree,
    emptyDirs: walk.emptyDirs,
    meta: fileMeta ?? null,
    repositories: walk.repositories,
    skipped: walk.skipped,
    excludedByPolicy: {
      secrets: walk.excludedSecrets,
      byPattern: walk.excludedByPattern,
      ignored: walk.ignoredNotCaptured,
    },
  };
}
