// Capture policy: which ignored files a snapshot takes, which it leaves out, and which files are
// secrets that stay behind unless asked for. Values come from flags, else `git config xet.capture.*`,
// else the defaults here. Patterns use .gitignore syntax (the `ignore` package implements it).

import ignore, { type Ignore } from 'ignore';
import { XetError } from '../errors';
import type { GitConfig } from '../git/config';

export const DEFAULT_SECRET_PATTERNS = [
  '.env',
  '.env.*',
  '*.pem',
  '*.key',
  '*.p12',
  '*.pfx',
  '*.jks',
  '*.keystore',
  'id_rsa*',
  'id_dsa*',
  'id_ecdsa*',
  'id_ed25519*',
  '.npmrc',
  '.pypirc',
  '.netrc',
  '_netrc',
  '.git-credentials',
  '.htpasswd',
  '**/.aws/credentials',
  '**/.docker/config.json',
];

export interface PolicyOptions {
  ignored?: string;
  include?: string[];
  exclude?: string[];
}

export interface CapturePolicy {
  ignored: 'all' | 'none';
  include: string[];
  exclude: string[];
  secretPatterns: string[];
  isIncluded(path: string): boolean;
  isExcluded(path: string): boolean;
  isSecret(path: string): boolean;
}

/**
 * A .gitignore-syntax matcher that is cheap per file. Patterns without a slash match a name at any
 * depth, so they are tested on each path component's name once (results cached by name: the same
 * names recur all over node_modules); patterns with a slash are tested on the whole path, and only
 * when a component equals their last segment. With negations the fast path could change meaning,
 * so those lists go through `ignore` whole.
 */
export class PatternMatcher {
  private readonly whole: Ignore | null = null;
  private readonly names: Ignore | null = null;
  private readonly paths: Ignore | null = null;
  /** A path can only match a slash pattern if one of its components is that pattern's last segment,
   * compared case-insensitively as `ignore` compares (a RegExp with the same flag); null when some
   * last segment is a glob or cannot be read literally (then every path is tested). */
  private readonly triggers: RegExp | null = null;
  private readonly fileCache = new Map<string, boolean>();
  private readonly dirCache = new Map<string, boolean>();
  /** Whether a directory path has a component whose name matches (by the directory's path). */
  private readonly prefixCache = new Map<string, boolean>();
  /** A name can only match a bare pattern if it contains that pattern's longest literal run: one
   * case-insensitive alternation of them (`ignore` matches case-insensitively, by a RegExp with the
   * same flag); null when some pattern has none. */
  private readonly literals: RegExp | null = null;

  constructor(patterns: string[]) {
    // Lists the fast path could read differently go to `ignore` whole, as given: negations, a byte
    // order mark (`ignore` strips one from the first pattern only, and the split below would move
    // it), and white space that is not blank to `ignore` (a tab, a no-break space: a name).
    if (patterns.some((p) => p.startsWith('!') || p.includes('\uFEFF') || (p.trim() === '' && !/^ *$/.test(p)))) {
      this.whole = ignore({ allowRelativePaths: true }).add(patterns);
      return;
    }
    const real = patterns.filter((p) => !/^ *$/.test(p) && !p.startsWith('#'));
    if (!real.length) return;
    const bare = real.filter((p) => !p.replace(/\/+$/, '').includes('/'));
    const slashed = real.filter((p) => p.replace(/\/+$/, '').includes('/'));
    if (bare.length) {
      this.names = ignore({ allowRelativePaths: true }).add(bare);
      // A bracket class, an escape or a trailing space changes what the pattern's text means, so its
      // "literal runs" would be wrong (`*.[cC]rt` does not require "cC"): such a list has no prefilter.
      const runs = bare.map((p) =>
        notLiteral(p)
          ? ''
          : (p
              .replace(/\/+$/, '')
              .split(/[*?]/)
              .sort((a, b) => b.length - a.length)[0] ?? ''),
      );
      // ASCII only: V8 can miss a match of a case-insensitive alternation of non-ASCII text that
      // each alternative alone finds (/SΜS|SIn|ſkσK#/i fails on "ſkσK#"), where `ignore` tests
      // one pattern at a time.
      this.literals = runs.every((r) => r.length >= 2 && isAscii(r))
        ? new RegExp(runs.map(escapeRegExp).join('|'), 'i')
        : null;
    }
    if (slashed.length) {
      this.paths = ignore({ allowRelativePaths: true }).add(slashed);
      const lasts = slashed.map((p) => p.replace(/\/+$/, '').split('/').pop() as string);
      if (!slashed.some(notLiteral) && !lasts.some((l) => l === '' || /[*?]/.test(l) || !isAscii(l))) {
        this.triggers = new RegExp(`(?:^|/)(?:${lasts.map(escapeRegExp).join('|')})(?:/|$)`, 'i');
      }
    }
  }

