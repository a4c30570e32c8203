// Bases: a snapshot materialised once, read-only by contract, for overlay forks (their lower layer)
// and clone forks (the source of their reflinks). A base is `<sidecar>/bases/<snapshot>/` holding
// `tree/` (the files), `files.index` (the files tree with stat data: capture's cache for a fork) and
// `index` (the snapshot's index with stat data). It is built in a temporary sibling and renamed into
// place, so a base that exists is complete; nothing writes to its files after that. Beside them,
// `record.json` records that the snapshot was validated (manifest schema, every path) and what the
// validation found, so later forks of it skip that O(tree) work: it is written once, atomically,
// after a full validation, and a record that does not check out is ignored (the next fork
// validates again and rewrites it).

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Admission } from '../allowance/admit';
import { treeAmount } from '../allowance/repo-root';
import type { Amount } from '../allowance/model';
import type { Repo } from '../git/repo';
import { sidecarDir, withSidecar } from '../sidecar/db';
import { partsOf, recordPart, REPOSITORY_ROOT } from '../allowance/ledger';
import { acquireLock } from '../sidecar/lock';
import { canonicalJson } from '../snapshot/canonical-json';
import { parseManifest } from '../snapshot/manifest';
import type { Snapshot } from '../snapshot/store';
import { faultPoint } from '../testing/fault-points';

export interface Base {
  dir: string;
  tree: string;
  filesIndex: string;
  index: string;
  /** The validation record (see the head of this module). */
  record: string;
}

export function basesDir(repo: Repo): string {
  return path.join(sidecarDir(repo.commonDir), 'bases');
}

function layoutAt(dir: string): Base {
  return {
    dir,
    tree: path.join(dir, 'tree'),
    filesIndex: path.join(dir, 'files.index'),
    index: path.join(dir, 'index'),
    record: path.join(dir, 'record.json'),
  };
}

export function baseFor(repo: Repo, snapshot: string): Base {
  return layoutAt(path.join(basesDir(repo), snapshot));
}

/** What admits a base into the repository root: checked again once its files are laid (with `more`
 * still to come after it), and the base recorded before its rename. */
export interface BaseAdmission {
  admission: Admission;
  more: Amount;
}

/** The base for a snapshot, building it if it does not exist yet. `validated`: the snapshot's full
 * validation, recorded in a base this call builds (counted and published with it). */
export async function ensureBase(
  repo: Repo,
  snap: Snapshot,
  admit?: BaseAdmission,
  validated?: BaseRecord,
): Promise<{ base: Base; built: boolean }> {
  const base = baseFor(repo, snap.oid);
  if (fs.existsSync(base.index)) return { base, built: false };
  // One builder per base: others wait for it and then use its result instead of building their own.
  const lock = acquireLock(
    path.join(sidecarDir(repo.commonDir), 'locks', `base-${snap.oid}.lockdb`),
    'materialising this base',
    600_000,
  );
  try {
    if (fs.existsSync(base.index)) return { base, built: false };
    return await buildBase(repo, snap, base, admit, validated);
  } finally {
    lock.release();
  }
}

