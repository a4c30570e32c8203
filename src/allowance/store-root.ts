// A xet store's root: everything under the store directory (packs, the state log, intents, trash,
// temporaries), and the store's own allowance, recorded in the store itself (`<store>/ALLOWANCE`,
// xet.store-allowance/v1) so every client that pushes to it sees the same limit.
//
// ALLOWANCE is the one mutable file of a store (every other file is create-once, store.ts): it is
// replaced whole by rename from the store's tmp/, so a reader sees the old file or the new one. Like
// everything in a store it is read as hostile (anyone who can write the store can forge it): size
// capped before reading, a regular file only, its schema and every field checked.
//
// A store holds few files (packs, states, a handful of intents), so it is measured from disk on every
// check; no ledger. Bytes are counted once per inode: a pusher's keep copy and a pack between its
// link(2) and the unlink of its temporary name are one file's bytes under two names.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { DirectoryStore, fsyncDir, storeError } from '../remote/store';
import { readStoreFile } from '../remote/storefile';
import { ownerAlive } from '../snapshot/leftovers';
import { enforce, unlimited } from './admit';
import { limitsOf } from './config';
import { parseCount, parseSize, type AdmissionClass, type Amount, type Limits } from './model';

export const STORE_ALLOWANCE_SCHEMA = 'xet.store-allowance/v1';
export const STORE_ALLOWANCE_FILE = 'ALLOWANCE';
/** A real ALLOWANCE is under 200 bytes. */
const MAX_ALLOWANCE_BYTES = 4096;
/** Temporary names in tmp/ carry the writer's pid: `<what>-<pid>-<hex>` (DirectoryStore.tempPath). */
const TEMP_RE = /^[A-Za-z0-9.]+-(\d+)-[0-9a-f]+$/;

export interface StoreAllowance {
  schema: typeof STORE_ALLOWANCE_SCHEMA;
  /** null: no limit on this dimension. */
  bytes: number | null;
  files: number | null;
  /** As `xet.allowance.headroom`: a size ("64M") or a percentage ("10%"); null: the default. */
  headroom: string | null;
}

export interface StoreUsage {
  root: string; // 'store:<path>'
  path: string;
  limits: Limits;
  /** Every file under the store directory, temporaries included. */
  used: Amount;
  /** The part of `used` that is temporary files in tmp/ of writers still running. */
  temporary: Amount;
  /** The part of `used` that is temporary files of writers that are gone (a store gc removes them
   * once they are old). */
  deadTemporary: Amount;
  allowance: StoreAllowance | null;
}

/** The root's name in JSON and errors. */
export function storeRootName(root: string): string {
  return `store:${path.resolve(root)}`;
}

function allowanceFile(root: string): string {
  return path.join(root, STORE_ALLOWANCE_FILE);
}

/** The store's recorded allowance, or null when it has none. Hostile input: a file too big, of the
 * wrong kind or not xet.store-allowance/v1 is INTEGRITY_MISMATCH; a newer version is
 * SCHEMA_UNSUPPORTED. */
export function readStoreAllowance(root: string): StoreAllowance | null {
  const file = allowanceFile(root);
  let bytes: Buffer | null;
  try {
    bytes = readStoreFile(file, MAX_ALLOWANCE_BYTES);
  } catch (e) {
    throw storeError(root, e);
  }
  if (!bytes) return null;
  return parseStoreAllowance(bytes, file);
}

