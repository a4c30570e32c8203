// A re-capture trusts the stat cache (src/snapshot/capture-files.ts) for every file whose stat data
// is unchanged: these tests make sure that never misses a file that has become large since — grown
// in place, replaced by a new inode with an old mtime, a tracked file edited to be large, a lowered
// threshold — and that every such file is chunked and restores byte for byte, while a re-capture
// that changed nothing large keeps its pointers from the cache's chunk record.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, type Repo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { describeRun, expectExit, parseJson, xet } from './support/xet';
import { writeLargeFile } from './support/fixtures';
import { loadStatCache, STAT_CACHE_RECORD_SUFFIX } from '../src/snapshot/stat-cache';

const MiB = 1024 * 1024;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function capture(sb: Sandbox, r: Repo): any {
  const res = xet(sb, r.dir, ['capture', '--json'], { env: { GIT_XET_NO_DAEMON: '1' } });
  assert.equal(res.status, 0, describeRun(res));
  return parseJson(res);
}

function chunkedOf(r: Repo, snap: string): string[] {
  return (JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`)).chunked ?? []) as string[];
}

/** Files and bytes of the worktree as a capture counts them (regular files and symlinks, not .git). */
function worktreeTotals(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const abs = path.join(d, e.name);
      if (e.isDirectory()) {
        if (!(d === dir && e.name === '.git')) walk(abs);
      } else {
        files++;
        bytes += fs.lstatSync(abs).size;
      }
    }
  };
  walk(dir);
  return { files, bytes };
}

/** The manifest's counts are the worktree's, whichever way the capture computed them. */
function assertTotals(r: Repo, snap: string): void {
  const counts = JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`)).counts;
  const want = worktreeTotals(r.dir);
  assert.deepEqual({ files: counts.files, bytes: counts.bytes }, want, `counts of ${snap}`);
}

function restoreAndCompare(sb: Sandbox, r: Repo, snap: string, files: string[]): void {
  const dest = path.join(sb.root, `restored-${snap.slice(0, 8)}`);
  const res = xet(sb, r.dir, ['restore', snap, dest, '--json']);
  assert.equal(res.status, 0, describeRun(res));
  for (const f of files) {
    assert.ok(fs.readFileSync(path.join(dest, f)).equals(fs.readFileSync(r.p(f))), `${f} restored byte for byte`);
  }
}

