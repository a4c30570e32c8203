// The stat cache's record (src/snapshot/stat-cache.ts, recordBytes): written in pieces, with the
// JSON of a chunked file's entry kept from the last record while it stays the same. Its bytes must
// be JSON.stringify's whatever changes between records: an entry's fields, entries added, removed
// and reordered, paths JSON must escape, and entries read back from the file (new objects, equal).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { recordBytes, STAT_CACHE_SCHEMA, type StatCacheRecord } from '../src/snapshot/stat-cache';

function entry(size: number, oids: string): Record<string, string | number> {
  return {
    size,
    mtimeNs: '1796579593242832997',
    ctimeNs: '1796590183846832997',
    ino: '4834852',
    dev: '26',
    mode: '100644',
    pointer: `xet.chunked/v1\nsize ${size}\nlist ${'e'.repeat(40)}\n`,
    oids,
  };
}

function record(files: Record<string, object>, startedAt: number): StatCacheRecord {
  return {
    schema: STAT_CACHE_SCHEMA,
    since: 1796590183,
    root: 'a'.repeat(40),
    meta: 'b'.repeat(40),
    chunks: {
      schema: 'xet.statcache-chunks/1',
      startedAt,
      threshold: 1 << 20,
      files,
    } as StatCacheRecord['chunks'],
    index: 'c'.repeat(40),
  };
}

test("a stat cache record's bytes are JSON.stringify's, entries kept or not", () => {
  const big = 'f'.repeat(75_000);
  const a = entry(18_699_288, big);
  const b = entry(2_000_000, 'd'.repeat(4000));
  const steps: Record<string, object>[] = [
    { 'lib/a.so': a, 'lib/b.so': b },
    { 'lib/a.so': a, 'lib/b.so': b }, // the same objects
    JSON.parse(JSON.stringify({ 'lib/a.so': a, 'lib/b.so': b })), // equal, read back
    { 'lib/a.so': { ...a, mtimeNs: '1796579593242832998' }, 'lib/b.so': b }, // one field changed
    { 'lib/b.so': b, 'lib/a.so': a }, // reordered
    { 'lib/b.so': b }, // removed
    { 'lib/b.so': b, 'x "quoted"\n\u2028é.bin': entry(5, 'ab'), 7: entry(6, 'cd') }, // escaped, index-like
    { 'lib/b.so': { ...b, extra: { nested: 1 } } }, // a field that is not a primitive
    { 'lib/b.so': { ...b, extra: { nested: 2 } } },
    {},
  ];
  steps.forEach((files, i) => {
    const r = record(files, 1_796_590_000_000 + i);
    const got = Buffer.concat(recordBytes(r)).toString('utf8');
    assert.equal(got, JSON.stringify(r), `step ${i}`);
  });
  const bare = { ...record({}, 1), chunks: undefined };
  assert.equal(Buffer.concat(recordBytes(bare)).toString('utf8'), JSON.stringify(bare));
});
