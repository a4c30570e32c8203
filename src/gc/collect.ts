// The local collector, `git xet gc`: mark the roots (markRoots), write the plan to the journal,
// sweep refs under refs/xet/ and files under .git/xet/, then let Git reclaim the objects nothing
// reaches any more with a grace: `git repack -a -d -l --cruft --cruft-expiration=<cutoff>` and
// `git prune --expire=<cutoff>`, exactly what `git gc` does with that gc.pruneExpire, so an object
// written just before its ref (the window Git's grace exists for) survives.
//
// Everything from marking to the end of the repack runs under the exclusive objects lock: commands
// that make existing objects reachable again (capture, fork, fetch, pin …) hold it shared, so each
// is either finished before the marking (its ref or row is a root) or starts after the repack.
// gc never touches refs outside refs/xet/*, never runs `git gc`, `reflog expire` or `pack-refs`.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError, isXetError } from '../errors';
import { git, gitText } from '../git/exec';
import { repoOpts, type Repo } from '../git/repo';
import { withExistingSidecar, withSidecar } from '../sidecar/db';
import { listForks } from '../sidecar/forks';
import { faultPoint } from '../testing/fault-points';
import { isNoSpace } from '../workspace/tools';
import { listSignatureRefs, SIGNATURE_REF_PREFIX } from '../handoff/signatures';
import { formatDuration, parseDuration } from './duration';
import {
  finishRun,
  interruptUnfinished,
  pruneFinishedRuns,
  recordDeletedRef,
  recordPlan,
  recordStep,
  REPOSITORY_TARGET,
  startRun,
} from './journal';
import { DROP_SCHEMA, isoSeconds, markerRef, writeMarker } from './markers';
import { measureObjects, type StoreSize } from './measure';
import { holdObjectsExclusive } from './objects-lock';
import { markRoots, readForkMarkers, type Keeper, type Marking } from './roots';
import { collectTasks } from '../tasks/retention';
import { admitSettle } from '../allowance/settle';
import { afterFold, beforeFold } from './fold';
import {
  captureLocksOf,
  deadLocks,
  deadSpools,
  forgetCacheTrees,
  removeBase,
  removePaths,
  staleCaches,
  unsafeCaches,
  unusedBases,
} from './sweep';

export const DEFAULT_GRACE_SECONDS = 14 * 86400;

export interface GcOptions {
  dryRun: boolean;
  /** Seconds (Infinity: never); undefined: xet.gc.grace, else gc.pruneExpire, else two weeks. */
  graceSeconds?: number;
  now?: Date;
  progress?: (what: string) => void;
}

export interface DeletedRef {
  ref: string;
  /** What the ref pointed to. */
  oid: string;
  snapshot: string | null;
  why: 'dropped' | 'pin-expired' | 'handoff-expired';
}

export interface GcResult {
  dryRun: boolean;
  /** The journal row (gc_runs.id); null for a dry run. */
  runId: string | null;
  grace: string;
  graceSeconds: number | null;
  graceFrom: 'option' | 'xet.gc.grace' | 'gc.pruneExpire' | 'default';
  /** Drops and unreachable objects older than this go; null: never. */
  cutoff: string | null;
  /** Earlier runs found unfinished and marked interrupted. */
  interrupted: string[];
  refs: {
    /** Snapshots the retention policy let go: moved to refs/xet/dropped/ (reason retention). */
    released: { snapshot: string; why: string }[];
    deleted: DeletedRef[];
  };
  bases: string[];
  caches: string[];
  spools: string[];
  /** Tasks past xet.task.retention collected first (a dry run: those it would collect; their
   * snapshots are still listed as kept by them). */
  tasks: string[];
  /** Every snapshot kept and what keeps it. */
  kept: { snapshot: string; keepers: Keeper[] }[];
  objects: {
    before: StoreSize;
    after: StoreSize | null;
    reclaimedObjects: number | null;
    reclaimedBytes: number | null;
  };
  problems: string[];
}

