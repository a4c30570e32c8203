// Where a lazy repository gets the chunks it lacks. A lazy restore (`restore --from URL --lazy`)
// copies a snapshot without its chunk blobs and records its source here, in the restored
// repository's `.git/xet/lazy.json`; readers that meet a missing chunk (`cat`, `hydrate`) open the
// source and ask it for exactly the chunks they need, in one call, before reading them.
//
// A source makes objects present locally (in the repository's object store), nothing more: readers
// read and check them as they read any chunk, so a source is never trusted for content.
//
// Kinds: `git` — a Git server or bare repository fetched from as a promisor remote
// (src/snapshot/lazy.ts); `xet` — a xet:: store that serves chunks from its packs (src/remote/,
// helper store-chunks: it registers its factory with registerChunkSource).

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitOptions } from '../git/exec';

export interface ChunkSource {
  /** What to call it in messages: the URL (without a password). */
  name: string;
  /** Make these objects present in the local repository; resolves when they are. */
  fetch(oids: string[], signal?: AbortSignal): Promise<void>;
}

export type ChunkSourceKind = 'git' | 'xet';

/** `.git/xet/lazy.json` (schema xet.lazy/v1). */
export interface LazyRecord {
  schema: typeof LAZY_SCHEMA;
  source: { kind: ChunkSourceKind; url: string };
  /** The snapshot the repository was restored from. */
  snapshot: string;
  /** Chunked files not yet written into the worktree (sorted, paths in files/). */
  deferred: string[];
}

export const LAZY_SCHEMA = 'xet.lazy/v1';
export const LAZY_FILE = path.join('xet', 'lazy.json');

/** What a source factory gets: the local repository it fills. */
export interface SourceContext {
  /** The local repository's git dir. */
  gitDir: string;
  git: GitOptions;
  format: 'sha1' | 'sha256';
}

export type ChunkSourceFactory = (url: string, ctx: SourceContext) => ChunkSource | Promise<ChunkSource>;

const factories = new Map<ChunkSourceKind, ChunkSourceFactory>();
/** Loaders for the built-in kinds, imported on first use (keeps `cat` of a local file light). */
const loaders: Partial<Record<ChunkSourceKind, () => Promise<unknown>>> = {
  git: () => import('../snapshot/lazy'),
  xet: () => import('../remote/lazy-store'),
};

/** A module providing a kind calls this when it loads. */
export function registerChunkSource(kind: ChunkSourceKind, factory: ChunkSourceFactory): void {
  factories.set(kind, factory);
}

/** Register a loader for a kind whose module registers itself on import (store-chunks: `xet`). */
export function registerChunkSourceLoader(kind: ChunkSourceKind, load: () => Promise<unknown>): void {
  loaders[kind] = load;
}

/** The kind of source a URL is: `xet::…` is a xet store, anything else a Git remote. */
export function sourceKind(url: string): ChunkSourceKind {
  return /^xet::/i.test(url) ? 'xet' : 'git';
}

export async function openChunkSource(record: LazyRecord, ctx: SourceContext): Promise<ChunkSource> {
  const kind = record.source.kind;
  if (!factories.has(kind)) await loaders[kind]?.();
  const f = factories.get(kind);
  if (!f) {
    throw new XetError('USAGE', `this git xet cannot fetch chunks from a ${kind} source (${record.source.url})`, {
      source: record.source,
    });
  }
  return f(record.source.url, ctx);
}

/** The lazy record of a repository, or null when it is not lazy (or every file is hydrated). */
export function readLazy(gitDir: string): LazyRecord | null {
  const file = path.join(gitDir, LAZY_FILE);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch {
    rec = null;
  }
  const r = rec as LazyRecord | null;
  if (
    !r ||
    r.schema !== LAZY_SCHEMA ||
    typeof r.snapshot !== 'string' ||
    !r.source ||
    (r.source.kind !== 'git' && r.source.kind !== 'xet') ||
    typeof r.source.url !== 'string' ||
    !Array.isArray(r.deferred) ||
    !r.deferred.every((p) => typeof p === 'string')
  ) {
    throw new XetError('CONFIG_INVALID', `${file} is not a ${LAZY_SCHEMA} record`, { path: file });
  }
  return r;
}

/** Write (atomically) or, with deferred files left and `keep` false, keep the record. */
export function writeLazy(gitDir: string, record: LazyRecord): void {
  const file = path.join(gitDir, LAZY_FILE);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, `${JSON.stringify({ ...record, deferred: [...record.deferred].sort() }, null, 2)}\n`);
  fs.renameSync(tmp, file);
}
