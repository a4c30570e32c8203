// git xet allowance: the storage allowance contract this git xet supports, and per root (the
// repository, each live fork, stores) its limits, usage, headroom, what is counted and what is not
// covered; --recount walks every root again and removes dead writers' temporary files; with
// --store <path> --set, a store's own allowance.
import { s } from './schema';
import { EXIT, XetError } from '../errors';
import type { AllowanceReport, Dimensions, RootReport } from '../allowance/report';
import { formatBytes } from '../cli/output';
import { defineCommand, repeatable } from './spec';

/** Loaded by run (lazily, as every command's core is) for exitCode, which is synchronous. */
let report: typeof import('../allowance/report') | undefined;

const dimensions = s.looseObject({ bytes: s.number().nullable(), files: s.number().nullable() });

export const allowanceCommand = defineCommand({
  path: ['allowance'],
  tool: 'allowance',
  description:
    'the storage allowance of every root (repository, forks, stores): limits, usage, headroom, what is counted and what is not covered',
  input: {
    recount: s
      .boolean()
      .optional()
      .describe('count every root from disk again and remove the temporary files of dead git xet processes'),
    store: repeatable(
      "report this xet store too (repeatable; the stores of this repository's xet:: remotes are listed anyway)",
    ),
    set: s.string().optional().describe("with one --store: record the store's own allowance (none removes it)"),
    headroom: s
      .string()
      .optional()
      .describe('with --set: the part held back for settling work (default 5%, at least 16 MiB)'),
  },
  flags: {
    store: { value: '<remote|path>' },
    set: { value: '<BYTES[,FILES]|none>' },
    headroom: { value: '<SIZE|PCT>' },
  },
  paths: { store: 'source' },
  // Not read-only: --recount removes dead processes' temporary files (garbage, never data) and --set
  // replaces a store's allowance setting; neither removes anything of value.
  annotations: { readOnly: false, destructive: false, idempotent: true, openWorld: true },
  // --recount walks every root's files again: seconds on real trees.
  long: true,
  output: s.looseObject({
    contract: s.string(),
    supported: s.array(s.string()),
    recounted: s.boolean(),
    leftoversRemoved: s.number(),
    roots: s.array(
      s.looseObject({
        root: s.string(),
        kind: s.string(),
        path: s.string(),
        limits: dimensions,
        headroom: dimensions,
        used: s.looseObject({ bytes: s.number(), files: s.number() }),
        available: dimensions,
        counted: s.array(s.string()),
        notCovered: s.array(s.string()),
        countedAt: s.string().nullable(),
        route: s.looseObject({}).nullable(),
        error: s.looseObject({ code: s.string(), message: s.string() }).optional(),
      }),
    ),
  }),
  refine(input) {
    if (input.set !== undefined) {
      if (input.store.length !== 1) throw new XetError('USAGE', '--set needs exactly one --store <path>');
      if (input.recount) throw new XetError('USAGE', '--set and --recount do not go together');
    } else if (input.headroom !== undefined) throw new XetError('USAGE', '--headroom goes with --set');
  },
  async run(input, ctx): Promise<AllowanceReport> {
    report = await import('../allowance/report');
    if (input.set !== undefined) {
      return report.setStoreAllowanceReport({
        cwd: ctx.cwd,
        store: input.store[0],
        set: input.set,
        headroom: input.headroom,
      });
    }
    return report.allowanceReport({ cwd: ctx.cwd, recount: Boolean(input.recount), stores: input.store });
  },
  human: (r) => describeAllowance(r),
  // A root that could not be measured (its `error`): the report is partial.
  exitCode: (r) => (report?.partialReport(r) ? EXIT.DIFFERENT : EXIT.OK),
});

function describeAllowance(r: AllowanceReport): string {
  const lines: string[] = [`contract ${r.contract}`];
  if (r.recounted) lines.push(`recounted; ${r.leftoversRemoved} temporary file(s) of dead processes removed`);
  for (const root of r.roots) lines.push('', ...rootTable(root));
  return lines.join('\n');
}

function rootTable(root: RootReport): string[] {
  const cell = (d: Dimensions, k: 'bytes' | 'files') => {
    const v = d[k];
    return v === null ? '-' : k === 'bytes' ? formatBytes(v) : String(v);
  };
  const rows: [string, string, string][] = [
    ['', 'bytes', 'files'],
    ['limit', cell(root.limits, 'bytes'), cell(root.limits, 'files')],
    ['headroom', cell(root.headroom, 'bytes'), cell(root.headroom, 'files')],
    ['used', formatBytes(root.used.bytes), String(root.used.files)],
    ['available', cell(root.available, 'bytes'), cell(root.available, 'files')],
  ];
  const w0 = Math.max(...rows.map((x) => x[0].length));
  const w1 = Math.max(...rows.map((x) => x[1].length));
  const out = [`${root.root}  ${root.path}`];
  if (root.error) out.push(`  error: ${root.error.code}: ${root.error.message}`);
  for (const [a, b, c] of rows) out.push(`  ${a.padEnd(w0)}  ${b.padStart(w1)}  ${c.padStart(5)}`.trimEnd());
  if (root.limits.bytes === null && root.limits.files === null) out.push('  no allowance set');
  out.push(`  counted at: ${root.countedAt ?? 'never recounted (ledger and disk)'}`);
  if (root.route)
    out.push(`  route: ${root.route.kind ?? 'none'}${root.route.covered ? '' : ` (uncovered: ${root.route.reason})`}`);
  for (const c of root.counted) out.push(`  counts: ${c}`);
  for (const c of root.notCovered) out.push(`  not covered: ${c}`);
  return out;
}
