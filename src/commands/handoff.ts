// git xet handoff: create, list, show, verify and accept handoff descriptors (xet.handoff/v1).
import * as fs from 'node:fs';
import { Command, Option } from 'commander';
import { XetError } from '../errors';
import { run } from '../cli/run';
import { emit, progressLine } from '../cli/output';

const collect = (v: string, prev: string[]): string[] => [...prev, v];

export function registerHandoff(program: Command): void {
  const handoff = program
    .command('handoff')
    .description('hand a snapshot to other agents with an immutable, verifiable descriptor');

  handoff
    .command('create')
    .description('create a handoff of a snapshot (refs/xet/handoffs/<id>); prints its id')
    .argument('[snapshot]', 'snapshot id (full or abbreviated)')
    .option('--to <agents>', 'recipient agent(s), comma-separated; repeatable', collect, [])
    .option('--from <agent>', 'the sending agent (default: git config xet.agent)')
    .option('--title <text>', 'one line saying what this is')
    .option('--summary <text>', 'the state of the work')
    .option('--finding <text>', 'something learned; repeatable', collect, [])
    .option('--negative <text>', 'something tried that did not work; repeatable', collect, [])
    .option('--artifact <path>', 'a file in the snapshot worth looking at; repeatable', collect, [])
    .option('--correlation-id <id>', 'an opaque id to tie this handoff to a task or run')
    .option('--task <id>', 'the task this hands over: its result snapshot (by default), its id and correlation id')
    .option('--expires <duration>', 'expiry after creation: 90m, 12h, 7d, 2w')
    .option('--supersedes <id>', 'the handoff this one replaces')
    .option('--descriptor <file>', 'take a complete canonical descriptor from a file ("-": stdin)')
    .option('--request-id <id>', 'a client-chosen id: a retry with the same id and inputs returns the same handoff')
    .action(
      run(
        async (
          out,
          snapshot: string | undefined,
          opts: {
            to: string[];
            from?: string;
            title?: string;
            summary?: string;
            finding: string[];
            negative: string[];
            artifact: string[];
            correlationId?: string;
            task?: string;
            expires?: string;
            supersedes?: string;
            descriptor?: string;
            requestId?: string;
          },
        ) => {
          const { createHandoff } = await import('../handoff/create');
          const { refuseLossyArgument } = await import('../cli/argv-bytes');
          // Node decodes argv lossily: an id that is not UTF-8 would be stored as U+FFFD.
          refuseLossyArgument('--correlation-id', opts.correlationId);
          let descriptor: Buffer | undefined;
          if (opts.descriptor !== undefined) {
            try {
              descriptor = fs.readFileSync(opts.descriptor === '-' ? 0 : opts.descriptor);
            } catch (e) {
              throw new XetError('USAGE', `--descriptor ${opts.descriptor}: ${(e as Error).message}`);
            }
          }
          const r = await createHandoff({
            cwd: process.cwd(),
            snapshot,
            to: opts.to,
            from: opts.from,
            title: opts.title,
            summary: opts.summary,
            findings: opts.finding,
            negative: opts.negative,
            artifacts: opts.artifact,
            correlationId: opts.correlationId,
            task: opts.task,
            expires: opts.expires,
            supersedes: opts.supersedes,
            descriptor,
            requestId: opts.requestId,
          });
          emit(out, r, () => r.id);
        },
      ),
    );

  handoff
    .command('list')
    .description('list handoffs, newest first; forged or broken ones are marked invalid')
    .option('--to <agent>', 'only handoffs to this agent')
    .option('--from <agent>', 'only handoffs from this agent')
    .action(
      run(async (out, opts: { to?: string; from?: string }) => {
        const { listHandoffs } = await import('../handoff/list');
        const { displaySafe } = await import('../handoff/descriptor');
        const list = await listHandoffs({ cwd: process.cwd(), to: opts.to, from: opts.from });
        emit(out, { handoffs: list }, () =>
          list
            .map((h) =>
              h.valid
                ? `${h.id.slice(0, 12)}  ${h.createdAt}  ${h.from} -> ${h.to.join(',')}  ${h.title}${
                    h.expired ? '  (expired)' : ''
                  }${h.supersededBy.length ? '  (superseded)' : ''}${h.accepted ? `  (accepted ${h.accepted}x)` : ''}`
                : `${displaySafe(h.id.slice(0, 12))}  INVALID: ${h.problems.join('; ')}`,
            )
            .join('\n'),
        );
      }),
    );

  handoff
    .command('show')
    .description("print a handoff's descriptor and where it was accepted")
    .argument('<id>', 'handoff id (full or abbreviated)')
    .action(
      run(async (out, id: string) => {
        const { showHandoff } = await import('../handoff/list');
        const r = await showHandoff({ cwd: process.cwd(), handoff: id });
        const d = r.descriptor;
        emit(out, r, () =>
          [
            `handoff   ${r.id}`,
            `title     ${d.title}`,
            `from      ${d.from}`,
            `to        ${d.to.join(', ')}`,
            `snapshot  ${d.snapshot.oid}`,
            `created   ${d.createdAt}${d.expiresAt ? `, expires ${d.expiresAt}${r.expired ? ' (expired)' : ''}` : ''}`,
            ...(d.correlationId !== undefined ? [`corr. id  ${d.correlationId}`] : []),
            ...(d.task !== undefined ? [`task      ${d.task}`] : []),
            ...(d.supersedes ? [`replaces  ${d.supersedes}`] : []),
            ...(d.summary ? ['', d.summary] : []),
            ...(d.findings.length ? ['', 'findings:', ...d.findings.map((f) => `  - ${f}`)] : []),
            ...(d.negative.length ? ['', 'negative results:', ...d.negative.map((f) => `  - ${f}`)] : []),
            ...(d.artifacts.length ? ['', 'artifacts:', ...d.artifacts.map((a) => `  ${a}`)] : []),
            ...(r.acceptances.length
              ? ['', 'accepted:', ...r.acceptances.map((a) => `  ${a.acceptedAt}  ${a.mode}  ${a.dir}`)]
              : []),
          ].join('\n'),
        );
      }),
    );

  handoff
    .command('verify')
    .description('check a handoff: id, schema, canonical bytes, parent snapshot, manifest hash, artifacts')
    .argument('<id>', 'handoff id (full or abbreviated)')
    .action(
      run(async (out, id: string) => {
        const { verifyHandoff } = await import('../handoff/verify');
        const r = await verifyHandoff({ cwd: process.cwd(), handoff: id });
        emit(out, r, () =>
          [
            `handoff ${r.id} is intact${r.expired ? ' (but expired)' : ''}`,
            ...r.checks.map((c) => `  ${c.check}: ok`),
          ].join('\n'),
        );
      }),
    );

  handoff
    .command('accept')
    .description('verify a handoff, then restore (or --fork) its snapshot into <dir>')
    .argument('<id>', 'handoff id (full or abbreviated)')
    .argument('<dir>', 'directory to lay the snapshot in; must not exist or be empty')
    .option('--fork', 'make a fork (linked worktree) instead of a new repository')
    .addOption(new Option('--mode <mode>', 'fork mode (with --fork)').choices(['auto', 'overlay', 'clone', 'copy']))
    .option('--allow-expired', 'accept a handoff past its expiry')
    .action(
      run(
        async (
          out,
          id: string,
          dir: string,
          opts: { fork?: boolean; mode?: 'auto' | 'overlay' | 'clone' | 'copy'; allowExpired?: boolean },
        ) => {
          const { acceptHandoff } = await import('../handoff/accept');
          const r = await acceptHandoff({
            cwd: process.cwd(),
            handoff: id,
            dir,
            fork: opts.fork,
            mode: opts.mode,
            allowExpired: opts.allowExpired,
            progress: progressLine(out),
          });
          emit(out, r, () =>
            [
              `accepted handoff ${r.handoff.slice(0, 12)} from ${r.from} ("${r.title}"): ${
                r.action === 'fork' ? `forked (${r.mode}, fork ${r.fork})` : 'restored'
              } snapshot ${r.snapshot.slice(0, 12)} into ${r.dir}`,
              ...r.warnings.map((w) => `warning: ${w}`),
            ].join('\n'),
          );
        },
      ),
    );
}
