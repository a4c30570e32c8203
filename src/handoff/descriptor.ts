// The handoff descriptor (xet.handoff/v1): its schema (zod, strict), its limits, its canonical bytes
// and its id (the sha256 of those bytes). docs/FORMAT.md describes the same thing for humans.
//
// Unlike manifests, v1 descriptors refuse unknown fields: the id covers every byte, and a field this
// reader does not understand might carry meaning (a condition, a scope) that it would silently
// ignore while still calling the handoff valid. A newer major version is SCHEMA_UNSUPPORTED.

import * as crypto from 'node:crypto';
import type * as Zod from 'zod';
import { XetError } from '../errors';
import { canonicalJson } from '../snapshot/canonical-json';

export const HANDOFF_SCHEMA = 'xet.handoff/v1';
const SCHEMA_RE = /^xet\.handoff\/v(\d+)(?:\.\d+)?$/;

/** Every bound a descriptor must respect; sizes are UTF-8 bytes. Documented in docs/FORMAT.md. */
export const LIMITS = {
  descriptorBytes: 64 * 1024,
  agentBytes: 128,
  recipients: 32,
  titleBytes: 256,
  summaryBytes: 16 * 1024,
  findings: 100,
  negative: 100,
  itemBytes: 4096,
  artifacts: 256,
  artifactBytes: 4096,
  correlationIdBytes: 256,
  /** --expires: at most ten years. */
  maxExpirySeconds: 3650 * 24 * 3600,
} as const;

/** Agent names: no whitespace, no commas (`--to a,b` splits on them), nothing a shell or log would mangle. */
const AGENT_RE = /^[A-Za-z0-9][A-Za-z0-9._@+:/-]*$/;
/** A timestamp to the second, UTC: commit dates have seconds, and one spelling per instant. */
const TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;
const OID_RE = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const SHA256_RE = /^[0-9a-f]{64}$/;
// With the u flag, a well-formed surrogate pair is one code point: \p{Cs} finds only lone halves,
// which UTF-8 cannot encode (they would not survive a round trip through the bytes).
const LONE_SURROGATE = /\p{Cs}/u;
const CONTROL = /\p{Cc}/u;
const CONTROL_BUT_NEWLINE_TAB = /[^\P{Cc}\n\t]/u;
// Bidirectional embeddings, overrides and isolates reorder how text is displayed ("Trojan Source"):
// a title could show another title, a finding hide a line. Refused like control characters.
// Unicode's Bidi_Control set (embeddings, overrides, isolates and the three marks) and the line and
// paragraph separators: each can make printed text say something other than its bytes.
const BIDI_CONTROL = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C\u2028\u2029]/u;
const UNSAFE_TO_SHOW = /[\p{Cc}\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C\u2028\u2029]/gu;

/** Text from elsewhere (a ref name, a message quoting one) as it may be printed: control and bidi
 * characters escaped as \u{…}, so nothing can reorder or hide what a terminal shows. */
export function displaySafe(s: string): string {
  return s.replace(UNSAFE_TO_SHOW, (c) => `\\u{${(c.codePointAt(0) as number).toString(16)}}`);
}

export const bytesOf = (s: string): number => Buffer.byteLength(s, 'utf8');

