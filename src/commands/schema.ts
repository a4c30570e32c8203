// The schema builder command definitions are written with (src/commands/*.ts): zod's chained
// surface for the shapes their inputs and outputs use (`s.string().optional().describe(…)`,
// `s.looseObject({…})`), recording a plain descriptor tree instead of loading zod. Requiring zod 4
// is 60–120 ms of a start-up (it loads ~95 modules, every locale among them), and every command paid
// it: the registry builds every definition when the CLI loads. This module owns the tree, its
// validation (safeParse: zod's accept/reject answers, parsed values, issue paths and messages, so
// the command line's USAGE errors read as they did) and toZod(), which builds the equivalent zod
// schema on demand for the one front end that needs zod: the MCP server (src/mcp/server.ts).
// test/schema-builder.test.ts holds the two validations to agreement on every definition.

import type * as Zod from 'zod';

/** A node's kind: the same word as zod's `_zod.def.type` for the same schema. */
export type Kind =
  | 'string'
  | 'number'
  | 'boolean'
  | 'null'
  | 'unknown'
  | 'literal'
  | 'enum'
  | 'array'
  | 'union'
  | 'record'
  | 'object'
  | 'optional'
  | 'nullable'
  | 'default';

/** One problem found, as zod reports it: `path` from the value's root, `message` in zod's words. */
export interface Issue {
  code: string;
  path: PropertyKey[];
  message: string;
  /** zod's marker: a check that failed but let the other checks run (length bounds, unknown keys). */
  continue?: boolean;
}

export type SafeParseResult<T> =
  { success: true; data: T; error?: undefined } | { success: false; data?: undefined; error: { issues: Issue[] } };

interface Payload {
  value: unknown;
  issues: Issue[];
}

// zod's English messages (zod/v4/locales/en.js), for the issues this builder can raise.
const stringify = (v: unknown): string => (typeof v === 'string' ? `"${v}"` : `${String(v)}`);

function typeName(v: unknown): string {
  if (typeof v === 'number') return Number.isNaN(v) ? 'NaN' : Number.isFinite(v) ? 'number' : String(v);
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'object') {
    const ctor = (v as { constructor?: { name?: string } }).constructor;
    if (Object.getPrototypeOf(v) !== Object.prototype && ctor && 'constructor' in (v as object))
      return ctor.name ?? 'object';
  }
  return typeof v;
}

const invalidType = (expected: string, input: unknown, extra: Partial<Issue> = {}): Issue => ({
  code: 'invalid_type',
  path: [],
  message: `Invalid input: expected ${expected}, received ${typeName(input)}`,
  ...extra,
});

const UNITS: Record<string, string> = { string: 'characters', array: 'items' };

function sizeIssue(code: 'too_small' | 'too_big', origin: string, bound: number, abort = false): Issue {
  const adj = code === 'too_small' ? '>=' : '<=';
  const what = code === 'too_small' ? 'Too small' : 'Too big';
  const unit = UNITS[origin];
  return {
    code,
    path: [],
    message: unit
      ? `${what}: expected ${origin} to have ${adj}${bound} ${unit}`
      : `${what}: expected ${origin} to be ${adj}${bound}`,
    continue: !abort,
  };
}

/** zod's util.aborted: an issue that stops the checks after it (a wrong type does). */
const aborted = (issues: Issue[], from = 0): boolean => issues.slice(from).some((i) => i.continue !== true);
const explicitlyAborted = (issues: Issue[]): boolean => issues.some((i) => i.continue === false);

const prefix = (key: PropertyKey, issues: Issue[]): Issue[] => issues.map((i) => ({ ...i, path: [key, ...i.path] }));

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (!isObject(v)) return false;
  const ctor = (v as { constructor?: unknown }).constructor;
  if (ctor === undefined || typeof ctor !== 'function') return true;
  const proto = (ctor as { prototype?: unknown }).prototype;
  return isObject(proto) && Object.prototype.hasOwnProperty.call(proto, 'isPrototypeOf');
}

/** Unicode code points, as zod counts a string's length. */
function codePoints(s: string): number {
  return Array.from(s).length;
}

/** A copy for a chained call (zod's schemas are immutable: `.describe()` makes a new one). */
function clone<T extends object>(node: T, changes: Partial<T>): T {
  return Object.assign(Object.create(Object.getPrototypeOf(node)) as T, node, changes);
}

