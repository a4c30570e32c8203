// Laying a snapshot's files into a tree that holds nothing but its git dir, when the snapshot
// records file times (filemeta): the path restore, forks and bases take. Worker threads
// (lay-worker.ts) read each blob from the packs, hash-check it, and write it with its time set,
// reporting the stat data git's index records (native layBlob: one call per file); the main thread
// copies those blocks into the files index. What the workers cannot take (in no local pack and not
// loose, too large to hold, not a file or symlink), the hard-link groups' files (stamped once
// their links exist), symlinks and chunked files are stamped by set-times.ts's Stamper (native
// stampMany, else one python3 process), which returns their stat data too, so no second pass over
// the tree is made. With GIT_XET_LAY=checkout git's checkout writes every file instead (chunked
// files reassembled alongside on this thread, lay-chunked.ts), and the Stamper stamps them all.
//
// Why: docs/DESIGN-NOTES.md "Laying files from the packs (issue 14)".

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { checkoutBesideWork } from '../git/shadow';
import { tracePhase } from '../testing/trace';
import { XetError, type ErrorCode } from '../errors';
import { copyBytes } from '../git/copy-bytes';
import { git, gitText, joinZ, type GitOptions } from '../git/exec';
import { parseIndex, statFields, writeIndexBuffer, writeStat, type ParsedIndex } from '../git/index-file';
import type { ChunkedEntry } from '../chunks/snapshot-files';
import { indexBlobs, type ParsedFileMeta } from './filemeta';
import { rememberChunkIds, writeChunkedFile, writeChunkedFiles, writePlaceholder } from './lay-chunked';
import { NativeLayer } from './lay-native';
import { ChunkList } from '../chunks/reader';
import { LocalPacks } from '../chunks/local-packs';
import { CREATE_STAT, layEntries, type LayDone, type LayFailure, type LayJob } from './lay-worker';
import { Stamper, type StampedStat } from './set-times';
import { diskFull } from '../workspace/tools';

/** Entries a worker claims at once: small enough to balance, large enough to keep messages few. */
const BATCH = 128;
/** Entries left by the native pass that this thread lays itself rather than boot workers for. */
const IN_THREAD_MAX = 2048;
/** Blobs larger than this go through git (which streams them); workers hold one object whole. */
const MAX_OBJECT = 32 * 1024 * 1024;

/** The largest blob laid from memory: tests lower it to send files through git's checkout on a
 * small tree. */
function maxObject(): number {
  return Number(process.env.GIT_XET_TEST_LAY_MAX_OBJECT) || MAX_OBJECT;
}

/** The chunked files laid while the native pass lays the plain entries: their lists read here,
 * then written on the pool's threads (NativeLayer.chunked); what that leaves is written on this
 * thread, the way a worker writes them (the packs read directly, through one buffer). `done` is
 * told of each. */
async function layChunked(
  layer: NativeLayer,
  spec: PackLaySpec,
  chunked: ChunkedEntry[],
  done: (c: ChunkedEntry) => void,
): Promise<void> {
  if (!chunked.length) return;
  const packs = LocalPacks.openDir(spec.objectsDir, spec.format, { reuseWindow: true, mapped: true });
  try {
    const ctx = { git: spec.shadow, format: spec.format, packs };
    const files = await Promise.all(
      chunked.map(async (c) => {
        const list = await ChunkList.fromPointer(c.pointer, c.path, ctx);
        const chunks = await list.chunksFor(0, c.pointer.size);
        return { entry: c, file: { path: c.path, mode: c.mode, size: c.pointer.size, blob: c.pointer.blob, chunks } };
      }),
    );
    const left = new Set(
      await layer.chunked(
        spec.worktree,
        files.map((f) => f.file),
      ),
    );
    for (const { entry, file } of files) {
      if (left.has(file)) {
        await writeChunkedFile(spec.worktree, entry, ctx, { sync: true });
      } else {
        rememberChunkIds(entry, file.chunks.map((ch) => ch.oid).join(''));
      }
      tracePhase(`lay: chunked file ${entry.path} done`);
      done(entry);
    }
  } finally {
    packs.close();
  }
}

/** A file or symlink of the files tree: its path, mode (as a number) and blob id. */
export interface LaidBlob {
  path: string;
  mode: number;
  oid: string;
}

