// git xet handoff: create, list, show, verify, accept and sign handoff descriptors (xet.handoff/v1)
// and their signatures (xet.handoff-signature/v1).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { s } from './schema';
import { XetError } from '../errors';
import { checkedRepo, defineCommand, repeatable, takeFromCheck } from './spec';
import type { Repo } from '../git/repo';
import type { GitConfig } from '../git/config';
import type { SignatureReport } from '../handoff/signatures';
import { displaySafe } from '../handoff/descriptor';
import { pushLines, pushResultShape } from './push';
import type { CreateHandoffResult } from '../handoff/create';
import type { PushResult } from '../remote/publish';

const signatureShape = s.looseObject({
  id: s.string(),
  ref: s.string(),
  commit: s.string(),
  valid: s.boolean(),
  format: s.enum(['ssh', 'openpgp']).nullable(),
  signedAt: s.string().nullable(),
  fingerprint: s.string().nullable(),
  principals: s.array(s.string()),
  patterns: s.array(s.string()),
  validAfter: s.string().nullable(),
  validBefore: s.string().nullable(),
  trust: s.string().nullable(),
  problem: s.string().nullable(),
});

const storedSignatureShape = s.looseObject({
  handoff: s.string(),
  id: s.string(),
  ref: s.string(),
  commit: s.string(),
  format: s.enum(['ssh', 'openpgp']),
  signedAt: s.string(),
  created: s.boolean(),
});

/** One line per signature for a person; problems are quoted text from elsewhere, printed escaped. */
function signatureLines(list: SignatureReport[]): string[] {
  return list.map((s) =>
    s.valid
      ? `  ${s.id.slice(0, 12)}  valid    ${s.format}  ${[...s.principals, ...s.patterns.map((p) => `pattern ${p}`)]
          .map(displaySafe)
          .join(', ')}  ${s.fingerprint}${s.validBefore ? `  (valid before ${s.validBefore})` : ''}`
      : `  ${s.id.slice(0, 12)}  INVALID  ${s.format ?? '-'}  ${displaySafe(s.problem ?? '')}`,
  );
}

