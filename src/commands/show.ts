// git xet show: a snapshot's manifest.
import { s } from './schema';
import { formatBytes } from '../cli/output';
import { defineCommand } from './spec';

export const showCommand = defineCommand({
  path: ['show'],
  tool: 'show',
  description: "print a snapshot's manifest: what was captured, left out and skipped",
  input: { snapshot: s.string().describe('snapshot id (full or abbreviated)') },
  args: ['snapshot'],
  names: ['snapshot'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  // The snapshot's id, then its manifest's fields (docs/FORMAT.md).
  output: s.looseObject({
    snapshot: s.string(),
    schema: s.string(),
    createdAt: s.string(),
    head: s.looseObject({ kind: s.enum(['branch', 'detached']), oid: s.string().nullable() }),
    refs: s.array(s.looseObject({ name: s.string(), oid: s.string() })),
    counts: s.looseObject({ files: s.number(), bytes: s.number() }),
    policy: s.looseObject({ ignored: s.string(), excludedSecrets: s.array(s.string()) }),
    skipped: s.array(s.looseObject({ path: s.string(), reason: s.string() })),
  }),
  async run(input, ctx) {
    const { readSnapshot, resolveSnapshotOid } = await import('../snapshot/store');
    const { findRepo, repoOpts } = await import('../git/repo');
    const repo = await findRepo(ctx.cwd, true);
    const opts = repoOpts(repo);
    const snap = await readSnapshot(await resolveSnapshotOid(input.snapshot, opts), opts);
    return { snapshot: snap.oid, ...snap.manifest };
  },
  human(m) {
    const head = m.head.kind === 'branch' ? `${m.head.ref} (${m.head.oid ?? 'unborn'})` : `detached at ${m.head.oid}`;
    const c = m.counts;
    const lines = [
      `snapshot ${m.snapshot}`,
      `created  ${m.createdAt} by ${m.tool.name} ${m.tool.version} (git ${m.git.version}, ${m.platform.os}/${m.platform.arch})`,
      ...(m.message ? [`message  ${m.message}`] : []),
      `HEAD     ${head}`,
      `refs     ${m.refs.length}${m.stash.length ? `, ${m.stash.length} stash entries` : ''}`,
      `files    ${c.files} (${formatBytes(c.bytes)}): ${c.tracked} tracked, ${c.untracked} untracked, ${c.ignored} ignored; ${c.symlinks} symlinks, ${c.emptyDirs} empty dirs`,
      `index    v${m.index.version}; ${m.index.intentToAdd.length} intent-to-add, ${m.index.skipWorktree.length} skip-worktree, ${m.index.assumeUnchanged.length} assume-unchanged`,
      `policy   ignored=${m.policy.ignored}${m.policy.include.length ? ` include=${m.policy.include.join(',')}` : ''}${m.policy.exclude.length ? ` exclude=${m.policy.exclude.join(',')}` : ''}`,
    ];
    if (m.policy.excludedSecrets.length)
      lines.push(
        `secrets left out (${m.policy.excludedSecrets.length}):`,
        ...m.policy.excludedSecrets.map((p) => `  ${p}`),
      );
    if (m.skipped.length)
      lines.push(`skipped (${m.skipped.length}):`, ...m.skipped.map((s) => `  ${s.path} (${s.reason})`));
    if (m.repositories?.length)
      lines.push(
        `inner repositories (${m.repositories.length}):`,
        ...m.repositories.map((r) => `  ${r.path} (${r.kind}) ${r.snapshot}`),
      );
    return lines.join('\n');
  },
});
