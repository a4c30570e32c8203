// Publishing ref updates to a directory store: deciding each update against the store's newest
// state (fast-forward, create-once, leases, --atomic), writing the pack of what the store lacks, and
// appending the next state create-if-absent, deciding again when another pusher took that number.
// Two callers: git-remote-xet's `push` command (helper.ts, for `git push` to a xet:: remote) and
// `git xet push` itself, which publishes to a directory store in its own process (publish.ts), so
// a push to a store costs no `git push` and no helper start-up. Both run exactly this code.

import { tracePhase } from '../testing/trace';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { callerGone } from '../cli/invocation';
import { git } from '../git/exec';
import { objectSizes } from '../git/plumbing';
import { repoOpts, type Repo } from '../git/repo';
import { INTENT_BOUND, storeAdmission, type StoreAdmission } from '../allowance/store-root';
import { unlimited } from '../allowance/admit';
import type { Amount } from '../allowance/model';
import { STATE_SCHEMA, stateFileBytes, type DirectoryStore, type LoadedState, type StoreState } from './store';
import { declareIntent, relinkPack, withdrawIntent } from './store-intents';
import { pushEstimate, pushPack } from './transfer';
// Fault injection for tests (SIGKILL or wait at a named point): src/testing/fault-points.ts.
import { dieAt, faultPoint, pauseAt } from '../testing/fault-points';

/** Refs that name content (snapshots, handoffs, handoff signatures): created once, never moved. */
export function isCreateOnce(ref: string): boolean {
  return (
    ref.startsWith('refs/xet/snapshots/') ||
    ref.startsWith('refs/xet/handoffs/') ||
    ref.startsWith('refs/xet/signatures/') ||
    ref.startsWith('refs/xet/tasks/')
  );
}

/** Create-once refs a push may still delete: snapshots (`drop --remote`, `git push <store> :<ref>`).
 * Handoffs (and their signatures) are deleted only by a store gc once expired (docs/FORMAT.md). */
export function isDeletable(ref: string): boolean {
  return !isCreateOnce(ref) || ref.startsWith('refs/xet/snapshots/');
}

/** Pins are markers: every re-pin is a new commit, never a descendant of the last one, so a pin ref
 * moves to anything (leases still apply). */
export function isMutableMarker(ref: string): boolean {
  return ref.startsWith('refs/xet/pins/');
}

/** One ref update: `oid` is the new value (null: delete), already resolved in the local repository. */
export interface StorePushSpec {
  force: boolean;
  dst: string;
  oid: string | null;
}

export interface StorePushOptions {
  dryRun: boolean;
  atomic: boolean;
  /** --force-with-lease: the value each ref must have now ('' = must not exist). */
  cas: Map<string, string>;
  /** Aborted when the push's caller went away (a relayed line's client interrupted): no state is
   * published from then on (CANCELLED), as a killed process would publish none. */
  signal?: AbortSignal;
}

/** Per ref: published (no error) or refused, in git's words ("fetch first", "stale info", …). */
export interface StorePushResult {
  dst: string;
  error?: string;
}

/**
 * Publish `specs` to the store, or decide them only (dry run). `store` is the store (created by the
 * caller when absent, unless this is a dry run: then null for a store that does not exist). Returns
 * each ref's outcome once a state naming the accepted ones is in the log; throws (BUSY, the store's
 * errors, ALLOWANCE_EXCEEDED) when nothing was published by this call.
 */
async function stopIfGone(signal: AbortSignal | undefined): Promise<void> {
  if (await callerGone(signal))
    throw new XetError('CANCELLED', 'the push was interrupted before the store published it');
}