export interface PackLaySpec {
  worktree: string;
  objectsDir: string;
  filesIndex: string;
  /** The files tree's files and symlinks, in the order git's index holds them (a tree's recursive
   * listing is in that order: lay.ts filesListing). */
  blobs: LaidBlob[];
  /** The files tree's other entries (none in a snapshot today): git checks them out. */
  odd: string[];
  /** Settles once git's read-tree has written the files index (every entry without stat data):
   * it runs while the workers lay, and nothing here reads the index or runs git on it before. */
  indexRead: Promise<void>;
  format: 'sha1' | 'sha256';
  meta: ParsedFileMeta;
  chunked: Map<string, ChunkedEntry>;
  /** Chunked files get an empty placeholder (a lazy restore), not their content. */
  deferChunked: boolean;
  /** Options for git against the files index through the shadow git dir. */
  shadow: GitOptions;
  /** Makes a directory (and its parents) after checking no component is a symlink. */
  mkdirSafe: (abs: string) => void;
  emptyDirs: string[];
  stamper: Stamper;
  /** Workers booted by the caller (closed by the caller too); null: git checks the files out. */
  pool: LayPool | null;
  /** LaySpec.keepFilesIndex. */
  keepFilesIndex: boolean;
  /** Told of the files index once written, parsed (lay.ts finishIndex reads its stat data). */
  written?: (parsed: ParsedIndex) => void;
}

/** Lay every file, symlink, hard link and empty directory of the files index's tree into the
 * worktree (which holds only its git dir), times set, and record their stat data in the files index. */
