// git-remote-xet: the remote helper git runs for `xet::<url>` remotes, speaking gitremote-helpers(7)
// on stdin/stdout. Capabilities: fetch, push, option, object-format.
//
// The helper enforces what git does not always check before handing a push over: fast-forward,
// immutable tags and create-once xet refs, compare-and-swap (--force-with-lease) and --atomic, and
// answers with git's own reasons ("non-fast forward", "fetch first", "stale info", "already exists")
// so git prints what users know. Each push appends one state to the store's log; a push that loses
// the race for the next state number re-reads the newer state and decides again.

import * as fs from 'node:fs';
import * as readline from 'node:readline';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText } from '../git/exec';
import { objectSizes } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { sidecarDir } from '../sidecar/db';
import { acquireLock, type Lock } from '../sidecar/lock';
import { markPublicationReached } from '../sidecar/publications';
import { INTENT_BOUND, storeAdmission, type StoreAdmission } from '../allowance/store-root';
import { unlimited } from '../allowance/admit';
import type { Amount } from '../allowance/model';
import { DirectoryStore, STATE_SCHEMA, stateFileBytes, type LoadedState, type StoreState } from './store';
import { declareIntent, relinkPack, withdrawIntent } from './store-intents';
import { importPacks, pushEstimate, pushPack } from './transfer';
import { storePathFromUrl } from './url';
import * as crypto from 'node:crypto';
// Fault injection for tests (SIGKILL or wait at a named point): src/testing/fault-points.ts.
import { dieAt, pauseAt } from '../testing/fault-points';

/** Set by `git xet push`: the publication id this push carries into the state log. */
export const PUBLICATION_ENV = 'GIT_XET_PUBLICATION_ID';

/** The line on stderr that carries a refusal's details to `git xet push`. */
export const HELPER_ERROR_PREFIX = 'git-remote-xet: error ';

/** Set by `git xet fetch`: the helper then sends a refusal's details as push's does. */
export const TYPED_ERRORS_ENV = 'GIT_XET_TYPED_ERRORS';

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

interface PushSpec {
  force: boolean;
  src: string;
  dst: string;
}

interface Options {
  dryRun: boolean;
  atomic: boolean;
  verbosity: number;
  progress: boolean;
  /** --force-with-lease: the value each ref must have now ('' = must not exist). */
  cas: Map<string, string>;
  objectFormat: boolean;
}

/** Unquote a C-style quoted option value (git quotes non-ASCII and special bytes). */
export function unquoteC(value: string): string {
  if (!value.startsWith('"') || !value.endsWith('"')) return value;
  const bytes: number[] = [];
  const s = value.slice(1, -1);
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c !== '\\') {
      for (const b of Buffer.from(c, 'utf8')) bytes.push(b);
      continue;
    }
    const n = s[++i];
    const simple: Record<string, number> = { n: 10, t: 9, r: 13, '"': 34, '\\': 92, a: 7, b: 8, f: 12, v: 11 };
    if (n in simple) bytes.push(simple[n]);
    else if (/[0-7]/.test(n)) {
      bytes.push(parseInt(s.slice(i, i + 3), 8));
      i += 2;
    } else bytes.push(n.charCodeAt(0));
  }
  return Buffer.from(bytes).toString('utf8');
}

export class RemoteHelper {
  private readonly opts: Options = {
    dryRun: false,
    atomic: false,
    verbosity: 1,
    progress: false,
    cas: new Map(),
    objectFormat: false,
  };
  private store: DirectoryStore | null = null;
  private cachedRepo: Repo | null = null;
  private cloning = false;

  constructor(
    private readonly remote: string,
    private readonly url: string,
    private readonly root: string,
    private readonly write: (s: string) => void,
  ) {}

  /** The local repository (git sets GIT_DIR for helpers). Looked up late: `ls-remote` runs outside
   * any repository, and a clone re-initialises a sha256 repository after `list`. */
  private async repo(): Promise<Repo> {
    this.cachedRepo ??= await findRepo(process.cwd(), true);
    return this.cachedRepo;
  }

