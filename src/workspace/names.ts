// Directory listings of a fork's layers that refuse a file name git xet cannot represent. Node
// decodes names as UTF-8 and replaces bad bytes with U+FFFD, so a listed name would not lead back
// to its file (lstat fails, a comparison lies): such a name is PATH_ENCODING for that fork, as
// capture refuses it, instead of a crash.

import * as fs from 'node:fs';
import { XetError } from '../errors';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The names in `abs` (`rel` names it in messages); PATH_ENCODING if one is not valid UTF-8. */
export function readdirUtf8(abs: string, rel: string, fork?: string): string[] {
  const names = fs.readdirSync(abs);
  if (!names.some((n) => n.includes('\uFFFD'))) return names;
  for (const raw of fs.readdirSync(abs, { encoding: 'buffer' })) {
    try {
      utf8.decode(raw);
    } catch {
      throw new XetError(
        'PATH_ENCODING',
        `a file name in ${rel || '.'}${fork ? ` of fork ${fork}` : ''} is not valid UTF-8: ${raw.toString('latin1')}`,
        { dir: rel || '.', nameHex: raw.toString('hex'), ...(fork ? { fork } : {}) },
      );
    }
  }
  return names;
}
