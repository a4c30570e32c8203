/*
 * git xet's one native module, for the two things node does slowly here:
 * - zlib streams through libdeflate (Debian's libdeflate-dev), which on these machines deflates at
 *   level 1 about 1.8 times and inflates about 2.4 times as fast as the zlib node bundles
 *   (docs/DESIGN-NOTES.md "The native module: libdeflate and mount(2)"). Whole buffers only: a pack entry is
 *   deflated or inflated in one call; streams (files too big to hold) stay with node's zlib.
 * - where Debian's libisal-dev was there at build time (XET_HAVE_ISAL), ISA-L's igzip at its level
 *   1 for the bulk of a large capture: 2.1 times as fast again as libdeflate's level 1 on the bench
 *   tree's files, for 6% more bytes (docs/DESIGN-NOTES.md "A faster deflate for large captures, one
 *   call to read a file, the trailer beside the writes").
 * - reading a capture's files: open, fstat, read, fstat and close in one call per file, where each
 *   of node's fs calls costs ~10 us of its own here (the same section).
 * - lstat of every path of a worktree, for a capture's stat cache: node's lstatSync makes a Stats
 *   object per call, and with a large heap the collector doubles the cost (34k paths: ~350 ms in
 *   node, ~90 ms here on one thread, ~48 ms on two).
 * - setting a restored tree's modification times to the nanosecond (node's utimes stops at the
 *   microsecond) and reading each file's stat data after, in one loop: it was one python3 process
 *   fed through a pipe, ~450 ms for the bench tree's 33,800 files.
 * - mount(2) of an overlay, where spawning mount(8) from a node process of 150 MB costs ~20 ms of
 *   fork and exec, most of a fork through the daemon (docs/DESIGN-NOTES.md "Forks").
 * - starting git with posix_spawn: node's spawn forks, and fork copies the page tables of the whole
 *   process, so each git costs the main thread 5 ms at 40 MB of RSS and 15-20 ms at 250 MB here
 *   (a capture starts ~19); glibc's posix_spawn shares the memory until exec (CLONE_VM|CLONE_VFORK),
 *   at a cost that does not grow with the process (docs/DESIGN-NOTES.md "Spawning git").
 * - a capture's trees and its stat cache's entries: ~3,700 trees over ~34,000 paths on every
 *   capture, in a node process that has compiled nothing yet (~225 ms of JavaScript, ~15 ms here;
 *   docs/DESIGN-NOTES.md "Trees and the stat cache from columns").
 * - reading every directory of a worktree for a capture's walk, on two threads: node's readdir
 *   makes a Dirent object and a string per entry and reads one directory per call
 *   (docs/DESIGN-NOTES.md "The walk's directories read in C").
 * - inotify for the daemon's walk (src/daemon/tree-watch.ts): node's fs.watch reads its events
 *   only when the event loop gets to them and drops an overflow silently, and the walk must know,
 *   at the moment it starts, every directory that changed before (docs/DESIGN-NOTES.md "A daemon
 *   that re-reads only the directories that changed").
 *
 * Built by scripts/build-native.mjs with the system C compiler; src/native.ts loads it, and every
 * caller falls back to node's zlib or mount(8) when it is absent. Written against Node-API, whose functions node
 * exports with a stable ABI across versions, so the handful used here are declared below rather
 * than taken from a header package matching the running node.
 *
 *   deflateInto(src, level, dst, at) -> bytes written at dst[at..], or -1 when they would not fit
 *   deflateBound(n)                  -> the most a zlib stream of n bytes can take
 *   deflateFastInto(src, dst, at)    -> (only when built with ISA-L) like deflateInto through igzip
 *                                       level 1; -1 when the stream would not fit
 *   adler32(buf)                     -> the Adler-32 of buf (libdeflate's, vectorised)
 *   readFile(path, largeAt, deferLinks, big, buf, stat)
 *                                    -> a capture's read of one file (src/git/file-scan.ts readOne):
 *                                       open without following a symlink or blocking on a fifo,
 *                                       fstat into `stat` (READ_STAT int64), read it whole into
 *                                       buf unless linked (deferLinks), at least largeAt or over
 *                                       big, fstat again; the bytes read, -errno, or READ_* below
 *   createFile(path, data, length, perm, sec, nsec, out)
 *                                    -> 0 or -errno (the failed step, STEP_*, in out[0]): a
 *                                       restore's write of one new file (O_EXCL, O_NOFOLLOW),
 *                                       data[0..length) written (whole 16 KiB blocks of zeros
 *                                       left as holes, as git's checkout does), its mtime set to
 *                                       sec.nsec on the descriptor (atime: now; not when nsec is
 *                                       -1), its fstat into out as git's index stat block (40
 *                                       big-endian bytes: ctime, mtime, dev, ino, 0, uid, gid, size)
 *   mapFile(fd, size)                -> the first size bytes of the regular file fd, mapped read only
 *                                       (a Buffer, unmapped when collected), or -errno (-EFBIG past
 *                                       the largest Buffer node makes)
 *   gitTzOffset(seconds)             -> the offset git's datestamp() prints for that time in this
 *                                       process's zone, as hours*100+minutes (-800 is -0800), after
 *                                       tzset() so a changed TZ or /etc/localtime counts, as in a new
 *                                       git process; TZ_OFFSET_UNKNOWN where git's own day count
 *                                       fails (a local year past 2099: git then prints garbage)
 *   layBlob(z, size, oid, scratch, path, perm, sec, nsec, out)
 *                                    -> 0, a LAY_* code or -errno: the zlib stream z inflated to
 *                                       exactly size bytes in scratch, hashed as a blob and
 *                                       compared with oid (20 or 32 raw bytes), then written as
 *                                       createFile writes (nothing is created if it fails first)
 *   inflateInto(src, dst)            -> bytes of src the stream took; dst is filled exactly, else
 *                                       a negative code: -1 bad data, -2 short, -3 too long
 *   mountOverlay(target, data, ro)   -> 0, or the errno of mount("overlay", target, "overlay",
 *                                       ro ? MS_RDONLY : 0, data)
 *   lstatMany(root, names, out)      -> how many of `names` (paths under root, each ending in a NUL)
 *                                       were lstat'ed into `out`, 12 doubles each (STAT_ROW below)
 *   lstatManyLater(root, names, out) -> a Promise of the same count, the lstat done on a thread of
 *                                       node's pool (names and out must not be written until then)
 *   spawnPiped(file, argv, envp, cwd, stdoutFd, out)
 *                                    -> 0, or the errno that stopped it: runs `file` (an absolute
 *                                       path) with argv and envp (each a Buffer of NUL-ended
 *                                       strings) in cwd ('' for this process's), its stdin, stdout
 *                                       and stderr new pipes (stdout the open file stdoutFd
 *                                       instead, when not -1); out (four int32) gets the pid and
 *                                       this side's three ends (-1 for a stdout given)
 *   waitPid(pid)                     -> -1 while it runs, else its wait status (reaped), or
 *                                       -2 - errno
 *   stampMany(names, times, out)     -> how many of `names` (absolute paths, each ending in a NUL)
 *                                       got their mtime from `times` (two int64 each: seconds,
 *                                       nanoseconds; atime: now), without following a symlink,
 *                                       and their lstat afterwards in `out` (STAMP_ROW int64 each);
 *                                       it stops at the first that fails
 *   treesInto(names, modes, oids, hashLen, arena, records)
 *                                    -> the trees of the entries (paths sorted by bytes, each
 *                                       ending in a NUL; a uint32 mode and an id each), written
 *                                       into arena with a record each (see trees_into), or a
 *                                       negative code
 *   indexEntriesInto(names, rows, stat, oid, hashLen, version, dst, at)
 *                                    -> where an index's entries (version 2 or 4) end in dst, or
 *                                       -1 when they would not fit or a row is outside its column
 *   indexMatch(index, hashLen, names, match, offsets)
 *                                    -> where the entries of a git index (version 2-4, the whole
 *                                       file) end, with each entry's offset in offsets (int32) and,
 *                                       for each of `names` (NUL-ended, sorted by bytes), the offset
 *                                       of its stage-0 entry or -1 in match (int32); -1 when the
 *                                       index is damaged
 *   readDirs(root, skip)             -> a new Buffer with the listing of root and of every directory
 *                                       below it (see read_dirs), except those named in skip
 *                                       (NUL-ended paths relative to root), any named .git in any
 *                                       case, and the subdirectories of one that holds a .git
 *   watchOpen()                      -> a new inotify descriptor (non-blocking, close-on-exec), or
 *                                       -errno
 *   watchAdd(fd, dir, mask)          -> the watch descriptor of dir (not followed if a symlink;
 *                                       IN_ONLYDIR), or -errno
 *   watchRead(fd, out)               -> bytes of whole events read into out, 0 when none is queued,
 *                                       or -errno (-EINVAL: out is too small for the next event)
 *   watchRemove(fd, wd)              -> 0, or -errno of inotify_rm_watch
 *   pollPri(fd)                      -> 1 when fd has a priority event pending (POLLPRI or POLLERR:
 *                                       for /proc/self/mountinfo, the mount table changed since the
 *                                       last call), 0 when not, or -errno
 *
 * Each thread (node's main thread, every worker) gets its own compressors and decompressor: libdeflate's
 * are not shared between threads.
 */
#define _GNU_SOURCE /* O_PATH */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <libdeflate.h>
#ifdef XET_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env env, napi_callback_info info);
typedef void (*napi_finalize)(napi_env env, void *data, void *hint);

#define NAPI_OK 0
#define NAPI_AUTO_LENGTH SIZE_MAX

extern napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
extern napi_status napi_get_buffer_info(napi_env, napi_value, void **, size_t *);
extern napi_status napi_get_value_int64(napi_env, napi_value, int64_t *);
extern napi_status napi_get_value_double(napi_env, napi_value, double *);
extern napi_status napi_get_value_string_utf8(napi_env, napi_value, char *, size_t, size_t *);
extern napi_status napi_create_int64(napi_env, int64_t, napi_value *);
extern napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
extern napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
extern napi_status napi_throw_type_error(napi_env, const char *, const char *);
extern napi_status napi_throw_error(napi_env, const char *, const char *);
extern napi_status napi_set_instance_data(napi_env, void *, napi_finalize, void *);
extern napi_status napi_get_instance_data(napi_env, void **);
extern napi_status napi_create_buffer(napi_env, size_t, void **, napi_value *);
extern napi_status napi_create_external_buffer(napi_env, size_t, void *, napi_finalize, void *, napi_value *);
extern napi_status napi_get_and_clear_last_exception(napi_env, napi_value *);
/* For lstatManyLater: work on a thread of node's pool, settled as a Promise. */
typedef struct napi_ref__ *napi_ref;
typedef struct napi_deferred__ *napi_deferred;
typedef struct napi_async_work__ *napi_async_work;
typedef void (*napi_async_execute_callback)(napi_env env, void *data);
typedef void (*napi_async_complete_callback)(napi_env env, napi_status status, void *data);
extern napi_status napi_create_reference(napi_env, napi_value, uint32_t, napi_ref *);
extern napi_status napi_delete_reference(napi_env, napi_ref);
extern napi_status napi_create_async_work(napi_env, napi_value, napi_value, napi_async_execute_callback,
                                          napi_async_complete_callback, void *, napi_async_work *);
extern napi_status napi_delete_async_work(napi_env, napi_async_work);
extern napi_status napi_queue_async_work(napi_env, napi_async_work);
extern napi_status napi_create_promise(napi_env, napi_deferred *, napi_value *);
extern napi_status napi_resolve_deferred(napi_env, napi_deferred, napi_value);
extern napi_status napi_reject_deferred(napi_env, napi_deferred, napi_value);
extern napi_status napi_create_string_utf8(napi_env, const char *, size_t, napi_value *);
extern napi_status napi_create_error(napi_env, napi_value, napi_value, napi_value *);
extern napi_status napi_get_undefined(napi_env, napi_value *);
extern napi_status napi_get_element(napi_env, napi_value, uint32_t, napi_value *);
extern napi_status napi_get_array_length(napi_env, napi_value, uint32_t *);
extern napi_status napi_get_boolean(napi_env, bool, napi_value *);

#define LEVELS 13 /* libdeflate's 0..12 */

struct state {
  struct libdeflate_compressor *c[LEVELS];
  struct libdeflate_decompressor *d;
  /* igzip's level-1 hash table and token buffer (ISAL_DEF_LVL1_DEFAULT bytes), or NULL. */
  uint8_t *isal;
};

static void free_state(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  struct state *s = data;
  for (int i = 0; i < LEVELS; i++)
    if (s->c[i]) libdeflate_free_compressor(s->c[i]);
  if (s->d) libdeflate_free_decompressor(s->d);
  free(s->isal);
  free(s);
}

static struct state *state_of(napi_env env) {
  void *data = NULL;
  if (napi_get_instance_data(env, &data) != NAPI_OK || data == NULL) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: no per-thread state");
    return NULL;
  }
  return data;
}

static napi_value int64(napi_env env, int64_t v) {
  napi_value out;
  if (napi_create_int64(env, v, &out) != NAPI_OK) return NULL;
  return out;
}

/* A Buffer argument, or a thrown TypeError. */
static int buffer_arg(napi_env env, napi_value v, uint8_t **data, size_t *len) {
  void *p = NULL;
  if (napi_get_buffer_info(env, v, &p, len) != NAPI_OK) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "xet native: a Buffer was expected");
    return 0;
  }
  *data = p;
  return 1;
}

static int int_arg(napi_env env, napi_value v, int64_t lo, int64_t hi, int64_t *out) {
  if (napi_get_value_int64(env, v, out) != NAPI_OK || *out < lo || *out > hi) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: an integer argument is out of range");
    return 0;
  }
  return 1;
}

/* The call's arguments, exactly `n` of them, or 0 with a TypeError naming the call's shape. */
static int args_of(napi_env env, napi_callback_info info, size_t n, napi_value *argv, const char *usage) {
  size_t argc = n;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != NAPI_OK || argc != n) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_COUNT", usage);
    return 0;
  }
  return 1;
}

/* How many NUL-ended names a buffer holds. */
static size_t count_names(const uint8_t *names, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) n += names[i] == 0;
  return n;
}

/* A Buffer of names each ending in a NUL (the last one too), or 0 with a TypeError. */
static int nul_ended(napi_env env, const uint8_t *names, size_t len) {
  if (len > 0 && names[len - 1] != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: every name must end in a NUL");
    return 0;
  }
  return 1;
}

static napi_value deflate_into(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!args_of(env, info, 4, argv, "deflateInto(src, level, dst, at)")) return NULL;
  uint8_t *src, *dst;
  size_t src_len, dst_len;
  int64_t level, at;
  if (!buffer_arg(env, argv[0], &src, &src_len) || !int_arg(env, argv[1], 0, LEVELS - 1, &level) ||
      !buffer_arg(env, argv[2], &dst, &dst_len) || !int_arg(env, argv[3], 0, (int64_t)dst_len, &at))
    return NULL;
  struct state *s = state_of(env);
  if (!s) return NULL;
  if (!s->c[level]) {
    s->c[level] = libdeflate_alloc_compressor((int)level);
    if (!s->c[level]) {
      napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
      return NULL;
    }
  }
  size_t n = libdeflate_zlib_compress(s->c[level], src, src_len, dst + at, dst_len - (size_t)at);
  return int64(env, n == 0 ? -1 : (int64_t)n);
}

static napi_value deflate_bound(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t n;
  if (!args_of(env, info, 1, argv, "deflateBound(n)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT64_C(1) << 40, &n)) return NULL;
  /* Any level: NULL asks for the bound of every compressor. */
  return int64(env, (int64_t)libdeflate_zlib_compress_bound(NULL, (size_t)n));
}

#ifdef XET_HAVE_ISAL
static napi_value deflate_fast_into(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!args_of(env, info, 3, argv, "deflateFastInto(src, dst, at)")) return NULL;
  uint8_t *src, *dst;
  size_t src_len, dst_len;
  int64_t at;
  if (!buffer_arg(env, argv[0], &src, &src_len) || !buffer_arg(env, argv[1], &dst, &dst_len) ||
      !int_arg(env, argv[2], 0, (int64_t)dst_len, &at))
    return NULL;
  struct state *s = state_of(env);
  if (!s) return NULL;
  if (!s->isal) {
    s->isal = malloc(ISAL_DEF_LVL1_DEFAULT);
    if (!s->isal) {
      napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
      return NULL;
    }
  }
  size_t room = dst_len - (size_t)at;
  /* igzip counts in 32 bits; the caller deflates anything larger another way. */
  if (src_len > UINT32_MAX || room > UINT32_MAX) return int64(env, -1);
  /* The hash table cleared for every stream: igzip would otherwise start from whatever the last
   * one (or malloc) left there, and the same bytes would not always deflate to the same stream. */
  memset(s->isal, 0, ISAL_DEF_LVL1_REQ);
  struct isal_zstream z;
  isal_deflate_stateless_init(&z);
  z.level = 1;
  z.level_buf = s->isal;
  z.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
  z.gzip_flag = IGZIP_ZLIB;
  z.end_of_stream = 1;
  z.flush = NO_FLUSH;
  z.next_in = src;
  z.avail_in = (uint32_t)src_len;
  z.next_out = dst + at;
  z.avail_out = (uint32_t)room;
  if (isal_deflate_stateless(&z) != COMP_OK || z.avail_in != 0) return int64(env, -1);
  return int64(env, (int64_t)z.total_out);
}
#endif

static napi_value adler32_of(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!args_of(env, info, 1, argv, "adler32(buf)")) return NULL;
  uint8_t *src;
  size_t len;
  if (!buffer_arg(env, argv[0], &src, &len)) return NULL;
  return int64(env, (int64_t)libdeflate_adler32(1, src, len));
}

/* readFile's results other than a length (an open that failed returns -errno). */
#define READ_NOT_FILE (-1000) /* not a regular file (stat filled) */
#define READ_UNREAD (-1001)   /* not read: linked (deferLinks), at least largeAt, or over `big` (stat filled) */
#define READ_ROOM (-1002)     /* buf is smaller than the file's size + 1 (stat filled) */
#define READ_CHANGED (-1003)  /* its size or times moved while it was read, or it was not its size */
#define READ_TIME_RANGE (-1004) /* a time int64 nanoseconds cannot hold (before 1677, after 2262): node's fs reads it */
#define READ_STAT 9           /* dev, ino, mode, nlink, uid, gid, size, mtime ns, ctime ns */

static char *string_arg(napi_env env, napi_value v);

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/* Whether ns_of(t) holds t: a time past 2262-04-11 (a `touch -d 2300-01-01`) would wrap around. */
static int ns_fits(struct timespec t) {
  return t.tv_sec > INT64_MIN / 1000000000 + 1 && t.tv_sec < INT64_MAX / 1000000000 - 1;
}

static void stat_into(const struct stat *st, int64_t *out) {
  out[0] = (int64_t)st->st_dev;
  out[1] = (int64_t)st->st_ino;
  out[2] = st->st_mode;
  out[3] = (int64_t)st->st_nlink;
  out[4] = st->st_uid;
  out[5] = st->st_gid;
  out[6] = st->st_size;
  out[7] = ns_of(st->st_mtim);
  out[8] = ns_of(st->st_ctim);
}

/*
 * A capture reads ~34,000 files of a few KiB each, six system calls apiece: through node's fs each
 * call costs ~10 us of its own (a request object, a BigInt stat object), about as much as hashing
 * and deflating the file; here the six cost what the kernel takes.
 */
