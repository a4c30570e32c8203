// A "shadow" git dir: a throwaway GIT_DIR whose only purpose is to make git read and write a
// working tree byte for byte. Its info/attributes (the highest-precedence attributes file) turns off
// every conversion (eol, clean/smudge filters, ident, working-tree-encoding), and its config ignores
// the user's global and system settings. Objects still go to (or come from) a real object database
// through GIT_OBJECT_DIRECTORY, so nothing is copied. This is how capture hashes files without clean
// filters and how restore writes them without smudging, using git's own C paths in bulk.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface ShadowSpec {
  /** Directory to create the shadow in (removed by dispose). */
  dir: string;
  objectFormat: 'sha1' | 'sha256';
  objectsDir: string;
  worktree: string;
  indexFile: string;
  /** Extra object directories that may be read (not written). */
  alternates?: string[];
  /** The version of the index files git writes here (index.version): 4 unless given. */
  indexVersion?: 2 | 3 | 4;
}

export interface Shadow {
  env: Record<string, string | undefined>;
  dispose(): void;
}

const NEUTRAL_ATTRIBUTES = '* -text -crlf -filter -ident -working-tree-encoding\n';

/**
 * `git -c` arguments for a checkout that shares the machine with this process's own work (the
 * chunked files reassembled alongside): one parallel-checkout worker fewer than the cores. A
 * worker is a process fed through pipes, and beside a busy core the second one only added CPU:
 * the bench tree's restore took 4.45 s with one and 4.73 s with two (1 s more CPU), where without
 * chunked files two are faster (4.7 s against 5.3 s). docs/BENCHMARKS.md "Spawning git".
 */
export function checkoutBesideWork(): string[] {
  return ['-c', `checkout.workers=${Math.max(1, os.availableParallelism() - 1)}`];
}

export function createShadow(spec: ShadowSpec): Shadow {
  fs.mkdirSync(path.join(spec.dir, 'info'), { recursive: true });
  fs.mkdirSync(path.join(spec.dir, 'refs'), { recursive: true });
  fs.writeFileSync(path.join(spec.dir, 'HEAD'), 'ref: refs/heads/xet-shadow\n');
  const sha256 = spec.objectFormat === 'sha256';
  fs.writeFileSync(
    path.join(spec.dir, 'config'),
    [
      '[core]',
      `\trepositoryformatversion = ${sha256 ? 1 : 0}`,
      '\tbare = false',
      '\tfilemode = true',
      '\tsymlinks = true',
      '\tautocrlf = false',
      '\tignorecase = false',
      '\tprotectNTFS = false',
      '\tprotectHFS = false',
      '\tfsmonitor = false',
      '\tuntrackedCache = false',
      '\tsplitIndex = false',
      '[pack]',
      '\tcompression = 1',
      // Restore writes whole trees with checkout-index: let git spread that over every core.
      '[checkout]',
      `\tworkers = ${os.availableParallelism()}`,
      '\tthresholdForParallelism = 100',
      '[index]',
      `\tversion = ${spec.indexVersion ?? 4}`,
      '[gc]',
      '\tauto = 0',
      ...(sha256 ? ['[extensions]', '\tobjectformat = sha256'] : []),
      '',
    ].join('\n'),
  );
  fs.writeFileSync(path.join(spec.dir, 'info', 'attributes'), NEUTRAL_ATTRIBUTES);
  const env: Record<string, string | undefined> = {
    GIT_DIR: spec.dir,
    GIT_WORK_TREE: spec.worktree,
    GIT_OBJECT_DIRECTORY: spec.objectsDir,
    GIT_INDEX_FILE: spec.indexFile,
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_ALTERNATE_OBJECT_DIRECTORIES: spec.alternates?.length ? spec.alternates.join(':') : undefined,
    GIT_COMMON_DIR: undefined,
    GIT_NAMESPACE: undefined,
  };
  return {
    env,
    dispose() {
      fs.rmSync(spec.dir, { recursive: true, force: true });
    },
  };
}
