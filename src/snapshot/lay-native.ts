// The native pass of a restore's lay (lay-pack.ts): the plain entries of a tree being laid, written
// on threads of node's pool by one native call (layAllLater in native/xet-native.c) with no
// JavaScript per entry and no worker thread to boot. A plain entry is a file or symlink whose blob a
// mapped pack holds whole: each is found in the packs' indexes, inflated, hash-checked against its
// id, its directories made (never through a symlink), created new and stamped, as layMany does in
// a worker. Everything else (a delta, a loose object, a blob too large to hold, anything that does
// not check) is left, untouched, to the workers' per-entry path (lay-worker.ts), which reads it
// again with its own checks and says what is wrong in its own typed errors.
//
// Why: the workers' boot, their per-batch JavaScript and V8's compiling and collecting for two more
// isolates were about a third of a restore's CPU on two cores (docs/DESIGN-NOTES.md "A restore's
// plain files laid without worker threads").

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PackReader } from '../git/pack-reader';
import { errnoError, native } from '../native';

/** The step of a native createFile, layBlob or layAllLater that failed (native/xet-native.c STEP_*). */
export const LAY_STEPS = ['', 'open', 'write', 'futimens', 'fstat', 'close'];
/** layAllLater's verdicts (native/xet-native.c ALL_*). */
const ALL_STAMPED = 1;
const ALL_LAID = 2;
/** Packs layAllLater searches (its limit); objects in others are left to the per-entry path. */
const MAX_PACKS = 256;
/** Bytes of git's index stat block per entry (lay-worker.ts CREATE_STAT). */
const STAT_ROW = 40;

export interface NativeLaySpec {
  worktree: string;
  objectsDir: string;
  format: 'sha1' | 'sha256';
  paths: string[];
  oids: string[];
  modes: number[];
  /** Each entry's mtime; nanoseconds -1: not set here (a hard-link group's file). */
  mtimeSec: number[];
  mtimeNsec: number[];
  /** STAT_ROW bytes per entry: the stat block of each file stamped here. */
  stats: Buffer;
  /** Blobs larger than this are left (the per-entry path hands them to git). */
  maxObject: number;
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

/** The native pass over the spec's entries, or null when it cannot run here (no module, no mapped
 * pack): the caller's workers then take every entry. A failed file creation rejects with the errno
 * error the per-entry path would throw; the threads have stopped by then. */
export async function layNative(spec: NativeLaySpec): Promise<NativeLaid | null> {
  const layAll = native?.layAllLater;
  if (!layAll || !nativeLayAvailable()) return null;
  const hashLen = spec.format === 'sha256' ? 32 : 20;
  const n = spec.paths.length;
  const readers = openMapped(path.join(spec.objectsDir, 'pack'), spec.format, spec.maxObject);
  try {
    if (!readers.length) return null;
    const oids = Buffer.from(spec.oids.join(''), 'hex');
    if (oids.length !== n * hashLen) return null; // not all ids: the per-entry path says which
    const base = spec.worktree.endsWith('/') ? spec.worktree : `${spec.worktree}/`;
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
    const bytes = (a: Uint32Array | Float64Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const status = Buffer.alloc(4 * n);
    const result = Buffer.alloc(12);
    const threads = Math.max(1, Math.min(os.availableParallelism(), 4, Math.ceil(n / 128)));
    await layAll(
      readers.map((r) => [r.map, r.end, r.idx]),
      hashLen,
      Math.min(spec.maxObject, ...readers.map((r) => r.limit)),
      [oids, names, bytes(nameAt), bytes(Uint32Array.from(spec.modes)), bytes(times)],
      Buffer.from(base),
      spec.stats.subarray(0, n * STAT_ROW),
      status,
      result,
      threads,
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
  } finally {
    for (const r of readers) r.reader.close();
  }
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
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const out: MappedPack[] = [];
  for (const n of names.filter((x) => /^pack-[0-9a-f]+\.idx$/.test(x)).sort()) {
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
