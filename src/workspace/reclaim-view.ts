// The private read-only view `reclaim` captures an overlay fork from: the fork's upper layer
// mounted as the top lower layer over its base, with no upper layer at all, at a directory under the
// sidecar that nothing else names. An overlay without an upper layer is read-only in the kernel, so
// once the fork itself is unmounted no process can change what is captured and verified.
// A reclaim killed with its view mounted leaves it behind; whoever touches the fork next (reclaim,
// discard, a remount) drops it first, so the upper layer is never a lower layer of a stale mount
// while the fork writes to it again.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';
import { sidecarDir } from '../sidecar/db';
import { runTool } from './tools';
import { isMounted, refuseUnmountablePath, unmount, unmountLazy } from './overlay';

/** Where this process mounts the view of fork `id` while it reclaims it. The pid in the name lets a
 * recount find (and unmount, then remove) the view of a killed reclaim (src/snapshot/leftovers.ts). */
export function reclaimViewDir(repo: Repo, id: string): string {
  return path.join(sidecarDir(repo.commonDir), 'tmp', `reclaim-${process.pid}-${id}`);
}

/** Views of fork `id` left by any reclaim (this one, a killed one, an older git xet's `reclaim-<id>`). */
function reclaimViews(repo: Repo, id: string): string[] {
  const tmp = path.join(sidecarDir(repo.commonDir), 'tmp');
  let names: string[];
  try {
    names = fs.readdirSync(tmp);
  } catch {
    return [];
  }
  return names
    .filter((n) => n === `reclaim-${id}` || new RegExp(`^reclaim-\\d+-${id}$`).test(n))
    .map((n) => path.join(tmp, n));
}

function escapeOption(p: string): string {
  return p.replace(/\\/g, '\\\\').replace(/,/g, '\\,').replace(/:/g, '\\:');
}

/** Mount the read-only view of an overlay fork's layers; returns its directory. */
export async function mountReclaimView(repo: Repo, id: string, upper: string, baseTree: string): Promise<string> {
  const dir = reclaimViewDir(repo, id);
  await dropReclaimView(repo, id);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const p of [upper, baseTree]) {
    refuseUnmountablePath(p);
  }
  // redirect_dir=follow: a directory the fork renamed is found through its redirect, as the fork
  // showed it; whiteouts and opaque directories in a lower layer hide what is below, as in the fork.
  const options = `ro,lowerdir=${escapeOption(upper)}:${escapeOption(baseTree)},redirect_dir=follow`;
  const r = await runTool('mount', ['-t', 'overlay', 'overlay', '-o', options, dir]);
  if (r.code !== 0) {
    throw new XetError('FORK_BROKEN', `cannot mount a read-only view of the fork: ${r.stderr || r.code}`, { dir });
  }
  return dir;
}

/** Unmount and remove a view left by this or a killed reclaim (read-only: nothing in it to lose, so
 * a process still reading it does not keep it). */
export async function dropReclaimView(repo: Repo, id: string): Promise<void> {
  for (const dir of reclaimViews(repo, id)) {
    if (isMounted(dir) && (await unmount(dir)) !== 'ok') await unmountLazy(dir);
    if (isMounted(dir)) throw new XetError('FORK_BROKEN', `cannot unmount the reclaim view ${dir}`, { dir });
    fs.rmdirSync(dir);
  }
}