export const handoffCreateCommand = defineCommand({
  path: ['handoff', 'create'],
  tool: 'handoff_create',
  description: 'create a handoff of a snapshot (refs/xet/handoffs/<id>); prints its id',
  input: {
    snapshot: s.string().optional().describe('snapshot id (full or abbreviated)'),
    to: repeatable('recipient agent(s), comma-separated; repeatable'),
    from: s.string().optional().describe('the sending agent (default: git config xet.agent)'),
    title: s.string().optional().describe('one line saying what this is'),
    summary: s.string().optional().describe('the state of the work'),
    finding: repeatable('something learned; repeatable'),
    negative: repeatable('something tried that did not work; repeatable'),
    artifact: repeatable('a file in the snapshot worth looking at; repeatable'),
    correlationId: s.string().optional().describe('an opaque id to tie this handoff to a task or run'),
    task: s
      .string()
      .optional()
      .describe('the task this hands over: its result snapshot (by default), its id and correlation id'),
    expires: s.string().optional().describe('expiry after creation: 90m, 12h, 7d, 2w'),
    supersedes: s.string().optional().describe('the handoff this one replaces'),
    descriptor: s.string().optional().describe('take a complete canonical descriptor from a file ("-": stdin)'),
    requestId: s
      .string()
      .optional()
      .describe('a client-chosen id: a retry with the same id and inputs returns the same handoff'),
    sign: s
      .boolean()
      .optional()
      .describe(
        "sign the descriptor with git's signing setup (gpg.format, user.signingKey; default: xet.handoff.sign)",
      ),
    push: s
      .string()
      .optional()
      .describe(
        'then publish the handoff, with its snapshot, to this remote (as git xet push <remote> <id>, in the same process)',
      ),
  },
  args: ['snapshot'],
  flags: {
    to: { value: '<agents>' },
    from: { value: '<agent>' },
    title: { value: '<text>' },
    summary: { value: '<text>' },
    finding: { value: '<text>' },
    negative: { value: '<text>' },
    artifact: { value: '<path>' },
    correlationId: { value: '<id>' },
    task: { value: '<id>' },
    expires: { value: '<duration>' },
    supersedes: { value: '<id>' },
    descriptor: { value: '<file>' },
    requestId: { value: '<id>' },
    push: { value: '<remote>' },
  },
  paths: { descriptor: 'existing', push: 'source' },
  names: ['snapshot', 'task', 'supersedes', 'push'],
  // The creation time is part of the id: only a retry with --request-id (or --descriptor) is idempotent.
  // With --push it talks to a remote, and runs as long as a push may.
  annotations: { readOnly: false, destructive: false, idempotent: false, openWorld: true },
  long: (input) => input.push !== undefined,
  // The daemon runs it for a thin client unless it needs what only the client has: its files (a
  // descriptor may be its stdin, a pipe, a /dev/fd or /proc path), its signing agent or terminal
  // (--sign), its credentials (a push through git), its environment (a hook of the user's that git
  // runs when the handoff ref is written).
  relayable: async (input, ctx) => {
    if (input.descriptor !== undefined) return 'the descriptor is read by the caller';
    const { repo, config, userHook } = await checkedRepo(input, ctx.cwd);
    if (input.sign ?? config.getBool('xet.handoff.sign') ?? false) return 'the handoff is signed';
    if (userHook) return 'a reference-transaction hook runs';
    if (input.push === undefined) return null;
    const { pushesInProcess } = await import('../remote/publish');
    return (await pushesInProcess(repo, input.push, config)) ? null : 'the push goes through git';
  },
  output: s.looseObject({
    id: s.string(),
    ref: s.string(),
    commit: s.string(),
    snapshot: s.string(),
    created: s.boolean(),
    createdAt: s.string(),
    expiresAt: s.string().nullable(),
    signature: storedSignatureShape.optional(),
    push: pushResultShape.optional(),
  }),
  async run(input, ctx): Promise<CreateHandoffResult & { push?: PushResult }> {
    // A relayed line whose client went away while it waited in the daemon's queue: nothing made.
    if (ctx.signal?.aborted)
      throw new XetError('CANCELLED', 'interrupted before the handoff was created; nothing was made');
    const { createHandoffTask } = await import('../handoff/create');
    const { refuseLossyArgument } = await import('../cli/argv-bytes');
    // Node decodes argv lossily: an id that is not UTF-8 would be stored as U+FFFD.
    refuseLossyArgument('--correlation-id', input.correlationId);
    let descriptor: Buffer | undefined;
    if (input.descriptor !== undefined) {
      try {
        // Against the command's directory, not the process's: the daemon runs a relayed line elsewhere.
        descriptor = fs.readFileSync(input.descriptor === '-' ? 0 : path.resolve(ctx.cwd, input.descriptor));
      } catch (e) {
        throw new XetError('USAGE', `--descriptor ${input.descriptor}: ${(e as Error).message}`);
      }
    }
    const { findRepo, repoOpts } = await import('../git/repo');
    const { readConfig } = await import('../git/config');
    // Read once for the descriptor (xet.agent, signing) and the push (the remote); in the daemon,
    // once for its check too.
    const checked = takeFromCheck<{ repo: Repo; config: GitConfig }>(input);
    const repo = checked?.repo ?? (await findRepo(ctx.cwd, true));
    const config = checked?.config ?? (await readConfig(repoOpts(repo)));
    const { result, task } = await createHandoffTask({
      cwd: ctx.cwd,
      repo,
      config,
      snapshot: input.snapshot,
      to: input.to,
      from: input.from,
      title: input.title,
      summary: input.summary,
      findings: input.finding,
      negative: input.negative,
      artifacts: input.artifact,
      correlationId: input.correlationId,
      task: input.task,
      expires: input.expires,
      supersedes: input.supersedes,
      descriptor,
      requestId: input.requestId,
      sign: input.sign,
    });
    if (input.push === undefined) return result;
    ctx.progress?.('pushing');
    const { pushXetRefs } = await import('../remote/publish');
    const { handoffPushRefs } = await import('../remote/select');
    try {
      const refs = await handoffPushRefs({ ...result, task }, repoOpts(repo));
      return {
        ...result,
        push: await pushXetRefs({ cwd: ctx.cwd, repo, config, remote: input.push, refs, signal: ctx.signal }),
      };
    } catch (e) {
      // The handoff exists whatever became of its push: the error says which one, so a retry
      // (git xet push <remote> <id>) needs no guess.
      if (e instanceof XetError) {
        e.details.handoff = { id: result.id, ref: result.ref, commit: result.commit, created: result.created };
        e.message = `handoff ${result.id} was created, but its push failed: ${e.message}`;
      }
      throw e;
    }
  },
  human(r, ctx) {
    if (r.signature) ctx.note(`signed (${r.signature.format}, signature ${r.signature.id.slice(0, 12)})`);
    // The id alone on stdout, as without --push (scripts read it); the push is a note.
    if (r.push) ctx.note(pushLines(r.push).join('\n'));
    return r.id;
  },
});

