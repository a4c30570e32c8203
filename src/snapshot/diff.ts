// Diff: what changed between two snapshots, or between a snapshot and the current working tree.
// File and index changes come from git's own tree diff; HEAD and ref changes from the manifests.
// Comparing with the working tree hashes it without storing anything (scratch objects only), reusing
// a copy of the workspace's stat cache so an unchanged tree costs a stat pass, not a read.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { chunkedFiles, contentId, type ChunkedEntry } from '../chunks/snapshot-files';
import {
  diffTrees,
  type HeadState,
  indexFileTree,
  listRefs,
  readHead,
  readIndexEntries,
  sameHead,
} from '../git/plumbing';
import { findRepo, indexRef, repoOpts } from '../git/repo';
import { gitZ } from '../git/exec';
import { CAPTURED_REF_PATTERNS, XET_NAMESPACE_RE } from './recorded';
import { captureCacheIndex, workspaceId } from '../sidecar/workspaces';
import type { Manifest } from './manifest';
import { policyOfSnapshot } from './snapshot-policy';
import { scanToTree } from './scan';
import { readSnapshot, resolveSnapshotOid } from './store';
import { treeDifferences, withScratchObjects, type Difference } from './verify';
import { walkWorktree } from './walk';
import { MAX_REPOSITORY_DEPTH, repositoryChanges } from './inner-repos';
import { XetError } from '../errors';

export interface DiffResult {
  from: string;
  to: string;
  identical: boolean;
  changes: Difference[];
}

type State = Pick<Manifest, 'head' | 'refs'>;

function stateChanges(a: State, b: State): Difference[] {
  const out: Difference[] = [];
  if (!sameHead(a.head as HeadState, b.head as HeadState)) out.push({ kind: 'head', expected: a.head, actual: b.head });
  const ra = new Map(a.refs.map((r) => [r.name, r.oid]));
  const rb = new Map(b.refs.map((r) => [r.name, r.oid]));
  for (const [n, o] of ra)
    if (rb.get(n) !== o)
      out.push({ kind: rb.has(n) ? 'ref-moved' : 'ref-deleted', path: n, expected: o, actual: rb.get(n) ?? null });
  for (const [n, o] of rb) if (!ra.has(n)) out.push({ kind: 'ref-created', path: n, actual: o });
  return out;
}

/** The files trees' differences, files compared by content: a chunked file (its pointer) and a whole
 * blob of the same bytes, or two pointers of the same bytes, are the same file (src/chunks/). */
async function fileDifferences(
  a: { tree: string; chunked: Map<string, ChunkedEntry> },
  b: { tree: string; chunked: Map<string, ChunkedEntry> },
  cwd: string,
  env: Record<string, string>,
): Promise<Difference[]> {
  if (a.tree === b.tree) return [];
  if (!a.chunked.size && !b.chunked.size) return treeDifferences(a.tree, b.tree, cwd, env, 'file-');
  const names: Record<string, string> = { A: 'extra', D: 'missing', M: 'modified', T: 'type-changed' };
  const out: Difference[] = [];
  for (const c of await diffTrees(a.tree, b.tree, { cwd, env })) {
    const same =
      c.status === 'M' &&
      c.oldMode === c.newMode &&
      contentId(c.path, c.oldOid, a.chunked) === contentId(c.path, c.newOid, b.chunked);
    if (!same) out.push({ kind: `file-${names[c.status] ?? c.status}`, path: c.path });
  }
  return out;
}

const rename = (d: Difference[]): Difference[] =>
  d.map((x) => ({ ...x, kind: x.kind.replace(/-extra$/, '-added').replace(/-missing$/, '-deleted') }));

