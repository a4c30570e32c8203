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
import { objectSizes } from '../git/plumbing';
import { remoteError } from '../remote/reach';
import { withoutPassword } from '../remote/url';
import { once } from 'node:events';
import type { ChunkRef } from '../chunks/list-tree';
import type { ChunkPointer } from '../chunks/pointer';
import { ChunkList, readRange, type ReadContext } from '../chunks/reader';
import { findRepo, repoOpts } from '../git/repo';
import { assertNoSymlinkBetween } from './fsutil';
import { readSnapshot } from './store';
import { capturedTimes } from './filemeta';
import { setTimes } from './set-times';
import {
  LAZY_SCHEMA,
  openChunkSource,
  readLazy,
  registerChunkSource,
  sourceKind,
  writeLazy,
  type ChunkSource,
  type SourceContext,
} from '../chunks/source';
import { chunkedFiles } from '../chunks/snapshot-files';
import { createShadow } from '../git/shadow';
import { ORIGIN_REMOTE } from './origin';
import type { Snapshot } from './store';

/** Options every lazy fetch passes to git, as git's own promisor fetches do. */
const FETCH_ARGS = ['fetch', '--quiet', '--no-tags', '--no-write-fetch-head', '--recurse-submodules=no'];

/** Make `remote` of the repository at `opts` its promisor remote (blobs on demand). */
async function configurePromisor(remote: string, url: string, opts: GitOptions): Promise<void> {
  const set = (k: string, v: string) => git(['config', '--local', k, v], opts);
  await set('core.repositoryformatversion', '1');
  await set(`remote.${remote}.url`, url);
  await set(`remote.${remote}.promisor`, 'true');
  await set(`remote.${remote}.partialclonefilter`, 'blob:none');
  await set('extensions.partialClone', remote);
}

/** Fetch objects by id from a remote (a name or URL): one `git fetch`, the ids on stdin. */
async function fetchOids(remote: string, oids: string[], opts: GitOptions, signal?: AbortSignal): Promise<void> {
  if (!oids.length) return;
  signal?.throwIfAborted();
  const f = await git([...FETCH_ARGS, '--filter=blob:none', '--stdin', '--', remote], {
    ...opts,
    input: oids.map((o) => `${o}\n`).join(''),
    okCodes: [1, 128],
  });
  if (f.code !== 0) {
    const url = (await git(['config', `remote.${remote}.url`], { ...opts, okCodes: [1] })).stdout.toString().trim();
    throw remoteError(url || remote, 'fetch of chunks', f.stderr);
  }
}

/** What restore calls at each step of a lazy restore (restore.ts: a few lines). */
export interface LazyRestore {
  /** Added to restore's `git fetch` of the snapshot: commits and trees only. */
  fetchArgs: string[];
  /** Instead of restore's `git fetch` (a xet store: src/remote/lazy-store.ts copies the snapshot
   * without its chunks; through git-remote-xet a fetch would copy every pack). */
  fetch?(oid: string, opts: GitOptions): Promise<void>;
  /** After that fetch: every non-chunk blob of the snapshot, in one batch. */
  afterFetch(oid: string, opts: GitOptions): Promise<void>;
  /** After the files are laid: the chunked files taken out of the copy. */
  afterLay(snap: Snapshot, worktree: string, filesIndex: string, opts: GitOptions): Promise<void>;
  /** After the copy's config and origin are set: the origin is its promisor, lazy.json written. */
  afterOrigin(gitDir: string, opts: GitOptions): Promise<void>;
  result(): { source: string; deferred: string[] };
}

