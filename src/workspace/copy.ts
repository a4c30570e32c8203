// Copying a base's files into a fork: reflink clones where the filesystem shares extents (XFS with
// reflink=1, btrfs), and the probe that says whether it does. The copy itself is cp(1) -a: it keeps
// modes, symlinks and mtimes, and does it in C (a per-file loop in node costs about the same per file
// and nothing on top).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';
import { isNoSpace, runTool } from './tools';

/** Can files under `fromDir` be reflinked into `toDir`? null if yes, else why not. */
export function probeReflink(fromDir: string, toDir: string): string | null {
  const name = `.xet-reflink-probe-${crypto.randomBytes(4).toString('hex')}`;
  const src = path.join(fromDir, name);
  const dst = path.join(toDir, name);
  try {
    fs.mkdirSync(fromDir, { recursive: true });
    fs.writeFileSync(src, 'probe');
    fs.copyFileSync(src, dst, fs.constants.COPYFILE_FICLONE_FORCE);
    return null;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EXDEV') return `${toDir} is on another filesystem than the base (${fromDir})`;
    if (code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'EINVAL') {
      return `the filesystem of ${toDir} cannot share extents (no reflink)`;
    }
    return `reflink probe failed: ${(e as Error).message}`;
  } finally {
    fs.rmSync(src, { force: true });
    fs.rmSync(dst, { force: true });
  }
}

/** Copy the contents of `from` into the existing directory `to`, sharing extents. */
export async function cloneTree(from: string, to: string): Promise<void> {
  const r = await runTool('cp', ['-a', '--reflink=always', '--', `${from}/.`, `${to}/`]);
  if (r.code === 0) return;
  if (isNoSpace(r.stderr)) throw new XetError('DISK_FULL', `no space left while cloning into ${to}`, { dir: to });
  throw new XetError('FORK_MODE_UNAVAILABLE', `reflink copy into ${to} failed: ${r.stderr}`, { dir: to });
}

/** Remove `dir` (or, with keepDir, only what is in it; `except` a top-level name to leave), however
 * deep: node's rmSync opens each file by its absolute path, which fails with ENAMETOOLONG below
 * PATH_MAX, while rm(1) walks relative to each directory it opens. It stays on `dir`'s filesystem
 * (a mount inside a fork is someone's, not the fork's), and a failure is typed, never half silent. */
export async function removeDeep(dir: string, opts: { keepDir?: boolean; except?: string } = {}): Promise<void> {
  if (!fs.existsSync(dir)) return;
  const r =
    opts.keepDir || opts.except
      ? await runTool(
          'find',
          [
            '.',
            '-mindepth',
            '1',
            '-maxdepth',
            '1',
            ...(opts.except ? ['!', '-name', opts.except] : []),
            '-exec',
            'rm',
            '-rf',
            '--one-file-system',
            '--',
            '{}',
            '+',
          ],
          dir,
        )
      : await runTool('rm', ['-rf', '--one-file-system', '--', dir]);
  if (r.code === 0) return;
  throw new XetError('FORK_BROKEN', `cannot remove everything in ${dir} (what is left stays): ${r.stderr}`, {
    dir,
    stderr: r.stderr.slice(0, 2000),
  });
}
