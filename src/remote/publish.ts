// `git xet push` and `git xet fetch`: moving refs/xet/* (snapshots, handoffs) to and from a remote,
// either a xet store (through git-remote-xet) or any Git server.
//
// Every push is a publication with an id, recorded in the sidecar before anything is sent. When the
// outcome is lost (the reply never came, the process was killed), the next push resolves it first:
// for a xet store by looking for the id in the store's state log once no helper for it is running;
// for a Git server by asking which refs it has. An outcome that cannot be established stays pending
// and is reported as OUTCOME_UNKNOWN, never as success, and is never replayed blindly.
//
// refs/xet/* name their content, so they are create-once everywhere: on a Git server they are
// pushed with --atomic and a lease that they do not exist yet, so a stale or concurrent writer is
// refused rather than overwritten.

import { tracePhase } from '../testing/trace';
import { withObjectsShared } from '../gc/objects-lock';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git } from '../git/exec';
import { listRefs } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { sidecarDir, withSidecar } from '../sidecar/db';
import { enforce, unlimited } from '../allowance/admit';
import { repositoryLimits } from '../allowance/config';
import { deadWriters } from '../allowance/crash';
import { REPOSITORY_ROOT } from '../allowance/ledger';
import { measureRepositoryAtRest } from '../allowance/repo-root';
import { readConfig } from '../git/config';
import { importPlan } from './transfer';
import { faultPoint } from '../testing/fault-points';
import { hooksDirectory } from '../hooks/location';
import { callerGone } from '../cli/invocation';
import { acquireLock, type Lock } from '../sidecar/lock';
import {
  forgetPublication,
  insertPublication,
  pendingPublications,
  publicationMayHaveReached,
  publicationReachedFile,
  resolvePublication,
  type PublicationRow,
  type PublicationState,
} from '../sidecar/publications';
import { HELPER_ERROR_PREFIX, PUBLICATION_ENV, TYPED_ERRORS_ENV } from './helper';
import { DirectoryStore } from './store';
import { checkPushAllowance, publishToStore, type StorePushResult } from './store-push';
import { markPublicationReached } from '../sidecar/publications';
import type { GitConfig } from '../git/config';
import { storePathFromUrl, withoutPassword } from './url';
import { checkRemoteArgument, gitReason, remoteError, remoteFailureCode } from './reach';
import { checkOwnNames, isMutable, isPublishable, selectXetRefs } from './select';
import { HANDOFF_REF_PREFIX } from '../handoff/objects';

export const XET_REFSPEC = 'refs/xet/*:refs/xet/*';

export interface RefOutcome {
  ref: string;
  /** `updated`: a pin the remote had with another value (pins are the one mutable kind). */
  status: 'new' | 'updated' | 'up-to-date' | 'rejected';
  reason?: string;
}

export interface PushResult {
  publication: string;
  remote: string;
  url: string;
  kind: 'xet' | 'git';
  refs: RefOutcome[];
  /** Earlier publications whose outcome was lost, resolved before this push. */
  resolved: { id: string; state: PublicationState }[];
}

export async function remoteUrl(repo: Repo, remote: string): Promise<string> {
  const r = await git(['remote', 'get-url', '--', remote], { ...repoOpts(repo), okCodes: [2, 128] });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : remote;
}

async function defaultRemote(repo: Repo): Promise<string> {
  const o = repoOpts(repo);
  const branch = await git(['symbolic-ref', '-q', '--short', 'HEAD'], { ...o, okCodes: [1, 128] });
  if (branch.code === 0) {
    const up = await git(['config', '--get', `branch.${branch.stdout.toString('utf8').trim()}.remote`], {
      ...o,
      okCodes: [1],
    });
    if (up.code === 0) return up.stdout.toString('utf8').trim();
  }
  return 'origin';
}

function kindOf(url: string): 'xet' | 'git' {
  return url.startsWith('xet::') ? 'xet' : 'git';
}

/** Set to 1: a push to a xet:: directory store goes through `git push` and git-remote-xet, as every
 * push did before git xet published to directory stores in its own process (tests of the helper,
 * and a way back should the in-process path ever be in doubt). */
export const PUSH_THROUGH_GIT_ENV = 'GIT_XET_PUSH_THROUGH_GIT';

export interface PushOptions {
  cwd: string;
  remote?: string;
  /** Publish only these snapshots and handoffs (ids, abbreviated or full; a handoff brings its
   * snapshot's ref); default: every refs/xet/* ref. */
  only?: string[];
  /** The refs to publish, chosen and checked by the caller (handoff create --push: the handoff it
   * has just made or found identical, its snapshot's ref, and what travels with them), instead of
   * `only`. Refs here other than snapshots and handoffs are checked as `only`'s are. */
  refs?: { name: string; oid: string }[];
  /** The caller's repository, when it has already found it. */
  repo?: Repo;
  /** Its git config, when the caller has already read it. */
  config?: GitConfig;
  /** Aborted when the caller went away (the client of a line the daemon runs): nothing is
   * published from then on (CANCELLED). */
  signal?: AbortSignal;
}