export async function lazyRestore(fromUrl: string | null, cwd: string): Promise<LazyRestore> {
  if (!fromUrl) {
    throw new XetError('USAGE', 'restore --lazy needs --from <url>: a Git server or xet store to fetch chunks from');
  }
  const url = fromUrl;
  if (sourceKind(url) === 'xet') return (await import('../remote/lazy-store')).xetLazyRestore(url, cwd, deferChunked);
  let oid = '';
  let deferred: string[] = [];
  return {
    fetchArgs: ['--filter=blob:none'],
    async afterFetch(snapshot, opts) {
      oid = snapshot;
      await fetchOids(url, await nonChunkBlobs(oid, opts), opts);
    },
    async afterLay(snap, worktree, filesIndex, opts) {
      deferred = await deferChunked(snap, worktree, filesIndex, opts);
    },
    async afterOrigin(gitDir, opts) {
      // The fetch registered the URL itself as a promisor remote; the copy's origin takes its place.
      await git(['config', '--local', '--remove-section', `remote.${url}`], { ...opts, okCodes: [1, 128] });
      await configurePromisor(ORIGIN_REMOTE, withoutPassword(url), opts);
      writeLazy(gitDir, {
        schema: LAZY_SCHEMA,
        source: { kind: 'git', url: withoutPassword(url) },
        snapshot: oid,
        deferred,
      });
    },
    result: () => ({ source: withoutPassword(url), deferred }),
  };
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

/** The chunked files are not part of a lazy copy's worktree: remove what the lay wrote at their
 * paths, and their files-index entries (so capture's stat cache does not vouch for them). */
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
  const present = await objectSizes(
    chunks.map((c) => c.oid),
    offline,
  );
  return chunks.filter((c) => !present.has(c.oid));
}

/**
 * In a lazy copy (a `.git/xet/lazy.json`): fetch those of `chunks` the repository lacks from the
 * recorded source, in one batch. `offline` reads the repository without git's promisor fetches
 * (offlineGit), which would fetch each missing object on its own. Elsewhere, or with nothing
 * missing, nothing happens. Returns the chunks fetched.
 */
export async function fetchLacking(
  repo: { commonDir: string },
  chunks: ChunkRef[],
  offline: GitOptions,
  gopts: GitOptions,
  format: 'sha1' | 'sha256',
  signal?: AbortSignal,
): Promise<number> {
  const rec = readLazy(repo.commonDir);
  if (!rec) return 0;
  const missing = [...new Set((await missingChunks(chunks, offline)).map((c) => c.oid))];
  if (!missing.length) return 0;
  const source = await openChunkSource(rec, { gitDir: repo.commonDir, git: gopts, format });
  await source.fetch(missing, signal);
  return missing.length;
}

export interface HydrateResult {
  /** Files written now. */
  hydrated: { path: string; size: number }[];
  /** Chunked files still deferred. */
  remaining: string[];
  /** Chunks fetched from the source (one batch). */
  chunksFetched: number;
  bytes: number;
}

/**
 * `git xet hydrate [PATH…]`: write deferred chunked files (all by default) as restore would have:
 * the chunks the repository lacks fetched in one batch, each file reassembled into a temporary
 * beside it and renamed into place, with its mode. A path that is no longer free (something was
 * written there since the restore) is refused, not overwritten.
 */
