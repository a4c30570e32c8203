// Verify: is a directory exactly in a snapshot's state? Git is the oracle: the directory's files are
// hashed by git (no filters) into a tree and compared with the snapshot's files tree; its index is
// written as a tree and compared with the snapshot's index tree; flags, HEAD, refs, stash, config and
// info files are compared field by field. Nothing is written to the directory's repository: trees go
// to a scratch object directory that borrows the real ones as alternates.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  CE_INTENT_TO_ADD,
  CE_SKIP_WORKTREE,
  CE_VALID,
  diffTrees,
  type HeadState,
  indexFileTree,
  listRefs,
  readHead,
  readIndexEntries,
  readLocalConfig,
  readStash,
  sameHead,
} from '../git/plumbing';
import { indexRef, repoOpts, tryFindRepo, type Repo } from '../git/repo';
import { readOptional } from './fsutil';
import { compareOperationState, unmergedPaths } from './operation-state';
import { withExistingSidecar } from '../sidecar/db';
import { expectedForkHead, liveForkByGitDir, type ForkRow } from '../sidecar/forks';
import { XetError } from '../errors';
import { CAPTURED_CONFIG_RE, CAPTURED_REF_PATTERNS, XET_NAMESPACE_RE } from './recorded';
import { resolvePolicyAll } from './policy-all';
import { RESTORE_MARKER } from './refs';
import { readSnapshot, resolveSnapshotOid, type Snapshot } from './store';
import { scanUnderPolicy, scanUnderSnapshotPolicy, type ExcludedByPolicy, type PolicyScan } from './snapshot-policy';
import { swappedVerifyArguments } from './verify-hints';
import { isOriginKey } from './origin';
import { fileMetaDifferences } from './filemeta';
import { compareRepositories } from './inner-repos';
import { Writable } from 'node:stream';
import { chunkedFiles, type ChunkedEntry } from '../chunks/snapshot-files';
import { ChunkList, readRange } from '../chunks/reader';
import { LocalPacks } from '../chunks/local-packs';

export interface Difference {
  kind: string;
  path?: string;
  expected?: unknown;
  actual?: unknown;
}

export interface VerifyResult {
  ok: boolean;
  /** 'repository': a standalone copy, checked in full. 'fork': a linked worktree made by `git xet
   * fork`; refs, stash, config and info files belong to the whole repository and are not its own, so
   * only its files, index and HEAD (detached at the snapshot's HEAD commit) are checked. */
  scope: 'repository' | 'fork';
  snapshot: string;
  dir: string;
  differences: Difference[];
  /** What the snapshot's own capture policy leaves out of the directory (secrets, excluded and, with
   * `ignored: none`, ignored files): reported here, never a difference. */
  excludedByPolicy: ExcludedByPolicy;
}

export interface VerifyOptions {
  cwd: string;
  snapshot: string;
  dir: string;
}