/** One node of the tree. `Out` is the parsed value's type; `Opt` whether an object may leave the
 * key out (optional(), as zod's inference makes it `key?:`). */
export abstract class Schema<Out = unknown, Opt extends boolean = false> {
  /** Types only (never set): what a parse gives, and whether the key is optional. */
  declare readonly _output: Out;
  declare readonly _optional: Opt;
  abstract readonly kind: Kind;
  /** The text of `.describe()`, on the node it was called on (as zod keeps it). */
  description?: string;

  /** zod's optin/optout: may an object's key be absent, and is it then left out of the result. */
  get optIn(): 'optional' | 'defaulted' | undefined {
    return undefined;
  }
  get optOut(): 'optional' | undefined {
    return undefined;
  }

  /** Validates `p.value` in place, as zod's `_zod.run`: the parsed value replaces it, issues add up. */
  abstract run(p: Payload): void;

  safeParse(value: unknown): SafeParseResult<Out> {
    const p: Payload = { value, issues: [] };
    this.run(p);
    return p.issues.length ? { success: false, error: { issues: p.issues } } : { success: true, data: p.value as Out };
  }

  optional(): OptionalSchema<this> {
    return new OptionalSchema(this);
  }
  nullable(): NullableSchema<this> {
    return new NullableSchema(this);
  }
  default(value: Exclude<Out, undefined>): DefaultSchema<this> {
    return new DefaultSchema(this, value);
  }
  describe(description: string): this {
    return clone(this as Schema<Out, Opt>, { description }) as this;
  }
  array(): ArraySchema<this> {
    return new ArraySchema(this);
  }

  /** What zod's `_zod.def` says of the same schema, for code that inspects schemas the zod way
   * (src/cli/from-spec.ts's unwrapField reads definitions written with this builder and, in tests,
   * with zod alike); `traits` is what `instanceof z.ZodString` and the like test in zod 4. Not a
   * zod schema: zod cannot run it (toZod makes one). */
  get _zod(): { def: Record<string, unknown> & { type: Kind }; traits: Set<string> } {
    return {
      def: { ...this.zodDef(), type: this.kind },
      traits: new Set([`Zod${this.kind[0].toUpperCase()}${this.kind.slice(1)}`]),
    };
  }
  protected zodDef(): Record<string, unknown> {
    return {};
  }
}

/** Any node, whatever it parses to. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnySchema = Schema<any, boolean>;
/** An object's fields. */
export type Shape = Record<string, AnySchema>;

/** The type a node parses to (zod's z.infer). */
export type Infer<T> = T extends Schema<infer O, boolean> ? O : never;
type OptionalKeys<S extends Shape> = { [K in keyof S]: S[K] extends Schema<unknown, true> ? K : never }[keyof S];
type Flatten<T> = { [K in keyof T]: T[K] } & {};
/** The type an object of `S` parses to: z.infer<z.ZodObject<S>>, optional fields as `key?:`. */
export type InferShape<S extends Shape> = Flatten<
  { [K in Exclude<keyof S, OptionalKeys<S>>]: Infer<S[K]> } & { [K in OptionalKeys<S>]?: Infer<S[K]> }
>;

type LengthCheck = { kind: 'min' | 'max'; value: number };

function runLengthChecks(p: Payload, checks: LengthCheck[]): void {
  for (const c of checks) {
    // zod runs a length bound whenever the value has a length (even after a wrong type), unless an
    // issue said stop.
    const v = p.value as { length?: unknown } | null | undefined;
    if (explicitlyAborted(p.issues) || v === null || v === undefined || v.length === undefined) continue;
    const length = typeof v === 'string' ? codePoints(v) : (v.length as number);
    const origin = Array.isArray(v) ? 'array' : typeof v === 'string' ? 'string' : 'unknown';
    if (c.kind === 'min' && length < c.value) p.issues.push(sizeIssue('too_small', origin, c.value));
    if (c.kind === 'max' && length > c.value) p.issues.push(sizeIssue('too_big', origin, c.value));
  }
}

