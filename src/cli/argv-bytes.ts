// Command-line values that must reach us exactly. Node decodes argv as UTF-8 lossily: a byte
// sequence that is not UTF-8 arrives as U+FFFD, and an opaque id (--correlation-id, --session-id)
// stored that way would no longer match the caller's own records. A value holding U+FFFD is
// accepted only when the raw argument bytes (/proc/self/cmdline) hold that character as UTF-8.
import * as fs from 'node:fs';
import { XetError } from '../errors';

let raw: Buffer[] | null | undefined;

/** The process's arguments as bytes; null where /proc is not there to say. */
function rawArgv(): Buffer[] | null {
  if (raw !== undefined) return raw;
  try {
    const b = fs.readFileSync('/proc/self/cmdline');
    const args: Buffer[] = [];
    let start = 0;
    for (let i = 0; i < b.length; i++) {
      if (b[i] === 0) {
        args.push(b.subarray(start, i));
        start = i + 1;
      }
    }
    if (start < b.length) args.push(b.subarray(start));
    raw = args;
  } catch {
    raw = null;
  }
  return raw;
}

/** USAGE when `value` of `flag` was not valid UTF-8 on the command line (Node replaced bytes). */
export function refuseLossyArgument(flag: string, value: string | undefined): void {
  if (value === undefined || !value.includes('\uFFFD')) return;
  const want = Buffer.from(value, 'utf8');
  const inline = Buffer.concat([Buffer.from(`${flag}=`, 'utf8'), want]);
  const args = rawArgv();
  if (args?.some((a) => a.equals(want) || a.equals(inline))) return;
  throw new XetError(
    'USAGE',
    args === null
      ? `${flag} holds U+FFFD, and without /proc/self/cmdline it cannot be told from bytes that are not UTF-8; give it without U+FFFD`
      : `${flag} is not valid UTF-8 (its bytes would be replaced by U+FFFD); give it as UTF-8`,
    { flag },
  );
}
