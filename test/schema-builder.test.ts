// The command definitions' schema builder (src/commands/schema.ts) against zod: for every
// definition's inputs and outputs and a table of values of each field kind, the builder's own
// validation (what the CLI runs) and toZod's zod schema (what the MCP server runs) accept and refuse
// alike, parse to the same value and report the same first issue. And the point of the builder: a
// real CLI process for --version, help and a capture never loads zod.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { z } from 'zod';
import { captureCommand } from '../src/commands/capture';
import { COMMANDS } from '../src/commands/registry';
import { parseInput } from '../src/cli/from-spec';
import { s, toZod, type AnySchema, type InferShape, type Shape } from '../src/commands/schema';
import { initRepo, run } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { XET_BIN } from './support/xet';
import { manifestSchema } from '../src/snapshot/manifest';

type Outcome = { ok: true; data: unknown } | { ok: false; path: string; message: string };

function outcome(r: {
  success: boolean;
  data?: unknown;
  error?: { issues: readonly { path: readonly PropertyKey[]; message: string }[] };
}): Outcome {
  if (r.success) return { ok: true, data: r.data };
  const first = r.error?.issues[0];
  return { ok: false, path: (first?.path ?? []).map(String).join('.'), message: first?.message ?? '' };
}

/** The builder and zod agree on `value`. */
function agree(node: AnySchema, value: unknown, label: string): void {
  const ours = outcome(node.safeParse(value));
  const theirs = outcome(toZod(node).safeParse(value));
  assert.deepEqual(ours, theirs, `${label}: ${JSON.stringify(value)}`);
}

/** Values for a field of each kind, valid and not: what a flag or an MCP client might send. */
const COMMON: unknown[] = [
  undefined,
  null,
  '',
  'x',
  '-v a=b',
  '7',
  0,
  7,
  -1,
  1.5,
  NaN,
  Infinity,
  true,
  false,
  [],
  ['a'],
  ['a', 'b'],
  [5],
  ['a', null],
  {},
  { a: 1 },
];

function samples(node: AnySchema): unknown[] {
  const extra: unknown[] = [];
  let n: AnySchema = node;
  while (['optional', 'nullable', 'default'].includes(n.kind)) n = (n as unknown as { inner: AnySchema }).inner;
  if (n.kind === 'enum') {
    const options = (n as unknown as { options: string[] }).options;
    extra.push(...options, options[0].toUpperCase(), `${options[0]} `, options);
  }
  return [...COMMON, ...extra];
}

/** A value the node accepts (the first option, one element, every field). */
function valid(node: AnySchema): unknown {
  const n = node as unknown as Record<string, unknown> & AnySchema;
  switch (node.kind) {
    case 'string':
      return 'text';
    case 'number':
      return 3;
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'unknown':
      return 'anything';
    case 'literal':
      return n.value;
    case 'enum':
      return (n.options as string[])[0];
    case 'array':
      return [valid(n.element as AnySchema)];
    case 'union':
      return valid((n.options as AnySchema[])[0]);
    case 'record':
      return { k: valid(n.valueType as AnySchema) };
    case 'object':
      return Object.fromEntries(Object.entries(n.shape as Shape).map(([k, v]) => [k, valid(v)]));
    default:
      return valid(n.inner as AnySchema);
  }
}

/** A valid value and variants of it that break (or stretch) one part each: a field missing, null,
 * of another type, an element wrong, an extra key. */