export async function layFromPacks(spec: PackLaySpec): Promise<void> {
  const { worktree, meta, stamper, blobs, odd } = spec;
  // The index read-tree wrote, parsed as soon as it is there: while the workers lay, this thread
  // is idle (~50 ms off the end). Read again at the end only if git's checkout wrote it since.
  const written = spec.indexRead.then(() => {
    const parsed = parseIndex(spec.filesIndex, spec.format);
    const parsedBlobs = indexBlobs(parsed);
    sameEntries(parsedBlobs, blobs);
    return { parsed, parsedBlobs };
  });
  written.catch(() => undefined);
  const leaders = new Set<number>();
  for (let i = 0; i < blobs.length; i++) if (meta.linkTo[i] >= 0) leaders.add(meta.linkTo[i]);
  let forgetting: Promise<void> | null = null;

  // Which stamp (in the stamper's order) holds each blob entry's stat.
  const stampOf = new Int32Array(blobs.length).fill(-1);
  const stamp = (i: number): void => {
    stampOf[i] = stamper.add({
      abs: path.join(worktree, blobs[i].path),
      sec: meta.mtimeSec[i],
      nsec: meta.mtimeNsec[i],
    });
  };
  const complete = (i: number): void => {
    if (!leaders.has(i)) stamp(i); // a link group's file is stamped once its links exist (ctime)
  };

  const job: number[] = [];
  const chunkedLeaders: ChunkedEntry[] = [];
  const chunkedAt = new Map<string, number>();
  for (let i = 0; i < blobs.length; i++) {
    if (meta.linkTo[i] >= 0) continue;
    const c = spec.chunked.get(blobs[i].path);
    if (c) {
      chunkedLeaders.push(c);
      chunkedAt.set(c.path, i);
    } else job.push(i);
  }

  // Largest first: the worker that takes the big one is busy with it while the others lay files.
  chunkedLeaders.sort((a, b) => b.pointer.size - a.pointer.size || (a.path < b.path ? -1 : 1));
  if (spec.deferChunked) {
    for (const c of chunkedLeaders) {
      writePlaceholder(worktree, c);
      complete(chunkedAt.get(c.path) as number);
    }
  }
  const left: number[] = [];
  // Files the workers stamped themselves: their stat block is row rowOf[i] of `rows`.
  const rowOf = new Int32Array(blobs.length).fill(-1);
  const rows = new SharedArrayBuffer(spec.pool ? job.length * CREATE_STAT : 0);
  tracePhase('lay: checkout and chunked files');
  if (spec.pool) {
    const times = {
      sec: job.map((i) => meta.mtimeSec[i]),
      nsec: job.map((i) => (leaders.has(i) ? -1 : meta.mtimeNsec[i])),
    };
    // The native passes first (lay-native.ts): the plain entries, and the chunked files once their
    // lists are read; what they leave goes to the workers (or this thread). Without them the
    // workers take every entry.
    let byWorkers = job;
    let chunkedByWorkers = spec.deferChunked ? [] : chunkedLeaders;
    let workerTimes = times;
    /** Where each of the workers' entries is in `job` (its row in `rows`), when they are not all. */
    let workerRows: number[] | null = null;
    const layer = NativeLayer.open(spec.objectsDir, spec.format, maxObject());
    if (layer) {
      try {
        const plainRun = layer.plain({
          worktree,
          paths: job.map((i) => blobs[i].path),
          oids: job.map((i) => blobs[i].oid),
          modes: job.map((i) => blobs[i].mode),
          mtimeSec: times.sec,
          mtimeNsec: times.nsec,
          stats: Buffer.from(rows),
        });
        plainRun.catch(() => undefined);
        const chunkedHere = chunkedByWorkers;
        chunkedByWorkers = [];
        // Both run to their end before a failure is reported: nothing writes in a tree its caller
        // is already removing.
        const [plain, chunked] = await Promise.allSettled([
          plainRun,
          layChunked(layer, spec, chunkedHere, (c) => complete(chunkedAt.get(c.path) as number)),
        ]);
        if (plain.status === 'rejected') throw plain.reason;
        if (chunked.status === 'rejected') throw chunked.reason;
        tracePhase(`lay: native pass done, ${plain.value?.left.length ?? 'all'} left`);
        const laid = plain.value;
        if (laid) {
          for (const k of laid.stamped) rowOf[job[k]] = k;
          for (const k of laid.laid) complete(job[k]);
          byWorkers = laid.left.map((k) => job[k]);
          workerRows = laid.left;
          workerTimes = { sec: laid.left.map((k) => times.sec[k]), nsec: laid.left.map((k) => times.nsec[k]) };
        }
      } finally {
        // Awaited at the end of the lay: the pages are dropped while this thread finishes it.
        forgetting = layer.close();
      }
    }
    if (byWorkers.length || chunkedByWorkers.length) {
      // Rows of the workers' own job, copied to the entry's row in `rows` as each batch comes.
      const theirs = workerRows ? new SharedArrayBuffer(byWorkers.length * CREATE_STAT) : rows;
      const mine = Buffer.from(rows);
      const got = Buffer.from(theirs);
      const rowAt = workerRows;
      await runWorkers(spec, blobs, byWorkers, chunkedByWorkers, workerTimes, theirs, (m) => {
        for (const k of m.stamped) {
          const i = byWorkers[k];
          const row = rowAt ? rowAt[k] : k;
          if (rowAt) got.copy(mine, row * CREATE_STAT, k * CREATE_STAT, (k + 1) * CREATE_STAT);
          rowOf[i] = row;
        }
        for (const k of m.done) if (rowOf[byWorkers[k]] < 0) complete(byWorkers[k]);
        for (const k of m.left) left.push(byWorkers[k]);
        for (const k of m.chunked) complete(chunkedAt.get(chunkedByWorkers[k].path) as number);
      });
    }
  } else {
    // No workers (GIT_XET_LAY=checkout): git checks every file out, the
    // chunked ones are reassembled on this thread meanwhile, and the times and stat data are ours.
    left.push(...job);
    await written;
    if (!spec.deferChunked && chunkedLeaders.length) {
      const byGitNow = job.map((i) => blobs[i].path);
      // The chunked files' directories exist before git starts: git caches what it saw missing
      // and, finding a directory made meanwhile in its way (EEXIST), unlinks it and dies ("cannot
      // create directory at 'build'": seen once in the suite).
      for (const c of chunkedLeaders) spec.mkdirSafe(path.dirname(path.join(worktree, c.path)));
      const settled = await Promise.allSettled([
        byGitNow.length
          ? git([...checkoutBesideWork(), 'checkout-index', '--force', '-u', '-z', '--stdin'], {
              ...spec.shadow,
              input: joinZ(byGitNow),
            }).then(() => tracePhase('lay: checkout-index done'))
          : null,
        writeChunkedFiles(worktree, chunkedLeaders, { git: spec.shadow, format: spec.format }).then(() =>
          tracePhase('lay: chunked files done'),
        ),
      ]);
      for (const r of settled) if (r.status === 'rejected') throw r.reason;
      for (const c of chunkedLeaders) complete(chunkedAt.get(c.path) as number);
      for (const i of left) complete(i);
      left.length = 0;
    }
  }

  tracePhase('lay: links, times');
  // What the packs could not give: git checks it out (and finds it wherever git finds objects).
  const byGit = [...left.map((i) => blobs[i].path), ...odd];
  const early = await written;
  const gitWrote = byGit.length > 0 || !spec.pool;
  if (byGit.length) {
    await git(['checkout-index', '--force', '-u', '-z', '--stdin'], { ...spec.shadow, input: joinZ(byGit) });
    // git's checkout does not hash what it writes: the files it wrote for us (blobs too large to
    // hold here, or in no pack of ours) are hashed now, so a damaged object is never laid as if it
    // were the blob (review 49: a loose object declaring 1 GB of zeros was).
    // (Not under GIT_XET_LAY=checkout, git's own path, which is documented as git's checkout.)
    if (spec.pool) {
      await checkLaidByGit(
        left.filter((i) => blobs[i].mode !== 0o120000).map((i) => blobs[i]),
        spec.shadow,
      );
    }
    for (const i of left) complete(i);
  }
  for (const d of spec.emptyDirs) spec.mkdirSafe(path.join(worktree, d));
  // Hard links, then their group's time: a link changes the inode's ctime.
  for (let i = 0; i < blobs.length; i++) {
    const k = meta.linkTo[i];
    if (k < 0) continue;
    const abs = path.join(worktree, blobs[i].path);
    spec.mkdirSafe(path.dirname(abs));
    fs.linkSync(path.join(worktree, blobs[k].path), abs);
  }
  for (const k of leaders) stamp(k);

  const { stats } = await stamper.finish();
  tracePhase('lay: index stat data');
  // The stat data git records for each entry, from the lstat after its time was set (git's own
  // checkout, if it ran, wrote the index again for the entries it laid: read it as it is now).
  const now = gitWrote ? parseIndex(spec.filesIndex, spec.format) : early.parsed;
  const nowBlobs = gitWrote ? indexBlobs(now) : early.parsedBlobs;
  if (gitWrote) sameEntries(nowBlobs, blobs);
  const rowBytes = Buffer.from(rows);
  for (let i = 0; i < blobs.length; i++) {
    const from = meta.linkTo[i] >= 0 ? meta.linkTo[i] : i;
    const row = rowOf[from];
    if (row >= 0) {
      // Already in the index's form: every field but the mode (the entry keeps read-tree's).
      const at = nowBlobs[i].offset;
      copyBytes(rowBytes, now.buf, at, row * CREATE_STAT, row * CREATE_STAT + 24);
      copyBytes(rowBytes, now.buf, at + 28, row * CREATE_STAT + 28, (row + 1) * CREATE_STAT);
      continue;
    }
    const at = stampOf[from];
    if (at < 0) throw new XetError('GIT_FAILED', `${blobs[i].path} was not laid`, { path: blobs[i].path });
    writeStat(now.buf, nowBlobs[i].offset, statFields(asBigIntStats(stats[at])));
  }
  writeIndexBuffer(spec.filesIndex, now, undefined, spec.keepFilesIndex);
  spec.written?.(now);
  await forgetting;
}

