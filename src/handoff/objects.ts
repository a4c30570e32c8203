// How a handoff lives in Git: a commit whose tree holds exactly `descriptor.json` and whose one
// parent is the snapshot commit, under the create-once ref `refs/xet/handoffs/<id>`. This module
// owns that layout: building the objects (deterministically, so one descriptor is one commit on
// every machine), publishing the ref, finding refs by (abbreviated) id and reading back what a ref
// really holds, which may be anything: refs travel by plain `git fetch` and can be forged.

import { writeLooseObject } from '../git/loose-writer';
import { XetError } from '../errors';
import { git, gitText, type GitOptions } from '../git/exec';
import { catFileBatch, listRefs } from '../git/plumbing';
import type { Repo } from '../git/repo';
import { objectId } from '../git/object-id';
import { parseTreeObject } from '../git/tree-object';
import { HANDOFF_SCHEMA, LIMITS, type Descriptor } from './descriptor';

export const HANDOFF_REF_PREFIX = 'refs/xet/handoffs/';
export const DESCRIPTOR_FILE = 'descriptor.json';
/** The identity of every handoff commit: the commit must not depend on who or where. */
const IDENTITY = 'git xet <git-xet@localhost>';
const ID_RE = /^[0-9a-f]{64}$/;
const HANDOFF_OBJECT_MAX_BYTES = 1024 * 1024;

export interface HandoffObjects {
  blob: { oid: string; bytes: Buffer };
  tree: { oid: string; bytes: Buffer };
  commit: { oid: string; bytes: Buffer };
}

/**
 * The three objects of a handoff, with their ids, from its canonical bytes. Built by hand rather
 * than with `commit-tree`, which would bring in the user's identity, clock and commit.gpgSign.
 */
export function handoffObjects(bytes: Buffer, d: Descriptor, format: Repo['objectFormat']): HandoffObjects {
  const blobOid = objectId('blob', bytes, format);
  const tree = Buffer.concat([Buffer.from(`100644 ${DESCRIPTOR_FILE}\0`, 'utf8'), Buffer.from(blobOid, 'hex')]);
  const treeOid = objectId('tree', tree, format);
  const when = `${Math.floor(Date.parse(d.createdAt) / 1000)} +0000`;
  const commit = Buffer.from(
    [
      `tree ${treeOid}`,
      `parent ${d.snapshot.oid}`,
      `author ${IDENTITY} ${when}`,
      `committer ${IDENTITY} ${when}`,
      '',
      `xet handoff: ${d.title}`,
      '',
      `Schema: ${HANDOFF_SCHEMA}`,
      '',
    ].join('\n'),
    'utf8',
  );
  return {
    blob: { oid: blobOid, bytes },
    tree: { oid: treeOid, bytes: tree },
    commit: { oid: objectId('commit', commit, format), bytes: commit },
  };
}

/** Stores the handoff's objects: by `git hash-object`, or with `here` as loose objects written by
 * this process (loose-writer.ts; three git processes fewer). One this process cannot write (a
 * read-only object directory, a full disk) is git's to write, and to report as it always has.
 * Either way each must have the id computed here. */
export async function writeHandoffObjects(
  objs: HandoffObjects,
  opts: GitOptions,
  here?: { objectsDir: string; format: 'sha1' | 'sha256'; level: number },
): Promise<void> {
  const writtenHere = (type: 'blob' | 'tree' | 'commit', bytes: Buffer): string | null => {
    if (!here) return null;
    try {
      return writeLooseObject(here.objectsDir, here.format, type, bytes, here.level);
    } catch {
      return null;
    }
  };
  for (const [type, o] of [
    ['blob', objs.blob],
    ['tree', objs.tree],
    ['commit', objs.commit],
  ] as const) {
    const oid =
      writtenHere(type, o.bytes) ??
      (await gitText(['hash-object', '-w', '--no-filters', '-t', type, '--stdin'], {
        ...opts,
        input: o.bytes,
      }));
    if (oid !== o.oid) {
      throw new XetError('INTEGRITY_MISMATCH', `git stored the handoff ${type} as ${oid}, expected ${o.oid}`, {
        type,
        expected: o.oid,
        actual: oid,
      });
    }
  }
}

