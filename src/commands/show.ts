// git xet show: a snapshot's manifest.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit, formatBytes } from '../cli/output';

export function registerShow(program: Command): void {
  program
    .command('show')
    .description("print a snapshot's manifest: what was captured, left out and skipped")
    .argument('<snapshot>', 'snapshot id (full or abbreviated)')
    .action(
      run(async (out, spec: string) => {
        const { readSnapshot, resolveSnapshotOid } = await import('../snapshot/store');
        const { findRepo, repoOpts } = await import('../git/repo');
        const repo = await findRepo(process.cwd(), true);
        const opts = repoOpts(repo);
        const snap = await readSnapshot(await resolveSnapshotOid(spec, opts), opts);
        const m = snap.manifest;
        emit(out, { snapshot: snap.oid, ...m }, () => {
          const head =
            m.head.kind === 'branch' ? `${m.head.ref} (${m.head.oid ?? 'unborn'})` : `detached at ${m.head.oid}`;
          const c = m.counts;
          const lines = [
            `snapshot ${snap.oid}`,
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
        });
      }),
    );
}
