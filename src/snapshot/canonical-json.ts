// Canonical JSON: UTF-8, object keys sorted by code unit, no insignificant whitespace. The same value
// always serialises to the same bytes, so a hash of the bytes identifies the value (manifests,
// handoff descriptors). Numbers must be safe integers: floats have no single canonical spelling.

export function canonicalJson(value: unknown): string {
  return serialize(value);
}

function serialize(v: unknown): string {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'number':
      if (!Number.isSafeInteger(v)) throw new TypeError(`canonical JSON allows only safe integers, got ${v}`);
      return String(v);
    case 'object': {
      if (Array.isArray(v)) return `[${v.map(serialize).join(',')}]`;
      const obj = v as Record<string, unknown>;
      const keys = Object.keys(obj)
        .filter((k) => obj[k] !== undefined)
        .sort();
      return `{${keys.map((k) => `${JSON.stringify(k)}:${serialize(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`canonical JSON cannot hold a ${typeof v}`);
  }
}
