// Creating a handoff: a descriptor built from options (or taken as bytes, `--descriptor`), checked
// completely (schema, limits, snapshot, manifest hash, artifacts) before the first object is
// written, then stored as its deterministic commit under the create-once ref.

import { looseWriteLevel } from '../git/loose-writer';
import { tracePhase } from '../testing/trace';
import { withObjectsShared } from '../gc/objects-lock';
import * as crypto from 'node:crypto';
import { XetError } from '../errors';
import { readConfig, type GitConfig } from '../git/config';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { withExistingSidecar, withSidecar } from '../sidecar/db';
import { completeRequest, reserveRequest } from '../sidecar/requests';
import { canonicalJson } from '../snapshot/canonical-json';
import { readFoundSnapshot, readSnapshot, resolveSnapshotOid } from '../snapshot/store';
import { checkSnapshot, failureCode } from './verify';
import { findTask } from '../tasks/provenance';
import { keptResult, publishTaskRecord } from '../tasks/record';
import { isTerminal } from '../tasks/model';
import {
  decodeDescriptor,
  encodeDescriptor,
  handoffId,
  HANDOFF_SCHEMA,
  isoSeconds,
  parseDuration,
  validateDescriptor,
  type Descriptor,
} from './descriptor';
import {
  handoffObjects,
  handoffRef,
  publishHandoffRef,
  readHandoffRef,
  refImmutable,
  resolveHandoff,
  writeHandoffObjects,
} from './objects';
import { makeSignature, storeSignature, type PendingSignature, type StoredSignature } from './signatures';

export interface CreateHandoffOptions {
  cwd: string;
  /** Snapshot id (full or abbreviated); with `descriptor`, optional and must match it. */
  snapshot?: string;
  to?: string[];
  from?: string;
  title?: string;
  summary?: string;
  findings?: string[];
  negative?: string[];
  artifacts?: string[];
  correlationId?: string;
  /** The task this hands over (full or abbreviated id): the snapshot defaults to its result snapshot,
   * the descriptor names it and carries its correlation id. */
  task?: string;
  /** A duration: 90m, 12h, 7d, 2w. */
  expires?: string;
  /** Id (full or abbreviated) of the handoff this one replaces. */
  supersedes?: string;
  /** Complete descriptor bytes, taken as they are (must already be canonical). */
  descriptor?: Buffer;
  now?: Date;
  /** A client-chosen id making retries idempotent: the same id with the same inputs returns the
   * handoff the first call made (or makes it, if that call died first); with other inputs it is
   * REQUEST_ID_REUSED. Remembered in the sidecar. */
  requestId?: string;
  /** Sign the descriptor with the user's Git signing setup (default: git config xet.handoff.sign).
   * The signature is made before anything is written: SIGNING_FAILED leaves nothing behind. */
  sign?: boolean;
  /** The repository, when the caller has already found it. */
  repo?: Repo;
  /** Its git config, when the caller has already read it. */
  config?: GitConfig;
}

export interface CreateHandoffResult {
  id: string;
  ref: string;
  commit: string;
  snapshot: string;
  /** false: the identical handoff already existed (create is idempotent). */
  created: boolean;
  createdAt: string;
  expiresAt: string | null;
  /** The signature made with --sign (absent without). */
  signature?: StoredSignature;
}

const FLAG_FIELDS = [
  'to',
  'from',
  'title',
  'summary',
  'findings',
  'negative',
  'artifacts',
  'correlationId',
  'task',
  'expires',
  'supersedes',
] as const;

const REQUEST_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$/;

/** The creation time an earlier call with this request id chose, if the inputs are the same. */
function earlierRequest(commonDir: string, requestId: string, inputs: string): string | null {
  const row = withExistingSidecar(commonDir, (db) =>
    db
      .prepare('SELECT inputs_sha256 AS inputs, created_at AS createdAt FROM handoff_requests WHERE request_id = ?')
      .get(requestId),
  ) as { inputs: string; createdAt: string } | undefined | null;
  if (!row) return null;
  if (row.inputs !== inputs) {
    throw new XetError(
      'REQUEST_ID_REUSED',
      `request id ${requestId} was used for a handoff with other inputs; choose a new request id for a new handoff`,
      { requestId },
    );
  }
  return row.createdAt;
}

// Holds the objects lock shared for its whole run: a gc never collects what it is making reachable.
export async function createHandoff(options: CreateHandoffOptions): Promise<CreateHandoffResult> {
  return (await createHandoffTask(options)).result;
}