function variants(node: AnySchema, depth = 0): unknown[] {
  const n = node as unknown as Record<string, unknown> & AnySchema;
  const base = valid(node);
  const out: unknown[] = [base, null, undefined, 'text', 3, [], {}];
  if (depth > 3) return out;
  if (node.kind === 'object') {
    for (const [k, v] of Object.entries(n.shape as Shape)) {
      const rest = { ...(base as Record<string, unknown>) };
      delete rest[k];
      out.push(rest);
      for (const x of variants(v, depth + 1)) out.push({ ...(base as object), [k]: x });
    }
    out.push({ ...(base as object), extraKey: 1 });
  } else if (node.kind === 'array') {
    for (const x of variants(n.element as AnySchema, depth + 1)) out.push([x], [base, x]);
  } else if (['optional', 'nullable', 'default'].includes(node.kind)) {
    out.push(...variants(n.inner as AnySchema, depth + 1));
  } else if (node.kind === 'union') {
    for (const o of n.options as AnySchema[]) out.push(...variants(o, depth + 1));
  } else if (node.kind === 'record') {
    for (const x of variants(n.valueType as AnySchema, depth + 1)) out.push({ k: x });
  }
  return out;
}

test('every input field of every definition: the builder and toZod agree on each sample value', () => {
  let checked = 0;
  for (const spec of COMMANDS) {
    for (const [key, field] of Object.entries(spec.input as Shape)) {
      for (const v of samples(field)) {
        agree(field, v, `${spec.path.join(' ')}.${key}`);
        checked++;
      }
    }
  }
  assert.ok(checked > 1000, `${checked} checks`);
});

test("every definition's whole input: parseInput (the builder) and zod's strict object agree", () => {
  for (const spec of COMMANDS) {
    const shape = spec.input as Shape;
    const ours = s.strictObject(shape);
    const theirs = z.object(Object.fromEntries(Object.entries(shape).map(([k, v]) => [k, toZod(v)]))).strict();
    const full = valid(ours) as Record<string, unknown>;
    const inputs: Record<string, unknown>[] = [{}, full, { ...full, bogus: 1 }, { bogus: 1, other: 2 }];
    for (const [key, field] of Object.entries(shape)) {
      for (const v of samples(field)) inputs.push({ ...full, [key]: v });
      const without = { ...full };
      delete without[key];
      inputs.push(without);
    }
    for (const raw of inputs) {
      const a = outcome(ours.safeParse(raw));
      const b = outcome(theirs.safeParse(raw));
      const label = `${spec.path.join(' ')}: ${JSON.stringify(raw)}`;
      assert.deepEqual(a, b, label);
      // parseInput's USAGE error is built from the first issue: the same words as zod's would be.
      let error: { code?: string; message?: string } | undefined;
      try {
        parseInput({ ...spec, refine: undefined }, raw);
      } catch (e) {
        error = e as { code?: string; message?: string };
      }
      if (b.ok) assert.equal(error, undefined, label);
      else {
        assert.equal(error?.code, 'USAGE', label);
        const where = b.path ? `${b.path}: ` : '';
        assert.equal(error?.message, `${spec.path.join(' ')}: ${where}${b.message}`, label);
      }
    }
  }
});

test('every output schema: the builder and toZod agree on a valid result and on each broken variant', () => {
  let checked = 0;
  for (const spec of COMMANDS) {
    if (!spec.output) continue;
    const out = spec.output as AnySchema;
    for (const v of variants(out)) {
      agree(out, v, `${spec.path.join(' ')} output`);
      checked++;
    }
    assert.equal(out.safeParse(valid(out)).success, true, spec.path.join(' '));
  }
  assert.ok(checked > 500, `${checked} checks`);
});

