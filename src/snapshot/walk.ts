// Walking a working tree: what is on disk, classified the way a snapshot needs it (tracked,
// untracked, ignored), filtered by the capture policy, with everything that cannot be captured
// named and never dropped silently. It reads directories only (dirent types), no per-file stat:
// hashing and stat caching come after (capture-files.ts). Where the native module loaded, every
// directory the walk will read is read ahead in one call on two threads (readDirs); the walk's
// decisions are the same either way.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { native } from '../native';
import type { CapturePolicy } from './policy';
import { refuseTooLong } from './paths';
import { joinNames } from '../git/tree-builder';

export type SkipReasonName =
  'fifo' | 'socket' | 'block-device' | 'char-device' | 'nested-repository' | 'unreadable' | 'git-refuses-path';

/** A repository inside the worktree: a checked-out submodule (this index has a gitlink at its
 * path) or a nested repository (nothing of it tracked here). Captured as a snapshot of its own. */
export interface FoundRepository {
  path: string;
  kind: 'submodule' | 'nested';
}

/** Names git refuses to store in a tree whatever its config (read-cache.c verify_dotfile): a `.git`
 * component in any case, and a symlink named `.gitmodules` in any case. Left out, they would be
 * counted but silently missing from the snapshot; so they are named in `skipped`. */
export function gitRefusesName(name: string, symlink: boolean): boolean {
  const lower = name.toLowerCase();
  return lower === '.git' || (symlink && lower === '.gitmodules');
}

/** git's listing of the untracked ignored paths, the walk's `ignored` (a whole directory as "dir/"):
 * one spelling for every reader, so the daemon's memo of it lists what a capture would. */
export const IGNORED_LISTING_ARGS = ['ls-files', '-z', '-o', '-i', '--exclude-standard', '--directory'];

export interface WalkInput {
  root: string;
  /** Paths in the index (stage 0), as git lists them. */
  tracked: Set<string>;
  /** Untracked-and-ignored paths from `git ls-files -o -i --directory` ("dir/" for whole dirs). */
  ignored: Set<string>;
  policy: CapturePolicy;
  /** The repository's git dirs (absolute). One inside the worktree under another name than `.git`
   * (`GIT_DIR=~/.cfg GIT_WORK_TREE=~`) is git's, not the tree's: left out like `.git`. */
  gitDirs?: string[];
  /** 'js' reads each directory with node's readdirSync even where the native module loaded (the
   * tests hold the two to the same result). */
  listing?: 'auto' | 'js';
  /** The last walk's directories, kept by a process that watches them (src/daemon/tree-watch.ts):
   * a directory nothing changed in is not read again, and where the walk's inputs are the same its
   * decisions are replayed. Absent: every directory is read. */
  memo?: WalkMemo;
}

/** One directory as the walk last saw it: its listing and what the walk made of it, in order. */
export interface DirRecord {
  names: string[];
  kinds: Uint8Array;
  dirIgnored: boolean;
  ops: WalkOp[];
  /** Its listing was read after its watch began: an unchanged directory still lists this. */
  trusted: boolean;
}

/** What the walk did with one entry of a directory, replayed into a later walk's result. */
export type WalkOp =
  | { op: 'path'; path: string; as: 'tracked' | 'untracked' | 'ignored'; attributes: boolean }
  | { op: 'skip'; path: string; reason: SkipReasonName }
  | { op: 'secret'; path: string }
  | { op: 'excluded' }
  | { op: 'not-captured' }
  | { op: 'empty'; path: string }
  | { op: 'repository'; repository: FoundRepository }
  | { op: 'dir'; name: string; ignored: boolean };

