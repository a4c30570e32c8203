// Marking: what keeps each snapshot alive. A root is a pin, a live fork (the snapshot it was laid
// from, which is also its base, and the snapshot a discard in progress kept), an unexpired handoff,
// a task that is not collected (its result snapshot, a running task's base: taskRoots); a rule is the retention policy (or its
// absence) and xet.gc.keepUnpushed. Roots refuse an explicit drop; rules only decide what gc lets
// go by itself. Refs and worktree markers are read first and the sidecar second, so marking after
// the sidecar was lost still keeps every pin and live fork. Whatever cannot be read exactly is kept
// and reported, never released.
//
// Cost: a handful of git processes whatever the number of snapshots (for-each-ref with dates, one
// cat-file batch for pins, handoffs and the manifests the sidecar does not know), so a dry run of
// 1,000 snapshots stays well under a second.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { readConfig, type GitConfig } from '../git/config';
import { gitText } from '../git/exec';
import { catFileBatch, listRefs } from '../git/plumbing';
import { repoOpts, type Repo } from '../git/repo';
import { listHandoffRefs, readRawHandoffs } from '../handoff/objects';
import { checkStructure } from '../handoff/verify';
import { withExistingSidecar } from '../sidecar/db';
import { listForks } from '../sidecar/forks';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { readMarkers, type DropRecord, type MarkerEntry, type PinRecord } from './markers';
import { taskRoots } from '../tasks/retention';
import { applyRetention, readRetentionPolicy } from './retention';

/** Roots refuse `drop`; rules (retention, unpushed, no-policy) only guide gc. */
export type RootKind = 'pin' | 'fork' | 'fork-kept' | 'handoff' | 'task';
export type RuleKind = 'retention' | 'unpushed' | 'no-policy' | 'unreadable';

export interface Keeper {
  kind: RootKind | RuleKind;
  /** What it is: the pin's reason, the fork's id and dir, the handoff id, the rule (`keepLast 5`). */
  name: string;
}

export interface SnapshotRef {
  oid: string;
  ref: string;
  /** When it was captured (ISO, ms: the sidecar or manifest; the commit's time otherwise). */
  createdAt: string;
  /** Where it was captured (the retention group); null when neither the sidecar nor the manifest says. */
  worktree: string | null;
}

export interface Marking {
  now: Date;
  /** Every sound refs/xet/snapshots/* ref (the retained candidates). */
  snapshots: SnapshotRef[];
  /** For every snapshot kept, why (never empty for a kept one). */
  kept: Map<string, Keeper[]>;
  /** Snapshots the retention policy lets go (no root, no keeping rule). */
  released: { oid: string; ref: string; why: string }[];
  /** refs/xet/dropped/*: dropped snapshots awaiting reclamation. */
  dropped: MarkerEntry<DropRecord>[];
  /** Pins past their `until` (no longer roots). */
  expiredPins: MarkerEntry<PinRecord>[];
  /** Handoff refs past their expiresAt. */
  expiredHandoffs: { ref: string; id: string; commit: string; snapshot: string | null; expiresAt: string }[];
  /** Snapshots whose base (bases/<oid>/) a live fork uses or may use. */
  liveBases: Set<string>;
  /** Roots that could not be read exactly (a malformed pin ref…): reported, and kept on the safe side. */
  problems: string[];
}

export interface Roots {
  /** Snapshot oid → the roots (not rules) that keep it. */
  roots: Map<string, Keeper[]>;
  pins: MarkerEntry<PinRecord>[];
  expiredPins: MarkerEntry<PinRecord>[];
  expiredHandoffs: Marking['expiredHandoffs'];
  liveBases: Set<string>;
  problems: string[];
}

/** The marker every fork creation writes in its worktree admin dir, so forks survive the sidecar. */
export const FORK_MARKER_FILE = 'xet-fork.json';
const FORK_LOCK_REASON = /^git xet fork ([0-9a-z-]+)\s*$/;

function add(map: Map<string, Keeper[]>, oid: string, k: Keeper): void {
  const list = map.get(oid);
  if (!list) map.set(oid, [k]);
  else if (!list.some((x) => x.kind === k.kind && x.name === k.name)) list.push(k);
}