  private async localFormat(): Promise<'sha1' | 'sha256' | null> {
    return (await this.repo().catch(() => null))?.objectFormat ?? null;
  }

  private openStore(create: false): DirectoryStore | null;
  private openStore(create: true, format: 'sha1' | 'sha256'): DirectoryStore;
  private openStore(create: boolean, format?: 'sha1' | 'sha256'): DirectoryStore | null {
    if (this.store) return this.store;
    try {
      this.store = create ? DirectoryStore.openOrCreate(this.root, format ?? 'sha1') : DirectoryStore.open(this.root);
    } catch (e) {
      if (!create && e instanceof XetError && e.code === 'STORE_UNAVAILABLE' && /no xet store/.test(e.message)) {
        return null;
      }
      throw e;
    }
    return this.store;
  }

  /** Objects move only between a repository and a store of the same object format. */
  private async matchingRepo(store: DirectoryStore | null): Promise<Repo> {
    this.cachedRepo = null; // a clone may have re-initialised it with the store's format
    const repo = await this.repo();
    if (store && store.objectFormat !== repo.objectFormat) {
      throw new XetError(
        'USAGE',
        `the store at ${this.root} holds ${store.objectFormat} objects; this repository is ${repo.objectFormat}`,
        { store: this.root },
      );
    }
    return repo;
  }

  option(name: string, raw: string): string {
    const value = unquoteC(raw);
    const bool = value === 'true';
    switch (name) {
      case 'verbosity':
        this.opts.verbosity = Number(value);
        return 'ok';
      case 'progress':
        this.opts.progress = bool;
        return 'ok';
      case 'dry-run':
        this.opts.dryRun = bool;
        return 'ok';
      case 'atomic':
        this.opts.atomic = bool;
        return 'ok';
      case 'object-format':
        // git 2.39 sends it without a value, later gits send "true"
        this.opts.objectFormat = value === '' || bool;
        return 'ok';
      case 'cas': {
        const at = value.lastIndexOf(':');
        if (at < 0) return 'error cas needs <ref>:<expected oid>';
        this.opts.cas.set(value.slice(0, at), /^0+$/.test(value.slice(at + 1)) ? '' : value.slice(at + 1));
        return 'ok';
      }
      case 'cloning':
        this.cloning = bool;
        return 'ok';
      case 'followtags':
      case 'check-connectivity':
        return 'ok';
      default:
        return 'unsupported';
    }
  }

  async list(forPush: boolean): Promise<void> {
    const store = this.openStore(false);
    if (!store && !forPush) {
      throw new XetError('STORE_UNAVAILABLE', `no xet store at ${this.root}`, { store: this.root });
    }
    const latest = store?.latest() ?? null;
    const lines: string[] = [];
    if (this.opts.objectFormat) {
      lines.push(`:object-format ${store?.objectFormat ?? (await this.localFormat()) ?? 'sha1'}`);
    }
    const refs = latest?.state.refs ?? {};
    const head = latest?.state.head;
    if (head && refs[head]) lines.push(`@${head} HEAD`);
    for (const name of Object.keys(refs).sort()) lines.push(`${refs[name]} ${name}`);
    this.write(`${lines.join('\n')}${lines.length ? '\n' : ''}\n`);
  }

  async fetch(wanted: string[]): Promise<void> {
    const store = this.openStore(false);
    if (!store) throw new XetError('STORE_UNAVAILABLE', `no xet store at ${this.root}`, { store: this.root });
    const repo = await this.matchingRepo(store);
    const latest = store.latest();
    if (latest) {
      await importPacks(store, repo, latest.state.packs);
      // Packs imported earlier may have lost objects to a local gc since: then import them again.
      const have = await objectSizes(wanted, repoOpts(repo));
      if (wanted.some((oid) => !have.has(oid))) await importPacks(store, repo, latest.state.packs, true);
    }
    if (this.cloning) await this.recordAbsoluteUrl(repo);
    this.write('\n');
  }