// zod is loaded on first use, as for manifests (~30 ms at start-up).
function buildSchema() {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { z } = require('zod') as typeof Zod;
  const text = (what: string, max: number, opts: { min?: number; multiline?: boolean } = {}) =>
    z
      .string()
      .refine((s) => bytesOf(s) >= (opts.min ?? 0), { message: `${what} must not be empty` })
      .refine((s) => bytesOf(s) <= max, { message: `${what} is longer than ${max} bytes (UTF-8)` })
      .refine((s) => !LONE_SURROGATE.test(s), { message: `${what} holds an unpaired surrogate (not UTF-8)` })
      .refine((s) => !(opts.multiline ? CONTROL_BUT_NEWLINE_TAB : CONTROL).test(s), {
        message: `${what} holds a control character${opts.multiline ? ' (only newline and tab are allowed)' : ''}`,
      })
      .refine((s) => !BIDI_CONTROL.test(s), {
        message: `${what} holds a bidirectional control or separator character (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C, U+2028, U+2029)`,
      });
  const agent = z
    .string()
    .max(LIMITS.agentBytes, { message: `an agent name is at most ${LIMITS.agentBytes} bytes` })
    .regex(AGENT_RE, {
      message: 'an agent name is ASCII letters, digits and . _ @ + : / - (starting with a letter or digit)',
    });
  const time = (what: string) =>
    z.string().refine((s) => TIME_RE.test(s) && !Number.isNaN(Date.parse(s)) && isoSeconds(new Date(s)) === s, {
      message: `${what} must be a UTC time to the second, like 2025-01-31T12:00:00Z`,
    });
  const unique = (what: string) => (a: string[], ctx: Zod.RefinementCtx<string[]>) => {
    if (new Set(a).size !== a.length) ctx.addIssue({ code: 'custom', message: `${what} lists an entry twice` });
  };
  return z
    .strictObject({
      schema: z.literal(HANDOFF_SCHEMA),
      snapshot: z.strictObject({
        oid: z.string().regex(OID_RE, { message: 'snapshot.oid must be a full commit id' }),
        manifestSha256: z.string().regex(SHA256_RE, { message: 'snapshot.manifestSha256 must be 64 hex digits' }),
      }),
      from: agent,
      to: z
        .array(agent)
        .min(1, { message: 'a handoff needs at least one recipient (--to)' })
        .max(LIMITS.recipients, { message: `at most ${LIMITS.recipients} recipients` })
        .superRefine(unique('to')),
      title: text('title', LIMITS.titleBytes, { min: 1 }),
      summary: text('summary', LIMITS.summaryBytes, { multiline: true }),
      findings: z
        .array(text('a finding', LIMITS.itemBytes, { min: 1, multiline: true }))
        .max(LIMITS.findings, { message: `at most ${LIMITS.findings} findings` }),
      negative: z
        .array(text('a negative result', LIMITS.itemBytes, { min: 1, multiline: true }))
        .max(LIMITS.negative, { message: `at most ${LIMITS.negative} negative results` }),
      artifacts: z
        .array(
          text('an artifact path', LIMITS.artifactBytes, { min: 1 }).refine(isArtifactPath, {
            message: 'an artifact path must be relative to the worktree, "/"-separated, without ".", ".." or ".git"',
          }),
        )
        .max(LIMITS.artifacts, { message: `at most ${LIMITS.artifacts} artifacts` })
        .superRefine(unique('artifacts')),
      correlationId: text('correlationId', LIMITS.correlationIdBytes, { min: 1 }).optional(),
      task: z
        .string()
        .regex(/^[0-9a-f]{16}$/, { message: 'task must be a task id (16 lowercase hex digits)' })
        .optional(),
      createdAt: time('createdAt'),
      expiresAt: time('expiresAt').optional(),
      supersedes: z.string().regex(SHA256_RE, { message: 'supersedes must be a full handoff id' }).optional(),
    })
    .superRefine((d, ctx) => {
      if (d.expiresAt !== undefined && d.expiresAt <= d.createdAt) {
        ctx.addIssue({ code: 'custom', path: ['expiresAt'], message: 'expiresAt must be after createdAt' });
      }
    });
}

let schema: ReturnType<typeof buildSchema> | null = null;
function descriptorSchema(): ReturnType<typeof buildSchema> {
  schema ??= buildSchema();
  return schema;
}

export type Descriptor = Zod.infer<ReturnType<typeof buildSchema>>;

