// git xet fsck: check the repository's sidecar against its refs, worktrees and objects (--rebuild
// reconstructs the sidecar's roots), or with --store a xet directory store.
import { s } from './schema';
import { EXIT, XetError } from '../errors';
import type { RepoFsckResult } from '../gc/fsck';
import type { StoreCheck } from '../remote/fsck';
import { defineCommand } from './spec';

export const fsckCommand = defineCommand({
  path: ['fsck'],
  tool: 'fsck',
  description:
    "check the repository's sidecar against refs, worktrees and objects (or a xet store with --store): exit 0 when whole, 1 with the problems found",
  input: {
    store: s.string().optional().describe('check a store instead: a path, file:// URL or xet:: URL'),
    rebuild: s
      .boolean()
      .optional()
      .describe("rebuild the sidecar's roots (pins, forks) from refs, worktrees and mounts first"),
  },
  flags: { store: { value: '<path>' } },
  paths: { store: 'source' },
  // --rebuild rewrites the sidecar's roots (a corrupt database is moved aside, not deleted).
  annotations: { readOnly: false, destructive: false, idempotent: true, openWorld: true },
  // A repository's result, or a store's (--store): `ok` and `problems` in both.
  output: s.looseObject({
    ok: s.boolean(),
    problems: s.array(
      s.union([s.string(), s.looseObject({ kind: s.string(), subject: s.string(), message: s.string() })]),
    ),
    checked: s.looseObject({}).optional(),
    rebuilt: s.looseObject({}).nullable().optional(),
    store: s.string().optional(),
  }),
  refine(input) {
    if (input.store && input.rebuild)
      throw new XetError('USAGE', '--rebuild applies to the repository, not to --store');
  },
  async run(input, ctx): Promise<RepoFsckResult | StoreCheck> {
    if (input.store) {
      const { fsckStore } = await import('../remote/fsck');
      return fsckStore(ctx.cwd, input.store);
    }
    const { findRepo } = await import('../git/repo');
    const { fsckRepository } = await import('../gc/fsck');
    return fsckRepository(await findRepo(ctx.cwd, true), { rebuild: Boolean(input.rebuild) });
  },
  human(r) {
    if ('store' in r) {
      return r.ok
        ? `${r.store}: ok (${r.states} states, ${r.packs} packs, ${r.refs} refs)`
        : [`${r.store}: ${r.problems.length} problem(s)`, ...r.problems.map((p) => `  ${p}`)].join('\n');
    }
    const lines: string[] = [];
    if (r.rebuilt) {
      if (r.rebuilt.movedAside) lines.push(`moved the corrupt sidecar aside to ${r.rebuilt.movedAside}`);
      lines.push(
        `rebuilt: ${r.rebuilt.pins} pin(s), ${r.rebuilt.forks} fork(s); ${r.rebuilt.pinRowsRemoved} stale pin row(s) removed, ${r.rebuilt.gcRunsInterrupted} gc run(s) marked interrupted`,
      );
    }
    const c = r.checked;
    lines.push(
      r.ok
        ? `ok (${c.snapshots} snapshots, ${c.pins} pins, ${c.forks} forks, ${c.gcRuns} gc runs)`
        : `${r.problems.length} problem(s)`,
    );
    for (const p of r.problems) lines.push(`  ${p.kind}: ${p.message}`);
    return lines.join('\n');
  },
  exitCode: (r) => (r.ok ? EXIT.OK : EXIT.DIFFERENT),
});
