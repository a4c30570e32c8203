// One answer to "can this remote be reached, and if not, why", for every command that talks to one
// (restore --from, fetch, push): a name that is no remote is a usage error naming it; a path or URL
// git cannot reach is REMOTE_UNAVAILABLE; a xet store that is missing or unreadable is
// STORE_UNAVAILABLE (git-remote-xet says so in brackets); other failures keep git's own first reason,
// not its last line of advice.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { XetError, type ErrorCode } from '../errors';
import { git } from '../git/exec';
import { repoOpts, type Repo } from '../git/repo';
import { withoutPassword } from './url';

const UNREACHABLE = [
  /does not appear to be a git repository/,
  /Could not read from remote repository/,
  /unable to access '/,
  /Could not resolve host/,
  /Connection refused/,
  /Connection timed out/,
  /No route to host/,
  /repository '.*' not found/,
  /unable to connect to/,
  /Name or service not known/,
];

/** The typed code for a failed git fetch, push or ls-remote, from its stderr. */
export function remoteFailureCode(stderr: string): ErrorCode {
  const tagged = /\[(STORE_UNAVAILABLE|INTEGRITY_MISMATCH|SCHEMA_UNSUPPORTED|PUSH_REJECTED|ALLOWANCE_EXCEEDED)\]/.exec(
    stderr,
  )?.[1];
  if (tagged) return tagged as ErrorCode;
  if (UNREACHABLE.some((re) => re.test(stderr))) return 'REMOTE_UNAVAILABLE';
  return 'GIT_FAILED';
}

/** git's reason: the first `fatal:`/`error:` line (later lines are advice such as "Please make sure
 * you have the correct access rights and the repository exists."). */
export function gitReason(stderr: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const first = lines.find((l) => /^(fatal|error): /.test(l)) ?? lines[0] ?? '';
  return first.replace(/^(fatal|error): /, '');
}

/** A typed error for a git command against `remote` that failed; no password of a URL in it. */
export function remoteError(remote: string, what: string, stderr: string): XetError {
  const code = remoteFailureCode(stderr);
  const shown = withoutPassword(remote);
  const reason = withoutPassword(gitReason(stderr));
  const message =
    code === 'REMOTE_UNAVAILABLE'
      ? `${shown} cannot be reached (${what}): ${reason}`
      : `${what} ${shown} failed: ${reason}`;
  return new XetError(code, message, {
    remote: shown,
    stderr: withoutPassword(stderr.slice(-4000)),
  });
}

const looksLikeUrl = (s: string) =>
  /^[a-z][a-z0-9+.-]*::|^[a-z][a-z0-9+.-]*:\/\//i.test(s) || /^[^/]+@[^/]+:/.test(s) || s.includes('/');

/** A remote argument must be a configured remote, a URL or an existing path; a bare word that is none
 * of these is a misspelt or missing remote: USAGE naming it, before anything is tried. */
export async function checkRemoteArgument(repo: Repo, remote: string, defaulted: boolean): Promise<void> {
  const named = await git(['remote', 'get-url', '--', remote], { ...repoOpts(repo), okCodes: [2, 128] });
  if (named.code === 0 || looksLikeUrl(remote) || fs.existsSync(path.resolve(repo.worktree, remote))) return;
  throw new XetError(
    'USAGE',
    defaulted
      ? `no remote to use: the current branch has no upstream and there is no remote named ${JSON.stringify(remote)}; ` +
          'name one (git xet <command> <remote>) or add it (git remote add origin <url>)'
      : `no remote named ${JSON.stringify(remote)} (and no such path); see git remote -v${
          /^[0-9a-f]{4,64}$/.test(remote)
            ? ' (to name a snapshot or handoff, give the remote first: git xet push <remote> <id>)'
            : ''
        }`,
    { remote, defaulted },
  );
}