export const handoffListCommand = defineCommand({
  path: ['handoff', 'list'],
  tool: 'handoff_list',
  description: 'list handoffs, newest first; forged or broken ones are marked invalid',
  input: {
    to: s.string().optional().describe('only handoffs to this agent'),
    from: s.string().optional().describe('only handoffs from this agent'),
  },
  flags: { to: { value: '<agent>' }, from: { value: '<agent>' } },
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    handoffs: s.array(s.looseObject({ id: s.string(), valid: s.boolean(), signed: s.number() })),
  }),
  async run(input, ctx) {
    const { listHandoffs } = await import('../handoff/list');
    return { handoffs: await listHandoffs({ cwd: ctx.cwd, to: input.to, from: input.from }) };
  },
  human({ handoffs: list }) {
    return list
      .map((h) =>
        h.valid
          ? `${h.id.slice(0, 12)}  ${h.createdAt}  ${h.from} -> ${h.to.join(',')}  ${h.title}${
              h.expired ? '  (expired)' : ''
            }${h.supersededBy.length ? '  (superseded)' : ''}${h.accepted ? `  (accepted ${h.accepted}x)` : ''}${
              h.signed ? `  (signed ${h.signed}x)` : ''
            }`
          : `${displaySafe(h.id.slice(0, 12))}  INVALID: ${h.problems.join('; ')}`,
      )
      .join('\n');
  },
});

export const handoffShowCommand = defineCommand({
  path: ['handoff', 'show'],
  tool: 'handoff_show',
  description: "print a handoff's descriptor and where it was accepted",
  input: { id: s.string().describe('handoff id (full or abbreviated)') },
  args: ['id'],
  names: ['id'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    id: s.string(),
    ref: s.string(),
    commit: s.string(),
    expired: s.boolean(),
    descriptor: s.looseObject({}),
    acceptances: s.array(s.looseObject({})),
    signed: s.number(),
    signatures: s.array(signatureShape),
  }),
  async run(input, ctx) {
    const { showHandoff } = await import('../handoff/list');
    return showHandoff({ cwd: ctx.cwd, handoff: input.id });
  },
  human(r) {
    const d = r.descriptor;
    return [
      `handoff   ${r.id}`,
      `title     ${d.title}`,
      `from      ${d.from}`,
      `to        ${d.to.join(', ')}`,
      `snapshot  ${d.snapshot.oid}`,
      `created   ${d.createdAt}${d.expiresAt ? `, expires ${d.expiresAt}${r.expired ? ' (expired)' : ''}` : ''}`,
      ...(d.correlationId !== undefined ? [`corr. id  ${d.correlationId}`] : []),
      ...(d.task !== undefined ? [`task      ${d.task}`] : []),
      ...(d.supersedes ? [`replaces  ${d.supersedes}`] : []),
      ...(r.signatures.length ? [`signed    ${r.signed} valid signature(s) of ${r.signatures.length}`] : []),
      ...(d.summary ? ['', d.summary] : []),
      ...(d.findings.length ? ['', 'findings:', ...d.findings.map((f) => `  - ${f}`)] : []),
      ...(d.negative.length ? ['', 'negative results:', ...d.negative.map((f) => `  - ${f}`)] : []),
      ...(d.artifacts.length ? ['', 'artifacts:', ...d.artifacts.map((a) => `  ${a}`)] : []),
      ...(r.acceptances.length
        ? ['', 'accepted:', ...r.acceptances.map((a) => `  ${a.acceptedAt}  ${a.mode}  ${a.dir}`)]
        : []),
      ...(r.signatures.length ? ['', 'signatures:', ...signatureLines(r.signatures)] : []),
    ].join('\n');
  },
});