/** `depth` > 0: an inner repository of another diff, found from `cwd` alone (never from GIT_DIR). */
export async function diffSnapshots(cwd: string, a: string, b?: string, depth = 0): Promise<DiffResult> {
  if (depth > MAX_REPOSITORY_DEPTH) {
    throw new XetError('SNAPSHOT_INVALID', `inner repositories nest deeper than ${MAX_REPOSITORY_DEPTH} levels`);
  }
  const repo = await findRepo(cwd, depth === 0);
  const opts = repoOpts(repo);
  const sa = await readSnapshot(await resolveSnapshotOid(a, opts), opts);
  if (b !== undefined) {
    const sb = await readSnapshot(await resolveSnapshotOid(b, opts), opts);
    const files = await fileDifferences(
      { tree: sa.filesTree, chunked: await chunkedFiles(sa, opts) },
      { tree: sb.filesTree, chunked: await chunkedFiles(sb, opts) },
      repo.worktree,
      {},
    );
    const changes = [
      ...rename(files),
      ...rename(await treeDifferences(sa.indexTree, sb.indexTree, repo.worktree, {}, 'index-')),
      ...stateChanges(sa.manifest, sb.manifest),
      ...(await repositoryChanges(sa.manifest.repositories ?? [], sb.manifest.repositories ?? [], async (x, y) =>
        x.snapshot === y.snapshot ? [] : (await diffSnapshots(cwd, x.snapshot, y.snapshot, depth + 1)).changes,
      )),
    ];
    return { from: sa.oid, to: sb.oid, identical: changes.length === 0, changes };
  }
  // Snapshot -> working tree, with the snapshot's own capture policy (as recorded: today's config
  // plays no part, as for verify).
  const m = sa.manifest;
  const policy = policyOfSnapshot(m.policy);
  const entries = await readIndexEntries(opts, indexRef(repo));
  const ignored = await gitZ(['ls-files', '-z', '-o', '-i', '--exclude-standard', '--directory'], opts);
  const walk = walkWorktree({
    root: repo.worktree,
    tracked: new Set(entries.map((e) => e.path)),
    ignored: new Set(ignored),
    policy,
    gitDirs: [repo.gitDir, repo.commonDir],
  });
  return withScratchObjects('diff', async (scratch, objects) => {
    const env = { ...opts.env, GIT_OBJECT_DIRECTORY: objects, GIT_ALTERNATE_OBJECT_DIRECTORIES: repo.objectsDir };
    const indexFile = path.join(scratch, 'files.index');
    const cache = captureCacheIndex(repo.commonDir, workspaceId(repo.gitDir));
    if (fs.existsSync(cache)) fs.copyFileSync(cache, indexFile);
    const { tree: filesTree } = await scanToTree({
      worktree: repo.worktree,
      objectFormat: repo.objectFormat,
      objectsDir: objects,
      alternates: [repo.objectsDir],
      indexFile,
      scratchDir: path.join(scratch, 'shadow'),
      paths: walk.paths,
      write: false,
    });
    const unmerged = [...new Set(entries.filter((e) => e.stage !== 0).map((e) => e.path))];
    const indexTree = await indexFileTree(path.join(repo.gitDir, 'index'), scratch, { ...opts, env }, true, unmerged);
    const head = await readHead(opts);
    const refs = (await listRefs(CAPTURED_REF_PATTERNS, opts)).filter((r) => !XET_NAMESPACE_RE.test(r.name));
    // The working tree's files are hashed whole: its side has no chunked files.
    const files = await fileDifferences(
      { tree: sa.filesTree, chunked: await chunkedFiles(sa, opts) },
      { tree: filesTree, chunked: new Map() },
      repo.worktree,
      env,
    );
    const changes = [
      ...rename(files),
      ...rename(await treeDifferences(sa.indexTree, indexTree, repo.worktree, env, 'index-')),
      ...stateChanges(m, { head, refs: refs.map((r) => ({ name: r.name, oid: r.oid, type: r.type })) }),
      ...(await repositoryChanges(
        m.repositories ?? [],
        walk.repositories,
        async (x) => (await diffSnapshots(path.join(repo.worktree, x.path), x.snapshot, undefined, depth + 1)).changes,
      )),
    ];
    return { from: sa.oid, to: 'worktree' as const, identical: changes.length === 0, changes };
  });
}