static napi_value read_file(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  if (!args_of(env, info, 6, argv, "readFile(path, largeAt, deferLinks, big, buf, stat)")) return NULL;
  int64_t large_at, defer_links, big;
  uint8_t *buf, *stat_out;
  size_t buf_len, stat_len;
  if (!int_arg(env, argv[1], 0, INT64_C(1) << 50, &large_at) || !int_arg(env, argv[2], 0, 1, &defer_links) ||
      !int_arg(env, argv[3], 0, INT64_C(1) << 50, &big) || !buffer_arg(env, argv[4], &buf, &buf_len) ||
      !buffer_arg(env, argv[5], &stat_out, &stat_len))
    return NULL;
  if (stat_len < READ_STAT * sizeof(int64_t) || ((uintptr_t)stat_out & 7) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: stat needs 72 aligned bytes");
    return NULL;
  }
  char *file = string_arg(env, argv[0]);
  if (!file) return NULL;
  int64_t *out = (int64_t *)stat_out;
  int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  int err = errno;
  free(file);
  if (fd < 0) return int64(env, -(int64_t)err);
  struct stat st, after;
  int64_t result;
  if (fstat(fd, &st) != 0) {
    result = -(int64_t)errno;
    goto done;
  }
  stat_into(&st, out);
  if (!ns_fits(st.st_mtim) || !ns_fits(st.st_ctim)) {
    result = READ_TIME_RANGE;
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    result = READ_NOT_FILE;
    goto done;
  }
  if ((defer_links && st.st_nlink > 1) || (large_at > 0 && st.st_size >= large_at) || st.st_size > big) {
    result = READ_UNREAD;
    goto done;
  }
  /* One byte past the size is asked for: a file that holds more than fstat said (grown since, or
   * one whose size says 0, as in procfs) gives it. A read that stops at the size is the end of the
   * file, as git takes it (it reads st_size bytes): no second read to see 0, which was a system
   * call per file; a file that grows after that read has another size or time at the fstat below. */
  size_t limit = (size_t)st.st_size + 1;
  if (buf_len < limit) {
    result = READ_ROOM;
    goto done;
  }
  size_t n = 0;
  while (n < limit) {
    ssize_t got = read(fd, buf + n, limit - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      result = -(int64_t)errno;
      goto done;
    }
    if (got == 0) break;
    n += (size_t)got;
    if (n == (size_t)st.st_size) break;
  }
  if (fstat(fd, &after) != 0) {
    result = -(int64_t)errno;
    goto done;
  }
  if (n != (size_t)st.st_size || after.st_size != st.st_size || ns_of(after.st_mtim) != ns_of(st.st_mtim) ||
      ns_of(after.st_ctim) != ns_of(st.st_ctim)) {
    result = READ_CHANGED;
    goto done;
  }
  result = (int64_t)n;
done:
  close(fd);
  return int64(env, result);
}

/* Big-endian 32 bits at p: git's index stores every stat field so. */
static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static uint32_t be32_at(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

#define CREATE_STAT 40 /* bytes of git's index stat block (ctime .. size), the mode's 4 left zero */

#define HOLE_BLOCK 16384 /* git's stream_blob_to_fd: a whole block of zeros is skipped, not written */

/* Which step of create_stamped failed, in out[0] (the stat block is not written then). */
enum { STEP_OPEN = 1, STEP_WRITE = 2, STEP_TIMES = 3, STEP_STAT = 4, STEP_CLOSE = 5 };

/* Whether p[0..n) is all zeros (stops at the first byte that is not: cheap on ordinary data). */
static int all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* data[0..length) written to fd from offset 0, leaving a hole for every whole block of HOLE_BLOCK
 * zeros as git's checkout does (stream_blob_to_fd): a mostly empty file (a disk image, a sparse
 * database) takes its data's blocks, not its length. A file that ends in a hole gets its last
 * byte written, as git's does. 0 or -errno. */
/* data[0..length) written to fd at offset `off` (a multiple of HOLE_BLOCK: blocks are counted
 * from the file's start), each whole block of zeros left a hole. 0 or -errno; *hole_at_end says
 * whether its last block was one. */
static int64_t write_sparse_at(int fd, const uint8_t *data, size_t length, size_t off, int *hole_at_end) {
  size_t at = 0;
  *hole_at_end = 0;
  while (at < length) {
    size_t n = length - at < HOLE_BLOCK ? length - at : HOLE_BLOCK;
    if (n == HOLE_BLOCK && all_zero(data + at, n)) {
      at += n;
      *hole_at_end = 1;
      continue;
    }
    *hole_at_end = 0;
    size_t put_all = 0;
    /* Runs of blocks that are not holes go out in one write: a file of no zero block is one call. */
    size_t run = n;
    while (at + run < length) {
      size_t m = length - at - run < HOLE_BLOCK ? length - at - run : HOLE_BLOCK;
      if (m == HOLE_BLOCK && all_zero(data + at + run, m)) break;
      run += m;
    }
    while (put_all < run) {
      ssize_t put = pwrite(fd, data + at + put_all, run - put_all, (off_t)(off + at + put_all));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) return -(int64_t)errno;
      put_all += (size_t)put;
    }
    at += run;
  }
  return 0;
}

/* A file that ends in a hole gets its last byte written (a zero), as git does, which gives it its
 * length. 0 or -errno. */
static int64_t end_sparse(int fd, size_t length) {
  ssize_t put;
  do
    put = pwrite(fd, "", 1, (off_t)length - 1);
  while (put < 0 && errno == EINTR);
  return put == 1 ? 0 : put < 0 ? -(int64_t)errno : -EIO;
}

static int64_t write_sparse(int fd, const uint8_t *data, size_t length) {
  int hole_at_end;
  int64_t r = write_sparse_at(fd, data, length, 0, &hole_at_end);
  return r == 0 && hole_at_end ? end_sparse(fd, length) : r;
}

/* A restore's write of one file (src/snapshot/lay-worker.ts): created new (O_EXCL, never through
 * a symlink at its last component: the caller made and checked every directory above it), its
 * bytes written (holes where git's checkout leaves them), its mtime set on the open descriptor
 * (atime: now) unless nsec is -1 (a hard-link group's file, whose ctime its links will move:
 * stamped later), and its fstat afterwards written as git's index holds it (fill_stat_data: each
 * field cast to 32 bits, big-endian). One call where node took six (open, write, close, then
 * utimensat and lstat by path on another thread). 0, or -errno with the failed STEP_* in out[0]. */
static int64_t create_stamped_at(int dir, const char *file, const uint8_t *data, size_t length, int64_t perm,
                                 int64_t sec, int64_t nsec, uint8_t *out);
static int64_t create_stamped(const char *file, const uint8_t *data, size_t length, int64_t perm, int64_t sec,
                              int64_t nsec, uint8_t *out) {
  /* A relative name would be taken from this process's directory: absolute only. */
  if (file[0] != '/') {
    out[0] = STEP_OPEN;
    return -EINVAL;
  }
  return create_stamped_at(AT_FDCWD, file, data, length, perm, sec, nsec, out);
}

/* create_stamped of `file` in the directory open as `dir` (a name in it: the native pass holds its
 * directory open rather than have the kernel walk the whole path for each file). */
static int64_t create_stamped_at(int dir, const char *file, const uint8_t *data, size_t length, int64_t perm,
                                 int64_t sec, int64_t nsec, uint8_t *out) {
  int fd = openat(dir, file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)perm);
  if (fd < 0) {
    out[0] = STEP_OPEN;
    return -(int64_t)errno;
  }
  int64_t result = write_sparse(fd, data, length);
  int step = STEP_WRITE;
  if (result != 0) goto done;
  if (nsec >= 0) {
    struct timespec ts[2];
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_NOW;
    ts[1].tv_sec = (time_t)sec;
    ts[1].tv_nsec = (long)nsec;
    if (futimens(fd, ts) != 0) {
      result = -(int64_t)errno;
      step = STEP_TIMES;
      goto done;
    }
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    result = -(int64_t)errno;
    step = STEP_STAT;
    goto done;
  }
  put_be32(out, (uint32_t)st.st_ctim.tv_sec);
  put_be32(out + 4, (uint32_t)st.st_ctim.tv_nsec);
  put_be32(out + 8, (uint32_t)st.st_mtim.tv_sec);
  put_be32(out + 12, (uint32_t)st.st_mtim.tv_nsec);
  put_be32(out + 16, (uint32_t)st.st_dev);
  put_be32(out + 20, (uint32_t)st.st_ino);
  put_be32(out + 24, 0);
  put_be32(out + 28, (uint32_t)st.st_uid);
  put_be32(out + 32, (uint32_t)st.st_gid);
  put_be32(out + 36, (uint32_t)st.st_size);
done:
  if (close(fd) != 0 && result == 0 && errno != EINTR) {
    result = -(int64_t)errno;
    step = STEP_CLOSE;
  }
  if (result != 0) out[0] = (uint8_t)step;
  return result;
}

/* The arguments createFile and layBlob share at their end: path, perm, sec, nsec, out. */
static char *file_args(napi_env env, napi_value *argv, int64_t *perm, int64_t *sec, int64_t *nsec, uint8_t **out) {
  size_t out_len;
  if (!int_arg(env, argv[1], 0, 07777, perm) || !int_arg(env, argv[2], INT64_MIN, INT64_MAX, sec) ||
      !int_arg(env, argv[3], -1, 999999999, nsec) || !buffer_arg(env, argv[4], out, &out_len))
    return NULL;
  if (out_len < CREATE_STAT) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: out needs 40 bytes");
    return NULL;
  }
  return string_arg(env, argv[0]);
}

static napi_value create_file(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  if (!args_of(env, info, 7, argv, "createFile(path, data, length, perm, sec, nsec, out)")) return NULL;
  uint8_t *data, *out;
  size_t data_len;
  int64_t length, perm, sec, nsec;
  if (!buffer_arg(env, argv[1], &data, &data_len) || !int_arg(env, argv[2], 0, INT64_C(1) << 50, &length)) return NULL;
  if ((size_t)length > data_len) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: length beyond data");
    return NULL;
  }
  napi_value rest[5] = {argv[0], argv[3], argv[4], argv[5], argv[6]};
  char *file = file_args(env, rest, &perm, &sec, &nsec, &out);
  if (!file) return NULL;
  int64_t r = create_stamped(file, data, (size_t)length, perm, sec, nsec, out);
  free(file);
  return int64(env, r);
}

static napi_value inflate_into(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!args_of(env, info, 2, argv, "inflateInto(src, dst)")) return NULL;
  uint8_t *src, *dst;
  size_t src_len, dst_len;
  if (!buffer_arg(env, argv[0], &src, &src_len) || !buffer_arg(env, argv[1], &dst, &dst_len)) return NULL;
  struct state *s = state_of(env);
  if (!s) return NULL;
  if (!s->d) {
    s->d = libdeflate_alloc_decompressor();
    if (!s->d) {
      napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
      return NULL;
    }
  }
  size_t in_used = 0, out_made = 0;
  enum libdeflate_result r = libdeflate_zlib_decompress_ex(s->d, src, src_len, dst, dst_len, &in_used, &out_made);
  if (r == LIBDEFLATE_SUCCESS && out_made == dst_len) return int64(env, (int64_t)in_used);
  if (r == LIBDEFLATE_SUCCESS) return int64(env, -2);
  if (r == LIBDEFLATE_INSUFFICIENT_SPACE) return int64(env, -3);
  return int64(env, -1);
}

/* A string argument in a malloc'd buffer (the caller frees it), or NULL with a TypeError thrown. */
static char *string_arg(napi_env env, napi_value v) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != NAPI_OK) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "xet native: a string was expected");
    return NULL;
  }
  char *s = malloc(len + 1);
  if (!s) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  size_t got = 0;
  /* A NUL inside would end the C string early: a path other than the one asked for. */
  if (napi_get_value_string_utf8(env, v, s, len + 1, &got) != NAPI_OK || got != len || strlen(s) != len) {
    free(s);
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a string without NUL was expected");
    return NULL;
  }
  return s;
}

static napi_value mount_overlay(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  int64_t ro;
  if (!args_of(env, info, 3, argv, "mountOverlay(target, data, readOnly)")) return NULL;
  if (!int_arg(env, argv[2], 0, 1, &ro)) return NULL;
  char *target = string_arg(env, argv[0]);
  if (!target) return NULL;
  char *data = string_arg(env, argv[1]);
  if (!data) {
    free(target);
    return NULL;
  }
  int r = mount("overlay", target, "overlay", ro ? MS_RDONLY : 0, data);
  int err = r == 0 ? 0 : errno;
  free(target);
  free(data);
  return int64(env, err);
}

/* lstatMany's row: errno (0: the fields hold), mode, size, nlink, ino, dev, uid, gid, mtime s, mtime
 * ns, ctime s, ctime ns. A size or inode number past 2^53 (which a double cannot hold exactly) is -1,
 * never equal to a recorded one. Kept in step with src/git/lstat-many.ts. */
#define STAT_ROW 12
#define LSTAT_SPLIT 2048

static double exact(uint64_t v) { return v <= (UINT64_C(1) << 53) ? (double)v : -1; }

static void stat_row(double *row, const struct stat *st) {
  row[0] = 0;
  row[1] = st->st_mode;
  row[2] = st->st_size < 0 ? -1 : exact((uint64_t)st->st_size);
  row[3] = (double)st->st_nlink;
  row[4] = exact((uint64_t)st->st_ino);
  row[5] = exact((uint64_t)st->st_dev);
  row[6] = st->st_uid;
  row[7] = st->st_gid;
  row[8] = (double)st->st_mtim.tv_sec;
  row[9] = (double)st->st_mtim.tv_nsec;
  row[10] = (double)st->st_ctim.tv_sec;
  row[11] = (double)st->st_ctim.tv_nsec;
}

static void error_row(double *row, int err) {
  row[0] = err;
  for (int k = 1; k < STAT_ROW; k++) row[k] = 0;
}

/* One thread's share of lstatMany: the names in [from, to) of the buffer, rows from `first`. */
struct lstat_part {
  int root;
  const char *names;
  size_t from, to, first;
  double *out;
};

/* Each name is looked up whole from the root. (Looking names up from their directory, opened once
 * for the run of names in it, measured the same here: the kernel's walk of the cached path is
 * cheap next to the system call itself.) */
static void *lstat_part_run(void *arg) {
  struct lstat_part *p = arg;
  size_t at = p->from, k = p->first;
  while (at < p->to) {
    const char *name = p->names + at;
    double *row = p->out + k * STAT_ROW;
    struct stat st;
    /* An empty name would be the root itself (AT_EMPTY_PATH is not passed: it fails, ENOENT). */
    if (fstatat(p->root, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      error_row(row, errno);
    else
      stat_row(row, &st);
    at += strlen(name) + 1;
    k++;
  }
  return NULL;
}

/* lstat of the first `rows` names into out, on two threads from LSTAT_SPLIT names on: a system call
 * costs ~3 us in this VM, and the second half runs on another core while this thread does the
 * first. How many names have a row. */
static size_t lstat_rows(int dir, const char *names, size_t names_len, double *out, size_t rows) {
  size_t count = 0, end = 0;
  while (end < names_len && count < rows) {
    end += strlen(names + end) + 1;
    count++;
  }
  struct lstat_part parts[2] = {{dir, names, 0, end, 0, out}, {dir, names, end, end, count, out}};
  pthread_t helper;
  int split = 0;
  if (count >= LSTAT_SPLIT) {
    size_t half = count / 2, at = 0;
    for (size_t k = 0; k < half; k++) at += strlen(names + at) + 1;
    parts[0].to = at;
    parts[1].from = at;
    parts[1].first = half;
    split = pthread_create(&helper, NULL, lstat_part_run, &parts[1]) == 0;
    if (!split) parts[0].to = end; /* no thread: this one does all */
  }
  lstat_part_run(&parts[0]);
  if (split) pthread_join(helper, NULL);
  return count;
}

/* lstat_rows under the directory `root` names: 0 with the count in *count, or the errno of opening
 * it. */
static int lstat_under(const char *root, const char *names, size_t names_len, double *out, size_t rows, size_t *count) {
  int dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return errno;
  *count = lstat_rows(dir, names, names_len, out, rows);
  close(dir);
  return 0;
}

/* The arguments both lstat calls take: names NUL-ended, out 8-byte aligned. 0 when one is wrong (a
 * JavaScript exception is pending). */
static int lstat_args(napi_env env, napi_value *argv, uint8_t **names, size_t *names_len, uint8_t **outb,
                      size_t *out_len) {
  if (!buffer_arg(env, argv[1], names, names_len) || !buffer_arg(env, argv[2], outb, out_len)) return 0;
  if (((uintptr_t)*outb & 7) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: out must be 8-byte aligned");
    return 0;
  }
  return nul_ended(env, *names, *names_len);
}

static napi_value lstat_many(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint8_t *names, *outb;
  size_t names_len, out_len;
  if (!args_of(env, info, 3, argv, "lstatMany(root, names, out)")) return NULL;
  if (!lstat_args(env, argv, &names, &names_len, &outb, &out_len)) return NULL;
  char *root = string_arg(env, argv[0]);
  if (!root) return NULL;
  size_t count = 0;
  int err = lstat_under(root, (const char *)names, names_len, (double *)outb, out_len / (STAT_ROW * sizeof(double)), &count);
  free(root);
  if (err) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: lstatMany could not open its root directory");
    return NULL;
  }
  return int64(env, (int64_t)count);
}

/* lstatManyLater: the same lstat on a thread of node's pool, settled on the main thread. The two
 * Buffers are held by references until then (the caller must not write them meanwhile). */
struct lstat_job {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref names_ref, out_ref;
  char *root;
  const char *names;
  double *out;
  size_t names_len, rows, count;
  int err;
};

static void lstat_job_run(napi_env env, void *data) {
  (void)env;
  struct lstat_job *j = data;
  j->err = lstat_under(j->root, j->names, j->names_len, j->out, j->rows, &j->count);
}

static void lstat_job_free(napi_env env, struct lstat_job *j) {
  if (j->names_ref) napi_delete_reference(env, j->names_ref);
  if (j->out_ref) napi_delete_reference(env, j->out_ref);
  if (j->work) napi_delete_async_work(env, j->work);
  free(j->root);
  free(j);
}

static void lstat_job_done(napi_env env, napi_status status, void *data) {
  struct lstat_job *j = data;
  napi_value v = NULL;
  if (status == NAPI_OK && j->err == 0 && napi_create_int64(env, (int64_t)j->count, &v) == NAPI_OK) {
    napi_resolve_deferred(env, j->deferred, v);
  } else {
    /* Always settled (a capture awaits it): with an Error when one can be made, else undefined. */
    napi_value msg;
    char text[128];
    snprintf(text, sizeof text, "xet native: lstatManyLater could not %s (errno %d)",
             j->err ? "open its root directory" : "run", j->err);
    v = NULL;
    if (napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &msg) != NAPI_OK || napi_create_error(env, NULL, msg, &v) != NAPI_OK)
      napi_get_undefined(env, &v);
    napi_reject_deferred(env, j->deferred, v);
  }
  lstat_job_free(env, j);
}

static napi_value lstat_many_later(napi_env env, napi_callback_info info) {
  napi_value argv[3], promise, name;
  uint8_t *names, *outb;
  size_t names_len, out_len;
  if (!args_of(env, info, 3, argv, "lstatManyLater(root, names, out)")) return NULL;
  if (!lstat_args(env, argv, &names, &names_len, &outb, &out_len)) return NULL;
  struct lstat_job *j = calloc(1, sizeof *j);
  if (!j) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  j->root = string_arg(env, argv[0]);
  if (!j->root) {
    free(j);
    return NULL;
  }
  j->names = (const char *)names;
  j->names_len = names_len;
  j->out = (double *)outb;
  j->rows = out_len / (STAT_ROW * sizeof(double));
  if (napi_create_reference(env, argv[1], 1, &j->names_ref) != NAPI_OK ||
      napi_create_reference(env, argv[2], 1, &j->out_ref) != NAPI_OK ||
      napi_create_string_utf8(env, "xet lstatManyLater", NAPI_AUTO_LENGTH, &name) != NAPI_OK ||
      napi_create_async_work(env, NULL, name, lstat_job_run, lstat_job_done, j, &j->work) != NAPI_OK ||
      napi_create_promise(env, &j->deferred, &promise) != NAPI_OK || napi_queue_async_work(env, j->work) != NAPI_OK) {
    /* A promise made but never queued is left pending; the exception is what the caller sees. */
    lstat_job_free(env, j);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: lstatManyLater could not start");
    return NULL;
  }
  return promise;
}