test('the kinds and checks the definitions may use agree with zod, bounds and defaults included', () => {
  const table: [string, AnySchema, unknown[]][] = [
    ['array min', s.array(s.string()).min(1), [[], [''], '', 'abc', [1], ['a', 1]]],
    ['array max', s.array(s.number()).max(2), [[1, 2], [1, 2, 3], ['a', 'b', 'c'], 'abc']],
    ['string min/max', s.string().min(2).max(3), ['a', 'ab', 'abcd', '😀', '😀😀', '😀😀😀😀', 5]],
    ['regex', s.string().regex(/^[0-9a-f]{4}$/), ['beef', 'BEEF', 'beefs', '', 4096, null, ['beef']]],
    ['regex and length', s.string().min(3).regex(/^a/), ['ab', 'abc', 'b', 'bcd', 7]],
    ['number bounds', s.number().min(1).max(10), [0, 1, 10, 11, 1.5, NaN, -Infinity, '5']],
    ['int', s.number().int(), [1, 1.5, 2 ** 53, -(2 ** 53), 0, '1']],
    ['int min', s.number().int().min(0), [-1, -1.5, 0]],
    ['literal', s.literal('a'), ['a', 'b', 1]],
    ['null', s.null(), [null, undefined, 0]],
    ['enum one', s.enum(['only']), ['only', 'other']],
    ['union', s.union([s.number(), s.string()]), [1, '1', true, null, undefined]],
    ['union checks', s.union([s.string().min(3), s.number()]), ['ab', 'abc', 1, true]],
    ['record', s.record(s.string(), s.number()), [{}, { a: 1 }, { a: 'x' }, [], null, new Date(0)]],
    ['nullable optional', s.string().nullable().optional(), [null, undefined, 'a', 1]],
    ['default', s.array(s.string()).default([]), [undefined, [], ['a'], null, 'a']],
    ['enum default', s.enum(['a', 'b']).default('a'), [undefined, 'b', 'c']],
    ['optional default', s.boolean().default(true).optional(), [undefined, false, 'x']],
    [
      'object kinds',
      s.object({ a: s.string(), b: s.number().optional(), c: s.boolean().default(false), d: s.unknown() }),
      [{}, { a: 'x' }, { a: 'x', b: undefined }, { a: 'x', e: 1 }, { a: 1, b: 'y' }, { a: 'x', d: undefined }],
    ],
    ['loose object', s.looseObject({ a: s.string() }), [{ a: 'x', z: 1 }, { z: 1 }, []]],
    ['strict object', s.strictObject({ a: s.string().optional() }), [{}, { b: 1 }, { b: 1, c: 2 }, { a: 5, b: 1 }]],
  ];
  for (const [label, node, values] of table) for (const v of values) agree(node, v, label);
  // A default is a fresh value per parse: a shared [] would collect every caller's.
  const d = s.array(s.string()).default([]);
  const first = d.safeParse(undefined);
  assert.ok(first.success);
  first.data.push('x');
  assert.deepEqual(d.safeParse(undefined).data, []);
  // A described node's description reaches zod (help and the MCP schema show it).
  assert.equal(toZod(s.string().optional().describe('said')).description, 'said');
});

// Type level: the builder infers what z.infer gave for the same schema.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const expectType = <T extends true>(): T => true as T;
const builtShape = {
  a: s.string(),
  b: s.string().optional(),
  c: s.array(s.string()).default([]),
  d: s.enum(['x', 'y']).optional(),
  e: s.union([s.number(), s.string()]).optional(),
  f: s.boolean().default(true),
  g: s.number().nullable(),
  h: s.array(s.string()).min(1),
};
const zodShape = {
  a: z.string(),
  b: z.string().optional(),
  c: z.array(z.string()).default([]),
  d: z.enum(['x', 'y']).optional(),
  e: z.union([z.number(), z.string()]).optional(),
  f: z.boolean().default(true),
  g: z.number().nullable(),
  h: z.array(z.string()).min(1),
};
expectType<Equal<InferShape<typeof builtShape>, z.infer<z.ZodObject<typeof zodShape>>>>();
void [builtShape, zodShape];
// And a definition's run gets that type (not any).
expectType<
  Equal<
    Parameters<typeof captureCommand.run>[0],
    {
      message?: string | undefined;
      ignored?: 'all' | 'none' | undefined;
      include: string[];
      exclude: string[];
      always?: boolean | undefined;
    }
  >
>();