export async function verify(options: VerifyOptions): Promise<VerifyResult> {
  const dir = path.resolve(options.cwd, options.dir);
  const here = await tryFindRepo(options.cwd, true);
  let scope: VerifyResult['scope'] = 'repository';
  let excludedByPolicy: ExcludedByPolicy = { secrets: [], byPattern: 0, ignored: 0 };
  const result = (snapshot: string, differences: Difference[]): VerifyResult => ({
    ok: differences.length === 0,
    scope,
    snapshot,
    dir,
    differences,
    excludedByPolicy,
  });
  swappedVerifyArguments(options.cwd, options.snapshot, options.dir);
  if (!fs.existsSync(dir)) {
    const oid = here ? await resolveSnapshotOid(options.snapshot, repoOpts(here)) : options.snapshot;
    return result(oid, [{ kind: 'missing', path: dir }]);
  }
  // The caller's own worktree is theirs to name even when its git dir is found only through
  // GIT_DIR/GIT_WORK_TREE (a dotfiles repository); any other directory is looked at on its own.
  const target = here && fs.realpathSync(dir) === here.worktree ? here : await tryFindRepo(dir);
  // The snapshot is looked up where we stand, else in the directory's own repository.
  const lookIn = here ?? target;
  if (!lookIn) throw new XetError('NOT_A_REPOSITORY', `neither ${options.cwd} nor ${dir} is a git repository`, { dir });
  let oid: string;
  let snap: Snapshot;
  // Where the snapshot was found: its chunks are checked there alone (a good copy elsewhere must
  // not hide a broken one in the repository being asked about).
  let snapRepo = lookIn;
  try {
    oid = await resolveSnapshotOid(options.snapshot, repoOpts(lookIn));
    snap = await readSnapshot(oid, repoOpts(lookIn));
  } catch (e) {
    if (!(e instanceof XetError && e.code === 'SNAPSHOT_NOT_FOUND' && target && here && target !== here)) throw e;
    oid = await resolveSnapshotOid(options.snapshot, repoOpts(target));
    snap = await readSnapshot(oid, repoOpts(target));
    snapRepo = target;
  }
  if (!target || path.resolve(target.worktree) !== fs.realpathSync(dir)) {
    return result(oid, [{ kind: 'not-a-repository', path: dir }]);
  }
  if (fs.existsSync(path.join(target.gitDir, RESTORE_MARKER))) {
    return result(oid, [{ kind: 'incomplete', path: dir, actual: 'a restore into this directory did not finish' }]);
  }
  const fork =
    target.gitDir !== target.commonDir
      ? withExistingSidecar(target.commonDir, (db) => liveForkByGitDir(db, target.gitDir))
      : null;
  if (fork && fork.snapshot === oid) {
    scope = 'fork';
    if (fork.state === 'creating') {
      return result(oid, [{ kind: 'incomplete', path: dir, actual: 'the creation of this fork did not finish' }]);
    }
  }
  return withScratchObjects('verify', async (scratch, objects) => {
    const alternates = [target.objectsDir, ...(here ? [here.objectsDir] : [])];
    // The snapshot's chunks are read while git hashes the directory's files (one git process, one
    // core): neither uses what the other does, and both finish before either's failure is reported.
    const [filesDone, chunksDone] = await Promise.allSettled([
      compareFiles(snap, target, scratch, objects, alternates, undefined, options.cwd),
      checkChunkedFiles(snap, snapRepo),
    ]);
    if (filesDone.status === 'rejected') throw filesDone.reason;
    if (chunksDone.status === 'rejected') throw chunksDone.reason;
    const files = filesDone.value;
    excludedByPolicy = files.excludedByPolicy;
    const differences = [
      ...files.differences,
      ...chunksDone.value,
      ...(await compareIndex(snap, target, scratch, objects, alternates)),
      ...(fork && scope === 'fork' ? await compareForkHead(target, fork) : await compareRefs(snap, target)),
    ];
    return result(oid, differences);
  });
}

/** Every chunked file of the snapshot reassembles to its pointer's `blob` id: each chunk read (a full
 * read of every chunked file's chunks from the object store) and the whole hashed. A broken one is a
 * difference `chunk-integrity` (its error code as `actual`), not an exception: verify reports.
 *
 * What is and is not checked here, and why. The directory's own copy of the file is compared by
 * compareFiles (git hashes it; its id must be the pointer's `blob`), but that says nothing of the
 * snapshot: a directory can be right while the repository's chunks are missing or damaged (the
 * copy that would be restored or pushed from is broken), so every chunk is still read, from the
 * repository the snapshot was found in, with its type and size checked against the list. What is
 * left out is each chunk's own hash (a withheld read, chunks/reader.ts): the bytes read are hashed
 * as one file and must be `blob`, which proves every byte of every chunk at its place in the file;
 * a chunk that does not reassemble still fails (CHUNK_MISSING, SNAPSHOT_INVALID for a wrong type
 * or size, INTEGRITY_MISMATCH for wrong bytes). Nor is a chunk read twice: a file read here is not
 * read by anything else of this run, and no file is skipped because the directory's copy matched. */
async function checkChunkedFiles(snap: Snapshot, repo: Repo): Promise<Difference[]> {
  if (!snap.manifest.chunked?.length) return [];
  const opts = repoOpts(repo);
  const chunked = await chunkedFiles(snap, opts);
  // A lazy copy fetches the chunks it lacks in one batch first (lazy.ts says why).
  try {
    await (await import('./lazy')).fetchMissingChunks(repo, snap, chunked.values(), opts);
  } catch (err) {
    if (!(err instanceof XetError)) throw err; // each file then reports what it lacks
  }
  const format = snap.manifest.git.objectFormat;
  const ctx = { git: opts, format, packs: await LocalPacks.open(opts, format) };
  const out: Difference[] = [];
  const sink = (): Writable =>
    new Writable({
      write(_c, _e, cb) {
        cb();
      },
    });
  try {
    for (const [p, e] of chunked) {
      try {
        const list = await ChunkList.fromPointer(e.pointer, p, ctx);
        await readRange(list, 0, e.pointer.size, sink(), ctx, { withheld: true });
      } catch (err) {
        if (!(err instanceof XetError)) throw err;
        out.push({ kind: 'chunk-integrity', path: p, expected: e.pointer.blob, actual: err.code });
      }
    }
  } finally {
    ctx.packs.close();
  }
  return out;
}

