// One read of the effective git config (system, global, local, worktree, -c) per command, instead
// of one process per key. Keys are as git prints them: section and name lower-cased.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, type GitOptions } from './exec';

export interface ConfigEntry {
  key: string;
  value: string;
  /** Where git read it (`--show-origin`: "file:<path>", "command line:", …), when asked. */
  origin?: string;
}

export class GitConfig {
  private readonly values = new Map<string, string[]>();

  /** `originBase`: the directory git ran in, which a relative origin path is relative to; given
   * when every entry has its origin. */
  constructor(
    private readonly entries: readonly ConfigEntry[],
    private readonly originBase?: string,
  ) {
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

  /**
   * The entries git read from `file` itself (not from files it includes), in its order, whose key
   * matches `re`: what `git config --file <file> --get-regexp` prints (the same lower-cased keys).
   * Files are compared by device and inode, so the spelling git used does not matter. Null when
   * this config was read without origins.
   */
  entriesOf(file: string, re: RegExp): { key: string; value: string }[] | null {
    if (this.originBase === undefined) return null;
    const want = fileIdentity(file);
    if (want === null) return [];
    const same = new Map<string, boolean>();
    const out: { key: string; value: string }[] = [];
    for (const e of this.entries) {
      if (!e.origin?.startsWith('file:') || !re.test(e.key)) continue;
      let ok = same.get(e.origin);
      if (ok === undefined) {
        ok = fileIdentity(path.resolve(this.originBase, e.origin.slice('file:'.length))) === want;
        same.set(e.origin, ok);
      }
      if (ok) out.push({ key: e.key, value: e.value });
    }
    return out;
  }

  getBool(key: string): boolean | undefined {
    const v = this.get(key);
    if (v === undefined) return undefined;
    return ['true', 'yes', 'on', '1', ''].includes(v.toLowerCase());
  }
}

function fileIdentity(file: string): string | null {
  const st = fs.statSync(file, { bigint: true, throwIfNoEntry: false });
  return st ? `${st.dev}:${st.ino}` : null;
}

/** The `-z --list --show-origin` records: origin, then key and value, each NUL-ended. */
export function parseConfigList(stdout: Buffer): ConfigEntry[] {
  const recs = stdout.toString('utf8').split('\0');
  const entries: ConfigEntry[] = [];
  for (let i = 0; i + 1 < recs.length; i += 2) {
    const rec = recs[i + 1];
    const nl = rec.indexOf('\n');
    entries.push({
      key: nl < 0 ? rec : rec.slice(0, nl),
      value: nl < 0 ? '' : rec.slice(nl + 1),
      origin: recs[i],
    });
  }
  return entries;
}

export async function readConfig(opts: GitOptions): Promise<GitConfig> {
  const r = await git(['config', '-z', '--list', '--show-origin'], { ...opts, okCodes: [1] });
  return new GitConfig(parseConfigList(r.stdout), opts.cwd ?? process.cwd());
}