export async function hydrate(opts: { cwd: string; paths: string[]; signal?: AbortSignal }): Promise<HydrateResult> {
  const repo = await findRepo(opts.cwd, true);
  const gopts = repoOpts(repo);
  const rec = readLazy(repo.commonDir);
  if (!rec) {
    throw new XetError('USAGE', 'this repository is not a lazy restore (no .git/xet/lazy.json): nothing to hydrate', {
      dir: repo.worktree,
    });
  }
  const deferred = new Set(rec.deferred);
  const wanted = opts.paths.length ? [...new Set(opts.paths.map((p) => p.replace(/^(\.\/)+/, '')))] : rec.deferred;
  for (const p of wanted) {
    if (!deferred.has(p)) throw new XetError('USAGE', `${p} is not a deferred chunked file of this copy`, { path: p });
    if (fs.existsSync(path.join(repo.worktree, p))) {
      throw new XetError('TARGET_NOT_EMPTY', `${p} exists in the worktree; hydrate does not overwrite it`, { path: p });
    }
  }
  const snap = await readSnapshot(rec.snapshot, gopts);
  const format = snap.manifest.git.objectFormat;
  const chunked = await chunkedFiles(snap, gopts);
  // Written files get their captured times, as restore gives every other file.
  const { times, linkOf } = await capturedTimes(snap.filesTree, snap.filemeta, wanted, gopts);
  // A hard link of a file this run writes is linked to it, as restore lays links, not written again;
  // those come after the files they link to.
  const written = new Set<string>();
  const order = [...wanted.filter((p) => !linkOf.has(p)), ...wanted.filter((p) => linkOf.has(p))];
  const offline = offlineGit(repo.objectsDir, format, repo.gitDir);
  const result: HydrateResult = { hydrated: [], remaining: [], chunksFetched: 0, bytes: 0 };
  // Recorded as each file is in place, so a hydrate stopped half way keeps what it wrote.
  const hydrated = (p: string, size: number): void => {
    deferred.delete(p);
    writeLazy(repo.commonDir, { ...rec, deferred: [...deferred] });
    result.hydrated.push({ path: p, size });
  };
  try {
    const ctx: ReadContext = { git: offline.git, format, signal: opts.signal };
    const lists = new Map<string, ChunkList>();
    const all: ChunkRef[] = [];
    for (const p of wanted) {
      const e = chunked.get(p);
      if (!e) throw new XetError('SNAPSHOT_INVALID', `${p} is deferred but not a chunked file of its snapshot`);
      const list = await ChunkList.fromPointer(e.pointer, p, ctx);
      lists.set(p, list);
      all.push(...(await list.chunksFor(0, list.size)));
    }
    result.chunksFetched = await fetchLacking(repo, all, offline.git, gopts, format, opts.signal);
    for (const p of order) {
      const list = lists.get(p) as ChunkList;
      const abs = path.join(repo.worktree, p);
      assertNoSymlinkBetween(repo.worktree, path.dirname(abs));
      fs.mkdirSync(path.dirname(abs), { recursive: true });
      const leader = linkOf.get(p);
      if (leader !== undefined && written.has(leader)) {
        try {
          // Never over something written meanwhile: link(2) fails where a file now is.
          fs.linkSync(path.join(repo.worktree, leader), abs);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'EEXIST') {
            throw new XetError('TARGET_NOT_EMPTY', `${p} was written by someone else during hydrate`, { path: p });
          }
          throw e;
        }
        hydrated(p, list.size);
        continue;
      }
      const tmp = path.join(path.dirname(abs), `.${path.basename(abs)}.xet-hydrate-${process.pid}`);
      const mode = chunked.get(p)?.mode === '100755' ? 0o755 : 0o644;
      const stream = fs.createWriteStream(tmp, { flags: 'wx', mode, highWaterMark: 1 << 20 });
      try {
        // Withheld: the temporary file is linked into place only once the whole file hashed right.
        result.bytes += await readRange(list, 0, list.size, stream, ctx, { withheld: true });
        stream.end();
        await once(stream, 'close');
        fs.chmodSync(tmp, mode);
        // Never over something written meanwhile: link(2) fails where a file now is.
        fs.linkSync(tmp, abs);
        fs.rmSync(tmp);
        const t = times.get(p);
        if (t) setTimes([{ abs, sec: t.sec, nsec: t.nsec }]);
      } catch (e) {
        stream.destroy();
        fs.rmSync(tmp, { force: true });
        if ((e as NodeJS.ErrnoException).code === 'EEXIST') {
          throw new XetError('TARGET_NOT_EMPTY', `${p} was written by someone else during hydrate`, { path: p });
        }
        throw e;
      }
      written.add(p);
      hydrated(p, list.size);
    }
  } finally {
    offline.dispose();
  }
  result.remaining = [...deferred].sort();
  const rank = new Map(wanted.map((p, i) => [p, i]));
  result.hydrated.sort((a, b) => (rank.get(a.path) ?? 0) - (rank.get(b.path) ?? 0));
  return result;
}

/**
 * In a lazy copy (a `.git/xet/lazy.json`): make every chunk of these files present, fetching the
 * missing ones from the recorded source in one batch, before a reader (archive, export, verify)
 * reads them — git's promisor machinery would otherwise fetch them one object at a time, and a xet
 * store source is not git's to ask. Elsewhere nothing happens. Returns the chunks fetched.
 */
export async function fetchMissingChunks(
  repo: { commonDir: string; gitDir: string; objectsDir: string; worktree: string },
  snap: Snapshot,
  entries: Iterable<{ path: string; pointer: ChunkPointer }>,
  gopts: GitOptions,
  signal?: AbortSignal,
): Promise<number> {
  const rec = readLazy(repo.commonDir);
  if (!rec) return 0;
  const format = snap.manifest.git.objectFormat;
  const offline = offlineGit(repo.objectsDir, format, repo.gitDir);
  try {
    const ctx: ReadContext = { git: offline.git, format, signal };
    const all: ChunkRef[] = [];
    for (const e of entries) {
      const list = await ChunkList.fromPointer(e.pointer, e.path, ctx);
      all.push(...(await list.chunksFor(0, e.pointer.size)));
    }
    return await fetchLacking(repo, all, offline.git, gopts, format, signal);
  } finally {
    offline.dispose();
  }
}
