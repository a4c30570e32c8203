// One read of the effective git config (system, global, local, worktree, -c) per command, instead
// of one process per key. Keys are as git prints them: section and name lower-cased.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { git, type GitOptions } from './exec';

export interface ConfigEntry {
  key: string;
  /** '' for a key written without `=` (git's true), as for an empty value: see `valueless`. */
  value: string;
  /** A key written without `=` ("[core] filemode"), which git reads as true and an empty value as
   * false. */
  valueless?: boolean;
  /** Where git read it (`--show-origin`: "file:<path>", "command line:", …), when asked. */
  origin?: string;
  /** Which scope (`--show-scope`: system, global, local, worktree, command), when asked. */
  scope?: string;
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
   * The entries of the repository's own config file (`file`, git's `--local`; not the files it
   * includes), in its order, whose key matches `re`: what `git config --local --get-regexp`
   * prints (the same lower-cased keys), a key without a value given as git reads it, "true". Read
   * in the local scope only (the same file read again as the global one, through
   * GIT_CONFIG_GLOBAL or an include, is not counted twice); files compared by device and inode, so
   * the spelling git used does not matter. Only for a config read with origins (readConfig,
   * the daemon's memo).
   */
  localEntries(file: string, re: RegExp): { key: string; value: string }[] {
    if (this.originBase === undefined) throw new Error('GitConfig.localEntries: read without origins');
    const want = fileIdentity(file);
    if (want === null) return [];
    const same = new Map<string, boolean>();
    const out: { key: string; value: string }[] = [];
    for (const e of this.entries) {
      if (e.scope !== 'local' || !e.origin?.startsWith('file:') || !re.test(e.key)) continue;
      let ok = same.get(e.origin);
      if (ok === undefined) {
        ok = fileIdentity(path.resolve(this.originBase, e.origin.slice('file:'.length))) === want;
        same.set(e.origin, ok);
      }
      if (ok) out.push({ key: e.key, value: e.valueless ? VALUELESS : e.value });
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

/** What a key written without a value means to git ("[core] filemode" is filemode = true): recorded
 * so, since an empty value would mean false. */
export const VALUELESS = 'true';

/** The `-z --list --show-scope --show-origin` records: scope, origin, then key and value (no newline
 * and no value for a key written without `=`), each NUL-ended. */
export function parseConfigList(stdout: Buffer): ConfigEntry[] {
  const recs = stdout.toString('utf8').split('\0');
  const entries: ConfigEntry[] = [];
  for (let i = 0; i + 2 < recs.length; i += 3) {
    const rec = recs[i + 2];
    const nl = rec.indexOf('\n');
    const e: ConfigEntry = {
      key: nl < 0 ? rec : rec.slice(0, nl),
      value: nl < 0 ? '' : rec.slice(nl + 1),
      scope: recs[i],
      origin: recs[i + 1],
    };
    if (nl < 0) e.valueless = true;
    entries.push(e);
  }
  return entries;
}

export const CONFIG_LIST_ARGS = ['config', '-z', '--list', '--show-scope', '--show-origin'];

export async function readConfig(opts: GitOptions): Promise<GitConfig> {
  const r = await git(CONFIG_LIST_ARGS, { ...opts, okCodes: [1] });
  return new GitConfig(parseConfigList(r.stdout), opts.cwd ?? process.cwd());
}