export const handoffVerifyCommand = defineCommand({
  path: ['handoff', 'verify'],
  tool: 'handoff_verify',
  description: 'check a handoff: id, schema, canonical bytes, parent snapshot, manifest hash, artifacts',
  input: { id: s.string().describe('handoff id (full or abbreviated)') },
  args: ['id'],
  names: ['id'],
  annotations: { readOnly: true, destructive: false, idempotent: true },
  output: s.looseObject({
    ok: s.boolean(),
    id: s.string(),
    ref: s.string(),
    commit: s.string(),
    snapshot: s.string(),
    expired: s.boolean(),
    checks: s.array(s.looseObject({ check: s.string(), ok: s.boolean().nullable() })),
    descriptor: s.looseObject({}),
    signatures: s.array(signatureShape),
  }),
  async run(input, ctx) {
    const { verifyHandoff } = await import('../handoff/verify');
    return verifyHandoff({ cwd: ctx.cwd, handoff: input.id });
  },
  human: (r) =>
    [
      `handoff ${r.id} is intact${r.expired ? ' (but expired)' : ''}`,
      ...r.checks.map((c) => `  ${c.check}: ok`),
      ...(r.signatures.length
        ? [
            `signatures: ${r.signatures.filter((s) => s.valid).length} valid of ${r.signatures.length}`,
            ...signatureLines(r.signatures),
          ]
        : []),
    ].join('\n'),
});

export const handoffAcceptCommand = defineCommand({
  path: ['handoff', 'accept'],
  tool: 'handoff_accept',
  description: 'verify a handoff, then restore (or --fork) its snapshot into <dir>',
  input: {
    id: s.string().describe('handoff id (full or abbreviated)'),
    dir: s.string().describe('directory to lay the snapshot in; must not exist or be empty'),
    fork: s.boolean().optional().describe('make a fork (linked worktree) instead of a new repository'),
    mode: s.enum(['auto', 'overlay', 'clone', 'copy']).optional().describe('fork mode (with --fork)'),
    allowExpired: s.boolean().optional().describe('accept a handoff past its expiry'),
    requireSigned: s
      .boolean()
      .optional()
      .describe(
        'refuse a handoff without a valid signature from an allowed signer (default: xet.handoff.requireSigned)',
      ),
    signer: s
      .string()
      .optional()
      .describe('refuse a handoff without a valid signature from this principal (implies --require-signed)'),
  },
  args: ['id', 'dir'],
  flags: { signer: { value: '<principal>' } },
  paths: { dir: 'target' },
  names: ['id'],
  annotations: { readOnly: false, destructive: false, idempotent: false },
  long: true,
  output: s.looseObject({
    handoff: s.string(),
    title: s.string(),
    from: s.string(),
    snapshot: s.string(),
    dir: s.string(),
    action: s.enum(['restore', 'fork']),
    mode: s.string(),
    expired: s.boolean(),
    fork: s.string().nullable(),
    files: s.number().nullable(),
    acceptedAt: s.string(),
    warnings: s.array(s.string()),
    signedBy: s.array(s.string()),
  }),
  async run(input, ctx) {
    const { acceptHandoff } = await import('../handoff/accept');
    return acceptHandoff({
      cwd: ctx.cwd,
      handoff: input.id,
      dir: input.dir,
      fork: input.fork,
      mode: input.mode,
      allowExpired: input.allowExpired,
      requireSigned: input.requireSigned,
      signer: input.signer,
      progress: ctx.progress,
    });
  },
  human: (r) =>
    [
      `accepted handoff ${r.handoff.slice(0, 12)} from ${r.from} ("${r.title}"): ${
        r.action === 'fork' ? `forked (${r.mode}, fork ${r.fork})` : 'restored'
      } snapshot ${r.snapshot.slice(0, 12)} into ${r.dir}`,
      ...r.warnings.map((w) => `warning: ${w}`),
    ].join('\n'),
});

export const handoffSignCommand = defineCommand({
  path: ['handoff', 'sign'],
  tool: 'handoff_sign',
  description:
    "sign a handoff's descriptor with git's signing setup (gpg.format, user.signingKey); a countersignature when others signed",
  input: { id: s.string().describe('handoff id (full or abbreviated)') },
  args: ['id'],
  names: ['id'],
  annotations: { readOnly: false, destructive: false, idempotent: false },
  output: storedSignatureShape,
  async run(input, ctx) {
    const { signHandoff } = await import('../handoff/sign');
    return signHandoff({ cwd: ctx.cwd, handoff: input.id });
  },
  human: (r) => `${r.id}  ${r.ref}${r.created ? '' : ' (already there)'}`,
});