/** Runs node with `args` and a preload that records, at exit, whether any zod module was loaded. */
function zodLoaded(sb: Sandbox, cwd: string, args: string[]): boolean {
  const probe = sb.path('zod-probe.js');
  const report = sb.path('zod-probe.json');
  fs.writeFileSync(
    probe,
    `process.on('exit', () => require('fs').writeFileSync(process.env.ZOD_PROBE_OUT, JSON.stringify(` +
      `Object.keys(require.cache).filter((k) => k.includes('/node_modules/zod/')))));\n`,
  );
  fs.rmSync(report, { force: true });
  const r = run(sb, cwd, process.execPath, args, {
    env: { NODE_OPTIONS: `--require=${probe}`, ZOD_PROBE_OUT: report, GIT_XET_NO_DAEMON: '1' },
  });
  assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr.toString()}`);
  return (JSON.parse(fs.readFileSync(report, 'utf8')) as string[]).length > 0;
}

test('the CLI does not load zod: --version, help, and a real capture in a repository', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'repo');
    r.commit('c1', { 'a.txt': 'a\n' });
    r.write('u.txt', 'untracked\n');
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, '--version']), false, '--version');
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, 'capture', '--help']), false, 'capture --help');
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, 'capture', '--json']), false, 'capture');
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, 'capture', '--always', '-m', 'again']), false, 'capture again');
    // A restore and a verify validate the manifest with the builder, not zod.
    const snap = JSON.parse(
      run(sb, r.dir, process.execPath, [XET_BIN, 'capture', '--always', '--json']).stdout.toString(),
    ).snapshot as string;
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, 'restore', snap, sb.path('copy')]), false, 'restore');
    assert.equal(zodLoaded(sb, r.dir, [XET_BIN, 'verify', snap, sb.path('copy')]), false, 'verify');
    // The manifest schema and its zod twin agree on the real manifest and on broken variants of it.
    const manifest = JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`)) as Record<string, unknown>;
    const schema = manifestSchema();
    agree(schema, manifest, 'the real manifest');
    assert.equal(schema.safeParse(manifest).success, true);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- edits reach into any field
    const broken: [string, (m: Record<string, any>) => void][] = [
      ['no refs', (m) => delete m.refs],
      ['a bad ref oid', (m) => (m.refs = [{ name: 'refs/heads/x', oid: 'zz', type: 'commit' }])],
      ['an upper-case oid', (m) => (m.head = { kind: 'detached', oid: 'A'.repeat(40) })],
      ['a head of another kind', (m) => (m.head = { kind: 'other', ref: 'refs/heads/main' })],
      ['a string count', (m) => (m.counts.files = '3')],
      ['a fractional count', (m) => (m.counts.bytes = 1.5)],
      ['an unknown skip reason', (m) => (m.skipped = [{ path: 'a', reason: 'elsewhere' }])],
      ['an unknown key (kept)', (m) => (m.future = { any: 1 })],
      ['an unknown key inside (kept)', (m) => (m.index.future = true)],
      ['a null oid of a branch (allowed)', (m) => (m.head = { kind: 'branch', ref: 'refs/heads/main', oid: null })],
      ['chunked not strings', (m) => (m.chunked = [1])],
      [
        'repositories of a bad kind',
        (m) => (m.repositories = [{ path: 'a', kind: 'x', gitDir: null, snapshot: 'a'.repeat(40) }]),
      ],
      [
        'sparse without its booleans',
        (m) => (m.sparse = { sparseCheckout: null, cone: null, sparseIndex: null, patterns: null }),
      ],
      ['not an object', (m) => (m.policy = [])],
    ];
    for (const [label, edit] of broken) {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const m = structuredClone(manifest) as Record<string, any>;
      edit(m);
      agree(schema, m, label);
    }
    // The probe does see zod where it is loaded: the MCP server's tool schemas are built with it.
    const server = JSON.stringify(path.resolve(__dirname, '../src/mcp/server.js'));
    const registry = JSON.stringify(path.resolve(__dirname, '../src/commands/registry.js'));
    const script = `require(${server}).toolDefinition(require(${registry}).COMMANDS.find((c) => c.tool === 'capture'))`;
    assert.equal(zodLoaded(sb, r.dir, ['-e', script]), true, 'the MCP path');
  });
});