export function parseStoreAllowance(bytes: Buffer, file: string): StoreAllowance {
  const bad = (why: string) =>
    new XetError('INTEGRITY_MISMATCH', `${file} is not a valid store allowance: ${why}`, { file });
  let v: unknown;
  try {
    v = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw bad('not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('not a JSON object');
  const o = v as Record<string, unknown>;
  const m = typeof o.schema === 'string' ? /^xet\.store-allowance\/v(\d+)$/.exec(o.schema) : null;
  if (!m) throw bad(`schema ${JSON.stringify(o.schema)}`);
  if (m[1] !== '1') {
    throw new XetError('SCHEMA_UNSUPPORTED', `${file} is ${String(o.schema)}; this git xet reads v1`, {
      file,
      schema: o.schema,
    });
  }
  const dim = (name: 'bytes' | 'files'): number | null => {
    const x = o[name];
    if (x === null || x === undefined) return null;
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw bad(`${name} ${JSON.stringify(x)}`);
    return x;
  };
  const bytesLimit = dim('bytes');
  const filesLimit = dim('files');
  const h = o.headroom;
  if (h !== null && h !== undefined && (typeof h !== 'string' || h.length > 32)) {
    throw bad(`headroom ${JSON.stringify(h)}`);
  }
  const headroom = typeof h === 'string' ? h : null;
  try {
    limitsOf(bytesLimit, filesLimit, headroom ?? undefined, `${file} headroom`);
  } catch (e) {
    throw bad((e as Error).message);
  }
  return { schema: STORE_ALLOWANCE_SCHEMA, bytes: bytesLimit, files: filesLimit, headroom };
}

/** The limits a store's allowance gives (none without ALLOWANCE). */
export function storeLimits(root: string): Limits {
  return limitsOfAllowance(root, readStoreAllowance(root));
}

function limitsOfAllowance(root: string, a: StoreAllowance | null): Limits {
  return limitsOf(a?.bytes ?? null, a?.files ?? null, a?.headroom ?? undefined, `${root}/ALLOWANCE headroom`);
}

/** `--set BYTES[,FILES]|none` of `git xet allowance --store`: "none" clears both. */
export function parseStoreAllowanceSet(text: string): { bytes: number | null; files: number | null } {
  if (text.trim() === 'none') return { bytes: null, files: null };
  const [b, f, extra] = text.split(',');
  if (extra !== undefined || b === undefined || (b.trim() === '' && (f === undefined || f.trim() === ''))) {
    throw new XetError('USAGE', `--set: '${text}' is not BYTES[,FILES] or none`, { value: text });
  }
  return {
    bytes: b.trim() === '' ? null : parseSize(b, '--set'),
    files: f === undefined || f.trim() === '' ? null : parseCount(f, '--set'),
  };
}

/**
 * Record (or, with both null, remove) a store's allowance. The store must exist. Bad values are
 * USAGE, checked before anything is written; the file is replaced atomically (temp in tmp/, fsync,
 * rename, fsync of the directory). Returns what the store now records (null: no allowance).
 */
export function setStoreAllowance(
  root: string,
  bytes: number | null,
  files: number | null,
  headroom?: string,
): StoreAllowance | null {
  const store = DirectoryStore.open(path.resolve(root));
  for (const [name, x] of [
    ['bytes', bytes],
    ['files', files],
  ] as const) {
    if (x !== null && (!Number.isSafeInteger(x) || x < 0)) {
      throw new XetError('USAGE', `the store allowance's ${name} must be a whole number, not ${x}`, { value: x });
    }
  }
  if (headroom !== undefined && (headroom.length > 32 || !/^\s*\d+(\.\d+)?\s*(%|[a-zA-Z]*)\s*$/.test(headroom))) {
    throw new XetError('USAGE', `--headroom: '${headroom}' is not a size or a percentage`, { value: headroom });
  }
  try {
    limitsOf(bytes, files, headroom, '--headroom');
  } catch (e) {
    if (e instanceof XetError) throw new XetError('USAGE', e.message, e.details);
    throw e;
  }
  const file = allowanceFile(store.root);
  if (bytes === null && files === null) {
    try {
      fs.rmSync(file, { force: true });
      fsyncDir(store.root);
    } catch (e) {
      throw storeError(store.root, e);
    }
    return null;
  }
  const allowance: StoreAllowance = { schema: STORE_ALLOWANCE_SCHEMA, bytes, files, headroom: headroom ?? null };
  const tmp = store.tempPath('allowance');
  try {
    const fd = fs.openSync(tmp, 'wx');
    try {
      fs.writeSync(fd, `${JSON.stringify(allowance)}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
    fsyncDir(store.root);
  } catch (e) {
    throw storeError(store.root, e);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  return allowance;
}

/** What the store directory holds now, from disk: every non-directory entry, bytes once per inode. */
export function measureStoreAt(root: string, allowance: StoreAllowance | null): StoreUsage {
  const used: Amount = { bytes: 0, files: 0 };
  const temporary: Amount = { bytes: 0, files: 0 };
  const deadTemporary: Amount = { bytes: 0, files: 0 };
  const seen = new Set<string>();
  const tmpDir = path.join(root, 'tmp');
  const walk = (dir: string) => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw storeError(root, e);
    }
    for (const d of entries) {
      const p = path.join(dir, d.name);
      const st = fs.lstatSync(p, { throwIfNoEntry: false });
      if (!st) continue; // a writer removed its temporary meanwhile
      if (st.isDirectory()) {
        walk(p);
        continue;
      }
      const key = `${st.dev}:${st.ino}`;
      const bytes = seen.has(key) ? 0 : st.size;
      seen.add(key);
      used.bytes += bytes;
      used.files += 1;
      if (dir === tmpDir) {
        const m = TEMP_RE.exec(d.name);
        const into = m && ownerAlive(Number(m[1])) ? temporary : deadTemporary;
        into.bytes += bytes;
        into.files += 1;
      }
    }
  };
  walk(root);
  const limits = limitsOfAllowance(root, allowance);
  return { root: storeRootName(root), path: path.resolve(root), limits, used, temporary, deadTemporary, allowance };
}

export function measureStore(store: DirectoryStore): StoreUsage {
  return measureStoreAt(store.root, readStoreAllowance(store.root));
}

/** A pusher's or a gc's intent file (store-intents.ts: pushId, host, pid, time), counted while it
 * runs: a writer is admitted with its intent, which it removes when done. */
export const INTENT_BOUND: Amount = { bytes: 1024, files: 1 };

export interface StoreAdmission {
  readonly root: string;
  readonly limits: Limits;
  /** Throw ALLOWANCE_EXCEEDED unless `adding` fits beside what the store holds now (a writer's own
   * complete temporaries included). Measures nothing without an allowance. */
  check(adding: Amount): void;
}

/** Admission into a store's root. The allowance is read once, when the writer starts. */
export function storeAdmission(store: DirectoryStore, cls: AdmissionClass, what: string): StoreAdmission {
  const allowance = readStoreAllowance(store.root);
  const limits = limitsOfAllowance(store.root, allowance);
  const root = storeRootName(store.root);
  return {
    root,
    limits,
    check(adding) {
      if (unlimited(limits)) return;
      enforce(root, limits, measureStoreAt(store.root, allowance).used, adding, cls, what);
    },
  };
}
