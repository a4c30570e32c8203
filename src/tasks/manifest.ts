// The task manifest (xet.task/v1): what a task was started with, frozen before its command starts.
// This module owns its schema (zod), its canonical bytes and hash, the correlation id's rules and the
// measurement of the runtime's version; docs/FORMAT.md "Tasks" describes the same for humans.
// There is no update path: the bytes are stored once (store.insertTask) and a trigger refuses any
// change, so config read here (xet.task.retention, xet.task.killGrace) is the policy of that task
// whatever the config says later.
import { spawn, type ChildProcess } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as path from 'node:path';
import type * as Zod from 'zod';
import { XetError } from '../errors';
import type { GitConfig } from '../git/config';
import { gitVersion } from '../git/exec';
import { parseDuration } from '../gc/duration';
import { canonicalJson } from '../snapshot/canonical-json';
import { TOOL_VERSION } from '../version';
import {
  CORRELATION_ID_MAX_BYTES,
  DEFAULT_KILL_GRACE_MS,
  MANIFEST_SCHEMA_VERSION,
  RESULT_CHUNK_MAX,
  RESULT_INLINE_MAX,
  RESULT_MAX,
  TASK_PROTOCOL_VERSION,
  type SlotMode,
} from './model';
import { retentionMsFromConfig } from './retention';
import { cachedVersion, executableKey, rememberVersion, resolveExecutable } from './runtime-versions';

export const TASK_SCHEMA = 'xet.task/v1';
const SCHEMA_RE = /^xet\.task\/v(\d+)(?:\.\d+)?$/;

/** Commands whose version is measured (`<command> --version`); any other is 'unmeasured'. */
export const MEASURED_RUNTIMES = ['node', 'python3', 'python', 'git', 'npm', 'pnpm', 'make', 'bash'] as const;
/** How long a runtime gets to print its version before the manifest says null. */
export const RUNTIME_VERSION_TIMEOUT_MS = 2000;
/** A measured version longer than this is cut (a banner, not a version). */
const RUNTIME_VERSION_MAX = 128;

// ---------------------------------------------------------------------------------------------
// The command's name

/** A recorded command name is at most this many UTF-8 bytes. */
export const COMMAND_NAME_MAX_BYTES = 64;

/**
 * What the manifest, the row and every event record of the command: a name, never its arguments.
 * A whole command line passed as one string (`task run -- "$CMD"`) would otherwise put its prompt
 * or credentials into immutable records, so argv[0] is cut at its first whitespace or control
 * character, then reduced to its basename and to 64 bytes (on a character boundary). '' when
 * nothing is left (`/`, spaces): task run refuses that as USAGE.
 */
export function commandName(argv0: string): string {
  // eslint-disable-next-line no-control-regex
  const token = argv0.replace(/^\s+/u, '').split(/[\s\x00-\x1f\x7f-\x9f]/u)[0];
  const name = Buffer.from(path.basename(token), 'utf8');
  if (name.length <= COMMAND_NAME_MAX_BYTES) return name.toString('utf8');
  let end = COMMAND_NAME_MAX_BYTES;
  while (end > 0 && (name[end] & 0xc0) === 0x80) end--;
  return name.subarray(0, end).toString('utf8');
}

// ---------------------------------------------------------------------------------------------
// Correlation ids

/**
 * An opaque id from the caller: 1 to 256 UTF-8 bytes, no ASCII control character (C0 or DEL), no
 * unpaired surrogate (it could not be stored as UTF-8). Never parsed, routed or made unique.
 * USAGE otherwise, before anything is written.
 */
export function validateCorrelationId(id: string): string {
  const bytes = Buffer.byteLength(id, 'utf8');
  if (bytes === 0) throw new XetError('USAGE', '--correlation-id must not be empty', { bytes });
  if (bytes > CORRELATION_ID_MAX_BYTES) {
    throw new XetError(
      'USAGE',
      `--correlation-id is ${bytes} bytes of UTF-8; a correlation id is at most ${CORRELATION_ID_MAX_BYTES} bytes`,
      { bytes, limit: CORRELATION_ID_MAX_BYTES },
    );
  }
  // eslint-disable-next-line no-control-regex
  const control = /[\x00-\x1f\x7f]/.exec(id);
  if (control) {
    const code = (control[0].codePointAt(0) as number).toString(16).padStart(2, '0');
    throw new XetError(
      'USAGE',
      `--correlation-id holds the control character U+00${code.toUpperCase()} at character ${control.index}; a correlation id has no ASCII control characters`,
      { at: control.index, char: `U+00${code.toUpperCase()}` },
    );
  }
  if (/\p{Cs}/u.test(id)) {
    throw new XetError('USAGE', '--correlation-id holds an unpaired surrogate: it is not valid UTF-8');
  }
  return id;
}

