// Garbage collection of a xet directory store (git xet gc --store): compacts the packs every ref of
// the newest state needs into one, publishes a state naming only it, and deletes pack files no state
// has named for longer than the grace (default 28 days), without ever deleting a pack a state names
// or a push in flight will name. Only create-if-absent files are written (the compacted pack, the
// state, an intent), plus renames into trash/ and deletions. The argument is in
// docs/DESIGN-NOTES.md, "Store gc"; the files in docs/FORMAT.md.
//
// Roots: every ref of the newest state (branches, tags, snapshots, pins, handoffs), except handoffs
// whose descriptor's expiresAt is older than the grace: the gc's state leaves those out, and their
// signatures (refs/xet/signatures/<handoff-id>/…) with them.
//
// The journal is the local sidecar's gc_runs table (target = the store's path) when run inside a
// repository; the store's own record of a gc is its state (pushId `gc-<id>`) in the state log.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitToFile } from '../git/exec';
import { catFileBatch } from '../git/plumbing';
import { findRepo } from '../git/repo';
import { acquireLock, type Lock } from '../sidecar/lock';
import { withSidecar } from '../sidecar/db';
import { faultPoint } from '../testing/fault-points';
import {
  DirectoryStore,
  STATE_SCHEMA,
  fsyncDir,
  packTrailer,
  stateFileBytes,
  storeError,
  type LoadedState,
  type StoreState,
} from './store';
import type { Amount } from '../allowance/model';
import { INTENT_BOUND, storeAdmission } from '../allowance/store-root';
import { declareIntent, locatePack, readIntents, relinkPack, trashDir, withdrawIntent } from './store-intents';
import { copyStoreFile } from './storefile';
import { indexStorePack, orphanIndexes, tidyTrashIndexes } from './store-idx';
import { storePathFromUrl } from './url';

export const STORE_GC_DEFAULT_GRACE_SECONDS = 28 * 86400;
/** Pack mtimes and intent mtimes come from one filesystem clock; this covers a writer's own skew
 * between creating its intent and its pack on a network filesystem. */
const INTENT_SLACK_MS = 60_000;
/** A temporary file of a writer that died: removed once older than this (and than the grace). */
const TMP_MAX_AGE_MS = 24 * 3600 * 1000;
const HANDOFFS = 'refs/xet/handoffs/';
const SIGNATURES = 'refs/xet/signatures/';

export interface StoreGcOptions {
  dryRun: boolean;
  /** Seconds; undefined: the default (28 days). Infinity: never delete a pack file. */
  graceSeconds?: number;
  now?: Date;
}

export interface StoreGcPack {
  name: string;
  bytes: number;
  /** orphan: no state ever named it (a push that lost a race or was killed); superseded: named
   * until a later state (a gc's) left it out. */
  why: 'orphan' | 'superseded';
  /** When it stopped being named (or its mtime, for an orphan). */
  since: string;
}

export interface StoreGcResult {
  store: string;
  /** `gc-<hex>`: the pushId of the state this gc published. */
  id: string;
  dryRun: boolean;
  /** null: never. */
  graceSeconds: number | null;
  cutoff: string | null;
  /** The state the gc decided on, and the one it published (null: none was needed, or dry run). */
  basedOn: number | null;
  published: number | null;
  /** How many times another push published first and the gc decided again. */
  retries: number;
  refs: {
    kept: number;
    removed: { ref: string; oid: string; expiresAt: string }[];
  };
  packs: {
    /** Packs named by the newest state, before and after. */
    before: number;
    after: number;
    /** The compacted pack (null: none written, or no ref left). */
    compacted: string | null;
    /** Pack files deleted (dry run: that would be). */
    deleted: StoreGcPack[];
    /** Pack files no state names that stay: within the grace, or written after a live push began. */
    kept: (StoreGcPack & { reason: 'grace' | 'in-flight' })[];
    /** Trashed by a gc that died, named again by a state: linked back. */
    restored: string[];
  };
  objects: { before: number; after: number };
  bytes: { before: number; after: number; reclaimed: number };
  intents: { live: number; removed: number };
  tmpRemoved: number;
  problems: string[];
}