test('files that became large since the last capture are chunked, however they got there', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.git('config', 'xet.chunk.threshold', '1m');
    const small: Record<string, string> = { 'tracked.txt': 'committed\n' };
    for (let i = 0; i < 40; i++) small[`src/f${i}.txt`] = `file ${i}\n`;
    r.commit('init', small);
    r.write('grow.bin', 'tiny\n');
    r.write('replace.bin', 'tiny\n');
    r.write('stay.txt', 'small\n');
    const first = capture(sb, r);
    assert.deepEqual(chunkedOf(r, first.snapshot), []);

    // Grown in place (same inode, new size); replaced by a large file whose mtime is set far back
    // (a new inode, but git sees it through its ctime); a tracked file edited to be large.
    writeLargeFile(r.p('grow.bin'), 2 * MiB + 3, 11);
    const tmp = r.p('replace.tmp');
    writeLargeFile(tmp, 3 * MiB + 5, 12);
    const old = new Date('2001-02-03T04:05:06Z');
    fs.utimesSync(tmp, old, old);
    fs.renameSync(tmp, r.p('replace.bin'));
    writeLargeFile(r.p('tracked.txt'), MiB + 1, 13);
    // Old mtimes everywhere: only the ctimes say these changed (and the third capture's chunk stat
    // cache may trust them: they are not racy).
    fs.utimesSync(r.p('grow.bin'), old, old);
    fs.utimesSync(r.p('tracked.txt'), old, old);
    const second = capture(sb, r);
    assert.deepEqual(chunkedOf(r, second.snapshot).sort(), ['grow.bin', 'replace.bin', 'tracked.txt']);
    assert.equal(second.chunking.files, 3);
    assertTotals(r, second.snapshot);
    restoreAndCompare(sb, r, second.snapshot, ['grow.bin', 'replace.bin', 'tracked.txt', 'stay.txt']);

    // Nothing large changed: every pointer comes from the chunk stat cache.
    r.write('src/f1.txt', 'edited\n');
    const third = capture(sb, r);
    assert.deepEqual(chunkedOf(r, third.snapshot).sort(), ['grow.bin', 'replace.bin', 'tracked.txt']);
    assert.equal(third.chunking.cacheHits, 3, JSON.stringify(third.chunking));
    assertTotals(r, third.snapshot);

    // Shrunk below the threshold: a whole blob again.
    fs.writeFileSync(r.p('grow.bin'), 'small again\n');
    const fourth = capture(sb, r);
    assert.deepEqual(chunkedOf(r, fourth.snapshot).sort(), ['replace.bin', 'tracked.txt']);
    assert.equal(r.git('cat-file', 'blob', `${fourth.snapshot}:files/grow.bin`), 'small again\n');
    assertTotals(r, fourth.snapshot);

    // A chunked file edited in place, another removed, a small file that holds a pointer's text
    // changed, a new small file: the counts stay true (the incremental path or the full listing).
    writeLargeFile(r.p('tracked.txt'), MiB + 77, 14);
    fs.rmSync(r.p('replace.bin'));
    r.write('looks-like-pointer.txt', r.git('cat-file', 'blob', `${fourth.snapshot}:files/tracked.txt`));
    const fifth = capture(sb, r);
    assertTotals(r, fifth.snapshot);
    r.write('looks-like-pointer.txt', 'plain now\n');
    r.write('src/new.txt', 'new\n');
    const sixth = capture(sb, r);
    assertTotals(r, sixth.snapshot);
    assert.deepEqual(chunkedOf(r, sixth.snapshot), ['tracked.txt']);
  } finally {
    sb.cleanup();
  }
});

test('a lowered xet.chunk.threshold chunks files the cache had recorded as small', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.git('config', 'xet.chunk.threshold', '4m');
    r.commit('init', { 'a.txt': 'a\n' });
    writeLargeFile(r.p('mid.bin'), 2 * MiB + 9, 21);
    const first = capture(sb, r);
    assert.deepEqual(chunkedOf(r, first.snapshot), []);
    r.git('config', 'xet.chunk.threshold', '1m');
    const second = capture(sb, r);
    assert.deepEqual(chunkedOf(r, second.snapshot), ['mid.bin']);
    restoreAndCompare(sb, r, second.snapshot, ['mid.bin']);
  } finally {
    sb.cleanup();
  }
});

test('the chunk record counts only when it is sealed to the index in place', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.git('config', 'xet.chunk.threshold', '1m');
    r.commit('init', { 'a.txt': 'a\n' });
    for (let i = 0; i < 5; i++) r.write(`u${i}.txt`, `${i}\n`);
    writeLargeFile(r.p('big.bin'), MiB + 5, 31);
    // Written long ago: a file modified in the second before a capture is read again by the next.
    fs.utimesSync(r.p('big.bin'), new Date(1_600_000_000_000), new Date(1_600_000_000_000));
    const first = capture(sb, r);
    const cacheDir = path.join(r.gitPath('xet'), 'cache');
    const index = path.join(cacheDir, fs.readdirSync(cacheDir).find((n) => n.endsWith('.index')) as string);
    const recordFile = `${index}${STAT_CACHE_RECORD_SUFFIX}`;
    // Sealed by the capture: it names the chunked file, and the next capture reuses its pointer.
    assert.deepEqual(Object.keys(loadStatCache(index, 'sha1')?.record?.chunks?.files ?? {}), ['big.bin']);
    r.write('a.txt', 'b\n');
    const second = capture(sb, r);
    assert.equal(second.chunking.cacheHits, 1);
    // The same record beside another index (a crash between the two renames): no record at all, so
    // the large file is chunked again, to the same pointer.
    const rec = JSON.parse(fs.readFileSync(recordFile, 'utf8'));
    fs.writeFileSync(recordFile, JSON.stringify({ ...rec, index: '0'.repeat(40) }));
    assert.equal(loadStatCache(index, 'sha1')?.record, null);
    r.write('a.txt', 'c\n');
    const third = capture(sb, r);
    assert.equal(third.chunking.cacheHits, 0);
    assert.equal(
      r.git('rev-parse', `${third.snapshot}:files/big.bin`).trim(),
      r.git('rev-parse', `${first.snapshot}:files/big.bin`).trim(),
    );
    restoreAndCompare(sb, r, third.snapshot, ['big.bin']);
  } finally {
    sb.cleanup();
  }
});

