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

function matcher(patterns: string[]): Ignore | null {
  return patterns.length ? ignore({ allowRelativePaths: true }).add(patterns) : null;
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
  const inc = matcher(include);
  const exc = matcher(exclude);
  const sec = matcher(secretPatterns);
  return {
    ignored,
    include,
    exclude,
    secretPatterns,
    isIncluded: (p) => inc !== null && inc.ignores(p),
    isExcluded: (p) => exc !== null && exc.ignores(p),
    isSecret: (p) => sec !== null && sec.ignores(p),
  };
}
