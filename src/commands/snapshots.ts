// git xet snapshots: list the snapshots in this repository, newest first.
import { s } from './schema';
import { formatBytes } from '../cli/output';
import { defineCommand } from './spec';

export const snapshotsCommand = defineCommand({
  path: ['snapshots'],
  tool: 'snapshots',
  description: 'list snapshots (refs/xet/snapshots/*), newest first',
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    snapshots: s.array(
      s.looseObject({
        snapshot: s.string(),
        createdAt: s.string(),
        message: s.string(),
        head: s.string(),
        files: s.number(),
        bytes: s.number(),
        pinned: s.boolean(),
      }),
    ),
  }),
  async run(_input, ctx) {
    const { listSnapshots } = await import('../snapshot/store');
    const { findRepo, repoOpts } = await import('../git/repo');
    const repo = await findRepo(ctx.cwd, true);
    const { pinnedSnapshots } = await import('../gc/pins');
    const pinned = await pinnedSnapshots(repo);
    const list = (await listSnapshots(repoOpts(repo))).map((s) => ({ ...s, pinned: pinned.has(s.snapshot) }));
    return { snapshots: list };
  },
  human: (r) =>
    r.snapshots
      .map(
        (s) =>
          `${s.snapshot.slice(0, 12)}${s.pinned ? ' P' : '  '} ${s.createdAt}  ${String(s.files).padStart(7)} files  ${formatBytes(s.bytes).padStart(10)}  ${s.head}  ${s.message}`,
      )
      .join('\n'),
});
