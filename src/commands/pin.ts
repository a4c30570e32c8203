// git xet pin, unpin, pins: durable roots on snapshots (refs/xet/pins/*, src/gc/pins.ts).
import { s } from './schema';
import { defineCommand } from './spec';

async function repoAt(cwd: string) {
  const { findRepo } = await import('../git/repo');
  return findRepo(cwd, true);
}

const snapshotArg = s.string().describe('snapshot id (full or at least 4 hex digits)');
const warnings = (w: string[]) => w.map((x) => `warning: ${x}`);
/** What pin and unpin both return: the snapshot, its pin ref and the pin commit it points to. */
const pinRef = { snapshot: s.string(), ref: s.string(), commit: s.string() };

export const pinCommand = defineCommand({
  path: ['pin'],
  tool: 'pin',
  description: 'keep a snapshot whatever the retention policy says (a dropped one is brought back)',
  input: {
    snapshot: snapshotArg,
    reason: s.string().optional().describe('why it is kept (shown by git xet pins and gc --dry-run)'),
    until: s.string().optional().describe('the pin expires then: 2w, 30d, 2027-01-31, never (default: never)'),
  },
  args: ['snapshot'],
  flags: { reason: { value: '<text>' }, until: { value: '<duration|date>' } },
  names: ['snapshot'],
  // The same pin again changes nothing (created: false); another --until or --reason replaces it.
  annotations: { readOnly: false, destructive: false, idempotent: true },
  output: s.looseObject({
    ...pinRef,
    reason: s.string(),
    until: s.string().nullable(),
    createdAt: s.string(),
    created: s.boolean(),
    undropped: s.boolean(),
    warnings: s.array(s.string()),
  }),
  async run(input, ctx) {
    const { resolveSnapshotIds } = await import('../gc/drop');
    const { pinSnapshot } = await import('../gc/pins');
    const { parseUntil } = await import('../gc/duration');
    const now = new Date();
    // Parsed before anything else: a bad --until writes nothing.
    const until = input.until === undefined ? null : parseUntil(input.until, now);
    const repo = await repoAt(ctx.cwd);
    const [snapshot] = await resolveSnapshotIds(repo, [input.snapshot]);
    return pinSnapshot(repo, snapshot, { reason: input.reason, until, now });
  },
  human: (r) =>
    [
      `${r.created ? 'pinned' : 'already pinned'} ${r.snapshot}${r.until ? ` until ${r.until}` : ''}${
        r.reason ? ` (${r.reason})` : ''
      }`,
      ...(r.undropped ? [`snapshot ${r.snapshot} was dropped: it is retained again`] : []),
      ...warnings(r.warnings),
    ].join('\n'),
});

export const unpinCommand = defineCommand({
  path: ['unpin'],
  tool: 'unpin',
  description: "remove a snapshot's pin (the retention policy decides again)",
  input: { snapshot: snapshotArg },
  args: ['snapshot'],
  names: ['snapshot'],
  // Removes only what pin made; a second unpin is NOT_PINNED, not a further change.
  annotations: { readOnly: false, destructive: false, idempotent: true },
  output: s.looseObject({
    ...pinRef,
    reason: s.string().nullable(),
    until: s.string().nullable(),
    warnings: s.array(s.string()),
  }),
  async run(input, ctx) {
    const { resolveSnapshotIds } = await import('../gc/drop');
    const { unpinSnapshot } = await import('../gc/pins');
    const repo = await repoAt(ctx.cwd);
    const [snapshot] = await resolveSnapshotIds(repo, [input.snapshot]);
    return unpinSnapshot(repo, snapshot);
  },
  human: (r) => [`unpinned ${r.snapshot}`, ...warnings(r.warnings)].join('\n'),
});

export const pinsCommand = defineCommand({
  path: ['pins'],
  tool: 'pins',
  description: 'list pins (refs/xet/pins/*): reason, expiry, and whether the sidecar agrees',
  input: {},
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    pins: s.array(
      s.looseObject({
        snapshot: s.string(),
        ref: s.string(),
        commit: s.string(),
        reason: s.string().nullable(),
        until: s.string().nullable(),
        createdAt: s.string().nullable(),
        expired: s.boolean(),
        problem: s.string().nullable(),
        sidecar: s.enum(['same', 'missing', 'differs']),
      }),
    ),
    sidecarOnly: s.array(s.looseObject({ snapshot: s.string(), commit: s.string() })),
  }),
  async run(_input, ctx) {
    const { listPins } = await import('../gc/pins');
    return listPins(await repoAt(ctx.cwd));
  },
  human: (r) =>
    [
      ...(r.pins.length ? [] : ['no pins']),
      ...r.pins.map((p) =>
        p.problem
          ? `${p.snapshot.slice(0, 12)}  MALFORMED  ${p.ref}: ${p.problem}`
          : `${p.snapshot.slice(0, 12)}  ${p.createdAt}  ${p.until ? `until ${p.until}` : 'no expiry'}${
              p.expired ? ' (expired)' : ''
            }  ${p.reason ?? ''}${p.sidecar === 'same' ? '' : `  [sidecar: ${p.sidecar}]`}`,
      ),
      ...r.sidecarOnly.map((s) => `${s.snapshot.slice(0, 12)}  sidecar row without a pin ref (not a pin)`),
    ].join('\n'),
});