export function handoffRef(id: string): string {
  return `${HANDOFF_REF_PREFIX}${id}`;
}

/** The commit a handoff ref points to, or null when there is no such ref. */
export async function readHandoffRef(id: string, opts: GitOptions): Promise<string | null> {
  const r = await git(['rev-parse', '-q', '--verify', '--end-of-options', handoffRef(id)], {
    ...opts,
    okCodes: [1, 128],
  });
  return r.code === 0 ? r.stdout.toString('utf8').trim() : null;
}

/**
 * Create the ref, once: `update-ref <ref> <new> <zero>` fails if the ref exists, so two creators
 * cannot both win. The same commit already there is success (same descriptor, same commit);
 * anything else is REF_IMMUTABLE. Returns whether this call created it.
 */
export async function publishHandoffRef(
  id: string,
  commit: string,
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<boolean> {
  const ref = handoffRef(id);
  const zero = '0'.repeat(format === 'sha256' ? 64 : 40);
  const r = await git(['update-ref', '-m', 'git xet handoff create', ref, commit, zero], {
    ...opts,
    okCodes: [1, 128],
  });
  if (r.code === 0) return true;
  const existing = await readHandoffRef(id, opts);
  if (existing === commit) return false;
  if (existing) throw refImmutable(id, commit, existing);
  throw new XetError('GIT_FAILED', `cannot create ${ref}: ${r.stderr.trim()}`, { ref, stderr: r.stderr });
}

export function refImmutable(id: string, expected: string, existing: string): XetError {
  return new XetError(
    'REF_IMMUTABLE',
    `${handoffRef(id)} already exists and points to ${existing}, not to this handoff's commit ${expected}; handoff refs are never moved`,
    { ref: handoffRef(id), expected, existing },
  );
}

export interface HandoffRef {
  id: string;
  ref: string;
  commit: string;
}

/** Every ref under refs/xet/handoffs/ (the name may be anything: whoever pushed it chose it). */
export async function listHandoffRefs(opts: GitOptions): Promise<HandoffRef[]> {
  return (await listRefs([HANDOFF_REF_PREFIX], opts)).map((r) => ({
    id: r.name.slice(HANDOFF_REF_PREFIX.length),
    ref: r.name,
    commit: r.oid,
  }));
}

/** A full or abbreviated (4+ hex digits, unique) handoff id → its ref. */
export async function resolveHandoff(spec: string, opts: GitOptions): Promise<HandoffRef> {
  const s = spec.toLowerCase();
  if (!/^[0-9a-f]{4,64}$/.test(s)) {
    throw new XetError('HANDOFF_NOT_FOUND', `${JSON.stringify(spec)} is not a handoff id (4 to 64 hex digits)`, {
      handoff: spec,
    });
  }
  if (ID_RE.test(s)) {
    const commit = await readHandoffRef(s, opts);
    if (commit) return { id: s, ref: handoffRef(s), commit };
  } else {
    const matches = (await listHandoffRefs(opts)).filter((r) => ID_RE.test(r.id) && r.id.startsWith(s));
    if (matches.length === 1) return matches[0];
    if (matches.length > 1) {
      throw new XetError('HANDOFF_NOT_FOUND', `${spec} is ambiguous: ${matches.length} handoffs start with it`, {
        handoff: spec,
        candidates: matches.map((m) => m.id),
      });
    }
  }
  throw new XetError('HANDOFF_NOT_FOUND', `no handoff ${spec} in this repository`, { handoff: spec });
}

/** What a handoff ref's commit actually holds, read without trusting any of it. */
export interface RawHandoff extends HandoffRef {
  /** The object the ref points to is a commit. */
  isCommit: boolean;
  parents: string[];
  /** The commit's tree entries (mode, name, oid). */
  entries: { mode: string; name: string; oid: string }[];
  /** descriptor.json's bytes, when it is a blob no larger than the descriptor limit. */
  bytes: Buffer | null;
  /** Why `bytes` is null, if it is. */
  bytesProblem: string | null;
}

/**
 * Read the commits, trees and descriptor blobs of many handoff refs in a few git processes
 * whatever their number. Sizes are asked before anything is read (catFileBatch): a ref pointing at
 * a forged gigabyte blob, commit or tree, or a gigabyte descriptor.json, is never read into memory.
 */
export async function readRawHandoffs(refs: HandoffRef[], opts: GitOptions): Promise<RawHandoff[]> {
  if (!refs.length) return [];
  const names: string[] = [];
  for (const r of refs) names.push(r.commit, `${r.commit}^{tree}`);
  // A handoff's commit and tree are a few hundred bytes; the ref may point at anything.
  const objs = await catFileBatch([...new Set(names)], opts, HANDOFF_OBJECT_MAX_BYTES);
  const parsed = refs.map((r) => {
    const commit = objs.get(r.commit);
    const isCommit = commit?.type === 'commit';
    const parents = isCommit ? commitParents(commit.data) : [];
    const tree = isCommit ? objs.get(`${r.commit}^{tree}`) : null;
    const entries = tree?.type === 'tree' ? parseTreeObject(tree.data, r.commit.length / 2).entries : [];
    const big = objs.oversized.get(r.commit) ?? objs.oversized.get(`${r.commit}^{tree}`);
    return { r, isCommit, parents, entries, big, desc: entries.find((e) => e.name === DESCRIPTOR_FILE) };
  });
  const descOids = parsed.map((p) => p.desc?.oid).filter((o): o is string => o !== undefined);
  const sizes = new Map((await batchCheck(descOids, opts)).map((s, n) => [descOids[n], s]));
  const small = [...sizes].filter(([, s]) => s?.type === 'blob' && s.size <= LIMITS.descriptorBytes).map(([o]) => o);
  const blobs = await catFileBatch(small, opts, LIMITS.descriptorBytes);
  return parsed.map(({ r, isCommit, parents, entries, big, desc }) => {
    const s = desc ? sizes.get(desc.oid) : null;
    let bytes: Buffer | null = null;
    let bytesProblem: string | null = null;
    if (big !== undefined) bytesProblem = `${r.ref} leads to a ${big}-byte object, larger than any handoff's`;
    else if (!isCommit) bytesProblem = `${r.ref} does not point to a commit`;
    else if (!s) bytesProblem = `the commit has no ${DESCRIPTOR_FILE}`;
    else if (s.type !== 'blob') bytesProblem = `${DESCRIPTOR_FILE} is a ${s.type}, not a file`;
    else if (s.size > LIMITS.descriptorBytes) {
      bytesProblem = `${DESCRIPTOR_FILE} is ${s.size} bytes; a descriptor is at most ${LIMITS.descriptorBytes} bytes`;
    } else bytes = Buffer.from(blobs.get(s.oid)?.data ?? Buffer.alloc(0));
    return { ...r, isCommit, parents, entries, bytes, bytesProblem };
  });
}

/** `cat-file --batch-check` of many names: type, size and oid, or null for what is missing. */
export async function batchCheck(
  names: string[],
  opts: GitOptions,
): Promise<({ oid: string; type: string; size: number } | null)[]> {
  if (!names.length) return [];
  const text = await gitText(['cat-file', '--batch-check=%(objectname) %(objecttype) %(objectsize)'], {
    ...opts,
    input: names.map((n) => `${n}\n`).join(''),
  });
  // A missing name is echoed back ("<name> missing"), and names (paths) may hold spaces.
  return text.split('\n').map((line) => {
    if (/ (missing|ambiguous)$/.test(line)) return null;
    const [oid, type, size] = line.split(' ');
    return { oid, type, size: Number(size) };
  });
}

/** The parents a raw commit object names. */
export function commitParents(data: Buffer): string[] {
  const text = data.toString('utf8');
  const end = text.indexOf('\n\n');
  return (end < 0 ? text : text.slice(0, end))
    .split('\n')
    .filter((l) => l.startsWith('parent '))
    .map((l) => l.slice('parent '.length));
}
