// The native passes of a restore's lay (lay-pack.ts), on threads of node's pool with no JavaScript
// per entry and no worker thread to boot. The plain entries of a tree being laid (layAllLater in
// native/xet-native.c): a file or symlink whose blob a mapped pack holds, whole or as a chain of
// deltas, or a loose object holds; each is found in the packs' indexes (else in the object
// directory), inflated (its deltas applied), hash-checked against its id, its directories made
// (never through a symlink), created new and stamped, as layMany does in a worker. The chunked
// files (layChunkedLater): each written from its chunks in the packs and hashed whole, as
// lay-chunked.ts writes one. Everything else (an object in an alternate, a blob too large to hold,
// anything that does not check) is left, with nothing at its path, to the per-entry paths
// (lay-worker.ts, lay-chunked.ts), which read it again with their own checks and say what is wrong
// in their own typed errors.
//
// Why: the workers' boot, their per-batch JavaScript and V8's compiling and collecting for two more
// isolates were about a third of a restore's CPU on two cores (docs/DESIGN-NOTES.md "A restore's
// plain files laid without worker threads").

import * as os from 'node:os';
import * as path from 'node:path';
import { packIndexNames, PackReader } from '../git/pack-reader';
import { errnoError, native, type XetNative } from '../native';

/** The step of a native createFile, layBlob or layAllLater that failed (native/xet-native.c STEP_*). */
export const LAY_STEPS = ['', 'open', 'write', 'futimens', 'fstat', 'close'];
/** layAllLater's verdicts (native/xet-native.c ALL_*). */
const ALL_STAMPED = 1;
const ALL_LAID = 2;
/** Packs layAllLater searches (its limit); objects in others are left to the per-entry path.
 * Tests lower it (GIT_XET_TEST_NATIVE_PACKS) to leave many entries to that path. */
const MAX_PACKS = Math.min(256, Number(process.env.GIT_XET_TEST_NATIVE_PACKS) || 256);
/** Bytes of git's index stat block per entry (lay-worker.ts CREATE_STAT). */
const STAT_ROW = 40;

export interface NativeLaySpec {
  worktree: string;
  paths: string[];
  oids: string[];
  modes: number[];
  /** Each entry's mtime; nanoseconds -1: not set here (a hard-link group's file). */
  mtimeSec: number[];
  mtimeNsec: number[];
  /** STAT_ROW bytes per entry: the stat block of each file stamped here. */
  stats: Buffer;
}

/** Positions in the spec's entries: laid and stamped (stat block in `stats`), laid without a time
 * (a symlink, a hard-link group's file: the caller stamps them), and left. */
export interface NativeLaid {
  stamped: number[];
  laid: number[];
  left: number[];
}

/** Whether this process can take the native pass (its module has layAllLater). */
export function nativeLayAvailable(): boolean {
  return typeof native?.layAllLater === 'function' && process.env.GIT_XET_LAY !== 'workers';
}

/** The packs of an object directory mapped for the native passes (plain entries, chunked files),
 * held until close(). */
export class NativeLayer {
  private constructor(
    private readonly packs: MappedPack[],
    private readonly format: 'sha1' | 'sha256',
    private readonly maxObject: number,
    /** The object directory, for loose objects. */
    private readonly objectsDir: string,
  ) {}

  /** Null when the native passes cannot run here (no module, no mapped pack): the caller's workers
   * then take every entry. */
  static open(objectsDir: string, format: 'sha1' | 'sha256', maxObject: number): NativeLayer | null {
    if (!nativeLayAvailable()) return null;
    const packs = openMapped(path.join(objectsDir, 'pack'), format, maxObject);
    if (!packs.length) return null;
    return new NativeLayer(packs, format, maxObject, objectsDir);
  }

  private get hashLen(): number {
    return this.format === 'sha256' ? 32 : 20;
  }

  private get args(): [[Buffer, number, Buffer][], number, number] {
    return [
      this.packs.map((r) => [r.map, r.end, r.idx]),
      this.hashLen,
      Math.min(this.maxObject, ...this.packs.map((r) => r.limit)),
    ];
  }

  /** The plain entries of `spec`, null when its ids are not all ids (the per-entry path says
   * which). A failed file creation rejects with the errno error the per-entry path would throw; the
   * threads have stopped by then. */
  async plain(spec: NativeLaySpec): Promise<NativeLaid | null> {
    const layAll = native?.layAllLater as NonNullable<XetNative['layAllLater']>;
    const hashLen = this.hashLen;
    const n = spec.paths.length;
    const oids = Buffer.from(spec.oids.join(''), 'hex');
    if (oids.length !== n * hashLen) return null;
    const base = withSlash(spec.worktree);
    const joined = `${spec.paths.join('\0')}\0`;
    const names = Buffer.from(joined);
    const nameAt = new Uint32Array(n);
    if (names.length === joined.length) {
      // Every name ASCII: bytes and UTF-16 units agree.
      for (let k = 0, at = 0; k < n; k++) {
        nameAt[k] = at;
        at += spec.paths[k].length + 1;
      }
    } else {
      for (let k = 0, at = 0; k < n; k++) {
        nameAt[k] = at;
        at = names.indexOf(0, at) + 1;
      }
    }
    const times = new Float64Array(2 * n);
    for (let k = 0; k < n; k++) {
      times[2 * k] = spec.mtimeSec[k];
      times[2 * k + 1] = spec.mtimeNsec[k];
    }
    const status = Buffer.alloc(4 * n);
    const result = Buffer.alloc(12);
    await layAll(
      ...this.args,
      [oids, names, bytes(nameAt), bytes(Uint32Array.from(spec.modes)), bytes(times)],
      Buffer.from(base),
      spec.stats.subarray(0, n * STAT_ROW),
      status,
      result,
      threadsFor(n / 128),
      Buffer.from(withSlash(path.resolve(this.objectsDir))),
    );
    const failed = new Int32Array(result.buffer, result.byteOffset, 3);
    if (failed[1] !== 0) {
      throw errnoError(failed[1], LAY_STEPS[failed[2]] ?? 'open', base + spec.paths[failed[0]]);
    }
    const verdicts = new Int32Array(status.buffer, status.byteOffset, n);
    const laid: NativeLaid = { stamped: [], laid: [], left: [] };
    for (let k = 0; k < n; k++) {
      const v = verdicts[k];
      if (v === ALL_STAMPED) laid.stamped.push(k);
      else if (v === ALL_LAID) laid.laid.push(k);
      else laid.left.push(k); // left, or not reached (a thread that could not start)
    }
    return laid;
  }

