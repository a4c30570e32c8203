// Choosing what `git xet push <remote> <id>…` publishes: snapshots and handoffs named by full or
// abbreviated id (at least 4 hex digits, as everywhere else). A handoff brings its snapshot's ref, so
// the receiver can restore it by id. Everything is resolved before anything is sent, and every ref
// to send is checked to name its own content: refs/xet/* are create-once on the remote, so a ref a
// hostile fetch left here with a foreign target would be published for good.

import { XetError } from '../errors';
import { gitText, type GitOptions } from '../git/exec';
import { listRefs } from '../git/plumbing';
import { HANDOFF_REF_PREFIX, readRawHandoffs } from '../handoff/objects';
import { checkStructure } from '../handoff/verify';
import { formatOf, readRawSignatures, signaturePrefix, SIGNATURE_REF_PREFIX } from '../handoff/signatures';
import { SNAPSHOT_REF_PREFIX } from '../snapshot/refs';
import { DROPPED_REF_PREFIX, PIN_REF_PREFIX, readMarkers } from '../gc/markers';
import { loadTaskRecord, TASK_RECORD_PREFIX } from '../tasks/record';

/** Pins change (re-pin, unpin); every other refs/xet/* ref names its content and is create-once. */
export function isMutable(ref: string): boolean {
  return ref.startsWith(PIN_REF_PREFIX);
}

/** Drop markers are this repository's own business (a drop is undone locally): never published. */
export function isPublishable(ref: string): boolean {
  return !ref.startsWith(DROPPED_REF_PREFIX);
}

/** The refs/xet/* ref names to publish for these ids. */
export async function selectXetRefs(ids: string[], opts: GitOptions): Promise<Set<string>> {
  const refs = await listRefs(['refs/xet/'], opts);
  const snapshots = refs.filter((r) => r.name.startsWith(SNAPSHOT_REF_PREFIX));
  const handoffs = refs.filter((r) => r.name.startsWith(HANDOFF_REF_PREFIX));
  const pins = new Set(refs.filter((r) => r.name.startsWith(PIN_REF_PREFIX)).map((r) => r.name));
  const out = new Set<string>();
  // A pin goes with its snapshot: on the store it keeps the snapshot as it does here.
  const addSnapshot = (name: string) => {
    out.add(name);
    const pin = `${PIN_REF_PREFIX}${name.slice(SNAPSHOT_REF_PREFIX.length)}`;
    if (pins.has(pin)) out.add(pin);
  };
  for (const id of ids) {
    if (!/^[0-9a-f]{4,64}$/.test(id)) {
      throw new XetError('USAGE', `${JSON.stringify(id)} is not a snapshot or handoff id (4 to 64 hex digits)`, { id });
    }
    const s = snapshots.filter((r) => r.name.slice(SNAPSHOT_REF_PREFIX.length).startsWith(id));
    const h = handoffs.filter((r) => r.name.slice(HANDOFF_REF_PREFIX.length).startsWith(id));
    if (s.length + h.length === 0) {
      throw new XetError('SNAPSHOT_NOT_FOUND', `no snapshot or handoff ${id} in this repository`, { id });
    }
    if (s.length + h.length > 1) {
      throw new XetError(
        'SNAPSHOT_NOT_FOUND',
        `${id} is ambiguous: ${s.length} snapshot(s) and ${h.length} handoff(s) start with it`,
        {
          id,
          matches: [...s, ...h].map((r) => r.name).slice(0, 20),
        },
      );
    }
    if (s.length) {
      addSnapshot(s[0].name);
      continue;
    }
    out.add(h[0].name);
    // Its signatures travel with it (they are checked with it in checkOwnNames).
    const sigPrefix = signaturePrefix(h[0].name.slice(HANDOFF_REF_PREFIX.length));
    for (const r of refs) if (r.name.startsWith(sigPrefix)) out.add(r.name);
    // The handoff commit's parent is its snapshot; its ref goes along when this repository has it.
    const parents = await listParents(h[0].oid, opts);
    const snap =
      parents.length === 1
        ? snapshots.find((r) => r.name === `${SNAPSHOT_REF_PREFIX}${parents[0]}` && r.oid === parents[0])
        : undefined;
    if (snap) addSnapshot(snap.name);
    // The record of the task it hands over (handoff create --task): its result travels with it.
    const [raw] = await readRawHandoffs(
      [{ id: h[0].name.slice(HANDOFF_REF_PREFIX.length), ref: h[0].name, commit: h[0].oid }],
      opts,
    );
    const task = raw.bytes ? taskOf(raw.bytes) : null;
    const record = task !== null ? refs.find((r) => r.name === `${TASK_RECORD_PREFIX}${task}`) : undefined;
    if (record) out.add(record.name);
  }
  return out;
}

/** The task a descriptor's bytes name, if any (their checks are checkOwnNames'). */
export function taskOf(bytes: Buffer): string | null {
  try {
    const t = (JSON.parse(bytes.toString('utf8')) as { task?: unknown }).task;
    return typeof t === 'string' && /^[0-9a-f]{16}$/.test(t) ? t : null;
  } catch {
    return null;
  }
}

async function listParents(commit: string, opts: GitOptions): Promise<string[]> {
  const line = await gitText(['rev-list', '--parents', '-n', '1', commit], opts);
  return line.split(' ').slice(1).filter(Boolean);
}

