// Verifying a handoff: does what its ref points to deserve the id it is named by? A ref can come
// from anyone (a plain `git fetch`), so nothing is trusted: the descriptor's bytes must hash to the
// id, be the only thing in the commit's tree, be canonical and valid; the commit's one parent must
// be the snapshot the descriptor names; that snapshot's manifest must hash to manifestSha256; each
// artifact must be in its files. Checks are reported one by one; show, list and accept use the
// structural ones (no snapshot read) or all of them.

import * as crypto from 'node:crypto';
import { XetError, type ErrorCode } from '../errors';
import type { GitOptions } from '../git/exec';
import { catFileBatch } from '../git/plumbing';
import { findRepo, repoOpts } from '../git/repo';
import {
  handoffId,
  isCanonical,
  isExpired,
  NOT_CANONICAL,
  parseDescriptorBytes,
  validateDescriptor,
  type Descriptor,
} from './descriptor';
import { batchCheck, DESCRIPTOR_FILE, readRawHandoffs, resolveHandoff, type RawHandoff } from './objects';
import { checkSignatures, type SignatureReport } from './signatures';

export type CheckName = 'tree' | 'hash' | 'schema' | 'canonical' | 'parent' | 'snapshot' | 'manifest' | 'artifacts';

export interface Check {
  check: CheckName;
  /** null: not run, because what it needs failed first. */
  ok: boolean | null;
  /** What was wrong (failed checks only). */
  detail?: string;
  code?: ErrorCode;
}

export interface Inspection {
  id: string;
  ref: string;
  commit: string;
  /** The descriptor when it parsed and matched the schema (even if other checks failed). */
  descriptor: Descriptor | null;
  checks: Check[];
  ok: boolean;
}

// A failure of one of these means the objects are not what the id names (forged or damaged);
// the others mean the named content itself breaks the format.
const CODE_OF: Record<CheckName, ErrorCode> = {
  tree: 'INTEGRITY_MISMATCH',
  hash: 'INTEGRITY_MISMATCH',
  parent: 'INTEGRITY_MISMATCH',
  manifest: 'INTEGRITY_MISMATCH',
  schema: 'HANDOFF_INVALID',
  canonical: 'HANDOFF_INVALID',
  artifacts: 'HANDOFF_INVALID',
  snapshot: 'SNAPSHOT_NOT_FOUND',
};
const PRIORITY: ErrorCode[] = ['INTEGRITY_MISMATCH', 'SCHEMA_UNSUPPORTED', 'HANDOFF_INVALID', 'SNAPSHOT_NOT_FOUND'];

const pass = (check: CheckName): Check => ({ check, ok: true });
const skip = (check: CheckName): Check => ({ check, ok: null });
const fail = (check: CheckName, detail: string, code: ErrorCode = CODE_OF[check]): Check => ({
  check,
  ok: false,
  detail,
  code,
});

/** The checks that need only the handoff's own objects: tree, hash, schema, canonical, parent. */
export function checkStructure(raw: RawHandoff): Inspection {
  const checks: Check[] = [];
  const extra = raw.entries.filter((e) => e.name !== DESCRIPTOR_FILE).map((e) => e.name);
  const own = raw.entries.find((e) => e.name === DESCRIPTOR_FILE);
  if (raw.bytesProblem) checks.push(fail('tree', raw.bytesProblem));
  else if (extra.length) {
    checks.push(fail('tree', `the commit's tree holds more than ${DESCRIPTOR_FILE}: ${extra.slice(0, 5).join(', ')}`));
  } else if (own?.mode !== '100644') checks.push(fail('tree', `${DESCRIPTOR_FILE} has mode ${own?.mode}, not 100644`));
  else checks.push(pass('tree'));

  let descriptor: Descriptor | null = null;
  const bytes = raw.bytes;
  if (!bytes) checks.push(skip('hash'), skip('schema'), skip('canonical'));
  else {
    const actual = handoffId(bytes);
    checks.push(
      actual === raw.id
        ? pass('hash')
        : fail('hash', `${DESCRIPTOR_FILE} hashes to ${actual}, not to the id ${raw.id} its ref is named by`),
    );
    let parsed: { value: unknown; text: string } | null = null;
    try {
      parsed = parseDescriptorBytes(bytes);
      descriptor = validateDescriptor(parsed.value);
      checks.push(pass('schema'));
    } catch (e) {
      if (!(e instanceof XetError)) throw e;
      checks.push(fail('schema', e.message, e.code));
    }
    if (!parsed) checks.push(skip('canonical'));
    else checks.push(isCanonical(parsed.value, parsed.text) ? pass('canonical') : fail('canonical', NOT_CANONICAL));
  }

  if (!descriptor) checks.push(skip('parent'));
  else if (raw.parents.length === 1 && raw.parents[0] === descriptor.snapshot.oid) checks.push(pass('parent'));
  else {
    checks.push(
      fail(
        'parent',
        `the commit's parents are [${raw.parents.join(', ')}]; a handoff commit has exactly one: the snapshot ${descriptor.snapshot.oid}`,
      ),
    );
  }
  return { id: raw.id, ref: raw.ref, commit: raw.commit, descriptor, checks, ok: checks.every((c) => c.ok !== false) };
}