/** The grace a run uses, and where it came from. */
export async function resolveGrace(
  repo: Repo,
  graceSeconds: number | undefined,
): Promise<{ seconds: number; from: GcResult['graceFrom'] }> {
  if (graceSeconds !== undefined) return { seconds: graceSeconds, from: 'option' };
  const o = repoOpts(repo);
  for (const key of ['xet.gc.grace', 'gc.pruneExpire'] as const) {
    const v = await gitText(['config', '--get', key], { ...o, okCodes: [1] });
    if (!v) continue;
    try {
      return { seconds: parseDuration(v, `${key} duration`, 'CONFIG_INVALID'), from: key };
    } catch (e) {
      // Anything git itself accepts there (a date, `yesterday`, `1.week.ago`): git's own reading.
      const r = await git(['config', '--type=expiry-date', '--get', key], { ...o, okCodes: [1, 128] });
      const at = Number(r.stdout.toString('utf8').trim());
      if (r.code !== 0 || !Number.isSafeInteger(at)) throw e;
      return { seconds: Math.max(0, Math.floor(Date.now() / 1000) - at), from: key };
    }
  }
  return { seconds: DEFAULT_GRACE_SECONDS, from: 'default' };
}

interface Plan {
  released: Marking['released'];
  deleted: DeletedRef[];
  bases: string[];
  baseLeftovers: string[];
  caches: string[];
  /** The caches of worktrees that no longer exist (their capture locks go too). */
  goneCaches: string[];
  spools: string[];
  problems: string[];
}

async function makePlan(repo: Repo, m: Marking, cutoff: Date | null): Promise<Plan> {
  const problems = [...m.problems];
  const deleted: DeletedRef[] = [];
  const before = (iso: string) => cutoff !== null && Date.parse(iso) < cutoff.getTime();
  for (const d of m.dropped) {
    // An unreadable drop marker (markRoots reports it) is kept: its date cannot be trusted.
    if (!d.record) continue;
    if (before(d.record.droppedAt)) deleted.push({ ref: d.ref, oid: d.commit, snapshot: d.snapshot, why: 'dropped' });
  }
  for (const p of m.expiredPins) deleted.push({ ref: p.ref, oid: p.commit, snapshot: p.snapshot, why: 'pin-expired' });
  const goneHandoffs = m.expiredHandoffs.filter((h) => before(h.expiresAt));
  for (const h of goneHandoffs)
    deleted.push({ ref: h.ref, oid: h.commit, snapshot: h.snapshot, why: 'handoff-expired' });
  // Its signatures go with a handoff: left behind, each would keep the handoff commit and snapshot.
  if (goneHandoffs.length) {
    const snapshotOf = new Map(goneHandoffs.map((h) => [h.id, h.snapshot]));
    for (const s of await listSignatureRefs(repoOpts(repo), [...snapshotOf.keys()])) {
      const handoff = s.name.slice(SIGNATURE_REF_PREFIX.length).split('/')[0];
      deleted.push({ ref: s.name, oid: s.oid, snapshot: snapshotOf.get(handoff) ?? null, why: 'handoff-expired' });
    }
  }
  const { bases, leftovers } = unusedBases(repo, m.liveBases);
  const gone = staleCaches(repo);
  // What stays after this run: every snapshot ref not released, every root, every drop not deleted.
  const releasing = new Set(m.released.map((r) => r.oid));
  const deleting = new Set(deleted.filter((d) => d.why === 'dropped').map((d) => d.snapshot));
  const remaining = [
    ...m.snapshots.map((s) => s.oid).filter((s) => !releasing.has(s)),
    ...m.kept.keys(),
    ...m.dropped.filter((d) => !deleting.has(d.snapshot)).map((d) => d.snapshot),
  ];
  const unsafe = await unsafeCaches(repo, remaining, new Set(gone));
  return {
    released: m.released,
    deleted,
    bases,
    baseLeftovers: leftovers,
    caches: [...gone, ...unsafe],
    goneCaches: gone,
    spools: [...deadSpools(repo), ...deadLocks(repo, liveForkIds(repo), m.liveBases)],
    problems,
  };
}

