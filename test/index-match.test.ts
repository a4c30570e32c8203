// A stat cache's lookup of a capture's paths (src/snapshot/stat-cache.ts indexColumns): the native
// merge of the two sorted lists (indexMatch, native/xet-native.c) against the entries parsed as
// objects and a Map by path, on indexes git writes (versions 2, 3 and 4, SHA-1 and SHA-256, with
// conflict stages and intent-to-add entries) and on the same indexes damaged: the same offsets, the
// same answer for every path, and a damaged index refused or read alike.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { joinNames } from '../src/git/tree-builder';
import { native, nativeMissing } from '../src/native';
import { indexColumns } from '../src/snapshot/stat-cache';
import { withSandbox } from './support/sandbox';

const NAMES = ['a', 'b', 'a-b', 'a.b', 'a_b', 'B', 'z', 'é', '日本', '😀', '\uE000', 'x y', 'ab', 'a0'];

function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** An index git writes for `paths` (stage 0), `conflicted` (stages 1-3) and `added` (git add -N). */
function gitIndex(
  dir: string,
  format: 'sha1' | 'sha256',
  version: number,
  spec: { paths: string[]; conflicted: string[]; added: string[] },
): Buffer {
  const env = {
    ...process.env,
    GIT_INDEX_FILE: path.join(dir, `idx-${format}-${version}`),
    GIT_DIR: path.join(dir, `.git-${format}`),
  };
  if (!fs.existsSync(env.GIT_DIR))
    execFileSync('git', ['init', '-q', '--bare', `--object-format=${format}`, env.GIT_DIR]);
  fs.rmSync(env.GIT_INDEX_FILE, { force: true });
  const hashLen = format === 'sha256' ? 64 : 40;
  const oid = (p: string, k: number) => crypto.createHash('sha256').update(`${p}${k}`).digest('hex').slice(0, hashLen);
  const lines = [
    ...spec.paths.map((p) => `100644 ${oid(p, 0)} 0\t${p}`),
    ...spec.conflicted.flatMap((p) => [1, 2, 3].map((s) => `100644 ${oid(p, s)} ${s}\t${p}`)),
  ];
  execFileSync('git', ['update-index', '-z', '--index-info'], { env, input: lines.map((l) => `${l}\0`).join('') });
  if (spec.added.length) {
    const work = path.join(dir, 'work');
    fs.mkdirSync(work, { recursive: true });
    for (const p of spec.added) {
      fs.mkdirSync(path.dirname(path.join(work, p)), { recursive: true });
      fs.writeFileSync(path.join(work, p), p);
    }
    execFileSync('git', ['--work-tree', work, 'add', '-N', '--', ...spec.added], { env });
  }
  execFileSync('git', ['update-index', '--index-version', String(version)], { env });
  return fs.readFileSync(env.GIT_INDEX_FILE);
}

function sameAnswers(buf: Buffer, format: 'sha1' | 'sha256', asked: string[], label: string): void {
  const fast = indexColumns(buf, format, 'auto');
  const slow = indexColumns(buf, format, 'js');
  assert.equal(fast === null, slow === null, `${label}: both read it or both refuse it`);
  if (!fast || !slow) return;
  assert.equal(fast.entriesEnd, slow.entriesEnd, `${label}: where the entries end`);
  assert.deepEqual([...fast.offsets], [...slow.offsets], `${label}: entry offsets`);
  const names = () => joinNames(asked);
  assert.deepEqual([...fast.lookup(asked, names)], [...slow.lookup(asked, names)], `${label}: lookups`);
}