/* A Buffer of NUL-ended strings as a NULL-ended array pointing into it (the Buffer must outlive
 * it), or NULL (out of memory, or a last string without its NUL). */
static char **string_list(uint8_t *data, size_t len) {
  if (len > 0 && data[len - 1] != 0) return NULL;
  size_t n = count_names(data, len);
  char **list = calloc(n + 1, sizeof *list);
  if (!list) return NULL;
  size_t k = 0, at = 0;
  while (at < len) {
    list[k++] = (char *)data + at;
    at += strlen((char *)data + at) + 1;
  }
  list[k] = NULL;
  return list;
}

/* A pipe whose two ends are close-on-exec and above 2: dup2 onto 0-2 in the child then clears the
 * flag on the copy only (an end that already were fd 1 would keep it, and vanish at exec). */
static int high_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return errno;
  for (int i = 0; i < 2; i++) {
    if (fds[i] > 2) continue;
    int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
    int err = errno;
    close(fds[i]);
    if (moved < 0) {
      close(fds[1 - i]);
      return err;
    }
    fds[i] = moved;
  }
  return 0;
}

static napi_value spawn_piped(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  uint8_t *args_b, *env_b, *out_b;
  size_t args_len, env_len, out_len;
  int64_t stdout_fd;
  if (!args_of(env, info, 6, argv, "spawnPiped(file, argv, envp, cwd, stdoutFd, out)")) return NULL;
  if (!buffer_arg(env, argv[1], &args_b, &args_len) || !buffer_arg(env, argv[2], &env_b, &env_len) ||
      !int_arg(env, argv[4], -1, INT32_MAX, &stdout_fd) || !buffer_arg(env, argv[5], &out_b, &out_len))
    return NULL;
  if (out_len < 4 * sizeof(int32_t) || ((uintptr_t)out_b & 3) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: out must be 16 aligned bytes");
    return NULL;
  }
  char *file = string_arg(env, argv[0]);
  if (!file) return NULL;
  char *cwd = string_arg(env, argv[3]);
  if (!cwd) {
    free(file);
    return NULL;
  }
  char **args = string_list(args_b, args_len);
  char **envp = string_list(env_b, env_len);
  int err = 0;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  int have_fa = 0, have_attr = 0;
  pid_t pid = -1;
  if (!args || !envp || !args[0]) {
    err = EINVAL;
    goto done;
  }
  if ((err = high_pipe(in)) || (stdout_fd < 0 && (err = high_pipe(out))) || (err = high_pipe(errp))) goto done;
  if ((err = posix_spawn_file_actions_init(&fa))) goto done;
  have_fa = 1;
  if ((err = posix_spawn_file_actions_adddup2(&fa, in[0], 0)) ||
      (err = posix_spawn_file_actions_adddup2(&fa, stdout_fd < 0 ? out[1] : (int)stdout_fd, 1)) ||
      (err = posix_spawn_file_actions_adddup2(&fa, errp[1], 2)))
    goto done;
  if (cwd[0] && (err = posix_spawn_file_actions_addchdir_np(&fa, cwd))) goto done;
  if ((err = posix_spawnattr_init(&attr))) goto done;
  have_attr = 1;
  /* As libuv does for node's spawn: every signal back to its default (node ignores SIGPIPE, and an
   * ignored signal stays ignored across exec) and none blocked. */
  sigset_t all, none;
  /* Every bit, not sigfillset: glibc's leaves out its two internal signals (32 and 33), and its
   * spawn helper then sets those to SIG_IGN in the child, which exec keeps. */
  memset(&all, 0xff, sizeof all);
  sigemptyset(&none);
  if ((err = posix_spawnattr_setsigdefault(&attr, &all)) || (err = posix_spawnattr_setsigmask(&attr, &none)) ||
      (err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)))
    goto done;
  err = posix_spawn(&pid, file, &fa, &attr, args, envp);
done:
  if (have_fa) posix_spawn_file_actions_destroy(&fa);
  if (have_attr) posix_spawnattr_destroy(&attr);
  /* The child's ends are the child's now (or nobody's, on failure). */
  if (in[0] >= 0) close(in[0]);
  if (out[1] >= 0) close(out[1]);
  if (errp[1] >= 0) close(errp[1]);
  if (err) {
    if (in[1] >= 0) close(in[1]);
    if (out[0] >= 0) close(out[0]);
    if (errp[0] >= 0) close(errp[0]);
  } else {
    int32_t *o = (int32_t *)out_b;
    o[0] = (int32_t)pid;
    o[1] = in[1];
    o[2] = out[0];
    o[3] = errp[0];
  }
  free(args);
  free(envp);
  free(file);
  free(cwd);
  return int64(env, err);
}

static napi_value wait_pid(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t pid;
  if (!args_of(env, info, 1, argv, "waitPid(pid)")) return NULL;
  if (!int_arg(env, argv[0], 1, INT32_MAX, &pid)) return NULL;
  int status = 0;
  pid_t r;
  do
    r = waitpid((pid_t)pid, &status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return int64(env, -1);
  if (r < 0) return int64(env, -2 - errno);
  return int64(env, status);
}

/* stampMany's row, the python stamper's record it replaces (src/snapshot/set-times.ts): ctime ns,
 * mtime ns, dev, ino, uid, gid, size, nlink, each a little-endian int64. */
#define STAMP_ROW 8

static napi_value stamp_many(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint8_t *names, *times_b, *outb;
  size_t names_len, times_len, out_len;
  if (!args_of(env, info, 3, argv, "stampMany(names, times, out)")) return NULL;
  if (!buffer_arg(env, argv[0], &names, &names_len) || !buffer_arg(env, argv[1], &times_b, &times_len) ||
      !buffer_arg(env, argv[2], &outb, &out_len))
    return NULL;
  if ((((uintptr_t)outb | (uintptr_t)times_b) & 7) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: times and out must be 8-byte aligned");
    return NULL;
  }
  if (!nul_ended(env, names, names_len)) return NULL;
  const int64_t *times = (const int64_t *)times_b;
  int64_t *out = (int64_t *)outb;
  size_t rows = out_len / (STAMP_ROW * sizeof(int64_t));
  size_t have = times_len / (2 * sizeof(int64_t));
  if (have < rows) rows = have;
  size_t count = 0, at = 0;
  while (at < names_len && count < rows) {
    const char *name = (const char *)names + at;
    struct timespec ts[2];
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_NOW;
    ts[1].tv_sec = (time_t)times[2 * count];
    ts[1].tv_nsec = (long)times[2 * count + 1];
    struct stat st;
    /* A relative name would be taken from this process's directory: absolute only. */
    if (name[0] != '/' || ts[1].tv_nsec < 0 || ts[1].tv_nsec > 999999999 ||
        utimensat(AT_FDCWD, name, ts, AT_SYMLINK_NOFOLLOW) != 0 || fstatat(AT_FDCWD, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !ns_fits(st.st_ctim) || !ns_fits(st.st_mtim)) /* a row could not hold them: the caller's fallback sets them */
      break;
    int64_t *row = out + count * STAMP_ROW;
    row[0] = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    row[1] = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    row[2] = (int64_t)st.st_dev;
    row[3] = (int64_t)st.st_ino;
    row[4] = (int64_t)st.st_uid;
    row[5] = (int64_t)st.st_gid;
    row[6] = (int64_t)st.st_size;
    row[7] = (int64_t)st.st_nlink;
    at += strlen(name) + 1;
    count++;
  }
  return int64(env, (int64_t)count);
}

/* ---- trees and an index's entries, from columns (src/git/tree-builder.ts, index-writer.ts) ---- */

/* OpenSSL's one-shot SHA-1 and SHA-256, from the node binary that loaded this module (node exports
 * its OpenSSL; a node linked to the system's libcrypto has them from there). Looked up when first
 * used, not linked: where they are missing, treesInto says so and the caller builds the trees in
 * JavaScript. (The low-level SHA1_Init/Update/Final calls measured the same for the bench tree's
 * 3,700 trees, and need the size of OpenSSL's context.) */
typedef unsigned char *(*digest_fn)(const unsigned char *, size_t, unsigned char *);
static digest_fn sha1_fn, sha256_fn;
static pthread_once_t digests_once = PTHREAD_ONCE_INIT;
static void look_up_digests(void) {
  sha1_fn = (digest_fn)dlsym(RTLD_DEFAULT, "SHA1");
  sha256_fn = (digest_fn)dlsym(RTLD_DEFAULT, "SHA256");
}
/* Worker threads call this at once (layBlob): the lookup runs once, and every caller sees it done. */
static digest_fn digest_of(size_t hash_len) {
  pthread_once(&digests_once, look_up_digests);
  return hash_len == 20 ? sha1_fn : hash_len == 32 ? sha256_fn : NULL;
}

#define LAY_BAD_STREAM (-1001) /* z does not inflate to exactly `size` bytes (or fails its adler32) */
#define LAY_HASH (-1002)       /* the blob's bytes do not hash to `oid` */
#define LAY_ROOM (-1003)       /* scratch is smaller than the header and `size` */
#define LAY_NO_DIGEST (-1004)  /* no SHA-1/SHA-256 of this length in the process */
#define LAY_HEADER_ROOM 32     /* "blob <size>\0" is written before the bytes, hashed with them */
static size_t shared_prefix(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len);

/* The blob `oid` (hash_len bytes) from its zlib stream z: inflated into scratch behind its
 * "blob <size>\0" header (scratch holds LAY_HEADER_ROOM + size bytes; the caller checked), the whole
 * hashed and compared with oid. The header's length (the bytes start there), or LAY_BAD_STREAM
 * (z does not inflate to exactly `size` bytes, or fails its adler32) or LAY_HASH. */
static int inflate_blob(struct libdeflate_decompressor *d, digest_fn digest, const uint8_t *z, size_t z_len,
                        size_t size, const uint8_t *oid, size_t hash_len, uint8_t *scratch) {
  int head = snprintf((char *)scratch, LAY_HEADER_ROOM, "blob %llu", (unsigned long long)size) + 1;
  size_t in_used = 0, out_made = 0;
  enum libdeflate_result r = libdeflate_zlib_decompress_ex(d, z, z_len, scratch + head, size, &in_used, &out_made);
  if (r != LIBDEFLATE_SUCCESS || out_made != size) return LAY_BAD_STREAM;
  uint8_t md[32];
  digest(scratch, (size_t)head + size, md);
  return memcmp(md, oid, hash_len) == 0 ? head : LAY_HASH;
}

/* A restore's write of one blob straight from its pack entry (src/snapshot/lay-worker.ts): the
 * zlib stream z inflated into scratch behind its "blob <size>\0" header, the whole hashed and
 * compared with oid (git's checkout does not hash what it writes; this does), then the file
 * created and stamped as createFile does. Nothing is created unless the bytes are the blob's.
 * 0, a LAY_* code, or -errno. */
static napi_value lay_blob(napi_env env, napi_callback_info info) {
  napi_value argv[9];
  if (!args_of(env, info, 9, argv, "layBlob(z, size, oid, scratch, path, perm, sec, nsec, out)")) return NULL;
  uint8_t *z, *oid, *scratch, *out;
  size_t z_len, oid_len, scratch_len;
  int64_t size, perm, sec, nsec;
  if (!buffer_arg(env, argv[0], &z, &z_len) || !int_arg(env, argv[1], 0, INT64_C(1) << 50, &size) ||
      !buffer_arg(env, argv[2], &oid, &oid_len) || !buffer_arg(env, argv[3], &scratch, &scratch_len))
    return NULL;
  struct state *s = state_of(env);
  if (!s) return NULL;
  char *file = file_args(env, argv + 4, &perm, &sec, &nsec, &out);
  if (!file) return NULL;
  digest_fn digest = digest_of(oid_len);
  int64_t result;
  if (!digest) {
    result = LAY_NO_DIGEST;
    goto done;
  }
  if (scratch_len < LAY_HEADER_ROOM || (uint64_t)size > scratch_len - LAY_HEADER_ROOM) {
    result = LAY_ROOM;
    goto done;
  }
  if (!s->d) s->d = libdeflate_alloc_decompressor();
  if (!s->d) {
    free(file);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  int head = inflate_blob(s->d, digest, z, z_len, (size_t)size, oid, oid_len, scratch);
  if (head < 0) {
    result = head;
    goto done;
  }
  result = create_stamped(file, scratch + head, (size_t)size, perm, sec, nsec, out);
done:
  free(file);
  return int64(env, result);
}

/* layMany's verdicts in result[0] for the entry it stopped at (the ones before it were laid). */
#define MANY_OTHER 1     /* not its plain case (a symlink, a delta, another type, too large, scratch too
                            small, a stream or hash that does not check, a directory not made): the
                            caller's per-entry path decides, with its own checks and errors */
#define MANY_ERRNO 2     /* creating the file failed: errno in result[1], the step in its stat block */
#define MANY_NO_DIGEST 3 /* no SHA-1/SHA-256 of this length in the process */
#define MANY_PACK 4      /* its object is in another pack (or none): the caller goes on with that one */
#define MANY_PATH_MAX 4096

static double f64_at(const uint8_t *b, size_t k) {
  double v;
  memcpy(&v, b + 8 * k, 8);
  return v;
}
static uint32_t u32_at(const uint8_t *b, size_t k) {
  uint32_t v;
  memcpy(&v, b + 4 * k, 4);
  return v;
}
static int32_t i32_at(const uint8_t *b, size_t k) {
  int32_t v;
  memcpy(&v, b + 4 * k, 4);
  return v;
}

/* Makes the directories of path[0..len) that end past `known` (those up to it exist), one component
 * at a time as the worker's ensureDir does: mkdir, and where something is there already, lstat
 * (never stat: a symlink is not gone through). 0, or -1 with nothing said (the caller's path
 * repeats it and says why). path[len] is a NUL or a slash; it is left as it was. */
static int make_dirs(char *path, size_t len, size_t known) {
  for (size_t i = known + 1; i <= len; i++) {
    if (i < len && path[i] != '/') continue;
    char c = path[i];
    path[i] = 0;
    int ok = mkdir(path, 0777) == 0;
    if (!ok && errno == EEXIST) {
      struct stat st;
      ok = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
    }
    path[i] = c;
    if (!ok) return -1;
  }
  return 0;
}

/* The pack entry at offset off_d (a double from a column: checked before it is cast) when it is a
 * blob stored whole of at most max_bytes, read as PackReader's head() reads a header: its size,
 * where its zlib stream starts, and as much of the stream as deflate may make of `size` bytes
 * (zlibStreamBound), short at the objects' end. 0 for anything else (the caller's other path). */
/* The header of the pack entry at off (12 <= off < end, the objects' end), as PackReader's head()
 * reads one: its kind, its size (the object's, or a delta's data's), and where what follows it
 * starts. 0 when it is not there or runs past the end. */
static int pack_head(const uint8_t *pack, size_t end, uint64_t off, unsigned *kind, uint64_t *size, size_t *at) {
  if (off < 12 || off >= end) return 0;
  size_t i = (size_t)off;
  uint8_t c = pack[i++];
  unsigned shift = 4;
  uint64_t v = c & 0x0f;
  *kind = (c >> 4) & 7;
  while (c & 0x80) {
    if (i >= end || shift > 46) return 0;
    c = pack[i++];
    v += (uint64_t)(c & 0x7f) << shift;
    shift += 7;
  }
  *size = v;
  *at = i;
  return 1;
}

/* As much zlib stream at `at` as deflate may make of `size` bytes (zlibStreamBound), short at the
 * objects' end. */
static size_t zlib_stream_len(size_t end, size_t at, uint64_t size) {
  size_t bound = (size_t)size + 5 * ((size_t)size / 4096 + 1) + 77;
  size_t lib_bound = libdeflate_zlib_compress_bound(NULL, (size_t)size);
  if (lib_bound > bound) bound = lib_bound;
  return end - at > bound ? bound : end - at;
}

static int whole_blob_at(const uint8_t *pack, size_t pack_end, double off_d, uint64_t max_bytes, uint64_t *size_out,
                         size_t *data_at, size_t *z_len) {
  if (!(off_d >= 12 && off_d < (double)pack_end)) return 0;
  size_t off = (size_t)off_d;
  unsigned kind;
  if ((double)off != off_d || !pack_head(pack, pack_end, off, &kind, size_out, data_at)) return 0;
  if (kind != 3 || *size_out > max_bytes) return 0;
  *z_len = zlib_stream_len(pack_end, *data_at, *size_out);
  return 1;
}

/* Whether a time from a column is one create_stamped takes: whole seconds within int64, and
 * nanoseconds 0..999999999 or -1 (not set). Ranges before the casts: a double out of int64's range
 * (or NaN) has no defined conversion. */
static int time_ok(double sec, double nsec) {
  return nsec >= -1 && nsec <= 999999999 && nsec == (double)(int64_t)nsec && sec >= -9.2e18 && sec <= 9.2e18 &&
         sec == (double)(int64_t)sec;
}

/* The directories of the file at path (base_len bytes of base, then its name, NUL-ended) made
 * where they are not known: last[0..*last_len) is the last directory made or found (directories
 * are only ever added to a tree being laid), and only the components past what the two share are
 * made. 0, or -1 (the memo is then forgotten; the caller's other path repeats it and says why). */
static int dirs_of(char *path, size_t base_len, char *last, uint32_t *last_len) {
  char *slash = strrchr(path + base_len, '/');
  size_t dir_len = slash ? (size_t)(slash - path) : base_len - 1;
  if (dir_len == *last_len && memcmp(path, last, dir_len) == 0) return 0;
  /* The longest prefix that ends a component in both (below it the two agree). */
  size_t known = shared_prefix((uint8_t *)path, dir_len, (uint8_t *)last, *last_len);
  while (known > base_len - 1 &&
         !((known == dir_len || path[known] == '/') && (known == *last_len || last[known] == '/')))
    known--;
  if (known < base_len - 1) known = base_len - 1;
  if (make_dirs(path, dir_len, known) != 0) {
    *last_len = 0;
    return -1;
  }
  memcpy(last, path, dir_len);
  *last_len = (uint32_t)dir_len;
  return 0;
}

/*
 * layMany(pack, packEnd, packNo, hashLen, maxBytes, run, from, to, base, stats, scratch, dirMemo,
 *         result) -> where it stopped (to, when it laid them all)
 * A restore's entries laid as layBlob lays each, without a call from JavaScript per file
 * (src/snapshot/lay-worker.ts): those of run[from .. to) whose objects are in `pack` (number
 * packNo; its objects end at packEnd), in order, until the first it does not take, for which
 * result[0] says why (MANY_*): the caller's own path, with its checks and errors, takes that one.
 * `run` is an array of buffers, each with a value per run position j:
 *   oids (hashLen raw bytes), names (NUL-ended, relative to `base`, which is absolute and ends in
 *   a slash), nameAt (uint32: where j's name starts), packs (int32: the pack of j's object, -1
 *   none), offsets (float64: its offset there), modes (uint32), times (float64 seconds and
 *   nanoseconds, -1: not set), entries (uint32: j's entry, whose stat block is stats[40 entry]).
 * Only the plain case is laid here: a regular file whose entry header is a blob of at most
 * maxBytes whose zlib stream inflates to exactly its size and hashes to its id. dirMemo (uint32
 * length, then the path) is the last directory made or found, kept across calls of one lay:
 * directories are only ever added to a tree being laid.
 */
static napi_value lay_many(napi_env env, napi_callback_info info) {
  napi_value argv[13];
  if (!args_of(env, info, 13, argv,
               "layMany(pack, packEnd, packNo, hashLen, maxBytes, run, from, to, base, stats, scratch, dirMemo, "
               "result)"))
    return NULL;
  uint8_t *pack, *base, *stats, *scratch, *memo, *result;
  size_t pack_len, base_len, stats_len, scratch_len, memo_len, result_len;
  int64_t pack_end, pack_no, hash_len, max_bytes, from, to;
  if (!buffer_arg(env, argv[0], &pack, &pack_len) || !int_arg(env, argv[1], 0, (int64_t)pack_len, &pack_end) ||
      !int_arg(env, argv[2], 0, INT32_MAX, &pack_no) || !int_arg(env, argv[3], 20, 32, &hash_len) ||
      !int_arg(env, argv[4], 0, INT64_C(1) << 40, &max_bytes) || !int_arg(env, argv[6], 0, INT32_MAX, &from) ||
      !int_arg(env, argv[7], from, INT32_MAX, &to) || !buffer_arg(env, argv[8], &base, &base_len) ||
      !buffer_arg(env, argv[9], &stats, &stats_len) || !buffer_arg(env, argv[10], &scratch, &scratch_len) ||
      !buffer_arg(env, argv[11], &memo, &memo_len) || !buffer_arg(env, argv[12], &result, &result_len))
    return NULL;
  /* The run's columns, in the order the comment above lists them. */
  enum { OIDS, NAMES, NAME_AT, PACKS, OFFSETS, MODES, TIMES, ENTRIES, COLUMNS };
  static const size_t width[COLUMNS] = {0, 0, 4, 4, 8, 4, 16, 4};
  uint8_t *col[COLUMNS];
  size_t col_len[COLUMNS];
  for (int c = 0; c < COLUMNS; c++) {
    napi_value v;
    if (napi_get_element(env, argv[5], (uint32_t)c, &v) != NAPI_OK || !buffer_arg(env, v, &col[c], &col_len[c]))
      return NULL;
  }
  /* What the caller hands in must agree with itself before anything is read through it. */
  size_t n = (size_t)to;
  int agree = col_len[OIDS] >= n * (size_t)hash_len && result_len >= 8 && memo_len >= 4 + MANY_PATH_MAX &&
              base_len > 0 && base_len < MANY_PATH_MAX && base[0] == '/' && base[base_len - 1] == '/' &&
              !memchr(base, 0, base_len) && (col_len[NAMES] == 0 || col[NAMES][col_len[NAMES] - 1] == 0);
  for (int c = NAME_AT; c < COLUMNS; c++) agree = agree && col_len[c] >= n * width[c];
  if (!agree) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: layMany's arguments do not agree");
    return NULL;
  }
  struct state *s = state_of(env);
  if (!s) return NULL;
  if (!s->d) s->d = libdeflate_alloc_decompressor();
  if (!s->d) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  digest_fn digest = digest_of((size_t)hash_len);
  int32_t verdict[2] = {0, 0};
  char path[MANY_PATH_MAX];
  memcpy(path, base, base_len);
  uint32_t last_len;
  memcpy(&last_len, memo, 4);
  if (last_len >= MANY_PATH_MAX) last_len = 0;
  char *last = (char *)memo + 4;
  size_t j = (size_t)from;
  for (; j < n; j++) {
    if (i32_at(col[PACKS], j) != (int32_t)pack_no) {
      verdict[0] = MANY_PACK;
      break;
    }
    if (!digest) {
      verdict[0] = MANY_NO_DIGEST;
      break;
    }
    verdict[0] = MANY_OTHER;
    uint32_t entry = u32_at(col[ENTRIES], j), mode = u32_at(col[MODES], j);
    if ((size_t)entry >= stats_len / CREATE_STAT) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: layMany's entry has no stat block");
      return NULL;
    }
    if (mode != 0100644 && mode != 0100755) break;
    /* The name: NUL-ended inside `names`, and with the base inside PATH_MAX. */
    uint32_t at = u32_at(col[NAME_AT], j);
    if (at >= col_len[NAMES]) break;
    const uint8_t *nul = memchr(col[NAMES] + at, 0, col_len[NAMES] - at);
    size_t name_len = (size_t)(nul - (col[NAMES] + at));
    if (name_len == 0 || base_len + name_len >= MANY_PATH_MAX) break;
    memcpy(path + base_len, col[NAMES] + at, name_len + 1);
    uint64_t size;
    size_t data_at, z_len;
    if (!whole_blob_at(pack, (size_t)pack_end, f64_at(col[OFFSETS], j), (uint64_t)max_bytes, &size, &data_at, &z_len) ||
        size + LAY_HEADER_ROOM > scratch_len)
      break;
    int head = inflate_blob(s->d, digest, pack + data_at, z_len, (size_t)size, col[OIDS] + j * (size_t)hash_len,
                            (size_t)hash_len, scratch);
    if (head < 0) break;
    double sec = f64_at(col[TIMES], 2 * j), nsec = f64_at(col[TIMES], 2 * j + 1);
    if (!time_ok(sec, nsec)) break;
    if (dirs_of(path, base_len, last, &last_len) != 0) break;
    int64_t made = create_stamped(path, scratch + head, (size_t)size, mode == 0100755 ? 0777 : 0666, (int64_t)sec,
                                  (int64_t)nsec, stats + (size_t)entry * CREATE_STAT);
    if (made != 0) {
      verdict[0] = MANY_ERRNO;
      verdict[1] = (int32_t)-made;
      break;
    }
    verdict[0] = 0;
  }
  memcpy(memo, &last_len, 4);
  memcpy(result, verdict, 8);
  return int64(env, (int64_t)j);
}

