// Typed wrappers over the git plumbing commands git xet uses, one function per question. Outputs are
// parsed from -z or NUL-delimited formats so any path or message survives.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { VALUELESS, type GitConfig } from './config';
import { git, gitText, gitZ, joinZ, splitZ, type GitOptions } from './exec';
import { ENTRY_FLAGS, listIndexFile, type IndexEntry } from './index-file';

export { CE_INTENT_TO_ADD, CE_SKIP_WORKTREE, CE_VALID, type IndexEntry } from './index-file';

/** Where a repository's index is, for reading it without git: its file and the object format. */
export interface IndexFileRef {
  file: string;
  format: 'sha1' | 'sha256';
}

/**
 * Every index entry with its flags and recorded size, as `git ls-files -s --debug` lists them.
 * With `index` (and no GIT_INDEX_FILE in `opts`), read from the file itself (listIndexFile: one
 * read and a hash, where git's listing costs a process and a text parse); git lists what that
 * reader leaves to it (a split or sparse index, skip-worktree entries, a damaged file).
 */
export async function readIndexEntries(opts: GitOptions, index?: IndexFileRef): Promise<IndexEntry[]> {
  return (await readIndexListing(opts, index)).entries;
}

/** readIndexEntries, saying whether the entries were read from the file (a listing that depends on
 * the index file alone) or listed by git (which may depend on more: the worktree, the config). */
export async function readIndexListing(
  opts: GitOptions,
  index?: IndexFileRef,
): Promise<{ entries: IndexEntry[]; fromFile: boolean }> {
  if (index && opts.env?.GIT_INDEX_FILE === undefined) {
    const own = listIndexFile(index.file, index.format);
    if (own) return { entries: own, fromFile: true };
  }
  return { entries: await readIndexEntriesFromGit(opts), fromFile: false };
}

/** The listing from git (`ls-files --debug`, the only place git prints an entry's flags). */
export async function readIndexEntriesFromGit(opts: GitOptions): Promise<IndexEntry[]> {
  const r = await git(['ls-files', '-z', '-s', '--debug'], opts);
  const buf = r.stdout;
  const out: IndexEntry[] = [];
  let i = 0;
  while (i < buf.length) {
    const nul = buf.indexOf(0, i);
    if (nul < 0) break;
    const head = buf.toString('utf8', i, nul);
    const tab = head.indexOf('\t');
    const [mode, oid, stage] = head.slice(0, tab).split(' ');
    const p = head.slice(tab + 1);
    // Five debug lines follow, the last one "  size: N\tflags: HEX".
    let j = nul + 1;
    let flags = 0;
    let size = 0;
    for (let line = 0; line < 5; line++) {
      const nl = buf.indexOf(10, j);
      const text = buf.toString('utf8', j, nl < 0 ? buf.length : nl);
      const m = /size: (\d+)\s+flags: ([0-9a-f]+)/.exec(text);
      if (m) {
        size = Number(m[1]);
        flags = parseInt(m[2], 16);
      }
      j = nl < 0 ? buf.length : nl + 1;
    }
    out.push({ mode, oid, stage: Number(stage), path: p, flags: flags & ENTRY_FLAGS, size });
    i = j;
  }
  return out;
}

export interface RefEntry {
  name: string;
  oid: string;
  type: 'commit' | 'tag' | 'tree' | 'blob';
  /** Set for symbolic refs (refs/remotes/origin/HEAD): the ref it points to. */
  symref?: string;
}

export async function listRefs(patterns: string[], opts: GitOptions): Promise<RefEntry[]> {
  const text = await gitText(
    ['for-each-ref', '--format=%(refname)%00%(objectname)%00%(objecttype)%00%(symref)', ...patterns],
    opts,
  );
  if (!text) return [];
  return text.split('\n').map((line) => {
    const [name, oid, type, symref] = line.split('\0');
    const e: RefEntry = { name, oid, type: type as RefEntry['type'] };
    if (symref) e.symref = symref;
    return e;
  });
}

export type HeadState = { kind: 'branch'; ref: string; oid: string | null } | { kind: 'detached'; oid: string };

/** Whether two HEAD states are the same (field by field: object key order is not meaning). */
export function sameHead(a: HeadState | null, b: HeadState | null): boolean {
  if (!a || !b) return a === b;
  if (a.kind !== b.kind || a.oid !== b.oid) return false;
  return a.kind !== 'branch' || (b.kind === 'branch' && a.ref === b.ref);
}

