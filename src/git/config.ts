// One read of the effective git config (system, global, local, worktree, -c) per command, instead
// of one process per key. Keys are as git prints them: section and name lower-cased.

import { git, type GitOptions } from './exec';

export class GitConfig {
  private readonly values = new Map<string, string[]>();

  constructor(entries: { key: string; value: string }[]) {
    for (const { key, value } of entries) {
      const list = this.values.get(key);
      if (list) list.push(value);
      else this.values.set(key, [value]);
    }
  }

  /** The last value (git's "last one wins"), or undefined. */
  get(key: string): string | undefined {
    const list = this.values.get(key.toLowerCase());
    return list ? list[list.length - 1] : undefined;
  }

  getAll(key: string): string[] {
    return [...(this.values.get(key.toLowerCase()) ?? [])];
  }

  /** The keys set that match `re` (lower-cased section and name, as git prints them). */
  keysMatching(re: RegExp): string[] {
    return [...this.values.keys()].filter((k) => re.test(k));
  }

  getBool(key: string): boolean | undefined {
    const v = this.get(key);
    if (v === undefined) return undefined;
    return ['true', 'yes', 'on', '1', ''].includes(v.toLowerCase());
  }
}

export async function readConfig(opts: GitOptions): Promise<GitConfig> {
  const r = await git(['config', '-z', '--list'], { ...opts, okCodes: [1] });
  const entries = r.stdout
    .toString('utf8')
    .split('\0')
    .filter((rec) => rec !== '')
    .map((rec) => {
      const nl = rec.indexOf('\n');
      return nl < 0 ? { key: rec, value: '' } : { key: rec.slice(0, nl), value: rec.slice(nl + 1) };
    });
  return new GitConfig(entries);
}
