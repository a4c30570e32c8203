// git xet gc: collect the repository's garbage (refs/xet/*, .git/xet/, objects past the grace), or
// with --store a xet directory store's.
import { s } from './schema';
import { formatBytes } from '../cli/output';
import type { GcResult } from '../gc/collect';
import type { StoreGcResult } from '../remote/store-gc';
import { defineCommand } from './spec';

const strings = s.array(s.string());

export const gcCommand = defineCommand({
  path: ['gc'],
  tool: 'gc',
  description:
    'drop snapshots no root or rule keeps, remove unused bases, caches and spools, then let git reclaim the objects after the grace',
  input: {
    dryRun: s
      .boolean()
      .optional()
      .describe('list what would go and, for every kept snapshot, what keeps it; change nothing'),
    grace: s
      .string()
      .optional()
      .describe(
        'how old a drop or an unreachable object must be to go (default: xet.gc.grace, else gc.pruneExpire, else 2w)',
      ),
    store: s.string().optional().describe('collect a xet directory store instead (a path, file:// or xet:: URL)'),
  },
  flags: { grace: { value: '<duration>' }, store: { value: '<url>' } },
  paths: { store: 'source' },
  // Destructive unless --dry-run (an agent gets a dry run unless it asks: mcpDefaults); --store
  // reaches a store outside the repository.
  annotations: { readOnly: false, destructive: true, idempotent: false, openWorld: true },
  long: true,
  mcpDefaults: { dryRun: true },
  // The repository's result, or with --store the store's: the fields both have, and each one's own.
  output: s.looseObject({
    dryRun: s.boolean(),
    graceSeconds: s.number().nullable(),
    cutoff: s.string().nullable(),
    refs: s.looseObject({}),
    objects: s.looseObject({}),
    problems: strings,
    runId: s.string().nullable().optional(),
    grace: s.string().optional(),
    graceFrom: s.string().optional(),
    interrupted: strings.optional(),
    bases: strings.optional(),
    caches: strings.optional(),
    spools: strings.optional(),
    tasks: strings.optional(),
    kept: s.array(s.looseObject({ snapshot: s.string() })).optional(),
    store: s.string().optional(),
    id: s.string().optional(),
    basedOn: s.number().nullable().optional(),
    published: s.number().nullable().optional(),
    retries: s.number().optional(),
    packs: s.looseObject({}).optional(),
    bytes: s.looseObject({}).optional(),
    intents: s.looseObject({}).optional(),
    tmpRemoved: s.number().optional(),
  }),
  async run(input, ctx): Promise<GcResult | StoreGcResult> {
    const { parseDuration } = await import('../gc/duration');
    const graceSeconds = input.grace === undefined ? undefined : parseDuration(input.grace, '--grace duration');
    if (input.store) {
      const { gcStore } = await import('../remote/store-gc');
      return gcStore(ctx.cwd, input.store, { dryRun: Boolean(input.dryRun), graceSeconds });
    }
    const { findRepo } = await import('../git/repo');
    const { collectGarbage } = await import('../gc/collect');
    const repo = await findRepo(ctx.cwd, true);
    return collectGarbage(repo, { dryRun: Boolean(input.dryRun), graceSeconds, progress: ctx.progress });
  },
  human(r) {
    if (!('store' in r)) return describeGc(r);
    // Loaded by run already (every command's file is imported at start: its modules load lazily).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { describeStoreGc } = require('../remote/store-gc') as typeof import('../remote/store-gc');
    return describeStoreGc(r);
  },
});

function describeGc(r: GcResult): string {
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
