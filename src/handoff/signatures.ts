// Handoff signatures (xet.handoff-signature/v1): how one lives in Git and how it is read back. A
// signature is its own create-once ref `refs/xet/signatures/<handoff-id>/<sig-id>` → a commit built
// byte for byte (fixed identity, date = signedAt) whose one parent is the handoff commit and whose
// tree holds `signature.json` (canonical JSON: handoff, format, namespace, signedAt) and `signature`
// (the armored signature of the descriptor's canonical bytes); `<sig-id>` is the sha256 of the
// armored bytes. The handoff and its id are untouched: signing adds refs beside it. Everything
// read back is hostile (refs travel by plain fetch): sizes before reads, every name and id checked,
// and a signature whose objects do not deserve its name is reported invalid, never trusted.

import * as crypto from 'node:crypto';
import { XetError } from '../errors';
import { readConfig, type GitConfig } from '../git/config';
import { git, gitText, type GitOptions } from '../git/exec';
import { objectId } from '../git/object-id';
import { catFileBatch, listRefs } from '../git/plumbing';
import type { Repo } from '../git/repo';
import { commitParents } from './objects';
import { canonicalJson } from '../snapshot/canonical-json';
import { isoSeconds } from './descriptor';
import { SIGNATURE_NAMESPACE, signBytes, verdict, verifyBytes, type SignatureFormat, type Verdict } from './signer';

export const SIGNATURE_REF_PREFIX = 'refs/xet/signatures/';
export const SIGNATURE_SCHEMA = 'xet.handoff-signature/v1';
const META_FILE = 'signature.json';
const SIG_FILE = 'signature';
const IDENTITY = 'git xet <git-xet@localhost>';
/** An armored ssh or OpenPGP signature is a few hundred bytes to a few KiB (RSA-4096 ~ 1 KiB). */
export const SIGNATURE_MAX_BYTES = 16 * 1024;
const OBJECT_MAX_BYTES = 64 * 1024;
const HEX64 = /^[0-9a-f]{64}$/;
const TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

export interface SignatureMeta {
  schema: typeof SIGNATURE_SCHEMA;
  handoff: string;
  format: SignatureFormat;
  namespace: string;
  signedAt: string;
}

export function signatureRef(handoff: string, sigId: string): string {
  return `${SIGNATURE_REF_PREFIX}${handoff}/${sigId}`;
}

export function signaturePrefix(handoff: string): string {
  return `${SIGNATURE_REF_PREFIX}${handoff}/`;
}

/** `refs/xet/signatures/<handoff>/<sig>` → its two ids, or null for any other name. */
export function parseSignatureRef(ref: string): { handoff: string; sigId: string } | null {
  if (!ref.startsWith(SIGNATURE_REF_PREFIX)) return null;
  const parts = ref.slice(SIGNATURE_REF_PREFIX.length).split('/');
  if (parts.length !== 2 || !HEX64.test(parts[0]) || !HEX64.test(parts[1])) return null;
  return { handoff: parts[0], sigId: parts[1] };
}

export const sigIdOf = (armored: Buffer): string => crypto.createHash('sha256').update(armored).digest('hex');

interface Obj {
  oid: string;
  type: 'blob' | 'tree' | 'commit';
  bytes: Buffer;
}