test("a restored copy's chunk record names the chunks the lay wrote, as the source's capture named them", () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.git('config', 'xet.chunk.threshold', '1m');
    r.commit('init', { 'a.txt': 'a\n' });
    writeLargeFile(r.p('big.bin'), 3 * MiB + 7, 53);
    fs.utimesSync(r.p('big.bin'), new Date(1_600_000_000_000), new Date(1_600_000_000_000));
    const snap = capture(sb, r).snapshot;
    const recordOf = (dir: string) => {
      const cacheDir = path.join(dir, '.git', 'xet', 'cache');
      const index = path.join(cacheDir, fs.readdirSync(cacheDir).find((n) => n.endsWith('.index')) as string);
      return loadStatCache(index, 'sha1')?.record?.chunks?.files ?? {};
    };
    const source = recordOf(r.dir)['big.bin'];
    assert.ok(source && source.oids.length > 40 * 10, 'the source names its chunks');
    const copy = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snap, copy, '--json']), 0);
    const restored = recordOf(copy)['big.bin'];
    assert.equal(restored?.oids, source.oids, 'the same chunks, in order');
    assert.equal(restored?.pointer, source.pointer);
    assert.equal(restored?.size, 3 * MiB + 7, 'vouched for: the file as laid');
  } finally {
    sb.cleanup();
  }
});

test('chunking turned off: the chunked file is a whole blob and the chunk record names no file', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'repo');
    r.git('config', 'xet.chunk.threshold', '1m');
    r.commit('init', { 'a.txt': 'a\n' });
    writeLargeFile(r.p('big.bin'), MiB + 3, 41);
    assert.deepEqual(chunkedOf(r, capture(sb, r).snapshot), ['big.bin']);
    const cacheDir = path.join(r.gitPath('xet'), 'cache');
    const index = path.join(cacheDir, fs.readdirSync(cacheDir).find((n) => n.endsWith('.index')) as string);
    const chunkRecord = () => loadStatCache(index, 'sha1')?.record?.chunks;
    assert.deepEqual(Object.keys(chunkRecord()?.files ?? {}), ['big.bin']);
    r.git('config', 'xet.chunk.threshold', 'off');
    const off = capture(sb, r);
    assert.deepEqual(chunkedOf(r, off.snapshot), []);
    assert.equal(r.git('rev-parse', `${off.snapshot}:files/big.bin`).trim(), r.git('hash-object', 'big.bin').trim());
    // The record no longer names it: the cache's entry is the whole blob now (and the record says
    // no entry is a pointer, so the next capture reads no file it need not).
    assert.deepEqual(chunkRecord()?.files, {});
    assert.equal(chunkRecord()?.threshold, undefined);
    r.write('a.txt', 'b\n');
    const again = capture(sb, r);
    assert.equal(r.git('rev-parse', `${again.snapshot}:files/big.bin`).trim(), r.git('hash-object', 'big.bin').trim());
    assertTotals(r, again.snapshot);
  } finally {
    sb.cleanup();
  }
});
