// git xet allowance: the storage allowance contract this git xet supports, and per root (the
// repository, each live fork, stores) its limits, usage, headroom, what is counted and what is not
// covered; --recount walks every root again and removes dead writers' temporary files; with
// --store <path> --set, a store's own allowance.
import type { Command } from 'commander';
import { EXIT, XetError } from '../errors';
import type { AllowanceReport, Dimensions, RootReport } from '../allowance/report';
import { run } from '../cli/run';
import { emit, formatBytes } from '../cli/output';

export function registerAllowance(program: Command): void {
  program
    .command('allowance')
    .description(
      'the storage allowance of every root (repository, forks, stores): limits, usage, headroom, what is counted and what is not covered',
    )
    .option('--recount', 'count every root from disk again and remove the temporary files of dead git xet processes')
    .option(
      '--store <remote|path>',
      "report this xet store too (repeatable; the stores of this repository's xet:: remotes are listed anyway)",
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option('--set <BYTES[,FILES]|none>', "with one --store: record the store's own allowance (none removes it)")
    .option('--headroom <SIZE|PCT>', 'with --set: the part held back for settling work (default 5%, at least 16 MiB)')
    .action(
      run(async (out, opts: { recount?: boolean; store: string[]; set?: string; headroom?: string }) => {
        const report = await import('../allowance/report');
        let r: AllowanceReport;
        if (opts.set !== undefined) {
          if (opts.store.length !== 1) throw new XetError('USAGE', '--set needs exactly one --store <path>');
          if (opts.recount) throw new XetError('USAGE', '--set and --recount do not go together');
          r = await report.setStoreAllowanceReport({
            cwd: process.cwd(),
            store: opts.store[0],
            set: opts.set,
            headroom: opts.headroom,
          });
        } else {
          if (opts.headroom !== undefined) throw new XetError('USAGE', '--headroom goes with --set');
          r = await report.allowanceReport({ cwd: process.cwd(), recount: Boolean(opts.recount), stores: opts.store });
        }
        emit(out, r, () => describeAllowance(r));
        // A root that could not be measured (its `error`): the report is partial.
        return report.partialReport(r) ? EXIT.DIFFERENT : EXIT.OK;
      }),
    );
}

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
