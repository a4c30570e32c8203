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

import * as crypto from 'node:crypto';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git } from '../git/exec';
import { listRefs } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { sidecarDir, withSidecar } from '../sidecar/db';
import { acquireLock } from '../sidecar/lock';
import {
  insertPublication,
  pendingPublications,
  resolvePublication,
  type PublicationRow,
  type PublicationState,
} from '../sidecar/publications';
import { PUBLICATION_ENV } from './helper';
import { DirectoryStore } from './store';
import { storePathFromUrl } from './url';

export const XET_REFSPEC = 'refs/xet/*:refs/xet/*';

export interface RefOutcome {
  ref: string;
  status: 'new' | 'up-to-date' | 'rejected';
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

async function remoteUrl(repo: Repo, remote: string): Promise<string> {
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

export async function pushXetRefs(options: { cwd: string; remote?: string }): Promise<PushResult> {
  const repo = await findRepo(options.cwd, true);
  const o = repoOpts(repo);
  const remote = options.remote ?? (await defaultRemote(repo));
  const url = await remoteUrl(repo, remote);
  const kind = kindOf(url);

  // Outcomes lost earlier come first: this push must not be mistaken for (or replay) one of them.
  const resolved: PushResult['resolved'] = [];
  for (const p of withSidecar(repo.commonDir, (db) => pendingPublications(db, url))) {
    const state = await establish(repo, p);
    if (state !== 'unknown') withSidecar(repo.commonDir, (db) => resolvePublication(db, p.id, state, null));
    resolved.push({ id: p.id, state });
  }
  const unknown = resolved.filter((r) => r.state === 'unknown');
  if (unknown.length) {
    throw new XetError(
      'OUTCOME_UNKNOWN',
      `whether publication ${unknown[0].id} reached ${url} cannot be established (the remote is unreachable or a push ` +
        'for it is still running); nothing was pushed. Try again when the remote is reachable',
      { publications: unknown.map((u) => u.id), url },
    );
  }

  const local = await listRefs(['refs/xet/'], o);
  const id = `pub-${crypto.randomBytes(10).toString('hex')}`;
  const result: PushResult = { publication: id, remote, url, kind, refs: [], resolved };
  if (!local.length) return result;

  let args: string[];
  const remoteRefs = await lsRemote(repo, remote);
  const toSend = local.filter((r) => remoteRefs.get(r.name) !== r.oid);
  for (const r of local) if (remoteRefs.get(r.name) === r.oid) result.refs.push({ ref: r.name, status: 'up-to-date' });
  const conflicts = toSend.filter((r) => remoteRefs.has(r.name));
  for (const r of conflicts) {
    result.refs.push({ ref: r.name, status: 'rejected', reason: 'already exists with other content' });
  }
  const fresh = toSend.filter((r) => !remoteRefs.has(r.name));
  if (!fresh.length) {
    if (conflicts.length) throw rejected(result);
    return result;
  }
  const specs = fresh.map((r) => `${r.name}:${r.name}`);
  if (kind === 'git') {
    // A lease on "does not exist" for each ref, all or nothing.
    args = ['push', '--porcelain', '--atomic', ...fresh.map((r) => `--force-with-lease=${r.name}:`), remote, ...specs];
  } else {
    args = ['push', '--porcelain', '--atomic', remote, ...specs];
  }
  withSidecar(repo.commonDir, (db) =>
    insertPublication(db, { id, remote, url, refspecs: specs, createdAt: new Date().toISOString() }),
  );
  const r = await git(args, { ...o, env: { ...o.env, [PUBLICATION_ENV]: id }, okCodes: [1, 128] });
  const outcomes = parsePorcelain(r.stdout.toString('utf8'));
  if (r.code === 0) {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'published', { refs: outcomes }));
    result.refs.push(
      ...fresh.map((f) => outcomes.find((x) => x.ref === f.name) ?? { ref: f.name, status: 'new' as const }),
    );
    if (conflicts.length) throw rejected(result);
    return result;
  }
  if (outcomes.some((x) => x.status === 'rejected')) {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'rejected', { refs: outcomes }));
    result.refs.push(...outcomes);
    throw rejected(result);
  }
  // No verdict from git (the helper died, the connection dropped): find out what happened.
  const row = withSidecar(repo.commonDir, (db) => pendingPublications(db, url)).find((p) => p.id === id);
  const state = row ? await establish(repo, row) : 'unknown';
  if (state === 'published') {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'published', { recovered: true }));
    result.refs.push(...fresh.map((f) => ({ ref: f.name, status: 'new' as const })));
    return result;
  }
  if (state === 'not-published') {
    withSidecar(repo.commonDir, (db) => resolvePublication(db, id, 'not-published', { stderr: r.stderr.slice(-2000) }));
    const code = /\[(STORE_UNAVAILABLE|INTEGRITY_MISMATCH|SCHEMA_UNSUPPORTED)\]/.exec(r.stderr)?.[1] ?? 'GIT_FAILED';
    throw new XetError(code as 'GIT_FAILED', `the push to ${url} failed and published nothing: ${lastLine(r.stderr)}`, {
      publication: id,
      stderr: r.stderr.slice(-4000),
    });
  }
  throw new XetError(
    'OUTCOME_UNKNOWN',
    `the push to ${url} failed and whether it was published cannot be established`,
    {
      publication: id,
      stderr: r.stderr.slice(-4000),
    },
  );
}