export function isoSeconds(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

/** Whether a path can name an artifact: the syntax rules of snapshot paths (src/snapshot/paths.ts). */
function isArtifactPath(p: string): boolean {
  return (
    !p.startsWith('/') && p.split('/').every((c) => c !== '' && c !== '.' && c !== '..' && c.toLowerCase() !== '.git')
  );
}

/** Validate a value against xet.handoff/v1 and its limits; HANDOFF_INVALID (or SCHEMA_UNSUPPORTED). */
export function validateDescriptor(raw: unknown): Descriptor {
  const s = (raw as { schema?: unknown } | null)?.schema;
  const m = typeof s === 'string' ? SCHEMA_RE.exec(s) : null;
  if (m && m[1] !== '1') {
    throw new XetError('SCHEMA_UNSUPPORTED', `the descriptor is ${s}; this git xet reads only ${HANDOFF_SCHEMA}`, {
      schema: s,
      supported: HANDOFF_SCHEMA,
    });
  }
  const parsed = descriptorSchema().safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message }));
    const first = issues[0];
    throw new XetError(
      'HANDOFF_INVALID',
      `invalid handoff descriptor: ${first.path ? `${first.path}: ` : ''}${first.message}`,
      {
        issues,
      },
    );
  }
  return parsed.data;
}

export interface Encoded {
  id: string;
  bytes: Buffer;
}

/** The canonical bytes of a valid descriptor and its id; HANDOFF_INVALID past the size limit. */
export function encodeDescriptor(d: Descriptor): Encoded {
  const bytes = Buffer.from(canonicalJson(d), 'utf8');
  checkSize(bytes.length);
  return { id: handoffId(bytes), bytes };
}

export function handoffId(bytes: Buffer): string {
  return crypto.createHash('sha256').update(bytes).digest('hex');
}

function checkSize(n: number): void {
  if (n > LIMITS.descriptorBytes) {
    throw new XetError(
      'HANDOFF_INVALID',
      `the descriptor is ${n} bytes; a handoff descriptor is at most ${LIMITS.descriptorBytes} bytes (64 KiB)`,
      { bytes: n, limit: LIMITS.descriptorBytes },
    );
  }
}

/** Size, UTF-8 and JSON of stored or supplied bytes: the parsed value and its text. HANDOFF_INVALID. */
export function parseDescriptorBytes(bytes: Buffer): { value: unknown; text: string } {
  checkSize(bytes.length);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new XetError('HANDOFF_INVALID', 'the descriptor is not valid UTF-8');
  }
  try {
    return { value: JSON.parse(text) as unknown, text };
  } catch (e) {
    throw new XetError('HANDOFF_INVALID', `the descriptor is not JSON: ${(e as Error).message}`);
  }
}

/**
 * Whether `text` is the canonical spelling of `value`: one value must be one byte string, or one
 * handoff would have two ids. Compared against the raw parse, so duplicate keys, whitespace and
 * needless escapes all show.
 */
export function isCanonical(value: unknown, text: string): boolean {
  try {
    return canonicalJson(value) === text;
  } catch {
    return false; // a float or unsafe integer has no canonical spelling
  }
}

export const NOT_CANONICAL =
  'the descriptor is not canonical JSON (sorted keys, no whitespace, no needless escapes, no duplicate keys)';

/** Decode descriptor bytes completely: size, UTF-8, JSON, schema and limits, canonical form. */
export function decodeDescriptor(bytes: Buffer): Descriptor {
  const { value, text } = parseDescriptorBytes(bytes);
  const d = validateDescriptor(value);
  if (!isCanonical(value, text)) throw new XetError('HANDOFF_INVALID', NOT_CANONICAL);
  return d;
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 7 * 86400 };

/** `--expires 90m` / `12h` / `7d` / `2w` → seconds; USAGE for anything else. */
export function parseDuration(text: string): number {
  const m = /^([1-9]\d{0,9})([smhdw])$/.exec(text.trim());
  const seconds = m ? Number(m[1]) * UNITS[m[2]] : NaN;
  if (!m || !(seconds <= LIMITS.maxExpirySeconds)) {
    throw new XetError(
      'USAGE',
      `--expires ${JSON.stringify(text)}: expected a positive number and a unit s, m, h, d or w (at most 3650d)`,
      { expires: text },
    );
  }
  return seconds;
}

export function isExpired(d: Pick<Descriptor, 'expiresAt'>, now = new Date()): boolean {
  return d.expiresAt !== undefined && Date.parse(d.expiresAt) <= now.getTime();
}
