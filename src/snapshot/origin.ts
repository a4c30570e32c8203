// Where a restored copy came from. A snapshot's own `origin` may be a path on the producer's machine,
// so `restore --from <url>` records the URL it fetched from as the remote `xet-origin` of the copy:
// `git fetch xet-origin` and `git xet fetch xet-origin` reach it from there. It describes the copy,
// not the captured state: each restore --from sets it anew, and verify does not compare it.

import { git, type GitOptions } from '../git/exec';
import { withoutPassword } from '../remote/url';

// Kept importable from here, where it lived first.
export { withoutPassword };

export const ORIGIN_REMOTE = 'xet-origin';

/** Config keys of the recorded remote (verify leaves them out of the comparison). */
export function isOriginKey(key: string): boolean {
  return key.toLowerCase().startsWith(`remote.${ORIGIN_REMOTE}.`);
}

/** Record `url` as the copy's `xet-origin`, with refspecs for its branches and its refs/xet/*. */
export async function recordOrigin(url: string, opts: GitOptions): Promise<{ name: string; url: string }> {
  await git(['config', '--local', '--remove-section', `remote.${ORIGIN_REMOTE}`], { ...opts, okCodes: [128] });
  const clean = withoutPassword(url);
  const set = (k: string, v: string) => git(['config', '--local', '--add', `remote.${ORIGIN_REMOTE}.${k}`, v], opts);
  await set('url', clean);
  await set('fetch', `+refs/heads/*:refs/remotes/${ORIGIN_REMOTE}/*`);
  // The same tracking refspec `git xet fetch` adds (refs/xet/* mirrored, adopted only by git xet fetch).
  await set('fetch', `+refs/xet/*:refs/remotes/${ORIGIN_REMOTE}/xet/*`);
  return { name: ORIGIN_REMOTE, url: clean };
}