test('indexMatch finds what a Map by path finds, in every index version git writes', async (t) => {
  if (!native) {
    t.diagnostic(`skipped: the native module is not loaded (${nativeMissing}); the lookup is the Map alone`);
    return;
  }
  await withSandbox(async (sb) => {
    let seed = 5;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
    for (let round = 0; round < 24; round++) {
      const set = new Set<string>();
      const count = 1 + rand(round < 8 ? 10 : 600);
      for (let i = 0; i < count; i++)
        set.add(Array.from({ length: 1 + rand(4) }, () => NAMES[rand(NAMES.length)]).join('/'));
      if (round === 3) set.add('n'.repeat(5000)); // past the 12 bits of name length in the flags
      const all = [...set].filter((p) => ![...set].some((q) => q.startsWith(`${p}/`)));
      const paths = all.filter(() => rand(5) > 0);
      const rest = all.filter((p) => !paths.includes(p));
      const conflicted = rest.filter(() => rand(2) === 0);
      const added = round % 4 === 1 ? rest.filter((p) => !conflicted.includes(p)).slice(0, 3) : [];
      // Asked: the stage-0 paths, the conflicted ones (no stage-0 entry), and paths in no index.
      const asked = [...all, 'zz-not-there', 'a/zz', '0'].sort(byBytes);
      const format = round % 3 === 2 ? 'sha256' : 'sha1';
      const version = [2, 3, 4][round % 3];
      const buf = gitIndex(sb.root, format, version, { paths, conflicted, added });
      sameAnswers(buf, format, asked, `round ${round} v${version} ${format}`);
      // The answers themselves: a stage-0 path is found, a conflicted or missing one is not.
      const fast = indexColumns(buf, format);
      assert.ok(fast);
      const got = fast.lookup(asked, () => joinNames(asked));
      for (let i = 0; i < asked.length; i++)
        assert.equal(got[i] >= 0, paths.includes(asked[i]) || added.includes(asked[i]), `round ${round}: ${asked[i]}`);
      // Damaged: cut short, or a byte changed, at places spread over the file.
      for (let k = 0; k < 6; k++) {
        const at = 12 + rand(Math.max(1, buf.length - 12));
        sameAnswers(buf.subarray(0, at), format, asked, `round ${round} cut at ${at}`);
        const flipped = Buffer.from(buf);
        flipped[at] ^= 1 << rand(8);
        sameAnswers(flipped, format, asked, `round ${round} byte ${at} flipped`);
      }
    }
  });
});

test('indexMatch refuses arguments that do not fit', (t) => {
  if (!native) {
    t.diagnostic(`skipped: the native module is not loaded (${nativeMissing})`);
    return;
  }
  const m = native;
  const idx = Buffer.alloc(12 + 20);
  idx.write('DIRC', 0, 'latin1');
  idx.writeUInt32BE(2, 4);
  const four = Buffer.alloc(4);
  assert.equal(m.indexMatch(idx, 20, Buffer.alloc(0), Buffer.alloc(0), Buffer.alloc(0)), 12, 'an empty index');
  assert.throws(() => m.indexMatch(idx, 20, Buffer.from('a'), four, Buffer.alloc(0)), TypeError, 'names without a NUL');
  assert.throws(
    () => m.indexMatch(idx, 20, Buffer.from('a\0b\0'), four, Buffer.alloc(0)),
    TypeError,
    'a match too short',
  );
  assert.throws(
    () => m.indexMatch(idx, 21, Buffer.alloc(0), Buffer.alloc(0), Buffer.alloc(0)),
    TypeError,
    'hashLen 21',
  );
  assert.throws(
    () => m.indexMatch(idx, 20, Buffer.from('a\0'), Buffer.alloc(5).subarray(1), Buffer.alloc(0)),
    TypeError,
    'unaligned',
  );
  idx.writeUInt32BE(3, 8); // three entries said, none there
  assert.throws(
    () => m.indexMatch(idx, 20, Buffer.alloc(0), Buffer.alloc(0), Buffer.alloc(4)),
    TypeError,
    'offsets too short',
  );
  assert.equal(m.indexMatch(idx, 20, Buffer.alloc(0), Buffer.alloc(0), Buffer.alloc(12)), -1, 'entries missing');
  idx.writeUInt32BE(5, 4);
  idx.writeUInt32BE(0, 8);
  assert.equal(m.indexMatch(idx, 20, Buffer.alloc(0), Buffer.alloc(0), Buffer.alloc(0)), -1, 'version 5');
});