// ---------------------------------------------------------------------------------------------
// Policy from config, read once at creation

export interface TaskPolicy {
  /** Whether the workspace is captured when the task ends (--no-capture: false). */
  capture: boolean;
  killGraceMs: number;
  /** How long the task is kept after it ends; null: never collected. */
  retentionMs: number | null;
  /** Further policy a caller freezes with it (hooks installed, ...): canonical JSON values. */
  [more: string]: unknown;
}

/** The longest xet.task.killGrace: a task's end must not wait longer than this for its processes. */
export const KILL_GRACE_MAX_SECONDS = 86400;
/** The longest xet.task.retention short of never (the manifest holds it as whole milliseconds). */
export const RETENTION_MAX_SECONDS = 100 * 365 * 86400;

/** xet.task.killGrace (default 2 s) and xet.task.retention (default 168 h); CONFIG_INVALID if bad. */
export function taskConfig(config: GitConfig): { killGraceMs: number; retentionMs: number | null } {
  const grace = config.get('xet.task.killGrace');
  let killGraceMs = DEFAULT_KILL_GRACE_MS;
  if (grace !== undefined) {
    const s = parseDuration(grace, 'xet.task.killGrace duration', 'CONFIG_INVALID');
    if (!Number.isFinite(s)) {
      throw new XetError('CONFIG_INVALID', 'xet.task.killGrace cannot be never: a task must end', { value: grace });
    }
    if (s > KILL_GRACE_MAX_SECONDS) {
      throw new XetError('CONFIG_INVALID', `xet.task.killGrace ${grace} is too long: at most 1d`, {
        value: grace,
        maxSeconds: KILL_GRACE_MAX_SECONDS,
      });
    }
    killGraceMs = s * 1000;
  }
  const retentionMs = retentionMsFromConfig(config.get('xet.task.retention'));
  if (retentionMs !== null && retentionMs > RETENTION_MAX_SECONDS * 1000) {
    throw new XetError('CONFIG_INVALID', 'xet.task.retention is too long: at most 100y, or never', {
      value: config.get('xet.task.retention'),
      maxSeconds: RETENTION_MAX_SECONDS,
    });
  }
  return { killGraceMs, retentionMs };
}

// ---------------------------------------------------------------------------------------------
// The runtime's version

export interface Runtime {
  command: string;
  version: string | null;
  versionSource: 'measured' | 'unmeasured';
  inFlightRecovery: 'session-resume' | 'none';
  /**
   * With versionSource 'measured': false when this task's start ran `--version`, true when the
   * version is an earlier task's measurement of the very same file (src/tasks/runtime-versions.ts).
   */
  versionCached?: boolean;
  /** With versionSource 'measured': when `--version` ran. */
  versionMeasuredAt?: string;
}

export interface RuntimeVersion {
  version: string | null;
  cached: boolean;
  measuredAt: string | null;
}

/**
 * The version of an allowlisted command: from the cache in `cacheDir` when the executable PATH
 * resolves to is the file measured before (same realpath, inode, size, times, cwd and PATH), else
 * measured (measureRuntimeVersion) and remembered.
 */
export async function runtimeVersion(
  argv0: string,
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; cacheDir?: string } = {},
): Promise<RuntimeVersion> {
  const none: RuntimeVersion = { version: null, cached: false, measuredAt: null };
  if (!(MEASURED_RUNTIMES as readonly string[]).includes(path.basename(argv0))) return none;
  if (argv0.includes('/') && !path.isAbsolute(argv0)) return none;
  const env = opts.env ?? process.env;
  const exe = opts.cacheDir !== undefined ? resolveExecutable(argv0, opts.cwd, env) : null;
  const key = exe !== null ? executableKey(exe, opts.cwd, env) : null;
  if (key !== null && opts.cacheDir !== undefined) {
    const hit = cachedVersion(opts.cacheDir, key);
    if (hit) return { version: hit.version, cached: true, measuredAt: hit.measuredAt };
  }
  const measuredAt = new Date().toISOString();
  const version = await measureRuntimeVersion(argv0, opts);
  if (version === null) return none;
  // Remembered only if the file is still the one that answered.
  if (key !== null && opts.cacheDir !== undefined && exe !== null && executableKey(exe, opts.cwd, env) === key) {
    rememberVersion(opts.cacheDir, key, { version, measuredAt });
  }
  return { version, cached: false, measuredAt };
}