/** Each of `laid` (files git's checkout wrote into the worktree `shadow` runs in) hashed as the
 * blob it is, and INTEGRITY_MISMATCH for the first that is not its id. The names go to git as
 * arguments, a few hundred a process: `--stdin-paths` would unquote a name that starts with a
 * double quote and drop a trailing CR (review 50). */
async function checkLaidByGit(laid: LaidBlob[], shadow: GitOptions): Promise<void> {
  for (let at = 0; at < laid.length; at += HASH_ARGS) {
    const part = laid.slice(at, at + HASH_ARGS);
    const got = (await gitText(['hash-object', '--no-filters', '--', ...part.map((b) => b.path)], shadow)).split('\n');
    part.forEach((b, k) => {
      if (got[k] !== b.oid) {
        throw new XetError(
          'INTEGRITY_MISMATCH',
          `${b.path}: the object stored as ${b.oid} holds other bytes (${got[k]})`,
          { path: b.path, expected: b.oid, got: got[k] },
        );
      }
    });
  }
}

/** Names per `hash-object` process (checkLaidByGit): far below any ARG_MAX with PATH_MAX names. */
const HASH_ARGS = 256;

/** The files index git wrote must hold exactly the entries laid, in the same order: the stat rows
 * go to entries by position. A tree whose entries are not in git's order (only a forged one) lists
 * them in another order than the index holds them, and is refused here, after the lay, with the tree
 * its caller removes. */
