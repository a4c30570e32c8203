// The retention policy: which of a worktree's snapshots gc keeps by rule, in the shape of restic's
// `forget --keep-*`. Pure: snapshots and a policy in, the rules that keep each snapshot out. A
// snapshot no rule keeps is released only if nothing else roots it (src/gc/roots.ts).
//
//   xet.retention.keepLast N      the N newest
//   xet.retention.keepWithin D    every snapshot within D of the group's newest one
//   xet.retention.keepDaily N     the newest of each of the last N days that have a snapshot
//   xet.retention.keepWeekly N    the newest of each of the last N ISO weeks that have a snapshot
//
// Days and weeks are the local calendar of the process running gc (TZ), as restic does.

import { XetError } from '../errors';
import type { GitConfig } from '../git/config';
import { formatDuration, parseDuration } from './duration';

export interface RetentionPolicy {
  keepLast?: number;
  keepWithinSeconds?: number;
  keepDaily?: number;
  keepWeekly?: number;
}

export interface Dated {
  oid: string;
  /** Seconds since the epoch. */
  time: number;
}

const COUNT_KEYS = ['keepLast', 'keepDaily', 'keepWeekly'] as const;

/** The policy in this config, or null when no xet.retention.* key keeps anything (nothing is released). */
export function readRetentionPolicy(config: GitConfig): RetentionPolicy | null {
  const policy: RetentionPolicy = {};
  let any = false;
  for (const key of COUNT_KEYS) {
    const raw = config.get(`xet.retention.${key}`);
    if (raw === undefined) continue;
    if (!/^\d{1,9}$/.test(raw.trim())) {
      throw new XetError(
        'CONFIG_INVALID',
        `xet.retention.${key} must be a whole number of snapshots, not ${JSON.stringify(raw)}`,
        {
          key: `xet.retention.${key}`,
          value: raw,
        },
      );
    }
    policy[key] = Number(raw.trim());
    any = true;
  }
  const within = config.get('xet.retention.keepWithin');
  if (within !== undefined) {
    policy.keepWithinSeconds = parseDuration(within, 'xet.retention.keepWithin duration', 'CONFIG_INVALID');
    any = true;
  }
  // As restic: rules that keep nothing (every count 0, keepWithin 0) are no policy, not "drop all".
  const keepsSomething = COUNT_KEYS.some((k) => (policy[k] ?? 0) > 0) || (policy.keepWithinSeconds ?? 0) > 0;
  return any && keepsSomething ? policy : null;
}

/** Each snapshot the policy keeps, with the rules that keep it (`keepLast 3`, `keepDaily 7 (2026-11-30)`). */
export function applyRetention(snapshots: Dated[], policy: RetentionPolicy): Map<string, string[]> {
  const newestFirst = [...snapshots].sort((a, b) => b.time - a.time || (a.oid < b.oid ? -1 : 1));
  const kept = new Map<string, string[]>();
  const keep = (oid: string, why: string) => {
    const list = kept.get(oid);
    if (list) list.push(why);
    else kept.set(oid, [why]);
  };
  if (policy.keepLast) newestFirst.slice(0, policy.keepLast).forEach((s) => keep(s.oid, `keepLast ${policy.keepLast}`));
  if (policy.keepWithinSeconds !== undefined && newestFirst.length) {
    const from = newestFirst[0].time - policy.keepWithinSeconds;
    for (const s of newestFirst) {
      if (s.time >= from) keep(s.oid, `keepWithin ${formatDuration(policy.keepWithinSeconds)}`);
    }
  }
  const buckets = (n: number | undefined, label: string, key: (t: number) => string) => {
    if (!n) return;
    const seen = new Set<string>();
    for (const s of newestFirst) {
      const k = key(s.time);
      if (seen.has(k)) continue;
      if (seen.size >= n) break;
      seen.add(k);
      keep(s.oid, `${label} ${n} (${k})`);
    }
  };
  buckets(policy.keepDaily, 'keepDaily', localDay);
  buckets(policy.keepWeekly, 'keepWeekly', isoWeek);
  return kept;
}

function localDay(t: number): string {
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

/** ISO-8601 week of the local date: weeks start on Monday; week 1 holds the year's first Thursday. */
function isoWeek(t: number): string {
  const d = new Date(t * 1000);
  const day = new Date(Date.UTC(d.getFullYear(), d.getMonth(), d.getDate()));
  const weekday = day.getUTCDay() || 7;
  day.setUTCDate(day.getUTCDate() + 4 - weekday); // the Thursday of this week decides its year
  const yearStart = Date.UTC(day.getUTCFullYear(), 0, 1);
  const week = Math.ceil(((day.getTime() - yearStart) / 86400000 + 1) / 7);
  return `${day.getUTCFullYear()}-W${pad(week)}`;
}

function pad(n: number): string {
  return String(n).padStart(2, '0');
}
