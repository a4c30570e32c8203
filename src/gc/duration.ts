// Durations and points in time as users type them for pins, retention, grace and idleness: one
// parser, so `--until 2w`, `xet.retention.keepWithin 7d` and `xet.gc.grace 2.weeks` mean the same
// thing everywhere. Accepted: `now`, `never`, `0`, a sum of <number><unit> (`1d12h`, `90m`, `2w`),
// git's approxidate spelling of a relative time (`2.weeks.ago`, `2.weeks`, `3 days`), and, where a
// point in time is wanted, an ISO-8601 date (`2027-01-31`, `2027-01-31T12:00:00Z`).

import { XetError } from '../errors';

const UNIT_SECONDS: Record<string, number> = {
  s: 1,
  sec: 1,
  second: 1,
  m: 60,
  min: 60,
  minute: 60,
  h: 3600,
  hour: 3600,
  d: 86400,
  day: 86400,
  w: 7 * 86400,
  week: 7 * 86400,
  // Months and years as git's approxidate counts them (30 and 365 days): restic's `m` would be
  // ambiguous with minutes, so a month must be spelled out.
  month: 30 * 86400,
  y: 365 * 86400,
  year: 365 * 86400,
};

/** Seconds in a duration; Infinity for `never`. Throws USAGE (or CONFIG_INVALID via `what`). */
export function parseDuration(text: string, what = 'duration', code: 'USAGE' | 'CONFIG_INVALID' = 'USAGE'): number {
  const t = text.trim().toLowerCase();
  if (t === 'never') return Infinity;
  if (t === 'now' || t === '0') return 0;
  // git approxidate: "2.weeks.ago", "2.weeks", "3 days ago", "1.day"
  const approx = /^(\d+)[. ]+([a-z]+?)s?(?:[. ]+ago)?$/.exec(t);
  if (approx && UNIT_SECONDS[approx[2]] !== undefined && approx[2].length > 1) {
    return Number(approx[1]) * UNIT_SECONDS[approx[2]];
  }
  const parts = /^(?:\d+(?:s|sec|m|min|h|d|w|y|months?|years?|weeks?|days?|hours?|minutes?|seconds?))+$/.test(t)
    ? [...t.matchAll(/(\d+)([a-z]+)/g)]
    : null;
  if (parts && parts.length) {
    let total = 0;
    for (const [, n, unit] of parts) total += Number(n) * UNIT_SECONDS[unit.replace(/s$/, '') || unit];
    if (Number.isFinite(total)) return total;
  }
  throw new XetError(
    code,
    `${JSON.stringify(text)} is not a ${what}: use a number with a unit (30m, 12h, 7d, 2w, 1y), git's 2.weeks.ago, now or never`,
    { value: text },
  );
}

/**
 * A point in time from `--until`: a duration from `now`, or an ISO-8601 date/time (a date alone is
 * midnight UTC). Returns null for `never`.
 */
export function parseUntil(text: string, now: Date): Date | null {
  const t = text.trim();
  if (/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(t)) {
    const iso = t.length === 10 ? `${t}T00:00:00Z` : t.replace(' ', 'T');
    const d = new Date(iso);
    if (!Number.isNaN(d.getTime())) return d;
  }
  const s = parseDuration(t, 'duration or date');
  if (s === Infinity) return null;
  return new Date(now.getTime() + s * 1000);
}

/** A duration for people: the largest unit that divides it (`2w`, `36h`, `90s`). */
export function formatDuration(seconds: number): string {
  if (seconds === Infinity) return 'never';
  if (seconds === 0) return '0s';
  for (const [unit, n] of [
    ['y', 365 * 86400],
    ['w', 7 * 86400],
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
  ] as const) {
    if (seconds % n === 0) return `${seconds / n}${unit}`;
  }
  return `${seconds}s`;
}