/** Forks that may still run a discard: live rows and worktrees locked as `git xet fork <id>`. */
function liveForkIds(repo: Repo): Set<string> {
  const ids = new Set<string>();
  withExistingSidecar(repo.commonDir, (db) => {
    for (const f of listForks(db, false)) ids.add(f.id);
  });
  for (const m of readForkMarkers(repo, [])) ids.add(m.id);
  // A fork made before xet-fork.json existed is still named by its worktree's lock reason.
  const root = path.join(repo.commonDir, 'worktrees');
  for (const name of fs.existsSync(root) ? fs.readdirSync(root) : []) {
    try {
      const m = /^git xet fork ([0-9a-z-]+)\s*$/.exec(fs.readFileSync(path.join(root, name, 'locked'), 'utf8'));
      if (m) ids.add(m[1]);
    } catch {
      // not locked
    }
  }
  return ids;
}

function keptList(m: Marking): GcResult['kept'] {
  return [...m.kept.entries()]
    .map(([snapshot, keepers]) => ({ snapshot, keepers }))
    .sort((a, b) => (a.snapshot < b.snapshot ? -1 : 1));
}

export async function collectGarbage(repo: Repo, opts: GcOptions): Promise<GcResult> {
  const now = opts.now ?? new Date();
  const grace = await resolveGrace(repo, opts.graceSeconds);
  const cutoff = Number.isFinite(grace.seconds) ? new Date(now.getTime() - grace.seconds * 1000) : null;
  const base = {
    grace: formatDuration(grace.seconds),
    graceSeconds: Number.isFinite(grace.seconds) ? grace.seconds : null,
    graceFrom: grace.from,
    cutoff: cutoff ? cutoff.toISOString() : null,
  };

  // A dry run writes nothing, so it needs no admission; a real run is settling work (headroom).
  const admission = opts.dryRun ? null : await admitSettle(repo, 'gc');
  try {
    return await collect(repo, opts, now, grace, cutoff, base);
  } finally {
    admission?.end();
  }
}

