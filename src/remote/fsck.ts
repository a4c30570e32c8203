// `git xet fsck --store`: is a directory store whole? Every state parses and carries its checksum,
// the log is numbered 1..N without gaps and each state names the hash of the one before, every pack
// the newest state names is present, ends with the checksum that names it and indexes cleanly (git
// re-hashes each object), and every ref of the newest state is reachable with all its objects. A
// store gc's state may name fewer packs than the one before; a pack may be in trash/ (readers look
// there too); intents in pushing/ are pushes in flight. A pack's index (packs/pack-<h>.idx), when
// there, must be the very index git makes of the pack; one without its pack is reported.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { readStoreAllowance } from '../allowance/store-root';
import { git } from '../git/exec';
import { DirectoryStore, packTrailer, type LoadedState } from './store';
import { locatePack, readIntents, trashDir } from './store-intents';
import { copyStoreFile, sameBytes, storeFileExists } from './storefile';
import { orphanIndexes } from './store-idx';
import { storePathFromUrl } from './url';

export interface StoreCheck {
  ok: boolean;
  store: string;
  states: number;
  packs: number;
  refs: number;
  problems: string[];
  /** Pack files no state names (left by pushes that lost a race): harmless, reported. */
  unreferencedPacks: string[];
  /** Pack files in trash/ (a store gc is deleting them, or died doing so): harmless, reported. */
  trashedPacks: string[];
  /** Live intents in pushing/: pushes (or store gcs) in flight. */
  intents: number;
  /** Packs of the newest state that have an index (packs/pack-<h>.idx), checked against the pack. */
  indexed: number;
}

export async function fsckStore(cwd: string, where: string): Promise<StoreCheck> {
  const root = storePathFromUrl(where, cwd);
  const store = DirectoryStore.open(root);
  const problems: string[] = [];
  const seqs = store.stateSeqs();
  let prev: LoadedState | null = null;
  const present = new Set(seqs);
  const last = seqs.length ? seqs[seqs.length - 1] : 0;
  for (let n = 1; n <= last; n++) if (!present.has(n)) problems.push(`state ${n} is missing`);
  const seen = new Set<string>();
  for (const seq of seqs) {
    let cur: LoadedState;
    try {
      cur = store.readState(seq);
    } catch (e) {
      problems.push((e as Error).message);
      prev = null;
      continue;
    }
    if (prev && cur.state.prev !== prev.hash) problems.push(`state ${seq} does not follow state ${prev.state.seq}`);
    if (!prev && seq === 1 && cur.state.prev !== null) problems.push('state 1 names a predecessor');
    // Only a store gc's state (pushId gc-*) names fewer packs: it compacted them into its own.
    if (prev && !cur.state.pushId.startsWith('gc-'))
      for (const p of prev.state.packs) if (!cur.state.packs.includes(p)) problems.push(`state ${seq} drops pack ${p}`);
    for (const p of cur.state.packs) seen.add(p);
    prev = cur;
  }
  // The store's allowance (its one mutable file): unreadable, it refuses every push.
  try {
    readStoreAllowance(root);
  } catch (e) {
    problems.push((e as Error).message);
  }
  const latest = seqs.length ? safeLatest(store, problems) : null;
  const packs = latest?.state.packs ?? [];
  const refs = latest ? Object.values(latest.state.refs) : [];
  const indexes: string[] = [];
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-fsck-'));
  try {
    await git(['init', '--quiet', '--bare', `--object-format=${store.objectFormat}`, scratch]);
    const packDir = path.join(scratch, 'objects', 'pack');
    for (const name of packs) {
      const dst = path.join(packDir, `${name}.pack`);
      try {
        // In trash/ when a store gc died between trashing it and linking it back: readers use it
        // there. (Inside the try: a FIFO or a directory in its place is a problem to list.)
        const src = locatePack(store, name) ?? store.packPath(name);
        if (!copyStoreFile(src, dst)) {
          problems.push(`pack ${name} is missing`);
          continue;
        }
        if (packTrailer(dst, store.objectFormat) !== name.slice('pack-'.length)) {
          problems.push(`pack ${name} does not end with the checksum that names it`);
          continue;
        }
      } catch (e) {
        problems.push(`pack ${name}: ${(e as Error).message}`);
        continue;
      }
      const r = await git(['index-pack', dst], { env: { GIT_DIR: scratch }, okCodes: [128] });
      if (r.code !== 0) problems.push(`pack ${name} is corrupt: ${r.stderr.trim().split('\n').pop()}`);
      else {
        // Its index, if it has one, must be the one git makes of it (v2 indexes are deterministic):
        // readers hash every object they read through it anyway, but a wrong one is damage.
        try {
          const idx = store.idxPath(name);
          if (storeFileExists(idx) && !sameBytes(dst.replace(/\.pack$/, '.idx'), idx)) {
            indexes.push(name);
            problems.push(`index ${name}.idx is not the index of its pack`);
          } else if (storeFileExists(idx)) indexes.push(name);
        } catch (e) {
          problems.push(`index ${name}.idx: ${(e as Error).message}`);
        }
      }
    }
    for (const name of orphanIndexes(store, trashDir(store))) {
      problems.push(`index ${name}.idx has no pack (git xet gc --store removes it)`);
    }
    if (refs.length) {
      const r = await git(['rev-list', '--objects', '--quiet', '--stdin'], {
        env: { GIT_DIR: scratch },
        input: `${[...new Set(refs)].join('\n')}\n`,
        okCodes: [128],
      });
      if (r.code !== 0)
        problems.push(`the newest state names objects the store lacks: ${r.stderr.trim().split('\n').pop()}`);
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  const onDisk = fs
    .readdirSync(path.join(root, 'packs'))
    .filter((n) => n.endsWith('.pack'))
    .map((n) => n.slice(0, -'.pack'.length));
  const trashed = fs.existsSync(trashDir(store))
    ? fs
        .readdirSync(trashDir(store))
        .filter((n) => n.endsWith('.pack'))
        .map((n) => n.slice(0, -'.pack'.length))
    : [];
  return {
    ok: problems.length === 0,
    store: root,
    states: seqs.length,
    packs: packs.length,
    refs: refs.length,
    problems,
    unreferencedPacks: onDisk.filter((n) => !seen.has(n)),
    trashedPacks: trashed,
    intents: readIntents(store, new Date()).filter((i) => i.live).length,
    indexed: indexes.length,
  };
}

function safeLatest(store: DirectoryStore, problems: string[]): LoadedState | null {
  try {
    return store.latest();
  } catch (e) {
    if (e instanceof XetError) return null; // already reported above
    problems.push((e as Error).message);
    return null;
  }
}
