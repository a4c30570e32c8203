// git xet's native module (native/xet-native.c, built by `npm run build` where a C compiler and
// libdeflate-dev exist): loaded once per thread, or null with the reason. Every caller has a
// fallback (node's zlib, mount(8), node's spawn), so a machine without it does the same work more slowly.
// GIT_XET_NATIVE=0 turns it off.

import * as path from 'node:path';
import * as util from 'node:util';

export interface XetNative {
  deflateInto(src: Buffer, level: number, dst: Buffer, at: number): number;
  deflateBound(n: number): number;
  /** Only in a module built with ISA-L (scripts/build-native.mjs): deflateInto through igzip's
   * level 1, or -1 when the stream would not fit (the caller then deflates another way). */
  deflateFastInto?(src: Buffer, dst: Buffer, at: number): number;
  /** The Adler-32 of `buf` (zlib's trailer). */
  adler32(buf: Uint8Array): number;
  /** A capture's read of one regular file (src/git/file-scan.ts readOne): opened without following
   * a symlink or blocking, fstat-ed into `stat` (9 int64: dev, ino, mode, nlink, uid, gid, size,
   * mtime ns, ctime ns), read whole into `buf` unless it is linked (`deferLinks`), at least
   * `largeAt` (0: none is) or over `big`, and fstat-ed again. The bytes read, -errno, or one of
   * file-scan.ts's READ_* codes. */
  readFile(path: string, largeAt: number, deferLinks: 0 | 1, big: number, buf: Buffer, stat: Buffer): number;
  inflateInto(src: Buffer, dst: Buffer): number;
  /** A restore's write of one new file (src/snapshot/lay-worker.ts): created with O_EXCL and
   * O_NOFOLLOW at `perm` (less the umask), `data[0..length)` written, its mtime set to `sec`.`nsec`
   * on the descriptor (atime now; not when `nsec` is -1), and its fstat written into `out` as git's
   * index stat block (40 big-endian bytes: ctime s/ns, mtime s/ns, dev, ino, 0 for the mode, uid,
   * gid, size; each cast to 32 bits). 0, or -errno. `path` must be absolute. */
  createFile(path: string, data: Buffer, length: number, perm: number, sec: number, nsec: number, out: Buffer): number;
  /** A restore's write of one blob from its pack entry: the zlib stream `z` inflated to exactly
   * `size` bytes in `scratch` (behind 32 bytes for its header), hashed as a blob and compared with
   * `oid` (raw, 20 or 32 bytes), then written as createFile writes it. Nothing is created unless
   * the bytes are the blob's. 0, -errno, or a LAY_* code of src/snapshot/lay-worker.ts. */
  layBlob(
    z: Buffer,
    size: number,
    oid: Buffer,
    scratch: Buffer,
    path: string,
    perm: number,
    sec: number,
    nsec: number,
    out: Buffer,
  ): number;
  /** A restore's entries laid as layBlob lays each, without a call per file: those of
   * run[from .. to) whose objects are in `pack`, in order, until the first it does not take (why in
   * result[0]: MANY_* of src/snapshot/lay-worker.ts, which the caller's own path then takes). Where
   * it stopped (`to` when it laid them all). The layout of `run` is in native/xet-native.c.
   * Optional: an older build of the module lacks it. */
  layMany?(
    pack: Buffer,
    packEnd: number,
    packNo: number,
    hashLen: number,
    maxBytes: number,
    run: Buffer[],
    from: number,
    to: number,
    base: Buffer,
    stats: Buffer,
    scratch: Buffer,
    dirMemo: Buffer,
    result: Buffer,
  ): number;
  /** A restore's plain entries laid on `threads` threads of node's pool, with no call from
   * JavaScript per entry: each entry's verdict in `status` (an int32 each: 1 laid with its time
   * and stat block, 2 laid without (a symlink, or nanoseconds -1), 3 left to the caller, 0 not
   * reached), and a failed creation's entry, errno and step in `result`; what no pack holds is
   * read loose from `objects` (a directory ending in a slash; empty: not). Resolves to how many it
   * laid. The layout of `packs` and `columns` is in native/xet-native.c. Optional: an older build
   * of the module lacks it. */
  layAllLater?(
    packs: [Buffer, number, Buffer][],
    hashLen: number,
    maxBytes: number,
    columns: Buffer[],
    base: Buffer,
    stats: Buffer,
    status: Buffer,
    result: Buffer,
    threads: number,
    objects: Buffer,
  ): Promise<number>;
  /** A restore's chunked files written on `threads` threads of node's pool, each from its chunks
   * in the packs and hashed whole: `status` gets an int32 per file (2 laid, 3 left with nothing at
   * its path, 0 not reached). Resolves to how many it laid. Optional: an older build lacks it. */
  layChunkedLater?(
    packs: [Buffer, number, Buffer][],
    hashLen: number,
    maxBytes: number,
    files: [Buffer, number, number, Buffer, Buffer, Buffer][],
    base: Buffer,
    status: Buffer,
    threads: number,
  ): Promise<number>;
  /** The first `size` bytes of the regular file `fd` mapped read only (a Buffer over the mapping,
   * unmapped when collected), or -errno; -EINVAL when the file is shorter, -EFBIG past the largest
   * Buffer node makes (src/git/pack-reader.ts). */
  mapFile?(fd: number, size: number): Buffer | number;
  /** The pages of a mapping mapFile made dropped from this process on a thread of node's pool (a
   * read-only file mapping refaults them if read again); false, doing nothing, for any other
   * Buffer. Optional: an older build lacks it. */
  forgetPagesLater?(mapping: Buffer): Promise<boolean>;
  /** The offset git would print for that time (seconds, 1970-2099) in this process's zone, as
   * hours*100+minutes (-800 for -0800), read as a new git process reads it (ident.ts); 100000
   * when git's own day count fails (a local year past 2099). */
  gitTzOffset?(seconds: number): number;
  /** 0, or the errno of mount("overlay", target, "overlay", ro ? MS_RDONLY : 0, data). */
  mountOverlay(target: string, data: string, readOnly: 0 | 1): number;
  /** How many of `names` (paths under root, each ending in a NUL) were lstat'ed into `out`, 12
   * doubles each (src/git/lstat-many.ts). */
  lstatMany(root: string, names: Buffer, out: Buffer): number;
  /** The same on a thread of node's pool: a Promise of the count (names and out must not be
   * written until it settles). Optional: an older build of the module lacks it. */
  lstatManyLater?(root: string, names: Buffer, out: Buffer): Promise<number>;
  /** 0, or the errno that stopped it: posix_spawn of `file` (absolute) with argv and envp (NUL-ended
   * strings) in cwd ('' for this process's), stdio three new pipes (stdout the open file
   * `stdoutFd` instead, unless -1); `out` (4 int32) gets the pid and this side's ends (stdin,
   * stdout or -1, stderr), close-on-exec (src/git/spawn.ts). */
  spawnPiped(file: string, argv: Buffer, envp: Buffer, cwd: string, stdoutFd: number, out: Buffer): number;
  /** -1 while `pid` runs, else its wait status (reaped), or -2 - errno. */
  waitPid(pid: number): number;
  /** How many of `names` (absolute, NUL-ended) got their mtime from `times` (int64 seconds and
   * nanoseconds each; atime now; a symlink itself) and their lstat after into `out` (8 int64 each:
   * ctime ns, mtime ns, dev, ino, uid, gid, size, nlink); it stops at the first failure. */
  stampMany(names: Buffer, times: Buffer, out: Buffer): number;
  /** The trees of the entries `names` (NUL-ended paths, sorted), `modes` (uint32 each) and `oids`
   * (src/git/tree-builder.ts): how many were written into `arena` and `records`, or -1 (too small:
   * records' first 16 bytes get the sizes), -2 (no digest for hashLen), -3 (a defect), -4 - k (entry k's mode). */
  treesInto(names: Buffer, modes: Buffer, oids: Buffer, hashLen: number, arena: Buffer, records: Buffer): number;
  /** Where an index's entries for `names`, with stat data and ids at `rows` (uint32 each) of `stat`
   * and `oid`, end in the zeroed `dst` written from `at`; -1 when they do not fit or a row is
   * outside (src/git/index-writer.ts). */
  indexEntriesInto(
    names: Buffer,
    rows: Buffer,
    stat: Buffer,
    oid: Buffer,
    hashLen: number,
    version: number,
    dst: Buffer,
    at: number,
  ): number;
  /** The listings of root and every directory below it but the `skip` paths (NUL-ended, relative),
   * any named .git in any case and the subdirectories of one holding a .git, read on two threads
   * (layout: readListings in src/snapshot/walk.ts). */
  readDirs(root: string, skip: Buffer): Buffer;
  /** Where the entries of the git index `index` (the whole file) end, each entry's stat data offset
   * written into `offsets` (int32 each) and, for each of `names` (NUL-ended, sorted by bytes), its
   * stage-0 entry's into `match` (int32, -1 for none); -1 when the index is damaged
   * (src/snapshot/stat-cache.ts). */
  indexMatch(index: Buffer, hashLen: number, names: Buffer, match: Buffer, offsets: Buffer): number;
  /** The paths a re-capture reuses from its stat cache without more thought, decided in one pass
   * (src/snapshot/stat-reuse.ts): how many. Optional: an older build of the module lacks it. */
  reuseUnchanged?(
    rows: Buffer,
    match: Buffer,
    index: Buffer,
    hashLen: number,
    racyFrom: number,
    sizeBelow: number,
    stat: Buffer,
    oid: Buffer,
    slot: Buffer,
    mtimeSec: Buffer,
    nlinkSize: Buffer,
  ): number;
  /** A new inotify descriptor (non-blocking, close-on-exec), or -errno (src/daemon/tree-watch.ts). */
  watchOpen(): number;
  /** The watch descriptor of the directory `dir` (a symlink is not followed), or -errno. */
  watchAdd(fd: number, dir: string, mask: number): number;
  /** Bytes of whole inotify events read into `out`, 0 when none is queued, or -errno. */
  watchRead(fd: number, out: Buffer): number;
  /** 0, or -errno of inotify_rm_watch. */
  watchRemove(fd: number, wd: number): number;
  /** 1 when `fd` has a priority event pending (for /proc/self/mountinfo: the mount table changed
   * since the last call), 0 when not, or -errno. */
  pollPri(fd: number): number;
}

/** Why the native module is not in use, or null when it is. */
export let nativeMissing: string | null = null;

function load(): XetNative | null {
  if (process.env.GIT_XET_NATIVE === '0') {
    nativeMissing = 'GIT_XET_NATIVE=0';
    return null;
  }
  const file = path.join(__dirname, '..', 'native', 'xet-native.node');
  try {
    // A native module loads only through require (process.dlopen underneath).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return require(file) as XetNative;
  } catch (e) {
    nativeMissing = `${file} did not load (${(e as Error).message.split('\n')[0]})`;
    return null;
  }
}

export const native: XetNative | null = load();

/** What node's fs would have thrown for an `errno` the module returned (negated) from `syscall` on
 * `file`, in libuv's words, so callers see one kind of error whichever path ran. */
export function errnoError(errno: number, syscall: string, file: string): NodeJS.ErrnoException {
  const [code, text] = util.getSystemErrorMap().get(-errno) ?? [`errno ${errno}`, 'unknown error'];
  return Object.assign(new Error(`${code}: ${text}, ${syscall} '${file}'`), {
    errno: -errno,
    code,
    syscall,
    path: file,
  });
}
