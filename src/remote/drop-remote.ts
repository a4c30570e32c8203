// Deleting snapshots on a remote (git xet drop --remote <name> <snapshot>…).
//
// STUB (lead): interface only; the implementation lands with the store-gc branch.

import { XetError } from '../errors';

export type RemoteDropResult = Record<string, unknown>;

export async function dropOnRemote(cwd: string, remote: string, snapshots: string[]): Promise<RemoteDropResult> {
  void cwd;
  void remote;
  void snapshots;
  throw new XetError('USAGE', 'drop --remote is not built yet');
}

export function describeRemoteDrop(r: RemoteDropResult): string {
  return JSON.stringify(r);
}