/** The objects of a signature, built by hand like handoff commits: one signature, one commit. */
export function signatureObjects(
  meta: SignatureMeta,
  armored: Buffer,
  handoffCommit: string,
  format: Repo['objectFormat'],
): { objects: Obj[]; commit: string; metaBytes: Buffer } {
  const metaBytes = Buffer.from(canonicalJson(meta), 'utf8');
  const metaOid = objectId('blob', metaBytes, format);
  const sigOid = objectId('blob', armored, format);
  // Git sorts tree entries by name: "signature" before "signature.json".
  const tree = Buffer.concat([
    Buffer.from(`100644 ${SIG_FILE}\0`, 'utf8'),
    Buffer.from(sigOid, 'hex'),
    Buffer.from(`100644 ${META_FILE}\0`, 'utf8'),
    Buffer.from(metaOid, 'hex'),
  ]);
  const treeOid = objectId('tree', tree, format);
  const when = `${Math.floor(Date.parse(meta.signedAt) / 1000)} +0000`;
  const commit = Buffer.from(
    [
      `tree ${treeOid}`,
      `parent ${handoffCommit}`,
      `author ${IDENTITY} ${when}`,
      `committer ${IDENTITY} ${when}`,
      '',
      `xet handoff signature: ${meta.handoff.slice(0, 12)} (${meta.format})`,
      '',
      `Schema: ${SIGNATURE_SCHEMA}`,
      '',
    ].join('\n'),
    'utf8',
  );
  const commitOid = objectId('commit', commit, format);
  return {
    objects: [
      { oid: metaOid, type: 'blob', bytes: metaBytes },
      { oid: sigOid, type: 'blob', bytes: armored },
      { oid: treeOid, type: 'tree', bytes: tree },
      { oid: commitOid, type: 'commit', bytes: commit },
    ],
    commit: commitOid,
    metaBytes,
  };
}

/** A signature made but not yet stored: signing happens before anything is written. */
export interface PendingSignature {
  handoff: string;
  sigId: string;
  format: SignatureFormat;
  signedAt: string;
  armored: Buffer;
}

/** Sign a handoff's canonical descriptor bytes with the user's Git signing setup (SIGNING_FAILED). */
export async function makeSignature(
  handoff: string,
  bytes: Buffer,
  config: GitConfig,
  now = new Date(),
): Promise<PendingSignature> {
  const { format, armored } = await signBytes(bytes, config);
  if (armored.length > SIGNATURE_MAX_BYTES) {
    throw new XetError('SIGNING_FAILED', `the signature is ${armored.length} bytes; at most ${SIGNATURE_MAX_BYTES}`);
  }
  return { handoff, sigId: sigIdOf(armored), format, signedAt: isoSeconds(now), armored };
}

export interface StoredSignature {
  handoff: string;
  id: string;
  ref: string;
  commit: string;
  format: SignatureFormat;
  signedAt: string;
  /** false: the identical signature was already there (ed25519 signatures are deterministic). */
  created: boolean;
}

