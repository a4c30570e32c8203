// The directory store behind `xet::<path>` remotes (format xet.store/v1):
//
//   <root>/XET-STORE            "xet.store/v1" and the object format, written once
//   <root>/packs/pack-<h>.pack  immutable git packs, named by their own trailer checksum
//   <root>/packs/pack-<h>.idx   the pack's index (git's v2), written after the pack; optional and
//                               untrusted (pack-reader.ts hashes every object read through it)
//   <root>/state/<seq>.json     an immutable, numbered log: each state names every ref, HEAD, every
//                               pack, the publication id that made it, the previous state's hash,
//                               and its own checksum
//
// Every file is written create-if-absent: to a temporary name, fsynced, then hard-linked to its final
// name (link(2) fails if the name exists, on every filesystem, without locks) and the directory
// fsynced. Nothing is ever renamed over or rewritten, so two writers racing for state N+1 cannot both
// win, and nothing a reader has seen (or a pusher was told is published) ever changes.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { canonicalJson } from '../snapshot/canonical-json';
import { readStoreFile, sameBytes, storeFileExists } from './storefile';

export const STORE_FORMAT = 'xet.store/v1';
export const STATE_SCHEMA = 'xet.store-state/v1';
const SEQ_DIGITS = 12;
/** A state names every ref and pack; far beyond any real one, small enough to read whole. */
const MAX_STATE_BYTES = 64 * 1024 * 1024;

export interface StoreState {
  schema: typeof STATE_SCHEMA;
  seq: number;
  /** sha256 of the previous state file's bytes; null for the first. */
  prev: string | null;
  refs: Record<string, string>;
  /** The ref HEAD points to (clones check it out), or null. */
  head: string | null;
  /** Every pack in the store, oldest first. */
  packs: string[];
  /** The publication id of the push that made this state. */
  pushId: string;
  createdAt: string;
}

export interface LoadedState {
  state: StoreState;
  /** sha256 of the file's bytes (the next state's `prev`). */
  hash: string;
}

export class DirectoryStore {
  readonly root: string;
  readonly objectFormat: 'sha1' | 'sha256';

  private constructor(root: string, objectFormat: 'sha1' | 'sha256') {
    this.root = root;
    this.objectFormat = objectFormat;
  }

  /** Open an existing store. A missing or foreign directory is STORE_UNAVAILABLE. */
  static open(root: string): DirectoryStore {
    let text: string;
    try {
      const bytes = readStoreFile(path.join(root, 'XET-STORE'), 256);
      if (!bytes) throw Object.assign(new Error(`ENOENT: ${root}/XET-STORE`), { code: 'ENOENT' });
      text = bytes.toString('utf8');
    } catch (e) {
      if (e instanceof XetError) throw e;
      const code = (e as NodeJS.ErrnoException).code;
      throw new XetError(
        'STORE_UNAVAILABLE',
        code === 'ENOENT'
          ? `no xet store at ${root}${fs.existsSync(root) ? ' (the directory is not a store)' : ''}`
          : `cannot read the xet store at ${root}: ${(e as Error).message}`,
        { store: root, errno: code },
      );
    }
    const m = /^xet\.store\/v(\d+)\nobject-format (sha1|sha256)\n$/.exec(text);
    if (!m) throw new XetError('INTEGRITY_MISMATCH', `${root}/XET-STORE is not a xet store header`, { store: root });
    if (m[1] !== '1') {
      throw new XetError('SCHEMA_UNSUPPORTED', `the store at ${root} is xet.store/v${m[1]}; this git xet reads v1`, {
        store: root,
      });
    }
    return new DirectoryStore(root, m[2] as 'sha1' | 'sha256');
  }

  /** Open a store, creating it if the directory is missing (its parent must exist) or empty. */
  static openOrCreate(root: string, objectFormat: 'sha1' | 'sha256'): DirectoryStore {
    if (fs.existsSync(path.join(root, 'XET-STORE'))) return DirectoryStore.open(root);
    if (!fs.existsSync(path.dirname(root))) {
      throw new XetError('STORE_UNAVAILABLE', `cannot create a xet store at ${root}: its parent does not exist`, {
        store: root,
      });
    }
    try {
      fs.mkdirSync(root, { recursive: false });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw storeError(root, e);
    }
    const entries = fs
      .readdirSync(root)
      .filter((n) => n !== 'XET-STORE' && n !== 'packs' && n !== 'state' && n !== 'tmp');
    if (entries.length) {
      throw new XetError('STORE_UNAVAILABLE', `${root} is not empty and not a xet store`, { store: root });
    }
    try {
      for (const d of ['packs', 'state', 'tmp']) fs.mkdirSync(path.join(root, d), { recursive: true });
      const store = new DirectoryStore(root, objectFormat);
      // Two creators race harmlessly: the header is create-if-absent and identical for the same format.
      store.createFile('XET-STORE', Buffer.from(`${STORE_FORMAT}\nobject-format ${objectFormat}\n`), true);
    } catch (e) {
      throw storeError(root, e);
    }
    return DirectoryStore.open(root);
  }