/** createHandoff, and the task its descriptor names (what `handoff create --push` sends along). */
export async function createHandoffTask(
  options: CreateHandoffOptions,
): Promise<{ result: CreateHandoffResult; task: string | null }> {
  const repo = options.repo ?? (await findRepo(options.cwd, true));
  let task: string | null = null;
  const result = await withObjectsShared(repo.commonDir, () =>
    createHandoffShared(options, repo, (t) => {
      task = t ?? null;
    }),
  );
  return { result, task };
}

async function createHandoffShared(
  options: CreateHandoffOptions,
  repo: Repo,
  named: (task: string | undefined) => void,
): Promise<CreateHandoffResult> {
  tracePhase('handoff: create');
  const opts = repoOpts(repo);
  const { requestId } = options;
  if (requestId !== undefined && !REQUEST_ID_RE.test(requestId)) {
    throw new XetError('USAGE', '--request-id must be 1-128 characters: letters, digits and . _ : @ + = -', {
      requestId,
    });
  }
  let inputs = '';

  let d: Descriptor;
  let bytes: Buffer;
  let id: string;
  let read: { oid: string; manifestBytes: Buffer; commit: boolean } | undefined;
  if (options.descriptor) {
    const given = FLAG_FIELDS.filter((k) => {
      const v = options[k];
      return v !== undefined && !(Array.isArray(v) && v.length === 0);
    });
    if (given.length) {
      throw new XetError('USAGE', `--descriptor takes the whole descriptor; drop ${given.join(', ')}`, { given });
    }
    d = decodeDescriptor(options.descriptor);
    bytes = options.descriptor;
    id = handoffId(bytes);
    inputs = crypto.createHash('sha256').update(bytes).digest('hex');
    if (requestId !== undefined) earlierRequest(repo.commonDir, requestId, inputs);
    if (options.snapshot !== undefined) {
      const oid = await resolveSnapshotOid(options.snapshot, opts);
      if (oid !== d.snapshot.oid) {
        throw new XetError('USAGE', `the descriptor is for snapshot ${d.snapshot.oid}, not ${oid}`, {
          snapshot: oid,
          descriptorSnapshot: d.snapshot.oid,
        });
      }
    }
    await readSnapshot(d.snapshot.oid, opts); // it must be a snapshot, not just any commit
  } else {
    const task = options.task !== undefined ? findTask(repo, options.task) : null;
    let snapshot = options.snapshot;
    let correlationId = options.correlationId;
    if (task) {
      if (snapshot === undefined) {
        if (!task.resultSnapshot) {
          throw new XetError(
            'RESULT_NOT_AVAILABLE',
            `task ${task.id} has no result snapshot (it has not ended, ran with --no-capture, or its capture failed); name the snapshot`,
            { task: task.id, status: task.status },
          );
        }
        snapshot = task.resultSnapshot;
      }
      if (correlationId !== undefined && task.correlationId !== null && correlationId !== task.correlationId) {
        throw new XetError(
          'USAGE',
          `--correlation-id differs from task ${task.id}'s correlation id; drop it (the task's is used)`,
          { task: task.id },
        );
      }
      correlationId ??= task.correlationId ?? undefined;
    }
    if (snapshot === undefined)
      throw new XetError('USAGE', 'handoff create needs <snapshot> (or --task, or --descriptor)');
    if (options.title === undefined) throw new XetError('USAGE', 'handoff create needs --title');
    if (!options.to?.length) throw new XetError('USAGE', 'handoff create needs --to AGENT[,AGENT…]');
    const from = options.from ?? (options.config ?? (await readConfig(opts))).get('xet.agent');
    if (from === undefined) {
      throw new XetError('USAGE', 'handoff create needs --from AGENT (or git config xet.agent)');
    }
    const expiresIn = options.expires !== undefined ? parseDuration(options.expires) : undefined;
    // Found first: a commit of this repository (what this process captured is then not read again).
    const snap = await readFoundSnapshot(repo.commonDir, await resolveSnapshotOid(snapshot, opts), opts);
    read = { oid: snap.oid, manifestBytes: snap.manifestBytes, commit: true };
    const supersedes =
      options.supersedes === undefined
        ? undefined
        : /^[0-9a-f]{64}$/.test(options.supersedes)
          ? options.supersedes // may live elsewhere: a full id is taken as it is
          : (await resolveHandoff(options.supersedes, opts)).id;
    const to = options.to.flatMap((t) => t.split(','));
    // Everything that makes the descriptor, resolved (what an abbreviation or xet.agent meant), except
    // the creation time: a retry with the same request id reuses the first call's.
    inputs = crypto
      .createHash('sha256')
      .update(
        canonicalJson({
          snapshot: snap.oid,
          from,
          to,
          title: options.title,
          summary: options.summary ?? '',
          findings: options.findings ?? [],
          negative: options.negative ?? [],
          artifacts: options.artifacts ?? [],
          correlationId: correlationId ?? null,
          expires: options.expires ?? null,
          supersedes: supersedes ?? null,
          // Only when given: request ids recorded before tasks existed keep their inputs' hash.
          ...(task ? { task: task.id } : {}),
        }),
      )
      .digest('hex');
    const earlier = requestId !== undefined ? earlierRequest(repo.commonDir, requestId, inputs) : null;
    const now = options.now ?? new Date();
    const createdAt = earlier ?? isoSeconds(now);
    d = validateDescriptor({
      schema: HANDOFF_SCHEMA,
      snapshot: {
        oid: snap.oid,
        manifestSha256: crypto.createHash('sha256').update(snap.manifestBytes).digest('hex'),
      },
      from,
      to,
      title: options.title,
      summary: options.summary ?? '',
      findings: options.findings ?? [],
      negative: options.negative ?? [],
      artifacts: options.artifacts ?? [],
      correlationId,
      task: task?.id,
      createdAt,
      expiresAt: expiresIn === undefined ? undefined : isoSeconds(new Date(Date.parse(createdAt) + expiresIn * 1000)),
      supersedes,
    });
    ({ id, bytes } = encodeDescriptor(d));
  }

  // The snapshot side: present, manifest hash as named, every artifact a file or symlink in it.
  // The manifest just read need not be read again (a descriptor given whole names its own hash).
  tracePhase('handoff: check the snapshot');
  const checks = await checkSnapshot(d, opts, options.descriptor ? undefined : read);
  const code = failureCode(checks);
  if (code) {
    const failed = checks.filter((c) => c.ok === false);
    throw new XetError(code, failed.map((c) => c.detail).join('; '), { checks });
  }

  named(d.task);
  const objs = handoffObjects(bytes, d, repo.objectFormat);
  const config = options.config ?? (await readConfig(opts));
  let pending: PendingSignature | null = null;
  if (options.sign ?? config.getBool('xet.handoff.sign') ?? false) {
    pending = await makeSignature(id, bytes, config, options.now);
  }
  const result = (created: boolean): CreateHandoffResult => ({
    id,
    ref: handoffRef(id),
    commit: objs.commit.oid,
    snapshot: d.snapshot.oid,
    created,
    createdAt: d.createdAt,
    expiresAt: d.expiresAt ?? null,
  });
  if (requestId !== undefined) {
    // Reserved only now that every check passed: a refused call leaves the request id unused.
    const row = withSidecar(repo.commonDir, (db) => reserveRequest(db, requestId, inputs, d.createdAt));
    if (row.inputsSha256 !== inputs || row.createdAt !== d.createdAt) {
      // A concurrent first call with this request id won the reservation: converge on its handoff.
      if (row.inputsSha256 === inputs && !options.descriptor) return createHandoff(options);
      throw new XetError('REQUEST_ID_REUSED', `request id ${requestId} was used for a handoff with other inputs`, {
        requestId,
      });
    }
  }
  if (d.task !== undefined && !options.descriptor) {
    // Published before the handoff that names it: whoever sees the handoff can read the task.
    // Only an ended task has a final record (a running one, with its snapshot named, has none yet).
    const task = findTask(repo, d.task);
    if (isTerminal(task.status) && task.endedAt !== null)
      await publishTaskRecord(task, keptResult(repo.commonDir, task), repo.objectFormat, opts);
  }
  tracePhase('handoff: objects and ref');
  const existing = await readHandoffRef(id, opts);
  let created = false;
  if (existing && existing !== objs.commit.oid) throw refImmutable(id, objs.commit.oid, existing);
  if (!existing) {
    // Written here unless git must write them (as capture writes its commit).
    const level = looseWriteLevel(config);
    await writeHandoffObjects(
      objs,
      opts,
      level === null ? undefined : { objectsDir: repo.objectsDir, format: repo.objectFormat, level },
    );
    created = await publishHandoffRef(id, objs.commit.oid, repo.objectFormat, opts);
  }
  if (requestId !== undefined) withSidecar(repo.commonDir, (db) => completeRequest(db, requestId, id));
  if (pending)
    return { ...result(created), signature: await storeSignature(pending, objs.commit.oid, repo.objectFormat, opts) };
  return result(created);
}