/* layAllLater: a restore's plain entries laid on threads of node's pool, no JavaScript per entry
 * (src/snapshot/lay-native.ts). Each thread claims LAY_ALL_BATCH entries at a time from a shared
 * counter, finds each object in the packs' indexes, sorts the batch by where the objects lie (the
 * packs are read forward), and lays what is a plain case as layMany does; the rest is left to the
 * caller's per-entry path (lay-worker.ts), which has its own checks and errors. */
#define LAY_ALL_BATCH 128
#define LAY_ALL_PACKS 256
/* Each entry's verdict in `status` (int32, host order). */
#define ALL_UNTOUCHED 0 /* not reached (a failure stopped the threads) */
#define ALL_STAMPED 1   /* a file, laid with its time: its stat block is in `stats` */
#define ALL_LAID 2      /* laid, its time not set here (a symlink, or nsec -1): the caller stamps it */
#define ALL_LEFT 3      /* not taken: the caller's per-entry path lays it */

struct lay_all_pack {
  const uint8_t *pack, *idx;
  size_t end, count, large;
  uint32_t fanout[256];
};

struct lay_all_job {
  napi_async_work *works;
  napi_deferred deferred;
  napi_ref *refs;
  size_t nrefs, nworks, pending;
  struct lay_all_pack *packs;
  size_t npacks, hash_len, n, base_len, names_len;
  uint64_t max_bytes;
  const uint8_t *oids, *names, *name_at, *modes, *times, *base;
  uint8_t *stats;
  int32_t *status, *result;
  digest_fn digest;
  size_t next;       /* the next entry to claim (atomic) */
  int failed;        /* set once (atomic): every thread stops at its next entry */
  size_t laid;       /* entries laid (atomic) */
  struct chunked_file *files; /* layChunkedLater's files (n of them) */
  const uint8_t *objects;      /* the object directory, ending in a slash (loose objects), or NULL */
  size_t objects_len;
};

/* A chunked file for layChunkedLater: its name (NUL-ended, relative to the base), mode, size and
 * blob id, and its chunks' ids and sizes in order. */
struct chunked_file {
  const uint8_t *name, *whole, *oids, *sizes;
  uint32_t mode;
  uint64_t size;
  size_t count;
};

/* The index's entry for oid: 1 with its offset in the pack, 0 when the index does not list it or
 * names an offset no entry can have (the caller's path reads it and says why). */