export async function readHead(opts: GitOptions): Promise<HeadState> {
  // Concurrently: a HEAD that moves between the two reads is caught by the caller's consistency
  // check (refview.ts) whether they run one after the other or together.
  const [sym, oidR] = await Promise.all([
    git(['symbolic-ref', '-q', 'HEAD'], { ...opts, okCodes: [1] }),
    git(['rev-parse', '-q', '--verify', 'HEAD^{commit}'], { ...opts, okCodes: [1] }),
  ]);
  const oid = oidR.code === 0 ? oidR.stdout.toString('utf8').trim() : null;
  if (sym.code === 0) return { kind: 'branch', ref: sym.stdout.toString('utf8').trim(), oid };
  if (!oid) throw new XetError('GIT_FAILED', 'HEAD is neither a branch nor a commit');
  return { kind: 'detached', oid };
}

/** Reflog of refs/stash, newest first (as `git stash list` shows it). */
export async function readStash(opts: GitOptions): Promise<{ oid: string; message: string }[]> {
  const has = await git(['rev-parse', '-q', '--verify', 'refs/stash'], { ...opts, okCodes: [1] });
  if (has.code !== 0) return [];
  const r = await git(['log', '-g', '-z', '--format=%H%x01%gs', 'refs/stash', '--'], opts);
  return splitZ(r.stdout).map((rec) => {
    const [oid, message] = rec.split('\x01');
    return { oid: oid.trim(), message: message ?? '' };
  });
}

/** Local config entries whose key matches the regexp, in file order; a key without a value as git
 * reads it, "true" (GitConfig.localEntries gives the same from a whole listing). */
export async function readLocalConfig(regexp: string, opts: GitOptions): Promise<{ key: string; value: string }[]> {
  const r = await git(['config', '--local', '-z', '--get-regexp', regexp], { ...opts, okCodes: [1] });
  return splitZ(r.stdout).map((rec) => {
    const nl = rec.indexOf('\n');
    return nl < 0 ? { key: rec, value: VALUELESS } : { key: rec.slice(0, nl), value: rec.slice(nl + 1) };
  });
}

/** What git xet reads whole from the object store is small (manifests, tags, handoff objects);
 * anything larger is refused unread, since a ref can point anywhere (a forged 600 MB blob). */
export const CAT_FILE_MAX_BYTES = 64 * 1024 * 1024;

export type CatFileResult = Map<string, { type: string; data: Buffer } | null> & {
  /** Names whose object exists but is larger than the limit (not read; null in the map), with sizes. */
  oversized: Map<string, number>;
};

export interface ObjectInfo {
  oid: string;
  type: string;
  size: number;
}

/** The entries of one tree as `git ls-tree -z <tree>` prints them (not recursive), by name. */
export function parseTopListing(text: string): Map<string, { mode: string; type: string; oid: string }> {
  const entries = new Map<string, { mode: string; type: string; oid: string }>();
  for (const rec of text.split('\0')) {
    const tab = rec.indexOf('\t');
    if (tab <= 0) continue;
    const [mode, type, oid] = rec.slice(0, tab).split(' ');
    entries.set(rec.slice(tab + 1), { mode, type, oid });
  }
  return entries;
}

/** `cat-file --batch-check` of many names, in order: oid, type and size, or null when missing. */
export async function objectInfos(names: string[], opts: GitOptions): Promise<(ObjectInfo | null)[]> {
  if (!names.length) return [];
  const text = await gitText(['cat-file', '--batch-check=%(objectname) %(objecttype) %(objectsize)'], {
    ...opts,
    input: names.map((n) => `${n}\n`).join(''),
  });
  const lines = text.split('\n');
  // A missing name is echoed back as "<name> missing"; names (paths) may hold spaces.
  return names.map((_, n) => {
    const line = lines[n] ?? '';
    if (/ (missing|ambiguous)$/.test(line) || !line) return null;
    const [oid, type, size] = line.split(' ');
    return { oid, type, size: Number(size) };
  });
}

/**
 * Read many small objects (manifests, tags, handoff objects). Nothing large is ever read, by git
 * or by us: git reads a whole object to look a path up in it or to peel it, so for a name like
 * `<oid>:manifest.json` or `<oid>^{tree}` the object and its top tree are size-checked first
 * (only the header is read for that); then the named objects' sizes; only objects up to
 * `maxBytes` are read, by oid, in one `cat-file --batch`. Anything larger is null in the map and
 * listed in `oversized` with its size.
 */
