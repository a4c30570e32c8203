// Where a new tree may go (restore, fork): a new or empty directory, never inside a repository's
// own git dir. Apart from restore.ts so a fork loads these without restore's (and capture's) modules.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { Repo } from '../git/repo';

/** A target must not exist, or be an empty directory. */
export function checkTarget(dir: string, what = 'restore'): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(dir);
  } catch {
    return; // does not exist: fine
  }
  if (!st.isDirectory()) throw new XetError('TARGET_NOT_EMPTY', `${dir} exists and is not a directory`, { dir });
  if (fs.readdirSync(dir).length > 0) {
    throw new XetError('TARGET_NOT_EMPTY', `${dir} exists and is not empty; ${what} needs a new or empty directory`, {
      dir,
    });
  }
}

/** A new tree inside a repository's own git dir would put a repository among its refs and objects. */
export function refuseInsideGitDir(target: string, repo: Repo, what: string): void {
  const real = (p: string): string => {
    try {
      return fs.realpathSync(p);
    } catch {
      const parent = path.dirname(p);
      return parent === p ? p : path.join(real(parent), path.basename(p));
    }
  };
  const t = real(target);
  for (const d of [real(repo.commonDir), real(repo.gitDir)]) {
    if (t === d || t.startsWith(`${d}${path.sep}`)) {
      throw new XetError('TARGET_UNUSABLE', `cannot ${what} inside the git directory ${d}`, { dir: target });
    }
  }
}
