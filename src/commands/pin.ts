// git xet pin, unpin, pins: durable roots on snapshots (refs/xet/pins/*, src/gc/pins.ts).
import type { Command } from 'commander';
import { run } from '../cli/run';
import { emit } from '../cli/output';

async function repoHere() {
  const { findRepo } = await import('../git/repo');
  return findRepo(process.cwd(), true);
}

export function registerPin(program: Command): void {
  program
    .command('pin')
    .description('keep a snapshot whatever the retention policy says (a dropped one is brought back)')
    .argument('<snapshot>', 'snapshot id (full or at least 4 hex digits)')
    .option('--reason <text>', 'why it is kept (shown by git xet pins and gc --dry-run)')
    .option('--until <duration|date>', 'the pin expires then: 2w, 30d, 2027-01-31, never (default: never)')
    .action(
      run(async (out, spec: string, opts: { reason?: string; until?: string }) => {
        const { resolveSnapshotIds } = await import('../gc/drop');
        const { pinSnapshot } = await import('../gc/pins');
        const { parseUntil } = await import('../gc/duration');
        const now = new Date();
        // Parsed before anything else: a bad --until writes nothing.
        const until = opts.until === undefined ? null : parseUntil(opts.until, now);
        const repo = await repoHere();
        const [snapshot] = await resolveSnapshotIds(repo, [spec]);
        const r = await pinSnapshot(repo, snapshot, { reason: opts.reason, until, now });
        emit(out, r, () =>
          [
            `${r.created ? 'pinned' : 'already pinned'} ${r.snapshot}${r.until ? ` until ${r.until}` : ''}${
              r.reason ? ` (${r.reason})` : ''
            }`,
            ...(r.undropped ? [`snapshot ${r.snapshot} was dropped: it is retained again`] : []),
            ...r.warnings.map((w) => `warning: ${w}`),
          ].join('\n'),
        );
      }),
    );
  program
    .command('unpin')
    .description("remove a snapshot's pin (the retention policy decides again)")
    .argument('<snapshot>', 'snapshot id (full or at least 4 hex digits)')
    .action(
      run(async (out, spec: string) => {
        const { resolveSnapshotIds } = await import('../gc/drop');
        const { unpinSnapshot } = await import('../gc/pins');
        const repo = await repoHere();
        const [snapshot] = await resolveSnapshotIds(repo, [spec]);
        const r = await unpinSnapshot(repo, snapshot);
        emit(out, r, () => [`unpinned ${r.snapshot}`, ...r.warnings.map((w) => `warning: ${w}`)].join('\n'));
      }),
    );
  program
    .command('pins')
    .description('list pins (refs/xet/pins/*): reason, expiry, and whether the sidecar agrees')
    .action(
      run(async (out) => {
        const { listPins } = await import('../gc/pins');
        const r = await listPins(await repoHere());
        emit(out, r, () =>
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
        );
      }),
    );
}