/** The checks that read the snapshot: it is here, its manifest hashes right, the artifacts are in it. */
export async function checkSnapshot(
  d: Descriptor,
  opts: GitOptions,
  read?: { oid: string; manifestBytes: Buffer; commit?: boolean },
): Promise<Check[]> {
  const snap = d.snapshot.oid;
  // A snapshot this process has just read (readSnapshot: the same size-checked read of its
  // manifest.json as below) is checked with the bytes it read; the rest is looked up as below
  // (nothing, when the caller found the snapshot a commit and the descriptor names no artifact).
  if (read && read.oid === snap) {
    const found =
      read.commit && !d.artifacts.length
        ? [{ type: 'commit' }]
        : await batchCheck([snap, ...d.artifacts.map((a) => `${snap}:files/${a}`)], opts);
    return snapshotChecks(d, found, { type: 'blob', data: read.manifestBytes }, undefined);
  }
  const [found, manifests] = await Promise.all([
    batchCheck([snap, ...d.artifacts.map((a) => `${snap}:files/${a}`)], opts),
    catFileBatch([`${snap}:manifest.json`], opts),
  ]);
  return snapshotChecks(
    d,
    found,
    manifests.get(`${snap}:manifest.json`),
    manifests.oversized.get(`${snap}:manifest.json`),
  );
}

function snapshotChecks(
  d: Descriptor,
  found: ({ type: string } | null | undefined)[],
  manifest: { type: string; data: Buffer } | null | undefined,
  big: number | undefined,
): Check[] {
  const snap = d.snapshot.oid;
  if (found[0]?.type !== 'commit') {
    return [fail('snapshot', `the snapshot ${snap} is not in this repository`), skip('manifest'), skip('artifacts')];
  }
  const checks: Check[] = [pass('snapshot')];
  if (big !== undefined)
    checks.push(fail('manifest', `the snapshot's manifest.json is ${big} bytes, larger than any real one`));
  else if (!manifest || manifest.type !== 'blob')
    checks.push(fail('manifest', `the commit ${snap} has no manifest.json`));
  else {
    const sha = crypto.createHash('sha256').update(manifest.data).digest('hex');
    checks.push(
      sha === d.snapshot.manifestSha256
        ? pass('manifest')
        : fail('manifest', `the snapshot's manifest.json hashes to ${sha}, not ${d.snapshot.manifestSha256}`),
    );
  }
  const missing = d.artifacts.filter((_, n) => found[n + 1]?.type !== 'blob');
  checks.push(
    missing.length
      ? fail(
          'artifacts',
          `${missing.length} artifact(s) not a file or symlink in the snapshot: ${missing
            .slice(0, 5)
            .map((p) => JSON.stringify(p))
            .join(', ')}`,
        )
      : pass('artifacts'),
  );
  return checks;
}

/** All checks of one handoff. */
export async function inspectHandoff(raw: RawHandoff, opts: GitOptions): Promise<Inspection> {
  const ins = checkStructure(raw);
  const more = ins.descriptor
    ? await checkSnapshot(ins.descriptor, opts)
    : [skip('snapshot'), skip('manifest'), skip('artifacts')];
  const checks = [...ins.checks, ...more];
  return { ...ins, checks, ok: checks.every((c) => c.ok !== false) };
}

/** The gravest error code among failed checks, or null when none failed. */
export function failureCode(checks: Check[]): ErrorCode | null {
  const codes = new Set(checks.filter((c) => c.ok === false).map((c) => c.code));
  if (!codes.size) return null;
  return PRIORITY.find((c) => codes.has(c)) ?? 'INTEGRITY_MISMATCH';
}

/** The typed error for a failed inspection, with every check in its details, or null. */
export function inspectionError(ins: Inspection, now = new Date()): XetError | null {
  const code = failureCode(ins.checks);
  if (!code) return null;
  const failed = ins.checks.filter((c) => c.ok === false);
  return new XetError(
    code,
    `handoff ${ins.id.slice(0, 12)} failed verification: ${failed.map((c) => `${c.check}: ${c.detail}`).join('; ')}`,
    {
      id: ins.id,
      ref: ins.ref,
      commit: ins.commit,
      checks: ins.checks,
      expired: ins.descriptor ? isExpired(ins.descriptor, now) : null,
    },
  );
}

export interface VerifyHandoffResult {
  ok: true;
  id: string;
  ref: string;
  commit: string;
  snapshot: string;
  expired: boolean;
  checks: Check[];
  descriptor: Descriptor;
  /** Every signature of the handoff, each checked (valid or not, and why). */
  signatures: SignatureReport[];
}

/** Verify one handoff completely; a failure is thrown (INTEGRITY_MISMATCH, HANDOFF_INVALID…) with the checks. */
export async function verifyHandoff(options: { cwd: string; handoff: string }): Promise<VerifyHandoffResult> {
  const repo = await findRepo(options.cwd, true);
  const opts = repoOpts(repo);
  return verifyResolved(await resolveHandoff(options.handoff, opts), opts);
}

export async function verifyResolved(
  ref: { id: string; ref: string; commit: string },
  opts: GitOptions,
  signer?: string,
): Promise<VerifyHandoffResult> {
  const [raw] = await readRawHandoffs([ref], opts);
  const ins = await inspectHandoff(raw, opts);
  const err = inspectionError(ins);
  if (err || !ins.descriptor) throw err ?? new XetError('HANDOFF_INVALID', `handoff ${ref.id} has no descriptor`);
  return {
    ok: true,
    id: ins.id,
    ref: ins.ref,
    commit: ins.commit,
    snapshot: ins.descriptor.snapshot.oid,
    expired: isExpired(ins.descriptor),
    checks: ins.checks,
    descriptor: ins.descriptor,
    signatures: await checkSignatures(
      { id: ins.id, commit: ins.commit, bytes: raw.bytes as Buffer },
      opts,
      undefined,
      signer,
    ),
  };
}