export async function catFileBatch(
  names: string[],
  opts: GitOptions,
  maxBytes = CAT_FILE_MAX_BYTES,
): Promise<CatFileResult> {
  const result = Object.assign(new Map<string, { type: string; data: Buffer } | null>(), {
    oversized: new Map<string, number>(),
  });
  if (names.length === 0) return result;
  const baseOf = (name: string): string | null => /^([0-9a-f]{40,64})(?::|\^\{)/.exec(name)?.[1] ?? null;
  const bases = [...new Set(names.map(baseOf).filter((b): b is string => b !== null))];
  const tooBig = new Map<string, number>();
  const missing = new Set<string>();
  if (bases.length) {
    const infos = await objectInfos(bases, opts);
    const commits: string[] = [];
    bases.forEach((b, n) => {
      const info = infos[n];
      if (!info) missing.add(b);
      else if (info.size > maxBytes) tooBig.set(b, info.size);
      else if (info.type === 'commit') commits.push(b);
    });
    const trees = await objectInfos(
      commits.map((c) => `${c}^{tree}`),
      opts,
    );
    commits.forEach((c, n) => {
      const t = trees[n];
      if (t && t.size > maxBytes) tooBig.set(c, t.size);
    });
  }
  const checkable = names.filter((name) => {
    const b = baseOf(name);
    if (b && tooBig.has(b)) {
      result.oversized.set(name, tooBig.get(b) as number);
      result.set(name, null);
      return false;
    }
    if (b && missing.has(b)) {
      result.set(name, null);
      return false;
    }
    return true;
  });
  const infos = await objectInfos(checkable, opts);
  const wanted: { name: string; oid: string }[] = [];
  checkable.forEach((name, n) => {
    const info = infos[n];
    if (!info) result.set(name, null);
    else if (info.size > maxBytes) {
      result.oversized.set(name, info.size);
      result.set(name, null);
    } else wanted.push({ name, oid: info.oid });
  });
  if (!wanted.length) return result;
  const r = await git(['cat-file', '--batch'], { ...opts, input: wanted.map((w) => `${w.oid}\n`).join('') });
  const buf = r.stdout;
  let i = 0;
  for (const { name } of wanted) {
    const nl = buf.indexOf(10, i);
    const header = buf.toString('utf8', i, nl);
    i = nl + 1;
    if (header.endsWith(' missing') || header.endsWith(' ambiguous')) {
      result.set(name, null);
      continue;
    }
    const [, type, size] = header.split(' ');
    const n = Number(size);
    result.set(name, { type, data: buf.subarray(i, i + n) });
    i += n + 1;
  }
  return result;
}

/** Write blobs (raw bytes, no filters) and return their oids, in one process. */
export async function writeBlobs(contents: Buffer[], type: 'blob' | 'tag', opts: GitOptions): Promise<string[]> {
  if (contents.length === 0) return [];
  if (contents.length === 1) {
    const oid = await gitText(['hash-object', '-w', '--no-filters', '-t', type, '--stdin'], {
      ...opts,
      input: contents[0],
    });
    return [oid];
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-blobs-'));
  try {
    const files = contents.map((c, n) => {
      const f = path.join(dir, String(n));
      fs.writeFileSync(f, c);
      return f;
    });
    const text = await gitText(['hash-object', '-w', '--no-filters', '-t', type, '--stdin-paths'], {
      ...opts,
      input: files.map((f) => `${f}\n`).join(''),
    });
    return text.split('\n');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export interface TreeEntryInput {
  mode: string;
  type: 'blob' | 'tree' | 'commit';
  oid: string;
  name: string;
}

export async function mktree(entries: TreeEntryInput[], opts: GitOptions): Promise<string> {
  const input = joinZ(entries.map((e) => `${e.mode} ${e.type} ${e.oid}\t${e.name}`));
  return gitText(['mktree', '-z'], { ...opts, input });
}

export interface TreeListing {
  mode: string;
  type: string;
  oid: string;
  size: number;
  path: string;
}

/** Recursive listing of a tree (blobs and links; with `trees` also the subtrees), with sizes. */
export async function lsTree(
  tree: string,
  opts: GitOptions & { trees?: boolean; long?: boolean },
): Promise<TreeListing[]> {
  const args = ['ls-tree', '-r', '-z', '--full-tree'];
  if (opts.trees) args.push('-t');
  if (opts.long) args.push('-l');
  args.push(tree);
  const recs = await gitZ(args, opts);
  return recs.map((rec) => {
    // `<mode> SP <type> SP <oid>[ SP+ <size>] TAB <path>`, the size padded with spaces (-l).
    const tab = rec.indexOf('\t');
    const s1 = rec.indexOf(' ');
    const s2 = rec.indexOf(' ', s1 + 1);
    let oidEnd = rec.indexOf(' ', s2 + 1);
    if (oidEnd < 0 || oidEnd > tab) oidEnd = tab;
    const size = opts.long ? rec.slice(oidEnd, tab).trim() : '-';
    return {
      mode: rec.slice(0, s1),
      type: rec.slice(s1 + 1, s2),
      oid: rec.slice(s2 + 1, oidEnd),
      size: size !== '-' ? Number(size) : 0,
      path: rec.slice(tab + 1),
    };
  });
}

/** Author and committer for commits git xet makes: the user's identity, else a neutral one. */
export function identityEnv(config: GitConfig): Record<string, string> {
  const n = config.get('user.name') || 'git xet';
  const e = config.get('user.email') || 'git-xet@localhost';
  return { GIT_AUTHOR_NAME: n, GIT_AUTHOR_EMAIL: e, GIT_COMMITTER_NAME: n, GIT_COMMITTER_EMAIL: e };
}

export async function commitTree(tree: string, parents: string[], message: string, opts: GitOptions): Promise<string> {
  const args = ['commit-tree', tree];
  for (const p of parents) args.push('-p', p);
  return gitText(args, { ...opts, input: message });
}

export interface TreeChange {
  oldMode: string;
  newMode: string;
  oldOid: string;
  newOid: string;
  /** A, D, M or T (renames are off). */
  status: string;
  path: string;
}

/** `diff-tree -r` between two trees, parsed from its raw -z output. Modes of 000000 and all-zero
 * oids mark the side where a path does not exist. */
export async function diffTrees(
  a: string,
  b: string,
  opts: GitOptions,
  /** `--diff-filter` letters (e.g. 'M'): only those changes are listed. */
  filter?: string,
): Promise<TreeChange[]> {
  const only = filter ? [`--diff-filter=${filter}`] : [];
  const recs = await gitZ(['diff-tree', '-r', '-z', '--no-renames', ...only, a, b], opts);
  const out: TreeChange[] = [];
  for (let i = 0; i + 1 < recs.length; i += 2) {
    // ":<old mode> <new mode> <old oid> <new oid> <status>"
    const [oldMode, newMode, oldOid, newOid, status] = recs[i].slice(1).split(' ');
    out.push({ oldMode, newMode, oldOid, newOid, status, path: recs[i + 1] });
  }
  return out;
}

/** Object sizes by oid through one `cat-file --batch-check`; absent objects are not in the map. */
export async function objectSizes(oids: Iterable<string>, opts: GitOptions): Promise<Map<string, number>> {
  const unique = [...new Set(oids)];
  const out = new Map<string, number>();
  if (!unique.length) return out;
  const text = await gitText(['cat-file', '--batch-check=%(objectname) %(objectsize)'], {
    ...opts,
    input: unique.map((o) => `${o}\n`).join(''),
  });
  for (const line of text.split('\n')) {
    const [oid, size] = line.split(' ');
    if (size && size !== 'missing') out.set(oid, Number(size));
  }
  return out;
}

/**
 * The tree of an index file, written from a copy of it: `write-tree` stores the cache-tree it
 * computes back into the index, and the indexes we read (the user's, a target's) must not change.
 * No index file means nothing staged: the empty tree. Objects go wherever `opts` points git.
 */
export async function indexFileTree(
  indexFile: string,
  scratch: string,
  opts: GitOptions & { env: Record<string, string | undefined> },
  missingOk = false,
  /** Paths with unmerged entries (stages 1-3): left out, so the tree holds stage 0 only. */
  unmerged: string[] = [],
): Promise<string> {
  if (!fs.existsSync(indexFile)) return mktree([], opts);
  const copy = path.join(scratch, `index-copy-${process.pid}`);
  fs.copyFileSync(indexFile, copy);
  try {
    if (unmerged.length) {
      await git(['update-index', '-z', '--force-remove', '--stdin'], {
        ...opts,
        env: { ...opts.env, GIT_INDEX_FILE: copy },
        input: joinZ(unmerged),
      });
    }
    return await gitText(['write-tree', ...(missingOk ? ['--missing-ok'] : [])], {
      ...opts,
      env: { ...opts.env, GIT_INDEX_FILE: copy },
    });
  } finally {
    fs.rmSync(copy, { force: true });
  }
}
