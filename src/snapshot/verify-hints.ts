// Hints for arguments given the wrong way round: `verify <dir> <snapshot>` is an easy slip, and
// without a hint it reads as "no such snapshot" or "the directory is missing".

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError } from '../errors';

const looksLikeId = (s: string) => /^[0-9a-f]{4,64}$/.test(s);

/** USAGE when `snapshot` names an existing directory and `dir` is not a path but looks like an id. */
export function swappedVerifyArguments(cwd: string, snapshot: string, dir: string): void {
  const isDir = (p: string) => fs.statSync(path.resolve(cwd, p), { throwIfNoEntry: false })?.isDirectory() === true;
  if (!looksLikeId(dir) || fs.existsSync(path.resolve(cwd, dir)) || !isDir(snapshot)) return;
  throw new XetError(
    'USAGE',
    `verify takes <snapshot> <dir>: ${JSON.stringify(snapshot)} is a directory and ${dir} looks like a snapshot id; ` +
      `did you mean: git xet verify ${dir} ${snapshot}`,
    { snapshot, dir, hint: `git xet verify ${dir} ${snapshot}` },
  );
}