export class StringSchema extends Schema<string> {
  readonly kind = 'string';
  checks: LengthCheck[] = [];
  patterns: RegExp[] = [];
  min(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'min', value }] } as Partial<this>);
  }
  max(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'max', value }] } as Partial<this>);
  }
  /** As zod's `.regex()`: the string must match (checked after the length bounds, as zod orders
   * them only when they come first; the manifest uses it alone). */
  regex(pattern: RegExp): this {
    return clone(this, { patterns: [...this.patterns, pattern] } as Partial<this>);
  }
  run(p: Payload): void {
    if (typeof p.value !== 'string') p.issues.push(invalidType('string', p.value));
    runLengthChecks(p, this.checks);
    for (const re of this.patterns) {
      // zod runs a check without a `when` only while no issue has stopped the value.
      if (p.issues.some((i) => i.continue !== true)) break;
      re.lastIndex = 0;
      if (!re.test(p.value as string)) {
        p.issues.push({
          code: 'invalid_format',
          path: [],
          message: `Invalid string: must match pattern ${re.toString()}`,
          continue: true,
        });
      }
    }
  }
}

type NumberCheck = { kind: 'min' | 'max' | 'int'; value: number };

export class NumberSchema extends Schema<number> {
  readonly kind = 'number';
  checks: NumberCheck[] = [];
  min(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'min', value }] } as Partial<this>);
  }
  max(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'max', value }] } as Partial<this>);
  }
  /** A safe integer (zod 4's int()). */
  int(): this {
    return clone(this, { checks: [...this.checks, { kind: 'int', value: 0 }] } as Partial<this>);
  }
  run(p: Payload): void {
    const v = p.value;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      p.issues.push(invalidType('number', v));
      return;
    }
    for (const c of this.checks) {
      if (aborted(p.issues)) break;
      if (c.kind === 'min' && v < c.value) p.issues.push(sizeIssue('too_small', 'number', c.value));
      else if (c.kind === 'max' && v > c.value) p.issues.push(sizeIssue('too_big', 'number', c.value));
      else if (c.kind === 'int') {
        if (!Number.isInteger(v)) p.issues.push(invalidType('int', v, { continue: false }));
        else if (v > Number.MAX_SAFE_INTEGER) p.issues.push(sizeIssue('too_big', 'int', Number.MAX_SAFE_INTEGER));
        else if (v < Number.MIN_SAFE_INTEGER) p.issues.push(sizeIssue('too_small', 'int', Number.MIN_SAFE_INTEGER));
      }
    }
  }
}

export class BooleanSchema extends Schema<boolean> {
  readonly kind = 'boolean';
  run(p: Payload): void {
    if (typeof p.value !== 'boolean') p.issues.push(invalidType('boolean', p.value));
  }
}

export class NullSchema extends Schema<null> {
  readonly kind = 'null';
  run(p: Payload): void {
    if (p.value !== null) p.issues.push(invalidType('null', p.value));
  }
}

export class UnknownSchema extends Schema<unknown> {
  readonly kind = 'unknown';
  // Any value, but (as zod 4.6 has it) its key must be present in an object.
  run(): void {}
}

export class LiteralSchema<T extends string | number | boolean | null> extends Schema<T> {
  readonly kind = 'literal';
  constructor(readonly value: T) {
    super();
  }
  run(p: Payload): void {
    if (p.value !== this.value)
      p.issues.push({ code: 'invalid_value', path: [], message: `Invalid input: expected ${stringify(this.value)}` });
  }
  protected override zodDef(): Record<string, unknown> {
    return { values: [this.value] };
  }
}

export class EnumSchema<T extends string> extends Schema<T> {
  readonly kind = 'enum';
  constructor(readonly options: readonly T[]) {
    super();
  }
  run(p: Payload): void {
    if (!(this.options as readonly unknown[]).includes(p.value)) {
      const message =
        this.options.length === 1
          ? `Invalid input: expected ${stringify(this.options[0])}`
          : `Invalid option: expected one of ${this.options.map(stringify).join('|')}`;
      p.issues.push({ code: 'invalid_value', path: [], message });
    }
  }
  protected override zodDef(): Record<string, unknown> {
    return { entries: Object.fromEntries(this.options.map((o) => [o, o])) };
  }
}

