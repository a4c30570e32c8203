// The daemon's writer of its worktree's snapshot refs: one resident `git update-ref --stdin`
// (src/git/ref-updater.ts) where a capture started a git process for its one ref. What a resident
// git would do differently from one started for the write is ruled out, or the write gets its own:
// - git reads its config when it starts: the updater is kept only while the capture passes the same
//   config object it was started under (config-memo.ts returns the same object while no config file
//   changed, and a new one, a new updater, when one did);
// - git takes the date for a reflog entry once per process (git 2.39's ident_default_date): a write
//   that would log (core.logAllRefUpdates=always, or a reflog already there for that ref) gets a
//   `git update-ref` of its own, as before (review 42);
// - git keeps the pack indexes it mapped: once a pack it may have mapped is gone (a roll-up, a gc),
//   the updater is replaced, so a deleted index is not held past the next write (review 42);
// - once closed (the daemon stopping, a capture may still be finishing), nothing resident is
//   started again: a late write gets its own git, and no child outlives the daemon (review 42).
// A failed updater is replaced by the next write; the failure itself is the capture's, as a failed
// `git update-ref` was.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import { git, type GitOptions } from '../git/exec';
import { RefUpdater } from '../git/ref-updater';

export class ResidentRefWriter {
  private current: { config: GitConfig; message: string; updater: RefUpdater; packs: Set<string> } | undefined;
  private closed = false;

  constructor(
    private readonly opts: GitOptions,
    private readonly dirs: { commonDir: string; objectsDir: string },
  ) {}

  /** `git update-ref -m <message> <ref> <oid>`, as git configured by `config` does it. */
  write(ref: string, oid: string, message: string, config: GitConfig): Promise<void> {
    if (this.closed || !ref.startsWith('refs/xet/') || this.logs(ref, config)) {
      return git(['update-ref', '-m', message, ref, oid], this.opts).then(() => undefined);
    }
    const packs = this.packs();
    const c = this.current;
    const gone = c !== undefined && (packs === null || [...c.packs].some((p) => !packs.has(p)));
    if (!c || gone || !c.updater.alive || c.config !== config || c.message !== message) {
      c?.updater.close();
      this.current = { config, message, updater: new RefUpdater(this.opts, message), packs: new Set() };
    }
    const cur = this.current!;
    for (const p of packs ?? []) cur.packs.add(p);
    return cur.updater.update([{ ref, oid }]);
  }

  /** Whether a running resident git is there (for tests). */
  get resident(): boolean {
    return this.current?.updater.alive === true;
  }

  close(): void {
    this.closed = true;
    this.current?.updater.close();
    this.current = undefined;
  }

  /** Whether git would write a reflog entry for a new value of `ref`, a ref under refs/xet/ (refs.c
   * should_autocreate_reflog: only with core.logAllRefUpdates=always there), or one already there. */
  private logs(ref: string, config: GitConfig): boolean {
    if (config.get('core.logallrefupdates')?.toLowerCase() === 'always') return true;
    return fs.existsSync(path.join(this.dirs.commonDir, 'logs', ref));
  }

  /** The pack indexes there now, or null when the directory cannot be read. */
  private packs(): Set<string> | null {
    try {
      return new Set(fs.readdirSync(path.join(this.dirs.objectsDir, 'pack')).filter((n) => n.endsWith('.idx')));
    } catch {
      return null;
    }
  }
}
