// capture -> restore -> compare -> verify (and verify detects a one-byte change).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, gitTry } from './git';
import type { Sandbox } from './sandbox';
import {
  collectGitState,
  compareGitStates,
  compareTrees,
  statusWithout,
  walkTree,
  withoutPaths,
  type GitState,
  type TreeListing,
} from './state';
import { capture, describeRun, parseJson, restore, verify } from './xet';

export interface RoundTripOptions {
  /** Extra arguments for `capture` (e.g. ['--ignored', 'none']). */
  captureArgs?: string[];
  /** Paths (exact, or 'dir/' prefixes) of untracked/ignored entries that must NOT be in the copy. */
  expectAbsent?: string[];
  /** Files (relative) to corrupt one at a time in the copy; verify must report each. Default: one picked. */
  mutate?: string[];
  /** Name of the copy directory inside the sandbox (default: copy-<n>). */
  copyName?: string;
  /** Working directory for `restore` (default: the source), and extra restore args (e.g. --from). */
  restoreCwd?: string;
  /** Working directory for `capture` (default: the source top level). */
  captureCwd?: string;
  restoreArgs?: string[];
  timeoutMs?: number;
}

export interface RoundTripResult {
  snapshot: string;
  copy: string;
  sourceState: GitState;
  copyState: GitState;
  sourceTree: TreeListing;
  copyTree: TreeListing;
}

let copyCounter = 0;

function pickMutation(tree: TreeListing): string {
  const candidates = [...tree.entries]
    .filter(([rel, e]) => e.type === 'file' && /^[A-Za-z0-9._/-]+$/.test(rel) && (e.size ?? 0) > 0)
    .filter(([, e]) => (e.size ?? 0) < 16 * 1024 * 1024)
    .map(([rel]) => rel)
    .sort();
  assert.ok(candidates.length > 0, 'no file in the copy to mutate for the verify check');
  return candidates[0];
}

/** Flips the low bit of the first byte of the file; returns a function restoring it. */
export function flipFirstByte(abs: string): () => void {
  const fd = fs.openSync(abs, 'r+');
  try {
    const b = Buffer.alloc(1);
    assert.equal(fs.readSync(fd, b, 0, 1, 0), 1, `cannot read first byte of ${abs}`);
    const orig = b[0];
    b[0] = orig ^ 0x01;
    fs.writeSync(fd, b, 0, 1, 0);
    return () => {
      const fd2 = fs.openSync(abs, 'r+');
      try {
        fs.writeSync(fd2, Buffer.from([orig]), 0, 1, 0);
      } finally {
        fs.closeSync(fd2);
      }
    };
  } finally {
    fs.closeSync(fd);
  }
}

/** Asserts that verify on `copy` exits 0. */
export function assertVerifies(sb: Sandbox, cwd: string, snapshot: string, copy: string, timeoutMs?: number): void {
  const r = verify(sb, cwd, snapshot, copy, timeoutMs);
  assert.equal(r.status, 0, `verify should exit 0 on an exact copy:\n${describeRun(r)}`);
}

/** Asserts that verify exits 1 with {"ok":false,"differences":[...]} mentioning rel. */
export function assertVerifyReports(
  sb: Sandbox,
  cwd: string,
  snapshot: string,
  copy: string,
  rel: string,
  timeoutMs?: number,
): void {
  const r = verify(sb, cwd, snapshot, copy, timeoutMs);
  assert.equal(r.status, 1, `verify should exit 1 after changing ${JSON.stringify(rel)}:\n${describeRun(r)}`);
  const out = parseJson(r);
  assert.equal(out.ok, false, `verify JSON should have ok:false: ${r.stdout}`);
  assert.ok(Array.isArray(out.differences), `verify JSON should have differences[]: ${r.stdout}`);
  assert.ok(out.differences.length > 0, `verify differences[] should not be empty: ${r.stdout}`);
  const needle = JSON.stringify(rel).slice(1, -1);
  assert.ok(
    JSON.stringify(out.differences).includes(needle),
    `verify differences should name ${JSON.stringify(rel)}: ${r.stdout.slice(0, 2000)}`,
  );
}

/**
 * Full round trip. Source state is observed before capture; the copy must match it exactly
 * (except entries listed in expectAbsent, which must be missing from the copy).
 */
export function roundTrip(sb: Sandbox, src: string, opts: RoundTripOptions = {}): RoundTripResult {
  const absent = opts.expectAbsent ?? [];
  let sourceState = collectGitState(sb, src);
  let sourceTree = walkTree(src);

  const snapshot = capture(sb, opts.captureCwd ?? src, opts.captureArgs ?? [], opts.timeoutMs);
  const ref = gitTry(sb, src, [
    'for-each-ref',
    '--format=%(objectname) %(objecttype)',
    `refs/xet/snapshots/${snapshot}`,
  ]);
  assert.equal(
    ref.stdout.toString('utf8').trim(),
    `${snapshot} commit`,
    `refs/xet/snapshots/${snapshot} should exist in the source and point to the snapshot commit`,
  );

  const copy = sb.path(opts.copyName ?? `copy-${++copyCounter}`);
  restore(sb, opts.restoreCwd ?? src, snapshot, copy, opts.restoreArgs ?? [], opts.timeoutMs);

  const copyState = collectGitState(sb, copy);
  const copyTree = walkTree(copy);
  if (absent.length > 0) {
    sourceState = statusWithout(sourceState, absent);
    sourceTree = withoutPaths(sourceTree, absent);
  }
  const problems = [
    ...compareGitStates(sourceState, copyState),
    ...(() => {
      const t = compareTrees(sourceTree, copyTree);
      return t.length ? [`working tree differs (bytes / exec bit / symlink / empty dirs):\n${t.join('\n')}`] : [];
    })(),
  ];
  assert.deepEqual(problems, [], `copy ${copy} differs from source ${src}:\n${problems.join('\n')}`);

  // The copy is a self-contained, non-bare repository.
  assert.equal(
    fs.existsSync(path.join(copy, '.git', 'objects', 'info', 'alternates')),
    false,
    'the copy must not borrow objects through .git/objects/info/alternates',
  );
  assert.equal(git(sb, copy, ['rev-parse', '--show-toplevel']).trim(), copy);

  assertVerifies(sb, src, snapshot, copy, opts.timeoutMs);

  const targets = opts.mutate ?? [pickMutation(copyTree)];
  for (const rel of targets) {
    const undo = flipFirstByte(path.join(copy, rel));
    assertVerifyReports(sb, src, snapshot, copy, rel, opts.timeoutMs);
    undo();
  }
  return { snapshot, copy, sourceState, copyState, sourceTree, copyTree };
}
