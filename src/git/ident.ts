// The identity and date git writes on a commit or reflog line, where this process writes the line
// itself (a capture's snapshot commit, a fork's reflog): only for inputs git would write exactly as
// given. Anything git would rewrite (crud at the ends of a name, a date in any form but its raw one)
// is the caller's cue to let git do it. test/loose-writer.test.ts holds both to git's own output.

import { native } from '../native';

/** What git strips from both ends of a name or email (ident.c's crud(); '.' too, as gits before
 * 2.22 strip it). */
const CRUD = new Set(['.', ',', ':', ';', '<', '>', '"', '\\', "'"]);
const isCrud = (c: string): boolean => c.charCodeAt(0) <= 32 || CRUD.has(c);

/** A name or email git would write as it is (ident.c strips crud at both ends and drops <, > and
 * newlines inside; anything it would change goes through git). */
export function plainIdent(s: string | undefined): s is string {
  return !!s && !isCrud(s[0]) && !isCrud(s[s.length - 1]) && !/[<>\n\0]/.test(s);
}

/** Whether git keeps `s` as this process encodes it: commit.c's verify_utf8 takes the
 * noncharacters (U+FDD0-U+FDEF and every U+xFFFE, U+xFFFF) for invalid UTF-8 and re-encodes their
 * bytes as Latin-1 (review 25). A lone surrogate is written as U+FFFD by both. */
export function keptAsUtf8(s: string): boolean {
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if ((cp & 0xfffe) === 0xfffe || (cp >= 0xfdd0 && cp <= 0xfdef)) return false;
  }
  return true;
}

/** "<seconds> <+hhmm>" for an offset git would format with %+05d (-800 is -0800). */
function stamp(seconds: number, hhmm: number): string {
  return `${seconds} ${hhmm < 0 ? '-' : '+'}${String(Math.abs(hhmm)).padStart(4, '0')}`;
}

/** git's date for a GIT_AUTHOR_DATE / GIT_COMMITTER_DATE value, or null where only git can say:
 * - unset or empty: now (`nowMs`), with the offset a new git process would print (date.c's
 *   datestamp), from the C library through the native module: node's own time zone (ICU) reads
 *   neither POSIX rules in TZ ("CET-1CEST,M3.5.0,M10.5.0/3") nor right/ zones as git does, and
 *   keeps the zone it started with (review 25). Null without the module, or for a TZ naming a
 *   file by path, whose content this process may have read before it changed.
 * - git's raw form "@<seconds> <+hhmm>": as written, the offset as git prints it (+0090 is +0130).
 *   Without the @, the same numbers go through git's general parser, which refuses some
 *   ("4102444800 +1400"): null, as for any other form. */
export function identDate(value: string | undefined, nowMs: number): string | null {
  if (value === undefined || value === '') {
    const seconds = Math.floor(nowMs / 1000);
    const tz = process.env.TZ;
    if (!native?.gitTzOffset || seconds > 4102444799 || (tz !== undefined && /^:?\//.test(tz))) return null;
    return stamp(seconds, native.gitTzOffset(seconds));
  }
  const m = /^@(\d{1,15}) ([+-])(\d{4})$/.exec(value);
  if (!m) return null;
  const n = Number(m[3]);
  const minutes = Math.floor(n / 100) * 60 + (n % 100);
  return stamp(Number(m[1]), (m[2] === '-' ? -1 : 1) * (Math.floor(minutes / 60) * 100 + (minutes % 60)));
}