function lastLine(s: string): string {
  return s.trim().split('\n').pop() ?? '';
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

async function lsRemote(repo: Repo, remote: string): Promise<Map<string, string>> {
  const r = await git(['ls-remote', '--', remote, 'refs/xet/*'], { ...repoOpts(repo), okCodes: [128, 2] });
  const out = new Map<string, string>();
  if (r.code !== 0) {
    // A store that does not exist yet is created by the first push; anything else is unreachable.
    if (/no xet store at/.test(r.stderr) && !/not a store/.test(r.stderr)) return out;
    throw new XetError('STORE_UNAVAILABLE', `cannot list ${remote}: ${lastLine(r.stderr)}`, { remote });
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
    else out.push({ ref, status: flag === '=' ? 'up-to-date' : 'new' });
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
        2000,
      );
    } catch {
      return 'unknown';
    }
    try {
      const store = DirectoryStore.open(storePathFromUrl(p.url, repo.worktree));
      for (const seq of store.stateSeqs().reverse()) {
        if (store.readState(seq).state.pushId === p.id) return 'published';
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

export interface FetchResult {
  remote: string;
  url: string;
  fetched: { ref: string; oid: string }[];
  refspecAdded: boolean;
}

export async function fetchXetRefs(options: { cwd: string; remote?: string }): Promise<FetchResult> {
  const repo = await findRepo(options.cwd, true);
  const o = repoOpts(repo);
  const remote = options.remote ?? (await defaultRemote(repo));
  const url = await remoteUrl(repo, remote);
  let refspecAdded = false;
  if (url !== remote) {
    // A named remote: later plain `git fetch`es bring refs/xet/* too.
    const have = await git(['config', '--get-all', `remote.${remote}.fetch`], { ...o, okCodes: [1] });
    if (!have.stdout.toString('utf8').split('\n').includes(XET_REFSPEC)) {
      await git(['config', '--add', `remote.${remote}.fetch`, XET_REFSPEC], o);
      refspecAdded = true;
    }
  }
  const before = new Map((await listRefs(['refs/xet/'], o)).map((r) => [r.name, r.oid]));
  // Not forced: a ref that exists here with other content is refused, never overwritten.
  const r = await git(['fetch', '--no-tags', '--', remote, XET_REFSPEC], { ...o, okCodes: [1, 128] });
  if (r.code !== 0) {
    const clash = /rejected\]\s+(\S+)/.exec(r.stderr);
    if (clash) {
      throw new XetError(
        'REF_IMMUTABLE',
        `${remote} has ${clash[1]} with other content than here; it was not fetched`,
        {
          remote,
          stderr: r.stderr.slice(-4000),
        },
      );
    }
    const code = /INTEGRITY_MISMATCH/.test(r.stderr)
      ? 'INTEGRITY_MISMATCH'
      : /STORE_UNAVAILABLE|does not appear to be a git repository|Could not read from remote/.test(r.stderr)
        ? 'STORE_UNAVAILABLE'
        : 'GIT_FAILED';
    throw new XetError(code, `fetching from ${remote} failed: ${lastLine(r.stderr)}`, {
      remote,
      stderr: r.stderr.slice(-4000),
    });
  }
  const after = await listRefs(['refs/xet/'], o);
  return {
    remote,
    url,
    fetched: after.filter((x) => before.get(x.name) !== x.oid).map((x) => ({ ref: x.name, oid: x.oid })),
    refspecAdded,
  };
}