async function buildBase(
  repo: Repo,
  snap: Snapshot,
  base: Base,
  admit?: BaseAdmission,
  validated?: BaseRecord,
): Promise<{ base: Base; built: boolean }> {
  fs.mkdirSync(basesDir(repo), { recursive: true });
  // The pid says whose it is: a killed fork's half-built base is found and removed by a recount.
  const tmp = path.join(
    basesDir(repo),
    `.build-${process.pid}-${snap.oid.slice(0, 12)}-${crypto.randomBytes(4).toString('hex')}`,
  );
  const building = layoutAt(tmp);
  try {
    fs.mkdirSync(building.tree, { recursive: true });
    const spec = {
      snap,
      worktree: building.tree,
      objectsDir: repo.objectsDir,
      filesIndex: building.filesIndex,
      indexFile: building.index,
      scratchParent: tmp,
      repoGitDir: repo.commonDir,
    };
    // Required here: forks of a base that exists never load the laying code.
    const { layFiles, layIndex } = await import('../snapshot/lay');
    await layFiles(spec);
    await faultPoint('fork:mid-base');
    await layIndex(spec);
    if (validated) writeRecordFile(building.record, validated);
    if (admit) {
      // The temporary base is complete and counted from disk now; concurrent writers may have taken
      // the space meanwhile. Recorded before the rename: a kill in between counts it, never misses it.
      admit.admission.recheck(admit.more);
      admit.admission.record(`base:${snap.oid}`, treeAmount(tmp));
    }
    try {
      fs.renameSync(tmp, base.dir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      // Another fork built the same base meanwhile: theirs is as good as ours.
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
      return { base, built: false };
    }
    return { base, built: true };
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

export const BASE_RECORD_SCHEMA = 'xet.base-record/v1';

/** What a full validation of a snapshot found: everything readSnapshot returns, and the byte length
 * of its longest path (validateSnapshotPaths). */
export interface BaseRecord {
  snap: Snapshot;
  longest: number;
}

const OID_RE = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** Bounds a record's size before it is read: a manifest is bounded by readSnapshot's object limit. */
const RECORD_MAX_BYTES = 64 << 20;

function recordBody(r: BaseRecord): Record<string, unknown> {
  const s = r.snap;
  return {
    schema: BASE_RECORD_SCHEMA,
    snapshot: s.oid,
    filesTree: s.filesTree,
    indexTree: s.indexTree,
    tagsTree: s.tagsTree,
    objectsTree: s.objectsTree,
    // The key predates filemeta trees (v4); it holds the entry's oid, blob or tree, as before.
    filemetaBlob: s.filemeta,
    chunksTree: s.chunksTree,
    manifest: s.manifestBytes.toString('base64'),
    longest: r.longest,
  };
}

const digestOf = (body: Record<string, unknown>): string =>
  crypto.createHash('sha256').update(canonicalJson(body)).digest('hex');

function writeRecordFile(file: string, r: BaseRecord): void {
  const body = recordBody(r);
  const tmp = `${file}.tmp-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
  try {
    fs.writeFileSync(tmp, `${JSON.stringify({ ...body, digest: digestOf(body) })}\n`);
    fs.renameSync(tmp, file);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** Record a fully validated snapshot with its existing base, atomically. The base's figure in the
 * allowance ledger grows by the record first (a kill in between counts a little too much, never
 * too little), so a recount finds what the ledger says. */
export function writeBaseRecord(repo: Repo, r: BaseRecord): void {
  const base = baseFor(repo, r.snap.oid);
  if (!fs.existsSync(base.index)) return;
  const body = recordBody(r);
  const size = Buffer.byteLength(`${JSON.stringify({ ...body, digest: digestOf(body) })}\n`);
  const old = fs.statSync(base.record, { throwIfNoEntry: false });
  withSidecar(repo.commonDir, (db) => {
    const part = partsOf(db, REPOSITORY_ROOT).find((p) => p.part === `base:${r.snap.oid}`);
    if (part) {
      recordPart(db, REPOSITORY_ROOT, part.part, {
        bytes: part.bytes + size - (old?.size ?? 0),
        files: part.files + (old ? 0 : 1),
      });
    }
  });
  writeRecordFile(base.record, r);
}

/** The validation recorded with the base of `oid`, or null when there is none or it does not check
 * out: another snapshot's, another schema, altered (its digest), malformed. Null means "validate". */
export function readBaseRecord(repo: Repo, oid: string): BaseRecord | null {
  const base = baseFor(repo, oid);
  let raw: Record<string, unknown>;
  try {
    if (!fs.existsSync(base.index) || fs.statSync(base.record).size > RECORD_MAX_BYTES) return null;
    raw = JSON.parse(fs.readFileSync(base.record, 'utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (!raw || typeof raw !== 'object' || raw.schema !== BASE_RECORD_SCHEMA || raw.snapshot !== oid) return null;
  const oidOrNull = (k: string, required: boolean): boolean =>
    (typeof raw[k] === 'string' && OID_RE.test(raw[k] as string) && (raw[k] as string).length === oid.length) ||
    (!required && raw[k] === null);
  if (!oidOrNull('filesTree', true) || !oidOrNull('indexTree', true)) return null;
  for (const k of ['tagsTree', 'objectsTree', 'filemetaBlob', 'chunksTree']) if (!oidOrNull(k, false)) return null;
  if (typeof raw.manifest !== 'string' || !Number.isSafeInteger(raw.longest) || (raw.longest as number) < 0) {
    return null;
  }
  const { digest, ...body } = raw;
  if (typeof digest !== 'string' || digest !== digestOf(body)) return null;
  const manifestBytes = Buffer.from(raw.manifest, 'base64');
  let manifest: Snapshot['manifest'];
  try {
    // The same bytes passed the schema when they were recorded; the digest says they are those bytes.
    manifest = parseManifest(manifestBytes, `${oid.slice(0, 12)}:manifest.json`, true);
  } catch {
    return null;
  }
  return {
    snap: {
      oid,
      manifest,
      manifestBytes,
      filesTree: raw.filesTree as string,
      indexTree: raw.indexTree as string,
      tagsTree: raw.tagsTree as string | null,
      objectsTree: raw.objectsTree as string | null,
      filemeta: raw.filemetaBlob as string | null,
      chunksTree: raw.chunksTree as string | null,
    },
    longest: raw.longest as number,
  };
}
