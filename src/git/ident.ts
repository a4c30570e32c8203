// The identity and date git writes on a commit or reflog line, where this process writes the line
// itself (a capture's snapshot commit, a fork's reflog): only for inputs git would write exactly as
// given. Anything git would rewrite (crud at the ends of a name, a date in any form but its raw one)
// is the caller's cue to let git do it. test/loose-writer.test.ts holds both to git's own output.

/** What git strips from both ends of a name or email (ident.c's crud(); '.' too, as gits before
 * 2.22 strip it). */
const CRUD = new Set(['.', ',', ':', ';', '<', '>', '"', '\\', "'"]);
const isCrud = (c: string): boolean => c.charCodeAt(0) <= 32 || CRUD.has(c);

/** A name or email git would write as it is (ident.c strips crud at both ends and drops <, > and
 * newlines inside; anything it would change goes through git). */
export function plainIdent(s: string | undefined): s is string {
  return !!s && !isCrud(s[0]) && !isCrud(s[s.length - 1]) && !/[<>\n\0]/.test(s);
}

/** "<seconds> <+hhmm>" for `minutes` east of UTC, as git prints an offset (date.c: hours and
 * minutes, so an offset written +0090 reads back +0130). */
function stamp(seconds: number, minutes: number): string {
  const abs = Math.abs(minutes);
  const hhmm = String(Math.floor(abs / 60) * 100 + (abs % 60)).padStart(4, '0');
  return `${seconds} ${minutes < 0 ? '-' : '+'}${hhmm}`;
}

/** git's date for a GIT_AUTHOR_DATE / GIT_COMMITTER_DATE value: unset or empty is now (`nowMs`, in
 * this process's time zone, as date.c's datestamp); git's raw form ("@<seconds> <+hhmm>") is taken
 * as written; null for any other form, which only git parses (without the @, the same numbers go
 * through its general parser, which refuses some: "4102444800 +1400"). */
export function identDate(value: string | undefined, nowMs: number): string | null {
  if (value === undefined || value === '') {
    const seconds = Math.floor(nowMs / 1000);
    return stamp(seconds, -new Date(seconds * 1000).getTimezoneOffset());
  }
  const m = /^@(\d{1,15}) ([+-])(\d{4})$/.exec(value);
  if (!m) return null;
  const n = Number(m[3]);
  const minutes = Math.floor(n / 100) * 60 + (n % 100);
  return stamp(Number(m[1]), m[2] === '-' ? -minutes : minutes);
}