export class ArraySchema<E extends AnySchema> extends Schema<Infer<E>[]> {
  readonly kind = 'array';
  checks: LengthCheck[] = [];
  constructor(readonly element: E) {
    super();
  }
  min(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'min', value }] } as Partial<this>);
  }
  max(value: number): this {
    return clone(this, { checks: [...this.checks, { kind: 'max', value }] } as Partial<this>);
  }
  run(p: Payload): void {
    const input = p.value;
    if (Array.isArray(input)) {
      // zod checks an upper bound before the elements: a too-long array is one issue, not n.
      const max = this.checks.filter((c) => c.kind === 'max' && input.length > c.value);
      if (max.length) {
        p.issues.push(sizeIssue('too_big', 'array', max[0].value, true));
        return;
      }
      const out: unknown[] = Array(input.length);
      input.forEach((item, i) => {
        const r: Payload = { value: item, issues: [] };
        this.element.run(r);
        p.issues.push(...prefix(i, r.issues));
        out[i] = r.value;
      });
      p.value = out;
    } else p.issues.push(invalidType('array', input));
    runLengthChecks(p, this.checks);
  }
  protected override zodDef(): Record<string, unknown> {
    return { element: this.element };
  }
}

export class UnionSchema<T extends readonly AnySchema[]> extends Schema<Infer<T[number]>> {
  readonly kind = 'union';
  constructor(readonly options: T) {
    super();
  }
  run(p: Payload): void {
    if (this.options.length === 1) return this.options[0].run(p);
    const results: Payload[] = [];
    for (const o of this.options) {
      const r: Payload = { value: p.value, issues: [] };
      o.run(r);
      if (!r.issues.length) {
        p.value = r.value;
        return;
      }
      results.push(r);
    }
    // As zod: when only one option failed on checks rather than on its type, its issues are the answer.
    const live = results.filter((r) => !aborted(r.issues));
    if (live.length === 1) {
      p.value = live[0].value;
      p.issues.push(...live[0].issues);
      return;
    }
    p.issues.push({ code: 'invalid_union', path: [], message: 'Invalid input' });
  }
  protected override zodDef(): Record<string, unknown> {
    return { options: this.options };
  }
}

export class RecordSchema<K extends Schema<string, boolean>, V extends AnySchema> extends Schema<
  Record<Infer<K>, Infer<V>>
> {
  readonly kind = 'record';
  constructor(
    readonly keyType: K,
    readonly valueType: V,
  ) {
    super();
  }
  run(p: Payload): void {
    const input = p.value;
    if (!isPlainObject(input)) {
      p.issues.push(invalidType('record', input));
      return;
    }
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(input)) {
      if (key === '__proto__') continue;
      const k: Payload = { value: key, issues: [] };
      this.keyType.run(k);
      if (k.issues.length) {
        p.issues.push({ code: 'invalid_key', path: [key], message: 'Invalid key in record' });
        continue;
      }
      const r: Payload = { value: input[key], issues: [] };
      this.valueType.run(r);
      p.issues.push(...prefix(key, r.issues));
      out[k.value as string] = r.value;
    }
    p.value = out;
  }
  protected override zodDef(): Record<string, unknown> {
    return { keyType: this.keyType, valueType: this.valueType };
  }
}

/** What an object does with keys its shape does not name: drops them (object), keeps them
 * (looseObject: outputs, where every field --json prints is allowed), refuses them (strictObject:
 * command inputs). */
export type UnknownKeys = 'strip' | 'loose' | 'strict';

