// git xet status: this worktree's last snapshot, whether anything changed since, and its forks.
import { s } from './schema';
import { defineCommand } from './spec';
import { describeDifference, differenceSchema } from './diff';

export const statusCommand = defineCommand({
  path: ['status'],
  tool: 'status',
  description: "this worktree's last snapshot, whether anything changed since, and the repository's forks",
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    worktree: s.string(),
    workspace: s.string(),
    lastSnapshot: s.looseObject({ snapshot: s.string(), createdAt: s.string(), message: s.string() }).nullable(),
    fork: s.looseObject({ id: s.string(), snapshot: s.string(), mode: s.string() }).nullable(),
    base: s.looseObject({ snapshot: s.string(), kind: s.enum(['last-snapshot', 'fork', 'restored']) }).nullable(),
    changed: s.boolean().nullable(),
    changes: s.array(differenceSchema),
    excludedByPolicy: s.looseObject({}).nullable(),
    forks: s.array(s.looseObject({ id: s.string(), dir: s.string(), mode: s.string(), state: s.string() })),
    leftovers: s.number(),
    pins: s.array(s.looseObject({ snapshot: s.string() })),
    guards: s.null(),
    allowance: s.looseObject({}),
  }),
  async run(_input, ctx) {
    const { status } = await import('../snapshot/status');
    return status({ cwd: ctx.cwd });
  },
  human(r) {
    const lines: string[] = [];
    if (r.fork) lines.push(`fork ${r.fork.id} (${r.fork.mode}) of snapshot ${r.fork.snapshot.slice(0, 12)}`);
    if (r.lastSnapshot) {
      const m = r.lastSnapshot.message ? ` "${r.lastSnapshot.message}"` : '';
      lines.push(`last snapshot ${r.lastSnapshot.snapshot.slice(0, 12)} (${r.lastSnapshot.createdAt})${m}`);
    } else lines.push('no snapshot of this worktree yet');
    if (r.base) {
      if (r.base.kind === 'restored') lines.push(`restored from snapshot ${r.base.snapshot.slice(0, 12)}`);
      const since = { fork: 'the fork was made', restored: 'the restore', 'last-snapshot': 'then' }[r.base.kind];
      lines.push(r.changed ? `changed since ${since}:` : `nothing changed since ${since}`);
      lines.push(...r.changes.slice(0, 50).map(describeDifference));
      if (r.changes.length > 50) lines.push(`  … and ${r.changes.length - 50} more`);
    }
    if (r.forks.length) {
      lines.push(`${r.forks.length} fork(s):`);
      for (const f of r.forks) lines.push(`  ${f.id}  ${f.mode.padEnd(7)} ${f.state.padEnd(10)} ${f.dir}`);
    }
    if (r.pins.length) {
      lines.push(`${r.pins.length} pinned snapshot(s) of this worktree:`);
      for (const p of r.pins) {
        const until = p.until ? `until ${p.until}${p.expired ? ' (expired)' : ''}` : 'no expiry';
        lines.push(`  ${p.snapshot.slice(0, 12)}  ${until}  ${p.reason ?? ''}`.trimEnd());
      }
    }
    return lines.join('\n');
  },
});