static int idx_find(const struct lay_all_pack *p, const uint8_t *oid, size_t hash_len, uint64_t *offset) {
  size_t lo = oid[0] == 0 ? 0 : p->fanout[oid[0] - 1], hi = p->fanout[oid[0]];
  const uint8_t *names = p->idx + 8 + 1024;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = memcmp(names + mid * hash_len, oid, hash_len);
    if (c == 0) {
      const uint8_t *small = p->idx + 8 + 1024 + p->count * (hash_len + 4) + mid * 4;
      uint32_t v = be32_at(small);
      if (!(v & 0x80000000u)) {
        *offset = v;
        return 1;
      }
      size_t li = v & 0x7fffffffu;
      if (li >= p->large) return 0;
      const uint8_t *big = p->idx + 8 + 1024 + p->count * (hash_len + 8) + li * 8;
      *offset = ((uint64_t)be32_at(big) << 32) | be32_at(big + 4);
      return 1;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

struct lay_all_placed {
  uint64_t key; /* the pack's number in the top 16 bits, the offset below */
  uint32_t k;
};

static int placed_order(const void *a, const void *b) {
  const struct lay_all_placed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* Deltas followed to their base at most (git's pack-objects never makes chains deeper than 4095). */
#define LAY_ALL_CHAIN 4096
/* A thread's cache of objects a chain resolved, by where they are: a delta's base is often the
 * base of the next one too. Objects over LAY_ALL_CACHED bytes are not kept. */
#define LAY_ALL_SLOTS 512
#define LAY_ALL_CACHED (1 << 20)
#define LAY_ALL_CACHE_BYTES (32 << 20)

/* A growable buffer with LAY_HEADER_ROOM bytes before its data (for "blob <size>\0", hashed with
 * it) and one after (a symlink's target is NUL-ended there). */
struct room {
  uint8_t *mem;
  size_t cap;
};

static uint8_t *room_for(struct room *r, size_t size) {
  size_t need = size + LAY_HEADER_ROOM + 1;
  if (need > r->cap) {
    size_t grown = need > 2 * r->cap ? need : 2 * r->cap;
    uint8_t *more = realloc(r->mem, grown);
    if (!more) return NULL;
    r->mem = more;
    r->cap = grown;
  }
  return r->mem + LAY_HEADER_ROOM;
}

struct cached_object {
  uint64_t key; /* the object's place + 1 (0: an empty slot) */
  uint8_t *data;
  size_t size;
};

/* A delta of a chain: where it is, its delta data's stream and size. */
struct chain_link {
  size_t pack;
  uint64_t off;
  size_t data_at, z_len;
  uint64_t size;
};

/* One thread's buffers: its decompressor, the scratch a blob stored whole is inflated into, the
 * buffers a chain of deltas is resolved in, its cache, the path being laid and its memo of the last
 * directory made. */
struct lay_all_thread {
  struct libdeflate_decompressor *d;
  struct room whole, a, b, delta;
  struct chain_link chain[LAY_ALL_CHAIN];
  struct cached_object cache[LAY_ALL_SLOTS];
  size_t cached_bytes;
  char path[MANY_PATH_MAX];
  char last[MANY_PATH_MAX];
  uint32_t last_len;
  /* The directory `last` names, open (O_PATH), and how long that name was (-1: none open). */
  int dir;
  char dir_path[MANY_PATH_MAX];
  size_t dir_len;
};

/* The file's directory (made or found by dirs_of: last[0..last_len)) open, or -1 when it cannot be
 * opened as a directory (not through a symlink at its last component: make_dirs found each one a
 * real directory, and the tree is its owner's alone). */
static int dir_of(struct lay_all_thread *t) {
  if (t->dir >= 0 && t->dir_len == t->last_len && memcmp(t->dir_path, t->last, t->last_len) == 0) return t->dir;
  if (t->dir >= 0) close(t->dir);
  t->dir = -1;
  memcpy(t->dir_path, t->last, t->last_len);
  t->dir_path[t->last_len] = 0;
  t->dir = open(t->dir_path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  t->dir_len = t->last_len;
  return t->dir;
}

static uint64_t place_of(size_t p, uint64_t off) { return ((uint64_t)p << 48) | off; }

static struct cached_object *cache_slot(struct lay_all_thread *t, uint64_t place) {
  uint64_t h = place * UINT64_C(0x9e3779b97f4a7c15);
  return &t->cache[(h >> 32) % LAY_ALL_SLOTS];
}

static void cache_put(struct lay_all_thread *t, uint64_t place, const uint8_t *data, size_t size) {
  if (size > LAY_ALL_CACHED) return;
  struct cached_object *c = cache_slot(t, place);
  if (c->key == place + 1) return;
  if (c->key) {
    t->cached_bytes -= c->size;
    free(c->data);
    c->key = 0;
  }
  if (t->cached_bytes + size > LAY_ALL_CACHE_BYTES) return;
  c->data = malloc(size ? size : 1);
  if (!c->data) return;
  memcpy(c->data, data, size);
  c->size = size;
  c->key = place + 1;
  t->cached_bytes += size;
}

/* The zlib stream at `at` inflated to exactly `size` bytes into out. */
static int inflate_exact(struct lay_all_thread *t, const struct lay_all_pack *pk, size_t at, uint64_t size,
                         uint8_t *out) {
  size_t in_used = 0, out_made = 0;
  enum libdeflate_result r = libdeflate_zlib_decompress_ex(t->d, pk->pack + at, zlib_stream_len(pk->end, at, size), out,
                                                           (size_t)size, &in_used, &out_made);
  return r == LIBDEFLATE_SUCCESS && out_made == size;
}

/* A size at the head of a delta's data (git's little-endian base-128). */
static int delta_size(const uint8_t **d, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  unsigned shift = 0;
  uint8_t c;
  do {
    if (*d >= end || shift > 56) return 0;
    c = *(*d)++;
    x |= (uint64_t)(c & 0x7f) << shift;
    shift += 7;
  } while (c & 0x80);
  *v = x;
  return 1;
}

/* git's patch_delta: the instructions of d..end (after its two sizes) applied to src, making
 * exactly out_size bytes in out; every copy and insert checked against both ends. */
static int apply_delta(const uint8_t *src, size_t src_size, const uint8_t *d, const uint8_t *end, uint8_t *out,
                       size_t out_size) {
  size_t left = out_size;
  while (d < end) {
    uint8_t cmd = *d++;
    if (cmd & 0x80) {
      size_t off = 0, n = 0;
      for (int b = 0; b < 4; b++)
        if (cmd & (1 << b)) {
          if (d >= end) return 0;
          off |= (size_t)*d++ << (8 * b);
        }
      for (int b = 0; b < 3; b++)
        if (cmd & (0x10 << b)) {
          if (d >= end) return 0;
          n |= (size_t)*d++ << (8 * b);
        }
      if (n == 0) n = 0x10000;
      if (off > src_size || n > src_size - off || n > left) return 0;
      memcpy(out, src + off, n);
      out += n;
      left -= n;
    } else if (cmd) {
      if ((size_t)cmd > (size_t)(end - d) || cmd > left) return 0;
      memcpy(out, d, cmd);
      out += cmd;
      d += cmd;
      left -= cmd;
    } else {
      return 0; /* reserved */
    }
  }
  return left == 0;
}

/* The blob at `offset` in pack p, stored as a delta: its chain followed to a base (OFS_DELTA in the
 * same pack, REF_DELTA through the indexes) or to an object this thread has resolved before, that
 * base a blob, and the deltas applied, every size within max_bytes. 1 with the bytes at *data
 * (LAY_HEADER_ROOM bytes of room before them), or 0 for anything else (the caller's path, which
 * reads it again and says what is wrong). Not hashed here. */
static int resolve_delta(struct lay_all_job *j, struct lay_all_thread *t, size_t p, uint64_t offset,
                         uint8_t **data, uint64_t *size) {
  size_t depth = 0, cp = p;
  uint64_t coff = offset, cur = 0;
  uint8_t *have = NULL;
  /* A delta's data is the object's size and a little: a larger one is not a delta of this. */
  uint64_t delta_max = j->max_bytes + j->max_bytes / 64 + 1024;
  for (;;) {
    if (depth > 0) {
      struct cached_object *c = cache_slot(t, place_of(cp, coff));
      if (c->key == place_of(cp, coff) + 1) {
        have = room_for(&t->a, c->size);
        if (!have) return 0;
        memcpy(have, c->data, c->size);
        cur = c->size;
        break;
      }
    }
    const struct lay_all_pack *pk = &j->packs[cp];
    unsigned kind;
    uint64_t sz;
    size_t at;
    if (!pack_head(pk->pack, pk->end, coff, &kind, &sz, &at)) return 0;
    if (kind == 3) {
      if (depth == 0 || sz > j->max_bytes) return 0;
      have = room_for(&t->a, (size_t)sz);
      if (!have || !inflate_exact(t, pk, at, sz, have)) return 0;
      cur = sz;
      cache_put(t, place_of(cp, coff), have, (size_t)cur);
      break;
    }
    if ((kind != 6 && kind != 7) || depth == LAY_ALL_CHAIN || sz > delta_max) return 0;
    struct chain_link *l = &t->chain[depth++];
    l->pack = cp;
    l->off = coff;
    l->size = sz;
    if (kind == 6) {
      /* The base's distance back, in git's offset encoding (each continuation adds one). */
      if (at >= pk->end) return 0;
      uint8_t c = pk->pack[at++];
      uint64_t rel = c & 0x7f;
      while (c & 0x80) {
        if (at >= pk->end || rel > (UINT64_MAX >> 8)) return 0;
        c = pk->pack[at++];
        rel = ((rel + 1) << 7) | (c & 0x7f);
      }
      if (at >= pk->end || rel == 0 || rel > coff - 12) return 0;
      l->data_at = at;
      coff -= rel;
    } else {
      if (pk->end - at <= j->hash_len) return 0;
      const uint8_t *base = pk->pack + at;
      l->data_at = at + j->hash_len;
      size_t q = 0;
      uint64_t found = 0;
      while (q < j->npacks && !idx_find(&j->packs[q], base, j->hash_len, &found)) q++;
      if (q == j->npacks || found >= (UINT64_C(1) << 48)) return 0;
      cp = q;
      coff = found;
    }
  }
  /* From the base up: each delta's data inflated, its two sizes checked, applied into the other
   * buffer. */
  while (depth-- > 0) {
    struct chain_link *l = &t->chain[depth];
    const struct lay_all_pack *pk = &j->packs[l->pack];
    uint8_t *dd = room_for(&t->delta, (size_t)l->size);
    if (!dd || !inflate_exact(t, pk, l->data_at, l->size, dd)) return 0;
    const uint8_t *d = dd, *end = dd + l->size;
    uint64_t src_size, out_size;
    if (!delta_size(&d, end, &src_size) || !delta_size(&d, end, &out_size) || src_size != cur ||
        out_size > j->max_bytes)
      return 0;
    uint8_t *out = room_for(&t->b, (size_t)out_size);
    if (!out || !apply_delta(have, (size_t)cur, d, end, out, (size_t)out_size)) return 0;
    struct room swap = t->a;
    t->a = t->b;
    t->b = swap;
    have = out;
    cur = out_size;
    cache_put(t, place_of(l->pack, l->off), have, (size_t)cur);
  }
  *data = have;
  *size = cur;
  return 1;
}

/* Whether a name relative to the base is one the native passes take: no empty, `.` or `..`
 * component, no slash at either end. The callers check every path before (paths.ts, which also
 * refuses `.git`); this keeps the passes inside their base whoever calls them. */
static int plain_name(const uint8_t *name, size_t len) {
  if (len == 0 || name[0] == '/' || name[len - 1] == '/') return 0;
  for (size_t start = 0; start < len;) {
    const uint8_t *slash = memchr(name + start, '/', len - start);
    size_t end = slash ? (size_t)(slash - name) : len, n = end - start;
    if (n == 0 || (n == 1 && name[start] == '.') || (n == 2 && name[start] == '.' && name[start + 1] == '.'))
      return 0;
    start = end + 1;
  }
  return 1;
}

/* A pack number that is none: the object is looked for loose. */
#define LOOSE_PACK 0xffff

/* The blob `oid` as a loose object (objects/xx/yyyy…: zlib of "blob <size>\0<bytes>"), hostile as a
 * pack is: never followed through a symlink, its compressed size bounded before it is read and its
 * output before it is inflated, the header's size the size that follows, the whole hashed to oid.
 * 1 with the bytes at *data (LAY_HEADER_ROOM bytes of room before them, one after), 0 for anything
 * else (the caller's path, which reads it again and says what is wrong). */
static int read_loose(struct lay_all_job *j, struct lay_all_thread *t, const uint8_t *oid, uint8_t **data,
                      uint64_t *size) {
  static const char hex[] = "0123456789abcdef";
  char file[MANY_PATH_MAX];
  if (!j->objects || j->objects_len + 2 * j->hash_len + 2 >= sizeof file) return 0;
  memcpy(file, j->objects, j->objects_len);
  char *p = file + j->objects_len;
  for (size_t i = 0; i < j->hash_len; i++) {
    *p++ = hex[oid[i] >> 4];
    *p++ = hex[oid[i] & 15];
    if (i == 0) *p++ = '/';
  }
  *p = 0;
  int fd = open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  uint64_t bound = j->max_bytes + (j->max_bytes >> 8) + 1024;
  uint8_t *z = NULL;
  size_t z_len = 0;
  int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size <= bound;
  if (ok) {
    z_len = (size_t)st.st_size;
    z = room_for(&t->delta, z_len);
    for (size_t at = 0; ok && z && at < z_len;) {
      ssize_t got = pread(fd, z + at, z_len - at, (off_t)at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) ok = 0;
      else at += (size_t)got;
    }
    ok = ok && z;
  }
  close(fd);
  if (!ok) return 0;
  /* The output's size is in the header it holds: inflated into room that grows until it fits. */
  size_t limit = (size_t)j->max_bytes + LAY_HEADER_ROOM, cap = 8 * z_len + 1024;
  if (cap > limit) cap = limit;
  uint8_t *out;
  size_t in_used = 0, out_made = 0;
  for (;;) {
    out = room_for(&t->b, cap);
    if (!out) return 0;
    enum libdeflate_result r = libdeflate_zlib_decompress_ex(t->d, z, z_len, out, cap, &in_used, &out_made);
    if (r == LIBDEFLATE_SUCCESS) break;
    if (r != LIBDEFLATE_INSUFFICIENT_SPACE || cap == limit) return 0;
    cap = cap > limit / 4 ? limit : 4 * cap;
  }
  /* "blob <size>\0": the size in decimal without leading zeros, and exactly that many bytes after. */
  size_t h = 5;
  if (out_made < 7 || memcmp(out, "blob ", 5) != 0) return 0;
  uint64_t n = 0;
  while (h < out_made && h < LAY_HEADER_ROOM && out[h] >= '0' && out[h] <= '9') {
    if (h > 5 && n == 0) return 0;
    n = 10 * n + (uint64_t)(out[h++] - '0');
  }
  if (h == 5 || h >= out_made || out[h] != 0 || n != out_made - h - 1 || n > j->max_bytes) return 0;
  uint8_t md[32];
  j->digest(out, out_made, md);
  if (memcmp(md, oid, j->hash_len) != 0) return 0;
  *data = out + h + 1;
  *size = n;
  return 1;
}

/* Entry k, whose object is at `offset` in pack p: its verdict (ALL_*), or 0 when creating its file
 * failed (the job's result says how; the threads stop). */
static int32_t lay_all_entry(struct lay_all_job *j, struct lay_all_thread *t, size_t k, size_t p, uint64_t offset) {
  uint32_t mode = u32_at(j->modes, k);
  if (mode != 0100644 && mode != 0100755 && mode != 0120000) return ALL_LEFT;
  uint32_t at = u32_at(j->name_at, k);
  if (at >= j->names_len) return ALL_LEFT;
  const uint8_t *nul = memchr(j->names + at, 0, j->names_len - at);
  size_t name_len = (size_t)(nul - (j->names + at));
  if (!plain_name(j->names + at, name_len) || j->base_len + name_len >= MANY_PATH_MAX) return ALL_LEFT;
  memcpy(t->path + j->base_len, j->names + at, name_len + 1);
  const struct lay_all_pack *pk = p == LOOSE_PACK ? NULL : &j->packs[p];
  uint64_t size;
  size_t data_at, z_len;
  uint8_t *data;
  if (p == LOOSE_PACK) {
    if (!read_loose(j, t, j->oids + k * j->hash_len, &data, &size)) return ALL_LEFT;
  } else if (offset > (UINT64_C(1) << 53)) {
    return ALL_LEFT;
  } else if (whole_blob_at(pk->pack, pk->end, (double)offset, j->max_bytes, &size, &data_at, &z_len)) {
    /* Room for the header inflate_blob writes before the bytes, and a NUL after a symlink's target. */
    uint8_t *room = room_for(&t->whole, (size_t)size);
    if (!room) return ALL_LEFT;
    uint8_t *scratch = room - LAY_HEADER_ROOM;
    int head = inflate_blob(t->d, j->digest, pk->pack + data_at, z_len, (size_t)size, j->oids + k * j->hash_len,
                            j->hash_len, scratch);
    if (head < 0) return ALL_LEFT;
    data = scratch + head;
  } else {
    if (!resolve_delta(j, t, p, offset, &data, &size)) return ALL_LEFT;
    /* Hashed as inflate_blob hashes: "blob <size>\0" right before the bytes. */
    char header[LAY_HEADER_ROOM];
    int hl = snprintf(header, sizeof header, "blob %llu", (unsigned long long)size) + 1;
    memcpy(data - hl, header, (size_t)hl);
    uint8_t md[32];
    j->digest(data - hl, (size_t)hl + (size_t)size, md);
    if (memcmp(md, j->oids + k * j->hash_len, j->hash_len) != 0) return ALL_LEFT;
  }
  double sec = f64_at(j->times, 2 * k), nsec = f64_at(j->times, 2 * k + 1);
  if (!time_ok(sec, nsec)) return ALL_LEFT;
  if (dirs_of(t->path, j->base_len, t->last, &t->last_len) != 0) return ALL_LEFT;
  int dir = dir_of(t);
  if (dir < 0) return ALL_LEFT;
  const char *name = t->path + t->last_len + 1;
  if (mode == 0120000) {
    /* A target symlink(2) would cut short or refuse is the caller's (it says why); nothing is
     * made unless the link is. */
    if (size == 0 || size >= MANY_PATH_MAX || memchr(data, 0, (size_t)size)) return ALL_LEFT;
    data[size] = 0;
    return symlinkat((const char *)data, dir, name) == 0 ? ALL_LAID : ALL_LEFT;
  }
  uint8_t *out = j->stats + k * CREATE_STAT;
  int64_t made = create_stamped_at(dir, name, data, (size_t)size, mode == 0100755 ? 0777 : 0666, (int64_t)sec,
                                   (int64_t)nsec, out);
  if (made != 0) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&j->failed, &expected, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      j->result[0] = (int32_t)k;
      j->result[1] = (int32_t)-made;
      j->result[2] = out[0];
    }
    return 0;
  }
  return nsec >= 0 ? ALL_STAMPED : ALL_LAID;
}

/* A pass thread's buffers, cache, directory and decompressor given back. */
static void free_thread(struct lay_all_thread *t) {
  if (t->d) libdeflate_free_decompressor(t->d);
  if (t->dir >= 0) close(t->dir);
  free(t->whole.mem);
  free(t->a.mem);
  free(t->b.mem);
  free(t->delta.mem);
  for (size_t i = 0; i < LAY_ALL_SLOTS; i++) free(t->cache[i].data);
  free(t);
}

/* A pass thread's state, or NULL (out of memory: the other threads take its share, and what none
 * takes is left untouched). */
static struct lay_all_thread *new_thread(const struct lay_all_job *j) {
  struct lay_all_thread *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->dir = -1;
  memcpy(t->path, j->base, j->base_len);
  t->d = libdeflate_alloc_decompressor();
  if (!t->d) {
    free_thread(t);
    return NULL;
  }
  return t;
}

static void lay_all_run(napi_env env, void *data) {
  (void)env;
  struct lay_all_job *j = data;
  struct lay_all_thread *t = new_thread(j);
  if (!t) return;
  struct lay_all_placed batch[LAY_ALL_BATCH];
  size_t laid = 0;
  for (;;) {
    size_t start = __atomic_fetch_add(&j->next, LAY_ALL_BATCH, __ATOMIC_SEQ_CST);
    if (start >= j->n || __atomic_load_n(&j->failed, __ATOMIC_SEQ_CST)) break;
    size_t end = start + LAY_ALL_BATCH < j->n ? start + LAY_ALL_BATCH : j->n, m = 0;
    for (size_t k = start; k < end; k++) {
      uint64_t offset = 0;
      size_t p = 0;
      while (p < j->npacks && !idx_find(&j->packs[p], j->oids + k * j->hash_len, j->hash_len, &offset)) p++;
      if (offset >= (UINT64_C(1) << 48)) {
        j->status[k] = ALL_LEFT;
        continue;
      }
      /* In no pack: looked for loose, after the batch's packed objects. */
      if (p == j->npacks) {
        p = LOOSE_PACK;
        offset = k;
      }
      batch[m].key = ((uint64_t)p << 48) | offset;
      batch[m].k = (uint32_t)k;
      m++;
    }
    qsort(batch, m, sizeof batch[0], placed_order);
    for (size_t b = 0; b < m; b++) {
      if (__atomic_load_n(&j->failed, __ATOMIC_SEQ_CST)) break;
      size_t k = batch[b].k;
      int32_t v = lay_all_entry(j, t, k, (size_t)(batch[b].key >> 48), batch[b].key & ((UINT64_C(1) << 48) - 1));
      j->status[k] = v;
      if (v == ALL_STAMPED || v == ALL_LAID) laid++;
    }
  }
  __atomic_fetch_add(&j->laid, laid, __ATOMIC_SEQ_CST);
  free_thread(t);
}

/* OpenSSL's streaming digest calls, looked up as digest_of looks up the one-shot ones (a chunked
 * file is hashed whole as its chunks go by). */
typedef void *(*evp_ctx_new_fn)(void);
typedef void (*evp_ctx_free_fn)(void *);
typedef const void *(*evp_md_fn)(void);
typedef int (*evp_init_fn)(void *, const void *, void *);
typedef int (*evp_update_fn)(void *, const void *, size_t);
typedef int (*evp_final_fn)(void *, unsigned char *, unsigned int *);
static struct {
  evp_ctx_new_fn ctx_new;
  evp_ctx_free_fn ctx_free;
  evp_md_fn sha1, sha256;
  evp_init_fn init;
  evp_update_fn update;
  evp_final_fn final;
} evp;
static pthread_once_t evp_once = PTHREAD_ONCE_INIT;
static void look_up_evp(void) {
  evp.ctx_new = (evp_ctx_new_fn)dlsym(RTLD_DEFAULT, "EVP_MD_CTX_new");
  evp.ctx_free = (evp_ctx_free_fn)dlsym(RTLD_DEFAULT, "EVP_MD_CTX_free");
  evp.sha1 = (evp_md_fn)dlsym(RTLD_DEFAULT, "EVP_sha1");
  evp.sha256 = (evp_md_fn)dlsym(RTLD_DEFAULT, "EVP_sha256");
  evp.init = (evp_init_fn)dlsym(RTLD_DEFAULT, "EVP_DigestInit_ex");
  evp.update = (evp_update_fn)dlsym(RTLD_DEFAULT, "EVP_DigestUpdate");
  evp.final = (evp_final_fn)dlsym(RTLD_DEFAULT, "EVP_DigestFinal_ex");
}
static int evp_usable(void) {
  pthread_once(&evp_once, look_up_evp);
  return evp.ctx_new && evp.ctx_free && evp.sha1 && evp.sha256 && evp.init && evp.update && evp.final;
}

/* Bytes of a chunked file gathered into one write: a multiple of HOLE_BLOCK, so that the blocks
 * of zeros are found where git's checkout finds them (counted from the file's start). */
#define CHUNKED_STAGE (1 << 20)

/* One chunked file written from its chunks into a file created at its path, the whole hashed as
 * its blob and compared with its id, holes where git leaves them. 1, or 0 with nothing left at its
 * path (a chunk not in the packs, not a blob of its size, bytes that do not hash to the file's id,
 * a directory or file that cannot be made or written: the caller's path does it again and says
 * why). Not stamped (the caller stamps it with the files it links). */
static int write_chunked(struct lay_all_job *j, struct lay_all_thread *t, const struct chunked_file *f,
                         uint8_t *stage, void *md_ctx) {
  size_t name_len = strlen((const char *)f->name);
  if (!plain_name(f->name, name_len) || j->base_len + name_len >= MANY_PATH_MAX) return 0;
  memcpy(t->path + j->base_len, f->name, name_len + 1);
  if (dirs_of(t->path, j->base_len, t->last, &t->last_len) != 0) return 0;
  int dir = dir_of(t);
  if (dir < 0) return 0;
  const char *name = t->path + t->last_len + 1;
  int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, f->mode == 0100755 ? 0777 : 0666);
  if (fd < 0) return 0;
  int ok = evp.init(md_ctx, j->hash_len == 32 ? evp.sha256() : evp.sha1(), NULL) == 1;
  char header[LAY_HEADER_ROOM];
  int hl = snprintf(header, sizeof header, "blob %llu", (unsigned long long)f->size);
  ok = ok && evp.update(md_ctx, header, (size_t)hl + 1) == 1;
  size_t used = 0, flushed = 0;
  uint64_t total = 0;
  int hole_at_end = 0;
  for (size_t i = 0; ok && i < f->count; i++) {
    const uint8_t *oid = f->oids + i * j->hash_len;
    uint32_t want = u32_at(f->sizes, i);
    size_t p = 0;
    uint64_t offset = 0;
    while (p < j->npacks && !idx_find(&j->packs[p], oid, j->hash_len, &offset)) p++;
    if (p == j->npacks || offset >= (UINT64_C(1) << 48)) {
      ok = 0;
      break;
    }
    const struct lay_all_pack *pk = &j->packs[p];
    uint64_t size = 0;
    size_t data_at, z_len;
    uint8_t *data = NULL;
    if (whole_blob_at(pk->pack, pk->end, (double)offset, j->max_bytes, &size, &data_at, &z_len)) {
      data = size == want ? room_for(&t->a, (size_t)size) : NULL;
      ok = data && inflate_exact(t, pk, data_at, size, data);
    } else {
      ok = resolve_delta(j, t, p, offset, &data, &size) && size == want;
    }
    total += want;
    ok = ok && total <= f->size && evp.update(md_ctx, data, want) == 1;
    /* Into the stage; a full stage is written (its offset a multiple of it, so of HOLE_BLOCK). */
    for (size_t at = 0; ok && at < want;) {
      size_t n = want - at < CHUNKED_STAGE - used ? want - at : CHUNKED_STAGE - used;
      memcpy(stage + used, data + at, n);
      used += n;
      at += n;
      if (used == CHUNKED_STAGE) {
        ok = write_sparse_at(fd, stage, used, flushed, &hole_at_end) == 0;
        flushed += used;
        used = 0;
      }
    }
  }
  if (ok && used > 0) ok = write_sparse_at(fd, stage, used, flushed, &hole_at_end) == 0;
  unsigned char md[32];
  unsigned int md_len = 0;
  ok = ok && total == f->size && evp.final(md_ctx, md, &md_len) == 1 && md_len == j->hash_len &&
       memcmp(md, f->whole, j->hash_len) == 0;
  if (ok && hole_at_end) ok = end_sparse(fd, (size_t)f->size) == 0;
  if (close(fd) != 0 && errno != EINTR) ok = 0;
  if (!ok) unlinkat(dir, name, 0);
  return ok;
}

static void lay_chunked_run(napi_env env, void *data) {
  (void)env;
  struct lay_all_job *j = data;
  struct lay_all_thread *t = new_thread(j);
  uint8_t *stage = malloc(CHUNKED_STAGE);
  void *md_ctx = evp.ctx_new();
  if (t && stage && md_ctx) {
    for (;;) {
      size_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_SEQ_CST);
      if (k >= j->n) break;
      int laid = write_chunked(j, t, &j->files[k], stage, md_ctx);
      j->status[k] = laid ? ALL_LAID : ALL_LEFT;
      if (laid) __atomic_fetch_add(&j->laid, 1, __ATOMIC_SEQ_CST);
    }
  }
  /* A thread that could not start leaves its files to the others (what none takes is untouched). */
  if (md_ctx) evp.ctx_free(md_ctx);
  free(stage);
  if (t) free_thread(t);
}

static void lay_all_free(napi_env env, struct lay_all_job *j) {
  for (size_t i = 0; i < j->nrefs; i++)
    if (j->refs[i]) napi_delete_reference(env, j->refs[i]);
  for (size_t i = 0; i < j->nworks; i++)
    if (j->works[i]) napi_delete_async_work(env, j->works[i]);
  free(j->refs);
  free(j->works);
  free(j->packs);
  free(j->files);
  free(j);
}

static void lay_all_done(napi_env env, napi_status status, void *data) {
  (void)status; /* a thread cancelled before it ran leaves its entries untouched: the caller sees */
  struct lay_all_job *j = data;
  if (--j->pending > 0) return;
  napi_value v;
  if (napi_create_int64(env, (int64_t)j->laid, &v) != NAPI_OK) napi_get_undefined(env, &v);
  napi_resolve_deferred(env, j->deferred, v);
  lay_all_free(env, j);
}

/* A Buffer argument that the job keeps a reference to until it is done. */
static int held_buffer(napi_env env, struct lay_all_job *j, napi_value v, uint8_t **data, size_t *len) {
  if (!buffer_arg(env, v, data, len)) return 0;
  if (napi_create_reference(env, v, 1, &j->refs[j->nrefs]) != NAPI_OK) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: layAllLater could not hold a buffer");
    return 0;
  }
  j->nrefs++;
  return 1;
}

/* A pack index (version 2) that agrees with itself, as PackIndex.open checks one: 1, or 0 when it
 * does not. */
static int idx_usable(struct lay_all_pack *p, size_t idx_len, size_t hash_len) {
  if (idx_len < 8 + 1024 || be32_at(p->idx) != 0xff744f63u || be32_at(p->idx + 4) != 2) return 0;
  for (int i = 0; i < 256; i++) {
    p->fanout[i] = be32_at(p->idx + 8 + 4 * i);
    if (i > 0 && p->fanout[i] < p->fanout[i - 1]) return 0;
  }
  p->count = p->fanout[255];
  size_t fixed = 8 + 1024 + p->count * (hash_len + 8) + 2 * hash_len;
  if (idx_len < fixed || (idx_len - fixed) % 8 != 0) return 0;
  p->large = (idx_len - fixed) / 8;
  return 1;
}

/* The packs argument of layAllLater and layChunkedLater ([mapping, objects' end, index] each),
 * held and checked into j->packs (npacks of them, allocated). 0 with a JavaScript exception. */