/** The store path for `--store`: a xet:: URL, a path, or the name of a remote with a xet:: URL. */
async function storeRoot(cwd: string, where: string): Promise<string> {
  if (/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(where) && !fs.existsSync(path.resolve(cwd, where))) {
    const r = await git(['remote', 'get-url', '--', where], { cwd, okCodes: [2, 128] });
    const url = r.stdout.toString('utf8').trim();
    if (r.code === 0 && url.startsWith('xet::')) return storePathFromUrl(url, cwd);
  }
  return storePathFromUrl(where, cwd);
}

interface Journal {
  step(state: string, step: string, extra?: { plan?: unknown; result?: unknown }): void;
}

function openJournal(
  commonDir: string | null,
  id: string,
  root: string,
  opts: StoreGcOptions,
  graceSeconds: number,
  cutoff: Date | null,
): Journal {
  if (!commonDir) return { step: () => undefined };
  const run = (fn: Parameters<typeof withSidecar>[1]) => {
    try {
      withSidecar(commonDir, fn);
    } catch {
      // The journal is a record for fsck, not a lock: a sidecar that cannot be written stops nothing.
    }
  };
  run((db) => {
    // Rows of store gcs whose process is gone were interrupted: recorded, never replayed.
    const open = db
      .prepare(`SELECT id, pid FROM gc_runs WHERE target = ? AND state NOT IN ('done', 'failed', 'interrupted')`)
      .all(root) as { id: string; pid: number }[];
    for (const row of open) {
      if (!pidAlive(row.pid)) db.prepare(`UPDATE gc_runs SET state = 'interrupted' WHERE id = ?`).run(row.id);
    }
    db.prepare(
      `INSERT INTO gc_runs (id, target, pid, started_at, state, dry_run, grace_seconds, cutoff)
       VALUES (?, ?, ?, ?, 'marking', ?, ?, ?)`,
    ).run(
      id,
      root,
      process.pid,
      new Date().toISOString(),
      opts.dryRun ? 1 : 0,
      Number.isFinite(graceSeconds) ? graceSeconds : null,
      cutoff ? cutoff.toISOString() : null,
    );
  });
  return {
    step(state, step, extra = {}) {
      run((db) => {
        db.prepare(
          `UPDATE gc_runs SET state = ?, step = ?, plan = COALESCE(?, plan), result = COALESCE(?, result),
             finished_at = CASE WHEN ? IN ('done', 'failed') THEN ? ELSE finished_at END WHERE id = ?`,
        ).run(
          state,
          step,
          extra.plan === undefined ? null : JSON.stringify(extra.plan),
          extra.result === undefined ? null : JSON.stringify(extra.result),
          state,
          new Date().toISOString(),
          id,
        );
      });
    },
  };
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const SCRATCH_PREFIX = 'xet-store-gc-';
/** Held by the gc that made the scratch: the kernel drops it when that process dies, however. */
const SCRATCH_OWNER = 'owner.lockdb';
/** A scratch younger than this is never judged (its owner may not hold its lock yet). */
const SCRATCH_SETTLE_MS = 60_000;
/** One without an owner lock (made before scratches had one, or left between mkdtemp and the lock)
 * is taken for dead only this old: no gc runs for a day. */
const SCRATCH_UNOWNED_MS = 24 * 3600_000;

/** Removes the scratches of store gcs that died (SIGKILL, power): each holds copies of a store's
 * packs, so a leftover can be gigabytes in the temporary directory. A scratch is a dead gc's when its
 * owner lock can be taken, or when it has none and is a day old; one of another user, or too young to
 * judge, is left alone. */
function sweepDeadScratches(tmp: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(tmp).filter((n) => n.startsWith(SCRATCH_PREFIX));
  } catch {
    return;
  }
  for (const name of names) {
    const dir = path.join(tmp, name);
    try {
      const st = fs.lstatSync(dir);
      if (!st.isDirectory() || st.uid !== process.getuid?.() || Date.now() - st.mtimeMs < SCRATCH_SETTLE_MS) continue;
      const owner = path.join(dir, SCRATCH_OWNER);
      if (fs.existsSync(owner)) {
        // Held while it goes: its gc cannot be alive, and no other sweep takes it meanwhile.
        const lock = acquireLock(owner, 'using a store gc scratch', 0);
        try {
          fs.rmSync(dir, { recursive: true, force: true });
        } finally {
          lock.release();
        }
      } else if (Date.now() - st.mtimeMs >= SCRATCH_UNOWNED_MS) fs.rmSync(dir, { recursive: true, force: true });
    } catch {
      // Held (a live gc), not ours, or gone already.
    }
  }
}

