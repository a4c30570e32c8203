// The identity and date git writes on a commit or reflog line, where this process writes the line
// itself (a capture's snapshot commit, a fork's reflog): only for inputs git would write exactly as
// given. Anything git would rewrite (crud at the ends of a name, a date in any form but its raw one)
// is the caller's cue to let git do it. test/loose-writer.test.ts holds both to git's own output.

import * as fs from 'node:fs';
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

/** The zone file the C library reads for `tz` as this process first found it (its identity, or '-'
 * when absent): glibc reads a named zone's file once per TZ value (and /etc/localtime again only
 * when its second-resolution mtime moves), where each git process reads it anew. A long-running
 * process (the daemon, the MCP server) whose zone file changed after it started lets git write
 * (review 26: a tzdata upgrade; review 27: changed before the first commit but after something in
 * this process may have read it). */
const zoneFiles = new Map<string, string>();
/** native gitTzOffset's answer where git's own day count fails. */
const TZ_OFFSET_UNKNOWN = 100000;
const startedNs = BigInt(Math.floor(performance.timeOrigin)) * 1_000_000n;

function zoneFileChanged(tz: string | undefined): boolean {
  const dir = process.env.TZDIR || '/usr/share/zoneinfo';
  // A relative TZDIR is read from the directory of whoever reads it: git runs in the worktree.
  if (!dir.startsWith('/')) return true;
  // As glibc opens it: the name appended, '..' left to the kernel (review 27).
  const file = tz === undefined ? '/etc/localtime' : `${dir}/${tz === '' ? 'Universal' : tz.replace(/^:/, '')}`;
  let key = '-';
  let changedSinceStart = false;
  try {
    const st = fs.statSync(file, { bigint: true });
    key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    changedSinceStart = st.ctimeNs >= startedNs;
  } catch {
    // absent: a POSIX rule string, or no zone data; '-' is its identity
  }
  const first = zoneFiles.get(file);
  if (first === undefined) zoneFiles.set(file, key);
  return changedSinceStart || (first !== undefined && first !== key);
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
    if (zoneFileChanged(tz)) return null;
    const hhmm = native.gitTzOffset(seconds);
    return hhmm === TZ_OFFSET_UNKNOWN ? null : stamp(seconds, hhmm);
  }
  const m = /^@(\d{1,15}) ([+-])(\d{4})$/.exec(value);
  if (!m) return null;
  const n = Number(m[3]);
  const minutes = Math.floor(n / 100) * 60 + (n % 100);
  return stamp(Number(m[1]), (m[2] === '-' ? -1 : 1) * (Math.floor(minutes / 60) * 100 + (minutes % 60)));
}
