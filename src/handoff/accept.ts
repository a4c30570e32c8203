// Accepting a handoff: verify it completely (nothing is laid down for a handoff that fails any check
// or has expired), then restore its snapshot into a directory or fork it there, and record the
// acceptance in the sidecar. Restore and fork do their own target and path checks and clean up
// after themselves on failure.

import { withObjectsShared } from '../gc/objects-lock';
import * as fs from 'node:fs';
import { XetError } from '../errors';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { withSidecar } from '../sidecar/db';
import { recordAcceptance, type AcceptMode } from '../sidecar/handoffs';
import type { RequestedMode } from '../workspace/fork';
import { isoSeconds } from './descriptor';
import { resolveHandoff } from './objects';
import { verifyResolved } from './verify';
import { trustedBy } from './signatures';
import { isPattern } from './signer';
import { readConfig } from '../git/config';

export interface AcceptHandoffOptions {
  cwd: string;
  handoff: string;
  dir: string;
  /** Fork the snapshot (a linked worktree) instead of restoring it as a new repository. */
  fork?: boolean;
  mode?: RequestedMode;
  allowExpired?: boolean;
  /** Refuse (HANDOFF_UNTRUSTED) without a valid signature from an allowed principal (default: git
   * config xet.handoff.requireSigned); `signer` implies it and names the principal. */
  requireSigned?: boolean;
  signer?: string;
  progress?: (what: string) => void;
}

export interface AcceptHandoffResult {
  handoff: string;
  title: string;
  from: string;
  snapshot: string;
  dir: string;
  action: 'restore' | 'fork';
  mode: AcceptMode;
  expired: boolean;
  /** The fork's id (action "fork"). */
  fork: string | null;
  files: number | null;
  acceptedAt: string;
  warnings: string[];
  /** Principals of the valid signatures the handoff carries. */
  signedBy: string[];
}

// Holds the objects lock shared for its whole run: a gc never collects what it is making reachable.
export async function acceptHandoff(options: AcceptHandoffOptions): Promise<AcceptHandoffResult> {
  if (options.mode !== undefined && !options.fork) {
    throw new XetError('USAGE', '--mode applies to --fork only (a plain accept restores)');
  }
  // A signer is one identity, never a pattern: ssh-keygen matches -I literally against the
  // allowed-signers patterns, so `*@example.com` would pass for any key on a `*@example.com` (or
  // `*`) line and read as "anyone from example.com" — the opposite of naming who must have signed.
  if (options.signer !== undefined && (!options.signer || isPattern(options.signer) || /\s/.test(options.signer))) {
    throw new XetError(
      'USAGE',
      `--signer takes one identity (alice@example.com), not a pattern or list: ${JSON.stringify(options.signer)}`,
      { signer: options.signer },
    );
  }
  const repo = await findRepo(options.cwd, true);
  return withObjectsShared(repo.commonDir, () => acceptHandoffShared(options, repo));
}

async function acceptHandoffShared(options: AcceptHandoffOptions, repo: Repo): Promise<AcceptHandoffResult> {
  const opts = repoOpts(repo);
  const v = await verifyResolved(await resolveHandoff(options.handoff, opts), opts, options.signer);
  const d = v.descriptor;
  if (v.expired && !options.allowExpired) {
    throw new XetError(
      'HANDOFF_INVALID',
      `handoff ${v.id.slice(0, 12)} expired at ${d.expiresAt}; pass --allow-expired to accept it anyway`,
      { id: v.id, expiresAt: d.expiresAt, expired: true },
    );
  }
  // Identities only: a key allowed under a pattern alone names nobody until --signer asks ssh-keygen.
  const signedBy = [...new Set(v.signatures.filter((s) => trustedBy(s)).flatMap((s) => s.principals))];
  const required =
    options.signer !== undefined ||
    (options.requireSigned ?? (await readConfig(opts)).getBool('xet.handoff.requireSigned') ?? false);
  if (required && !v.signatures.some((s) => trustedBy(s, options.signer))) {
    const why = v.signatures.length
      ? v.signatures.map(
          (s) =>
            `${s.id.slice(0, 12)}: ${s.valid ? `signed by ${[...s.principals, ...s.patterns.map((p) => `a key allowed for ${p}`)].join(', ')}` : s.problem}`,
        )
      : ['it carries no signature'];
    throw new XetError(
      'HANDOFF_UNTRUSTED',
      `handoff ${v.id.slice(0, 12)} has no valid signature from ${
        options.signer !== undefined ? JSON.stringify(options.signer) : 'an allowed signer'
      } (${why.join('; ')}); nothing was written`,
      { id: v.id, signer: options.signer ?? null, signatures: v.signatures },
    );
  }
  options.progress?.('handoff verified');
  let dir: string;
  let mode: AcceptMode;
  let fork: string | null = null;
  let files: number | null = null;
  const warnings: string[] = [];
  if (options.fork) {
    const { createFork } = await import('../workspace/fork');
    const r = await createFork({
      cwd: options.cwd,
      snapshot: v.snapshot,
      dir: options.dir,
      mode: options.mode ?? 'auto',
      progress: options.progress,
    });
    ({ dir, mode } = r);
    fork = r.id;
  } else {
    const { restore } = await import('../snapshot/restore');
    const r = await restore({ cwd: options.cwd, snapshot: v.snapshot, dir: options.dir, progress: options.progress });
    dir = r.dir;
    mode = 'restore';
    files = r.files;
    warnings.push(...r.warnings);
  }
  const acceptedAt = isoSeconds(new Date());
  try {
    const real = fs.realpathSync(dir);
    withSidecar(repo.commonDir, (db) =>
      recordAcceptance(db, { handoff: v.id, dir: real, mode, snapshot: v.snapshot, acceptedAt }),
    );
    dir = real;
  } catch (e) {
    // The copy stands; only the ledger entry is missing.
    warnings.push(`the acceptance could not be recorded in the sidecar: ${(e as Error).message}`);
  }
  return {
    handoff: v.id,
    title: d.title,
    from: d.from,
    snapshot: v.snapshot,
    dir,
    action: options.fork ? 'fork' : 'restore',
    mode,
    expired: v.expired,
    fork,
    files,
    acceptedAt,
    warnings,
    signedBy,
  };
}