/** A bare scratch repository holding copies of store packs, each indexed (git re-hashes every
 * object: a forged pack is refused). */
class Scratch {
  readonly dir: string;
  private readonly counts = new Map<string, number>();
  private readonly owner: Lock;

  /** `sweep`: remove dead gcs' scratches first (not for a dry run, which changes nothing). */
  constructor(
    private readonly store: DirectoryStore,
    sweep: boolean,
  ) {
    if (sweep) sweepDeadScratches(os.tmpdir());
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), SCRATCH_PREFIX));
    try {
      this.owner = acquireLock(path.join(this.dir, SCRATCH_OWNER), 'using a store gc scratch', 0);
    } catch (e) {
      fs.rmSync(this.dir, { recursive: true, force: true });
      throw e;
    }
  }

  async init(): Promise<void> {
    await git(['init', '--quiet', '--bare', `--object-format=${this.store.objectFormat}`, this.dir]);
  }

  get env(): { env: Record<string, string> } {
    return { env: { GIT_DIR: this.dir } };
  }

  /** Index every pack of `names` not indexed yet; their object counts. */
  async add(names: string[]): Promise<void> {
    const packDir = path.join(this.dir, 'objects', 'pack');
    for (const name of names) {
      if (this.counts.has(name)) continue;
      const src = locatePack(this.store, name);
      if (!src) {
        throw new XetError('INTEGRITY_MISMATCH', `the store names pack ${name}, which it does not hold`, {
          store: this.store.root,
          pack: name,
        });
      }
      const dst = path.join(packDir, `${name}.pack`);
      if (!copyStoreFile(src, dst)) throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} vanished`);
      if (packTrailer(dst, this.store.objectFormat) !== name.slice('pack-'.length)) {
        throw new XetError('INTEGRITY_MISMATCH', `store pack ${name} does not end with the checksum that names it`, {
          store: this.store.root,
          pack: name,
        });
      }
      const r = await git(['index-pack', dst], { ...this.env, okCodes: [128] });
      if (r.code !== 0) {
        throw new XetError(
          'INTEGRITY_MISMATCH',
          `store pack ${name} is corrupt: ${r.stderr.trim().split('\n').pop()}`,
          {
            store: this.store.root,
            pack: name,
          },
        );
      }
      this.counts.set(name, idxObjectCount(path.join(packDir, `${name}.idx`)));
    }
  }

  objectsIn(names: string[]): number {
    return names.reduce((n, p) => n + (this.counts.get(p) ?? 0), 0);
  }

  remove(): void {
    // Removed while its lock is held, so no sweep takes it halfway.
    try {
      fs.rmSync(this.dir, { recursive: true, force: true });
    } finally {
      this.owner.release();
    }
  }
}

/** Objects in a version-2 pack index: the last fan-out entry. */
function idxObjectCount(file: string): number {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(4);
    fs.readSync(fd, b, 0, 4, 8 + 255 * 4);
    return b.readUInt32BE(0);
  } finally {
    fs.closeSync(fd);
  }
}

/** Handoff refs of `refs` whose descriptor expired before `cutoff`. Unreadable ones stay. */
async function expiredHandoffs(
  scratch: Scratch,
  refs: Record<string, string>,
  cutoff: Date | null,
): Promise<{ ref: string; oid: string; expiresAt: string }[]> {
  if (!cutoff) return [];
  const handoffs = Object.entries(refs).filter(([name]) => name.startsWith(HANDOFFS));
  if (!handoffs.length) return [];
  const names = handoffs.map(([, oid]) => `${oid}:descriptor.json`);
  const got = await catFileBatch(names, scratch.env, 64 * 1024);
  const out: { ref: string; oid: string; expiresAt: string }[] = [];
  handoffs.forEach(([ref, oid], n) => {
    const blob = got.get(names[n]);
    if (!blob || blob.type !== 'blob') return;
    let expiresAt: unknown;
    try {
      expiresAt = (JSON.parse(blob.data.toString('utf8')) as { expiresAt?: unknown }).expiresAt;
    } catch {
      return;
    }
    if (typeof expiresAt !== 'string' || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/.test(expiresAt)) return;
    if (Date.parse(expiresAt) < cutoff.getTime()) out.push({ ref, oid, expiresAt });
  });
  // A handoff's signatures go with it: left behind, each would keep the handoff and its snapshot.
  const gone = new Map(out.map((h) => [h.ref.slice(HANDOFFS.length), h.expiresAt]));
  for (const [ref, oid] of Object.entries(refs)) {
    const handoff = ref.startsWith(SIGNATURES) ? ref.slice(SIGNATURES.length).split('/')[0] : null;
    const expiresAt = handoff !== null ? gone.get(handoff) : undefined;
    if (expiresAt !== undefined) out.push({ ref, oid, expiresAt });
  }
  return out;
}

function headFor(latest: StoreState, refs: Record<string, string>): string | null {
  if (latest.head && refs[latest.head]) return latest.head;
  const branches = Object.keys(refs)
    .filter((r) => r.startsWith('refs/heads/'))
    .sort();
  return ['refs/heads/main', 'refs/heads/master'].find((r) => refs[r]) ?? branches[0] ?? null;
}

interface PackFile {
  name: string;
  file: string;
  bytes: number;
  mtimeMs: number;
  inTrash: boolean;
}

function listPackFiles(store: DirectoryStore): PackFile[] {
  const out: PackFile[] = [];
  for (const [dir, inTrash] of [
    [path.join(store.root, 'packs'), false],
    [trashDir(store), true],
  ] as const) {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw storeError(store.root, e);
    }
    for (const n of names) {
      const m = /^(pack-[0-9a-f]{40,64})\.pack$/.exec(n);
      if (!m) continue;
      const file = path.join(dir, n);
      const st = fs.lstatSync(file, { throwIfNoEntry: false });
      if (!st?.isFile()) continue;
      out.push({ name: m[1], file, bytes: st.size, mtimeMs: st.mtimeMs, inTrash });
    }
  }
  return out;
}

/** For each pack any state names: the seq of the last state naming it. */
function lastNamed(store: DirectoryStore, problems: string[]): { last: Map<string, number>; log: Map<number, string> } {
  const last = new Map<string, number>();
  const log = new Map<number, string>();
  for (const seq of store.stateSeqs()) {
    let st: LoadedState;
    try {
      st = store.readState(seq);
    } catch (e) {
      problems.push((e as Error).message);
      continue;
    }
    log.set(seq, st.state.createdAt);
    for (const p of st.state.packs) last.set(p, seq);
  }
  return { last, log };
}

export async function gcStore(cwd: string, where: string, opts: StoreGcOptions): Promise<StoreGcResult> {
  const root = await storeRoot(cwd, where);
  const store = DirectoryStore.open(root);
  const now = opts.now ?? new Date();
  const graceSeconds = opts.graceSeconds ?? STORE_GC_DEFAULT_GRACE_SECONDS;
  if (!(graceSeconds >= 0)) throw new XetError('USAGE', `the grace must be a duration, not ${graceSeconds}`);
  const cutoff = Number.isFinite(graceSeconds) ? new Date(now.getTime() - graceSeconds * 1000) : null;
  const id = `gc-${crypto.randomBytes(8).toString('hex')}`;
  const repo = await findRepo(cwd).catch(() => null);
  const journal = openJournal(repo?.commonDir ?? null, id, root, opts, graceSeconds, cutoff);
  const result: StoreGcResult = {
    store: root,
    id,
    dryRun: opts.dryRun,
    graceSeconds: Number.isFinite(graceSeconds) ? graceSeconds : null,
    cutoff: cutoff?.toISOString() ?? null,
    basedOn: null,
    published: null,
    retries: 0,
    refs: { kept: 0, removed: [] },
    packs: { before: 0, after: 0, compacted: null, deleted: [], kept: [], restored: [] },
    objects: { before: 0, after: 0 },
    bytes: { before: 0, after: 0, reclaimed: 0 },
    intents: { live: 0, removed: 0 },
    tmpRemoved: 0,
    problems: [],
  };
  result.bytes.before = listPackFiles(store).reduce((n, p) => n + p.bytes, 0);
  const admission = storeAdmission(store, 'settle', 'store gc');
  const scratch = new Scratch(store, !opts.dryRun);
  let intent: string | null = null;
  const copies: string[] = [];
  try {
    await scratch.init();
    // Compaction: one pack of exactly what the retained refs reach, named by a state of its own.
    let simulated = false;
    for (let attempt = 0; ; attempt++) {
      if (attempt >= 100) {
        throw new XetError('BUSY', `the store at ${root} is too contended for a gc; try again`, { store: root });
      }
      const latest = store.latest();
      if (!latest) break;
      result.basedOn = latest.state.seq;
      result.packs.before = latest.state.packs.length;
      await scratch.add(latest.state.packs);
      const removed = await expiredHandoffs(scratch, latest.state.refs, cutoff);
      const refs = { ...latest.state.refs };
      for (const r of removed) delete refs[r.ref];
      const tips = [...new Set(Object.values(refs))];
      const objectsBefore = scratch.objectsIn(latest.state.packs);
      const reachable = tips.length
        ? (
            await git(['rev-list', '--objects', '--no-object-names', '--stdin'], {
              ...scratch.env,
              input: `${tips.join('\n')}\n`,
            })
          ).stdout
            .toString('utf8')
            .split('\n')
            .filter(Boolean).length
        : 0;
      result.refs = { kept: Object.keys(refs).length, removed };
      result.objects = { before: objectsBefore, after: reachable };
      journal.step('planned', `decide-${latest.state.seq}`, {
        plan: { basedOn: latest.state.seq, removed, packs: latest.state.packs, reachable },
      });
      const needed = removed.length > 0 || latest.state.packs.length > 1 || reachable < objectsBefore;
      if (!needed) {
        result.packs.after = latest.state.packs.length;
        break;
      }
      if (opts.dryRun) {
        // What the sweep would see once the compacted state is published.
        simulated = true;
        result.packs.after = tips.length ? 1 : 0;
        break;
      }
      const stateOf = (compacted: string | null): StoreState => ({
        schema: STATE_SCHEMA,
        seq: latest.state.seq + 1,
        prev: latest.hash,
        refs,
        head: headFor(latest.state, refs),
        packs: compacted ? [compacted] : [],
        pushId: id,
        createdAt: new Date().toISOString(),
      });
      // Settling work (it frees space), admitted into the headroom: the compacted pack is estimated
      // by the packs it merges, then checked by its real size before it is published.
      const placeholder = `pack-${'0'.repeat(store.objectFormat === 'sha256' ? 64 : 40)}`;
      const besides = { bytes: stateFileBytes(stateOf(tips.length ? placeholder : null)), files: 1 };
      const merged = listPackFiles(store)
        .filter((p) => !p.inTrash && latest.state.packs.includes(p.name))
        .reduce((n, p) => n + p.bytes, 0);
      const withIntent = (a: Amount): Amount =>
        intent ? a : { bytes: a.bytes + INTENT_BOUND.bytes, files: a.files + INTENT_BOUND.files };
      admission.check(withIntent(tips.length ? { bytes: merged + besides.bytes, files: 2 + besides.files } : besides));
      // Before our pack exists: another gc keeps it (unnamed, newer than a live intent).
      intent ??= declareIntent(store, id);
      let compacted: string | null = null;
      if (tips.length) {
        const tmp = store.tempPath('gc.pack');
        try {
          await gitToFile(['pack-objects', '--revs', '--stdout', '-q', '--delta-base-offset'], tmp, {
            ...scratch.env,
            input: `${tips.join('\n')}\n`,
          });
          const idx = await indexStorePack(store, tmp).catch(() => null);
          try {
            admission.check(besides);
            const { name, copy } = store.publishPackKeeping(tmp);
            copies.push(copy);
            compacted = name;
            if (idx) store.publishIdx(idx, name);
          } finally {
            if (idx) fs.rmSync(idx, { force: true });
          }
        } finally {
          fs.rmSync(tmp, { force: true });
        }
      }
      await faultPoint('gc-store:after-pack');
      const next = stateOf(compacted);
      if (store.publishState(next)) {
        // As a pusher does: a concurrent gc may have trashed our pack before it saw our state.
        if (compacted && !store.hasPack(compacted)) relinkPack(store, compacted, copies[copies.length - 1]);
        result.published = next.seq;
        result.packs.compacted = compacted;
        result.packs.after = next.packs.length;
        journal.step('sweeping', 'state-published', {});
        await faultPoint('gc-store:after-state');
        break;
      }
      // Another push published first: its refs may need objects only its packs or the old ones
      // hold, so decide again against the newer state from scratch (the packs indexed stay).
      result.retries++;
    }
    for (const c of copies.splice(0)) fs.rmSync(c, { force: true });
    withdrawIntent(intent);
    intent = null;
    // The grace counts to the sweep itself: a pack the gc's own state superseded a moment ago is
    // past a grace of 0 (an explicit `now` is a test's clock, kept as given).
    const sweepNow = opts.now ?? new Date();
    const sweepCutoff = cutoff && new Date(sweepNow.getTime() - graceSeconds * 1000);
    await sweep(store, sweepNow, sweepCutoff, opts.dryRun, simulated, result);
    journal.step('reclaiming', 'swept', {});
    result.bytes.after = opts.dryRun
      ? result.bytes.before - result.packs.deleted.reduce((n, p) => n + p.bytes, 0)
      : listPackFiles(store).reduce((n, p) => n + p.bytes, 0);
    result.bytes.reclaimed = result.bytes.before - result.bytes.after;
    journal.step('done', 'done', { result });
    return result;
  } catch (e) {
    journal.step('failed', 'failed', { result: { error: e instanceof XetError ? e.toJSON() : String(e) } });
    throw e;
  } finally {
    for (const c of copies) fs.rmSync(c, { force: true });
    withdrawIntent(intent);
    scratch.remove();
  }
}

/**
 * Delete pack files no state names any more, once the grace has passed since they stopped being
 * named (or since their mtime, for orphans), except those written after the oldest live intent.
 * Order matters (DESIGN-NOTES, "Store gc"): list the pack files, then read the log, then the
 * intents; rename the doomed into trash/, re-read the newest state and link back whatever it names;
 * only then delete. `simulated` (dry run): the newest state's packs as the compacted state would
 * leave them, superseded now.
 */
async function sweep(
  store: DirectoryStore,
  now: Date,
  cutoff: Date | null,
  dryRun: boolean,
  simulated: boolean,
  result: StoreGcResult,
): Promise<void> {
  const files = listPackFiles(store);
  const { last, log } = lastNamed(store, result.problems);
  if (result.problems.length) return; // an unreadable log: keep everything
  let newest = 0;
  for (const seq of log.keys()) if (seq > newest) newest = seq;
  const intents = readIntents(store, now);
  const live = intents.filter((i) => i.live);
  result.intents.live = live.length;
  const oldestLive = live.reduce((m, i) => Math.min(m, i.mtimeMs - INTENT_SLACK_MS), Infinity);
  const seen = new Set<string>();
  const doomed: PackFile[] = [];
  for (const f of files) {
    if (seen.has(f.name)) {
      // In packs/ and in trash/ both (a link-back raced a delete): the trash entry is redundant.
      if (!dryRun) fs.rmSync(f.file, { force: true });
      continue;
    }
    seen.add(f.name);
    const lastSeq = last.get(f.name);
    if (lastSeq === newest && !simulated) {
      if (f.inTrash && !dryRun && relinkPack(store, f.name, f.file)) {
        fs.rmSync(f.file, { force: true });
        result.packs.restored.push(f.name);
      }
      continue;
    }
    const sinceMs =
      lastSeq === undefined
        ? f.mtimeMs
        : lastSeq === newest
          ? now.getTime()
          : Date.parse(log.get(lastSeq + 1) ?? '') || now.getTime();
    const entry: StoreGcPack = {
      name: f.name,
      bytes: f.bytes,
      why: lastSeq === undefined ? 'orphan' : 'superseded',
      since: new Date(sinceMs).toISOString(),
    };
    // A trash entry was doomed by a gc that died before deleting it: it passed these checks then.
    if (f.inTrash) doomed.push(f);
    else if (!cutoff || sinceMs > cutoff.getTime()) {
      result.packs.kept.push({ ...entry, reason: 'grace' });
      continue;
    } else if (f.mtimeMs >= oldestLive) {
      result.packs.kept.push({ ...entry, reason: 'in-flight' });
      continue;
    } else doomed.push(f);
    result.packs.deleted.push(entry);
  }
  if (dryRun) return;
  for (const i of intents.filter((x) => !x.live)) {
    fs.rmSync(path.join(store.root, 'pushing', i.name), { force: true });
    result.intents.removed++;
  }
  if (!doomed.length) {
    tidyTrashIndexes(store, trashDir(store));
    for (const name of orphanIndexes(store, trashDir(store))) fs.rmSync(store.idxPath(name), { force: true });
    result.tmpRemoved = sweepTmp(store, now, cutoff, oldestLive);
    return;
  }
  const trash = trashDir(store);
  try {
    fs.mkdirSync(trash, { recursive: true });
    for (const f of doomed.filter((d) => !d.inTrash)) {
      // The index goes with its pack (first: an index in packs/ without its pack is an orphan).
      for (const ext of ['.idx', '.pack']) {
        try {
          fs.renameSync(path.join(store.root, 'packs', `${f.name}${ext}`), path.join(trash, `${f.name}${ext}`));
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
        }
      }
    }
    fsyncDir(path.join(store.root, 'packs'));
    fsyncDir(trash);
  } catch (e) {
    throw storeError(store.root, e);
  }
  await faultPoint('gc-store:after-trash');
  // A state published since the log was read names packs of the states before it, which were not
  // doomed, and its pusher's own packs, which the pusher re-links itself after publishing; link back
  // whatever the newest state names anyway, then delete the rest.
  const named = new Set(store.latest()?.state.packs ?? []);
  const deleted = new Set<string>();
  for (const f of doomed) {
    const inTrash = path.join(trash, `${f.name}.pack`);
    if (named.has(f.name)) {
      if (relinkPack(store, f.name, inTrash)) fs.rmSync(inTrash, { force: true });
      result.packs.restored.push(f.name);
      continue;
    }
    fs.rmSync(inTrash, { force: true });
    fs.rmSync(path.join(trash, `${f.name}.idx`), { force: true });
    deleted.add(f.name);
  }
  // Indexes whose pack is gone (a gc died between deleting a pack and its index).
  tidyTrashIndexes(store, trash);
  for (const name of orphanIndexes(store, trash)) fs.rmSync(store.idxPath(name), { force: true });
  fsyncDir(trash);
  result.packs.deleted = result.packs.deleted.filter((p) => deleted.has(p.name));
  result.tmpRemoved = sweepTmp(store, now, cutoff, oldestLive);
}

/** Temporary files of writers that died (a push killed while writing its pack): older than a day,
 * than the grace and than every live intent. */
function sweepTmp(store: DirectoryStore, now: Date, cutoff: Date | null, oldestLive: number): number {
  if (!cutoff) return 0;
  const dir = path.join(store.root, 'tmp');
  // By the real clock: a test's `now` in the future must not take a running writer's files.
  const limit = Math.min(cutoff.getTime(), Math.min(now.getTime(), Date.now()) - TMP_MAX_AGE_MS, oldestLive);
  let n = 0;
  for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    const file = path.join(dir, name);
    const st = fs.lstatSync(file, { throwIfNoEntry: false });
    if (!st?.isFile() || st.mtimeMs >= limit) continue;
    fs.rmSync(file, { force: true });
    n++;
  }
  return n;
}

function bytesText(n: number): string {
  if (n >= 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} B`;
}