  matches(path: string): boolean {
    if (this.whole) return this.whole.ignores(path);
    if (!this.names && !this.paths) return false;
    const slash = path.lastIndexOf('/');
    if (this.names) {
      // The walk asks about every file of a directory in turn: whether one of its directories'
      // names matches is decided once per directory, and each file costs one lookup of its name.
      if (slash > 0 && this.dirMatches(path.slice(0, slash))) return true;
      if (this.nameMatches(path.slice(slash + 1), this.fileCache, '')) return true;
    }
    if (!this.paths) return false;
    if (this.triggers && !this.triggers.test(path)) return false;
    return this.paths.ignores(path);
  }

  private dirMatches(dir: string): boolean {
    let hit = this.prefixCache.get(dir);
    if (hit === undefined) {
      const slash = dir.lastIndexOf('/');
      hit =
        (slash > 0 && this.dirMatches(dir.slice(0, slash))) ||
        this.nameMatches(dir.slice(slash + 1), this.dirCache, '/');
      this.prefixCache.set(dir, hit);
    }
    return hit;
  }

  private nameMatches(name: string, cache: Map<string, boolean>, suffix: string): boolean {
    if (name === '') return false; // `dir/`: only its directories' names are asked about
    // Nearly every name has no literal run: it is refused here, without a cache entry.
    if (this.literals !== null && !this.literals.test(name)) return false;
    let hit = cache.get(name);
    if (hit === undefined) {
      hit = (this.names as Ignore).ignores(name + suffix);
      cache.set(name, hit);
    }
    return hit;
  }

  get empty(): boolean {
    return !this.whole && !this.names && !this.paths;
  }
}

/** Whether a pattern's text is not a plain glob of literal characters, `*` and `?`: a bracket class,
 * a backslash escape, or trailing white space (which .gitignore syntax drops unless escaped). */
function notLiteral(pattern: string): boolean {
  return /[[\\]/.test(pattern) || /\s\/*$/.test(pattern);
}

function isAscii(text: string): boolean {
  return /^[\x20-\x7e]*$/.test(text);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

export function resolvePolicy(config: GitConfig, opts: PolicyOptions): CapturePolicy {
  const ignoredCfg = config.get('xet.capture.ignored');
  const ignored = opts.ignored ?? ignoredCfg ?? 'all';
  if (ignored !== 'all' && ignored !== 'none') {
    throw new XetError(
      opts.ignored !== undefined ? 'USAGE' : 'CONFIG_INVALID',
      `ignored-file policy must be "all" or "none", not ${JSON.stringify(ignored)}`,
      { value: ignored, source: opts.ignored !== undefined ? '--ignored' : 'xet.capture.ignored' },
    );
  }
  const include = [...config.getAll('xet.capture.include'), ...(opts.include ?? [])];
  const exclude = [...config.getAll('xet.capture.exclude'), ...(opts.exclude ?? [])];
  const secretPatterns = [...DEFAULT_SECRET_PATTERNS, ...config.getAll('xet.capture.secret')];
  const inc = new PatternMatcher(include);
  const exc = new PatternMatcher(exclude);
  const sec = new PatternMatcher(secretPatterns);
  return {
    ignored,
    include,
    exclude,
    secretPatterns,
    isIncluded: (p) => inc.matches(p),
    isExcluded: (p) => exc.matches(p),
    isSecret: (p) => sec.matches(p),
  };
}
