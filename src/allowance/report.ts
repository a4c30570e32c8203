// `git xet allowance`: the contract version, and per root its limits, usage, headroom, what is
// counted and what is not covered. Also the repository root's figures for `git xet status`, and
// `--store <path> --set` (the store's own allowance, written by store-root.ts).
//
// Without --recount this is the cheap path every admission takes (ledger parts plus the small rest
// from disk): no walk of bases, packs by name. A reader: it never creates the sidecar, and without
// one the repository root is only what lies on disk (git xet never recorded anything here).

import { XetError } from '../errors';
import { GitConfig, readConfig } from '../git/config';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { DirectoryStore } from '../remote/store';
import { storePathFromUrl } from '../remote/url';
import { withExistingSidecar, withSidecar, type Db } from '../sidecar/db';
import { listForks } from '../sidecar/forks';
import { limitsOf, repositoryLimits } from './config';
import { recountClearingDead } from './admit';
import { measureFork, type ForkUsage } from './fork-root';
import { lastCount, REPOSITORY_ROOT } from './ledger';
import { ALLOWANCE_CONTRACT, type Amount, type Limits, type RootKind } from './model';
import { measureRepository, measureRepositoryAtRest, sidecarTransients } from './repo-root';
import {
  measureStore,
  measureStoreAt,
  parseStoreAllowanceSet,
  setStoreAllowance,
  storeRootName,
  type StoreUsage,
} from './store-root';

export interface AllowanceReportOptions {
  cwd: string;
  recount?: boolean;
  /** Stores to report besides the repository's own roots (remote names or paths). */
  stores?: string[];
}

/** Per dimension; null where the root has no limit on it. */
export interface Dimensions {
  bytes: number | null;
  files: number | null;
}

export interface RootReport {
  root: string;
  kind: RootKind;
  path: string;
  limits: Dimensions;
  headroom: Dimensions;
  used: Amount;
  /** What growing work may still add: limit − headroom − used (never below 0). */
  available: Dimensions;
  counted: string[];
  notCovered: string[];
  /** When `used` was last counted in full (a recount, or a measure from disk); null: never. */
  countedAt: string | null;
  /** For a fork: what bounds its own processes. null for the repository and stores. */
  route: ForkUsage['route'] | null;
  /** A store whose allowance could not be read (a hostile or damaged `<store>/ALLOWANCE`): its limits
   * are unknown (null), `used` is its files walked; the other roots are still reported. */
  error?: { code: string; message: string };
}

export interface AllowanceReport {
  contract: typeof ALLOWANCE_CONTRACT;
  supported: string[];
  recounted: boolean;
  /** Temporary files of dead writers removed by --recount. */
  leftoversRemoved: number;
  roots: RootReport[];
}

const REPOSITORY_COUNTED = [
  'xet/ except xet/forks/: the sidecar database with its WAL and shm, capture cache indexes, task directories and result spools, locks',
  'overlay bases under xet/bases/ (their recorded size; walked again by --recount)',
  'packs git xet wrote into objects/pack (captures, fetches): each .pack, .idx, .rev and the rest, statted',
  "after git xet gc repacked: the on-disk size of the objects only git xet's refs reach (refs/xet/*, refs/remotes/*/xet/*), while the pack gc made exists (ledger part folded:<pack>, recomputed by each gc)",
  'temporary files of git xet writers, live or dead: objects/pack/tmp_*xet_<pid>_*, xet/tmp/<what>-<pid>-*, xet/bases/.build-<pid>-*',
];
const REPOSITORY_NOT_COVERED = [
  'loose objects git xet makes through git: snapshot commits, their top trees and manifest blobs, tag blobs, handoff objects (a few KiB per command)',
  'refs and reflogs',
  "packs after the user's own git gc or git repack merged them (they become git's)",
  "unreachable objects git xet's gc leaves in git's cruft pack for the grace (dropped snapshots past their drop)",
  'per-worktree files: <gitDir>/xet-guard, xet-slot.lock',
  'forks under xet/forks/: roots of their own (fork:<id>)',
];
const STORE_COUNTED = ['every file under the store directory: packs, the state log, intents, trash, temporaries'];
const STORE_NOT_COVERED = ['pushes by a git xet that does not read <store>/ALLOWANCE (before xet.allowance/v1)'];

function dims(limits: Limits): { limits: Dimensions; headroom: Dimensions } {
  return {
    limits: { bytes: limits.bytes, files: limits.files },
    headroom: {
      bytes: limits.bytes === null ? null : limits.headroomBytes,
      files: limits.files === null ? null : limits.headroomFiles,
    },
  };
}

