// git xet diff: changes between two snapshots, or from a snapshot to the working tree.
import { s } from './schema';
import { EXIT } from '../errors';
import type { Difference } from '../snapshot/verify';
import { defineCommand } from './spec';

export function describeDifference(d: Difference): string {
  const fmt = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));
  const detail =
    d.expected !== undefined || d.actual !== undefined
      ? `: ${fmt(d.expected ?? null)} -> ${fmt(d.actual ?? null)}`
      : '';
  return `  ${d.kind.padEnd(20)} ${d.path ?? ''}${detail}`;
}

/** A verify/diff/status difference as --json prints it. */
export const differenceSchema = s.looseObject({ kind: s.string(), path: s.string().optional() });

export const diffCommand = defineCommand({
  path: ['diff'],
  tool: 'diff',
  description: 'what changed between two snapshots, or from a snapshot to the current working tree',
  input: {
    snapshot: s.string().describe('the older snapshot'),
    other: s.string().optional().describe('the newer snapshot (default: the working tree)'),
    exitCode: s.boolean().optional().describe('exit 1 when there are differences'),
  },
  args: ['snapshot', 'other'],
  names: ['snapshot', 'other'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    from: s.string(),
    to: s.string(),
    identical: s.boolean(),
    changes: s.array(differenceSchema),
  }),
  async run(input, ctx) {
    const { diffSnapshots } = await import('../snapshot/diff');
    return diffSnapshots(ctx.cwd, input.snapshot, input.other);
  },
  human: (r) => (r.identical ? '' : r.changes.map(describeDifference).join('\n')),
  exitCode: (r, input) => (input.exitCode && !r.identical ? EXIT.DIFFERENT : EXIT.OK),
});