export function describeStoreGc(r: StoreGcResult): string {
  const lines: string[] = [];
  const verb = r.dryRun ? 'would' : 'did';
  if (r.published !== null) {
    lines.push(
      `compacted ${r.packs.before} pack(s) into ${r.packs.after} (${r.objects.after} of ${r.objects.before} objects kept); state ${r.published}`,
    );
  } else if (r.dryRun && r.packs.after !== r.packs.before) {
    lines.push(
      `would compact ${r.packs.before} pack(s) into ${r.packs.after} (${r.objects.after} of ${r.objects.before} objects kept)`,
    );
  } else lines.push(`${r.packs.before} pack(s), nothing to compact`);
  for (const h of r.refs.removed)
    lines.push(
      `${r.dryRun ? 'would remove' : 'removed'} ${
        h.ref.startsWith(SIGNATURES) ? "expired handoff's signature" : 'expired handoff'
      } ${h.ref} (expired ${h.expiresAt})`,
    );
  for (const p of r.packs.deleted)
    lines.push(`${r.dryRun ? 'would delete' : 'deleted'} ${p.why} pack ${p.name} (${bytesText(p.bytes)})`);
  const inFlight = r.packs.kept.filter((k) => k.reason === 'in-flight').length;
  const inGrace = r.packs.kept.length - inFlight;
  if (inGrace) lines.push(`${inGrace} unnamed pack(s) kept until the grace has passed`);
  if (inFlight) lines.push(`${inFlight} pack(s) of pushes in flight kept`);
  for (const p of r.packs.restored) lines.push(`linked back ${p}, named again by the newest state`);
  lines.push(`${verb === 'would' ? 'would reclaim' : 'reclaimed'} ${bytesText(r.bytes.reclaimed)}`);
  for (const p of r.problems) lines.push(`problem: ${p}`);
  return lines.join('\n');
}