static int take_packs(napi_env env, struct lay_all_job *j, napi_value packs, uint32_t npacks) {
  j->npacks = npacks;
  int ok = 1;
  for (uint32_t i = 0; ok && i < npacks; i++) {
    napi_value one, v;
    uint32_t parts;
    size_t pack_len, idx_len;
    uint8_t *pack, *idx;
    int64_t end;
    ok = napi_get_element(env, packs, i, &one) == NAPI_OK &&
         napi_get_array_length(env, one, &parts) == NAPI_OK && parts == 3;
    if (!ok) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a pack is [mapping, end, index]");
      break;
    }
    ok = napi_get_element(env, one, 0, &v) == NAPI_OK && held_buffer(env, j, v, &pack, &pack_len) &&
         napi_get_element(env, one, 1, &v) == NAPI_OK && int_arg(env, v, 12, (int64_t)pack_len, &end) &&
         napi_get_element(env, one, 2, &v) == NAPI_OK && held_buffer(env, j, v, &idx, &idx_len);
    if (!ok) break;
    struct lay_all_pack *p = &j->packs[i];
    p->pack = pack;
    p->idx = idx;
    p->end = (size_t)end;
    if (!idx_usable(p, idx_len, j->hash_len)) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a pack index that does not agree with itself");
      ok = 0;
    }
  }
  return ok;
}

/*
 * layAllLater(packs, hashLen, maxBytes, columns, base, stats, status, result, threads, objects) ->
 * Promise of how many entries it laid. objects: the object directory (absolute, ending in a slash)
 * whose loose objects are read for what no pack holds, or an empty Buffer.
 * packs: [pack mapping, where its objects end, its index's bytes] per pack, in the order an object
 * is looked for (the first that lists it is read). columns: the entries' oids (hashLen bytes each),
 * names (NUL-ended, relative to base: absolute, ending in a slash), nameAt (uint32 per entry),
 * modes (uint32), times (float64 seconds and nanoseconds, nanoseconds -1: not set). stats: 40
 * bytes per entry (git's stat block, written for each file laid); status: an int32 per entry
 * (ALL_*); result: int32 entry, errno, step of a file whose creation failed (the others stop).
 * Every buffer is held until the promise settles; the caller must not touch them meanwhile.
 */
/* A job for `threads` threads over npacks packs (its packs, references and works allocated, the
 * first three arguments read: packs, hashLen, maxBytes), or NULL with a JavaScript exception. */
static struct lay_all_job *new_job(napi_env env, napi_value *argv, int64_t threads, size_t more_refs) {
  int64_t hash_len, max_bytes;
  uint32_t npacks;
  if (!int_arg(env, argv[1], 20, 32, &hash_len) || !int_arg(env, argv[2], 0, INT64_C(1) << 40, &max_bytes))
    return NULL;
  if (napi_get_array_length(env, argv[0], &npacks) != NAPI_OK || npacks > LAY_ALL_PACKS) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: up to 256 packs, as an array");
    return NULL;
  }
  digest_fn digest = digest_of((size_t)hash_len);
  if (!digest) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: no digest of this length in the process");
    return NULL;
  }
  struct lay_all_job *j = calloc(1, sizeof *j);
  if (j) {
    j->refs = calloc(3 * (size_t)npacks + more_refs, sizeof *j->refs);
    j->works = calloc((size_t)threads, sizeof *j->works);
    j->packs = calloc(npacks ? npacks : 1, sizeof *j->packs);
  }
  if (!j || !j->refs || !j->works || !j->packs) {
    if (j) lay_all_free(env, j);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  j->hash_len = (size_t)hash_len;
  j->max_bytes = (uint64_t)max_bytes;
  j->digest = digest;
  if (!take_packs(env, j, argv[0], npacks)) {
    lay_all_free(env, j);
    return NULL;
  }
  return j;
}

/* The job's works made and queued, its promise returned (settled by lay_all_done once all have
 * run); NULL with a JavaScript exception (the job freed). */
static napi_value start_job(napi_env env, struct lay_all_job *j, int64_t threads, napi_async_execute_callback run,
                            const char *what) {
  napi_value promise, name;
  if (napi_create_string_utf8(env, what, NAPI_AUTO_LENGTH, &name) != NAPI_OK ||
      napi_create_promise(env, &j->deferred, &promise) != NAPI_OK) {
    lay_all_free(env, j);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: could not start the lay");
    return NULL;
  }
  for (int64_t i = 0; i < threads; i++) {
    if (napi_create_async_work(env, NULL, name, run, lay_all_done, j, &j->works[j->nworks]) != NAPI_OK) break;
    j->nworks++;
  }
  /* Every work made is queued before any can finish (completions run on this thread, later). */
  for (size_t i = 0; i < j->nworks; i++) {
    if (napi_queue_async_work(env, j->works[i]) != NAPI_OK) break;
    j->pending++;
  }
  if (j->pending == 0) {
    /* Nothing runs: the promise settles with nothing laid (every entry untouched). */
    napi_value zero;
    napi_create_int64(env, 0, &zero);
    napi_resolve_deferred(env, j->deferred, zero);
    lay_all_free(env, j);
  }
  return promise;
}

/* base, absolute and ending in a slash, held for the job. 0 with a TypeError. */
static int take_base(napi_env env, struct lay_all_job *j, napi_value v) {
  uint8_t *base;
  size_t base_len;
  if (!held_buffer(env, j, v, &base, &base_len)) return 0;
  if (!(base_len > 0 && base_len < MANY_PATH_MAX && base[0] == '/' && base[base_len - 1] == '/' &&
        !memchr(base, 0, base_len))) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: the base is an absolute directory, with its slash");
    return 0;
  }
  j->base = base;
  j->base_len = base_len;
  return 1;
}

static napi_value lay_all_later(napi_env env, napi_callback_info info) {
  napi_value argv[10];
  if (!args_of(env, info, 10, argv,
               "layAllLater(packs, hashLen, maxBytes, columns, base, stats, status, result, threads, objects)"))
    return NULL;
  int64_t threads;
  if (!int_arg(env, argv[8], 1, 64, &threads)) return NULL;
  struct lay_all_job *j = new_job(env, argv, threads, 10);
  if (!j) return NULL;
  enum { OIDS, NAMES, NAME_AT, MODES, TIMES, COLUMNS };
  uint8_t *col[COLUMNS];
  size_t col_len[COLUMNS];
  int ok = 1;
  for (int c = 0; ok && c < COLUMNS; c++) {
    napi_value v;
    ok = napi_get_element(env, argv[3], (uint32_t)c, &v) == NAPI_OK && held_buffer(env, j, v, &col[c], &col_len[c]);
  }
  uint8_t *stats = NULL, *status = NULL, *result = NULL;
  size_t stats_len = 0, status_len = 0, result_len = 0;
  ok = ok && take_base(env, j, argv[4]) && held_buffer(env, j, argv[5], &stats, &stats_len) &&
       held_buffer(env, j, argv[6], &status, &status_len) && held_buffer(env, j, argv[7], &result, &result_len);
  uint8_t *objects = NULL;
  size_t objects_len = 0;
  ok = ok && held_buffer(env, j, argv[9], &objects, &objects_len);
  if (ok && objects_len > 0 &&
      !(objects_len < MANY_PATH_MAX && objects[0] == '/' && objects[objects_len - 1] == '/' &&
        !memchr(objects, 0, objects_len))) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: objects is an absolute directory, with its slash");
    ok = 0;
  }
  if (ok && objects_len > 0) {
    j->objects = objects;
    j->objects_len = objects_len;
  }
  if (ok) {
    /* What the caller hands in must agree with itself before a thread reads through it. */
    size_t n = col_len[NAME_AT] / 4;
    ok = col_len[OIDS] == n * j->hash_len && col_len[MODES] == 4 * n && col_len[TIMES] == 16 * n &&
         col_len[NAME_AT] == 4 * n && stats_len >= n * CREATE_STAT && status_len >= 4 * n && result_len >= 12 &&
         ((uintptr_t)status & 3) == 0 && ((uintptr_t)result & 3) == 0 &&
         (col_len[NAMES] == 0 || col[NAMES][col_len[NAMES] - 1] == 0);
    if (!ok) napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: layAllLater's arguments do not agree");
    j->n = n;
  }
  if (!ok) {
    lay_all_free(env, j);
    return NULL;
  }
  j->oids = col[OIDS];
  j->names = col[NAMES];
  j->names_len = col_len[NAMES];
  j->name_at = col[NAME_AT];
  j->modes = col[MODES];
  j->times = col[TIMES];
  j->stats = stats;
  j->status = (int32_t *)status;
  j->result = (int32_t *)result;
  memset(status, 0, 4 * j->n);
  memset(result, 0, 12);
  return start_job(env, j, threads, lay_all_run, "xet layAllLater");
}

/*
 * layChunkedLater(packs, hashLen, maxBytes, files, base, status, threads) -> Promise of how many it
 * laid. A restore's chunked files written on threads of node's pool, each from its chunks in the
 * packs (whole or as deltas) and hashed whole (src/snapshot/lay-native.ts). files: [name
 * (NUL-ended, relative to base), mode, size, blob id, chunk ids (hashLen bytes each), chunk sizes
 * (uint32 each)] per file, largest first; status: an int32 per file (ALL_LAID, ALL_LEFT: nothing
 * left at its path, 0: not reached). Every buffer is held until the promise settles.
 */
static napi_value lay_chunked_later(napi_env env, napi_callback_info info) {
  napi_value argv[7];
  if (!args_of(env, info, 7, argv, "layChunkedLater(packs, hashLen, maxBytes, files, base, status, threads)"))
    return NULL;
  int64_t threads;
  uint32_t nfiles;
  if (!int_arg(env, argv[6], 1, 64, &threads)) return NULL;
  if (napi_get_array_length(env, argv[3], &nfiles) != NAPI_OK || nfiles > 1 << 20) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: the files are an array");
    return NULL;
  }
  if (!evp_usable()) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: no streaming digest in the process");
    return NULL;
  }
  struct lay_all_job *j = new_job(env, argv, threads, 4 * (size_t)nfiles + 2);
  if (!j) return NULL;
  j->files = calloc(nfiles ? nfiles : 1, sizeof *j->files);
  j->n = nfiles;
  int ok = j->files != NULL;
  if (!ok) napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
  for (uint32_t i = 0; ok && i < nfiles; i++) {
    napi_value one, v;
    uint32_t parts;
    uint8_t *name, *whole, *oids, *sizes;
    size_t name_len, whole_len, oids_len, sizes_len;
    int64_t mode, size;
    ok = napi_get_element(env, argv[3], i, &one) == NAPI_OK && napi_get_array_length(env, one, &parts) == NAPI_OK &&
         parts == 6;
    if (!ok) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a chunked file is [name, mode, size, id, ids, sizes]");
      break;
    }
    ok = napi_get_element(env, one, 0, &v) == NAPI_OK && held_buffer(env, j, v, &name, &name_len) &&
         napi_get_element(env, one, 1, &v) == NAPI_OK && int_arg(env, v, 0, 0177777, &mode) &&
         napi_get_element(env, one, 2, &v) == NAPI_OK && int_arg(env, v, 0, INT64_C(1) << 50, &size) &&
         napi_get_element(env, one, 3, &v) == NAPI_OK && held_buffer(env, j, v, &whole, &whole_len) &&
         napi_get_element(env, one, 4, &v) == NAPI_OK && held_buffer(env, j, v, &oids, &oids_len) &&
         napi_get_element(env, one, 5, &v) == NAPI_OK && held_buffer(env, j, v, &sizes, &sizes_len);
    if (!ok) break;
    size_t count = sizes_len / 4;
    ok = name_len > 1 && memchr(name, 0, name_len) == name + name_len - 1 && whole_len == j->hash_len &&
         sizes_len % 4 == 0 && oids_len == count * j->hash_len && (mode == 0100644 || mode == 0100755);
    if (!ok) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a chunked file's parts do not agree");
      break;
    }
    j->files[i] = (struct chunked_file){name, whole, oids, sizes, (uint32_t)mode, (uint64_t)size, count};
  }
  uint8_t *status = NULL;
  size_t status_len = 0;
  ok = ok && take_base(env, j, argv[4]) && held_buffer(env, j, argv[5], &status, &status_len);
  if (ok && (status_len < 4 * (size_t)nfiles || ((uintptr_t)status & 3) != 0)) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a status per file");
    ok = 0;
  }
  if (!ok) {
    lay_all_free(env, j);
    return NULL;
  }
  j->status = (int32_t *)status;
  memset(status, 0, 4 * (size_t)nfiles);
  return start_job(env, j, threads, lay_chunked_run, "xet layChunkedLater");
}

/* A tree's record in treesInto's `records`: where its data is in the arena and how long, the
 * entries (files) under it, its subtrees, where its name is in `names` and how long, its id. */
#define TREE_RECORD 64
#define TREE_HEADER_ROOM 32 /* "tree <len>\0" goes right before the data, hashed with it */

/* How many bytes the names at a (a_len long) and b (b_len long) share from their start. */
static size_t shared_prefix(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len) {
  size_t max = a_len < b_len ? a_len : b_len, common = 0;
  while (common < max && a[common] == b[common]) common++;
  return common;
}

struct tree_frame {
  size_t name_at, name_len, item_start;
  uint32_t count, children;
};

static const char *mode_text(uint32_t mode) {
  switch (mode) {
  case 0100644: return "100644 ";
  case 0100755: return "100755 ";
  case 0120000: return "120000 ";
  case 0160000: return "160000 ";
  default: return NULL;
  }
}

struct trees_job {
  const uint8_t *names, *modes, *oids;
  size_t n, hash_len;
  const size_t *path_at; /* entry k's path is names[path_at[k] .. path_at[k + 1] - 1) */
  uint8_t *arena;
  size_t arena_len, used;
  uint8_t *records;
  size_t records_len, trees;
  int32_t *items;
  size_t top;
  digest_fn digest;
};

/* Writes the items from `from` up as tree number trees, its record too; 0 when something does
 * not fit or an entry has a mode a tree cannot hold (*bad gets that entry). */
static int write_tree(struct trees_job *j, struct tree_frame *f, size_t *bad) {
  size_t t = j->trees;
  if ((t + 1) * TREE_RECORD > j->records_len) return 0;
  size_t start = j->used + TREE_HEADER_ROOM, at = start;
  for (size_t i = f->item_start; i < j->top; i++) {
    int32_t v = j->items[i];
    const char *mode;
    const uint8_t *name, *id;
    size_t name_len;
    if (v >= 0) {
      size_t k = (size_t)v;
      uint32_t m;
      memcpy(&m, j->modes + 4 * k, 4);
      mode = mode_text(m);
      if (!mode) {
        *bad = k;
        return 0;
      }
      size_t p = j->path_at[k], e = j->path_at[k + 1] - 1, s = e;
      while (s > p && j->names[s - 1] != '/') s--;
      name = j->names + s;
      name_len = e - s;
      id = j->oids + k * j->hash_len;
    } else {
      const uint8_t *r = j->records + (size_t)(-v - 1) * TREE_RECORD;
      uint32_t na, nl;
      memcpy(&na, r + 16, 4);
      memcpy(&nl, r + 20, 4);
      mode = "40000 ";
      name = j->names + na;
      name_len = nl;
      id = r + 32;
    }
    size_t ml = strlen(mode), need = ml + name_len + 1 + j->hash_len;
    if (at + need > j->arena_len) return 0;
    memcpy(j->arena + at, mode, ml);
    memcpy(j->arena + at + ml, name, name_len);
    j->arena[at + ml + name_len] = 0;
    memcpy(j->arena + at + ml + name_len + 1, id, j->hash_len);
    at += need;
  }
  char header[TREE_HEADER_ROOM];
  int hl = snprintf(header, sizeof header, "tree %zu", at - start) + 1; /* with its NUL */
  memcpy(j->arena + start - hl, header, (size_t)hl);
  uint8_t *r = j->records + t * TREE_RECORD;
  memset(r, 0, TREE_RECORD);
  uint32_t fields[6] = {(uint32_t)start, (uint32_t)(at - start), f->count, f->children, (uint32_t)f->name_at,
                        (uint32_t)f->name_len};
  memcpy(r, fields, sizeof fields);
  if (!j->digest(j->arena + start - hl, (size_t)hl + (at - start), r + 32)) return 0;
  j->used = at;
  j->trees++;
  return 1;
}

/* Closes the directory open at stack[depth]: its tree is written, and it becomes one item (a
 * subtree) of its parent, which takes its entry count. */
static int close_frame(struct trees_job *j, struct tree_frame *stack, size_t depth, size_t *bad) {
  struct tree_frame *f = &stack[depth];
  if (!write_tree(j, f, bad)) return 0;
  j->top = f->item_start;
  j->items[j->top++] = -(int32_t)j->trees;
  stack[depth - 1].count += f->count;
  stack[depth - 1].children++;
  return 1;
}

/*
 * treesInto(names, modes, oids, hashLen, arena, records) -> trees written, or
 *   -1: arena or records too small (records' first 16 bytes then hold the arena bytes and the tree
 *       count needed, two uint64 in host order), -2: no digest function for hashLen, -3: the bound
 *       was wrong (a defect), -4 - k: entry k's mode is not one a tree holds.
 * names: the paths (sorted by bytes, '/'-separated, none another's directory), each ending in a
 * NUL; modes: a uint32 per entry (host order); oids: hashLen bytes per entry. Trees are written in
 * the order they close (children before their parents, the root last), each record TREE_RECORD
 * bytes: uint32 data start, data length, entries under it, subtrees, name start (in names), name
 * length; its id at byte 32.
 */
static napi_value trees_into(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  struct trees_job j;
  memset(&j, 0, sizeof j);
  size_t names_len, modes_len, oids_len;
  int64_t hash_len;
  if (!args_of(env, info, 6, argv, "treesInto(names, modes, oids, hashLen, arena, records)")) return NULL;
  if (!buffer_arg(env, argv[0], (uint8_t **)&j.names, &names_len) ||
      !buffer_arg(env, argv[1], (uint8_t **)&j.modes, &modes_len) ||
      !buffer_arg(env, argv[2], (uint8_t **)&j.oids, &oids_len) || !int_arg(env, argv[3], 20, 32, &hash_len) ||
      !buffer_arg(env, argv[4], &j.arena, &j.arena_len) || !buffer_arg(env, argv[5], &j.records, &j.records_len))
    return NULL;
  if (!nul_ended(env, j.names, names_len)) return NULL;
  if (j.records_len < 16) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: records must hold 16 bytes");
    return NULL;
  }
  if (hash_len != 20 && hash_len != 32) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: a hash length is 20 or 32");
    return NULL;
  }
  j.hash_len = (size_t)hash_len;
  size_t n = count_names(j.names, names_len);
  /* A mode per name exactly: the caller's modes follow its paths, so a names buffer that does not
   * hold every path (or holds more) is refused rather than built into a smaller tree. */
  if (modes_len != 4 * n || oids_len < n * j.hash_len) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: not a mode per name, or fewer ids than names");
    return NULL;
  }
  /* After the arguments are checked: a bad call is refused even where the digests are missing. */
  j.digest = digest_of(j.hash_len);
  if (!j.digest) return int64(env, -2);
  j.n = n;
  size_t *path_at = malloc((n + 1) * sizeof *path_at);
  if (!path_at) return int64(env, -1);
  /* The directories: one opens wherever a path has a '/' beyond what it shares with the path
   * before it, up to that one's last '/'. */
  size_t dirs = 0, prev = 0, prev_len = 0, at = 0, dir_name_bytes = 0;
  for (size_t k = 0; k < n; k++) {
    size_t len = strlen((const char *)j.names + at);
    path_at[k] = at;
    size_t common = k ? shared_prefix(j.names + prev, prev_len, j.names + at, len) : 0;
    /* The shared directories end at the last '/' within the common part. */
    size_t from = common;
    while (from > 0 && j.names[at + from - 1] != '/') from--;
    for (size_t i = from; i < len; i++)
      if (j.names[at + i] == '/') {
        dirs++;
        dir_name_bytes += i - from;
        from = i + 1;
      }
    prev = at;
    prev_len = len;
    at += len + 1;
  }
  path_at[n] = at;
  size_t trees = dirs + 1;
  size_t need = names_len + dir_name_bytes + n * (8 + j.hash_len) + trees * (8 + j.hash_len + TREE_HEADER_ROOM);
  if (j.arena_len < need || j.records_len < trees * TREE_RECORD || need > UINT32_MAX) {
    uint64_t sizes[2] = {need, trees};
    memcpy(j.records, sizes, 16);
    free(path_at);
    return int64(env, -1);
  }
  j.path_at = path_at;
  j.items = malloc((n + trees) * sizeof *j.items);
  struct tree_frame *stack = malloc((trees + 1) * sizeof *stack);
  size_t *open_end = malloc((trees + 1) * sizeof *open_end);
  int64_t result = -1;
  if (!j.items || !stack || !open_end) goto done;
  size_t depth = 0, bad = SIZE_MAX;
  memset(&stack[0], 0, sizeof stack[0]);
  prev = 0;
  prev_len = 0;
  for (size_t k = 0; k < n; k++) {
    size_t p = path_at[k], len = path_at[k + 1] - p - 1;
    size_t common = k ? shared_prefix(j.names + prev, prev_len, j.names + p, len) : 0;
    size_t keep = 0;
    while (keep < depth && open_end[keep] < common) keep++;
    for (; depth > keep; depth--)
      if (!close_frame(&j, stack, depth, &bad)) goto failed;
    size_t from = depth ? open_end[depth - 1] + 1 : 0;
    for (size_t i = from; i < len; i++)
      if (j.names[p + i] == '/') {
        depth++;
        stack[depth].name_at = p + from;
        stack[depth].name_len = i - from;
        stack[depth].item_start = j.top;
        stack[depth].count = 0;
        stack[depth].children = 0;
        open_end[depth - 1] = i;
        from = i + 1;
      }
    j.items[j.top++] = (int32_t)k;
    stack[depth].count++;
    prev = p;
    prev_len = len;
  }
  for (; depth > 0; depth--)
    if (!close_frame(&j, stack, depth, &bad)) goto failed;
  if (!write_tree(&j, &stack[0], &bad)) goto failed;
  result = (int64_t)j.trees;
  goto done;
