// Pack indexes in a directory store (`packs/pack-<h>.idx`, a v1 minor addition; docs/FORMAT.md):
// git's own v2 index of a pack, written by the pusher (and a store gc, for its compacted pack)
// create-if-absent right after the pack is published, so a reader can find single objects without
// copying and indexing the whole pack (the lazy source, lazy-store.ts). An index is optional (a
// pack without one is read as before) and untrusted: every object read through it is hashed.
//
// The index is made by `git index-pack` outside any repository (no collision checks that would
// read every object back from the pusher's repository), in the store's tmp/ beside the pack.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git } from '../git/exec';
import { type DirectoryStore } from './store';

/** Index a finished pack in tmp/; the index's path (in tmp/), or null when git refused the pack. */
export async function indexStorePack(store: DirectoryStore, tmpPack: string): Promise<string | null> {
  const idx = `${tmpPack}.idx`;
  const dir = path.dirname(tmpPack);
  const r = await git(['index-pack', `--object-format=${store.objectFormat}`, '-o', idx, tmpPack], {
    cwd: dir,
    // Not inside any repository: nothing above tmp/ is looked at.
    env: { GIT_CEILING_DIRECTORIES: path.dirname(dir) },
    okCodes: [128],
  });
  if (r.code !== 0) {
    fs.rmSync(idx, { force: true });
    return null;
  }
  return idx;
}

/** Write and publish the index of the published pack `name`, whose bytes are still at `tmpCopy`
 * (a hard link of the published pack). Best effort: a pack without an index is still a pack. */
export async function publishIndexFor(store: DirectoryStore, name: string, tmpCopy: string): Promise<boolean> {
  const idx = await indexStorePack(store, tmpCopy).catch(() => null);
  if (!idx) return false;
  return store.publishIdx(idx, name);
}

/** Index files in packs/ whose pack is in neither packs/ nor trash/ (a gc deleted the pack and died
 * before its index), for a store gc to remove and fsck to report. */
export function orphanIndexes(store: DirectoryStore, trash: string): string[] {
  const dir = path.join(store.root, 'packs');
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const packs = new Set(names.filter((n) => n.endsWith('.pack')).map((n) => n.slice(0, -5)));
  const trashed = new Set(
    (fs.existsSync(trash) ? fs.readdirSync(trash) : []).filter((n) => n.endsWith('.pack')).map((n) => n.slice(0, -5)),
  );
  return names
    .filter((n) => /^pack-[0-9a-f]{40,64}\.idx$/.test(n))
    .map((n) => n.slice(0, -4))
    .filter((n) => !packs.has(n) && !trashed.has(n));
}

/** Indexes in trash/ without their pack there (a gc died between moving the index and its pack):
 * linked back beside a pack still in packs/, else removed. */
export function tidyTrashIndexes(store: DirectoryStore, trash: string): void {
  const names = fs.existsSync(trash) ? fs.readdirSync(trash) : [];
  for (const n of names.filter((x) => /^pack-[0-9a-f]{40,64}\.idx$/.test(x))) {
    const name = n.slice(0, -4);
    if (names.includes(`${name}.pack`)) continue;
    if (fs.existsSync(store.packPath(name))) {
      try {
        fs.linkSync(path.join(trash, n), store.idxPath(name));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
    }
    fs.rmSync(path.join(trash, n), { force: true });
  }
}
