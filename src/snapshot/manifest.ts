// The snapshot manifest (xet.snapshot/v1): the part of a working tree's state that trees cannot
// hold. This module owns its schema (zod), its version rules and its serialisation; docs/FORMAT.md
// describes the same thing for humans. A reader accepts any v1 manifest (unknown fields are kept, so
// minor additions stay readable) and refuses any other major version.

import { s, type Infer } from '../commands/schema';
import { XetError } from '../errors';
import { canonicalJson } from './canonical-json';

export const SNAPSHOT_SCHEMA = 'xet.snapshot/v1';
/** Written instead of v1 when a snapshot holds state that a reader of v1 would silently restore
 * wrong (nested repositories, unmerged entries, an operation in progress, sparse checkout): an older
 * git xet then refuses it by name instead of misreading it. Additions an old reader may ignore
 * without losing content (file times, hard links) stay v1. See docs/FORMAT.md. */
export const SNAPSHOT_SCHEMA_V2 = 'xet.snapshot/v2';
/** Written when any file is stored as chunks (src/chunks/): a v1 or v2 reader would restore the
 * pointers as the files' contents. v3 is v2 plus `chunked` and the `chunks/` tree. */
export const SNAPSHOT_SCHEMA_V3 = 'xet.snapshot/v3';
/** Written when the `filemeta` entry is a tree of parts (a large files tree, filemeta.ts): a reader
 * of v1-v3 would find no filemeta blob and restore every file with the restore's time and every
 * hard link as a copy. v4 is v3 plus that tree; a snapshot without chunked files may be v4. */
export const SNAPSHOT_SCHEMA_V4 = 'xet.snapshot/v4';
/** The versions this reader understands, oldest first. */
const READABLE = [SNAPSHOT_SCHEMA, SNAPSHOT_SCHEMA_V2, SNAPSHOT_SCHEMA_V3, SNAPSHOT_SCHEMA_V4];
const READABLE_MAJORS = new Set(READABLE.map((v) => v.slice(v.lastIndexOf('v') + 1)));
const SCHEMA_RE = /^xet\.snapshot\/v(\d+)(?:\.(\d+))?$/;

// Written with the command definitions' builder (src/commands/schema.ts), which validates as zod
// does (same accept/reject, same messages; test/schema-builder.test.ts holds it to zod) without
// loading zod: requiring zod took ~100 ms of every restore, verify and accept.
function buildSchema() {
  const z = s;
  const oid = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/);

  const SkipReason = z.enum([
    'fifo',
    'socket',
    'block-device',
    'char-device',
    'nested-repository',
    'unreadable',
    'git-refuses-path',
  ]);

  return z.looseObject({
    schema: z.string(),
    tool: z.looseObject({ name: z.string(), version: z.string() }),
    git: z.looseObject({ version: z.string(), objectFormat: z.enum(['sha1', 'sha256']) }),
    platform: z.looseObject({ os: z.string(), arch: z.string() }),
    createdAt: z.string(),
    message: z.string(),
    source: z.looseObject({ worktree: z.string(), linkedWorktree: z.boolean() }),
    head: z.union([
      z.looseObject({ kind: z.literal('branch'), ref: z.string(), oid: oid.nullable() }),
      z.looseObject({ kind: z.literal('detached'), oid }),
    ]),
    refs: z.array(
      z.looseObject({
        name: z.string(),
        oid,
        type: z.enum(['commit', 'tag', 'tree', 'blob']),
        symref: z.string().optional(),
      }),
    ),
    stash: z.array(z.looseObject({ oid, message: z.string() })),
    config: z.array(z.looseObject({ key: z.string(), value: z.string() })),
    index: z.looseObject({
      version: z.number().int(),
      intentToAdd: z.array(z.string()),
      skipWorktree: z.array(z.string()),
      assumeUnchanged: z.array(z.string()),
      // Entries whose recorded stat size differs from the file (git calls them modified unread).
      staleSizes: z.array(z.object({ path: z.string(), size: z.number().int() })).optional(),
    }),
    emptyDirs: z.array(z.string()),
    info: z.looseObject({ exclude: z.string().nullable(), attributes: z.string().nullable() }),
    policy: z.looseObject({
      ignored: z.enum(['all', 'none']),
      include: z.array(z.string()),
      exclude: z.array(z.string()),
      secretPatterns: z.array(z.string()),
      excludedSecrets: z.array(z.string()),
      excludedByPattern: z.number().int(),
      ignoredNotCaptured: z.number().int(),
    }),
    skipped: z.array(z.looseObject({ path: z.string(), reason: SkipReason })),
    // Unmerged index entries, an operation in progress, sparse checkout (operation-state.ts; v2).
    unmerged: z.array(z.looseObject({ path: z.string(), stage: z.number().int(), mode: z.string(), oid })).optional(),
    operation: z
      .looseObject({
        kinds: z.array(z.string()),
        refs: z.array(z.looseObject({ name: z.string(), oid })),
        exec: z.array(z.string()),
      })
      .optional(),
    sparse: z
      .looseObject({
        sparseCheckout: z.string().nullable(),
        cone: z.string().nullable(),
        sparseIndex: z.string().nullable(),
        worktreeConfig: z.boolean(),
        patterns: z.string().nullable(),
      })
      .optional(),
    // Submodules and nested repositories, each captured as its own snapshot (a parent of this one).
    repositories: z
      .array(
        z.looseObject({
          path: z.string(),
          kind: z.enum(['submodule', 'nested']),
          gitDir: z.string().nullable(),
          snapshot: oid,
        }),
      )
      .optional(),
    // Paths of files/ whose blob is a chunk pointer (src/chunks/pointer.ts; v3), sorted.
    chunked: z.array(z.string()).optional(),
    counts: z.looseObject({
      files: z.number().int(),
      bytes: z.number().int(),
      tracked: z.number().int(),
      untracked: z.number().int(),
      ignored: z.number().int(),
      symlinks: z.number().int(),
      emptyDirs: z.number().int(),
      // Bytes counting each hard-linked inode once; paths that are links of an earlier path;
      // inodes with links outside the captured paths (restored as separate files).
      diskBytes: z.number().int().optional(),
      hardLinks: z.number().int().optional(),
      externalLinks: z.number().int().optional(),
      // Chunked files and their distinct chunks (v3).
      chunkedFiles: z.number().int().optional(),
      chunks: z.number().int().optional(),
    }),
  });
}