/** Pins, live forks and unexpired handoffs: the roots that refuse a drop. */
export async function readRoots(repo: Repo, now: Date): Promise<Roots> {
  const opts = repoOpts(repo);
  const roots = new Map<string, Keeper[]>();
  const problems: string[] = [];
  const liveBases = new Set<string>();

  const allPins = await readMarkers('pin', opts);
  const pins: MarkerEntry<PinRecord>[] = [];
  const expiredPins: MarkerEntry<PinRecord>[] = [];
  for (const p of allPins) {
    if (!p.record) {
      // Kept on the safe side: a pin we cannot read still names a snapshot someone meant to keep.
      problems.push(`${p.ref}: ${p.problem}`);
      if (/^[0-9a-f]{40,64}$/.test(p.snapshot))
        add(roots, p.snapshot, { kind: 'pin', name: `unreadable pin (${p.problem})` });
      continue;
    }
    if (p.record.until !== null && Date.parse(p.record.until) <= now.getTime()) {
      expiredPins.push(p);
      continue;
    }
    pins.push(p);
    const until = p.record.until ? ` until ${p.record.until}` : '';
    add(roots, p.snapshot, { kind: 'pin', name: `${p.record.reason || 'pinned'}${until}` });
  }

  // Live forks: the sidecar's rows, then the worktree markers (which survive the sidecar).
  const rowIds = new Set<string>();
  withExistingSidecar(repo.commonDir, (db) => {
    for (const f of listForks(db, false)) {
      rowIds.add(f.id);
      add(roots, f.snapshot, { kind: 'fork', name: `${f.id} at ${f.dir}` });
      liveBases.add(f.snapshot);
      if (f.keptSnapshot)
        add(roots, f.keptSnapshot, { kind: 'fork-kept', name: `kept by the discard of fork ${f.id}` });
    }
    // Until its task is collected (xet.task.retention), a task keeps its result and, while it
    // runs, its base: `task show` links them.
    for (const t of taskRoots(db)) add(roots, t.snapshot, { kind: 'task', name: t.task });
  });
  for (const m of readForkMarkers(repo, problems)) {
    if (rowIds.has(m.id)) continue;
    add(roots, m.snapshot, { kind: 'fork', name: `${m.id} at ${m.dir}` });
    liveBases.add(m.snapshot);
  }

  const handoffRefs = await listHandoffRefs(opts);
  const expiredHandoffs: Marking['expiredHandoffs'] = [];
  for (const raw of await readRawHandoffs(handoffRefs, opts)) {
    const ins = checkStructure(raw);
    const d = ins.descriptor;
    if (!d || !ins.ok) {
      // Not a valid handoff: no expiry can be trusted, so it is never collected; git reachability
      // keeps what it points at anyway, and its parent is kept as a root on the safe side.
      if (raw.parents.length === 1) add(roots, raw.parents[0], { kind: 'handoff', name: `invalid ref ${raw.ref}` });
      continue;
    }
    if (d.expiresAt && Date.parse(d.expiresAt) <= now.getTime()) {
      expiredHandoffs.push({
        ref: raw.ref,
        id: raw.id,
        commit: raw.commit,
        snapshot: d.snapshot.oid,
        expiresAt: d.expiresAt,
      });
      continue;
    }
    add(roots, d.snapshot.oid, { kind: 'handoff', name: `${raw.id.slice(0, 12)} "${d.title}"` });
  }
  return { roots, pins, expiredPins, expiredHandoffs, liveBases, problems };
}

interface ForkMarker {
  id: string;
  snapshot: string;
  dir: string;
}

/** Forks found from the worktrees: an admin dir locked as `git xet fork <id>` whose working tree exists. */
export function readForkMarkers(repo: Repo, problems: string[]): ForkMarker[] {
  const root = path.join(repo.commonDir, 'worktrees');
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return [];
  }
  const out: ForkMarker[] = [];
  for (const name of names) {
    const admin = path.join(root, name);
    let reason: string;
    try {
      reason = fs.readFileSync(path.join(admin, 'locked'), 'utf8');
    } catch {
      continue; // not locked: not a fork (or a user's locked worktree without our reason)
    }
    const lock = FORK_LOCK_REASON.exec(reason);
    if (!lock) continue;
    let dir = '';
    try {
      dir = path.dirname(fs.readFileSync(path.join(admin, 'gitdir'), 'utf8').trim());
    } catch {
      // admin dir without gitdir: a creation killed early
    }
    let marker: { id?: unknown; snapshot?: unknown } | null = null;
    try {
      const st = fs.lstatSync(path.join(admin, FORK_MARKER_FILE));
      if (st.isFile() && st.size <= 64 * 1024)
        marker = JSON.parse(fs.readFileSync(path.join(admin, FORK_MARKER_FILE), 'utf8'));
    } catch {
      marker = null;
    }
    if (!marker || typeof marker.snapshot !== 'string' || !/^[0-9a-f]{40,64}$/.test(marker.snapshot)) {
      problems.push(`worktree ${name} is fork ${lock[1]} but has no readable ${FORK_MARKER_FILE}`);
      continue;
    }
    if (marker.id !== lock[1]) {
      problems.push(`worktree ${name}: ${FORK_MARKER_FILE} names fork ${String(marker.id)}, its lock fork ${lock[1]}`);
    }
    out.push({ id: lock[1], snapshot: marker.snapshot, dir });
  }
  return out;
}

