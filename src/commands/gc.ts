// git xet gc: collect the repository's garbage (refs/xet/*, .git/xet/, objects past the grace), or
// with --store a xet directory store's.
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit, formatBytes, progressLine } from '../cli/output';

export function registerGc(program: Command): void {
  program
    .command('gc')
    .description(
      'drop snapshots no root or rule keeps, remove unused bases, caches and spools, then let git reclaim the objects after the grace',
    )
    .option('--dry-run', 'list what would go and, for every kept snapshot, what keeps it; change nothing')
    .option(
      '--grace <duration>',
      'how old a drop or an unreachable object must be to go (default: xet.gc.grace, else gc.pruneExpire, else 2w)',
    )
    .option('--store <url>', 'collect a xet directory store instead (a path, file:// or xet:: URL)')
    .action(
      run(async (out, opts: { dryRun?: boolean; grace?: string; store?: string }) => {
        const { parseDuration } = await import('../gc/duration');
        const graceSeconds = opts.grace === undefined ? undefined : parseDuration(opts.grace, '--grace duration');
        if (opts.store) {
          const { gcStore, describeStoreGc } = await import('../remote/store-gc');
          const r = await gcStore(process.cwd(), opts.store, { dryRun: Boolean(opts.dryRun), graceSeconds });
          emit(out, r, () => describeStoreGc(r));
          return;
        }
        const { findRepo } = await import('../git/repo');
        const { collectGarbage } = await import('../gc/collect');
        const repo = await findRepo(process.cwd(), true);
        const r = await collectGarbage(repo, {
          dryRun: Boolean(opts.dryRun),
          graceSeconds,
          progress: progressLine(out),
        });
        emit(out, r, () => {
          const lines: string[] = [];
          const would = r.dryRun ? 'would ' : '';
          for (const t of r.tasks) lines.push(`${would}collect task ${t}`);
          for (const s of r.refs.released) lines.push(`${would}drop ${s.snapshot.slice(0, 12)} (${s.why})`);
          for (const d of r.refs.deleted) lines.push(`${would}delete ${d.ref} (${d.why})`);
          for (const b of r.bases) lines.push(`${would}remove base ${b.slice(0, 12)}`);
          for (const c of r.caches) lines.push(`${would}remove cache ${c}`);
          for (const s of r.spools) lines.push(`${would}remove ${s}`);
          if (r.dryRun) {
            for (const k of r.kept) {
              lines.push(`keep ${k.snapshot.slice(0, 12)}: ${k.keepers.map((x) => `${x.kind} ${x.name}`).join('; ')}`);
            }
          }
          for (const p of r.problems) lines.push(`problem: ${p}`);
          const o = r.objects;
          lines.push(
            r.dryRun
              ? `grace ${r.grace}${r.cutoff ? ` (cutoff ${r.cutoff})` : ''}; ${r.kept.length} snapshot(s) kept; ${o.before.objects} objects, ${formatBytes(o.before.bytes)}`
              : `grace ${r.grace}; ${r.kept.length} snapshot(s) kept; ${storeChange(o.reclaimedObjects ?? 0, o.reclaimedBytes ?? 0)}`,
          );
          return lines.join('\n');
        });
      }),
    );
}

/** What the run did to the object store, said the right way round (a repack can also grow it:
 * marker commits are new objects, and loose objects packed anew may compress differently). */
function storeChange(objects: number, bytes: number): string {
  const count = (n: number) => `${Math.abs(n)} object${Math.abs(n) === 1 ? '' : 's'}`;
  const what = [
    objects >= 0 ? `${count(objects)} fewer` : `${count(objects)} more`,
    bytes >= 0 ? `${formatBytes(bytes)} reclaimed` : `${formatBytes(-bytes)} more on disk`,
  ];
  return `object store: ${what.join(', ')}`;
}
