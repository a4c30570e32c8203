// Pins and drop records as Git objects, so they survive the loss of the sidecar and travel with
// `git push` (pins do; drops stay local). Each is a commit built by hand (fixed identity, date = the
// record's time, no signing) whose tree holds exactly one canonical-JSON file and whose one parent
// is the snapshot, so the ref also keeps the snapshot's objects reachable:
//
//   refs/xet/pins/<snapshot>     -> commit { pin.json  : xet.pin/v1  }, parent <snapshot>
//   refs/xet/dropped/<snapshot>  -> commit { drop.json : xet.drop/v1 }, parent <snapshot>
//
// Readers trust nothing a ref points to: readMarkers checks sizes before reading, the tree's one
// entry, the parent against the ref name and the schema (docs/FORMAT.md; the zod schemas are in
// marker-schema.ts, loaded only when a record is read).

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ZodType } from 'zod';
import { XetError } from '../errors';
import { catFileBatch, listRefs } from '../git/plumbing';
import { gitText, type GitOptions } from '../git/exec';
import type { Repo } from '../git/repo';
import { objectId } from '../git/object-id';
import { canonicalJson } from '../snapshot/canonical-json';

export const PIN_REF_PREFIX = 'refs/xet/pins/';
export const DROPPED_REF_PREFIX = 'refs/xet/dropped/';
export const PIN_SCHEMA = 'xet.pin/v1';
export const DROP_SCHEMA = 'xet.drop/v1';
const IDENTITY = 'git xet <git-xet@localhost>';
const MARKER_MAX_BYTES = 64 * 1024;