/**
 * Refuse (INTEGRITY_MISMATCH, naming the first ref) when any ref to publish does not deserve its
 * name: a snapshot ref must point at the commit it is named by; a handoff ref at a commit whose
 * descriptor hashes to its name, alone in its tree, on the snapshot it names (the structural checks
 * whose failure means forged or damaged objects; a descriptor that breaks the format is the
 * receiver's verify's business); a signature ref at its signature on its handoff's commit (whether
 * the signature is good is the receiver's verify's business too).
 */
export async function checkOwnNames(refs: { name: string; oid: string }[], opts: GitOptions): Promise<void> {
  const bad: { ref: string; oid: string; why: string }[] = [];
  for (const r of refs) {
    if (r.name.startsWith(SNAPSHOT_REF_PREFIX) && r.name.slice(SNAPSHOT_REF_PREFIX.length) !== r.oid) {
      bad.push({ ref: r.name, oid: r.oid, why: `it points at ${r.oid}; a snapshot ref names its own commit` });
    }
  }
  const handoffs = refs
    .filter((r) => r.name.startsWith(HANDOFF_REF_PREFIX))
    .map((r) => ({ id: r.name.slice(HANDOFF_REF_PREFIX.length), ref: r.name, commit: r.oid }));
  for (const raw of await readRawHandoffs(handoffs, opts)) {
    // An unreadable descriptor fails `tree`, so a ref whose hash was never checked is refused too.
    const failed = checkStructure(raw).checks.find((c) => c.ok === false && c.code === 'INTEGRITY_MISMATCH');
    if (failed) bad.push({ ref: raw.ref, oid: raw.commit, why: failed.detail ?? failed.check });
  }
  // A signature ref must be the signature its name says, on the handoff commit its name says (that
  // handoff's ref here): else it would hang a stranger's objects, for good, under a handoff's id.
  const sigRefs = refs.filter((r) => r.name.startsWith(SIGNATURE_REF_PREFIX));
  if (sigRefs.length) {
    const handoffCommits = new Map(
      (await listRefs([HANDOFF_REF_PREFIX], opts)).map((r) => [r.name.slice(HANDOFF_REF_PREFIX.length), r.oid]),
    );
    for (const s of await readRawSignatures(sigRefs, handoffCommits, formatOf(sigRefs[0].oid), opts)) {
      if (s.problem) bad.push({ ref: s.ref, oid: s.commit, why: s.problem });
    }
  }
  // A task record must be the record its contents build, for the task its name says.
  for (const r of refs.filter((x) => x.name.startsWith(TASK_RECORD_PREFIX))) {
    try {
      await loadTaskRecord(r.name, r.oid, opts);
    } catch (e) {
      if (!(e instanceof XetError) || e.code !== 'INTEGRITY_MISMATCH') throw e;
      bad.push({ ref: r.name, oid: r.oid, why: String(e.details?.why ?? e.message) });
    }
  }
  const pinRefs = new Map(refs.filter((r) => r.name.startsWith(PIN_REF_PREFIX)).map((r) => [r.name, r.oid]));
  if (pinRefs.size) {
    // A pin ref must hold a pin of the snapshot its name says (its parent): else it would keep
    // something else alive on the store.
    for (const m of await readMarkers('pin', opts)) {
      if (pinRefs.get(m.ref) === m.commit && m.problem) bad.push({ ref: m.ref, oid: m.commit, why: m.problem });
    }
  }
  if (!bad.length) return;
  throw new XetError(
    'INTEGRITY_MISMATCH',
    `${bad[0].ref} does not name its own content (${bad[0].why}); nothing was pushed` +
      (bad.length > 1 ? ` (${bad.length} such refs)` : ''),
    { ref: bad[0].ref, oid: bad[0].oid, refs: bad.slice(0, 20) },
  );
}

/**
 * What `git xet push <remote> <handoff>` publishes for a handoff this process has just created (or
 * found identical), without resolving and re-reading it: the handoff's ref, its snapshot's ref when
 * this repository has it, the snapshot's pin, the handoff's signatures and its task's record (as
 * selectXetRefs). One for-each-ref.
 */
export async function handoffPushRefs(
  h: { id: string; commit: string; snapshot: string; task: string | null },
  opts: GitOptions,
): Promise<{ name: string; oid: string }[]> {
  const snapshotRef = `${SNAPSHOT_REF_PREFIX}${h.snapshot}`;
  const pinRef = `${PIN_REF_PREFIX}${h.snapshot}`;
  const taskRef = h.task !== null ? `${TASK_RECORD_PREFIX}${h.task}` : null;
  const sigPrefix = signaturePrefix(h.id);
  const found = await listRefs([snapshotRef, pinRef, sigPrefix.slice(0, -1), ...(taskRef ? [taskRef] : [])], opts);
  const out = [{ name: `${HANDOFF_REF_PREFIX}${h.id}`, oid: h.commit }];
  const snap = found.find((r) => r.name === snapshotRef && r.oid === h.snapshot);
  if (snap) {
    out.push(snap);
    const pin = found.find((r) => r.name === pinRef);
    if (pin) out.push(pin);
  }
  for (const r of found) if (r.name.startsWith(sigPrefix)) out.push(r);
  const record = found.find((r) => r.name === taskRef);
  if (record) out.push(record);
  return out.map((r) => ({ name: r.name, oid: r.oid }));
}