export async function pushXetRefs(options: PushOptions): Promise<PushResult> {
  tracePhase('push: start');
  const repo = options.repo ?? (await findRepo(options.cwd, true));
  const o = repoOpts(repo);
  const remote = options.remote ?? (await defaultRemote(repo));
  const config = options.config ?? (await readConfig(o));
  const url = await resolveRemote(repo, remote, config, options.remote === undefined);
  const selected = !options.refs && options.only?.length ? await selectXetRefs(options.only, o) : null;
  const kind = kindOf(url);
  const direct = directStore(repo, remote, url, config);

  // Outcomes lost earlier come first: this push must not be mistaken for (or replay) one of them.
  // A pending publication whose owner still holds its lock is not lost but running: leave it be.
  const resolved: PushResult['resolved'] = [];
  for (const p of withSidecar(repo.commonDir, (db) => pendingPublications(db, url))) {
    let owner: Lock;
    try {
      owner = acquireLock(ownerLockFile(repo, p.id), 'publishing', 0);
    } catch {
      continue;
    }
    try {
      // Another push may have resolved it between the listing and the lock: then it is not ours.
      if (!withSidecar(repo.commonDir, (db) => pendingPublications(db, url)).some((x) => x.id === p.id)) {
        removePublicationLocks(repo, p.id);
        continue;
      }
      const state = await establish(repo, p);
      if (state !== 'unknown') {
        withSidecar(repo.commonDir, (db) => resolvePublication(db, p.id, state, null));
        removePublicationLocks(repo, p.id);
      }
      resolved.push({ id: p.id, state });
    } finally {
      owner.release();
    }
  }
  const unknown = resolved.filter((r) => r.state === 'unknown');
  if (unknown.length) {
    throw new XetError(
      'OUTCOME_UNKNOWN',
      `whether publication ${unknown[0].id} reached ${withoutPassword(url)} cannot be established (the remote is unreachable or a push ` +
        'for it is still running); nothing was pushed. Try again when the remote is reachable',
      { publications: unknown.map((u) => u.id), url: withoutPassword(url) },
    );
  }

  tracePhase('push: refs');
  let local: { name: string; oid: string }[];
  if (options.refs) {
    local = options.refs.filter((r) => isPublishable(r.name));
    // The caller built the handoff and snapshot refs from content it checked itself; what came
    // along (pins, signatures, task records) is checked here as for any push.
    await checkOwnNames(
      local.filter((r) => !r.name.startsWith(HANDOFF_REF_PREFIX)),
      o,
    );
  } else {
    local = (await listRefs(['refs/xet/'], o)).filter(
      (r) => isPublishable(r.name) && (!selected || selected.has(r.name)),
    );
    await checkOwnNames(local, o);
  }
  const id = `pub-${crypto.randomBytes(10).toString('hex')}`;
  // What is shown (the JSON, error messages) never holds a URL's password; the ledger keeps the URL.
  const result: PushResult = {
    publication: id,
    remote: withoutPassword(remote),
    url: withoutPassword(url),
    kind,
    refs: [],
    resolved,
  };
  if (!local.length) return result;

  let args: string[];
  const remoteRefs = direct ? storeRefs(direct, remote) : await lsRemote(repo, remote);
  const toSend = local.filter((r) => remoteRefs.get(r.name) !== r.oid);
  for (const r of local) if (remoteRefs.get(r.name) === r.oid) result.refs.push({ ref: r.name, status: 'up-to-date' });
  // Pins are the one mutable kind (re-pin replaces one): an update, leased on the remote's value.
  const conflicts = toSend.filter((r) => remoteRefs.has(r.name) && !isMutable(r.name));
  for (const r of conflicts) {
    result.refs.push({ ref: r.name, status: 'rejected', reason: 'already exists with other content' });
  }
  const fresh = toSend.filter((r) => !remoteRefs.has(r.name) || isMutable(r.name));
  if (!fresh.length) {
    if (conflicts.length) throw rejected(result);
    return result;
  }
  const specs = fresh.map((r) => `${remoteRefs.has(r.name) ? '+' : ''}${r.name}:${r.name}`);
  if (kind === 'git') {
    // A lease on "does not exist" for each ref, all or nothing.
    args = [
      'push',
      '--porcelain',
      '--atomic',
      ...fresh.map((r) => `--force-with-lease=${r.name}:${remoteRefs.get(r.name) ?? ''}`),
      remote,
      ...specs,
    ];
  } else {
    // A pin update is leased on the value just listed: a concurrent re-pin there is not overwritten.
    const leases = fresh
      .filter((r) => remoteRefs.has(r.name))
      .map((r) => `--force-with-lease=${r.name}:${remoteRefs.get(r.name)}`);
    args = ['push', '--porcelain', '--atomic', ...leases, remote, ...specs];
  }
  // A directory store's allowance is checked here first: a refusal leaves no row and no lock file.
  if (kind === 'xet') {
    const store = existingStore(repo, url);
    if (store) await checkPushAllowance(store, repo, fresh, id);
  }
  tracePhase('push: record');
  await faultPoint('push:before-record');
  // The last moment a push may still stop with nothing published: a client interrupted before it
  // (Ctrl-C of a line the daemon runs) publishes nothing, as an interrupted CLI would not.
  if (await callerGone(options.signal)) {
    throw new XetError(
      'CANCELLED',
      `the push to ${withoutPassword(url)} was interrupted before it began; nothing was published`,
      {
        url: withoutPassword(url),
      },
    );
  }
  // Held from before the ledger row exists until its outcome is recorded: another `git xet push`
  // never mistakes this running publication for a lost one.
  const owner = acquireLock(ownerLockFile(repo, id), 'publishing');
  try {
    withSidecar(repo.commonDir, (db) =>
      insertPublication(db, { id, remote, url, refspecs: specs, createdAt: new Date().toISOString() }),
    );
    await faultPoint('push:after-record');
    if (direct) {
      return await runStorePublication(repo, direct, {
        id,
        url,
        remote,
        config,
        fresh,
        remoteRefs,
        conflicts,
        result,
        signal: options.signal,
      });
    }
    return await runPublication(repo, { id, url, args, fresh, conflicts, result });
  } finally {
    owner.release();
  }
}

