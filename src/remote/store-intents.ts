// What a running push or store gc tells a store gc (xet.store/v1 additions for `gc --store`):
//
//   <root>/pushing/<pushId>-<pid>.json  an intent, create-if-absent, written by a pusher (or a gc)
//                                       before it uploads a pack and removed once its state is
//                                       published and its packs are checked to be in place
//   <root>/trash/pack-<h>.pack          a pack a store gc is about to delete: renamed there first, so
//                                       a pack a newer state names can be linked back
//
// A gc never deletes a pack no state names whose file is newer than the oldest live intent (the
// pack of a push in flight), and readers that miss a pack in packs/ look in trash/ (a gc killed
// between its rename and its link-back leaves it there). See docs/DESIGN-NOTES.md, "Store gc".

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { canonicalJson } from '../snapshot/canonical-json';
import { fsyncDir, storeError, type DirectoryStore } from './store';
import { readStoreFile, storeFileExists } from './storefile';

export const INTENT_SCHEMA = 'xet.store-intent/v1';
/** An intent from another host cannot be checked by pid: it counts as live this long. */
export const FOREIGN_INTENT_SECONDS = 24 * 3600;
const MAX_INTENT_BYTES = 4096;

export interface Intent {
  schema: typeof INTENT_SCHEMA;
  pushId: string;
  host: string;
  pid: number;
  startedAt: string;
}

export interface IntentFile {
  name: string;
  intent: Intent | null;
  /** The file's mtime (the store's clock, as pack mtimes are). */
  mtimeMs: number;
  live: boolean;
}

export function intentDir(store: DirectoryStore): string {
  return path.join(store.root, 'pushing');
}

export function trashDir(store: DirectoryStore): string {
  return path.join(store.root, 'trash');
}

/** Announce a pack upload in flight; returns the intent's file, to remove with `withdrawIntent`. */
export function declareIntent(store: DirectoryStore, pushId: string): string {
  const dir = intentDir(store);
  const safeId = pushId.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 100);
  const file = path.join(dir, `${safeId}-${process.pid}-${crypto.randomBytes(3).toString('hex')}.json`);
  const intent: Intent = {
    schema: INTENT_SCHEMA,
    pushId,
    host: os.hostname(),
    pid: process.pid,
    startedAt: new Date().toISOString(),
  };
  try {
    fs.mkdirSync(dir, { recursive: true });
    const tmp = store.tempPath('intent');
    fs.writeFileSync(tmp, `${canonicalJson(intent)}\n`, { flag: 'wx' });
    try {
      fs.linkSync(tmp, file);
    } finally {
      fs.rmSync(tmp, { force: true });
    }
    fsyncDir(dir);
  } catch (e) {
    throw storeError(store.root, e);
  }
  return file;
}

export function withdrawIntent(file: string | null): void {
  if (file) fs.rmSync(file, { force: true });
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Every intent in the store, each judged live or dead. Unreadable ones count as live (a gc then
 * keeps more, never less) until they are older than FOREIGN_INTENT_SECONDS. */
export function readIntents(store: DirectoryStore, now: Date): IntentFile[] {
  const dir = intentDir(store);
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw storeError(store.root, e);
  }
  const out: IntentFile[] = [];
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const file = path.join(dir, name);
    const st = fs.lstatSync(file, { throwIfNoEntry: false });
    if (!st) continue; // withdrawn meanwhile
    let intent: Intent | null = null;
    try {
      const bytes = st.isFile() ? readStoreFile(file, MAX_INTENT_BYTES) : null;
      const parsed = bytes ? (JSON.parse(bytes.toString('utf8')) as Intent) : null;
      if (parsed?.schema === INTENT_SCHEMA && typeof parsed.pid === 'number' && typeof parsed.host === 'string') {
        intent = parsed;
      }
    } catch {
      intent = null;
    }
    const young = now.getTime() - st.mtimeMs < FOREIGN_INTENT_SECONDS * 1000;
    const live = intent && intent.host === os.hostname() ? pidAlive(intent.pid) : young;
    out.push({ name, intent, mtimeMs: st.mtimeMs, live });
  }
  return out;
}

/** Where a pack's bytes are: packs/, else trash/ (a gc died before linking it back), else null. */
export function locatePack(store: DirectoryStore, name: string): string | null {
  const main = store.packPath(name);
  if (storeFileExists(main)) return main;
  const trashed = path.join(trashDir(store), `${name}.pack`);
  return storeFileExists(trashed) ? trashed : null;
}

/** Put a pack back under packs/ from `from` (a trash entry or a pusher's own copy); true when it is
 * there afterwards. */
export function relinkPack(store: DirectoryStore, name: string, from: string): boolean {
  // From trash/, the pack's index comes back too (it went there with the pack), index first.
  const idx = path.join(trashDir(store), `${name}.idx`);
  for (const [src, dst] of [
    ...(path.dirname(from) === trashDir(store) ? [[idx, store.idxPath(name)]] : []),
    [from, store.packPath(name)],
  ]) {
    try {
      fs.linkSync(src, dst);
      if (src === idx) fs.rmSync(idx, { force: true });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'EEXIST' && code !== 'ENOENT') throw storeError(store.root, e);
    }
  }
  fsyncDir(path.join(store.root, 'packs'));
  return storeFileExists(store.packPath(name));
}