export class ObjectSchema<S extends Shape, Out = InferShape<S>> extends Schema<Out> {
  readonly kind = 'object';
  constructor(
    readonly shape: S,
    readonly unknownKeys: UnknownKeys,
  ) {
    super();
  }
  run(p: Payload): void {
    const input = p.value;
    if (!isObject(input)) {
      p.issues.push(invalidType('object', input));
      return;
    }
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(this.shape)) {
      if (key === '__proto__') continue;
      const field = this.shape[key];
      const present = key in input;
      const optional = field.optOut === 'optional';
      // zod's handlePropertyResult: an absent optional key contributes nothing.
      if (!present && optional && field.optIn === 'optional') continue;
      const r: Payload = { value: input[key], issues: [] };
      field.run(r);
      if (r.issues.length) {
        if (field.optIn !== undefined && optional && !present) continue;
        p.issues.push(...prefix(key, r.issues));
      }
      if (!present && field.optIn === undefined) {
        if (!r.issues.length) p.issues.push({ ...invalidType('nonoptional', undefined), path: [key] });
        continue;
      }
      if (r.value === undefined) {
        if (present || (field.optIn === 'defaulted' && !optional)) out[key] = undefined;
      } else out[key] = r.value;
    }
    if (this.unknownKeys !== 'strip') {
      const unknown: string[] = [];
      for (const key in input) {
        if (Object.prototype.hasOwnProperty.call(this.shape, key)) continue;
        if (this.unknownKeys === 'strict') unknown.push(key);
        else if (key !== '__proto__') out[key] = input[key];
      }
      if (unknown.length) {
        p.issues.push({
          code: 'unrecognized_keys',
          path: [],
          message: `Unrecognized key${unknown.length > 1 ? 's' : ''}: ${unknown.map(stringify).join(', ')}`,
          continue: true,
        });
      }
    }
    p.value = out;
  }
  /** The same fields, refusing any other key (what command inputs are: `z.object(shape).strict()`). */
  strict(): ObjectSchema<S, Out> {
    return new ObjectSchema(this.shape, 'strict');
  }
  protected override zodDef(): Record<string, unknown> {
    return { shape: this.shape };
  }
}

export class OptionalSchema<T extends AnySchema> extends Schema<Infer<T> | undefined, true> {
  readonly kind = 'optional';
  constructor(readonly inner: T) {
    super();
  }
  override get optIn(): 'optional' | 'defaulted' {
    return this.inner.optIn === 'defaulted' ? 'defaulted' : 'optional';
  }
  override get optOut(): 'optional' {
    return 'optional';
  }
  run(p: Payload): void {
    if (p.value === undefined) {
      if (this.inner.optIn !== 'defaulted') return;
      const r: Payload = { value: undefined, issues: [] };
      this.inner.run(r);
      // zod's handleOptionalResult: a default that failed leaves the value absent.
      if (!r.issues.length) p.value = r.value;
      return;
    }
    this.inner.run(p);
  }
  protected override zodDef(): Record<string, unknown> {
    return { innerType: this.inner };
  }
}

export class NullableSchema<T extends AnySchema> extends Schema<
  Infer<T> | null,
  T extends Schema<unknown, true> ? true : false
> {
  readonly kind = 'nullable';
  constructor(readonly inner: T) {
    super();
  }
  override get optIn(): 'optional' | 'defaulted' | undefined {
    return this.inner.optIn;
  }
  override get optOut(): 'optional' | undefined {
    return this.inner.optOut;
  }
  run(p: Payload): void {
    if (p.value !== null) this.inner.run(p);
  }
  protected override zodDef(): Record<string, unknown> {
    return { innerType: this.inner };
  }
}

/** A copy of a default for each parse, as zod gives (a shared `[]` would collect every caller's). */
const fresh = (v: unknown): unknown => (Array.isArray(v) ? [...v] : isObject(v) ? { ...v } : v);

export class DefaultSchema<T extends AnySchema> extends Schema<Exclude<Infer<T>, undefined>> {
  readonly kind = 'default';
  constructor(
    readonly inner: T,
    private readonly value: unknown,
  ) {
    super();
  }
  get defaultValue(): Exclude<Infer<T>, undefined> {
    return fresh(this.value) as Exclude<Infer<T>, undefined>;
  }
  override get optIn(): 'defaulted' {
    return 'defaulted';
  }
  run(p: Payload): void {
    // As zod: the default is the value, not checked again.
    if (p.value === undefined) {
      p.value = this.defaultValue;
      return;
    }
    this.inner.run(p);
    if (p.value === undefined) p.value = this.defaultValue;
  }
  protected override zodDef(): Record<string, unknown> {
    return { innerType: this.inner, defaultValue: this.defaultValue };
  }
}

