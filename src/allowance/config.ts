// Reading the allowance's settings: `xet.allowance.bytes`, `xet.allowance.files` and
// `xet.allowance.headroom` for the repository root; `xet.fork.allowance` (BYTES[,FILES]) as the
// default of `fork --allowance`. A store's allowance is recorded in the store (store-root.ts).

import type { GitConfig } from '../git/config';
import {
  DEFAULT_HEADROOM_MIN_BYTES,
  DEFAULT_HEADROOM_MIN_FILES,
  headroomFor,
  NO_LIMITS,
  parseAllowanceArg,
  parseCount,
  parseSize,
  type Limits,
} from './model';

/** Limits from a bytes/files/headroom triple, as config or a store's file gives them. */
export function limitsOf(
  bytes: number | null,
  files: number | null,
  headroom: string | undefined,
  what: string,
): Limits {
  if (bytes === null && files === null) return NO_LIMITS;
  const pct = headroom !== undefined && /%\s*$/.test(headroom) ? headroom : undefined;
  return {
    bytes,
    files,
    headroomBytes: headroomFor(bytes, headroom, DEFAULT_HEADROOM_MIN_BYTES, what),
    // A byte headroom says nothing about files: files keep the default unless a percentage is given.
    headroomFiles: headroomFor(files, pct, DEFAULT_HEADROOM_MIN_FILES, what),
  };
}

export function repositoryLimits(config: GitConfig): Limits {
  const b = config.get('xet.allowance.bytes');
  const f = config.get('xet.allowance.files');
  return limitsOf(
    b === undefined ? null : parseSize(b, 'xet.allowance.bytes', 'CONFIG_INVALID'),
    f === undefined ? null : parseCount(f, 'xet.allowance.files', 'CONFIG_INVALID'),
    config.get('xet.allowance.headroom'),
    'xet.allowance.headroom',
  );
}

/** The allowance a new fork gets: `--allowance` if given, else `xet.fork.allowance`, else none. */
export function forkAllowance(
  config: GitConfig,
  arg: string | undefined,
): { bytes: number; files: number | null } | null {
  if (arg !== undefined) return parseAllowanceArg(arg, 'USAGE');
  const v = config.get('xet.fork.allowance');
  return v === undefined ? null : parseAllowanceArg(v, 'CONFIG_INVALID');
}
