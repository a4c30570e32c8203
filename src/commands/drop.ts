// git xet drop, undrop: stop retaining snapshots, and bring them back before gc reclaims them.
import { s } from './schema';
import type { DropResult } from '../gc/drop';
import type { RemoteDropResult } from '../remote/drop-remote';
import { defineCommand } from './spec';

const snapshotIds = s.array(s.string()).describe('snapshot ids (full or at least 4 hex digits)');

/** Loaded by run (lazily, as every command's core is) for human, which is synchronous. */
let remoteDrop: typeof import('../remote/drop-remote') | undefined;

export const dropCommand = defineCommand({
  path: ['drop'],
  tool: 'drop',
  description: 'stop retaining snapshots (refused for a root: pinned, a live fork, an unexpired handoff)',
  input: {
    snapshots: snapshotIds,
    remote: s.string().optional().describe('delete the snapshots on this remote (a xet store) instead of here'),
  },
  args: ['snapshots'],
  flags: { remote: { value: '<name>' } },
  paths: { remote: 'source' },
  names: ['snapshots', 'remote'],
  // Here gc may then reclaim them (undrop brings them back until it does); --remote deletes them there.
  annotations: { readOnly: false, destructive: true, idempotent: true, openWorld: true },
  // --remote talks to a server (as push and fetch do): it may take long, and be cancelled.
  long: true,
  // Here: `dropped` entries with ref, commit, droppedAt, created; --remote: remote, url, kind, absent.
  output: s.looseObject({
    dropped: s.array(s.looseObject({ snapshot: s.string(), ref: s.string() })),
    remote: s.string().optional(),
    url: s.string().optional(),
    kind: s.enum(['xet', 'git']).optional(),
    absent: s.array(s.string()).optional(),
  }),
  async run(input, ctx): Promise<DropResult | RemoteDropResult> {
    if (input.remote !== undefined) {
      remoteDrop = await import('../remote/drop-remote');
      return remoteDrop.dropOnRemote(ctx.cwd, input.remote, input.snapshots);
    }
    const { findRepo } = await import('../git/repo');
    const { dropSnapshots } = await import('../gc/drop');
    return dropSnapshots(await findRepo(ctx.cwd, true), input.snapshots);
  },
  human(r) {
    if ('remote' in r) return (remoteDrop as typeof import('../remote/drop-remote')).describeRemoteDrop(r);
    return r.dropped
      .map((d) =>
        d.created
          ? `dropped ${d.snapshot} (git xet undrop brings it back until gc reclaims it)`
          : `${d.snapshot} was already dropped`,
      )
      .join('\n');
  },
});

export const undropCommand = defineCommand({
  path: ['undrop'],
  tool: 'undrop',
  description: 'retain dropped snapshots again, while their objects are still here',
  input: { snapshots: snapshotIds },
  args: ['snapshots'],
  names: ['snapshots'],
  annotations: { readOnly: false, destructive: false, idempotent: true },
  output: s.looseObject({
    undropped: s.array(
      s.looseObject({
        snapshot: s.string(),
        ref: s.string(),
        from: s.enum(['dropped', 'collected', 'retained']),
        created: s.boolean(),
      }),
    ),
  }),
  async run(input, ctx) {
    const { findRepo } = await import('../git/repo');
    const { undropSnapshots } = await import('../gc/drop');
    return undropSnapshots(await findRepo(ctx.cwd, true), input.snapshots);
  },
  human: (r) =>
    r.undropped
      .map((u) =>
        u.from === 'retained' ? `${u.snapshot} was not dropped` : `retained ${u.snapshot} again (from ${u.from})`,
      )
      .join('\n'),
});