  /** git records a clone's URL as given; a relative store path would then resolve against the
   * clone itself on the next fetch. Record the absolute one, as git does for local paths. */
  private async recordAbsoluteUrl(repo: Repo): Promise<void> {
    const given = this.url.startsWith('xet::') ? this.url.slice(5) : this.url;
    if (path.isAbsolute(given) || /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(given) || !this.remote) return;
    const key = `remote.${this.remote}.url`;
    const r = await git(['config', '--get', key], { ...repoOpts(repo), okCodes: [1] });
    const current = r.stdout.toString('utf8').trim();
    if (current === this.url || current === `xet::${this.url}` || current === given) {
      await git(['config', key, `xet::${this.root}`], repoOpts(repo));
    }
  }

  async push(specs: PushSpec[]): Promise<void> {
    const pushId = process.env[PUBLICATION_ENV] || `push-${crypto.randomBytes(8).toString('hex')}`;
    let lock: Lock | null = null;
    const repo = await this.repo();
    if (process.env[PUBLICATION_ENV]) {
      // Held while this push runs: `git xet push` resolving a lost reply waits for it, so it never
      // looks up the log while the push could still land.
      lock = acquireLock(
        path.join(sidecarDir(repo.commonDir), 'locks', `publication-${pushId}.lockdb`),
        'publishing this push',
      );
      // Before the store is opened or created: a publication without it never reached any store.
      markPublicationReached(repo.commonDir, pushId);
    }
    try {
      const results = await this.pushLocked(specs, pushId);
      dieAt('before-reply');
      this.write(`${results.map((r) => (r.error ? `error ${r.dst} ${r.error}` : `ok ${r.dst}`)).join('\n')}\n\n`);
    } finally {
      lock?.release();
    }
  }

  private async pushLocked(specs: PushSpec[], pushId: string): Promise<{ dst: string; error?: string }[]> {
    const repo = await this.matchingRepo(null);
    const o = repoOpts(repo);
    const store = this.opts.dryRun ? this.openStore(false) : this.openStore(true, repo.objectFormat);
    await this.matchingRepo(store);
    const wanted = new Map<string, string | null>();
    for (const s of specs) {
      // An annotated tag is published as the tag object itself, as git does.
      wanted.set(s.dst, s.src ? await gitText(['rev-parse', '--verify', s.src], o) : null);
    }
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
    const head = await localHead(repo);
    try {
      for (let attempt = 0; attempt < 1000; attempt++) {
        await pauseAt('before-decide');
        const latest = store?.latest() ?? null;
        const refs = latest?.state.refs ?? {};
        if (covered.size && [...basis].some((p) => !latest?.state.packs.includes(p))) {
          packs = [];
          covered.clear();
          basis.clear();
        }
        const decided = await this.decide(specs, wanted, refs);
        const rejected = decided.filter((d) => d.error);
        if (this.opts.atomic && rejected.length) {
          return decided.map((d) => (d.error ? d : { dst: d.dst, error: 'atomic push failed' }));
        }
        const changes = decided.filter((d) => !d.error && refs[d.dst] !== (wanted.get(d.dst) ?? undefined));
        if (this.opts.dryRun || !changes.length || !store) return decided;
        const tips = changes
          .map((d) => wanted.get(d.dst))
          .filter((x): x is string => Boolean(x) && !covered.has(x as string));
        const changed = changes.map((d): [string, string | null] => [d.dst, wanted.get(d.dst) ?? null]);
        const besides = stateBesides(store, latest, refs, changed, packs, pushId, head, tips.length > 0);
        let pack: string | null = null;
        if (tips.length) {
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
            },
          );
          if (pack) packs.push(pack);
          for (const p of latest?.state.packs ?? []) basis.add(p);
          for (const t of tips) covered.add(t);
          dieAt('after-pack');
          await pauseAt('after-pack');
        }
        // Without a new pack only the state is added (pushPack checked it with its pack otherwise).
        if (!pack) admission?.check(besides);
        const next = nextState(latest, refs, changed, packs, pushId, head);
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
    throw new XetError('BUSY', `the store at ${this.root} is too contended to publish; try again`, {
      store: this.root,
    });
  }

