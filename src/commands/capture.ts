// git xet capture: snapshot the whole working tree.
import { s } from './schema';
import { formatBytes } from '../cli/output';
import { defineCommand, repeatable } from './spec';

export const captureCommand = defineCommand({
  path: ['capture'],
  tool: 'capture',
  description: 'capture HEAD, refs, index, unstaged edits, untracked and ignored files as a snapshot',
  input: {
    message: s.string().optional().describe('a message stored with the snapshot'),
    ignored: s
      .enum(['all', 'none'])
      .optional()
      .describe('ignored files: all | none (default: xet.capture.ignored, else all)'),
    include: repeatable('also capture matching ignored or secret files (gitignore syntax; repeatable)'),
    exclude: repeatable('leave out matching untracked or ignored files (repeatable)'),
    always: s
      .boolean()
      .optional()
      .describe("make a new snapshot even when nothing changed since this worktree's last one"),
  },
  flags: {
    message: { short: 'm', value: '<msg>' },
    ignored: { value: '<policy>' },
    include: { value: '<pattern>' },
    exclude: { value: '<pattern>' },
  },
  annotations: { readOnly: false, destructive: false, idempotent: false },
  long: true,
  // The daemon runs it for a thin client: a capture reads nothing of the client's but its worktree.
  relayable: true,
  output: s.looseObject({
    snapshot: s.string(),
    files: s.number(),
    bytes: s.number(),
    unchanged: s.boolean(),
  }),
  async run(input, ctx) {
    if (ctx.via === 'cli') {
      // A running daemon (src/daemon/) makes the same capture without a start-up; else the normal path.
      const { viaDaemon } = await import('../daemon/client');
      const r = (await viaDaemon('capture', ctx.cwd, input)) as Awaited<ReturnType<typeof capture>> | undefined;
      if (r) return r;
    }
    const { capture } = await import('../snapshot/capture');
    const r = await capture({ cwd: ctx.cwd, ...input, progress: ctx.progress });
    if (ctx.via === 'cli') {
      // Ran here: no daemon answered. xet.daemon.autoStart starts one for the next capture.
      const { autoStartDaemon } = await import('../daemon/start');
      const warning = await autoStartDaemon(ctx.cwd);
      if (warning) r.warnings.push(warning);
    }
    return r;
  },
  human(r, ctx) {
    if (r.unchanged) ctx.note(`unchanged since snapshot ${r.snapshot.slice(0, 12)} (--always makes a new one)`);
    ctx.note(
      `captured ${r.files} files (${formatBytes(r.bytes)}): ${r.tracked} tracked, ${r.untracked} untracked, ${r.ignored} ignored${r.incremental ? ' [incremental]' : ''}`,
    );
    if (r.excludedSecrets.length)
      ctx.note(`left out ${r.excludedSecrets.length} secret file(s): ${r.excludedSecrets.slice(0, 5).join(', ')}`);
    if (r.skipped.length)
      ctx.note(
        `skipped ${r.skipped.length} special file(s): ${r.skipped
          .slice(0, 5)
          .map((s) => `${s.path} (${s.reason})`)
          .join(', ')}`,
      );
    // Problems after the snapshot was made (it stands): the pack roll-up, the sidecar, the allowance's
    // ledger, xet.daemon.autoStart. On stderr even off a terminal (a hook's log), as git's warnings.
    for (const w of r.warnings) ctx.warn?.(w);
    if (r.repositories.length)
      ctx.note(
        `captured ${r.repositories.length} inner repositories: ${r.repositories
          .slice(0, 5)
          .map((x) => `${x.path} (${x.kind}, ${x.files} files)`)
          .join(', ')}`,
      );
    return r.snapshot;
  },
});
