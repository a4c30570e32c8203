// What a capture stores: only objects the repository lacks. Content already in history (an older
// version checked out again, a file copied from a committed one) is looked up, not packed twice,
// when a capture reads few files (src/snapshot/capture-files.ts, LOOKUP_LIMIT); past that limit a
// duplicate costs space only, and the snapshot is the same either way.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, pseudoRandomBytes, type Repo } from './support/git';
import { createSandbox } from './support/sandbox';
import { capture, expectExit, verify, xet } from './support/xet';

/** Object ids in the packs that appeared since `before` (a set of .idx names). */
function newObjects(r: Repo, before: Set<string>): string[] {
  const dir = path.join(r.commonDir(), 'objects', 'pack');
  return [...packs(r)]
    .filter((n) => !before.has(n))
    .flatMap((n) => r.gitInput(fs.readFileSync(path.join(dir, n)), 'show-index').split('\n'))
    .filter((l) => l.trim() !== '')
    .map((l) => l.split(' ')[1]);
}

function packs(r: Repo): Set<string> {
  return new Set(fs.readdirSync(path.join(r.commonDir(), 'objects', 'pack')).filter((n) => n.endsWith('.idx')));
}

test('a capture stores what the repository lacks: content already in history is not packed again', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    const v1 = pseudoRandomBytes(40_000, 3);
    const v2 = pseudoRandomBytes(40_000, 4);
    r.write('data.bin', v1);
    r.write('notes.txt', 'one\n');
    r.commit('v1');
    const v1Blob = r.git('rev-parse', 'HEAD:data.bin').trim();
    r.write('data.bin', v2);
    r.commit('v2');
    r.git('gc', '-q');
    capture(sb, r.dir);

    // The older version again, and a new file with committed bytes, beside a real edit.
    r.write('data.bin', v1);
    r.write('copy-of-notes.txt', 'one\n');
    r.write('fresh.txt', 'never seen\n');
    const before = packs(r);
    const snap = capture(sb, r.dir);
    const stored = newObjects(r, before);
    const fresh = r.gitInput('never seen\n', 'hash-object', '--stdin').trim();
    assert.ok(stored.includes(fresh), 'the new content is stored');
    assert.ok(!stored.includes(v1Blob), 'the older version is not stored again');
    const notes = r.git('rev-parse', 'HEAD:notes.txt').trim();
    assert.ok(!stored.includes(notes), 'a copy of committed bytes is not stored again');
    assert.equal(r.git('rev-parse', `${snap}:files/data.bin`).trim(), v1Blob);
    r.git('fsck', '--no-progress', '--strict');
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snap, copy]), 0);
    expectExit(verify(sb, r.dir, snap, copy), 0);
    assert.deepEqual(fs.readFileSync(path.join(copy, 'data.bin')), v1);
  } finally {
    sb.cleanup();
  }
});

// A re-read file whose bytes are a blob the previous capture's stat cache names, where that blob is
// a loose object (staged with git add, then unstaged): found among the cache's ids, not packed again
// (review 40: the pack lookup alone does not see loose objects).
/** Twenty committed files, packed, and a first capture (its stat cache held by its snapshot). */
function capturedTwenty(sb: ReturnType<typeof createSandbox>): ReturnType<typeof initRepo> {
  const r = initRepo(sb, 'src');
  for (let i = 0; i < 20; i++) r.write(`f${i}.txt`, `file ${i}\n`);
  r.commit('init');
  r.git('gc', '-q');
  capture(sb, r.dir);
  return r;
}

test('a re-read file whose blob the stat cache names as a loose object is not packed again', () => {
  const sb = createSandbox();
  try {
    const r = capturedTwenty(sb);
    r.write('data.bin', pseudoRandomBytes(300_000, 9));
    r.git('add', 'data.bin');
    const blob = r.git('rev-parse', ':data.bin').trim();
    capture(sb, r.dir);
    r.git('reset', '-q', 'data.bin');
    // Same bytes, new stat data: read again, and its blob is the loose one.
    const later = new Date(Date.now() + 5000);
    fs.utimesSync(r.p('data.bin'), later, later);
    const before = packs(r);
    const snap = capture(sb, r.dir);
    assert.equal(r.git('rev-parse', `${snap}:files/data.bin`).trim(), blob);
    assert.ok(!newObjects(r, before).includes(blob), 'the loose blob is not packed again');
    r.git('fsck', '--no-progress', '--strict');
  } finally {
    sb.cleanup();
  }
});

// The same for a blob the index names (a tracked file staged with git add since the last capture, a
// loose object): with a held cache and few files read, the index's ids are asked where the read
// blobs are looked up, not added to the table of known objects; the blob is not packed again.
test('a re-read file whose blob is staged in the index as a loose object is not packed again', () => {
  const sb = createSandbox();
  try {
    const r = capturedTwenty(sb);
    r.write('f3.txt', pseudoRandomBytes(200_000, 11));
    r.git('add', 'f3.txt');
    const blob = r.git('rev-parse', ':f3.txt').trim();
    assert.equal(r.git('cat-file', '-t', blob).trim(), 'blob');
    const before = packs(r);
    const snap = capture(sb, r.dir);
    assert.equal(r.git('rev-parse', `${snap}:files/f3.txt`).trim(), blob);
    assert.ok(!newObjects(r, before).includes(blob), 'the staged loose blob is not packed again');
    r.git('fsck', '--no-progress', '--strict');
  } finally {
    sb.cleanup();
  }
});

test('a filemeta blob held only by a dropped and collected snapshot is stored again, not assumed', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { a: 'a\n', b: 'b\n' });
    const at = (p: string, iso: string) => fs.utimesSync(r.p(p), new Date(iso), new Date(iso));
    at('a', '2020-01-01T00:00:00Z');
    at('b', '2020-01-01T00:00:00Z');
    capture(sb, r.dir);
    // The same bytes with another time: the same files tree, another filemeta blob.
    at('a', '2021-01-01T00:00:00Z');
    const second = capture(sb, r.dir);
    const meta = r.git('rev-parse', `${second}:filemeta`).trim();
    expectExit(xet(sb, r.dir, ['drop', second]), 0);
    expectExit(xet(sb, r.dir, ['gc', '--grace', '0']), 0);
    assert.notEqual(r.gitTry('cat-file', '-e', meta).status, 0, 'gc collected the filemeta blob');
    const third = capture(sb, r.dir, ['--always']);
    assert.equal(r.git('rev-parse', `${third}:filemeta`).trim(), meta);
    r.git('fsck', '--no-progress', '--strict');
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', third, copy]), 0);
    expectExit(verify(sb, r.dir, third, copy), 0);
    assert.equal(fs.statSync(path.join(copy, 'a')).mtime.toISOString(), '2021-01-01T00:00:00.000Z');
  } finally {
    sb.cleanup();
  }
});

test('with chunking off a capture of an unchanged tree reads no file, large ones included', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.git('config', 'xet.chunk.threshold', 'off');
    for (let i = 0; i < 5; i++) r.write(`f${i}.bin`, pseudoRandomBytes(200_000, 20 + i));
    r.commit('files');
    const past = Date.now() / 1000 - 5;
    for (let i = 0; i < 5; i++) fs.utimesSync(r.p(`f${i}.bin`), past, past);
    capture(sb, r.dir);
    const again = xet(sb, r.dir, ['capture', '--always', '--json'], { env: { GIT_XET_TRACE: '1' } });
    expectExit(again, 0);
    assert.match(again.stderr.toString(), /files: read 0\b/, again.stderr.toString());
  } finally {
    sb.cleanup();
  }
});
