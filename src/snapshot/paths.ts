// Path safety for anything a snapshot asks us to write. A snapshot may come from another machine or
// an attacker, so every path is checked before the first byte is written: nothing absolute, no `.`,
// `..` or `.git` component, no path through a file or symlink the same snapshot creates, no two
// entries for one path. Violations are PATH_ESCAPE (would leave the target) or PATH_CONFLICT.

import { XetError } from '../errors';

/** Linux's PATH_MAX: the bytes of a path handed to the kernel, its terminating NUL included. */
export const PATH_MAX = 4096;
/** Linux's limit on one file name, in bytes. */
export const NAME_MAX = 255;

/** A path the kernel refuses (ENAMETOOLONG) is a typed error, found before anything is written. */
export function refuseTooLong(root: string, rel: string | number, where: string): void {
  const relBytes = typeof rel === 'number' ? rel : Buffer.byteLength(rel);
  const bytes = Buffer.byteLength(root) + 1 + relBytes;
  if (bytes + 1 <= PATH_MAX) return;
  const shown = typeof rel === 'number' ? `a path of ${rel} bytes` : `${JSON.stringify(rel.slice(0, 120))}…`;
  throw new XetError(
    'PATH_TOO_LONG',
    `${where}: ${shown} under ${root} is ${bytes} bytes; the system allows ${PATH_MAX - 1}`,
    { root, bytes, limit: PATH_MAX - 1, ...(typeof rel === 'string' ? { path: rel.slice(0, 1024) } : {}) },
  );
}

export interface PathEntry {
  path: string;
  /** 'tree' for directories; anything else is a leaf (blob, symlink). */
  type: string;
}

export function checkPathSyntax(p: string, where: string): void {
  const bad = (why: string) => {
    throw new XetError('PATH_ESCAPE', `unsafe path in ${where}: ${JSON.stringify(p)} (${why})`, { path: p, where });
  };
  if (p === '') bad('empty');
  if (p.charCodeAt(0) === SLASH) bad('absolute');
  if (p.includes('\0')) bad('NUL byte');
  // Component by component without splitting (a restore checks ~70,000 paths): only a component
  // of one to four characters starting with a dot can be one of these.
  let start = 0;
  for (;;) {
    let end = p.indexOf('/', start);
    if (end < 0) end = p.length;
    const len = end - start;
    if (len === 0) bad('empty component');
    if (len <= 4 && p.charCodeAt(start) === DOT) {
      const comp = p.slice(start, end);
      if (comp === '.' || comp === '..') bad(`"${comp}" component`);
      if (comp.toLowerCase() === '.git') bad('".git" component');
    }
    if (end === p.length) return;
    start = end + 1;
  }
}

const SLASH = 0x2f;
const DOT = 0x2e;

/** Checks leaves, directories and extra directories (empty dirs) of one target tree together. */
export function checkTreePaths(entries: PathEntry[], extraDirs: string[], where: string): void {
  const kinds = new Map<string, string>();
  const conflict = (p: string, why: string) => {
    throw new XetError('PATH_CONFLICT', `colliding paths in ${where}: ${JSON.stringify(p)} (${why})`, {
      path: p,
      where,
    });
  };
  for (const e of entries) {
    checkPathSyntax(e.path, where);
    const kind = e.type === 'tree' ? 'dir' : 'leaf';
    if (kinds.has(e.path)) conflict(e.path, 'listed twice');
    kinds.set(e.path, kind);
  }
  for (const d of extraDirs) {
    checkPathSyntax(d, where);
    if (kinds.get(d) === 'leaf') conflict(d, 'an empty directory where a file is');
  }
  // Every ancestor of every path must be a directory, never a file or symlink we also write. Going
  // up from each path stops at the first ancestor listed as a directory: that one is itself in
  // the list, and its own ancestors are checked when its turn comes.
  for (const p of kinds.keys()) parentsAreDirs(p);
  for (const p of extraDirs) parentsAreDirs(p);
  function parentsAreDirs(p: string): void {
    let i = p.lastIndexOf('/');
    while (i > 0) {
      const parent = p.slice(0, i);
      const kind = kinds.get(parent);
      if (kind === 'leaf') conflict(p, `its parent ${JSON.stringify(parent)} is a file or symlink`);
      if (kind === 'dir') break;
      i = p.lastIndexOf('/', i - 1);
    }
  }
}
