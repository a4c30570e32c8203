// The storage allowance contract (xet.allowance/v1) as pure data: roots, limits, headroom, what an
// operation adds, and the one admission rule. No I/O here: measuring is repo-root.ts, fork-root.ts
// and store-root.ts; the ledger is ledger.ts; admission with its effects is admit.ts.
//
// A root is a place git xet writes: the repository's git xet state, a xet store, a fork. Each may have
// a finite allowance in logical bytes (st_size summed, not blocks) and in files (every non-directory
// entry). Part of it, the headroom, is held back: growing work (captures, forks, fetches, pushes) must
// fit under `limit - headroom`; settling work (gc, task recover, discard, reclaim), which frees space
// or must run for recovery, may use the headroom too.

import { XetError } from '../errors';

export const ALLOWANCE_CONTRACT = 'xet.allowance/v1';

export type RootKind = 'repository' | 'store' | 'fork';

/** grow: new captures, forks, fetches, pushes. settle: gc, task recover, discard, reclaim. */
export type AdmissionClass = 'grow' | 'settle';

export interface Limits {
  /** null: no limit on this dimension. */
  bytes: number | null;
  files: number | null;
  /** Held back from growing work; 0 without a limit. */
  headroomBytes: number;
  headroomFiles: number;
}

export interface Amount {
  bytes: number;
  files: number;
}

export const NO_LIMITS: Limits = { bytes: null, files: null, headroomBytes: 0, headroomFiles: 0 };

/** Without `xet.allowance.headroom`: 5% of the limit, at least 16 MiB and 64 files (never more than
 * half the limit). The floor covers what a writer adds outside its admitted packs (a commit, a tree,
 * a manifest blob, sidecar rows: kilobytes) times a handful of concurrent writers; see the bound in
 * docs/DESIGN-NOTES.md "Storage allowance". */
export const DEFAULT_HEADROOM_FRACTION = 0.05;
export const DEFAULT_HEADROOM_MIN_BYTES = 16 * 1024 * 1024;
export const DEFAULT_HEADROOM_MIN_FILES = 64;

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tb: 1024 ** 4,
  tib: 1024 ** 4,
};

/** "1048576", "512k", "1.5GiB" -> bytes (binary units, as git's own `core.bigFileThreshold`). */
export function parseSize(text: string, what: string, code: 'USAGE' | 'CONFIG_INVALID' = 'USAGE'): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = m ? UNITS[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined) {
    throw new XetError(code, `${what}: '${text}' is not a size (a number of bytes, or with k, M, G, T)`, {
      value: text,
    });
  }
  const n = Math.floor(Number(m[1]) * unit);
  if (!Number.isSafeInteger(n)) throw new XetError(code, `${what}: '${text}' is too large`, { value: text });
  return n;
}

export function parseCount(text: string, what: string, code: 'USAGE' | 'CONFIG_INVALID' = 'USAGE'): number {
  if (!/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new XetError(code, `${what}: '${text}' is not a whole number of files`, { value: text });
  }
  return Number(text);
}

/** `fork --allowance BYTES[,FILES]`. */
export function parseAllowanceArg(
  text: string,
  code: 'USAGE' | 'CONFIG_INVALID' = 'USAGE',
): Amount & {
  files: number | null;
} {
  const what = code === 'CONFIG_INVALID' ? 'xet.fork.allowance' : '--allowance';
  const [b, f, extra] = text.split(',');
  if (extra !== undefined || b === undefined || b.trim() === '') {
    throw new XetError(code, `${what}: '${text}' is not BYTES[,FILES]`, { value: text });
  }
  const bytes = parseSize(b, what, code);
  const files = f === undefined || f.trim() === '' ? null : parseCount(f, what, code);
  // A fork of 0 bytes or 0 files would be over its allowance at birth (its own .git file is one).
  if (bytes === 0 || files === 0) {
    throw new XetError(code, `${what}: '${text}' must be more than 0 bytes (and more than 0 files when given)`, {
      value: text,
    });
  }
  return { bytes, files } as Amount & { files: number | null };
}