async function collect(
  repo: Repo,
  opts: GcOptions,
  now: Date,
  grace: Awaited<ReturnType<typeof resolveGrace>>,
  cutoff: Date | null,
  base: Pick<GcResult, 'grace' | 'graceSeconds' | 'graceFrom' | 'cutoff'>,
): Promise<GcResult> {
  const progress = opts.progress ?? (() => undefined);
  const o = repoOpts(repo);
  progress('collecting tasks');
  // First, and outside the objects lock: a collected task is no root of this run's marking.
  const tasks = collectTasks(repo, { now, dryRun: opts.dryRun }).collected;

  if (opts.dryRun) {
    // Read only: no lock, no journal row, nothing written (a sidecar is not even created).
    progress('marking roots');
    const before = await measureObjects(repo.objectsDir, o);
    const m = await markRoots(repo, now);
    const plan = await makePlan(repo, m, cutoff);
    return {
      dryRun: true,
      runId: null,
      ...base,
      interrupted: [],
      refs: {
        released: plan.released.map((r) => ({ snapshot: r.oid, why: r.why })),
        deleted: plan.deleted,
      },
      bases: plan.bases,
      caches: plan.caches,
      spools: [...plan.baseLeftovers, ...plan.spools],
      tasks,
      kept: keptList(m),
      objects: { before, after: null, reclaimedObjects: null, reclaimedBytes: null },
      problems: plan.problems,
    };
  }

  progress('waiting for other git xet commands to finish');
  const lock = holdObjectsExclusive(repo.commonDir, () => progress('waiting for running git xet commands to finish'));
  let runId: string | null = null;
  try {
    const { interrupted, id } = withSidecar(repo.commonDir, (db) => {
      const interrupted = interruptUnfinished(db, REPOSITORY_TARGET, now.toISOString());
      return { interrupted, id: startRun(db, REPOSITORY_TARGET, grace.seconds, cutoff, now) };
    });
    runId = id;
    const before = await measureObjects(repo.objectsDir, o);
    progress('marking roots');
    const m = await markRoots(repo, now);
    const plan = await makePlan(repo, m, cutoff);
    withSidecar(repo.commonDir, (db) =>
      recordPlan(db, id, {
        released: plan.released.map((r) => r.oid),
        deleted: plan.deleted,
        bases: plan.bases,
        caches: plan.caches,
        spools: plan.spools,
        kept: m.kept.size,
      }),
    );
    await faultPoint('gc:after-plan');

    progress('sweeping refs');
    const released = await releaseSnapshots(repo, plan.released, now, plan.problems);
    const deleted = await deleteRefs(repo, id, plan.deleted, now, plan.problems);
    withSidecar(repo.commonDir, (db) => recordStep(db, id, 'sweeping', 'refs'));
    await faultPoint('gc:after-refs');

    progress('removing unused bases');
    const bases = plan.bases.filter((b) => removeBase(repo, b));
    removePaths(plan.baseLeftovers);
    withSidecar(repo.commonDir, (db) => recordStep(db, id, 'sweeping', 'bases'));
    await faultPoint('gc:after-bases');

    const caches = plan.caches.filter((c) => removePaths([c]) === 1);
    forgetCacheTrees(repo, caches);
    removePaths(
      captureLocksOf(
        repo,
        plan.goneCaches.filter((c) => caches.includes(c)),
      ),
    );
    const spools = [...plan.baseLeftovers, ...plan.spools.filter((s) => removePaths([s]) === 1)];
    withSidecar(repo.commonDir, (db) => recordStep(db, id, 'sweeping', 'caches'));
    await faultPoint('gc:before-repack');

    progress('reclaiming objects (git repack)');
    withSidecar(repo.commonDir, (db) => recordStep(db, id, 'reclaiming', 'caches'));
    beforeFold(repo);
    await reclaimObjects(repo, grace.seconds, cutoff);
    await faultPoint('gc:after-repack');
    await afterFold(repo).catch((e: Error) =>
      plan.problems.push(`what of the repacked objects is git xet's was not recorded: ${e.message}`),
    );
    const after = await measureObjects(repo.objectsDir, o);

    const result: GcResult = {
      dryRun: false,
      runId: id,
      ...base,
      interrupted,
      refs: { released: released.map((r) => ({ snapshot: r.oid, why: r.why })), deleted },
      bases,
      caches,
      spools,
      tasks,
      kept: keptList(m),
      objects: {
        before,
        after,
        reclaimedObjects: before.objects - after.objects,
        reclaimedBytes: before.bytes - after.bytes,
      },
      problems: plan.problems,
    };
    withSidecar(repo.commonDir, (db) => {
      recordStep(db, id, 'reclaiming', 'repack');
      finishRun(db, id, 'done', { ...result, kept: result.kept.length });
      pruneFinishedRuns(db, REPOSITORY_TARGET);
    });
    return result;
  } catch (e) {
    const full = diskFull(e, [repo.objectsDir, repo.commonDir]);
    const err = full
      ? new XetError('DISK_FULL', `no space left on ${full} during git xet gc; nothing retained was removed`, {
          dir: full,
          cause: e instanceof Error ? e.message : String(e),
        })
      : e;
    if (full) removePaths(deadSpools(repo));
    if (runId) {
      try {
        withSidecar(repo.commonDir, (db) =>
          finishRun(db, runId as string, 'failed', { error: isXetError(err) ? err.toJSON() : String(err) }),
        );
      } catch {
        // the disk is full: the next run finds this row unfinished and marks it interrupted
      }
    }
    throw err;
  } finally {
    lock.release();
  }
}