/**
 * Whether a push to `remote` (pushXetRefs' default when undefined) is published wholly in this
 * process: to a directory store written directly, never through `git push`, so nothing of it asks
 * for credentials, a terminal or an agent, and nothing runs a hook. What the daemon checks before it
 * runs a relayed push (spec.relayable).
 */
export async function pushesInProcess(repo: Repo, remote: string | undefined, config: GitConfig): Promise<boolean> {
  const name = remote ?? (await defaultRemote(repo));
  const url = await resolveRemote(repo, name, config, remote === undefined);
  return directStore(repo, name, url, config) !== null;
}

/** A configured value of remote `name` (git prints a subsection's case as written). */
function remoteConfig(config: GitConfig, name: string, key: string): string[] {
  const want = `remote.${name}.${key}`;
  const found = config.keysMatching(/^remote\./).find((k) => k === want);
  return found ? config.getAll(found) : [];
}

/**
 * The URL `remote` names (a configured remote's, else `remote` itself), after checking that it is a
 * remote, a URL or a path (checkRemoteArgument). A remote configured plainly (one url, no rewriting
 * by url.*.insteadOf) is read from the config already read; anything else asks git.
 */
async function resolveRemote(repo: Repo, remote: string, config: GitConfig, defaulted: boolean): Promise<string> {
  const urls = remoteConfig(config, remote, 'url');
  if (urls.length === 1 && !config.keysMatching(/^url\..*\.insteadof$/).length) return urls[0];
  await checkRemoteArgument(repo, remote, defaulted);
  return remoteUrl(repo, remote);
}

/**
 * The directory store a push to `url` is published to in this process, or null when it goes through
 * `git push` (a Git server, or something `git push` would do besides handing the refs to
 * git-remote-xet: a pre-push hook to run, a push URL or push rewriting, follow-tags, several URLs,
 * negative fetch refspecs).
 */
function directStore(repo: Repo, remote: string, url: string, config: GitConfig): string | null {
  if (kindOf(url) !== 'xet' || process.env[PUSH_THROUGH_GIT_ENV] === '1') return null;
  if (config.getBool('push.followtags')) return null;
  if (remoteConfig(config, remote, 'pushurl').length || remoteConfig(config, remote, 'url').length > 1) return null;
  if (config.keysMatching(/^url\..*\.pushinsteadof$/).length) return null;
  if (remoteConfig(config, remote, 'fetch').some((r) => r.replace(/^\+/, '').startsWith('^'))) return null;
  // Any pre-push there, executable or not, goes through git, which decides whether to run it.
  const hookDir = hooksDirectory(repo, config);
  if (hookDir === null || fs.existsSync(path.join(hookDir, 'pre-push'))) return null;
  try {
    return storePathFromUrl(url, repo.worktree);
  } catch {
    return null; // a malformed URL: git-remote-xet says why, as it always did
  }
}

/** The refs of the store at `root`, read directly: what `git ls-remote` through the helper lists. */
function storeRefs(root: string, remote: string): Map<string, string> {
  let store: DirectoryStore;
  try {
    store = DirectoryStore.open(root);
  } catch (e) {
    // A store that does not exist yet, or an empty directory, is created by the first push (as
    // through git-remote-xet); a directory with other files in it is refused.
    if (noStoreAt(e) && emptyOrMissing(root)) return new Map();
    throw listFailure(e, remote);
  }
  try {
    const latest = store.latest();
    return new Map(Object.entries(latest?.state.refs ?? {}).filter(([name]) => name.startsWith('refs/xet/')));
  } catch (e) {
    throw listFailure(e, remote);
  }
}

