// TEMPORARY (runner branch): a minimal builder of the task manifest (xet.task/v1, the shape in the
// lead's design) so that `task run` builds and runs before the task-store helper's
// src/tasks/manifest.ts (buildManifest) is merged. The lead replaces the one call in runner.ts with
// buildManifest and deletes this file; nothing else imports it.
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as path from 'node:path';
import { canonicalJson } from '../snapshot/canonical-json';
import { gitVersion } from '../git/exec';
import { TOOL_VERSION } from '../version';
import {
  MANIFEST_SCHEMA_VERSION,
  RESULT_CHUNK_MAX,
  RESULT_INLINE_MAX,
  RESULT_MAX,
  TASK_PROTOCOL_VERSION,
  type SlotMode,
} from './model';

export interface ManifestInput {
  taskId: string;
  createdAt: string;
  argv0: string;
  sessionId: string | null;
  continuesTask: string | null;
  correlationId: string | null;
  alias: string;
  slot: string;
  cwd: string;
  mode: SlotMode;
  capture: boolean;
  killGraceMs: number;
  retentionMs: number;
  timeoutMs: number;
  deadlineAt: string;
  baseSnapshot: string | null;
}

const MEASURED = ['node', 'python3', 'python', 'git', 'npm', 'pnpm', 'make', 'bash'];

function measure(command: string): string | null {
  if (!MEASURED.includes(command)) return null;
  const r = spawnSync(command, ['--version'], { timeout: 2000, encoding: 'utf8' });
  if (r.status !== 0) return null;
  return (r.stdout || '').split('\n')[0].trim().slice(0, 200) || null;
}

const sha256 = (s: string) => crypto.createHash('sha256').update(s, 'utf8').digest('hex');

export function temporaryManifest(i: ManifestInput): { json: string; sha256: string } {
  const command = path.basename(i.argv0);
  const version = measure(command);
  const policy = { capture: i.capture, killGraceMs: i.killGraceMs, retentionMs: i.retentionMs, hooks: true };
  const m = {
    schema: 'xet.task/v1',
    schemaVersion: MANIFEST_SCHEMA_VERSION,
    taskId: i.taskId,
    createdAt: i.createdAt,
    tool: { name: 'git-xet', version: TOOL_VERSION },
    git: { version: gitVersion().join('.') },
    protocolVersion: TASK_PROTOCOL_VERSION,
    runtime: {
      command,
      version,
      versionSource: version === null ? 'unmeasured' : 'measured',
      inFlightRecovery: i.sessionId ? 'session-resume' : 'none',
    },
    workspace: { alias: i.alias, slot: i.slot, cwd: i.cwd, mode: i.mode },
    policy,
    policySha256: sha256(canonicalJson(policy)),
    limits: {
      timeoutMs: i.timeoutMs,
      resultInlineBytes: RESULT_INLINE_MAX,
      resultMaxBytes: RESULT_MAX,
      chunkMaxBytes: RESULT_CHUNK_MAX,
    },
    baseSnapshot: i.baseSnapshot,
    continuation: i.continuesTask || i.sessionId ? { sessionId: i.sessionId, continuesTask: i.continuesTask } : null,
    correlationId: i.correlationId,
    deadlineAt: i.deadlineAt,
  };
  const json = canonicalJson(m);
  return { json, sha256: sha256(json) };
}