/** What a watching process gives the walk (src/daemon/tree-watch.ts holds the proof obligations). */
export interface WalkMemo {
  /** The last walk's records, by directory relative to the root ('' is the root). */
  records: ReadonlyMap<string, DirRecord>;
  /** Whether the decisions in the records were made with this walk's inputs (tracked and ignored
   * paths, policy, git dirs); if not, the listings still serve and the decisions are made again. */
  sameInputs: boolean;
  /** Whether nothing in `rel` changed since its record's listing was read (false for every
   * directory once the watch could no longer tell, as after a reset in the middle of the walk). */
  unchanged(rel: string): boolean;
  /** Called before `rel` is read: watch it from now on. 'before': it was watched before this walk
   * began (a listing read ahead is trusted); 'now': from this call (one read now is trusted);
   * 'no': not watched (its listing is never trusted). */
  watch(rel: string, abs: string): 'before' | 'now' | 'no';
  /** Whether to read every directory ahead (many changed): the read-ahead is then trusted only for
   * directories watched before. */
  readAhead: boolean;
  /** With no records yet: watch these directories (relative, absolute) before they are read
   * again, so that the first walk's listings are trusted (one more read ahead and a watch per
   * directory: 70-160 ms on the bench tree, once). */
  prewatch?(dirs: [string, string][]): void;
  /** Set by the walk: the records of this walk, for the next. */
  next?: Map<string, DirRecord>;
  /** The result of the walk that made `records`, when the watch kept it with them. */
  lastResult?: WalkResult | null;
  /** Set by the walk: its result (a copy), kept with `next`. */
  nextResult?: WalkResult;
  /** Set by the walk when it replayed every record without visiting them (nothing changed). */
  replayedWhole?: boolean;
}

export interface WalkResult {
  /** Files and symlinks to capture, in walk order. */
  paths: string[];
  counts: { tracked: number; untracked: number; ignored: number };
  emptyDirs: string[];
  skipped: { path: string; reason: SkipReasonName }[];
  excludedSecrets: string[];
  excludedByPattern: number;
  /** Ignored entries left out because the policy is `ignored: none` (a whole dir counts once). */
  ignoredNotCaptured: number;
  /** .gitattributes files seen (to decide whether an LFS check is needed). */
  attributeFiles: string[];
  /** Repositories inside the worktree, captured recursively (their files are not in `paths`). */
  repositories: FoundRepository[];
}

type Kind = 'file' | 'symlink' | 'dir' | SkipReasonName | 'unknown';

/** A directory entry's kind as a number: readDirs' codes (native/xet-native.c). */
const KINDS: readonly Kind[] = [
  'unknown',
  'file',
  'dir',
  'symlink',
  'fifo',
  'socket',
  'block-device',
  'char-device',
  'unreadable',
];
/** An entry whose type the directory did not give and which was gone when it was lstat'ed. */
const VANISHED = 255;
const UNREADABLE = KINDS.indexOf('unreadable');

/** An entry's kind as readDirs codes it (KINDS), from a Dirent or an lstat: 0 for none of these. */
function kindCode(d: fs.Dirent | fs.Stats): number {
  if (d.isFile()) return 1;
  if (d.isDirectory()) return 2;
  if (d.isSymbolicLink()) return 3;
  if (d.isFIFO()) return 4;
  if (d.isSocket()) return 5;
  if (d.isBlockDevice()) return 6;
  if (d.isCharacterDevice()) return 7;
  return 0;
}

/** The entries of a directory whose file system gave no type (DT_UNKNOWN) get one from lstat, as
 * node's readdirSync does for its own listings: one that is gone is VANISHED, and any other failure
 * is thrown, the directory's as it was when readdirSync threw it (EACCES: unreadable). */
function resolveUnknown(abs: string, { names, kinds, from, to }: DirEntries): void {
  for (let i = from; i < to; i++) {
    if (kinds[i] !== 0) continue;
    try {
      // Something lstat names but the walk does not know is not ours to read.
      kinds[i] = kindCode(fs.lstatSync(abs + path.sep + names[i])) || UNREADABLE;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw e;
      kinds[i] = VANISHED;
    }
  }
}

/** One directory's entries: names[from, to) with their kinds, and where each one's own listing is
 * (null: none read ahead). */
interface DirEntries {
  names: string[];
  kinds: Uint8Array;
  child: Int32Array | null;
  from: number;
  to: number;
}

/** Directory listings: entries [first, first + count) of `names` and `kinds` for directory k, and
 * for each entry the listing of the directory it names (-1 when not read ahead). */
export interface Listings {
  dirs: Int32Array;
  names: string[];
  kinds: Uint8Array;
  child: Int32Array;
}

/** Every directory under root read ahead by the native module, except the `skip` paths (and what
 * readDirs leaves out itself), or null without the module. Listing 0 is root's. */
