// TEMPORARY (runner branch): a stand-in with the same exports and signatures as the task-store
// helper's src/tasks/manifest.ts (buildManifest, taskConfig, validateCorrelationId), so that
// `task run` builds before that branch is merged. After the merge runner.ts imports './manifest'
// instead and this file is deleted; nothing else imports it.
import * as crypto from 'node:crypto';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitConfig } from '../git/config';
import { gitVersion } from '../git/exec';
import { parseDuration } from '../gc/duration';
import { canonicalJson } from '../snapshot/canonical-json';
import { TOOL_VERSION } from '../version';
import {
  CORRELATION_ID_MAX_BYTES,
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_RETENTION_MS,
  MANIFEST_SCHEMA_VERSION,
  RESULT_CHUNK_MAX,
  RESULT_INLINE_MAX,
  RESULT_MAX,
  TASK_PROTOCOL_VERSION,
  type SlotMode,
} from './model';

export function validateCorrelationId(id: string): string {
  // eslint-disable-next-line no-control-regex
  if (!id || Buffer.byteLength(id, 'utf8') > CORRELATION_ID_MAX_BYTES || /[\x00-\x1f\x7f]|\p{Cs}/u.test(id)) {
    throw new XetError(
      'USAGE',
      `--correlation-id must be 1 to ${CORRELATION_ID_MAX_BYTES} bytes without control characters`,
    );
  }
  return id;
}

export interface TaskPolicy {
  capture: boolean;
  killGraceMs: number;
  retentionMs: number | null;
  [more: string]: unknown;
}

export function taskConfig(config: GitConfig): { killGraceMs: number; retentionMs: number | null } {
  const g = config.get('xet.task.killGrace');
  const r = config.get('xet.task.retention');
  const gs = g === undefined ? DEFAULT_KILL_GRACE_MS / 1000 : parseDuration(g, 'duration', 'CONFIG_INVALID');
  if (!Number.isFinite(gs)) throw new XetError('CONFIG_INVALID', 'xet.task.killGrace cannot be never');
  const rs = r === undefined ? DEFAULT_RETENTION_MS / 1000 : parseDuration(r, 'duration', 'CONFIG_INVALID');
  return { killGraceMs: gs * 1000, retentionMs: rs === Infinity ? null : rs * 1000 };
}

export interface ManifestInput {
  taskId: string;
  createdAt: string;
  argv0: string;
  sessionId: string | null;
  continuesTask: string | null;
  correlationId: string | null;
  workspace: { alias: string; slot: string; cwd: string; mode: SlotMode };
  baseSnapshot: string | null;
  timeoutMs: number;
  policy: TaskPolicy;
  runtimeCwd?: string;
  runtimeEnv?: NodeJS.ProcessEnv;
  runtimeVersion?: string | null;
}

const sha256Hex = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest('hex');

export async function buildManifest(i: ManifestInput): Promise<{ json: string; sha256: string }> {
  const policy = i.policy;
  const m = {
    schema: 'xet.task/v1',
    schemaVersion: MANIFEST_SCHEMA_VERSION,
    taskId: i.taskId,
    createdAt: i.createdAt,
    tool: { name: 'git-xet', version: TOOL_VERSION },
    git: { version: gitVersion().join('.') },
    protocolVersion: TASK_PROTOCOL_VERSION,
    runtime: {
      command: path.basename(i.argv0),
      version: null,
      versionSource: 'unmeasured',
      inFlightRecovery: i.sessionId ? 'session-resume' : 'none',
    },
    workspace: i.workspace,
    policy,
    policySha256: sha256Hex(canonicalJson(policy)),
    limits: {
      timeoutMs: i.timeoutMs,
      resultInlineBytes: RESULT_INLINE_MAX,
      resultMaxBytes: RESULT_MAX,
      chunkMaxBytes: RESULT_CHUNK_MAX,
    },
    baseSnapshot: i.baseSnapshot,
    continuation: i.continuesTask || i.sessionId ? { sessionId: i.sessionId, continuesTask: i.continuesTask } : null,
    correlationId: i.correlationId,
    deadlineAt: new Date(Date.parse(i.createdAt) + i.timeoutMs).toISOString(),
  };
  const json = canonicalJson(m);
  return { json, sha256: sha256Hex(json) };
}