/**
 * `<command> --version` for an allowlisted command, run as the task would find it (its PATH, its
 * cwd), 2 s at most. Only a bare name (found on PATH) or an absolute path is run: a relative one is
 * a file of the workspace, and running it once more than asked is not ours to do.
 */
export function measureRuntimeVersion(
  argv0: string,
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<string | null> {
  const name = path.basename(argv0);
  if (!(MEASURED_RUNTIMES as readonly string[]).includes(name)) return Promise.resolve(null);
  if (argv0.includes('/') && !path.isAbsolute(argv0)) return Promise.resolve(null);
  return new Promise((resolve) => {
    let out = '';
    let done = false;
    const finish = (v: string | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(v);
    };
    let child: ChildProcess;
    try {
      child = spawn(argv0, ['--version'], {
        cwd: opts.cwd,
        env: opts.env ?? process.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch {
      return resolve(null);
    }
    // Our own timer, not execFile's: a child the runtime left behind could keep the pipes open
    // (and the callback waiting) long after the runtime itself was killed.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      child.stdout?.destroy();
      child.stderr?.destroy();
      finish(null);
    }, opts.timeoutMs ?? RUNTIME_VERSION_TIMEOUT_MS);
    const take = (d: Buffer) => {
      if (out.length < 64 * 1024) out += d.toString('utf8');
    };
    child.stdout?.on('data', take);
    // python 2 prints its version on stderr.
    child.stderr?.on('data', take);
    child.on('error', () => finish(null));
    child.on('close', (code) => {
      if (code !== 0) return finish(null);
      const first = out.split('\n').find((l) => l.trim() !== '');
      if (!first) return finish(null);
      const line = first.trim();
      const m = /\d+(?:\.\d+)+(?:[-+.][0-9A-Za-z.+-]*)?/.exec(line);
      finish((m ? m[0] : line).slice(0, RUNTIME_VERSION_MAX));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Building the manifest

export interface ManifestInput {
  taskId: string;
  /** ISO time with ms; the deadline counts from it. */
  createdAt: string;
  /** The command as given (argv[0]): only its basename is recorded. */
  argv0: string;
  sessionId: string | null;
  /** `task run --continue <task>`. */
  continuesTask: string | null;
  correlationId: string | null;
  workspace: {
    /** The fork id, or the worktree's basename. */
    alias: string;
    slot: string;
    /** The command's cwd relative to the worktree ('.' at its top). */
    cwd: string;
    mode: SlotMode;
  };
  baseSnapshot: string | null;
  timeoutMs: number;
  policy: TaskPolicy;
  /** Where the runtime is measured (the slot's cwd, the task's environment). */
  runtimeCwd?: string;
  runtimeEnv?: NodeJS.ProcessEnv;
  /** A version measured already (tests, a caller that knows it): skips the measurement. */
  runtimeVersion?: string | null;
  /** The directory of the measured-versions cache (the sidecar's); none: always measured. */
  versionCacheDir?: string;
}

export interface TaskManifest {
  schema: typeof TASK_SCHEMA;
  schemaVersion: 1;
  taskId: string;
  createdAt: string;
  tool: { name: 'git-xet'; version: string };
  git: { version: string };
  protocolVersion: number;
  runtime: Runtime;
  workspace: ManifestInput['workspace'];
  policy: TaskPolicy;
  policySha256: string;
  limits: { timeoutMs: number; resultInlineBytes: number; resultMaxBytes: number; chunkMaxBytes: number };
  baseSnapshot: string | null;
  continuation: { sessionId: string | null; continuesTask: string | null } | null;
  correlationId: string | null;
  deadlineAt: string;
}

export interface BuiltManifest {
  manifest: TaskManifest;
  /** The canonical JSON stored as manifest_json. */
  json: string;
  /** sha256 of `json` (UTF-8), stored as manifest_sha256. */
  sha256: string;
}

export const sha256Hex = (text: string): string => crypto.createHash('sha256').update(text, 'utf8').digest('hex');

/** The manifest of a task about to start; every input is validated first (USAGE). */
export async function buildManifest(input: ManifestInput): Promise<BuiltManifest> {
  if (input.correlationId !== null) validateCorrelationId(input.correlationId);
  if (!Number.isSafeInteger(input.timeoutMs) || input.timeoutMs <= 0) {
    throw new XetError('USAGE', `the timeout must be a positive whole number of milliseconds, not ${input.timeoutMs}`);
  }
  // Cheap checks of what the caller computed (zod is not loaded here): a bug fails the task
  // before it starts instead of storing a manifest `task show` would refuse.
  const bad = [
    !/^[0-9a-f]{16}$/.test(input.taskId) && 'taskId',
    input.continuesTask !== null && !/^[0-9a-f]{16}$/.test(input.continuesTask) && 'continuesTask',
    input.baseSnapshot !== null && !/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(input.baseSnapshot) && 'baseSnapshot',
    path.isAbsolute(input.workspace.cwd) && 'workspace.cwd',
  ].filter(Boolean);
  if (bad.length) throw new Error(`buildManifest: invalid ${bad.join(', ')}`);
  const created = Date.parse(input.createdAt);
  if (Number.isNaN(created)) throw new Error(`buildManifest: createdAt ${input.createdAt} is not a time`);
  const deadline = created + input.timeoutMs;
  if (!Number.isFinite(new Date(deadline).getTime()) || deadline > 8.64e15) {
    throw new XetError('USAGE', `the timeout of ${input.timeoutMs} ms is too long`);
  }
  const measured =
    input.runtimeVersion !== undefined
      ? null
      : await runtimeVersion(input.argv0, {
          cwd: input.runtimeCwd,
          env: input.runtimeEnv,
          cacheDir: input.versionCacheDir,
        });
  const version = measured ? measured.version : (input.runtimeVersion as string | null);
  const policy = input.policy;
  const manifest: TaskManifest = {
    schema: TASK_SCHEMA,
    schemaVersion: MANIFEST_SCHEMA_VERSION as 1,
    taskId: input.taskId,
    createdAt: new Date(created).toISOString(),
    tool: { name: 'git-xet', version: TOOL_VERSION },
    git: { version: gitVersion().join('.') },
    protocolVersion: TASK_PROTOCOL_VERSION,
    runtime: {
      command: commandName(input.argv0),
      version,
      versionSource: version === null ? 'unmeasured' : 'measured',
      inFlightRecovery: input.sessionId !== null ? 'session-resume' : 'none',
      ...(measured && measured.measuredAt !== null
        ? { versionCached: measured.cached, versionMeasuredAt: measured.measuredAt }
        : {}),
    },
    workspace: { ...input.workspace },
    policy,
    policySha256: sha256Hex(canonicalJson(policy)),
    limits: {
      timeoutMs: input.timeoutMs,
      resultInlineBytes: RESULT_INLINE_MAX,
      resultMaxBytes: RESULT_MAX,
      chunkMaxBytes: RESULT_CHUNK_MAX,
    },
    baseSnapshot: input.baseSnapshot,
    continuation:
      input.sessionId !== null || input.continuesTask !== null
        ? { sessionId: input.sessionId, continuesTask: input.continuesTask }
        : null,
    correlationId: input.correlationId,
    deadlineAt: new Date(deadline).toISOString(),
  };
  // Not validated with zod here: loading it costs ~30 ms of every task's start, and the tests check
  // that what this builds is what parseTaskManifest accepts.
  const json = canonicalJson(manifest);
  return { manifest, json, sha256: sha256Hex(json) };
}

// ---------------------------------------------------------------------------------------------
// Reading it back

// zod is loaded on first use (~30 ms at start-up), as for the other formats.
function buildSchema() {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { z } = require('zod') as typeof Zod;
  const iso = z.string().refine((s) => !Number.isNaN(Date.parse(s)), { message: 'must be an ISO time' });
  const oid = z.string().regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/);
  const hex16 = z.string().regex(/^[0-9a-f]{16}$/);
  const ms = z.number().int().nonnegative();
  // Objects are loose: a minor addition of v1 stays readable (docs/FORMAT.md, the additive rule).
  return z
    .object({
      schema: z.string(),
      schemaVersion: z.literal(1),
      taskId: hex16,
      createdAt: iso,
      tool: z.object({ name: z.string(), version: z.string() }).loose(),
      git: z.object({ version: z.string() }).loose(),
      protocolVersion: z.number().int().positive(),
      runtime: z
        .object({
          command: z.string().min(1),
          version: z.string().nullable(),
          versionSource: z.enum(['measured', 'unmeasured']),
          inFlightRecovery: z.enum(['session-resume', 'none']),
          versionCached: z.boolean().optional(),
          versionMeasuredAt: iso.optional(),
        })
        .loose(),
      workspace: z
        .object({
          alias: z.string(),
          slot: z.string(),
          cwd: z.string().refine((s) => !s.startsWith('/'), { message: 'cwd is relative to the worktree' }),
          mode: z.enum(['worktree', 'overlay', 'clone', 'copy']),
        })
        .loose(),
      policy: z.object({ capture: z.boolean(), killGraceMs: ms, retentionMs: ms.nullable() }).loose(),
      policySha256: z.string().regex(/^[0-9a-f]{64}$/),
      limits: z.object({ timeoutMs: ms, resultInlineBytes: ms, resultMaxBytes: ms, chunkMaxBytes: ms }).loose(),
      baseSnapshot: oid.nullable(),
      continuation: z.object({ sessionId: z.string().nullable(), continuesTask: hex16.nullable() }).loose().nullable(),
      correlationId: z
        .string()
        .nullable()
        .refine((s) => s === null || Buffer.byteLength(s, 'utf8') <= CORRELATION_ID_MAX_BYTES, {
          message: `correlationId is at most ${CORRELATION_ID_MAX_BYTES} bytes`,
        }),
      deadlineAt: iso,
    })
    .loose();
}

let schema: ReturnType<typeof buildSchema> | null = null;

/**
 * Validate a manifest (its text as stored, or a value): SCHEMA_UNSUPPORTED for another major
 * version, INTEGRITY_MISMATCH for anything that breaks xet.task/v1 (the sidecar's bytes were
 * written by a v1 writer, so a failure means they are not what was written).
 */
export function parseTaskManifest(raw: unknown, where = 'the task manifest'): TaskManifest {
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch (e) {
      throw new XetError('INTEGRITY_MISMATCH', `${where} is not JSON: ${(e as Error).message}`);
    }
  }
  const s = (value as { schema?: unknown } | null)?.schema;
  const m = typeof s === 'string' ? SCHEMA_RE.exec(s) : null;
  const major = (value as { schemaVersion?: unknown } | null)?.schemaVersion;
  if ((m && m[1] !== '1') || (typeof major === 'number' && major !== 1)) {
    throw new XetError(
      'SCHEMA_UNSUPPORTED',
      `${where} is ${String(s)} (schemaVersion ${String(major)}); this git xet reads only ${TASK_SCHEMA}`,
      { schema: s, schemaVersion: major, supported: TASK_SCHEMA },
    );
  }
  if (!m) throw new XetError('INTEGRITY_MISMATCH', `${where} has no ${TASK_SCHEMA} schema`, { schema: s });
  schema ??= buildSchema();
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message }));
    throw new XetError(
      'INTEGRITY_MISMATCH',
      `${where} breaks ${TASK_SCHEMA}: ${issues[0].path ? `${issues[0].path}: ` : ''}${issues[0].message}`,
      { issues },
    );
  }
  return parsed.data as TaskManifest;
}

/**
 * A stored manifest checked against its row: the bytes hash to manifest_sha256, they are the
 * canonical spelling of what they hold, and they match the schema. INTEGRITY_MISMATCH otherwise.
 */
export function verifyStoredManifest(row: { id: string; manifestJson: string; manifestSha256: string }): TaskManifest {
  const where = `the manifest of task ${row.id}`;
  const actual = sha256Hex(row.manifestJson);
  if (actual !== row.manifestSha256) {
    throw new XetError('INTEGRITY_MISMATCH', `${where} does not hash to its recorded sha256`, {
      task: row.id,
      expected: row.manifestSha256,
      actual,
    });
  }
  const manifest = parseTaskManifest(row.manifestJson, where);
  let canonical: boolean;
  try {
    canonical = canonicalJson(JSON.parse(row.manifestJson)) === row.manifestJson;
  } catch {
    canonical = false;
  }
  if (!canonical) throw new XetError('INTEGRITY_MISMATCH', `${where} is not canonical JSON`, { task: row.id });
  if (manifest.taskId !== row.id) {
    throw new XetError('INTEGRITY_MISMATCH', `${where} names task ${manifest.taskId}`, { task: row.id });
  }
  return manifest;
}