export function availableOf(limits: Limits, used: Amount): Dimensions {
  const left = (limit: number | null, headroom: number, u: number) =>
    limit === null ? null : Math.max(0, limit - headroom - u);
  return {
    bytes: left(limits.bytes, limits.headroomBytes, used.bytes),
    files: left(limits.files, limits.headroomFiles, used.files),
  };
}

function rootReport(
  r: Pick<RootReport, 'root' | 'kind' | 'path' | 'used' | 'counted' | 'notCovered' | 'countedAt' | 'route'>,
  limits: Limits,
): RootReport {
  const d = dims(limits);
  return {
    root: r.root,
    kind: r.kind,
    path: r.path,
    limits: d.limits,
    headroom: d.headroom,
    used: r.used,
    available: availableOf(limits, r.used),
    counted: r.counted,
    notCovered: r.notCovered,
    countedAt: r.countedAt,
    route: r.route,
  };
}

/** The repository root's usage on the cheap path, and when it was last recounted. Without a sidecar
 * nothing was ever recorded: what is on disk under xet/ and the temporaries are all there is. */
function repositoryUsage(
  repo: Repo,
  db: Db | null,
  sidecarBeforeOpen?: Amount,
): { used: Amount; countedAt: string | null } {
  return {
    used: measureRepository(repo, db, false, { sidecarBeforeOpen }).used,
    countedAt: db ? (lastCount(db, REPOSITORY_ROOT)?.countedAt ?? null) : null,
  };
}

function repositoryReport(repo: Repo, limits: Limits, usage: { used: Amount; countedAt: string | null }): RootReport {
  return rootReport(
    {
      root: REPOSITORY_ROOT,
      kind: 'repository',
      path: repo.commonDir,
      used: usage.used,
      counted: REPOSITORY_COUNTED,
      notCovered: REPOSITORY_NOT_COVERED,
      countedAt: usage.countedAt,
      route: null,
    },
    limits,
  );
}

/** `git xet status`'s `allowance`: the repository root's limits, usage and what growing work may add. */
export async function repositoryAllowance(
  repo: Repo,
  config?: GitConfig,
): Promise<{ limits: Dimensions; used: Amount; available: Dimensions }> {
  const limits = repositoryLimits(config ?? (await readConfig(repoOpts(repo))));
  const r = repositoryReport(repo, limits, { used: measureRepositoryAtRest(repo).used, countedAt: null });
  return { limits: r.limits, used: r.used, available: r.available };
}

function forkReport(f: ForkUsage): RootReport {
  const counted =
    f.mode === 'overlay'
      ? ['its upper and work directories (or the layer filesystem that holds them)']
      : [
          'its files (measured when it was made; walked again by --recount)',
          'its admin files in the git dir: xet-files.index, index',
        ];
  const notCovered = [
    ...(f.route.covered ? [] : [`what the fork's own processes write: no kernel route bounds it (${f.route.reason})`]),
    "what a task's processes write outside the fork",
  ];
  return rootReport(
    {
      root: f.root,
      kind: 'fork',
      path: f.dir,
      used: f.used,
      counted,
      notCovered,
      countedAt: f.measuredAt,
      route: f.route,
    },
    f.limits,
  );
}

function storeReport(s: StoreUsage): RootReport {
  return rootReport(
    {
      root: s.root,
      kind: 'store',
      path: s.path,
      used: s.used,
      counted: STORE_COUNTED,
      notCovered: STORE_NOT_COVERED,
      // Measured from disk on every call.
      countedAt: new Date().toISOString(),
      route: null,
    },
    s.limits,
  );
}

/** A --store argument: the directory store of a `xet::` remote of that name, else a path or URL. */
function storePath(where: string, cwd: string, config: GitConfig | null): string {
  const url = /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(where) ? config?.get(`remote.${where}.url`) : undefined;
  return url?.startsWith('xet::') ? storePathFromUrl(url, cwd) : storePathFromUrl(where, cwd);
}

/** The directory stores of this repository's `xet::` remotes that exist (a remote never pushed to
 * has none yet: nothing was written there). */
function remoteStores(config: GitConfig, cwd: string): string[] {
  const out: string[] = [];
  for (const key of config.keysMatching(/^remote\..+\.url$/)) {
    const url = config.get(key);
    if (!url?.startsWith('xet::')) continue;
    try {
      out.push(storePathFromUrl(url, cwd));
    } catch {
      // not a directory store (another scheme): not a root git xet can measure
    }
  }
  return out;
}

