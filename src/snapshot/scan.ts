// Turning a list of worktree paths into a tree object, byte for byte, through git's own C paths:
// `update-index` (lstat, stat-cache hits, hashing) against an index file that persists between runs,
// then `write-tree` (whose cache-tree extension makes unchanged directories free). With a persistent
// index this is O(changes) after the first run; with `write: false` no blob is stored (verify, diff).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, gitText, gitZ, joinZ } from '../git/exec';
import { createShadow } from '../git/shadow';

export interface ScanSpec {
  worktree: string;
  objectFormat: 'sha1' | 'sha256';
  /** Where objects are written (blobs when `write`, trees always). */
  objectsDir: string;
  /** Extra object dirs to read from. */
  alternates?: string[];
  /** The index file used as stat cache; created if missing. */
  indexFile: string;
  /** Scratch directory for the shadow git dir. */
  scratchDir: string;
  /** Files and symlinks, relative to worktree, '/'-separated. */
  paths: string[];
  write: boolean;
}

export async function scanToTree(spec: ScanSpec): Promise<string> {
  const shadow = createShadow({
    dir: spec.scratchDir,
    objectFormat: spec.objectFormat,
    objectsDir: spec.objectsDir,
    worktree: spec.worktree,
    indexFile: spec.indexFile,
    alternates: spec.alternates,
  });
  try {
    const opts = { cwd: spec.worktree, env: shadow.env };
    // A lock left by a killed run: we hold the workspace lock, so nobody else is using this index.
    fs.rmSync(`${spec.indexFile}.lock`, { force: true });
    let previous: string[] = [];
    if (fs.existsSync(spec.indexFile)) {
      try {
        previous = await gitZ(['ls-files', '-z'], opts);
      } catch {
        fs.rmSync(spec.indexFile, { force: true }); // unreadable cache: start cold
      }
    }
    const current = new Set(spec.paths);
    const gone = previous.filter((p) => !current.has(p));
    if (gone.length) {
      await git(['update-index', '--force-remove', '-z', '--stdin'], { ...opts, input: joinZ(gone) });
    }
    const args = ['update-index', '--add', '--remove', '--replace', '-z', '--stdin'];
    if (!spec.write) args.splice(1, 0, '--info-only');
    await git(args, { ...opts, input: joinZ(spec.paths) });
    const writeTree = ['write-tree'];
    if (!spec.write) writeTree.push('--missing-ok');
    return await gitText(writeTree, opts);
  } finally {
    shadow.dispose();
  }
}

export function scratchDir(base: string, what: string): string {
  fs.mkdirSync(base, { recursive: true });
  return fs.mkdtempSync(path.join(base, `${what}-`));
}