/** Write a signature's objects, then its create-once ref. */
export async function storeSignature(
  p: PendingSignature,
  handoffCommit: string,
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<StoredSignature> {
  const meta: SignatureMeta = {
    schema: SIGNATURE_SCHEMA,
    handoff: p.handoff,
    format: p.format,
    namespace: SIGNATURE_NAMESPACE,
    signedAt: p.signedAt,
  };
  const ref = signatureRef(p.handoff, p.sigId);
  const existing = await refValue(ref, opts);
  if (existing) {
    // The same armored bytes stored before, perhaps at another time: that signature stands.
    return {
      handoff: p.handoff,
      id: p.sigId,
      ref,
      commit: existing,
      format: p.format,
      signedAt: p.signedAt,
      created: false,
    };
  }
  const built = signatureObjects(meta, p.armored, handoffCommit, format);
  for (const o of built.objects) {
    const oid = await gitText(['hash-object', '-w', '--no-filters', '-t', o.type, '--stdin'], {
      ...opts,
      input: o.bytes,
    });
    if (oid !== o.oid) {
      throw new XetError('INTEGRITY_MISMATCH', `git stored the signature ${o.type} as ${oid}, expected ${o.oid}`);
    }
  }
  const zero = '0'.repeat(format === 'sha256' ? 64 : 40);
  const r = await git(['update-ref', '-m', 'git xet handoff sign', ref, built.commit, zero], {
    ...opts,
    okCodes: [1, 128],
  });
  let created = r.code === 0;
  if (!created) {
    const now = await refValue(ref, opts);
    if (!now) throw new XetError('GIT_FAILED', `cannot create ${ref}: ${r.stderr.trim()}`, { ref });
    created = false;
    return { handoff: p.handoff, id: p.sigId, ref, commit: now, format: p.format, signedAt: p.signedAt, created };
  }
  return {
    handoff: p.handoff,
    id: p.sigId,
    ref,
    commit: built.commit,
    format: p.format,
    signedAt: p.signedAt,
    created,
  };
}

async function refValue(ref: string, opts: GitOptions): Promise<string | null> {
  const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', ref], { ...opts, okCodes: [1, 128] });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : null;
}

/** A signature ref as read back: its claimed content and what is wrong with its objects, if anything. */
export interface RawSignature {
  handoff: string;
  id: string;
  ref: string;
  commit: string;
  meta: SignatureMeta | null;
  armored: Buffer | null;
  /** Why the objects do not deserve the ref's name (forged or damaged); null when they do. */
  problem: string | null;
}

/** The signature refs of these handoffs (all handoffs when `handoffs` is undefined). */
export async function listSignatureRefs(
  opts: GitOptions,
  handoffs?: string[],
): Promise<{ name: string; oid: string }[]> {
  const patterns = handoffs ? handoffs.map(signaturePrefix) : [SIGNATURE_REF_PREFIX];
  if (!patterns.length) return [];
  return listRefs(patterns, opts);
}

/**
 * Read signature refs without trusting them. A ref is structurally sound when its name is
 * `<handoff-id>/<sig-id>`, its commit's one parent is `handoffCommits.get(handoff)`, its tree is
 * exactly the two files, the signature hashes to its sig-id, signature.json is canonical, names
 * this handoff and a known format, and the commit is byte for byte the one these contents make.
 */
export async function readRawSignatures(
  refs: { name: string; oid: string }[],
  handoffCommits: Map<string, string>,
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<RawSignature[]> {
  if (!refs.length) return [];
  const names = refs.flatMap((r) => [r.oid, `${r.oid}^{tree}`, `${r.oid}:${META_FILE}`, `${r.oid}:${SIG_FILE}`]);
  // catFileBatch asks every size first: a forged gigabyte object is never read.
  const got = await catFileBatch([...new Set(names)], opts, OBJECT_MAX_BYTES);
  return refs.map((r): RawSignature => {
    const parsed = parseSignatureRef(r.name);
    const base = {
      handoff: parsed?.handoff ?? '',
      id: parsed?.sigId ?? '',
      ref: r.name,
      commit: r.oid,
      meta: null,
      armored: null,
    };
    const bad = (problem: string): RawSignature => ({ ...base, problem });
    if (!parsed) return bad('the ref is not named refs/xet/signatures/<handoff-id>/<sig-id> (64 hex digits each)');
    const commit = got.get(r.oid);
    if (got.oversized.has(r.oid)) return bad(`the ref leads to a ${got.oversized.get(r.oid)}-byte object`);
    if (commit?.type !== 'commit') return bad('the ref does not point to a commit');
    const handoffCommit = handoffCommits.get(parsed.handoff);
    const parents = commitParents(commit.data);
    if (!handoffCommit) return bad(`there is no handoff ${parsed.handoff} here to be its parent`);
    if (parents.length !== 1 || parents[0] !== handoffCommit) {
      return bad(`the commit's parents are [${parents.join(', ')}], not the handoff commit ${handoffCommit}`);
    }
    const metaObj = got.get(`${r.oid}:${META_FILE}`);
    const sigObj = got.get(`${r.oid}:${SIG_FILE}`);
    if (metaObj?.type !== 'blob' || sigObj?.type !== 'blob') {
      return bad(`the commit's tree lacks ${META_FILE} or ${SIG_FILE} (or one is too large)`);
    }
    if (sigObj.data.length > SIGNATURE_MAX_BYTES)
      return bad(`the signature is larger than ${SIGNATURE_MAX_BYTES} bytes`);
    const armored = Buffer.from(sigObj.data);
    const actual = sigIdOf(armored);
    if (actual !== parsed.sigId)
      return bad(`the signature hashes to ${actual}, not to the id ${parsed.sigId} its ref is named by`);
    let meta: SignatureMeta;
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(metaObj.data);
      const v = JSON.parse(text) as Record<string, unknown>;
      if (canonicalJson(v) !== text) return bad(`${META_FILE} is not canonical JSON`);
      const keys = Object.keys(v).sort().join(',');
      if (
        keys !== 'format,handoff,namespace,schema,signedAt' ||
        v.schema !== SIGNATURE_SCHEMA ||
        (v.format !== 'ssh' && v.format !== 'openpgp') ||
        v.namespace !== SIGNATURE_NAMESPACE ||
        typeof v.signedAt !== 'string' ||
        !TIME_RE.test(v.signedAt) ||
        Number.isNaN(Date.parse(v.signedAt))
      ) {
        return bad(`${META_FILE} is not a ${SIGNATURE_SCHEMA} record`);
      }
      meta = v as unknown as SignatureMeta;
    } catch {
      return bad(`${META_FILE} is not UTF-8 JSON`);
    }
    if (meta.handoff !== parsed.handoff)
      return bad(`${META_FILE} is for handoff ${meta.handoff}, not ${parsed.handoff}`);
    // The whole commit must be the one these contents make: no extra files, headers or message.
    const rebuilt = signatureObjects(meta, armored, handoffCommit, format).commit;
    if (rebuilt !== r.oid) return bad(`the commit is not the one its contents make (${rebuilt})`);
    return { ...base, meta, armored, problem: null };
  });
}

/** A repository's object format, from the length of one of its ids. */
export const formatOf = (oid: string): Repo['objectFormat'] => (oid.length === 64 ? 'sha256' : 'sha1');

/** One signature as verify reports it. */
export interface SignatureReport extends Verdict {
  id: string;
  ref: string;
  commit: string;
  format: SignatureFormat | null;
  signedAt: string | null;
}

/**
 * Every signature of one handoff, checked: structure first (readRawSignatures), then the
 * cryptography over the descriptor's bytes with the user's allowed signers / keyring. Sorted by id.
 */
export async function checkSignatures(
  handoff: { id: string; commit: string; bytes: Buffer },
  opts: GitOptions,
  config?: GitConfig,
  /** Also ask whether each ssh signature verifies as this identity (accept --signer). */
  identity?: string,
): Promise<SignatureReport[]> {
  const format = formatOf(handoff.commit);
  const refs = await listSignatureRefs(opts, [handoff.id]);
  if (!refs.length) return [];
  const raws = await readRawSignatures(refs, new Map([[handoff.id, handoff.commit]]), format, opts);
  const cfg = config ?? (await readConfig(opts));
  const out: SignatureReport[] = [];
  for (const raw of raws) {
    const base = {
      id: raw.id || raw.ref.slice(SIGNATURE_REF_PREFIX.length),
      ref: raw.ref,
      commit: raw.commit,
      format: raw.meta?.format ?? null,
      signedAt: raw.meta?.signedAt ?? null,
    };
    if (raw.problem || !raw.meta || !raw.armored) {
      out.push({ ...base, ...verdict({ problem: raw.problem ?? 'unreadable' }) });
      continue;
    }
    const v = await verifyBytes(handoff.bytes, raw.meta.format, raw.armored, cfg, new Date(), identity);
    out.push({ ...base, ...v });
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Whether a report is a valid signature from `signer` (any allowed signer when undefined); for ssh,
 * checkSignatures must have been asked about `signer` (ssh-keygen matches it against patterns). */
export function trustedBy(s: SignatureReport, signer?: string): boolean {
  return s.valid && (signer === undefined || s.principals.includes(signer));
}