async function updateRefs(lines: string[], o: ReturnType<typeof repoOpts>): Promise<void> {
  await git(['update-ref', '--stdin', '-z'], { ...o, input: Buffer.from(lines.map((l) => `${l}\0`).join(''), 'utf8') });
}

/**
 * Move the snapshots retention let go to refs/xet/dropped/ (reason `retention`): per snapshot the
 * drop marker is created and the snapshot ref deleted with its old value checked, all in one
 * `git update-ref --stdin` transaction. If the transaction fails (a ref changed under us: an
 * explicit drop, which takes no objects lock), each snapshot is retried on its own and those that
 * changed are left alone.
 */
async function releaseSnapshots(
  repo: Repo,
  released: Marking['released'],
  now: Date,
  problems: string[],
): Promise<Marking['released']> {
  if (!released.length) return [];
  const o = repoOpts(repo);
  const existing = new Map(
    (await gitText(['for-each-ref', '--format=%(refname) %(objectname)', 'refs/xet/dropped/'], o))
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ') as [string, string]),
  );
  const droppedAt = isoSeconds(now);
  const per: { r: Marking['released'][number]; lines: string[] }[] = [];
  for (const r of released) {
    const commit = await writeMarker(
      'drop',
      { schema: DROP_SCHEMA, snapshot: r.oid, droppedAt, reason: 'retention' },
      repo.objectFormat,
      o,
    );
    const ref = markerRef('drop', r.oid);
    const old = existing.get(ref);
    // -z format: each field NUL-terminated; an empty old value means "must not exist".
    per.push({
      r,
      lines: [old ? `update ${ref}\0${commit}\0${old}` : `create ${ref}\0${commit}`, `delete ${r.ref}\0${r.oid}`],
    });
  }
  try {
    await updateRefs(
      per.flatMap((p) => p.lines),
      o,
    );
    return released;
  } catch (e) {
    if (!isXetError(e, 'GIT_FAILED')) throw e;
    const done: Marking['released'] = [];
    for (const p of per) {
      try {
        await updateRefs(p.lines, o);
        done.push(p.r);
      } catch (e2) {
        if (!isXetError(e2, 'GIT_FAILED')) throw e2;
        problems.push(`${p.r.ref} changed during gc; left for the next run`);
      }
    }
    return done;
  }
}

/** Delete expired refs (dropped past the grace, expired pins, expired handoffs) with old-value
 * checks in one transaction, and record each in gc_deleted_refs (and the pin rows go). */
async function deleteRefs(
  repo: Repo,
  runId: string,
  list: DeletedRef[],
  now: Date,
  problems: string[],
): Promise<DeletedRef[]> {
  if (!list.length) return [];
  const o = repoOpts(repo);
  let done: DeletedRef[] = list;
  try {
    await updateRefs(
      list.map((d) => `delete ${d.ref}\0${d.oid}`),
      o,
    );
  } catch (e) {
    if (!isXetError(e, 'GIT_FAILED')) throw e;
    done = [];
    for (const d of list) {
      try {
        await updateRefs([`delete ${d.ref}\0${d.oid}`], o);
        done.push(d);
      } catch (e2) {
        if (!isXetError(e2, 'GIT_FAILED')) throw e2;
        problems.push(`${d.ref} changed during gc; left for the next run`);
      }
    }
  }
  const at = now.toISOString();
  withSidecar(repo.commonDir, (db) =>
    db.transaction(() => {
      for (const d of done) {
        // oid: the snapshot the ref kept (what undrop looks up), else the ref's value.
        recordDeletedRef(db, runId, d.ref, d.snapshot ?? d.oid, at);
        if (d.why === 'pin-expired' && d.snapshot) {
          db.prepare('DELETE FROM pins WHERE snapshot = ? AND commit_oid = ?').run(d.snapshot, d.oid);
        }
      }
    })(),
  );
  return done;
}