/** The builder: `s.string()`, `s.looseObject({…})`, as zod's `z`. */
export const s = {
  string: (): StringSchema => new StringSchema(),
  number: (): NumberSchema => new NumberSchema(),
  boolean: (): BooleanSchema => new BooleanSchema(),
  null: (): NullSchema => new NullSchema(),
  unknown: (): UnknownSchema => new UnknownSchema(),
  literal: <const T extends string | number | boolean | null>(value: T): LiteralSchema<T> => new LiteralSchema(value),
  enum: <const T extends readonly [string, ...string[]]>(options: T): EnumSchema<T[number]> => new EnumSchema(options),
  array: <E extends AnySchema>(element: E): ArraySchema<E> => new ArraySchema(element),
  union: <const T extends readonly [AnySchema, ...AnySchema[]]>(options: T): UnionSchema<T> => new UnionSchema(options),
  record: <K extends Schema<string, boolean>, V extends AnySchema>(key: K, value: V): RecordSchema<K, V> =>
    new RecordSchema(key, value),
  /** Unknown keys dropped from the result (zod's z.object). */
  object: <S extends Shape>(shape: S): ObjectSchema<S> => new ObjectSchema(shape, 'strip'),
  /** Unknown keys kept (zod's z.looseObject): a result's schema allows every field --json prints. */
  looseObject: <S extends Shape>(shape: S): ObjectSchema<S, InferShape<S> & Record<string, unknown>> =>
    new ObjectSchema(shape, 'loose'),
  /** Unknown keys refused (zod's z.strictObject). */
  strictObject: <S extends Shape>(shape: S): ObjectSchema<S> => new ObjectSchema(shape, 'strict'),
};

/** A definition's field: this builder's node, or a zod schema (a test's own definition may be
 * written in zod; the front ends read both). */
export type Field = AnySchema | Zod.ZodType;

export const isSchema = (f: unknown): f is AnySchema => f instanceof Schema;

const zodOf = new WeakMap<AnySchema, Zod.ZodType>();

/** The zod schema equivalent to `node` (the same accept/reject, parsed values and JSON Schema
 * descriptions), built on first use and kept; a zod schema is returned as it is. Loads zod. */
export function toZod<T>(node: Schema<T, boolean>): Zod.ZodType<T>;
export function toZod(node: Field): Zod.ZodType;
export function toZod(node: Field): Zod.ZodType {
  if (!isSchema(node)) return node;
  let made = zodOf.get(node);
  if (!made) {
    // Loaded here, on the MCP server's first use, never by the command line.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    made = build(node, (require('zod') as typeof Zod).z);
    if (node.description !== undefined) made = made.describe(node.description);
    zodOf.set(node, made);
  }
  return made;
}

function build(node: AnySchema, z: typeof Zod.z): Zod.ZodType {
  if (node instanceof StringSchema) {
    let t = z.string();
    for (const c of node.checks) t = c.kind === 'min' ? t.min(c.value) : t.max(c.value);
    for (const re of node.patterns) t = t.regex(re);
    return t;
  }
  if (node instanceof NumberSchema) {
    let t = z.number();
    for (const c of node.checks) t = c.kind === 'min' ? t.min(c.value) : c.kind === 'max' ? t.max(c.value) : t.int();
    return t;
  }
  if (node instanceof BooleanSchema) return z.boolean();
  if (node instanceof NullSchema) return z.null();
  if (node instanceof UnknownSchema) return z.unknown();
  if (node instanceof LiteralSchema) return z.literal(node.value);
  if (node instanceof EnumSchema) return z.enum(node.options as [string, ...string[]]);
  if (node instanceof ArraySchema) {
    let t = z.array(toZod(node.element));
    for (const c of node.checks) t = c.kind === 'min' ? t.min(c.value) : t.max(c.value);
    return t;
  }
  if (node instanceof UnionSchema)
    return z.union((node.options as readonly AnySchema[]).map((o) => toZod(o)) as [Zod.ZodType, Zod.ZodType]);
  if (node instanceof RecordSchema)
    return z.record(toZod(node.keyType) as Zod.ZodType<string, string>, toZod(node.valueType));
  if (node instanceof ObjectSchema) {
    const shape = Object.fromEntries(Object.entries(node.shape as Shape).map(([k, v]) => [k, toZod(v)]));
    return node.unknownKeys === 'loose'
      ? z.looseObject(shape)
      : node.unknownKeys === 'strict'
        ? z.strictObject(shape)
        : z.object(shape);
  }
  if (node instanceof OptionalSchema) return toZod(node.inner).optional();
  if (node instanceof NullableSchema) return toZod(node.inner).nullable();
  if (node instanceof DefaultSchema) return toZod(node.inner).default(node.defaultValue);
  throw new Error(`toZod: no zod form for a ${node.kind} node`);
}