failed:
  result = bad != SIZE_MAX ? -4 - (int64_t)bad : -3;
done:
  free(path_at);
  free(j.items);
  free(stack);
  free(open_end);
  return int64(env, result);
}

/*
 * indexEntriesInto(names, rows, stat, oid, hashLen, version, dst, at) -> where the entries end in
 *   dst, or -1 when they would not fit or a row is outside stat or oid.
 * An index's entries (gitformat-index(5), version 2 or 4) for the paths in names (each ending in a
 * NUL), entry k's 40 bytes of stat data at rows[k] * 40 of stat and its id at rows[k] * hashLen of
 * oid (rows: a uint32 per entry, host order). dst must be zeroed (version 2 pads with NULs).
 */
static napi_value index_entries_into(napi_env env, napi_callback_info info) {
  napi_value argv[8];
  uint8_t *names, *rows, *stat, *oid, *dst;
  size_t names_len, rows_len, stat_len, oid_len, dst_len;
  int64_t hash_len, version, at;
  if (!args_of(env, info, 8, argv, "indexEntriesInto(names, rows, stat, oid, hashLen, version, dst, at)"))
    return NULL;
  if (!buffer_arg(env, argv[0], &names, &names_len) || !buffer_arg(env, argv[1], &rows, &rows_len) ||
      !buffer_arg(env, argv[2], &stat, &stat_len) || !buffer_arg(env, argv[3], &oid, &oid_len) ||
      !int_arg(env, argv[4], 20, 32, &hash_len) || !int_arg(env, argv[5], 2, 4, &version) ||
      !buffer_arg(env, argv[6], &dst, &dst_len) || !int_arg(env, argv[7], 0, INT64_MAX, &at))
    return NULL;
  if (!nul_ended(env, names, names_len)) return NULL;
  if (version == 3 || (hash_len != 20 && hash_len != 32)) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: index version 2 or 4, hash length 20 or 32");
    return NULL;
  }
  size_t hl = (size_t)hash_len, pos = (size_t)at, from = 0, prev = 0, prev_len = 0, k = 0;
  if (pos > dst_len) return int64(env, -1);
  while (from < names_len) {
    size_t len = strlen((const char *)names + from);
    if (4 * (k + 1) > rows_len) return int64(env, -1);
    uint32_t row;
    memcpy(&row, rows + 4 * k, 4);
    if (((size_t)row + 1) * 40 > stat_len || ((size_t)row + 1) * hl > oid_len) return int64(env, -1);
    size_t start = pos;
    /* The largest an entry takes: stat, id, flags, a 4-byte prefix length or 8 NULs, the name. */
    if (dst_len - pos < 40 + hl + 2 + 8 + len + 1) return int64(env, -1);
    memcpy(dst + pos, stat + (size_t)row * 40, 40);
    memcpy(dst + pos + 40, oid + (size_t)row * hl, hl);
    pos += 40 + hl;
    size_t flag = len < 0xfff ? len : 0xfff;
    dst[pos++] = (uint8_t)(flag >> 8);
    dst[pos++] = (uint8_t)(flag & 0xff);
    if (version == 4) {
      size_t common = k ? shared_prefix(names + prev, prev_len, names + from, len) : 0;
      /* git's offset varint: 7 bits a byte, most significant first, each continuation minus one. */
      uint8_t tmp[16];
      size_t value = k ? prev_len - common : 0, v = 15;
      tmp[v] = value & 127;
      while (value >>= 7) tmp[--v] = 128 | (--value & 127);
      memcpy(dst + pos, tmp + v, 16 - v);
      pos += 16 - v;
      memcpy(dst + pos, names + from + common, len - common);
      pos += len - common;
      dst[pos++] = 0;
    } else {
      memcpy(dst + pos, names + from, len);
      pos += len;
      pos = start + ((pos - start + 8) & ~(size_t)7);
    }
    prev = from;
    prev_len = len;
    from += len + 1;
    k++;
  }
  if (4 * k != rows_len) return int64(env, -1);
  return int64(env, (int64_t)pos);
}

/* reuseUnchanged: a re-capture's common case decided for every path in one pass (src/snapshot/
 * stat-reuse.ts holds the rule and its JavaScript twin, which decides every other case): a path
 * whose lstat row is a regular file or symlink with one link, smaller than size_below, whose stat
 * cache entry (at match[i] in index) records exactly that stat data and is not racy, gets the
 * entry's stat data and id, and slot[i] = 1; every other path is left as it was. The row's doubles
 * are compared as the JavaScript compares them (a value an entry's 32 bits cannot hold never
 * matches). How many paths it decided. */
static napi_value reuse_unchanged(napi_env env, napi_callback_info info) {
  napi_value argv[11];
  uint8_t *rows_b, *match_b, *idx, *stat, *oid, *slot, *mt_b, *nl_b, *sz_b;
  size_t rows_len, match_len, idx_len, stat_len, oid_len, slot_len, mt_len, nl_len, sz_len;
  int64_t hash_len;
  double racy_from, size_below;
  if (!args_of(env, info, 11, argv,
               "reuseUnchanged(rows, match, index, hashLen, racyFrom, sizeBelow, stat, oid, slot, mtimeSec, nlinkSize)"))
    return NULL;
  if (!buffer_arg(env, argv[0], &rows_b, &rows_len) || !buffer_arg(env, argv[1], &match_b, &match_len) ||
      !buffer_arg(env, argv[2], &idx, &idx_len) || !int_arg(env, argv[3], 20, 32, &hash_len) ||
      napi_get_value_double(env, argv[4], &racy_from) != NAPI_OK ||
      napi_get_value_double(env, argv[5], &size_below) != NAPI_OK || !buffer_arg(env, argv[6], &stat, &stat_len) ||
      !buffer_arg(env, argv[7], &oid, &oid_len) || !buffer_arg(env, argv[8], &slot, &slot_len) ||
      !buffer_arg(env, argv[9], &mt_b, &mt_len) || !buffer_arg(env, argv[10], &nl_b, &nl_len))
    return NULL;
  size_t n = slot_len, hl = (size_t)hash_len;
  /* nlinkSize: the nlink column, then the size column (n doubles each). */
  sz_b = nl_b + 8 * n;
  sz_len = nl_len >= 8 * n ? nl_len - 8 * n : 0;
  if ((hl != 20 && hl != 32) || rows_len != 8 * STAT_ROW * n || match_len != 4 * n || stat_len != 40 * n ||
      oid_len != hl * n || mt_len != 8 * n || nl_len != 16 * n || sz_len != 8 * n ||
      ((uintptr_t)rows_b & 7) != 0 || ((uintptr_t)match_b & 3) != 0 || ((uintptr_t)mt_b & 7) != 0 ||
      ((uintptr_t)nl_b & 7) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: reuseUnchanged's columns do not fit");
    return NULL;
  }
  const double *rows = (const double *)rows_b;
  const int32_t *match = (const int32_t *)match_b;
  double *mtime_sec = (double *)mt_b, *nlink = (double *)nl_b, *size_out = (double *)sz_b;
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    const double *row = rows + i * STAT_ROW;
    int32_t o = match[i];
    if (row[0] != 0 || o < 0 || (size_t)o + 40 + hl > idx_len) continue;
    double mode_d = row[1];
    if (!(mode_d >= 0 && mode_d < 4294967296.0)) continue;
    uint32_t st_mode = (uint32_t)mode_d, type = st_mode & 0170000, mode;
    if (type == 0100000) mode = (st_mode & 0100) ? 0100755 : 0100644;
    else if (type == 0120000) mode = 0120000;
    else continue;
    double size = row[2], links = row[3], ino = row[4], uid = row[6], gid = row[7];
    if (!(size >= 0 && size < size_below && size < 4294967296.0) || links != 1) continue;
    if (!(ino >= 0 && ino < 9007199254740992.0) || (double)(uint64_t)ino != ino || !(uid >= 0 && uid < 4294967296.0) ||
        !(gid >= 0 && gid < 4294967296.0))
      continue;
    const uint8_t *e = idx + o;
    uint32_t mtime = be32_at(e + 8);
    if (be32_at(e + 24) != mode || (double)be32_at(e + 36) != size ||
        be32_at(e + 20) != (uint32_t)((uint64_t)ino & 0xffffffffu) || be32_at(e + 28) != (uint32_t)uid ||
        be32_at(e + 32) != (uint32_t)gid || (double)mtime != row[8] || (double)be32_at(e + 12) != row[9] ||
        (double)be32_at(e + 0) != row[10] || (double)be32_at(e + 4) != row[11] || !((double)mtime < racy_from))
      continue;
    memcpy(stat + 40 * i, e, 40);
    memcpy(oid + hl * i, e + 40, hl);
    slot[i] = 1;
    mtime_sec[i] = mtime;
    nlink[i] = links;
    size_out[i] = size;
    count++;
  }
  return int64(env, (int64_t)count);
}

/* indexMatch: a capture's stat cache is a git index of every path of the worktree, and each path is
 * looked up in it. Node parsed it into an object and a string per entry, and a Map by path (~45 ms
 * of a re-capture's 1 s). Both lists are sorted by bytes (git sorts an index by name, then stage),
 * so one merge finds every path; nothing is allocated but the longest name (version 4 rebuilds each
 * from the previous one). Every length is checked against the buffer: a damaged index is -1. */
static int cmp_bytes(const uint8_t *a, size_t al, const uint8_t *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  return c ? c : (al < bl ? -1 : al > bl ? 1 : 0);
}

static napi_value index_match(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  uint8_t *idx, *names, *match_b, *offs_b;
  size_t idx_len, names_len, match_len, offs_len;
  int64_t hash_len;
  if (!args_of(env, info, 5, argv, "indexMatch(index, hashLen, names, match, offsets)")) return NULL;
  if (!buffer_arg(env, argv[0], &idx, &idx_len) || !int_arg(env, argv[1], 20, 32, &hash_len) ||
      !buffer_arg(env, argv[2], &names, &names_len) || !buffer_arg(env, argv[3], &match_b, &match_len) ||
      !buffer_arg(env, argv[4], &offs_b, &offs_len))
    return NULL;
  if (hash_len != 20 && hash_len != 32) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: hashLen must be 20 or 32");
    return NULL;
  }
  if (!nul_ended(env, names, names_len)) return NULL;
  if (((uintptr_t)match_b & 3) != 0 || ((uintptr_t)offs_b & 3) != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: match and offsets must be 4-byte aligned");
    return NULL;
  }
  size_t nnames = count_names(names, names_len);
  if (match_len != 4 * nnames) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: match must hold one int32 per name");
    return NULL;
  }
  int32_t *match = (int32_t *)match_b, *offs = (int32_t *)offs_b;
  size_t hl = (size_t)hash_len;
  if (idx_len < 12 + hl || idx_len > INT32_MAX || memcmp(idx, "DIRC", 4) != 0) return int64(env, -1);
  uint32_t version = be32_at(idx + 4);
  uint32_t count = be32_at(idx + 8);
  if (version < 2 || version > 4) return int64(env, -1);
  if (offs_len != 4 * (size_t)count) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "xet native: offsets must hold one int32 per entry");
    return NULL;
  }
  size_t limit = idx_len - hl, off = 12;
  uint8_t *prev = NULL;
  size_t prev_len = 0, prev_cap = 0;
  size_t at_name = 0, k = 0; /* the next of `names` to match, and its index */
  int bad = 0;
  for (uint32_t n = 0; n < count && !bad; n++) {
    size_t flags_at = off + 40 + hl;
    if (flags_at + 2 > limit) {
      bad = 1;
      break;
    }
    unsigned flags = ((unsigned)idx[flags_at] << 8) | idx[flags_at + 1];
    size_t at = flags_at + 2 + ((version >= 3 && (flags & 0x4000)) ? 2 : 0);
    const uint8_t *name;
    size_t len;
    if (at > limit) {
      bad = 1;
      break;
    }
    if (version == 4) {
      /* The number of bytes to drop from the previous name, as git's varint (offset encoding). */
      if (at >= limit) {
        bad = 1;
        break;
      }
      unsigned c = idx[at++];
      size_t drop = c & 127;
      while ((c & 128) && !bad) {
        if (at >= limit || drop > (SIZE_MAX >> 8)) {
          bad = 1;
          break;
        }
        c = idx[at++];
        drop = ((drop + 1) << 7) | (c & 127);
      }
      if (bad) break;
      const uint8_t *end = memchr(idx + at, 0, limit - at);
      if (!end || drop > prev_len) {
        bad = 1;
        break;
      }
      size_t keep = prev_len - drop, suffix = (size_t)(end - (idx + at));
      if (keep + suffix > prev_cap) {
        size_t cap = 2 * (keep + suffix) + 256;
        uint8_t *grown = realloc(prev, cap);
        if (!grown) {
          free(prev);
          napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
          return NULL;
        }
        prev = grown;
        prev_cap = cap;
      }
      memcpy(prev + keep, idx + at, suffix);
      prev_len = keep + suffix;
      name = prev;
      len = prev_len;
      off = (size_t)(end - idx) + 1;
    } else {
      const uint8_t *end = memchr(idx + at, 0, limit - at);
      if (!end) {
        bad = 1;
        break;
      }
      name = idx + at;
      len = (size_t)(end - name);
      off += ((size_t)(end - (idx + off)) + 8) & ~(size_t)7;
      if (off > limit) {
        bad = 1;
        break;
      }
    }
    offs[n] = (int32_t)(flags_at - hl - 40);
    if (((flags >> 12) & 3) != 0) continue;
    /* Names before this entry's have no entry; an equal one has this one. */
    while (at_name < names_len) {
      size_t nl = strlen((const char *)names + at_name);
      int c = cmp_bytes(names + at_name, nl, name, len);
      if (c > 0) break;
      match[k++] = c == 0 ? offs[n] : -1;
      at_name += nl + 1;
      if (c == 0) break;
    }
  }
  free(prev);
  if (bad) return int64(env, -1);
  for (; k < nnames; k++) match[k] = -1;
  return int64(env, (int64_t)off);
}

/* readDirs. The walk in src/snapshot/walk.ts decides what a capture takes; this only reads the
 * directories it will ask for, ahead of it, so each listing is exactly what node's readdirSync would
 * give: the names of a directory but "." and "..", sorted by bytes (libuv's scandir sorts with
 * strcmp), each with its d_type. A directory that could not be read has its errno and no entries:
 * the walk then reads it itself and meets the error in node's words.
 *
 * Two threads share a queue of directories (a system call costs ~3 us in this VM; a worktree has
 * thousands of directories). Each listing is private to the thread that reads it until it is
 * published under the lock; the result is laid out in queue order once both have stopped.
 *
 * The Buffer: int32 ndirs, nentries, names_bytes, 0; per directory int32 first entry, entry count,
 * errno; per entry int32 the listing of the directory it names (-1: not read); per entry a uint8
 * kind (0 unknown, 1 file, 2 directory, 3 symlink, 4 fifo, 5 socket, 6 block device, 7 character
 * device), padded to 4 bytes; then every name, each ending in a NUL, in entry order. */
struct rd_dir {
  char *rel; /* relative to root, "" for root itself */
  size_t rel_len;
  char *names; /* NUL-ended, sorted */
  size_t names_len;
  uint8_t *kinds;
  int32_t *child;
  uint32_t count;
  int err;
};

struct rd_walk {
  int root;
  char **skip; /* sorted by strcmp */
  size_t nskip;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  struct rd_dir **dirs;
  size_t ndirs, cap, next, busy;
  int oom;
};

static int rd_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int rd_skipped(struct rd_walk *w, const char *rel) {
  return w->nskip && bsearch(&rel, w->skip, w->nskip, sizeof *w->skip, rd_cmp_str) != NULL;
}

static uint8_t rd_kind(unsigned char t) {
  switch (t) {
  case DT_REG: return 1;
  case DT_DIR: return 2;
  case DT_LNK: return 3;
  case DT_FIFO: return 4;
  case DT_SOCK: return 5;
  case DT_BLK: return 6;
  case DT_CHR: return 7;
  default: return 0;
  }
}

/* Appends a directory to the queue (the lock held); its index, or -1 out of memory. */
static int32_t rd_queue(struct rd_walk *w, char *rel, size_t rel_len) {
  if (w->ndirs == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 256;
    struct rd_dir **d = realloc(w->dirs, cap * sizeof *d);
    if (!d) return -1;
    w->dirs = d;
    w->cap = cap;
  }
  if (w->ndirs >= INT32_MAX) return -1;
  struct rd_dir *d = calloc(1, sizeof *d);
  if (!d) return -1;
  d->rel = rel;
  d->rel_len = rel_len;
  w->dirs[w->ndirs] = d;
  return (int32_t)w->ndirs++;
}

struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Reads one directory into d (fields other than rel); 0, an errno, or -1 out of memory. */
static int rd_read(struct rd_walk *w, struct rd_dir *d, char **pairs_out, size_t *n_out) {
  int fd = openat(w->root, d->rel_len ? d->rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  /* Entries as "kind byte + name + NUL" records in one growing block, then sorted through pointers. */
  size_t cap = 4096, len = 0, n = 0;
  char *block = malloc(cap);
  char buf[32768];
  int err = block ? 0 : -1;
  while (!err) {
    long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (got < 0) {
      err = errno;
      break;
    }
    if (got == 0) break;
    for (long at = 0; at < got && !err;) {
      struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + at);
      at += e->d_reclen;
      const char *name = e->d_name;
      if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
      size_t nl = strlen(name);
      if (len + nl + 2 > cap) {
        while (len + nl + 2 > cap) cap *= 2;
        char *grown = realloc(block, cap);
        if (!grown) {
          err = -1;
          break;
        }
        block = grown;
      }
      block[len] = (char)rd_kind(e->d_type);
      memcpy(block + len + 1, name, nl + 1);
      len += nl + 2;
      n++;
    }
  }
  close(fd);
  if (err) {
    free(block);
    return err;
  }
  *pairs_out = block;
  *n_out = n;
  d->names_len = len - n; /* without the kind bytes */
  return 0;
}