export async function allowanceReport(options: AllowanceReportOptions): Promise<AllowanceReport> {
  const { cwd } = options;
  const recount = Boolean(options.recount);
  const asked = options.stores ?? [];
  // Outside a repository only the named stores can be reported.
  const repo = await findRepo(cwd, true).catch((e: unknown) => {
    if (asked.length && e instanceof XetError && e.code === 'NOT_A_REPOSITORY') return null;
    throw e;
  });
  const config = repo ? await readConfig(repoOpts(repo)) : null;
  const report: AllowanceReport = {
    contract: ALLOWANCE_CONTRACT,
    supported: [ALLOWANCE_CONTRACT],
    recounted: recount,
    leftoversRemoved: 0,
    roots: [],
  };
  // Every setting and argument is checked before a recount removes anything: the named stores must
  // exist; a remote's store that does not yet (never pushed to) is left out.
  const limits = config ? repositoryLimits(config) : null;
  const named = new Map(
    asked.map((s) => storePath(s, cwd, config)).map((where) => [where, DirectoryStore.open(where)] as const),
  );
  const implicitStores = repo && config ? remoteStores(config, repo.worktree).filter((p) => !named.has(p)) : [];
  if (repo && limits) {
    if (recount) {
      const counted = recountClearingDead(repo);
      report.leftoversRemoved = counted.leftoversRemoved;
    }
    const atRest = sidecarTransients(repo.commonDir);
    const measured = (recount ? withSidecar : withExistingSidecar)(repo.commonDir, (db) => ({
      usage: repositoryUsage(repo, db, atRest),
      forks: listForks(db, false).map((row) => measureFork(repo, db, row, recount)),
    }));
    report.roots.push(repositoryReport(repo, limits, measured?.usage ?? repositoryUsage(repo, null)));
    report.roots.push(...(measured?.forks ?? []).map(forkReport));
  }
  const stores = new Map(named);
  for (const where of implicitStores) {
    if (stores.has(where)) continue;
    try {
      stores.set(where, DirectoryStore.open(where));
    } catch (e) {
      if (!(e instanceof XetError && e.code === 'STORE_UNAVAILABLE')) throw e;
    }
  }
  for (const store of stores.values()) report.roots.push(storeRootOrError(store));
  return report;
}

/** One store's root; a store that cannot be measured (its ALLOWANCE hostile or damaged) is reported
 * with its `error` rather than hiding every other root. */
function storeRootOrError(store: DirectoryStore): RootReport {
  try {
    return storeReport(measureStore(store));
  } catch (e) {
    if (!(e instanceof XetError)) throw e;
    const error = { code: e.code, message: e.message };
    // Its limits are unknown (null); what it holds is still its files walked.
    const usage = ((): StoreUsage | null => {
      try {
        return measureStoreAt(store.root, null);
      } catch {
        return null; // the walk fails too: the error says why
      }
    })();
    if (usage) return { ...storeReport(usage), error };
    const none = limitsOf(null, null, undefined, 'headroom');
    return {
      ...rootReport(
        {
          root: storeRootName(store.root),
          kind: 'store',
          path: store.root,
          used: { bytes: 0, files: 0 },
          counted: STORE_COUNTED,
          notCovered: STORE_NOT_COVERED,
          countedAt: null,
          route: null,
        },
        none,
      ),
      error,
    };
  }
}

/** Whether some root could not be measured (`git xet allowance` then exits 1: a partial report). */
export function partialReport(r: AllowanceReport): boolean {
  return r.roots.some((root) => root.error !== undefined);
}

/**
 * `allowance --store <path> --set BYTES[,FILES]|none [--headroom SIZE|PCT]`: record the store's own
 * allowance (store-root.ts writes `<store>/ALLOWANCE`), then report the store. Every argument is
 * checked before the file is touched.
 */
export async function setStoreAllowanceReport(options: {
  cwd: string;
  store: string;
  set: string;
  headroom?: string;
}): Promise<AllowanceReport> {
  const { cwd } = options;
  const repo = await findRepo(cwd, true).catch(() => null);
  const config = repo ? await readConfig(repoOpts(repo)) : null;
  const none = options.set.trim().toLowerCase() === 'none';
  if (none && options.headroom !== undefined) {
    throw new XetError('USAGE', '--headroom applies to an allowance, not to --set none');
  }
  const a = parseStoreAllowanceSet(options.set);
  try {
    limitsOf(a.bytes, a.files, options.headroom, '--headroom');
  } catch (e) {
    // headroomFor's refusal is a config one; here it is an argument (checked before the store is read).
    if (e instanceof XetError) throw new XetError('USAGE', e.message, e.details);
    throw e;
  }
  const root = storePath(options.store, cwd, config);
  const store = DirectoryStore.open(root);
  setStoreAllowance(store.root, a.bytes, a.files, options.headroom);
  return {
    contract: ALLOWANCE_CONTRACT,
    supported: [ALLOWANCE_CONTRACT],
    recounted: false,
    leftoversRemoved: 0,
    roots: [storeReport(measureStore(store))],
  };
}