function listFailure(e: unknown, remote: string): XetError {
  const code =
    e instanceof XetError && ['STORE_UNAVAILABLE', 'INTEGRITY_MISMATCH', 'SCHEMA_UNSUPPORTED'].includes(e.code)
      ? e.code
      : 'STORE_UNAVAILABLE';
  return new XetError(code, `cannot list ${withoutPassword(remote)}: ${withoutPassword((e as Error).message)}`, {
    remote: withoutPassword(remote),
    ...(e instanceof XetError ? { cause: e.code, store: e.details?.store } : {}),
  });
}

function ownerLockFile(repo: Repo, id: string): string {
  return path.join(sidecarDir(repo.commonDir), 'locks', `publication-${id}.owner.lockdb`);
}

function helperLockFile(repo: Repo, id: string): string {
  return path.join(sidecarDir(repo.commonDir), 'locks', `publication-${id}.lockdb`);
}

/** A publication's two lock files, once its outcome is recorded (they would otherwise pile up, two
 * per push). Called under the owner lock, after the helper exited: nobody takes either lock for a
 * publication that is no longer pending (the pending loop checks again once it holds the owner's). */
function removePublicationLocks(repo: Repo, id: string): void {
  for (const f of [helperLockFile(repo, id), ownerLockFile(repo, id)]) {
    for (const x of [f, `${f}-journal`]) fs.rmSync(x, { force: true });
  }
  fs.rmSync(publicationReachedFile(repo.commonDir, id), { force: true });
}

/** The directory store a `xet::` URL names, or null when there is none yet (or it cannot be opened:
 * the helper then says why, as it always did). */
function existingStore(repo: Repo, url: string): DirectoryStore | null {
  try {
    return DirectoryStore.open(storePathFromUrl(url, repo.worktree));
  } catch {
    return null;
  }
}

async function runPublication(
  repo: Repo,
  p: {
    id: string;
    url: string;
    args: string[];
    fresh: { name: string }[];
    conflicts: unknown[];
    result: PushResult;
  },
): Promise<PushResult> {
  const { id, url, args, fresh, conflicts, result } = p;
  const o = repoOpts(repo);
  const r = await git(args, { ...o, env: { ...o.env, [PUBLICATION_ENV]: id }, okCodes: [1, 128] });
  const outcomes = parsePorcelain(r.stdout.toString('utf8'));
  if (r.code === 0) {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'published', { refs: outcomes }));
    removePublicationLocks(repo, id);
    result.refs.push(
      ...fresh.map((f) => outcomes.find((x) => x.ref === f.name) ?? { ref: f.name, status: 'new' as const }),
    );
    if (conflicts.length) throw rejected(result);
    return result;
  }
  if (outcomes.some((x) => x.status === 'rejected')) {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'rejected', { refs: outcomes }));
    removePublicationLocks(repo, id);
    result.refs.push(...outcomes);
    throw rejected(result);
  }
  // No verdict from git (the helper died, the connection dropped): find out what happened.
  const state = await publicationState(repo, url, id);
  if (state === 'published') return recoveredPublished(repo, id, fresh, result);
  if (state === 'not-published') {
    const refusal = helperRefusal(r.stderr, { publication: id });
    // A refusal by the store's allowance published nothing and leaves nothing to resolve later: the
    // repository is left as it was (no row, no lock file).
    withSidecar(repo.commonDir, (db) =>
      refusal
        ? forgetPublication(db, id)
        : resolvePublication(db, id, 'not-published', { stderr: r.stderr.slice(-2000) }),
    );
    removePublicationLocks(repo, id);
    if (refusal) throw refusal;
    const code = /\[(STORE_UNAVAILABLE|INTEGRITY_MISMATCH|SCHEMA_UNSUPPORTED)\]/.exec(r.stderr)?.[1] ?? 'GIT_FAILED';
    throw new XetError(
      code as 'GIT_FAILED',
      `the push to ${withoutPassword(url)} failed and published nothing: ${withoutPassword(gitReason(r.stderr))}`,
      {
        publication: id,
        stderr: withoutPassword(r.stderr.slice(-4000)),
      },
    );
  }
  throw new XetError(
    'OUTCOME_UNKNOWN',
    `the push to ${withoutPassword(url)} failed and whether it was published cannot be established`,
    {
      publication: id,
      stderr: withoutPassword(r.stderr.slice(-4000)),
    },
  );
}

