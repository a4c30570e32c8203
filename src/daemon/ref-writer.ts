// The daemon's writer of its worktree's snapshot refs: one resident `git update-ref --stdin`
// (src/git/ref-updater.ts) where a capture started a git process for its one ref. git reads its
// config when it starts, so the updater is kept only while the capture passes the same config
// object it was started under: the config memo (config-memo.ts) returns the same object while no
// config file changed, and a new one (a new updater) when one did. A failed updater is replaced by
// the next write; the failure itself is the capture's, as a failed `git update-ref` was.

import type { GitConfig } from '../git/config';
import type { GitOptions } from '../git/exec';
import { RefUpdater } from '../git/ref-updater';

export class ResidentRefWriter {
  private current: { config: GitConfig; message: string; updater: RefUpdater } | undefined;

  constructor(private readonly opts: GitOptions) {}

  /** `git update-ref -m <message> <ref> <oid>`, as git configured by `config` does it. */
  write(ref: string, oid: string, message: string, config: GitConfig): Promise<void> {
    const c = this.current;
    if (!c || !c.updater.alive || c.config !== config || c.message !== message) {
      c?.updater.close();
      this.current = { config, message, updater: new RefUpdater(this.opts, message) };
    }
    return this.current!.updater.update([{ ref, oid }]);
  }

  close(): void {
    this.current?.updater.close();
    this.current = undefined;
  }
}