  packPath(name: string): string {
    return path.join(this.root, 'packs', `${name}.pack`);
  }

  hasPack(name: string): boolean {
    return storeFileExists(this.packPath(name));
  }

  idxPath(name: string): string {
    return path.join(this.root, 'packs', `${name}.idx`);
  }

  /**
   * Publish a pack's index (in tmp/) beside its published pack, create-if-absent: an index already
   * there stays (readers never trust one anyway). Only an index that names the pack's checksum is
   * published; false when it was not (or one was there).
   */
  publishIdx(tmpFile: string, name: string): boolean {
    try {
      const len = this.objectFormat === 'sha256' ? 32 : 20;
      const size = fs.statSync(tmpFile).size;
      const fd = fs.openSync(tmpFile, 'r');
      const tail = Buffer.alloc(len);
      try {
        fs.readSync(fd, tail, 0, len, size - 2 * len);
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      if (size < 8 + 1024 + 2 * len || `pack-${tail.toString('hex')}` !== name) return false;
      const made = linkOnce(tmpFile, this.idxPath(name), true);
      fsyncDir(path.join(this.root, 'packs'));
      return made;
    } catch (e) {
      throw storeError(this.root, e);
    } finally {
      fs.rmSync(tmpFile, { force: true });
    }
  }

  /** A temporary file path inside the store (same filesystem as the final names). */
  tempPath(what: string): string {
    return path.join(this.root, 'tmp', `${what}-${process.pid}-${crypto.randomBytes(6).toString('hex')}`);
  }

  /** publishPack, keeping a hard link of the pack in tmp/ (`copy`): a pusher re-links its pack from
   * it if a store gc trashed the pack while the push was publishing (see store-intents.ts). */
  publishPackKeeping(tmpFile: string): { name: string; copy: string } {
    const copy = this.tempPath('keep.pack');
    try {
      fs.linkSync(tmpFile, copy);
    } catch (e) {
      throw storeError(this.root, e);
    }
    try {
      return { name: this.publishPack(tmpFile), copy };
    } catch (e) {
      fs.rmSync(copy, { force: true });
      throw e;
    }
  }

  /** Publish a finished pack file (already in tmp/) under its trailer name; returns the name. */
  publishPack(tmpFile: string): string {
    const name = `pack-${packTrailer(tmpFile, this.objectFormat)}`;
    try {
      fsyncFile(tmpFile);
      linkOnce(tmpFile, this.packPath(name), true);
      fsyncDir(path.join(this.root, 'packs'));
    } catch (e) {
      throw storeError(this.root, e);
    } finally {
      fs.rmSync(tmpFile, { force: true });
    }
    return name;
  }

  /** State sequence numbers present, ascending. */
  stateSeqs(): number[] {
    let names: string[];
    try {
      names = fs.readdirSync(path.join(this.root, 'state'));
    } catch (e) {
      throw storeError(this.root, e);
    }
    return names
      .map((n) => /^(\d{12})\.json$/.exec(n))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
  }

  readState(seq: number): LoadedState {
    const file = path.join(this.root, 'state', `${String(seq).padStart(SEQ_DIGITS, '0')}.json`);
    let bytes: Buffer | null;
    try {
      bytes = readStoreFile(file, MAX_STATE_BYTES);
    } catch (e) {
      throw storeError(this.root, e);
    }
    if (!bytes) throw storeError(this.root, Object.assign(new Error(`ENOENT: ${file}`), { code: 'ENOENT' }));
    return { state: parseState(bytes, file, seq, this.objectFormat), hash: sha256(bytes) };
  }

  /** The newest state, or null for an empty store. */
  latest(): LoadedState | null {
    const seqs = this.stateSeqs();
    return seqs.length ? this.readState(seqs[seqs.length - 1]) : null;
  }

  /** Try to publish `state` as number state.seq; false if another writer got that number first. */
  publishState(state: StoreState): boolean {
    const file = `state/${String(state.seq).padStart(SEQ_DIGITS, '0')}.json`;
    return this.createFile(file, serializeState(state), false);
  }

  /** Create `rel` with these bytes if it does not exist; false if it did (unless `same` tolerates an
   * identical existing file). */
  private createFile(rel: string, bytes: Buffer, same: boolean): boolean {
    try {
      return this.createFileUnchecked(rel, bytes, same);
    } catch (e) {
      throw storeError(this.root, e);
    }
  }

  private createFileUnchecked(rel: string, bytes: Buffer, same: boolean): boolean {
    const tmp = this.tempPath('new');
    const fd = fs.openSync(tmp, 'wx');
    try {
      fs.writeSync(fd, bytes);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    try {
      const made = linkOnce(tmp, path.join(this.root, rel), same);
      fsyncDir(path.dirname(path.join(this.root, rel)));
      return made;
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }
}

/** A filesystem failure inside the store, as the typed error users see (read-only, gone, full…). */
export function storeError(root: string, e: unknown): XetError {
  if (e instanceof XetError) return e;
  const code = (e as NodeJS.ErrnoException).code;
  const why = code === 'EROFS' || code === 'EACCES' || code === 'EPERM' ? 'read-only or not permitted' : code;
  return new XetError('STORE_UNAVAILABLE', `the xet store at ${root} is unusable (${why}): ${(e as Error).message}`, {
    store: root,
    errno: code,
  });
}

/** link(2) src to dst; false if dst exists (true if `same` and its bytes equal src's). */
function linkOnce(src: string, dst: string, same: boolean): boolean {
  try {
    fs.linkSync(src, dst);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    if (same && sameBytes(src, dst)) return true;
    return false;
  }
}

function fsyncFile(file: string): void {
  const fd = fs.openSync(file, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export function sha256(bytes: Buffer | string): string {
  return crypto.createHash('sha256').update(bytes).digest('hex');
}

/** The checksum git writes at the end of a pack (SHA-1 or SHA-256 of the rest), which names it. */
export function packTrailer(file: string, format: 'sha1' | 'sha256'): string {
  const hashLen = format === 'sha256' ? 32 : 20;
  const size = fs.statSync(file).size;
  const fd = fs.openSync(file, 'r');
  try {
    const head = Buffer.alloc(4);
    fs.readSync(fd, head, 0, 4, 0);
    if (size < 12 + hashLen || head.toString('latin1') !== 'PACK') {
      throw new XetError('INTEGRITY_MISMATCH', `${file} is not a git pack`, { file });
    }
    const tail = Buffer.alloc(hashLen);
    fs.readSync(fd, tail, 0, hashLen, size - hashLen);
    return tail.toString('hex');
  } finally {
    fs.closeSync(fd);
  }
}

/** The size of a state's file, for a store's allowance (a state with placeholder pack names of the
 * right length is as big as the real one). */
export function stateFileBytes(state: StoreState): number {
  return serializeState(state).length;
}

function serializeState(state: StoreState): Buffer {
  const body = canonicalJson(state);
  return Buffer.from(`${canonicalJson({ sha256: sha256(body), state })}\n`);
}

function parseState(bytes: Buffer, file: string, seq: number, format: 'sha1' | 'sha256'): StoreState {
  const bad = (why: string) =>
    new XetError('INTEGRITY_MISMATCH', `store state ${file} is corrupt: ${why}`, { file, seq });
  let outer: { sha256?: unknown; state?: unknown };
  try {
    outer = JSON.parse(bytes.toString('utf8')) as typeof outer;
  } catch {
    throw bad('not JSON');
  }
  const s = outer.state as StoreState | undefined;
  if (!s || typeof outer.sha256 !== 'string') throw bad('no checksum');
  if (sha256(canonicalJson(s)) !== outer.sha256) throw bad('its checksum does not match its content');
  const oid = format === 'sha256' ? /^[0-9a-f]{64}$/ : /^[0-9a-f]{40}$/;
  if (s.schema !== STATE_SCHEMA) {
    throw new XetError('SCHEMA_UNSUPPORTED', `store state ${file} is ${String(s.schema)}`, { file });
  }
  if (s.seq !== seq) throw bad(`it says it is state ${s.seq}`);
  if (typeof s.refs !== 'object' || s.refs === null) throw bad('no refs');
  for (const [name, value] of Object.entries(s.refs)) {
    if (!name.startsWith('refs/') || typeof value !== 'string' || !oid.test(value)) throw bad(`bad ref ${name}`);
  }
  if (!Array.isArray(s.packs) || s.packs.some((p) => typeof p !== 'string' || !/^pack-[0-9a-f]{40,64}$/.test(p))) {
    throw bad('bad pack list');
  }
  return s;
}