export const OID_RE = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** xet.pin/v1 (checked on reading by marker-schema.ts's PinRecordSchema). */
export interface PinRecord {
  schema: typeof PIN_SCHEMA;
  snapshot: string;
  /** At most 4096 characters. */
  reason: string;
  /** When the pin stops being a root; null: until unpinned. Seconds-precision UTC. */
  until: string | null;
  createdAt: string;
}

/** xet.drop/v1 (checked on reading by marker-schema.ts's DropRecordSchema). */
export interface DropRecord {
  schema: typeof DROP_SCHEMA;
  snapshot: string;
  droppedAt: string;
  /** `explicit` (git xet drop) or the retention run that let it go (`retention`). */
  reason: 'explicit' | 'retention';
}

export type MarkerKind = 'pin' | 'drop';
const FILE: Record<MarkerKind, string> = { pin: 'pin.json', drop: 'drop.json' };
const PREFIX: Record<MarkerKind, string> = { pin: PIN_REF_PREFIX, drop: DROPPED_REF_PREFIX };

/** Seconds-precision UTC time, the form every marker uses. */
export function isoSeconds(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

export function markerRef(kind: MarkerKind, snapshot: string): string {
  return `${PREFIX[kind]}${snapshot}`;
}

interface MarkerObject {
  type: 'blob' | 'tree' | 'commit';
  bytes: Buffer;
  oid: string;
}

/** The marker's blob, tree and commit, byte for byte, with their ids (the commit last). */
function markerObjects(kind: MarkerKind, record: PinRecord | DropRecord, format: Repo['objectFormat']): MarkerObject[] {
  const bytes = Buffer.from(canonicalJson(record), 'utf8');
  const blobOid = objectId('blob', bytes, format);
  const tree = Buffer.concat([Buffer.from(`100644 ${FILE[kind]}\0`, 'utf8'), Buffer.from(blobOid, 'hex')]);
  const treeOid = objectId('tree', tree, format);
  const time = kind === 'pin' ? (record as PinRecord).createdAt : (record as DropRecord).droppedAt;
  const when = `${Math.floor(Date.parse(time) / 1000)} +0000`;
  const subject = kind === 'pin' ? `xet pin: ${(record as PinRecord).reason || 'pinned'}` : 'xet drop';
  const commit = Buffer.from(
    [
      `tree ${treeOid}`,
      `parent ${record.snapshot}`,
      `author ${IDENTITY} ${when}`,
      `committer ${IDENTITY} ${when}`,
      '',
      subject.replace(/[\r\n]+/g, ' ').slice(0, 200),
      '',
      `Schema: ${record.schema}`,
      '',
    ].join('\n'),
    'utf8',
  );
  const commitOid = objectId('commit', commit, format);
  return [
    { type: 'blob', bytes, oid: blobOid },
    { type: 'tree', bytes: tree, oid: treeOid },
    { type: 'commit', bytes: commit, oid: commitOid },
  ];
}

function stored(kind: MarkerKind, o: MarkerObject, got: string | undefined): void {
  if (got !== o.oid) {
    throw new XetError('INTEGRITY_MISMATCH', `git stored the ${kind} ${o.type} as ${got}, expected ${o.oid}`, {
      expected: o.oid,
      actual: got,
    });
  }
}

/** Write the marker's blob, tree and commit; returns the commit id. */
export async function writeMarker(
  kind: MarkerKind,
  record: PinRecord | DropRecord,
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<string> {
  const objs = markerObjects(kind, record, format);
  for (const o of objs) {
    stored(
      kind,
      o,
      await gitText(['hash-object', '-w', '--no-filters', '-t', o.type, '--stdin'], { ...opts, input: o.bytes }),
    );
  }
  return objs[2].oid;
}

/**
 * Write many markers in three git processes (one per object type) whatever their number: a drop
 * of a hundred snapshots, gc's retention drops. Returns the commit ids, in order.
 */
export async function writeMarkers(
  kind: MarkerKind,
  records: (PinRecord | DropRecord)[],
  format: Repo['objectFormat'],
  opts: GitOptions,
): Promise<string[]> {
  if (records.length <= 1) return Promise.all(records.map((r) => writeMarker(kind, r, format, opts)));
  const all = records.map((r) => markerObjects(kind, r, format));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-markers-'));
  try {
    for (const [n, type] of (['blob', 'tree', 'commit'] as const).entries()) {
      const files = all.map((objs, i) => {
        const f = path.join(dir, `${type}-${i}`);
        fs.writeFileSync(f, objs[n].bytes);
        return f;
      });
      const got = (
        await gitText(['hash-object', '-w', '--no-filters', '-t', type, '--stdin-paths'], {
          ...opts,
          input: files.map((f) => `${f}\n`).join(''),
        })
      ).split('\n');
      all.forEach((objs, i) => stored(kind, objs[n], got[i]));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return all.map((objs) => objs[2].oid);
}

export interface MarkerEntry<R> {
  ref: string;
  /** The marker commit the ref points to. */
  commit: string;
  snapshot: string;
  /** The record, or null with `problem` when the ref holds something else. */
  record: R | null;
  problem?: string;
}

/** Every marker of a kind, read and checked in a few git processes whatever their number. */
export async function readMarkers(kind: 'pin', opts: GitOptions): Promise<MarkerEntry<PinRecord>[]>;
export async function readMarkers(kind: 'drop', opts: GitOptions): Promise<MarkerEntry<DropRecord>[]>;
export async function readMarkers(kind: MarkerKind, opts: GitOptions): Promise<MarkerEntry<PinRecord | DropRecord>[]> {
  const refs = (await listRefs([PREFIX[kind]], opts)).filter((r) => r.name.startsWith(PREFIX[kind]));
  if (!refs.length) return [];
  const objs = await catFileBatch(
    refs.flatMap((r) => [r.oid, `${r.oid}^{tree}`]),
    opts,
    MARKER_MAX_BYTES,
  );
  const out: MarkerEntry<PinRecord | DropRecord>[] = [];
  const blobs: string[] = [];
  const pending: { entry: MarkerEntry<PinRecord | DropRecord>; blob: string }[] = [];
  for (const r of refs) {
    const snapshot = r.name.slice(PREFIX[kind].length);
    const entry: MarkerEntry<PinRecord | DropRecord> = { ref: r.name, commit: r.oid, snapshot, record: null };
    out.push(entry);
    if (!OID_RE.test(snapshot)) {
      entry.problem = 'the ref name is not a snapshot id';
      continue;
    }
    const c = objs.get(r.oid);
    const t = objs.get(`${r.oid}^{tree}`);
    if (!c || c.type !== 'commit' || !t || t.type !== 'tree') {
      entry.problem = 'not a marker commit (missing, too large or another type)';
      continue;
    }
    const parents = [...c.data.toString('utf8').matchAll(/^parent ([0-9a-f]+)$/gm)].map((m) => m[1]);
    if (parents.length !== 1 || parents[0] !== snapshot) {
      entry.problem = 'its parent is not the snapshot its name says';
      continue;
    }
    const want = Buffer.from(`100644 ${FILE[kind]}\0`, 'utf8');
    const hashLen = t.data.length - want.length;
    if (!t.data.subarray(0, want.length).equals(want) || (hashLen !== 20 && hashLen !== 32)) {
      entry.problem = `its tree is not exactly one ${FILE[kind]}`;
      continue;
    }
    const blob = t.data.subarray(want.length).toString('hex');
    blobs.push(blob);
    pending.push({ entry, blob });
  }
  const data = await catFileBatch(blobs, opts, MARKER_MAX_BYTES);
  if (!pending.length) return out;
  // zod only now, with a record to check (see marker-schema.ts).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { PinRecordSchema, DropRecordSchema } = require('./marker-schema') as typeof import('./marker-schema');
  const schema = (kind === 'pin' ? PinRecordSchema : DropRecordSchema) as ZodType<PinRecord | DropRecord>;
  for (const { entry, blob } of pending) {
    const b = data.get(blob);
    if (!b || b.type !== 'blob') {
      entry.problem = `${FILE[kind]} is missing or too large`;
      continue;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(b.data.toString('utf8'));
    } catch {
      entry.problem = `${FILE[kind]} is not JSON`;
      continue;
    }
    const r = schema.safeParse(parsed);
    if (!r.success) {
      entry.problem = `${FILE[kind]} breaks ${kind === 'pin' ? PIN_SCHEMA : DROP_SCHEMA}`;
      continue;
    }
    if (r.data.snapshot !== entry.snapshot) {
      entry.problem = `${FILE[kind]} names another snapshot`;
      continue;
    }
    entry.record = r.data;
  }
  return out;
}
