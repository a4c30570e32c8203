// Deleting snapshots on a remote (git xet drop --remote <name> <snapshot>…): a xet store or a Git
// server. Only refs/xet/snapshots/* are deleted, each under a lease on the value listed, all or
// nothing (--atomic); a snapshot the remote pins (refs/xet/pins/<id>) is refused before anything is
// sent. The objects stay until the remote collects them (`git xet gc --store` for a store, the
// server's own gc otherwise). This repository's tracking ref refs/remotes/<name>/xet/snapshots/<id>
// goes too, so gc's keepUnpushed rule no longer counts the snapshot as pushed there.

import { XetError } from '../errors';
import { git } from '../git/exec';
import { findRepo, repoOpts } from '../git/repo';
import { lsRemote, remoteUrl, trackingPrefix } from './publish';
import { checkRemoteArgument, gitReason, remoteError } from './reach';
import { withoutPassword } from './url';

const SNAPSHOTS = 'refs/xet/snapshots/';
const PINS = 'refs/xet/pins/';

export interface RemoteDropResult {
  remote: string;
  url: string;
  kind: 'xet' | 'git';
  /** Snapshot refs deleted on the remote. */
  dropped: { snapshot: string; ref: string }[];
  /** Full ids asked for that the remote does not have (already dropped: a re-run after a lost reply). */
  absent: string[];
}

export async function dropOnRemote(cwd: string, remote: string, snapshots: string[]): Promise<RemoteDropResult> {
  const repo = await findRepo(cwd, true);
  const o = repoOpts(repo);
  if (!snapshots.length) throw new XetError('USAGE', 'drop --remote needs at least one snapshot id');
  for (const id of snapshots) {
    if (!/^[0-9a-f]{4,64}$/.test(id)) {
      throw new XetError('USAGE', `${JSON.stringify(id)} is not a snapshot id (4 to 64 hex digits)`, { id });
    }
  }
  await checkRemoteArgument(repo, remote, false);
  const url = await remoteUrl(repo, remote);
  const kind = url.startsWith('xet::') ? 'xet' : 'git';
  const refs = await lsRemote(repo, remote);
  const theirs = [...refs.keys()].filter((n) => n.startsWith(SNAPSHOTS));
  const result: RemoteDropResult = {
    remote: withoutPassword(remote),
    url: withoutPassword(url),
    kind,
    dropped: [],
    absent: [],
  };
  const full = repo.objectFormat === 'sha256' ? 64 : 40;
  const chosen = new Map<string, string>();
  for (const id of snapshots) {
    const m = theirs.filter((n) => n.slice(SNAPSHOTS.length).startsWith(id));
    if (m.length === 0 && id.length === full) {
      if (!result.absent.includes(id)) result.absent.push(id);
      continue;
    }
    if (m.length !== 1) {
      throw new XetError(
        'SNAPSHOT_NOT_FOUND',
        m.length
          ? `${id} is ambiguous on ${withoutPassword(remote)}: ${m.length} snapshots start with it`
          : `${withoutPassword(remote)} has no snapshot ${id}`,
        { id, remote: withoutPassword(remote), matches: m.slice(0, 20) },
      );
    }
    const snapshot = m[0].slice(SNAPSHOTS.length);
    const pin = `${PINS}${snapshot}`;
    if (refs.has(pin)) {
      throw new XetError(
        'SNAPSHOT_RETAINED',
        `${withoutPassword(remote)} pins snapshot ${snapshot.slice(0, 12)} (${pin}); nothing was dropped. ` +
          `Delete the pin there first (git push ${withoutPassword(remote)} :${pin})`,
        { snapshot, remote: withoutPassword(remote), roots: [{ kind: 'pin', name: pin }] },
      );
    }
    chosen.set(m[0], refs.get(m[0]) as string);
  }
  if (chosen.size) {
    const leases = [...chosen].map(([ref, oid]) => `--force-with-lease=${ref}:${oid}`);
    const specs = [...chosen.keys()].map((ref) => `:${ref}`);
    const r = await git(['push', '--porcelain', '--atomic', ...leases, '--', remote, ...specs], {
      ...o,
      okCodes: [1, 128],
    });
    if (r.code !== 0) {
      const refused = /^!\t[^\t]*\t(.*)$/m.exec(r.stdout.toString('utf8'));
      if (refused) {
        throw new XetError(
          'PUSH_REJECTED',
          `${withoutPassword(remote)} refused to delete the snapshot ref(s): ${refused[1]}; nothing was dropped`,
          { remote: withoutPassword(remote), reason: refused[1], stderr: withoutPassword(gitReason(r.stderr)) },
        );
      }
      throw remoteError(remote, 'push', r.stderr);
    }
    for (const ref of chosen.keys()) result.dropped.push({ snapshot: ref.slice(SNAPSHOTS.length), ref });
  }
  const gone = [...result.dropped.map((d) => d.snapshot), ...result.absent];
  if (url !== remote && gone.length) {
    const tracking = gone.map((id) => `${trackingPrefix(remote)}snapshots/${id}`);
    const have = await git(['for-each-ref', '--format=%(refname)', ...tracking], o);
    const lines = have.stdout.toString('utf8').split('\n').filter(Boolean);
    if (lines.length) await git(['update-ref', '--stdin'], { ...o, input: lines.map((l) => `delete ${l}\n`).join('') });
  }
  return result;
}

export function describeRemoteDrop(r: RemoteDropResult): string {
  const lines = r.dropped.map((d) => `dropped ${d.snapshot.slice(0, 12)} on ${r.remote}`);
  for (const id of r.absent) lines.push(`${id.slice(0, 12)} is not on ${r.remote} (already dropped)`);
  if (r.dropped.length) {
    lines.push(
      r.kind === 'xet'
        ? `its objects stay in the store until \`git xet gc --store ${r.remote}\``
        : "its objects stay on the server until the server's own gc",
    );
  }
  return lines.join('\n');
}