/**
 * runPublication for a directory store, in this process: what `git push --porcelain --atomic` with
 * the leases would have git-remote-xet do (publish.ts's publication lock and marker, store-push.ts's
 * decisions, pack and state), then what git push does after it (the remote-tracking refs). A failure
 * without a verdict is established from the store's log, as for a helper that died.
 */
async function runStorePublication(
  repo: Repo,
  root: string,
  p: {
    id: string;
    url: string;
    remote: string;
    config: GitConfig;
    fresh: { name: string; oid: string }[];
    remoteRefs: Map<string, string>;
    conflicts: unknown[];
    result: PushResult;
    signal?: AbortSignal;
  },
): Promise<PushResult> {
  const { id, url, fresh, remoteRefs, conflicts, result } = p;
  let decided: StorePushResult[];
  try {
    // A store this push cannot create (its parent directory is missing) is refused before the
    // marker: the publication then provably reached no store and is resolved at once as not
    // published, where after the marker it would stay pending (an absent directory is no proof
    // by itself: a removable disk's mount point goes away when it is unmounted).
    if (!fs.existsSync(path.join(root, 'XET-STORE')) && !fs.existsSync(path.dirname(root))) {
      throw new XetError('STORE_UNAVAILABLE', `cannot create a xet store at ${root}: its parent does not exist`, {
        store: root,
      });
    }
    // Before the store is opened or created: a publication without it never reached any store.
    markPublicationReached(repo.commonDir, id);
    const store = DirectoryStore.openOrCreate(root, repo.objectFormat);
    if (store.objectFormat !== repo.objectFormat) {
      throw new XetError(
        'USAGE',
        `the store at ${root} holds ${store.objectFormat} objects; this repository is ${repo.objectFormat}`,
        { store: root },
      );
    }
    const cas = new Map(
      fresh.filter((r) => remoteRefs.has(r.name)).map((r) => [r.name, remoteRefs.get(r.name) as string]),
    );
    tracePhase('push: publish to the store');
    decided = await publishToStore(
      store,
      repo,
      fresh.map((r) => ({ force: remoteRefs.has(r.name), dst: r.name, oid: r.oid })),
      { dryRun: false, atomic: true, cas, signal: p.signal },
      id,
    );
  } catch (e) {
    return lostVerdict(repo, id, url, e, fresh, result);
  }
  const outcomes: RefOutcome[] = decided.map((d) =>
    d.error
      ? { ref: d.dst, status: 'rejected', reason: d.error }
      : { ref: d.dst, status: remoteRefs.has(d.dst) ? 'updated' : 'new' },
  );
  if (outcomes.some((x) => x.status === 'rejected')) {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'rejected', { refs: outcomes }));
    removePublicationLocks(repo, id);
    result.refs.push(...outcomes);
    throw rejected(result);
  }
  tracePhase('push: resolve');
  withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'published', { refs: outcomes }));
  removePublicationLocks(repo, id);
  result.refs.push(...outcomes);
  await updateTracking(repo, p.remote, p.config, fresh);
  if (conflicts.length) throw rejected(result);
  return result;
}

/** After an in-process publication failed: what the store's log says, as runPublication does when
 * git push gave no verdict. */
async function lostVerdict(
  repo: Repo,
  id: string,
  url: string,
  e: unknown,
  fresh: { name: string }[],
  result: PushResult,
): Promise<PushResult> {
  const state = await publicationState(repo, url, id);
  if (state === 'published') return recoveredPublished(repo, id, fresh, result);
  const why = e instanceof XetError ? `${e.message} [${e.code}]` : String((e as Error)?.stack ?? e);
  if (state === 'not-published') {
    // A refusal by the store's allowance published nothing and leaves nothing to resolve later.
    const refusal = e instanceof XetError && e.code === 'ALLOWANCE_EXCEEDED';
    withSidecar(repo.commonDir, (db) =>
      refusal ? forgetPublication(db, id) : resolvePublication(db, id, 'not-published', { error: why.slice(0, 2000) }),
    );
    removePublicationLocks(repo, id);
    if (refusal) {
      e.details.publication = id;
      throw e;
    }
    // The codes a helper's failure reaches `git xet push` with (runPublication), the cause beside them.
    const code =
      e instanceof XetError && ['STORE_UNAVAILABLE', 'INTEGRITY_MISMATCH', 'SCHEMA_UNSUPPORTED'].includes(e.code)
        ? e.code
        : 'GIT_FAILED';
    throw new XetError(
      code as 'GIT_FAILED',
      `the push to ${withoutPassword(url)} failed and published nothing: ${withoutPassword(
        e instanceof Error ? e.message : String(e),
      )}`,
      { publication: id, ...(e instanceof XetError ? { cause: e.code } : {}) },
    );
  }
  throw new XetError(
    'OUTCOME_UNKNOWN',
    `the push to ${withoutPassword(url)} failed and whether it was published cannot be established`,
    { publication: id, error: withoutPassword(why.slice(0, 4000)) },
  );
}