  /** Chunked files written from their chunks (each list contiguous: one that is not is left, for
   * the per-entry path's error), hashed whole; the ones left (nothing at their path) for the
   * caller's path. Not stamped. */
  async chunked(worktree: string, files: NativeChunkedFile[]): Promise<NativeChunkedFile[]> {
    const layChunked = native?.layChunkedLater;
    if (!layChunked || !files.length) return files;
    const taken: NativeChunkedFile[] = [];
    const left: NativeChunkedFile[] = [];
    const parts: [Buffer, number, number, Buffer, Buffer, Buffer][] = [];
    for (const f of files) {
      let at = 0;
      const contiguous = f.chunks.every((c) => {
        const ok = c.offset === at;
        at += c.size;
        return ok;
      });
      const whole = Buffer.from(f.blob, 'hex');
      const ids = Buffer.from(f.chunks.map((c) => c.oid).join(''), 'hex');
      if (
        !contiguous ||
        at !== f.size ||
        whole.length !== this.hashLen ||
        ids.length !== f.chunks.length * this.hashLen
      ) {
        left.push(f);
        continue;
      }
      taken.push(f);
      const sizes = bytes(Uint32Array.from(f.chunks.map((c) => c.size)));
      parts.push([Buffer.from(`${f.path}\0`), f.mode === '100755' ? 0o100755 : 0o100644, f.size, whole, ids, sizes]);
    }
    if (!taken.length) return left;
    const status = Buffer.alloc(4 * taken.length);
    await layChunked(...this.args, parts, Buffer.from(withSlash(worktree)), status, threadsFor(taken.length));
    const verdicts = new Int32Array(status.buffer, status.byteOffset, taken.length);
    taken.forEach((f, k) => {
      if (verdicts[k] !== ALL_LAID) left.push(f);
    });
    return left;
  }

  /** Close the packs. Their mappings' pages are dropped on a thread of node's pool (a pack read
   * through whole has ~60,000 pages whose tables cost the main thread ~11 ms when its Buffer was
   * collected at exit); resolves when that is done. */
  close(): Promise<void> {
    const forget = native?.forgetPagesLater;
    const dropping = forget ? this.packs.map((r) => forget(r.map).catch(() => false)) : [];
    for (const r of this.packs) r.reader.close();
    const done = Promise.all(dropping).then(() => undefined);
    closing.add(done);
    void done.finally(() => closing.delete(done));
    return done;
  }
}

/** Closes still dropping pages: a lay does not end (nor its process exit) before they are done,
 * whichever way it ends. */
const closing = new Set<Promise<void>>();

/** Settles once every NativeLayer closed so far has dropped its pages. */
export async function nativeLayersClosed(): Promise<void> {
  await Promise.all([...closing]);
}

/** A chunked file for NativeLayer.chunked: its path, mode ('100644' or '100755'), size, blob id
 * and chunks in order. */
export interface NativeChunkedFile {
  path: string;
  mode: string;
  size: number;
  blob: string;
  chunks: { oid: string; offset: number; size: number }[];
}

function withSlash(dir: string): string {
  return dir.endsWith('/') ? dir : `${dir}/`;
}

function bytes(a: Uint32Array | Float64Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** Threads of node's pool for `work` batches: as many as cores, at most 4 (the pool's default
 * size: a fifth would wait for one of them). */
function threadsFor(work: number): number {
  return Math.max(1, Math.min(os.availableParallelism(), 4, Math.ceil(work)));
}

interface MappedPack {
  reader: PackReader;
  map: Buffer;
  end: number;
  limit: number;
  idx: Buffer;
}

/** The packs of an object directory in the order the workers search them (by name), mapped with
 * their indexes; a pack that does not open or map is skipped (its objects are left). */
function openMapped(dir: string, format: 'sha1' | 'sha256', maxObject: number): MappedPack[] {
  const out: MappedPack[] = [];
  for (const n of packIndexNames(dir)) {
    if (out.length === MAX_PACKS) break;
    let r: PackReader | null = null;
    try {
      r = PackReader.open(path.join(dir, n.replace(/\.idx$/, '.pack')), path.join(dir, n), format, { mapped: true });
      const view = r.inPlace(maxObject);
      const idx = r.index.mapped();
      if (!view || !idx) throw new Error('not mapped');
      out.push({ reader: r, map: view.map, end: view.end, limit: view.limit, idx });
      r = null;
    } catch {
      // a pack that does not open (mid-repack, damaged) is the per-entry path's to read, or git's
    } finally {
      r?.close();
    }
  }
  return out;
}