export async function publishToStore(
  store: DirectoryStore | null,
  repo: Repo,
  specs: StorePushSpec[],
  opts: StorePushOptions,
  pushId: string,
): Promise<StorePushResult[]> {
  const o = repoOpts(repo);
  const wanted = new Map<string, string | null>();
  for (const s of specs) wanted.set(s.dst, s.oid);
  // Packs this push wrote, and the tips they cover. A retry may accept a ref an earlier attempt
  // refused (the ref moved back meanwhile): its objects must then be sent too, before any state
  // names it.
  let packs: string[] = [];
  const covered = new Set<string>();
  // The packs of every state this push's packs were built against: they hold the objects the
  // packs left out. A store gc's state names fewer packs; publishing on it then needs new packs.
  const basis = new Set<string>();
  const copies = new Map<string, string>();
  let intent: string | null = null;
  // The store's allowance, read once per push. A push that only deletes refs frees space once a
  // store gc runs: it may use the headroom, as the gc does.
  const deletesOnly = [...wanted.values()].every((oid) => oid === null);
  const admission: StoreAdmission | null = store
    ? storeAdmission(store, deletesOnly ? 'settle' : 'grow', `push of ${specs.length} ref(s)`)
    : null;
  // The local HEAD's branch, asked only when a state names branches (nextState's choice of HEAD).
  const head = lazyHead(repo);
  try {
    for (let attempt = 0; attempt < 1000; attempt++) {
      await faultPoint('before-decide');
      const latest = store?.latest() ?? null;
      const refs = latest?.state.refs ?? {};
      if (covered.size && [...basis].some((p) => !latest?.state.packs.includes(p))) {
        packs = [];
        covered.clear();
        basis.clear();
      }
      tracePhase('store: decide');
      const decided = await decide(repo, specs, wanted, refs, opts.cas);
      const rejected = decided.filter((d) => d.error);
      if (opts.atomic && rejected.length) {
        return decided.map((d) => (d.error ? d : { dst: d.dst, error: 'atomic push failed' }));
      }
      const changes = decided.filter((d) => !d.error && refs[d.dst] !== (wanted.get(d.dst) ?? undefined));
      if (opts.dryRun || !changes.length || !store) return decided;
      const tips = changes
        .map((d) => wanted.get(d.dst))
        .filter((x): x is string => Boolean(x) && !covered.has(x as string));
      const changed = changes.map((d): [string, string | null] => [d.dst, wanted.get(d.dst) ?? null]);
      const localHead = await head(refs, changed);
      const besides = stateBesides(store, latest, refs, changed, packs, pushId, localHead, tips.length > 0);
      let pack: string | null = null;
      await stopIfGone(opts.signal);
      if (tips.length) {
        tracePhase('store: pack');
        pack = await pushPack(
          store,
          o,
          [...new Set(tips)],
          refs,
          (name, copy) => {
            if (copies.has(name)) fs.rmSync(copy, { force: true });
            else copies.set(name, copy);
          },
          {
            admission: admission as StoreAdmission,
            besides,
            transient: intent ? { bytes: 0, files: 0 } : INTENT_BOUND,
            // Before any pack exists: a store gc keeps every unnamed pack newer than a live intent.
            admitted: () => (intent ??= declareIntent(store, pushId)),
            signal: opts.signal,
          },
          repo.objectsDir,
        );
        if (pack) packs.push(pack);
        for (const p of latest?.state.packs ?? []) basis.add(p);
        for (const t of tips) covered.add(t);
        dieAt('after-pack');
        await pauseAt('after-pack');
      }
      // Without a new pack only the state is added (pushPack checked it with its pack otherwise).
      if (!pack) admission?.check(besides);
      const next = nextState(latest, refs, changed, packs, pushId, localHead);
      // The commit point. A pack written for nothing, when the caller went away just after it, is
      // the store gc's (as after a killed push); one being written is not finished (pushPack).
      tracePhase('store: publish the state');
      await stopIfGone(opts.signal);
      if (store.publishState(next)) {
        dieAt('after-state');
        // A store gc that read the log before this state may have trashed our packs meanwhile; its
        // link-back covers states it sees, this covers the rest (store-intents.ts).
        for (const p of packs) {
          const copy = copies.get(p);
          if (copy && !store.hasPack(p)) relinkPack(store, p, copy);
        }
        return decided;
      }
      // Another push took this state number: decide again against what it published.
    }
  } finally {
    for (const copy of copies.values()) fs.rmSync(copy, { force: true });
    withdrawIntent(intent);
  }
  throw new XetError('BUSY', `the store at ${store?.root} is too contended to publish; try again`, {
    store: store?.root,
  });
}

async function decide(
  repo: Repo,
  specs: StorePushSpec[],
  wanted: Map<string, string | null>,
  refs: Record<string, string>,
  cas: Map<string, string>,
): Promise<StorePushResult[]> {
  const o = repoOpts(repo);
  // Which of the store's tips this repository has: asked once, and only for an update that must be
  // a fast-forward (create-once refs, pins and tags never need it).
  let local: Map<string, unknown> | null = null;
  const out: StorePushResult[] = [];
  for (const s of specs) {
    const cur = refs[s.dst];
    const next = wanted.get(s.dst) ?? null;
    const expected = cas.get(s.dst);
    let error: string | undefined;
    if (expected !== undefined && (cur ?? '') !== expected) error = 'stale info';
    else if (cur === next) error = undefined;
    else if (next === null) {
      if (cur === undefined) error = 'no such ref';
      else if (!isDeletable(s.dst)) error = 'create-once ref cannot be deleted';
      else if (pinnedAfter(s.dst, specs, wanted, refs)) error = 'snapshot is pinned on the store; unpin it first';
    } else if (cur === undefined) error = undefined;
    else if (isCreateOnce(s.dst)) error = 'already exists';
    else if (isMutableMarker(s.dst)) error = undefined;
    else if (s.dst.startsWith('refs/tags/') && !s.force && expected === undefined) error = 'already exists';
    else if (!s.force && expected === undefined) {
      local ??= await objectSizes(Object.values(refs), o);
      if (!local.has(cur)) error = 'fetch first';
      else {
        const r = await git(['merge-base', '--is-ancestor', cur, next], { ...o, okCodes: [1, 128] });
        if (r.code !== 0) error = 'non-fast forward';
      }
    }
    out.push(error ? { dst: s.dst, error } : { dst: s.dst });
  }
  return out;
}