static int rd_cmp_entry(const void *a, const void *b) {
  return strcmp(*(char *const *)a + 1, *(char *const *)b + 1);
}

/* One directory: read, sorted, its subdirectories queued, published. 0, or -1 out of memory. */
static int rd_one(struct rd_walk *w, struct rd_dir *d) {
  char *block = NULL;
  size_t n = 0;
  int err = rd_read(w, d, &block, &n);
  if (err == -1) return -1;
  if (err) {
    pthread_mutex_lock(&w->lock);
    d->err = err;
    d->names_len = 0;
    pthread_mutex_unlock(&w->lock);
    return 0;
  }
  char **order = malloc((n ? n : 1) * sizeof *order);
  char *names = malloc(d->names_len ? d->names_len : 1);
  uint8_t *kinds = malloc(n ? n : 1);
  int32_t *child = malloc((n ? n : 1) * sizeof *child);
  char **subs = malloc((n ? n : 1) * sizeof *subs);
  size_t *sub_at = malloc((n ? n : 1) * sizeof *sub_at);
  size_t nsubs = 0;
  if (!order || !names || !kinds || !child || !subs || !sub_at) goto failed;
  for (size_t i = 0, at = 0; i < n; i++) {
    order[i] = block + at;
    at += strlen(block + at + 1) + 2;
  }
  qsort(order, n, sizeof *order, rd_cmp_entry);
  /* A repository inside (a .git here, not at the root): the walk decides whether its files are
   * this tree's, and reads its subdirectories itself when they are. */
  int inner = 0;
  if (d->rel_len)
    for (size_t i = 0; i < n; i++) inner |= strcmp(order[i] + 1, ".git") == 0;
  for (size_t i = 0, at = 0; i < n; i++) {
    const char *name = order[i] + 1;
    size_t nl = strlen(name);
    kinds[i] = (uint8_t)order[i][0];
    child[i] = -1;
    memcpy(names + at, name, nl + 1);
    at += nl + 1;
    if (kinds[i] != 2 || inner || strcasecmp(name, ".git") == 0) continue;
    char *rel = malloc(d->rel_len + nl + 2);
    if (!rel) goto failed;
    if (d->rel_len) {
      memcpy(rel, d->rel, d->rel_len);
      rel[d->rel_len] = '/';
      memcpy(rel + d->rel_len + 1, name, nl + 1);
    } else
      memcpy(rel, name, nl + 1);
    if (rd_skipped(w, rel)) {
      free(rel);
      continue;
    }
    subs[nsubs] = rel;
    sub_at[nsubs++] = i;
  }
  free(order);
  free(block);
  int oom = 0;
  pthread_mutex_lock(&w->lock);
  for (size_t k = 0; k < nsubs; k++) {
    int32_t idx = oom ? -1 : rd_queue(w, subs[k], strlen(subs[k]));
    if (idx < 0) {
      oom = 1;
      free(subs[k]);
      continue;
    }
    child[sub_at[k]] = idx;
  }
  d->names = names;
  d->kinds = kinds;
  d->child = child;
  d->count = (uint32_t)n;
  pthread_mutex_unlock(&w->lock);
  free(subs);
  free(sub_at);
  return oom ? -1 : 0;
failed: /* nothing published yet: everything read so far is this thread's to free */
  for (size_t k = 0; k < nsubs; k++) free(subs[k]);
  free(order), free(names), free(kinds), free(child), free(subs), free(sub_at), free(block);
  return -1;
}

static void *rd_run(void *arg) {
  struct rd_walk *w = arg;
  pthread_mutex_lock(&w->lock);
  for (;;) {
    while (w->next == w->ndirs && w->busy > 0 && !w->oom) pthread_cond_wait(&w->wake, &w->lock);
    if (w->oom || w->next == w->ndirs) break; /* nothing queued and nobody reading: done */
    struct rd_dir *d = w->dirs[w->next++];
    w->busy++;
    pthread_mutex_unlock(&w->lock);
    int r = rd_one(w, d);
    pthread_mutex_lock(&w->lock);
    if (r < 0) w->oom = 1;
    w->busy--;
    pthread_cond_broadcast(&w->wake);
  }
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

static void rd_free(struct rd_walk *w) {
  for (size_t i = 0; i < w->ndirs; i++) {
    struct rd_dir *d = w->dirs[i];
    free(d->rel), free(d->names), free(d->kinds), free(d->child), free(d);
  }
  free(w->dirs);
  free(w->skip);
}

static napi_value read_dirs(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  uint8_t *skip_b;
  size_t skip_len;
  if (!args_of(env, info, 2, argv, "readDirs(root, skip)")) return NULL;
  if (!buffer_arg(env, argv[1], &skip_b, &skip_len) || !nul_ended(env, skip_b, skip_len)) return NULL;
  char *root = string_arg(env, argv[0]);
  if (!root) return NULL;
  struct rd_walk w = {0};
  w.root = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  free(root);
  if (w.root < 0) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: readDirs could not open its root directory");
    return NULL;
  }
  /* The skip list points into the caller's Buffer, which outlives this call. */
  char **skip = string_list(skip_b, skip_len);
  char *top = calloc(1, 1);
  int ok = skip != NULL && top != NULL;
  if (ok) {
    for (w.nskip = 0; skip[w.nskip]; w.nskip++) {
    }
    qsort(skip, w.nskip, sizeof *skip, rd_cmp_str);
    w.skip = skip;
    ok = rd_queue(&w, top, 0) == 0;
  }
  if (!ok) {
    if (!w.ndirs) free(top);
    if (!w.skip) free(skip);
    rd_free(&w);
    close(w.root);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  pthread_mutex_init(&w.lock, NULL);
  pthread_cond_init(&w.wake, NULL);
  pthread_t helper;
  int two = pthread_create(&helper, NULL, rd_run, &w) == 0;
  rd_run(&w);
  if (two) pthread_join(helper, NULL);
  pthread_mutex_destroy(&w.lock);
  pthread_cond_destroy(&w.wake);
  close(w.root);
  napi_value out = NULL;
  size_t nentries = 0, names_bytes = 0;
  for (size_t i = 0; i < w.ndirs; i++) nentries += w.dirs[i]->count, names_bytes += w.dirs[i]->names_len;
  size_t kinds_padded = (nentries + 3) & ~(size_t)3;
  size_t total = 16 + 12 * w.ndirs + 4 * nentries + kinds_padded + names_bytes;
  void *data = NULL;
  if (w.oom || nentries > INT32_MAX || names_bytes > INT32_MAX) {
    rd_free(&w);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: readDirs ran out of memory");
    return NULL;
  }
  if (napi_create_buffer(env, total, &data, &out) != NAPI_OK) {
    rd_free(&w);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  uint8_t *o = data;
  int32_t head[4] = {(int32_t)w.ndirs, (int32_t)nentries, (int32_t)names_bytes, 0};
  memcpy(o, head, 16);
  uint8_t *dirs_at = o + 16, *child_at = dirs_at + 12 * w.ndirs, *kinds_at = child_at + 4 * nentries;
  uint8_t *names_at = kinds_at + kinds_padded;
  memset(kinds_at + nentries, 0, kinds_padded - nentries);
  size_t first = 0;
  for (size_t i = 0; i < w.ndirs; i++) {
    struct rd_dir *d = w.dirs[i];
    int32_t rec[3] = {(int32_t)first, (int32_t)d->count, d->err};
    memcpy(dirs_at + 12 * i, rec, 12);
    if (d->count) {
      memcpy(child_at + 4 * first, d->child, 4 * (size_t)d->count);
      memcpy(kinds_at + first, d->kinds, d->count);
    }
    if (d->names_len) memcpy(names_at, d->names, d->names_len);
    names_at += d->names_len;
    first += d->count;
  }
  rd_free(&w);
  return out;
}

static napi_value watch_open(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  if (napi_get_cb_info(env, info, &argc, NULL, NULL, NULL) != NAPI_OK || argc != 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_COUNT", "watchOpen()");
    return NULL;
  }
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  return int64(env, fd < 0 ? -errno : fd);
}

static napi_value watch_add(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  int64_t fd, mask;
  if (!args_of(env, info, 3, argv, "watchAdd(fd, dir, mask)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT32_MAX, &fd) || !int_arg(env, argv[2], 1, UINT32_MAX, &mask)) return NULL;
  char *dir = string_arg(env, argv[1]);
  if (!dir) return NULL;
  /* Never a symlink's target, and only a directory: a path that became something else meanwhile
   * fails instead of watching what it now names. */
  int wd = inotify_add_watch((int)fd, dir, (uint32_t)mask | IN_DONT_FOLLOW | IN_ONLYDIR);
  int err = wd < 0 ? errno : 0;
  free(dir);
  return int64(env, wd < 0 ? -err : wd);
}

static napi_value watch_read(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  int64_t fd;
  uint8_t *out;
  size_t out_len;
  if (!args_of(env, info, 2, argv, "watchRead(fd, out)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT32_MAX, &fd) || !buffer_arg(env, argv[1], &out, &out_len)) return NULL;
  ssize_t r;
  do
    r = read((int)fd, out, out_len);
  while (r < 0 && errno == EINTR);
  if (r < 0) return int64(env, errno == EAGAIN ? 0 : -errno);
  return int64(env, r);
}

static napi_value watch_remove(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  int64_t fd, wd;
  if (!args_of(env, info, 2, argv, "watchRemove(fd, wd)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT32_MAX, &fd) || !int_arg(env, argv[1], 0, INT32_MAX, &wd)) return NULL;
  return int64(env, inotify_rm_watch((int)fd, (int)wd) == 0 ? 0 : -errno);
}

static napi_value poll_pri(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t fd;
  if (!args_of(env, info, 1, argv, "pollPri(fd)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT32_MAX, &fd)) return NULL;
  struct pollfd p = {(int)fd, POLLPRI, 0};
  int r;
  do
    r = poll(&p, 1, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) return int64(env, -errno);
  return int64(env, r > 0 && (p.revents & (POLLPRI | POLLERR)) ? 1 : 0);
}


/* A pack mapped whole for a restore's worker (src/git/pack-reader.ts, mapped packs): its read()
 * calls copied every window (~0.2 s of each worker on the bench tree); a mapping is read in place.
 * Read only and private; unmapped when the Buffer is collected. Packs are never rewritten in place
 * (git writes new ones and renames them), which is what makes a mapping of one safe: git maps them
 * the same way. */
/* The mappings mapFile made and has not unmapped: forgetPagesLater acts only on one of these. */
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping {
  void *at;
  size_t len;
} *mappings;
static size_t nmappings, mappings_cap;

static void mapping_added(void *at, size_t len) {
  pthread_mutex_lock(&mappings_lock);
  if (nmappings == mappings_cap) {
    size_t cap = mappings_cap ? 2 * mappings_cap : 16;
    struct mapping *more = realloc(mappings, cap * sizeof *more);
    if (more) {
      mappings = more;
      mappings_cap = cap;
    }
  }
  if (nmappings < mappings_cap) mappings[nmappings++] = (struct mapping){at, len};
  pthread_mutex_unlock(&mappings_lock);
}

static int mapping_known(void *at, size_t len, int forget) {
  int known = 0;
  pthread_mutex_lock(&mappings_lock);
  for (size_t i = 0; i < nmappings && !known; i++) {
    if (mappings[i].at != at || mappings[i].len != len) continue;
    known = 1;
    if (forget) mappings[i] = mappings[--nmappings];
  }
  pthread_mutex_unlock(&mappings_lock);
  return known;
}

static void unmap_file(napi_env env, void *data, void *hint) {
  (void)env;
  mapping_known(data, (size_t)(uintptr_t)hint, 1);
  munmap(data, (size_t)(uintptr_t)hint);
}

/* forgetPagesLater(mapping) -> Promise: the pages of a mapping mapFile made dropped from this
 * process on a thread of node's pool (madvise MADV_DONTNEED: a read-only private file mapping
 * refaults them from the file if it is read again, so nothing it holds changes). Tearing down the
 * page tables of a pack read through whole (~60,000 pages for the bench tree's 246 MB) cost the main
 * thread ~11 ms when the Buffer was collected at exit; this moves it beside what runs next. The
 * Buffer is held until it is done. Anything but a mapping mapFile made is left alone (resolves to
 * false). */
struct forget_job {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref ref;
  void *at;
  size_t len;
  int known;
};

static void forget_run(napi_env env, void *data) {
  (void)env;
  struct forget_job *f = data;
  if (f->known) madvise(f->at, f->len, MADV_DONTNEED);
}

static void forget_done(napi_env env, napi_status status, void *data) {
  (void)status;
  struct forget_job *f = data;
  napi_value v;
  if (napi_get_boolean(env, f->known != 0, &v) == NAPI_OK) napi_resolve_deferred(env, f->deferred, v);
  napi_delete_reference(env, f->ref);
  napi_delete_async_work(env, f->work);
  free(f);
}

static napi_value forget_pages_later(napi_env env, napi_callback_info info) {
  napi_value argv[1], promise, name;
  if (!args_of(env, info, 1, argv, "forgetPagesLater(mapping)")) return NULL;
  uint8_t *at;
  size_t len;
  if (!buffer_arg(env, argv[0], &at, &len)) return NULL;
  struct forget_job *f = calloc(1, sizeof *f);
  if (!f) {
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: out of memory");
    return NULL;
  }
  f->at = at;
  f->len = len;
  f->known = len > 0 && mapping_known(at, len, 0);
  if (napi_create_reference(env, argv[0], 1, &f->ref) != NAPI_OK ||
      napi_create_string_utf8(env, "xet forgetPagesLater", NAPI_AUTO_LENGTH, &name) != NAPI_OK ||
      napi_create_async_work(env, NULL, name, forget_run, forget_done, f, &f->work) != NAPI_OK ||
      napi_create_promise(env, &f->deferred, &promise) != NAPI_OK || napi_queue_async_work(env, f->work) != NAPI_OK) {
    if (f->work) napi_delete_async_work(env, f->work);
    if (f->ref) napi_delete_reference(env, f->ref);
    free(f);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: forgetPagesLater could not start");
    return NULL;
  }
  return promise;
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  int64_t fd, size;
  if (!args_of(env, info, 2, argv, "mapFile(fd, size)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT32_MAX, &fd) || !int_arg(env, argv[1], 1, INT64_MAX, &size)) return NULL;
  struct stat st;
  if (fstat((int)fd, &st) != 0) return int64(env, -errno);
  /* Never map past the file's end: a touch there would be SIGBUS. */
  if (!S_ISREG(st.st_mode) || st.st_size < size) return int64(env, -EINVAL);
  void *at = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, (int)fd, 0);
  if (at == MAP_FAILED) return int64(env, -errno);
  napi_value out;
  mapping_added(at, (size_t)size);
  if (napi_create_external_buffer(env, (size_t)size, at, unmap_file, (void *)(uintptr_t)size, &out) != NAPI_OK) {
    /* Past the largest Buffer node makes (4 GiB in node 20), which node reports by throwing: the
     * caller reads it another way. */
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
    mapping_known(at, (size_t)size, 1);
    munmap(at, (size_t)size);
    return int64(env, -EFBIG);
  }
  return out;
}

/* Not an offset (glibc's are within +-24:59): git's answer is not known here; the caller lets git
 * write. */
#define TZ_OFFSET_UNKNOWN 100000

/* git's own day count (date.c tm_to_time_t): only 1970-2099, -1 otherwise (git then prints +0000),
 * and leap seconds a right/ zone puts in the broken-down time count as its difference from UTC. */
static int64_t git_tm_to_time_t(const struct tm *tm) {
  static const int mdays[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
  int year = tm->tm_year - 70, month = tm->tm_mon, day = tm->tm_mday;
  if (year < 0 || year > 129 || month < 0 || month > 11) return -1;
  if (month < 2 || (year + 2) % 4) day--;
  if (tm->tm_hour < 0 || tm->tm_min < 0 || tm->tm_sec < 0) return -1;
  return ((int64_t)year * 365 + (year + 1) / 4 + mdays[month] + day) * 24 * 60 * 60 + tm->tm_hour * 60 * 60 +
         tm->tm_min * 60 + tm->tm_sec;
}

static napi_value git_tz_offset(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t seconds;
  if (!args_of(env, info, 1, argv, "gitTzOffset(seconds)")) return NULL;
  if (!int_arg(env, argv[0], 0, INT64_C(4102444799), &seconds)) return NULL;
  time_t t = (time_t)seconds;
  struct tm tm;
  /* localtime_r alone keeps the zone this process first read; tzset() reads TZ and, with TZ unset,
   * /etc/localtime again when it changed. */
  tzset();
  if (!localtime_r(&t, &tm)) return int64(env, TZ_OFFSET_UNKNOWN);
  int64_t local = git_tm_to_time_t(&tm);
  if (local == -1) return int64(env, TZ_OFFSET_UNKNOWN);
  int64_t minutes = (local < seconds ? seconds - local : local - seconds) / 60;
  int64_t hhmm = minutes % 60 + minutes / 60 * 100;
  return int64(env, local < seconds ? -hhmm : hhmm);
}

static int export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == NAPI_OK &&
         napi_set_named_property(env, exports, name, fn) == NAPI_OK;
}

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  struct state *s = calloc(1, sizeof *s);
  if (!s || napi_set_instance_data(env, s, free_state, NULL) != NAPI_OK) {
    free(s);
    napi_throw_error(env, "ERR_XET_NATIVE", "xet native: could not set up");
    return NULL;
  }
  if (!export_fn(env, exports, "deflateInto", deflate_into) || !export_fn(env, exports, "deflateBound", deflate_bound) ||
      !export_fn(env, exports, "inflateInto", inflate_into) || !export_fn(env, exports, "mountOverlay", mount_overlay) ||
      !export_fn(env, exports, "lstatMany", lstat_many) ||
      !export_fn(env, exports, "lstatManyLater", lstat_many_later) || !export_fn(env, exports, "spawnPiped", spawn_piped) ||
      !export_fn(env, exports, "waitPid", wait_pid) || !export_fn(env, exports, "stampMany", stamp_many) ||
      !export_fn(env, exports, "treesInto", trees_into) || !export_fn(env, exports, "indexEntriesInto", index_entries_into) ||
      !export_fn(env, exports, "readDirs", read_dirs) || !export_fn(env, exports, "indexMatch", index_match) ||
      !export_fn(env, exports, "reuseUnchanged", reuse_unchanged) ||
      !export_fn(env, exports, "watchOpen", watch_open) || !export_fn(env, exports, "watchAdd", watch_add) ||
      !export_fn(env, exports, "watchRead", watch_read) || !export_fn(env, exports, "watchRemove", watch_remove) ||
      !export_fn(env, exports, "pollPri", poll_pri) || !export_fn(env, exports, "adler32", adler32_of) ||
      !export_fn(env, exports, "readFile", read_file) || !export_fn(env, exports, "createFile", create_file) ||
      !export_fn(env, exports, "layBlob", lay_blob) || !export_fn(env, exports, "layMany", lay_many) ||
      !export_fn(env, exports, "layAllLater", lay_all_later) ||
      !export_fn(env, exports, "layChunkedLater", lay_chunked_later) || !export_fn(env, exports, "mapFile", map_file) ||
      !export_fn(env, exports, "forgetPagesLater", forget_pages_later) ||
      !export_fn(env, exports, "gitTzOffset", git_tz_offset))
    return NULL;
#ifdef XET_HAVE_ISAL
  if (!export_fn(env, exports, "deflateFastInto", deflate_fast_into)) return NULL;
#endif
  return exports;
}

/* Node-API 6 is the oldest with instance data; node 20 has 9. */
__attribute__((visibility("default"))) int32_t node_api_module_get_api_version_v1(void) { return 6; }