/** Headroom from `xet.allowance.headroom` ("10%", "64M", or unset for the default). */
export function headroomFor(limit: number | null, setting: string | undefined, minimum: number, what: string): number {
  if (limit === null) return 0;
  let h: number;
  if (setting === undefined) {
    h = Math.max(Math.ceil(limit * DEFAULT_HEADROOM_FRACTION), minimum);
    h = Math.min(h, Math.floor(limit / 2));
  } else if (/^\s*\d+(\.\d+)?\s*%\s*$/.test(setting)) {
    const pct = Number(setting.replace('%', '').trim());
    if (pct >= 100)
      throw new XetError('CONFIG_INVALID', `${what}: '${setting}' must be below 100%`, { value: setting });
    h = Math.ceil((limit * pct) / 100);
  } else {
    h = parseSize(setting, what, 'CONFIG_INVALID');
    if (h >= limit && limit > 0) {
      throw new XetError('CONFIG_INVALID', `${what}: ${setting} leaves nothing of the ${limit}-byte allowance`, {
        value: setting,
      });
    }
  }
  return h;
}

export interface Refusal {
  dimension: 'bytes' | 'files';
  limit: number;
  headroom: number;
  used: number;
  adding: number;
}

/**
 * The admission rule. Growing work fits under limit - headroom; settling work under the limit. An
 * operation that adds nothing is always admitted (reads, and work that only frees space), even on a
 * root already over its allowance: refusing it could never bring the root back under.
 */
export function refusalOf(limits: Limits, used: Amount, adding: Amount, cls: AdmissionClass): Refusal | null {
  const dims: ['bytes' | 'files', number | null, number][] = [
    ['bytes', limits.bytes, limits.headroomBytes],
    ['files', limits.files, limits.headroomFiles],
  ];
  for (const [dimension, limit, headroom] of dims) {
    if (limit === null) continue;
    const add = adding[dimension];
    if (add <= 0) continue;
    const cap = cls === 'grow' ? limit - headroom : limit;
    if (used[dimension] + add > cap) return { dimension, limit, headroom, used: used[dimension], adding: add };
  }
  return null;
}

/** The typed refusal. `root` names the root as `git xet allowance` does ('repository', 'store:<path>',
 * 'fork:<id>'); `what` is the operation ("capture", "fetch of pack-…", "fork of …"). */
export function allowanceError(root: string, what: string, r: Refusal, cls: AdmissionClass): XetError {
  const unit = r.dimension === 'bytes' ? 'bytes' : 'files';
  const cap = cls === 'grow' ? r.limit - r.headroom : r.limit;
  return new XetError(
    'ALLOWANCE_EXCEEDED',
    `${what} would add ${r.adding} ${unit} to ${root}, which uses ${r.used} of its ${r.limit}-${unit.replace(/s$/, '')} allowance` +
      (cls === 'grow' && r.headroom ? ` (${r.headroom} held back as headroom, so ${cap} for new work)` : '') +
      '; nothing was written. Free space (git xet gc, discard) or raise the allowance.',
    {
      root,
      operation: what,
      dimension: r.dimension,
      limit: r.limit,
      headroom: r.headroom,
      used: r.used,
      adding: r.adding,
      admissionClass: cls,
    },
  );
}

/** Upper bound of a pack (v2) holding objects of these inflated sizes, and its .idx (v2): a pack
 * entry is a header of at most 10 bytes plus a zlib stream no larger than its input + 5 bytes per
 * 16 KiB block + 11; the index is 8 + 1024 + n * (oid + 4 + 4) + 8-byte offsets past 2 GiB + two
 * checksums. Captures know their objects' sizes after hashing and before writing a byte. */
export function packUpperBound(sizes: number[], oidBytes: 20 | 32): Amount {
  let pack = 12 + oidBytes;
  for (const s of sizes) pack += 10 + s + 5 * Math.ceil((s + 1) / 16384) + 11;
  const n = sizes.length;
  const idx = 8 + 1024 + n * (oidBytes + 8) + (pack > 2 ** 31 ? n * 8 : 0) + 2 * oidBytes;
  // .pack, .idx, and the .rev git may write beside them later (12 + 4n + 2 oids)
  return { bytes: pack + idx + 12 + 4 * n + 2 * oidBytes, files: 3 };
}