function sameEntries(index: LaidBlob[], laid: LaidBlob[]): void {
  const differs = (i: number) => index[i].path !== laid[i].path || index[i].oid !== laid[i].oid;
  let i = 0;
  if (index.length === laid.length) while (i < laid.length && !differs(i)) i++;
  if (index.length === laid.length && i === laid.length) return;
  // Not the index's path in the details: it is in the temporary tree, removed before anyone reads
  // them (review 24).
  throw new XetError(
    'SNAPSHOT_INVALID',
    `the snapshot's files tree lists its entries out of git's order (${JSON.stringify(laid[i]?.path ?? index[i]?.path)})`,
    { path: laid[i]?.path ?? index[i]?.path ?? null },
  );
}

function asBigIntStats(s: StampedStat): fs.BigIntStats {
  return s as unknown as fs.BigIntStats;
}

/**
 * Worker threads booted before their work is known: a worker's start (a V8 isolate, node's
 * bootstrap, this module graph) takes 50-150 ms of a core, which overlaps git's read-tree and the
 * reading of the snapshot's metadata when the pool is made first. Workers that get no job (the
 * caller failed or took another path) are terminated by close().
 */
export class LayPool {
  private workers: Worker[] = [];
  private used = false;

  /** `files`: how many files the snapshot has (a small tree needs fewer workers). `bootNow`
   * false: booted by run(), sized by its job (the native pass lays most entries, lay-native.ts,
   * and the workers may not be needed at all). */
  constructor(files: number, bootNow = true) {
    if (bootNow) this.boot(files);
  }

  private boot(files: number): void {
    const count = Math.max(1, Math.min(os.availableParallelism(), Math.ceil(files / BATCH)));
    this.workers = Array.from(
      { length: count },
      () => new Worker(path.join(__dirname, 'lay-worker.js'), { workerData: { layPool: true } }),
    );
    // An idle worker must not keep the process alive, nor crash it before it is used.
    for (const w of this.workers) {
      w.unref();
      w.on('error', () => undefined);
    }
  }

  /** Run `job` on every worker; resolves once all have stopped; a failure in one stops the
   * others before it is reported. Once only. */
  async run(job: LayJob, onBatch: (m: LayDone) => void): Promise<void> {
    if (this.used) throw new Error('LayPool.run: once only');
    this.used = true;
    if (!this.workers.length) this.boot(job.paths.length + job.chunked.length * BATCH);
    const flags = new Int32Array(job.shared);
    let failure: Error | null = null;
    const one = (w: Worker): Promise<void> =>
      new Promise((resolve) => {
        let ended = false;
        w.ref();
        w.on('message', (m: LayDone | LayFailure | { end: true }) => {
          if ('end' in m) {
            // Its last batch came before this (a port's messages keep their order): the lay goes
            // on while the thread is torn down (~30 ms of its isolate's disposal on the bench tree).
            ended = true;
            w.unref();
            resolve();
          } else if ('error' in m) {
            ended = true;
            Atomics.store(flags, 1, 1);
            failure ??= asError(m.error);
          } else if ('done' in m) {
            try {
              onBatch(m);
            } catch (e) {
              Atomics.store(flags, 1, 1);
              failure ??= e as Error;
            }
          }
        });
        w.on('error', (e) => {
          Atomics.store(flags, 1, 1);
          failure ??= e;
        });
        w.on('exit', (code) => {
          if (!ended) failure ??= new Error(`a file-laying worker stopped (exit code ${code})`);
          resolve();
        });
        w.postMessage(job);
      });
    await Promise.all(this.workers.map(one));
    if (failure) throw failure;
  }

  /** Whether its workers have been started. */
  get booted(): boolean {
    return this.workers.length > 0;
  }

  /** Stop workers that were given nothing to do. */
  close(): void {
    if (!this.used) for (const w of this.workers) void w.terminate();
  }
}

