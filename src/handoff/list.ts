// Listing and showing handoffs. Both read every ref's objects without trusting them (structural
// checks from verify.ts): list marks a forged or broken handoff `valid: false` instead of failing,
// show refuses to present one as a handoff (`verify` says what is wrong with it).

import { findRepo, repoOpts } from '../git/repo';
import { withExistingSidecar } from '../sidecar/db';
import { acceptanceCounts, acceptancesOf, type AcceptanceRow } from '../sidecar/handoffs';
import { displaySafe, isExpired, type Descriptor } from './descriptor';
import { listHandoffRefs, readRawHandoffs, resolveHandoff } from './objects';
import { checkStructure, inspectionError } from './verify';
import { readConfig } from '../git/config';
import { checkSignatures, listSignatureRefs, parseSignatureRef, trustedBy, type SignatureReport } from './signatures';

export interface HandoffSummary {
  id: string;
  /** Whether the structural checks passed (hash, tree, schema, canonical, parent). */
  valid: boolean;
  /** The failed checks of an invalid handoff. */
  problems: string[];
  title: string | null;
  from: string | null;
  to: string[];
  snapshot: string | null;
  createdAt: string | null;
  expiresAt: string | null;
  expired: boolean;
  supersedes: string | null;
  /** Ids of valid handoffs here that supersede this one. */
  supersededBy: string[];
  correlationId: string | null;
  /** The task it hands over (handoff create --task), if any. */
  task: string | null;
  /** How many times it was accepted in this repository. */
  accepted: number;
  /** How many valid signatures (from allowed principals) it carries. */
  signed: number;
}

export async function listHandoffs(options: { cwd: string; to?: string; from?: string }): Promise<HandoffSummary[]> {
  const repo = await findRepo(options.cwd, true);
  const opts = repoOpts(repo);
  const raws = await readRawHandoffs(await listHandoffRefs(opts), opts);
  const counts = withExistingSidecar(repo.commonDir, acceptanceCounts) ?? new Map<string, number>();
  const now = new Date();
  const all = raws.map((raw): HandoffSummary => {
    const ins = checkStructure(raw);
    const d: Descriptor | null = ins.descriptor;
    return {
      id: ins.id,
      valid: ins.ok,
      // A forged ref's name is quoted in its problems: printed escaped, it cannot spoof other lines.
      problems: ins.checks.filter((c) => c.ok === false).map((c) => displaySafe(`${c.check}: ${c.detail}`)),
      title: d?.title ?? null,
      from: d?.from ?? null,
      to: d?.to ?? [],
      snapshot: d?.snapshot.oid ?? null,
      createdAt: d?.createdAt ?? null,
      expiresAt: d?.expiresAt ?? null,
      expired: d ? isExpired(d, now) : false,
      supersedes: d?.supersedes ?? null,
      supersededBy: [],
      correlationId: d?.correlationId ?? null,
      task: d?.task ?? null,
      accepted: counts.get(ins.id) ?? 0,
      signed: 0,
    };
  });
  // Signatures are checked only where there are any: one listing of the refs for all handoffs.
  const signedIds = new Set(
    (await listSignatureRefs(opts)).map((r) => parseSignatureRef(r.name)?.handoff).filter((x) => x !== undefined),
  );
  if (signedIds.size) {
    const config = await readConfig(opts);
    for (const raw of raws) {
      const h = all.find((x) => x.id === raw.id);
      if (!h?.valid || !signedIds.has(raw.id) || !raw.bytes) continue;
      h.signed = (await checkSignatures({ id: raw.id, commit: raw.commit, bytes: raw.bytes }, opts, config)).filter(
        (s) => trustedBy(s),
      ).length;
    }
  }
  const byId = new Map(all.map((h) => [h.id, h]));
  for (const h of all) if (h.valid && h.supersedes) byId.get(h.supersedes)?.supersededBy.push(h.id);
  // A filter matches on what the descriptor says; one that could not be read matches no filter.
  const out = all.filter(
    (h) =>
      (options.to === undefined || h.to.includes(options.to)) &&
      (options.from === undefined || h.from === options.from),
  );
  return out.sort((a, b) =>
    (a.createdAt ?? '') !== (b.createdAt ?? '')
      ? (a.createdAt ?? '') < (b.createdAt ?? '')
        ? 1
        : -1
      : a.id < b.id
        ? -1
        : 1,
  );
}

export interface ShowHandoffResult {
  id: string;
  ref: string;
  commit: string;
  expired: boolean;
  descriptor: Descriptor;
  acceptances: Omit<AcceptanceRow, 'handoff'>[];
  /** How many valid signatures it carries, and each signature checked. */
  signed: number;
  signatures: SignatureReport[];
}

/** One handoff's descriptor, after the structural checks (a forged one is an error, not a display). */
export async function showHandoff(options: { cwd: string; handoff: string }): Promise<ShowHandoffResult> {
  const repo = await findRepo(options.cwd, true);
  const opts = repoOpts(repo);
  const [raw] = await readRawHandoffs([await resolveHandoff(options.handoff, opts)], opts);
  const ins = checkStructure(raw);
  const err = inspectionError(ins);
  if (err) throw err;
  const d = ins.descriptor as Descriptor;
  const rows = withExistingSidecar(repo.commonDir, (db) => acceptancesOf(db, ins.id)) ?? [];
  const signatures = await checkSignatures({ id: ins.id, commit: ins.commit, bytes: raw.bytes as Buffer }, opts);
  return {
    id: ins.id,
    ref: ins.ref,
    commit: ins.commit,
    expired: isExpired(d),
    descriptor: d,
    acceptances: rows.map((r) => ({ dir: r.dir, mode: r.mode, snapshot: r.snapshot, acceptedAt: r.acceptedAt })),
    signed: signatures.filter((s) => trustedBy(s)).length,
    signatures,
  };
}
