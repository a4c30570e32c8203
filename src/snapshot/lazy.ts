// Lazy restores from Git servers, and what fills them in later.
//
// `restore --from URL --lazy` fetches the snapshot as a partial clone does: commits and trees with
// `--filter=blob:none` from a promisor remote, then one batched fetch of every blob of the snapshot
// except the chunks under its `chunks/` tree (files, index, stage blobs, pointers, manifest all
// come). Chunked files are not written: they are recorded in `.git/xet/lazy.json` with the source
// (src/chunks/source.ts) and reported; `git xet hydrate` writes them, and `git xet cat` reads ranges
// of them, each fetching only the chunks it needs, in one `git fetch` of those ids.
//
// The copy's `xet-origin` remote is its promisor (git itself may fetch a missing blob from it on
// demand too, as in any partial clone); the server must allow filters and wants of any reachable
// object (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant or allowReachableSHA1InWant).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitZ, type GitOptions } from '../git/exec';
import { remoteError } from '../remote/reach';
import { withoutPassword } from '../remote/url';
import type { ChunkRef } from '../chunks/list-tree';
import {
  LAZY_SCHEMA,
  registerChunkSource,
  sourceKind,
  writeLazy,
  type ChunkSource,
  type SourceContext,
} from '../chunks/source';
import { chunkedFiles } from '../chunks/snapshot-files';
import { createShadow } from '../git/shadow';
import { ORIGIN_REMOTE } from './origin';
import { SNAPSHOT_REF_PREFIX } from './refs';
import type { Snapshot } from './store';

/** The remote a lazy copy fetches through while it is being restored (renamed to xet-origin's role). */
const FETCH_REMOTE = 'xet-lazy';

/** Options every lazy fetch passes to git, as git's own promisor fetches do. */
const FETCH_ARGS = ['fetch', '--quiet', '--no-tags', '--no-write-fetch-head', '--recurse-submodules=no'];

/** Make `remote` of the repository at `opts` a promisor remote serving blobs on demand. */
async function configurePromisor(remote: string, url: string, opts: GitOptions): Promise<void> {
  const set = (k: string, v: string) => git(['config', '--local', k, v], opts);
  await set('core.repositoryformatversion', '1');
  await set(`remote.${remote}.url`, url);
  await set(`remote.${remote}.promisor`, 'true');
  await set(`remote.${remote}.partialclonefilter`, 'blob:none');
  await set('extensions.partialClone', remote);
}

/** Fetch objects by id from a promisor remote: one `git fetch`, ids on stdin. */
async function fetchOids(remote: string, oids: string[], opts: GitOptions, signal?: AbortSignal): Promise<void> {
  if (!oids.length) return;
  signal?.throwIfAborted();
  const f = await git([...FETCH_ARGS, '--filter=blob:none', '--stdin', remote], {
    ...opts,
    input: oids.map((o) => `${o}\n`).join(''),
    okCodes: [1, 128],
  });
  if (f.code !== 0) {
    const url = (await git(['config', `remote.${remote}.url`], { ...opts, okCodes: [1] })).stdout.toString().trim();
    throw remoteError(url || remote, 'fetch of chunks', f.stderr);
  }
}

/**
 * restore --lazy, step 1 (in place of restore's fetch): the snapshot commit with its trees, then its
 * non-chunk blobs in one batch. `tmp` is a fresh repository (git init'ed).
 */
export async function lazyFetch(url: string, oid: string, opts: GitOptions): Promise<void> {
  if (sourceKind(url) !== 'git') {
    throw new XetError('USAGE', `restore --lazy from ${withoutPassword(url)}: only Git servers are supported here`, {
      from: withoutPassword(url),
    });
  }
  await configurePromisor(FETCH_REMOTE, url, opts);
  const ref = `${SNAPSHOT_REF_PREFIX}${oid}`;
  const f = await git(
    [...FETCH_ARGS.filter((a) => a !== '--no-write-fetch-head'), '--filter=blob:none', FETCH_REMOTE, `+${ref}:${ref}`],
    {
      ...opts,
      okCodes: [1, 128],
    },
  );
  if (f.code !== 0) throw remoteError(url, 'restore --from --lazy', f.stderr);
  await fetchOids(FETCH_REMOTE, await nonChunkBlobs(oid, opts), opts);
}