/** Run the pool over `job` (positions in `blobs`); `onBatch` gets positions in `job`. */
async function runWorkers(
  spec: PackLaySpec,
  blobs: LaidBlob[],
  job: number[],
  chunked: ChunkedEntry[],
  times: { sec: number[]; nsec: number[] },
  stats: SharedArrayBuffer,
  onBatch: (m: LayDone) => void,
): Promise<void> {
  const layJob: LayJob = {
    worktree: spec.worktree,
    objectsDir: spec.objectsDir,
    format: spec.format,
    paths: job.map((i) => blobs[i].path),
    oids: job.map((i) => blobs[i].oid),
    modes: job.map((i) => blobs[i].mode),
    mtimeSec: times.sec,
    mtimeNsec: times.nsec,
    stats,
    chunked,
    git: { cwd: spec.shadow.cwd ?? spec.worktree, env: { ...spec.shadow.env } },
    shared: new SharedArrayBuffer(12),
    batch: BATCH,
    maxObject: maxObject(),
  };
  const pool = spec.pool as LayPool;
  // What the native pass left, when it is little, is laid here: a worker's boot (~0.1 s of a core,
  // and as long before it lays anything) costs more than a few hundred deltas take on this thread.
  if (!pool.booted && chunked.length === 0 && job.length <= IN_THREAD_MAX) {
    pool.close();
    await layEntries(layJob, onBatch);
  } else await pool.run(layJob, onBatch);
}

/** A failure of the file system while laying (a worker's or this thread's) as the typed error a
 * user can act on: no space is DISK_FULL, another errno on a path in the tree (EACCES, EROFS,
 * EIO…) TARGET_UNUSABLE.
 * The caller removes the tree, so nothing is kept half written. Paths under `worktree` are named
 * under `shownAs` (a restore's temporary tree becomes the target the user named). Anything that
 * is not an errno is left as it is. */
export function layFailure(e: unknown, worktree: string, shownAs = worktree): unknown {
  // git's checkout (GIT_XET_LAY=checkout, git, a snapshot without filemeta) says it in its stderr,
  // or only that a write failed: then the tree's file system is asked whether it is full.
  if ((!(e instanceof XetError) || e.code === 'GIT_FAILED') && diskFull(e, [worktree])) {
    const errno = (e as NodeJS.ErrnoException).code;
    return new XetError(
      'DISK_FULL',
      `no space left while laying the files of ${shownAs} (${(e as Error).message.split(worktree).join(shownAs)}); nothing was kept`,
      { dir: shownAs, ...(e instanceof XetError || typeof errno !== 'string' ? {} : { errno }) },
    );
  }
  if (e instanceof XetError) return shownUnder(e, worktree, shownAs);
  const code = (e as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string' || !/^E[A-Z0-9]+$/.test(code)) return e;
  const message = (e as Error).message.split(worktree).join(shownAs);
  const where = (e as NodeJS.ErrnoException).path;
  // Only a failure on a path in the tree is the target's; anything else (a pack that will not
  // read, too many open files) is left as it is.
  if (typeof where !== 'string' || !(where === worktree || where.startsWith(`${worktree}/`))) return e;
  return new XetError('TARGET_UNUSABLE', `cannot write the files of ${shownAs}: ${message}`, {
    dir: shownAs,
    errno: code,
  });
}

/** A typed error that names a path under `worktree` (a restore's hidden sibling, in an object
 * file's path or a file's) named under `shownAs` instead, as the errno errors are: the sibling is
 * removed before anyone could look (review 49). */
function shownUnder(e: XetError, worktree: string, shownAs: string): XetError {
  if (worktree === shownAs || !JSON.stringify([e.message, e.details]).includes(worktree)) return e;
  const swap = (v: unknown): unknown => (typeof v === 'string' ? v.split(worktree).join(shownAs) : v);
  const details = Object.fromEntries(Object.entries(e.details).map(([k, v]) => [k, swap(v)]));
  return new XetError(e.code, swap(e.message) as string, details);
}

function asError(e: LayFailure['error']): Error {
  if (e.xet) return new XetError(e.code as ErrorCode, e.message, e.details);
  // An errno (ENOSPC, EACCES…) keeps its code and message, as a failed write in this thread would.
  return Object.assign(new Error(e.message), { code: e.code, path: e.details.path });
}
