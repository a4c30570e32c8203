// Directory listings of a fork's layers that refuse a file name git xet cannot represent. Node
// decodes names as UTF-8 and replaces bad bytes with U+FFFD, so a listed name would not lead back
// to its file (lstat fails, a comparison lies): such a name is PATH_ENCODING for that fork, as
// capture refuses it, instead of a crash.

import * as fs from 'node:fs';
import { assertUtf8Names } from '../snapshot/walk';

/** The names in `abs` (`rel` names it in messages); PATH_ENCODING if one is not valid UTF-8. */
export function readdirUtf8(abs: string, rel: string, fork?: string): string[] {
  const names = fs.readdirSync(abs);
  if (names.some((n) => n.includes('\uFFFD'))) assertUtf8Names(abs, rel, fork);
  return names;
}