/** Run `fn` with a scratch dir holding an empty object directory, for trees that are compared and
 * thrown away (the inspected repository's own objects are only ever read, as alternates). */
export async function withScratchObjects<T>(
  what: string,
  fn: (scratch: string, objects: string) => Promise<T>,
): Promise<T> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), `xet-${what}-`));
  try {
    const objects = path.join(scratch, 'objects');
    fs.mkdirSync(objects);
    return await fn(scratch, objects);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

export function objEnv(target: Repo, objects: string, alternates: string[]): Record<string, string> {
  return {
    ...repoOpts(target).env,
    GIT_OBJECT_DIRECTORY: objects,
    GIT_ALTERNATE_OBJECT_DIRECTORIES: alternates.join(':'),
  };
}

/** Name-status between two trees, as differences of the given kind family. */
export async function treeDifferences(
  a: string,
  b: string,
  cwd: string,
  env: Record<string, string>,
  prefix: string,
  chunked?: Map<string, ChunkedEntry>,
): Promise<Difference[]> {
  if (a === b) return [];
  const names: Record<string, string> = { A: 'extra', D: 'missing', M: 'modified', T: 'type-changed' };
  const out: Difference[] = [];
  for (const c of await diffTrees(a, b, { cwd, env })) {
    // A chunked file of `a` is the same file as a whole blob of its bytes in `b` (by content).
    const ch = chunked?.get(c.path);
    if (ch && c.status === 'M' && c.oldMode === c.newMode && c.newOid === ch.pointer.blob) continue;
    out.push({ kind: `${prefix}${names[c.status] ?? c.status}`, path: c.path });
  }
  return out;
}

/** Everything on disk in a worktree as a files tree, whatever any capture policy says (a file the
 * snapshot lacks is extra). Nothing is stored: trees go to `objects`. With `statCache`, an index of an
 * earlier files tree with stat data, only files whose stat data changed are hashed (as git status
 * trusts it); without, every file is hashed. */
export async function scanWorktreeFiles(
  target: Repo,
  scratch: string,
  objects: string,
  alternates: string[],
  statCache?: string,
  meta = false,
): Promise<PolicyScan> {
  return scanUnderPolicy(target, resolvePolicyAll(), 'all', scratch, objects, alternates, statCache, meta);
}

/** Files and empty directories under the snapshot's own capture policy; `statCache` as in
 * scanUnderSnapshotPolicy (verify hashes everything; status trusts the worktree's stat cache). */
export async function compareFiles(
  snap: Snapshot,
  target: Repo,
  scratch: string,
  objects: string,
  alternates: string[],
  statCache?: string,
  cwd: string = target.worktree,
): Promise<{ differences: Difference[]; excludedByPolicy: ExcludedByPolicy }> {
  const { tree, emptyDirs, excludedByPolicy, meta, repositories, skipped } = await scanUnderSnapshotPolicy(
    target,
    snap.manifest,
    scratch,
    objects,
    alternates,
    statCache,
    true,
  );
  const env = objEnv(target, objects, alternates);
  const chunked = await chunkedFiles(snap, { cwd: target.worktree, env });
  const diffs = await treeDifferences(snap.filesTree, tree, target.worktree, env, 'file-', chunked);
  // Times and hard links are their own kinds, never reported for a path that differs otherwise.
  const metaOpts = { cwd: target.worktree, env: objEnv(target, objects, alternates) };
  const reported = new Set(diffs.map((d) => d.path as string));
  diffs.push(...(await fileMetaDifferences(snap.filesTree, snap.filemeta, meta, reported, metaOpts)));
  const want = new Set(snap.manifest.emptyDirs);
  const have = new Set(emptyDirs);
  for (const d of want) if (!have.has(d)) diffs.push({ kind: 'empty-dir-missing', path: d });
  for (const d of have) if (!want.has(d)) diffs.push({ kind: 'empty-dir-extra', path: d });
  // On disk, but no snapshot can hold it (git refuses the name): never "identical".
  for (const s of skipped) if (s.reason === 'git-refuses-path') diffs.push({ kind: 'file-unstorable', path: s.path });
  // Each inner repository is verified as a repository of its own.
  diffs.push(
    ...(await compareRepositories(snap, target.worktree, repositories, async (snapshot, dir) => {
      return (await verify({ cwd, snapshot, dir })).differences;
    })),
  );
  return { differences: diffs, excludedByPolicy };
}

export async function compareIndex(
  snap: Snapshot,
  target: Repo,
  scratch: string,
  objects: string,
  alternates: string[],
): Promise<Difference[]> {
  const env = objEnv(target, objects, alternates);
  const entries = await readIndexEntries(repoOpts(target), indexRef(target));
  const tree = await indexFileTree(
    path.join(target.gitDir, 'index'),
    scratch,
    { cwd: target.worktree, env },
    true,
    unmergedPaths(entries),
  );
  const diffs = await treeDifferences(snap.indexTree, tree, target.worktree, env, 'index-');
  const m = snap.manifest.index;
  const flagSets: [string, number, string[]][] = [
    ['intent-to-add', CE_INTENT_TO_ADD, m.intentToAdd],
    ['skip-worktree', CE_SKIP_WORKTREE, m.skipWorktree],
    ['assume-unchanged', CE_VALID, m.assumeUnchanged],
  ];
  for (const [name, bit, want] of flagSets) {
    const have = new Set(entries.filter((e) => e.flags & bit).map((e) => e.path));
    const wantSet = new Set(want);
    for (const p of wantSet) if (!have.has(p)) diffs.push({ kind: `index-flag-missing`, path: p, expected: name });
    for (const p of have) if (!wantSet.has(p)) diffs.push({ kind: `index-flag-extra`, path: p, actual: name });
  }
  diffs.push(...(await compareOperationState(snap, target, entries, repoOpts(target))));
  return diffs;
}

async function compareForkHead(target: Repo, fork: ForkRow): Promise<Difference[]> {
  const head = await readHead(repoOpts(target)).catch(() => null);
  const want = expectedForkHead(fork);
  return sameHead(head, want as HeadState) ? [] : [{ kind: 'head', expected: want, actual: head }];
}

export async function compareRefs(snap: Snapshot, target: Repo): Promise<Difference[]> {
  const m = snap.manifest;
  const opts = repoOpts(target);
  const diffs: Difference[] = [];
  const head = await readHead(opts).catch(() => null);
  if (!sameHead(head, m.head as HeadState)) diffs.push({ kind: 'head', expected: m.head, actual: head });
  const refs = (await listRefs(CAPTURED_REF_PATTERNS, opts)).filter((r) => !XET_NAMESPACE_RE.test(r.name));
  const key = (r: { oid: string; symref?: string }) => (r.symref ? `-> ${r.symref}` : r.oid);
  const want = new Map(m.refs.map((r) => [r.name, key(r)]));
  const have = new Map(refs.map((r) => [r.name, key(r)]));
  for (const [name, oid] of want) {
    if (have.get(name) !== oid) diffs.push({ kind: 'ref', path: name, expected: oid, actual: have.get(name) ?? null });
  }
  for (const [name, oid] of have) if (!want.has(name)) diffs.push({ kind: 'ref-extra', path: name, actual: oid });
  const stash = await readStash(opts);
  const stashKey = (l: { oid: string; message: string }[]) => l.map((e) => `${e.oid} ${e.message}`).join('\n');
  if (stashKey(stash) !== stashKey(m.stash)) diffs.push({ kind: 'stash', expected: m.stash, actual: stash });
  const config = await readLocalConfig(CAPTURED_CONFIG_RE, opts);
  // remote.xet-origin says where a copy came from (restore --from), not what was captured.
  const norm = (c: { key: string; value: string }[]) =>
    c
      .filter((e) => !e.key.startsWith('core.') && !isOriginKey(e.key))
      .map((e) => `${e.key}=${e.value}`)
      .sort();
  if (JSON.stringify(norm(config)) !== JSON.stringify(norm(m.config))) {
    diffs.push({ kind: 'config', expected: norm(m.config), actual: norm(config) });
  }
  for (const c of m.config.filter((e) => e.key.startsWith('core.'))) {
    const got = config.filter((e) => e.key === c.key).pop();
    if (!got || got.value !== c.value)
      diffs.push({ kind: 'config', path: c.key, expected: c.value, actual: got?.value ?? null });
  }
  for (const name of ['exclude', 'attributes'] as const) {
    const actual = readOptional(path.join(target.commonDir, 'info', name));
    if (actual !== m.info[name]) diffs.push({ kind: `info-${name}`, expected: m.info[name], actual });
  }
  return diffs;
}