export function readListings(root: string, skip: readonly string[]): Listings | null {
  if (!native) return null;
  const raw = native.readDirs(root, joinNames(skip));
  // Int32 views need 4-byte alignment; a fresh Buffer from the module starts at offset 0.
  const buf = raw.byteOffset % 4 === 0 ? raw : Buffer.from(raw);
  const head = new Int32Array(buf.buffer, buf.byteOffset, 4);
  const [ndirs, nentries, namesBytes] = head;
  const dirsAt = buf.byteOffset + 16;
  const childAt = dirsAt + 12 * ndirs;
  const kindsAt = childAt + 4 * nentries;
  const namesAt = kindsAt + ((nentries + 3) & ~3);
  if (namesAt - buf.byteOffset + namesBytes !== buf.length) throw new Error('readDirs: a listing of the wrong size');
  // One decode and one split for every name: the walk needs them as strings anyway.
  const names = nentries ? buf.toString('utf8', namesAt - buf.byteOffset, buf.length - 1).split('\0') : [];
  if (names.length !== nentries) throw new Error(`readDirs: ${names.length} names for ${nentries} entries`);
  return {
    dirs: new Int32Array(buf.buffer, dirsAt, 3 * ndirs),
    names,
    kinds: new Uint8Array(buf.buffer, kindsAt, nentries),
    child: new Int32Array(buf.buffer, childAt, nentries),
  };
}