/** Whether deleting snapshot ref `dst` would leave its pin on the store (the push does not delete
 * the pin too). */
function pinnedAfter(
  dst: string,
  specs: StorePushSpec[],
  wanted: Map<string, string | null>,
  refs: Record<string, string>,
): boolean {
  if (!dst.startsWith('refs/xet/snapshots/')) return false;
  const pin = `refs/xet/pins/${dst.slice('refs/xet/snapshots/'.length)}`;
  if (refs[pin] === undefined) return false;
  return !specs.some((s) => s.dst === pin && wanted.get(pin) === null);
}

async function localHead(repo: Repo): Promise<string | null> {
  const r = await git(['symbolic-ref', '-q', 'HEAD'], { ...repoOpts(repo), okCodes: [1, 128] });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : null;
}

/** The local HEAD's branch for nextState, asked of git once and only when it can matter: nextState
 * looks at it only when the next state's refs hold a branch. */
function lazyHead(
  repo: Repo,
): (refs: Record<string, string>, changes: [string, string | null][]) => Promise<string | null> {
  let asked: Promise<string | null> | null = null;
  return (refs, changes) => {
    const branches =
      changes.some(([name, oid]) => oid !== null && name.startsWith('refs/heads/')) ||
      Object.keys(refs).some((name) => name.startsWith('refs/heads/'));
    if (!branches) return Promise.resolve(null);
    asked ??= localHead(repo);
    return asked;
  };
}

function nextState(
  latest: LoadedState | null,
  refs: Record<string, string>,
  changes: [string, string | null][],
  newPacks: string[],
  pushId: string,
  localHeadRef: string | null,
): StoreState {
  const next: Record<string, string> = { ...refs };
  for (const [name, oid] of changes) {
    if (oid === null) delete next[name];
    else next[name] = oid;
  }
  const packs = [...(latest?.state.packs ?? [])];
  for (const pack of newPacks) if (!packs.includes(pack)) packs.push(pack);
  let head = latest?.state.head ?? null;
  if (!head || !next[head]) {
    const branches = Object.keys(next)
      .filter((r) => r.startsWith('refs/heads/'))
      .sort();
    head =
      [localHeadRef, 'refs/heads/main', 'refs/heads/master'].find((r) => r && next[r]) ?? branches[0] ?? head ?? null;
  }
  return {
    schema: STATE_SCHEMA,
    seq: (latest?.state.seq ?? 0) + 1,
    prev: latest?.hash ?? null,
    refs: next,
    head,
    packs,
    pushId,
    createdAt: new Date().toISOString(),
  };
}

/** What a push publishes beside its pack: the next state, as big as the real one (a new pack is
 * named by a placeholder of a pack name's fixed length). */
function stateBesides(
  store: DirectoryStore,
  latest: LoadedState | null,
  refs: Record<string, string>,
  changed: [string, string | null][],
  packs: string[],
  pushId: string,
  head: string | null,
  newPack: boolean,
): Amount {
  const placeholder = `pack-${'0'.repeat(store.objectFormat === 'sha256' ? 64 : 40)}`;
  const next = nextState(latest, refs, changed, newPack ? [...packs, placeholder] : packs, pushId, head);
  return { bytes: stateFileBytes(next), files: 1 };
}

/**
 * `git xet push`'s check of a directory store's allowance before any local effect (no publication
 * row, no lock file): the figures publishToStore admits first (pushPack: git's estimate of the pack,
 * the state, the intent), so a push plainly too big is refused with the repository as it was. The
 * push checks again (another push may take the space meanwhile).
 */
export async function checkPushAllowance(
  store: DirectoryStore,
  repo: Repo,
  refs: { name: string; oid: string }[],
  pushId: string,
): Promise<void> {
  const admission = storeAdmission(store, 'grow', `push of ${refs.length} ref(s)`);
  if (unlimited(admission.limits)) return;
  const latest = store.latest();
  const storeRefs = latest?.state.refs ?? {};
  const changed = refs.filter((r) => storeRefs[r.name] !== r.oid).map((r): [string, string | null] => [r.name, r.oid]);
  if (!changed.length) return;
  const tips = [...new Set(changed.map(([, oid]) => oid as string))];
  const pack = await pushEstimate(repoOpts(repo), tips, storeRefs);
  const besides = stateBesides(store, latest, storeRefs, changed, [], pushId, await localHead(repo), pack > 0);
  admission.check(
    pack > 0
      ? { bytes: pack + besides.bytes + INTENT_BOUND.bytes, files: 2 + besides.files + INTENT_BOUND.files }
      : besides,
  );
}
