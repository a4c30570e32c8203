// Where a `xet::` URL points: the embedded default is a directory store, named by an absolute path,
// a file:// URL, or a path relative to the working directory. And what of a URL may be shown: never
// its password.

import * as path from 'node:path';
import { XetError } from '../errors';

/** `text` with the password of every URL in it taken out (`https://user:token@host/…` ->
 * `https://user@host/…`): for a URL itself, and for messages (git's among them) that quote one. A token
 * given on the command line must not end up in an error's message or details, or in a copy's config. */
export function withoutPassword(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/)([^/@:\s]*):[^/\s]*@/gi, '$1$2@');
}

export function storePathFromUrl(url: string, cwd: string): string {
  const u = url.startsWith('xet::') ? url.slice('xet::'.length) : url;
  if (!u || /[\0\n]/.test(u)) throw new XetError('USAGE', `not a xet store URL: ${JSON.stringify(url)}`, { url });
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(u);
  if (scheme) {
    if (scheme[1].toLowerCase() !== 'file') {
      throw new XetError('USAGE', `xet stores are directories; ${scheme[1]}:// is not supported (${url})`, { url });
    }
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw new XetError('USAGE', `malformed file URL: ${url}`, { url });
    }
    if (parsed.host && parsed.host !== 'localhost') {
      throw new XetError('USAGE', `file URLs must name a local path, not host ${parsed.host} (${url})`, { url });
    }
    return path.resolve(decodeURIComponent(parsed.pathname));
  }
  return path.resolve(cwd, u);
}
