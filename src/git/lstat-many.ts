// lstat of many paths under one directory at once, as rows of numbers: the native module's
// lstatMany (one call, no Stats object per path) where it is loaded, else node's bigint lstat. Both
// give exactly the same rows. A capture's classify step lstats every path of the worktree against
// its stat cache, and node's lstatSync made that its slowest step on a warm tree.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { native } from '../native';
import { joinNames } from './tree-builder';

/** The numbers per path, in this order (kept in step with native/xet-native.c STAT_ROW). */
export const STAT_ROW = 12;
export const ROW = {
  /** 0 when the fields hold, else the errno (ENOENT and ENOTDIR: the path is not there). */
  errno: 0,
  mode: 1,
  /** -1 past 2^53 (never equal to a recorded size). */
  size: 2,
  nlink: 3,
  /** -1 past 2^53. */
  ino: 4,
  /** -1 past 2^53. */
  dev: 5,
  uid: 6,
  gid: 7,
  mtime: 8,
  mtimeNs: 9,
  ctime: 10,
  ctimeNs: 11,
} as const;

const { ENOENT, ENOTDIR } = os.constants.errno;
const EXACT_MAX = 2 ** 53;

/** Whether a row's path is absent (gone, or a parent is no longer a directory). */
export function absent(rows: Float64Array, i: number): boolean {
  const e = rows[i * STAT_ROW];
  return e === ENOENT || e === ENOTDIR;
}

/** lstat of root/p for every p (relative, no NUL). Throws what lstat would for an error other than
 * ENOENT and ENOTDIR (those are rows with that errno). `names`, when the caller has it, is
 * joinNames(paths) (tree-builder.ts): the paths encoded once for this and the trees and index. */
export function lstatMany(root: string, paths: readonly string[], useNative = true, names?: Buffer): Float64Array {
  const n = paths.length;
  const rows = new Float64Array(n * STAT_ROW);
  if (n === 0) return rows;
  if (native && useNative) {
    for (const p of paths)
      if (p.includes('\0') || p === '') throw new Error(`lstatMany: unusable path ${JSON.stringify(p)}`);
    const out = Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength);
    const done = native.lstatMany(root, names ?? joinNames(paths), out);
    if (done !== n) throw new Error(`lstatMany: ${done} of ${n} paths`);
  } else {
    for (let i = 0; i < n; i++) {
      const r = i * STAT_ROW;
      let st: fs.BigIntStats | undefined;
      try {
        st = fs.lstatSync(path.join(root, paths[i]), { bigint: true, throwIfNoEntry: false });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOTDIR') throw e;
        rows[r] = ENOTDIR;
        continue;
      }
      if (!st) {
        rows[r] = ENOENT;
        continue;
      }
      const exact = (v: bigint): number => (v >= 0n && v <= BigInt(EXACT_MAX) ? Number(v) : -1);
      const NS = 1_000_000_000n;
      const split = (ns: bigint): [number, number] => {
        const sec = ns >= 0n || ns % NS === 0n ? ns / NS : ns / NS - 1n;
        return [Number(sec), Number(ns - sec * NS)];
      };
      rows[r + ROW.mode] = Number(st.mode);
      rows[r + ROW.size] = exact(st.size);
      rows[r + ROW.nlink] = Number(st.nlink);
      rows[r + ROW.ino] = exact(st.ino);
      rows[r + ROW.dev] = exact(st.dev);
      rows[r + ROW.uid] = Number(st.uid);
      rows[r + ROW.gid] = Number(st.gid);
      [rows[r + ROW.mtime], rows[r + ROW.mtimeNs]] = split(st.mtimeNs);
      [rows[r + ROW.ctime], rows[r + ROW.ctimeNs]] = split(st.ctimeNs);
    }
  }
  for (let i = 0; i < n; i++) {
    const e = rows[i * STAT_ROW];
    if (e !== 0 && e !== ENOENT && e !== ENOTDIR) throw lstatError(e, path.join(root, paths[i]));
  }
  return rows;
}

/** The rows lstatMany would give for the `count` paths of `names` (joinNames), the lstat done on
 * other threads while this one goes on; null where the native module is not loaded, or when the
 * lstat failed or met an error other than ENOENT and ENOTDIR (lstatMany then says which). `names`
 * must not be written until it settles. */
export function lstatManyLater(root: string, names: Buffer, count: number): Promise<Float64Array | null> {
  if (!native?.lstatManyLater || count === 0) return Promise.resolve(null);
  const rows = new Float64Array(count * STAT_ROW);
  let pending: Promise<number>;
  try {
    pending = native.lstatManyLater(root, names, Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength));
  } catch {
    return Promise.resolve(null);
  }
  return pending.then(
    (done) => {
      if (done !== count) return null;
      for (let i = 0; i < count; i++) {
        const e = rows[i * STAT_ROW];
        if (e !== 0 && e !== ENOENT && e !== ENOTDIR) return null;
      }
      return rows;
    },
    () => null,
  );
}

function lstatError(errno: number, file: string): NodeJS.ErrnoException {
  const code = Object.entries(os.constants.errno).find(([, v]) => v === errno)?.[0] ?? `E${errno}`;
  return Object.assign(new Error(`${code}: lstat '${file}'`), { code, errno: -errno, syscall: 'lstat', path: file });
}