/** Every directory in `ahead` (relative, absolute), the root first. */
function listedDirs(root: string, ahead: Listings): [string, string][] {
  const out: [string, string][] = [['', root]];
  const listingOf: number[] = [0];
  for (let k = 0; k < out.length; k++) {
    const at = listingOf[k];
    if (ahead.dirs[3 * at + 2] !== 0) continue; // its read failed: nothing below is known
    const from = ahead.dirs[3 * at];
    const to = from + ahead.dirs[3 * at + 1];
    const [rel, abs] = out[k];
    for (let i = from; i < to; i++) {
      if (ahead.child[i] < 0) continue;
      const name = ahead.names[i];
      out.push([rel === '' ? name : `${rel}/${name}`, abs + path.sep + name]);
      listingOf.push(ahead.child[i]);
    }
  }
  return out;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** PATH_ENCODING if a name in `abs` is not valid UTF-8 (`rel` names the directory in messages,
 * `fork` the fork it is in). Node decodes names as UTF-8 and replaces bad bytes with U+FFFD, so
 * the raw bytes tell a real U+FFFD from a name git would store differently from what we could
 * write back. */
export function assertUtf8Names(abs: string, rel: string, fork?: string): void {
  for (const raw of fs.readdirSync(abs, { encoding: 'buffer' })) {
    try {
      utf8.decode(raw);
    } catch {
      throw new XetError(
        'PATH_ENCODING',
        `a file name in ${rel || '.'}${fork ? ` of fork ${fork}` : ''} is not valid UTF-8: ${raw.toString('latin1')}`,
        { dir: rel || '.', nameHex: raw.toString('hex'), ...(fork ? { fork } : {}) },
      );
    }
  }
}

export function walkWorktree(input: WalkInput): WalkResult {
  const { root, tracked, ignored, policy } = input;
  const memo = input.memo;
  if (memo && memo.sameInputs && memo.lastResult && everyRecordUnchanged(memo)) {
    // Nothing changed in any directory the last walk read, and its inputs are these: this walk
    // would replay every record, in the order the last one made them, into the last result (the
    // replay of ~34,000 decisions took ~15 ms of a daemon re-capture of the bench tree).
    memo.next = new Map(memo.records);
    memo.nextResult = memo.lastResult;
    memo.replayedWhole = true;
    return copyResult(memo.lastResult);
  }
  const res: WalkResult = {
    paths: [],
    counts: { tracked: 0, untracked: 0, ignored: 0 },
    emptyDirs: [],
    skipped: [],
    excludedSecrets: [],
    excludedByPattern: 0,
    ignoredNotCaptured: 0,
    attributeFiles: [],
    repositories: [],
  };
  const canIncludeIgnored = entersIgnoredDirectories(policy);
  const gitDirsInside = new Set(
    (input.gitDirs ?? [])
      .map((g) => path.relative(root, g))
      .filter((r) => r !== '' && !r.startsWith('..') && !path.isAbsolute(r))
      .map((r) => r.split(path.sep).join('/')),
  );

  // Every directory that holds a tracked path, made on first use (ignored directories and nested
  // repositories ask; a scan of every tracked path per directory was quadratic).
  let trackedDirs: Set<string> | null = null;
  const hasTrackedUnder = (dir: string): boolean => {
    if (!trackedDirs) {
      trackedDirs = new Set();
      for (const p of tracked)
        for (let at = p.indexOf('/'); at >= 0; at = p.indexOf('/', at + 1)) trackedDirs.add(p.slice(0, at));
    }
    return trackedDirs.has(dir);
  };

  // Directories the walk will not enter whatever it finds: git's own directories inside the tree,
  // and ignored ones that cannot be included and hold nothing tracked. Not read ahead.
  const pruned = [...gitDirsInside];
  if (!canIncludeIgnored)
    for (const i of ignored) if (i.endsWith('/') && !hasTrackedUnder(i.slice(0, -1))) pruned.push(i.slice(0, -1));
  const next = memo ? new Map<string, DirRecord>() : null;
  let ahead = input.listing === 'js' || (memo && !memo.readAhead) ? null : readListings(root, pruned);
  if (ahead && memo?.prewatch && memo.records.size === 0) {
    // A first walk: every directory read ahead is watched, then read again (a directory made in
    // between is watched as the walk meets it, and not trusted until the next walk reads it).
    memo.prewatch(listedDirs(root, ahead));
    ahead = readListings(root, pruned);
  }

  const list = (abs: string, at: number): DirEntries => {
    if (ahead && at >= 0 && ahead.dirs[3 * at + 2] === 0) {
      const from = ahead.dirs[3 * at];
      return { names: ahead.names, kinds: ahead.kinds, child: ahead.child, from, to: from + ahead.dirs[3 * at + 1] };
    }
    // Not read ahead, or its read failed: node reads it (and reports an error in its own words).
    const entries = fs.readdirSync(abs, { withFileTypes: true });
    const k = new Uint8Array(entries.length);
    for (let i = 0; i < entries.length; i++) k[i] = kindCode(entries[i]);
    return { names: entries.map((d) => d.name), kinds: k, child: null, from: 0, to: entries.length };
  };

  // A path to capture (the walk's hot case: no object made for it without a memo).
  const addPath = (p: string, as: 'tracked' | 'untracked' | 'ignored', attributes: boolean, ops: WalkOp[] | null) => {
    res.paths.push(p);
    res.counts[as]++;
    if (attributes) res.attributeFiles.push(p);
    if (ops) ops.push({ op: 'path', path: p, as, attributes });
  };

  // What a directory's walk does to the result, applied now and (with a memo) recorded for the next.
  const apply = (o: WalkOp, ops: WalkOp[] | null): void => {
    if (ops) ops.push(o);
    switch (o.op) {
      case 'path':
        addPath(o.path, o.as, o.attributes, null);
        return;
      case 'skip':
        res.skipped.push({ path: o.path, reason: o.reason });
        return;
      case 'secret':
        res.excludedSecrets.push(o.path);
        return;
      case 'excluded':
        res.excludedByPattern++;
        return;
      case 'not-captured':
        res.ignoredNotCaptured++;
        return;
      case 'empty':
        res.emptyDirs.push(o.path);
        return;
      case 'repository':
        res.repositories.push(o.repository);
        return;
      case 'dir':
        return; // the caller walks it
    }
  };

  // A directory the memo vouches for, its decisions replayed; its subdirectories walked (each
  // replayed in turn where nothing changed in it).
  const replay = (abs: string, rel: string, rec: DirRecord): void => {
    (next as Map<string, DirRecord>).set(rel, rec);
    for (const o of rec.ops) {
      if (o.op !== 'dir') apply(o, null);
      else walkDir(abs + path.sep + o.name, rel === '' ? o.name : `${rel}/${o.name}`, o.ignored, -1);
    }
  };

  // `at` is the directory's listing read ahead, or -1.
  const walkDir = (abs: string, rel: string, dirIgnored: boolean, at: number): void => {
    if (!memo) return readDir(abs, rel, dirIgnored, at, null);
    const rec = memo.records.get(rel);
    if (rec && rec.trusted && memo.unchanged(rel)) {
      if (memo.sameInputs && rec.dirIgnored === dirIgnored) return replay(abs, rel, rec);
      return readDir(abs, rel, dirIgnored, -1, rec);
    }
    // Watched before it is read: a change after the read is an event the next walk sees.
    const watched = memo.watch(rel, abs);
    const trusted = watched === 'now' ? at < 0 : watched === 'before';
    return readDir(abs, rel, dirIgnored, at, null, trusted);
  };

  // A directory read (or its listing taken from `known`) and decided entry by entry.
  const readDir = (
    abs: string,
    rel: string,
    dirIgnored: boolean,
    at: number,
    known: DirRecord | null,
    trusted = known !== null,
  ): void => {
    const ops: WalkOp[] | null = memo ? [] : null;
    const own = decideDir(abs, rel, dirIgnored, at, known, ops);
    if (next && ops) {
      next.set(rel, {
        names: own ? own.names.slice(own.from, own.to) : [],
        kinds: own ? own.kinds.slice(own.from, own.to) : new Uint8Array(0),
        dirIgnored,
        ops,
        // An unreadable directory is read again next time (its permissions may change back
        // without an event in it).
        trusted: trusted && own !== null,
      });
    }
  };

  // Its listing, or null where it could not be read (named in `skipped`).
  const decideDir = (
    abs: string,
    rel: string,
    dirIgnored: boolean,
    at: number,
    known: DirRecord | null,
    ops: WalkOp[] | null,
  ): DirEntries | null => {
    let entries: DirEntries;
    try {
      if (known) entries = { names: known.names, kinds: known.kinds, child: null, from: 0, to: known.names.length };
      else {
        entries = list(abs, at);
        resolveUnknown(abs, entries);
      }
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EACCES' || code === 'EPERM') {
        apply({ op: 'skip', path: rel, reason: 'unreadable' }, ops);
        return null; // named as skipped; not an empty dir
      }
      // Listed as a directory a moment ago, gone or a file now: the tree is changing under the
      // capture (a package manager, a build), which a capture says as such, not as a crash.
      if (code === 'ENOENT' || code === 'ENOTDIR') {
        throw new XetError(
          'WORKTREE_CHANGED',
          `${rel} was removed or replaced while the worktree was being read; capture again`,
          { path: rel },
        );
      }
      throw e;
    }
    const { names: dNames, kinds: dKinds, child: dChild, from, to } = entries;
    let innerGit = false;
    let hasGit = false;
    let replaced = false;
    for (let i = from; i < to; i++) {
      if (dNames[i] === '.git') hasGit = true;
      if (dNames[i].includes('\uFFFD')) replaced = true;
    }
    if (rel !== '' && hasGit) {
      // Another repository inside this one: its files belong to it, not to this snapshot. But when
      // this index tracks paths below it, git treats it as an ordinary directory (only the inner
      // .git is not ours), and so do we: a stray .git must never hide tracked files.
      // A checked-out submodule (a gitlink here) or a nested repository is captured as a snapshot of
      // its own; an exclude pattern or `--ignored none` still leaves a nested one out on purpose.
      if (tracked.has(rel)) {
        apply({ op: 'repository', repository: { path: rel, kind: 'submodule' } }, ops);
        return entries;
      }
      if (!hasTrackedUnder(rel)) {
        const included = policy.isIncluded(`${rel}/`);
        if (dirIgnored && policy.ignored === 'none' && !included) {
          apply({ op: 'not-captured' }, ops);
          return entries;
        }
        if (!included && policy.isExcluded(`${rel}/`)) {
          apply({ op: 'excluded' }, ops);
          return entries;
        }
        apply({ op: 'repository', repository: { path: rel, kind: 'nested' } }, ops);
        return entries;
      }
      apply({ op: 'skip', path: `${rel}/.git`, reason: 'nested-repository' }, ops);
      innerGit = true;
    }
    if (replaced) assertUtf8Names(abs, rel);
    let sawAny = false;
    for (let i = from; i < to; i++) {
      const name = dNames[i];
      if (name === '.git' && (rel === '' || innerGit)) continue;
      const childRel = rel === '' ? name : `${rel}/${name}`;
      const childAbs = abs + path.sep + name;
      if (dKinds[i] === VANISHED) continue;
      const kind = KINDS[dKinds[i]];
      sawAny = true;
      if (gitRefusesName(name, kind === 'symlink')) {
        apply({ op: 'skip', path: childRel, reason: 'git-refuses-path' }, ops);
        continue;
      }
      if (kind === 'dir') {
        if (gitDirsInside.has(childRel)) continue;
        const ign = !dirIgnored ? ignored.has(`${childRel}/`) : true;
        if (ign && !canIncludeIgnored && !hasTrackedUnder(childRel)) {
          apply({ op: 'not-captured' }, ops);
          continue;
        }
        refuseTooLong(root, childRel, 'capture');
        if (ops) ops.push({ op: 'dir', name, ignored: ign });
        walkDir(childAbs, childRel, ign, dChild ? dChild[i] : -1);
        continue;
      }
      if (kind !== 'file' && kind !== 'symlink') {
        apply({ op: 'skip', path: childRel, reason: kind === 'unknown' ? 'unreadable' : kind }, ops);
        continue;
      }
      refuseTooLong(root, childRel, 'capture');
      if (tracked.has(childRel)) {
        addPath(childRel, 'tracked', name === '.gitattributes', ops);
        continue;
      }
      const isIgnored = dirIgnored || ignored.has(childRel);
      const included = policy.isIncluded(childRel);
      if (isIgnored && policy.ignored === 'none' && !included) {
        apply({ op: 'not-captured' }, ops);
        continue;
      }
      if (!included && policy.isExcluded(childRel)) {
        apply({ op: 'excluded' }, ops);
        continue;
      }
      if (!included && policy.isSecret(childRel)) {
        apply({ op: 'secret', path: childRel }, ops);
        continue;
      }
      if (kind === 'file' && !readable(childAbs)) {
        // Not ours to read (another user's file): named, not fatal. A tracked one stays fatal.
        apply({ op: 'skip', path: childRel, reason: 'unreadable' }, ops);
        continue;
      }
      addPath(childRel, isIgnored ? 'ignored' : 'untracked', name === '.gitattributes', ops);
    }
    if (!sawAny && rel !== '') {
      // A directory with nothing at all in it is recorded, so the tree's shape survives (git
      // cannot hold one). Its parents need no record: restore creates them on the way.
      if (!(dirIgnored && policy.ignored === 'none' && !policy.isIncluded(`${rel}/`)))
        apply({ op: 'empty', path: rel }, ops);
    }
    return entries;
  };

  walkDir(root, '', false, ahead ? 0 : -1);
  // Directory order is whatever the filesystem gives; what goes into the manifest is sorted.
  const byPath = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  res.emptyDirs.sort(byPath);
  res.excludedSecrets.sort(byPath);
  res.skipped.sort((a, b) => byPath(a.path, b.path));
  res.repositories.sort((a, b) => byPath(a.path, b.path));
  if (memo && next) {
    memo.next = next;
    memo.nextResult = copyResult(res);
  }
  return res;
}