/**
 * Let Git reclaim what nothing reaches: a cruft repack that keeps unreachable objects younger than
 * the cutoff in a cruft pack (new packs are written before old ones are deleted, so a failure at any
 * point loses nothing), then `git prune` of loose objects past the cutoff, as `git gc` does. A
 * grace of 0 is the user saying `now`: a plain `repack -a -d` and `prune --expire=now`.
 */
async function reclaimObjects(repo: Repo, graceSeconds: number, cutoff: Date | null): Promise<void> {
  const packDir = path.join(repo.objectsDir, 'pack');
  const before = new Set(listDir(packDir));
  try {
    await repackAndPrune(repo, graceSeconds, cutoff);
  } catch (e) {
    // A repack that failed (a full disk) leaves its temporary packs (`tmp_pack_*`, `.tmp-<pid>-*`);
    // the old packs are all still there, so these are only space taken. Under the exclusive lock no
    // git xet process writes packs; only names that appeared during the repack are removed.
    for (const n of listDir(packDir)) {
      if (!before.has(n) && /^(tmp_pack_|tmp_idx_|tmp_rev_|\.tmp-\d+-)/.test(n)) {
        fs.rmSync(path.join(packDir, n), { force: true });
      }
    }
    throw e;
  }
}

function listDir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

async function repackAndPrune(repo: Repo, graceSeconds: number, cutoff: Date | null): Promise<void> {
  // A repack that outlived a killed gc would run without the objects lock: it dies with us.
  const o = { ...repoOpts(repo), dieWithParent: true };
  const expire = cutoff ? `@${Math.floor(cutoff.getTime() / 1000)}` : null;
  // A partial clone's promisor packs: a cruft repack writes their objects a second time (git.git's
  // blob-filtered clone grew by half in review), so there git xet does what `git gc` does — repack
  // what is reachable, loosen what is not and younger than the cutoff, prune the rest.
  const promisor = listDir(path.join(repo.objectsDir, 'pack')).some((n) => n.endsWith('.promisor'));
  if (promisor) {
    await git(
      [
        'repack',
        '-d',
        '-l',
        '-q',
        '-A',
        ...(expire ? [`--unpack-unreachable=${graceSeconds === 0 ? 'now' : expire}`] : []),
      ],
      o,
    );
    if (expire) await git(['prune', `--expire=${graceSeconds === 0 ? 'now' : expire}`], o);
    return;
  }
  if (graceSeconds === 0) {
    await git(['repack', '-a', '-d', '-l', '-q'], o);
    await git(['prune', '--expire=now'], o);
    return;
  }
  const args = ['repack', '-a', '-d', '-l', '-q', '--cruft'];
  if (expire) args.push(`--cruft-expiration=${expire}`);
  await git(args, o);
  if (expire) await git(['prune', `--expire=${expire}`], o);
}

/** Whether a failure was a full filesystem: said outright, or a failed write where one of the
 * filesystems involved has (almost) no space left. */
function diskFull(e: unknown, dirs: string[]): string | null {
  if (isXetError(e, 'DISK_FULL')) return String(e.details.dir ?? dirs[0]);
  const text = isXetError(e) ? `${e.message} ${String(e.details.stderr ?? '')}` : String((e as Error)?.message);
  const code = (e as NodeJS.ErrnoException)?.code;
  const said = isNoSpace(text) || isNoSpace(code) || /SQLITE_FULL|database or disk is full/i.test(text);
  if (!said && !/unable to write|write error|short write|failed to write|unable to create|fsync/i.test(text)) {
    return null;
  }
  for (const d of dirs) {
    try {
      const st = fs.statfsSync(d);
      if (st.bavail * st.bsize < 1 << 20) return d;
    } catch {
      // gone
    }
  }
  return said ? path.resolve(dirs[0]) : null;
}