/**
 * What `git push` does after a successful push to a named remote: each pushed ref that one of the
 * remote's fetch refspecs maps is written to its remote-tracking ref (refs/remotes/<name>/xet/…
 * once `git xet fetch` added its refspec). Like git, a failure here does not undo the push.
 */
async function updateTracking(
  repo: Repo,
  remote: string,
  config: GitConfig,
  pushed: { name: string; oid: string }[],
): Promise<void> {
  const specs = remoteConfig(config, remote, 'fetch').map((r) => r.replace(/^\+/, ''));
  const lines: string[] = [];
  for (const ref of pushed) {
    for (const spec of specs) {
      const colon = spec.indexOf(':');
      if (colon < 0) continue;
      const [src, dst] = [spec.slice(0, colon), spec.slice(colon + 1)];
      const star = src.indexOf('*');
      let tracking: string | null = null;
      if (star < 0) tracking = src === ref.name ? dst : null;
      else if (
        ref.name.length >= src.length - 1 &&
        ref.name.startsWith(src.slice(0, star)) &&
        ref.name.endsWith(src.slice(star + 1))
      ) {
        const middle = ref.name.slice(star, ref.name.length - (src.length - star - 1));
        tracking = dst.includes('*') ? dst.replace('*', middle) : null;
      }
      if (tracking) {
        lines.push(`update ${tracking} ${ref.oid}\n`);
        break;
      }
    }
  }
  if (!lines.length) return;
  await git(['update-ref', '-m', 'update by push', '--stdin'], {
    ...repoOpts(repo),
    input: lines.join(''),
    okCodes: [1, 128],
  });
}

/** The store's allowance refusal the helper sent (helper.ts), as the typed error it was there. Only
 * ALLOWANCE_EXCEEDED travels this way; its details are copied field by field, never trusted whole. */
function helperRefusal(stderr: string, extra: Record<string, string>): XetError | null {
  const line = stderr.split('\n').find((l) => l.startsWith(HELPER_ERROR_PREFIX));
  if (!line) return null;
  let v: { code?: unknown; message?: unknown; details?: Record<string, unknown> };
  try {
    v = JSON.parse(line.slice(HELPER_ERROR_PREFIX.length)) as typeof v;
  } catch {
    return null;
  }
  if (v.code !== 'ALLOWANCE_EXCEEDED' || typeof v.message !== 'string' || typeof v.details !== 'object') return null;
  const details: Record<string, unknown> = {};
  for (const k of ['root', 'operation', 'dimension', 'admissionClass']) {
    if (typeof v.details?.[k] === 'string') details[k] = v.details[k];
  }
  for (const k of ['limit', 'headroom', 'used', 'adding']) {
    if (typeof v.details?.[k] === 'number') details[k] = v.details[k];
  }
  return new XetError('ALLOWANCE_EXCEEDED', v.message.slice(0, 2000), { ...details, ...extra });
}

function rejected(result: PushResult): XetError {
  const bad = result.refs.filter((r) => r.status === 'rejected');
  return new XetError(
    'PUSH_REJECTED',
    `${bad.length} ref(s) refused by ${result.url}: ${bad[0].ref} (${bad[0].reason})`,
    {
      ...result,
    },
  );
}

export async function lsRemote(repo: Repo, remote: string): Promise<Map<string, string>> {
  const r = await git(['ls-remote', '--', remote, 'refs/xet/*'], { ...repoOpts(repo), okCodes: [128, 2] });
  const out = new Map<string, string>();
  if (r.code !== 0) {
    // A store that does not exist yet is created by the first push; anything else is unreachable.
    if (/no xet store at/.test(r.stderr) && !/not a store/.test(r.stderr)) return out;
    // A xet store's helper names its own failures; a git remote that cannot be reached is
    // REMOTE_UNAVAILABLE, the same code restore --from and fetch give.
    const xetUrl = kindOf(await remoteUrl(repo, remote)) === 'xet';
    const code = remoteFailureCode(r.stderr);
    throw new XetError(
      code === 'GIT_FAILED' && xetUrl ? 'STORE_UNAVAILABLE' : code,
      `cannot list ${withoutPassword(remote)}: ${withoutPassword(gitReason(r.stderr))}`,
      { remote: withoutPassword(remote), stderr: withoutPassword(r.stderr.slice(-4000)) },
    );
  }
  for (const line of r.stdout.toString('utf8').split('\n')) {
    const [oid, name] = line.split('\t');
    if (name) out.set(name, oid);
  }
  return out;
}