/** Every blob of the snapshot's tree except those under `chunks/` (ls-tree reads trees only). */
async function nonChunkBlobs(oid: string, opts: GitOptions): Promise<string[]> {
  const out = new Set<string>();
  for (const rec of await gitZ(['ls-tree', '-z', oid], opts)) {
    const tab = rec.indexOf('\t');
    const [, type, id] = rec.slice(0, tab).split(' ');
    const name = rec.slice(tab + 1);
    if (type === 'blob') out.add(id);
    else if (type === 'tree' && name !== 'chunks') {
      for (const r of await gitZ(['ls-tree', '-r', '-z', id], opts)) {
        const [, t, o] = r.slice(0, r.indexOf('\t')).split(' ');
        if (t === 'blob') out.add(o);
      }
    }
  }
  return [...out];
}

/**
 * restore --lazy, step 2 (after the files are laid): the chunked files are not part of the copy's
 * worktree. Removes what the lay wrote at their paths (and their files-index entries, so a capture's
 * stat cache does not vouch for them). Returns the deferred paths.
 */
export async function deferChunked(
  snap: Snapshot,
  worktree: string,
  filesIndex: string,
  opts: GitOptions,
): Promise<string[]> {
  const chunked = [...(await chunkedFiles(snap, opts)).keys()];
  for (const p of chunked) fs.rmSync(path.join(worktree, p), { force: true });
  if (chunked.length && fs.existsSync(filesIndex)) {
    await git(['update-index', '-z', '--force-remove', '--stdin'], {
      ...opts,
      env: { ...opts.env, GIT_INDEX_FILE: filesIndex },
      input: chunked.map((p) => `${p}\0`).join(''),
    });
  }
  return chunked;
}

/** restore --lazy, step 3 (after the copy's config and origin are set): its origin is the promisor,
 * and the record says what is deferred. */
export async function finishLazy(
  gitDir: string,
  url: string,
  oid: string,
  deferred: string[],
  opts: GitOptions,
): Promise<{ source: string; deferred: string[] }> {
  await git(['config', '--local', '--remove-section', `remote.${FETCH_REMOTE}`], { ...opts, okCodes: [128] });
  await configurePromisor(ORIGIN_REMOTE, withoutPassword(url), opts);
  writeLazy(gitDir, {
    schema: LAZY_SCHEMA,
    source: { kind: 'git', url: withoutPassword(url) },
    snapshot: oid,
    deferred,
  });
  return { source: withoutPassword(url), deferred };
}

/** The chunk source of a lazy copy restored from a Git server: its promisor remote. */
export function gitChunkSource(url: string, ctx: SourceContext): ChunkSource {
  return {
    name: url,
    fetch: (oids, signal) => fetchOids(ORIGIN_REMOTE, oids, ctx.git, signal),
  };
}
registerChunkSource('git', gitChunkSource);

/**
 * Git options that read a repository's objects and never fetch: a shadow git dir on its object
 * directory (no promisor remote there), so a missing object is missing, not a lazy fetch of one
 * object at a time. Readers of a lazy copy read through it and fetch what they lack in one batch.
 */
export function offlineGit(
  objectsDir: string,
  format: 'sha1' | 'sha256',
  scratchParent: string,
): { git: GitOptions; dispose(): void } {
  const dir = fs.mkdtempSync(path.join(scratchParent, 'xet-offline-'));
  const shadow = createShadow({
    dir,
    objectFormat: format,
    objectsDir,
    worktree: dir,
    indexFile: path.join(dir, 'index'),
  });
  return { git: { cwd: dir, env: shadow.env }, dispose: () => shadow.dispose() };
}

/** Which of these chunks the repository at `offline` (offlineGit) lacks. */
export async function missingChunks(chunks: ChunkRef[], offline: GitOptions): Promise<ChunkRef[]> {
  if (!chunks.length) return [];
  const want = [...new Set(chunks.map((c) => c.oid))];
  const r = await git(['cat-file', '--batch-check=%(objectname)', '--buffer'], {
    ...offline,
    input: want.map((o) => `${o}\n`).join(''),
  });
  const missing = new Set<string>();
  for (const line of r.stdout.toString('latin1').split('\n')) {
    const m = /^([0-9a-f]+) missing$/.exec(line);
    if (m) missing.add(m[1]);
  }
  return chunks.filter((c) => missing.has(c.oid));
}
