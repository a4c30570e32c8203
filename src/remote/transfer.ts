// Moving objects between a local repository and a directory store. Push writes one pack of exactly
// the objects the store lacks (reachable from the new tips, not from any tip the store already has)
// and its index (store-idx.ts);
// fetch copies the store's packs the repository does not have and has git index them, which
// re-hashes every object: a corrupt or forged pack is refused, never half imported.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText, gitToFile, type GitOptions } from '../git/exec';
import { faultPoint } from '../testing/fault-points';
import { tracePhase } from '../testing/trace';
import { callerGone } from '../cli/invocation';
import { objectSizes } from '../git/plumbing';
import type { Repo } from '../git/repo';
import type { StoreAdmission } from '../allowance/store-root';
import type { Amount } from '../allowance/model';
import { sidecarDir } from '../sidecar/db';
import { packTrailer, storeError, type DirectoryStore } from './store';
import { locatePack } from './store-intents';
import { indexStorePack } from './store-idx';
import { copyStoreFile, openStoreFile } from './storefile';
import { admitRepository, unlimited } from '../allowance/admit';
import { dieAt } from '../testing/fault-points';
import { ObjectReader } from '../git/object-reader';
import { objectsToPush, type PushObject } from './push-objects';

/** How many of the store's snapshots bound a push by their trees (see pushPack). */
const SNAPSHOT_TREES_EXCLUDED = 16;

/** The store's allowance for a push: `besides` is what the push publishes with its pack (the state);
 * `admitted` runs once the estimate is admitted, before the first byte is written, and adds
 * `transient` (the pusher's intent, removed when it is done; a refused push then leaves the store
 * as it was). */
export interface PushAdmission {
  admission: StoreAdmission;
  besides: Amount;
  transient: Amount;
  admitted(): void;
  /** Aborted when the push's caller went away: the pack is not written (CANCELLED). */
  signal?: AbortSignal;
}

/** Write the objects reachable from `tips` and not from the store's refs into the store; the pack's
 * name, or null when the store already has everything. With `allow`, refused with
 * ALLOWANCE_EXCEEDED before the pack is written (by git's estimate) and again, by its real size,
 * before it is published: a refused push leaves no pack. */