/** `git push --porcelain`: "<flag>\t<from>:<to>\t<summary> (<reason>)" per ref. */
function parsePorcelain(text: string): RefOutcome[] {
  const out: RefOutcome[] = [];
  for (const line of text.split('\n')) {
    const m = /^([ +\-*=!])\t[^\t]*:([^\t]+)\t(.*)$/.exec(line);
    if (!m) continue;
    const [, flag, ref, summary] = m;
    if (flag === '!') out.push({ ref, status: 'rejected', reason: /\((.*)\)/.exec(summary)?.[1] ?? summary });
    else out.push({ ref, status: flag === '=' ? 'up-to-date' : flag === '+' ? 'updated' : 'new' });
  }
  return out;
}

/** What became of a publication whose outcome was not recorded. */
async function establish(repo: Repo, p: PublicationRow): Promise<PublicationState> {
  if (kindOf(p.url) === 'xet') {
    let lock;
    try {
      // A helper still carrying this publication holds this lock: only once it is gone is the log final.
      lock = acquireLock(
        path.join(sidecarDir(repo.commonDir), 'locks', `publication-${p.id}.lockdb`),
        'publishing',
        10_000,
      );
    } catch {
      return 'unknown';
    }
    try {
      let store: DirectoryStore;
      try {
        store = DirectoryStore.open(storePathFromUrl(p.url, repo.worktree));
      } catch (e) {
        // No store at the path (no directory, or no XET-STORE in it) is no proof by itself: a store on
        // a removable or network path, unmounted for a moment, looks just like that, and its log may
        // hold this publication. What proves it is the helper's own marker, written (fsynced) before
        // it opens or creates the store and read here under its lock: without one the helper never
        // touched a store for this publication (it was cancelled or killed before, e.g. ahead of the
        // first push that would have created the store), so nothing can have reached one. With the
        // marker, or when the store exists but cannot be read, it stays unknown.
        if (noStoreAt(e) && !publicationMayHaveReached(repo.commonDir, p)) return 'not-published';
        throw e;
      }
      // Newest first; a state made before the publication was recorded cannot carry it (the helper
      // runs on this machine, after the row was written), so the scan stops there.
      const since = Date.parse(p.createdAt) - 60_000;
      for (const seq of store.stateSeqs().reverse()) {
        const { state } = store.readState(seq);
        if (state.pushId === p.id) return 'published';
        if (Date.parse(state.createdAt) < since) break;
      }
      return 'not-published';
    } catch {
      return 'unknown';
    } finally {
      lock.release();
    }
  }
  // A Git server keeps no log of pushes: the refs tell. All there: published; none: not; else unknown.
  try {
    const remote = await lsRemote(repo, p.url);
    const wanted = JSON.parse(p.refspecs) as string[];
    const local = new Map((await listRefs(['refs/xet/'], repoOpts(repo))).map((r) => [r.name, r.oid]));
    const there = wanted.filter((s) => {
      const ref = s.slice(s.indexOf(':') + 1);
      return remote.get(ref) === local.get(ref);
    });
    if (there.length === wanted.length) return 'published';
    if (there.length === 0) return 'not-published';
    return 'unknown';
  } catch {
    return 'unknown';
  }
}

/** What became of a pending publication git gave no verdict on (its row, looked for in the store). */
async function publicationState(repo: Repo, url: string, id: string): Promise<PublicationState> {
  const row = withSidecar(repo.commonDir, (db) => pendingPublications(db, url)).find((p) => p.id === id);
  return row ? await establish(repo, row) : 'unknown';
}

/** A publication found in the store after all: resolved, its locks gone, its refs reported new. */
function recoveredPublished(repo: Repo, id: string, fresh: { name: string }[], result: PushResult): PushResult {
  withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'published', { recovered: true }));
  removePublicationLocks(repo, id);
  result.refs.push(...fresh.map((f) => ({ ref: f.name, status: 'new' as const })));
  return result;
}