let schema: ReturnType<typeof buildSchema> | null = null;
export function manifestSchema(): ReturnType<typeof buildSchema> {
  schema ??= buildSchema();
  return schema;
}

export type Manifest = Infer<ReturnType<typeof buildSchema>>;
export type ManifestRef = Manifest['refs'][number];

/** The schema a new manifest is written with: the oldest whose readers would not misread it. Each
 * feature that needs a later version adds its test here; `partedFileMeta` says the snapshot's
 * filemeta is a tree of parts (not visible in the manifest). */
export function schemaFor(m: Manifest, how: { partedFileMeta?: boolean } = {}): string {
  if (m.schema === SNAPSHOT_SCHEMA_V4 || how.partedFileMeta) return SNAPSHOT_SCHEMA_V4;
  if (m.schema === SNAPSHOT_SCHEMA_V3 || (m.chunked?.length ?? 0) > 0) return SNAPSHOT_SCHEMA_V3;
  const needsV2: boolean[] = [
    m.schema === SNAPSHOT_SCHEMA_V2,
    // Conflicts, an operation in progress, sparse checkout (operation-state.ts).
    Boolean(m.unmerged?.length || m.operation || m.sparse),
    // A v1 reader would restore the outer tree without its inner repositories.
    (m.repositories?.length ?? 0) > 0,
    // A v1 reader's schema does not know this reason and would call the snapshot invalid.
    m.skipped.some((s) => s.reason === 'git-refuses-path'),
  ];
  return needsV2.some(Boolean) ? SNAPSHOT_SCHEMA_V2 : SNAPSHOT_SCHEMA;
}

export function serializeManifest(m: Manifest): Buffer {
  return Buffer.from(canonicalJson(m), 'utf8');
}

/** Parse manifest bytes; refuses unknown major versions and anything not matching the schema. */
export function parseManifest(bytes: Buffer | string, where = 'manifest.json', validated = false): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch (e) {
    throw new XetError('SNAPSHOT_INVALID', `${where} is not JSON: ${(e as Error).message}`);
  }
  const schema = (raw as { schema?: unknown } | null)?.schema;
  const m = typeof schema === 'string' ? SCHEMA_RE.exec(schema) : null;
  if (!m) throw new XetError('SNAPSHOT_INVALID', `${where} has no xet.snapshot schema`, { schema });
  if (!READABLE_MAJORS.has(m[1])) {
    throw new XetError(
      'SCHEMA_UNSUPPORTED',
      `${where} is ${schema}; this git xet reads only ${READABLE.slice(0, -1).join(', ')} and ${READABLE.at(-1)} — upgrade git xet to read it`,
      { schema, supported: READABLE },
    );
  }
  // Bytes already validated once (same snapshot id, same bytes) need not load zod again.
  if (validated) return raw as Manifest;
  const parsed = manifestSchema().safeParse(raw);
  if (!parsed.success) {
    throw new XetError(
      'SNAPSHOT_INVALID',
      `${where} does not match ${SNAPSHOT_SCHEMA}: ${parsed.error.issues[0]?.message}`,
      {
        issues: parsed.error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message })),
      },
    );
  }
  return parsed.data;
}