export async function pushPack(
  store: DirectoryStore,
  o: GitOptions,
  tips: string[],
  storeRefs: Record<string, string>,
  keep?: (name: string, copy: string) => void,
  allow?: PushAdmission,
  /** The repository's object directory: the comparison reads what it can there (without git). */
  objectsDir?: string,
): Promise<string | null> {
  if (!tips.length) return null;
  // The objects the store lacks by comparing trees (push-objects.ts); null: walk with pack-objects.
  const listed = await objectsToPush(o, tips, storeRefs, SNAPSHOT_TREES_EXCLUDED, store.objectFormat, objectsDir);
  tracePhase(`store: pack of ${listed ? listed.length : 'a walk'}`);
  if (listed && !listed.length) return null;
  const exclude = listed ? [] : await pushExcludes(o, storeRefs);
  if (allow && !unlimited(allow.admission.limits)) {
    const pack =
      allow.admission.limits.bytes === null
        ? 0
        : listed
          ? await listedSize(o, listed)
          : await packEstimate(o, tips, exclude);
    // The pack and its index (whose bytes are counted from disk before anything is published).
    allow.admission.check({
      bytes: pack + allow.besides.bytes + allow.transient.bytes,
      files: 2 + allow.besides.files + allow.transient.files,
    });
  }
  allow?.admitted();
  const tmp = store.tempPath('push.pack');
  try {
    // Names are only pack-objects' hint for deltas: a newline in one would end its line.
    const input = listed
      ? Buffer.from(listed.map((x) => `${x.oid} ${x.name.replace(/\n/g, ' ')}\n`).join(''), 'latin1')
      : `${tips.join('\n')}\n--not\n${exclude.join('\n')}\n`;
    return await writePack(store, tmp, o, input, !listed, keep, allow);
  } catch (e) {
    if (e instanceof XetError && (e.code === 'ALLOWANCE_EXCEEDED' || e.code === 'CANCELLED')) throw e;
    // Not being able to write the temporary pack is the store's problem (read-only, full), not git's.
    if (e instanceof XetError && e.code !== 'GIT_FAILED') throw e;
    if (e instanceof XetError && !/EROFS|EACCES|EPERM|ENOSPC|ENOENT/.test(String(e.message))) throw e;
    throw storeError(store.root, e);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** What the listed objects take on disk here: the figure packEstimate gives for a walk. */
async function listedSize(o: GitOptions, listed: PushObject[]): Promise<number> {
  const reader = new ObjectReader(o);
  try {
    let n = 0;
    for (const i of await reader.info(listed.map((x) => x.oid))) n += i?.diskSize ?? 0;
    return n;
  } finally {
    reader.close();
  }
}

/** Write the pack pack-objects makes of `input` (with `revs`: tips and `--not` exclusions to walk;
 * without: the exact object list) to `tmp` in the store, index it and publish both. */
async function writePack(
  store: DirectoryStore,
  tmp: string,
  o: GitOptions,
  input: string | Buffer,
  revs: boolean,
  keep?: (name: string, copy: string) => void,
  allow?: PushAdmission,
): Promise<string | null> {
  {
    // --no-sparse: git's sparse walk (pack.useSparse, on by default) marks excluded trees only along
    // the paths the new commits change, so a snapshot, whose tree holds the work under files/, would
    // re-send every unchanged blob of a changed directory the store has under the commit's paths (a
    // one-line edit beside a 9 MB file sent the 9 MB again). The full walk sends what rev-list
    // counts, which is also what the allowance's estimate measures.
    const args = revs
      ? ['pack-objects', '--revs', '--no-sparse', '--stdout', '-q', '--delta-base-offset']
      : ['pack-objects', '--stdout', '-q', '--delta-base-offset'];
    await faultPoint('push:before-pack');
    tracePhase('store: pack-objects');
    await gitToFile(args, tmp, { ...o, input, signal: allow?.signal });
    const header = Buffer.alloc(12);
    const fd = fs.openSync(tmp, 'r');
    fs.readSync(fd, header, 0, 12, 0);
    fs.closeSync(fd);
    if (header.readUInt32BE(8) === 0) return null; // nothing new
    // Its index (packs/pack-<h>.idx), made now and published right after the pack: readers find
    // single objects through it (lazy-store.ts). Best effort: a pack without one reads as before.
    tracePhase('store: index the pack');
    const idx = await indexStorePack(store, tmp).catch(() => null);
    tracePhase('store: publish the pack');
    try {
      // The caller gone while the index was made: the pack is not published (the finally of
      // pushPack removes it), as a killed push publishes none.
      if (await callerGone(allow?.signal)) throw new XetError('CANCELLED', 'interrupted before its pack was published');
      // The complete temporary pack, its index and the intent are counted from disk now; what is
      // left is the state.
      allow?.admission.check(allow.besides);
      let name: string;
      if (!keep) name = store.publishPack(tmp);
      else {
        const kept = store.publishPackKeeping(tmp);
        name = kept.name;
        keep(name, kept.copy);
      }
      if (idx) store.publishIdx(idx, name);
      return name;
    } finally {
      if (idx) fs.rmSync(idx, { force: true });
    }
  }
}

/**
 * What git says the objects a push sends take on disk here (`rev-list --disk-usage`: packed entries
 * as stored, loose objects compressed). An estimate, not a bound: an object stored here as a delta
 * against one the push leaves out is sent whole (packs in a store are never thin). It refuses a
 * push that is plainly too big before any byte is written; the real size is checked again before
 * the pack is published.
 */
async function packEstimate(o: GitOptions, tips: string[], exclude: string[]): Promise<number> {
  const out = await gitText(['rev-list', '--objects', '--disk-usage', '--stdin'], {
    ...o,
    // rev-list --stdin of git 2.39 takes no --not line: ^<rev> says the same.
    input: [...tips, ...exclude.map((x) => `^${x}`)].map((x) => `${x}\n`).join(''),
  });
  const n = Number(out.trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/** Store packs this repository has imported, per store: a local `git gc` merges imported packs away,
 * and their objects stay; the names alone say what not to copy again. */
function importedLedger(repo: Repo, store: DirectoryStore): string {
  const key = crypto.createHash('sha256').update(store.root).digest('hex').slice(0, 16);
  return path.join(sidecarDir(repo.commonDir), 'imported-packs', `${key}.txt`);
}

/** Copy into the repository every store pack it does not have, verified by `git index-pack`. Every
 * pack's size is known from the store before a byte is copied: their sum (and an upper bound of the
 * indexes git will write, from each pack's object count) is admitted into the repository root first,
 * each pack is rechecked once its temporaries are complete and recorded before it is renamed. */
export async function importPacks(
  store: DirectoryStore,
  repo: Repo,
  packs: string[],
  ignoreLedger = false,
): Promise<string[]> {
  const { packDir, ledger, plan, total } = importPlan(store, repo, packs, ignoreLedger);
  if (!plan.length) return [];
  const admission = await admitRepository(repo, total(0), 'grow', `fetch from ${store.root}`);
  fs.mkdirSync(packDir, { recursive: true });
  const imported: string[] = [];
  try {
    for (let i = 0; i < plan.length; i++) {
      const { name, src } = plan[i];
      const final = path.join(packDir, `${name}.pack`);
      const tmp = path.join(packDir, `tmp_xet_${process.pid}_${crypto.randomBytes(6).toString('hex')}`);
      try {
        if (!copyStoreFile(src, `${tmp}.pack`, () => dieAt('fetch:mid-import'))) {
          throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} vanished`);
        }
        if (packTrailer(`${tmp}.pack`, store.objectFormat) !== name.slice('pack-'.length)) {
          throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} does not end with the checksum that names it`, {
            store: store.root,
            pack: name,
          });
        }
        const r = await git(['index-pack', '-o', `${tmp}.idx`, `${tmp}.pack`], {
          cwd: repo.commonDir,
          env: { GIT_DIR: repo.commonDir },
          okCodes: [128],
        });
        if (r.code !== 0) {
          throw new XetError(
            'INTEGRITY_MISMATCH',
            `store pack ${name} is corrupt: ${r.stderr.trim().split('\n').pop()}`,
            {
              store: store.root,
              pack: name,
            },
          );
        }
        // Complete and counted from disk now: the packs still to come are what is left to admit.
        admission.recheck(total(i + 1));
        const parts = ['.pack', '.idx', '.rev'].filter((s) => fs.existsSync(`${tmp}${s}`));
        const amount = { bytes: 0, files: parts.length };
        for (const s of parts) amount.bytes += fs.statSync(`${tmp}${s}`).size;
        // A failed record keeps this writer's crash marker: the next writer recounts. The import goes on.
        admission.record(`pack:${name}`, amount);
        // The pack becomes visible to git when its index appears: index last.
        fs.renameSync(`${tmp}.pack`, final);
        if (parts.includes('.rev')) fs.renameSync(`${tmp}.rev`, path.join(packDir, `${name}.rev`));
        fs.renameSync(`${tmp}.idx`, path.join(packDir, `${name}.idx`));
        imported.push(name);
        fs.mkdirSync(path.dirname(ledger), { recursive: true });
        fs.appendFileSync(ledger, `${name}\n`);
      } finally {
        for (const s of ['.pack', '.idx', '.rev']) fs.rmSync(`${tmp}${s}`, { force: true });
      }
    }
  } finally {
    admission.end();
  }
  return imported;
}

/** An upper bound of what importing a store pack adds: the pack as the store holds it, the .idx git
 * writes for its objects (the count from the pack's header) and a .rev. The header is the store's
 * word: a count no pack of that size could hold is refused. */
function storePackBound(store: DirectoryStore, name: string, src: string): Amount {
  const f = openStoreFile(src);
  if (!f) {
    throw new XetError('INTEGRITY_MISMATCH', `the store names pack ${name}, which it does not hold`, {
      store: store.root,
      pack: name,
    });
  }
  const header = Buffer.alloc(12);
  try {
    if (f.size >= 12) fs.readSync(f.fd, header, 0, 12, 0);
  } finally {
    fs.closeSync(f.fd);
  }
  const oid = store.objectFormat === 'sha256' ? 32 : 20;
  const n = header.readUInt32BE(8);
  // An entry is at least a header byte and a zlib stream (2 bytes of header, 4 of checksum).
  if (f.size < 12 + oid || header.toString('latin1', 0, 4) !== 'PACK' || n * 7 > f.size) {
    throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} has no valid pack header`, {
      store: store.root,
      pack: name,
    });
  }
  const idx = 8 + 1024 + n * (oid + 8) + (f.size > 2 ** 31 ? n * 8 : 0) + 2 * oid;
  return { bytes: f.size + idx + 12 + 4 * n + 2 * oid, files: 3 };
}

/** What a push must not send again: the store's tips this repository has and the trees of the
 * store's newest snapshots (see pushPack). `git xet push` estimates with it before any local effect. */
export async function pushExcludes(o: GitOptions, storeRefs: Record<string, string>): Promise<string[]> {
  const have = [...new Set(Object.values(storeRefs))];
  // Tips the store has that we lack locally cannot bound the walk; leaving them out only costs size.
  const present = await objectSizes(have, o);
  const exclude = have.filter((oid) => present.has(oid));
  // Snapshots are siblings, not ancestors, of each other (their parents are the repository's
  // commits), and excluding a commit does not exclude the trees of commits beside it: a new
  // snapshot would re-send every untracked and ignored file the store already has. Naming the trees
  // of the store's newest snapshots as excluded too keeps a push to what changed. Subtrees they
  // share are walked once, so the cost follows the distinct content, bounded by the count.
  const snapshots = Object.entries(storeRefs)
    .filter(([name, oid]) => name.startsWith('refs/xet/snapshots/') && present.has(oid))
    .map(([, oid]) => oid);
  if (snapshots.length) {
    const newest = await gitText(
      ['rev-list', '--no-walk=sorted', `--max-count=${SNAPSHOT_TREES_EXCLUDED}`, '--stdin'],
      { ...o, input: `${snapshots.join('\n')}\n` },
    );
    for (const oid of newest.split('\n').filter(Boolean)) exclude.push(`${oid}^{tree}`);
  }
  return exclude;
}

/** What a push of `tips` would send to a store with `storeRefs`, by git's estimate (packEstimate). */
export async function pushEstimate(o: GitOptions, tips: string[], storeRefs: Record<string, string>): Promise<number> {
  return packEstimate(o, tips, await pushExcludes(o, storeRefs));
}

/** The store packs an import would copy and an upper bound of what they add (`total(i)`: from the
 * i-th on); `git xet fetch` checks `total(0)` before any effect, importPacks admits it. */
export function importPlan(
  store: DirectoryStore,
  repo: Repo,
  packs: string[],
  ignoreLedger = false,
): {
  packDir: string;
  ledger: string;
  plan: { name: string; src: string; bound: Amount }[];
  total: (from: number) => Amount;
} {
  const packDir = path.join(repo.objectsDir, 'pack');
  const ledger = importedLedger(repo, store);
  const known = new Set(
    !ignoreLedger && fs.existsSync(ledger) ? fs.readFileSync(ledger, 'utf8').split('\n').filter(Boolean) : [],
  );
  const plan: { name: string; src: string; bound: Amount }[] = [];
  for (const name of packs) {
    const final = path.join(packDir, `${name}.pack`);
    if (known.has(name) || (fs.existsSync(final) && fs.existsSync(path.join(packDir, `${name}.idx`)))) continue;
    // A pack a store gc is deleting may be in trash/ (the gc died before linking it back).
    const src = locatePack(store, name) ?? store.packPath(name);
    const bound = storePackBound(store, name, src);
    plan.push({ name, src, bound });
  }
  const total = (from: number): Amount => {
    const a = { bytes: 0, files: 0 };
    for (const p of plan.slice(from)) {
      a.bytes += p.bound.bytes;
      a.files += p.bound.files;
    }
    // The imported-packs list: a line per pack, the file itself the first time.
    a.bytes += (plan.length - from) * 46;
    if (!fs.existsSync(ledger)) a.files++;
    return a;
  };
  return { packDir, ledger, plan, total };
}