function emptyOrMissing(dir: string): boolean {
  try {
    return fs.readdirSync(dir).length === 0;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

function noStoreAt(e: unknown): boolean {
  return e instanceof XetError && e.code === 'STORE_UNAVAILABLE' && e.details?.errno === 'ENOENT';
}

export interface FetchResult {
  remote: string;
  url: string;
  fetched: { ref: string; oid: string }[];
  refspecAdded: boolean;
}

/** Where a named remote's refs/xet/* are tracked (like its branches under refs/remotes/<name>/). */
export function trackingPrefix(remote: string): string {
  return `refs/remotes/${remote}/xet/`;
}

/**
 * refs/xet/* arrive in a tracking namespace first (forced there: it only mirrors the remote), then
 * each is created locally only if absent. A plain refspec into refs/xet/* would let a fast-forward
 * move a content-named ref (a snapshot's or handoff's) to something else.
 */
// Holds the objects lock shared: the refs it adopts become roots only once written.
export async function fetchXetRefs(options: { cwd: string; remote?: string }): Promise<FetchResult> {
  const repo = await findRepo(options.cwd, true);
  return withObjectsShared(repo.commonDir, () => fetchXetRefsShared(options, repo));
}

async function fetchXetRefsShared(options: { cwd: string; remote?: string }, repo: Repo): Promise<FetchResult> {
  const o = repoOpts(repo);
  const remote = options.remote ?? (await defaultRemote(repo));
  await checkRemoteArgument(repo, remote, options.remote === undefined);
  const url = await remoteUrl(repo, remote);
  const named = url !== remote;
  const prefix = named ? trackingPrefix(remote) : `refs/xet-incoming/${crypto.randomBytes(6).toString('hex')}/`;
  const spec = `+refs/xet/*:${prefix}*`;
  let refspecAdded = false;
  // A directory store's packs and their sizes are known before anything is fetched: a fetch that
  // does not fit is refused here, with the repository as it was (no FETCH_HEAD, no refspec).
  if (kindOf(url) === 'xet') {
    const store = existingStore(repo, url);
    if (store) await checkFetchAllowance(repo, store);
  }
  try {
    // No FETCH_HEAD: the refs are read from the tracking namespace, and a refused fetch writes nothing.
    const r = await git(['fetch', '--no-tags', '--no-write-fetch-head', '--', remote, spec], {
      ...o,
      env: { ...o.env, [TYPED_ERRORS_ENV]: '1' },
      okCodes: [1, 128],
    });
    if (r.code !== 0)
      throw helperRefusal(r.stderr, { remote: withoutPassword(remote) }) ?? remoteError(remote, 'fetch', r.stderr);
    if (named) {
      // Later plain `git fetch`es keep the tracking refs current; `git xet fetch` adopts new ones.
      const have = await git(['config', '--get-all', `remote.${remote}.fetch`], { ...o, okCodes: [1] });
      if (!have.stdout.toString('utf8').split('\n').includes(spec)) {
        await git(['config', '--add', `remote.${remote}.fetch`, spec], o);
        refspecAdded = true;
      }
    }
    const incoming = await listRefs([prefix], o);
    const local = new Map((await listRefs(['refs/xet/'], o)).map((x) => [x.name, x.oid]));
    const creates: { ref: string; oid: string }[] = [];
    const clashes: { ref: string; here?: string; there: string; why: string }[] = [];
    for (const x of incoming) {
      const ref = `refs/xet/${x.name.slice(prefix.length)}`;
      const named = /^refs\/xet\/snapshots\/([0-9a-f]+)$/.exec(ref);
      if (named && named[1] !== x.oid) {
        clashes.push({ ref, there: x.oid, why: 'a snapshot ref must name its own commit' });
      } else if (!local.has(ref)) creates.push({ ref, oid: x.oid });
      // A pin is a local decision that moves (re-pinning makes a new marker): one that differs
      // from the remote's stays as it is here; the remote's is in the tracking namespace.
      else if (ref.startsWith('refs/xet/pins/')) continue;
      else if (local.get(ref) !== x.oid)
        clashes.push({ ref, here: local.get(ref), there: x.oid, why: 'other content' });
    }
    if (creates.length) {
      // `create` fails if the ref appeared meanwhile: never an overwrite, even in a race.
      await git(['update-ref', '--stdin'], { ...o, input: creates.map((c) => `create ${c.ref} ${c.oid}\n`).join('') });
    }
    if (clashes.length) {
      throw new XetError(
        'REF_IMMUTABLE',
        `${withoutPassword(remote)} has ${clashes.length} ref(s) that differ from this repository's (${clashes[0].ref}: ` +
          `${clashes[0].why}); they were not taken${creates.length ? `, ${creates.length} new ref(s) were` : ''}`,
        { remote: withoutPassword(remote), clashes, fetched: creates },
      );
    }
    return { remote: withoutPassword(remote), url: withoutPassword(url), fetched: creates, refspecAdded };
  } finally {
    if (!named) {
      const temp = await listRefs([prefix], o);
      if (temp.length) {
        await git(['update-ref', '--stdin'], { ...o, input: temp.map((t) => `delete ${t.name}\n`).join('') });
      }
    }
  }
}

/**
 * `git xet fetch`'s check of the repository root before any effect: the packs the helper would
 * import and their bounds (importPlan, the figures importPacks admits). Read only; skipped when a
 * writer died since the ledger was last right (the helper's admission recounts first, and a refusal
 * then still comes back typed).
 */
async function checkFetchAllowance(repo: Repo, store: DirectoryStore): Promise<void> {
  const limits = repositoryLimits(await readConfig(repoOpts(repo)));
  if (unlimited(limits) || deadWriters(repo.commonDir).length) return;
  const latest = store.latest();
  if (!latest) return;
  const { plan, total } = importPlan(store, repo, latest.state.packs);
  if (!plan.length) return;
  // The figure admission uses: at rest (not this check's own -wal/-shm).
  const used = measureRepositoryAtRest(repo).used;
  enforce(REPOSITORY_ROOT, limits, used, total(0), 'grow', `fetch from ${store.root}`);
}