  private async decide(
    specs: PushSpec[],
    wanted: Map<string, string | null>,
    refs: Record<string, string>,
  ): Promise<{ dst: string; error?: string }[]> {
    const o = repoOpts(await this.repo());
    const curOids = Object.values(refs);
    const local = await objectSizes(curOids, o);
    const out: { dst: string; error?: string }[] = [];
    for (const s of specs) {
      const cur = refs[s.dst];
      const next = wanted.get(s.dst) ?? null;
      const expected = this.opts.cas.get(s.dst);
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
}

/** Whether deleting snapshot ref `dst` would leave its pin on the store (the push does not delete
 * the pin too). */
function pinnedAfter(
  dst: string,
  specs: PushSpec[],
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

/** Run the helper protocol: `git-remote-xet <remote> [<url>]`. */
export async function main(argv: string[]): Promise<number> {
  const [remote, url] = argv;
  const out = (s: string) => process.stdout.write(s);
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  // The iterator buffers lines from now on; lines read while we await anything else are kept.
  const it = lines[Symbol.asyncIterator]();
  try {
    const given = url ?? remote;
    const root = storePathFromUrl(given, process.cwd());
    const helper = new RemoteHelper(url === undefined ? '' : remote, given, root, out);
    const next = async (): Promise<string | null> => {
      const r = await it.next();
      return r.done ? null : r.value;
    };
    for (;;) {
      const line = await next();
      if (line === null || line === '') return 0;
      if (line === 'capabilities') out('fetch\npush\noption\nobject-format\n\n');
      else if (line.startsWith('option ')) {
        const [, name, ...rest] = line.split(' ');
        out(`${helper.option(name, rest.join(' '))}\n`);
      } else if (line === 'list' || line === 'list for-push') await helper.list(line === 'list for-push');
      else if (line.startsWith('fetch ')) {
        // A batch of fetch lines ends with a blank line; everything the store has comes at once.
        const wanted: string[] = [];
        for (let l: string | null = line; l; l = await next()) {
          if (!l.startsWith('fetch ')) throw new XetError('USAGE', `unexpected in a fetch batch: ${l}`);
          wanted.push(l.split(' ')[1]);
        }
        await helper.fetch(wanted);
      } else if (line.startsWith('push ')) {
        const specs: PushSpec[] = [];
        for (let l: string | null = line; l; l = await next()) {
          if (!l.startsWith('push ')) throw new XetError('USAGE', `unexpected in a push batch: ${l}`);
          let spec = l.slice('push '.length);
          const force = spec.startsWith('+');
          if (force) spec = spec.slice(1);
          const colon = spec.lastIndexOf(':');
          specs.push({ force, src: spec.slice(0, colon), dst: spec.slice(colon + 1) });
        }
        await helper.push(specs);
      } else {
        throw new XetError('USAGE', `git-remote-xet does not understand ${JSON.stringify(line)}`);
      }
    }
  } catch (e) {
    const msg = e instanceof XetError ? `${e.message} [${e.code}]` : ((e as Error).stack ?? String(e));
    process.stderr.write(`fatal: git-remote-xet: ${msg}\n`);
    // `git xet push` and `git xet fetch` turn this line back into the typed error with its details (publish.ts).
    if (
      e instanceof XetError &&
      e.code === 'ALLOWANCE_EXCEEDED' &&
      (process.env[PUBLICATION_ENV] || process.env[TYPED_ERRORS_ENV])
    ) {
      process.stderr.write(`${HELPER_ERROR_PREFIX}${JSON.stringify(e.toJSON())}\n`);
    }
    return e instanceof XetError ? 128 : 70;
  } finally {
    // Done (or failed): stop reading, so the process can exit whatever git still has open.
    lines.close();
    process.stdin.destroy();
  }
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
 * row, no lock file): the figures the helper admits first (pushPack: git's estimate of the pack, the
 * state, the intent), so a push plainly too big is refused with the repository as it was. The
 * helper checks again (another push may take the space meanwhile).
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