/** Whether the memo vouches for every directory the last walk read: then none would be read now.
 * (Each record's `dirIgnored` is its parent's decision in the same walk, so replaying them all
 * passes the check replay makes.) */
function everyRecordUnchanged(memo: WalkMemo): boolean {
  if (!memo.records.has('')) return false;
  for (const [rel, rec] of memo.records) if (!rec.trusted || !memo.unchanged(rel)) return false;
  return true;
}

/** A result whose lists the caller may change without changing `r`. */
/** Whether a walk under `policy` enters the directories git lists as wholly ignored (else it leaves
 * them out unread, unless something under them is tracked). */
export function entersIgnoredDirectories(policy: Pick<CapturePolicy, 'ignored' | 'include'>): boolean {
  return policy.ignored === 'all' || policy.include.length > 0;
}

function copyResult(r: WalkResult): WalkResult {
  return {
    ...r,
    paths: r.paths.slice(),
    counts: { ...r.counts },
    emptyDirs: r.emptyDirs.slice(),
    skipped: r.skipped.slice(),
    excludedSecrets: r.excludedSecrets.slice(),
    attributeFiles: r.attributeFiles.slice(),
    repositories: r.repositories.slice(),
  };
}

// Root reads everything; anyone else checks, so one unreadable file cannot fail a whole capture.
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
function readable(abs: string): boolean {
  if (isRoot) return true;
  try {
    fs.accessSync(abs, fs.constants.R_OK);
    return true;
  } catch {
    return false;
  }
}