/** The roots (not rules) that keep one snapshot: what `drop` refuses on. */
export async function rootsOf(repo: Repo, snapshot: string, now: Date): Promise<Keeper[]> {
  return (await readRoots(repo, now)).roots.get(snapshot) ?? [];
}

/** Snapshot refs with their dates and groups, in three git processes at most. */
export async function readSnapshotRefs(repo: Repo, problems: string[]): Promise<SnapshotRef[]> {
  const opts = repoOpts(repo);
  const text = await gitText(
    [
      'for-each-ref',
      '--format=%(refname)%00%(objectname)%00%(objecttype)%00%(committerdate:unix)',
      SNAPSHOT_REF_PREFIX,
    ],
    opts,
  );
  const refs: { ref: string; oid: string; time: number }[] = [];
  for (const line of text ? text.split('\n') : []) {
    const [ref, oid, type, time] = line.split('\0');
    if (ref !== `${SNAPSHOT_REF_PREFIX}${oid}` || type !== 'commit') {
      problems.push(`${ref} does not name the commit it points at (${oid}, ${type}); left alone`);
      continue;
    }
    refs.push({ ref, oid, time: Number(time) });
  }
  // The sidecar knows where and when (to the millisecond: several captures a second must still
  // order) each snapshot captured here was made; manifests say it for the others.
  const known = new Map<string, { worktree: string; createdAt: string }>();
  withExistingSidecar(repo.commonDir, (db) => {
    const rows = db
      .prepare(
        `SELECT s.oid AS oid, w.worktree AS worktree, s.created_at AS createdAt
         FROM snapshots s JOIN workspaces w ON w.id = s.workspace_id`,
      )
      .all() as { oid: string; worktree: string; createdAt: string }[];
    for (const r of rows) known.set(r.oid, { worktree: r.worktree, createdAt: r.createdAt });
  });
  const unknown = refs.filter((r) => !known.has(r.oid));
  const manifests = await catFileBatch(
    unknown.map((r) => `${r.oid}:manifest.json`),
    opts,
    4 * 1024 * 1024,
  );
  return refs.map((r) => {
    const k = known.get(r.oid);
    let worktree = k?.worktree ?? null;
    let createdAt = k && !Number.isNaN(Date.parse(k.createdAt)) ? k.createdAt : null;
    if (!k) {
      const m = manifests.get(`${r.oid}:manifest.json`);
      try {
        const parsed = m
          ? (JSON.parse(m.data.toString('utf8')) as { source?: { worktree?: unknown }; createdAt?: unknown })
          : null;
        if (typeof parsed?.source?.worktree === 'string') worktree = parsed.source.worktree;
        if (typeof parsed?.createdAt === 'string' && !Number.isNaN(Date.parse(parsed.createdAt))) {
          createdAt = new Date(parsed.createdAt).toISOString();
        }
      } catch {
        worktree = null;
      }
    }
    return { oid: r.oid, ref: r.ref, createdAt: createdAt ?? new Date(r.time * 1000).toISOString(), worktree };
  });
}

/** Snapshots that are on some remote: a tracking ref from a fetch, or a push recorded as published. */
async function pushedSnapshots(repo: Repo): Promise<Set<string>> {
  const out = new Set<string>();
  for (const r of await listRefs(['refs/remotes/'], repoOpts(repo))) {
    const m = /^refs\/remotes\/.+\/xet\/(?:snapshots|pins)\/([0-9a-f]{40,64})$/.exec(r.name);
    if (m) out.add(m[1]);
  }
  withExistingSidecar(repo.commonDir, (db) => {
    const rows = db.prepare(`SELECT refspecs FROM publications WHERE state = 'published'`).all() as {
      refspecs: string;
    }[];
    for (const row of rows) {
      let specs: unknown;
      try {
        specs = JSON.parse(row.refspecs);
      } catch {
        continue;
      }
      if (!Array.isArray(specs)) continue;
      for (const s of specs) {
        const m = /refs\/xet\/(?:snapshots|pins)\/([0-9a-f]{40,64})$/.exec(String(s));
        if (m) out.add(m[1]);
      }
    }
  });
  return out;
}

/** The config retention reads for a group: its worktree's own view when that worktree still is one
 * of this repository's (per-worktree config included), else the config of the repository gc runs in. */
async function groupConfig(
  repo: Repo,
  worktree: string | null,
  fallback: GitConfig,
  cache: Map<string, GitConfig>,
): Promise<GitConfig> {
  if (!worktree) return fallback;
  const hit = cache.get(worktree);
  if (hit) return hit;
  let config = fallback;
  try {
    if (fs.existsSync(path.join(worktree, '.git'))) {
      const common = await gitText(['rev-parse', '--path-format=absolute', '--git-common-dir'], { cwd: worktree });
      if (fs.realpathSync(common) === fs.realpathSync(repo.commonDir)) config = await readConfig({ cwd: worktree });
    }
  } catch {
    config = fallback;
  }
  cache.set(worktree, config);
  return config;
}

/** Every root and rule: what gc keeps and why, and what it may let go. */
export async function markRoots(repo: Repo, now: Date): Promise<Marking> {
  const r = await readRoots(repo, now);
  const problems = [...r.problems];
  const snapshots = await readSnapshotRefs(repo, problems);
  const kept = new Map<string, Keeper[]>();
  for (const [oid, ks] of r.roots) for (const k of ks) add(kept, oid, k);

  const own = await readConfig(repoOpts(repo));
  const configs = new Map<string, GitConfig>();
  const groups = new Map<string, SnapshotRef[]>();
  for (const s of snapshots) {
    const key = s.worktree ?? '';
    const list = groups.get(key);
    if (list) list.push(s);
    else groups.set(key, [s]);
  }
  let pushed: Set<string> | null = null;
  const released: Marking['released'] = [];
  for (const [key, members] of groups) {
    const config = await groupConfig(repo, key || null, own, configs);
    const policy = readRetentionPolicy(config);
    if (!policy) {
      for (const s of members)
        add(kept, s.oid, { kind: 'no-policy', name: `no xet.retention.* for ${key || 'its worktree'}` });
      continue;
    }
    const byRule = applyRetention(
      members.map((s) => ({ oid: s.oid, time: Date.parse(s.createdAt) / 1000 })),
      policy,
    );
    const keepUnpushed = config.getBool('xet.gc.keepUnpushed') ?? true;
    for (const s of members) {
      const rules = byRule.get(s.oid);
      if (rules) {
        for (const rule of rules) add(kept, s.oid, { kind: 'retention', name: rule });
        continue;
      }
      if (kept.has(s.oid)) continue; // a root keeps it
      if (keepUnpushed) {
        pushed ??= await pushedSnapshots(repo);
        if (!pushed.has(s.oid)) {
          add(kept, s.oid, { kind: 'unpushed', name: 'on no remote (xet.gc.keepUnpushed)' });
          continue;
        }
      }
      released.push({ oid: s.oid, ref: s.ref, why: `no retention rule of ${key || 'its worktree'} keeps it` });
    }
  }
  // A dropped snapshot that is still a root (a fork made of it, or one racing the drop; a handoff
  // naming it) stays dropped but is never reclaimed: a fork holds no ref of its own, so deleting
  // the drop marker would let Git prune what the fork was laid from.
  const dropped = (await readMarkers('drop', repoOpts(repo))).filter((d) => !r.roots.has(d.snapshot));
  for (const d of dropped) if (!d.record) problems.push(`${d.ref}: ${d.problem}`);
  return {
    now,
    snapshots,
    kept,
    released,
    dropped,
    expiredPins: r.expiredPins,
    expiredHandoffs: r.expiredHandoffs,
    liveBases: r.liveBases,
    problems,
  };
}
