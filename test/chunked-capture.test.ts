// Capture of large files as content-defined chunks (docs/FORMAT.md "Chunked files"), checked with
// plain git: the pointer, the manifest's `chunked` and counts, the `chunks/` tree; the threshold
// setting; a tracked file as committed keeps its blob; hard links; the chunk stat cache (an
// unchanged re-capture reads no chunked file: its stat cache hit count); an in-place edit
// packs only a few chunks; a file changed while being packed fails with WORKTREE_CHANGED and
// publishes nothing; verify compares by content and checks the reassembled hash.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as zlib from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { LocalPacks } from '../src/chunks/local-packs';
import { parsePointer } from '../src/chunks/pointer';
import { ChunkList } from '../src/chunks/reader';
import { chunkedFiles } from '../src/chunks/snapshot-files';
import { readSnapshot } from '../src/snapshot/store';
import { heldLocally } from '../src/git/object-presence';
import { initRepo, type Repo } from './support/git';
import { pausedAt } from './support/faults';
import { createSandbox, type Sandbox } from './support/sandbox';
import { describeRun, parseJson, xet } from './support/xet';
import { writeLargeFile } from './support/fixtures';

const MiB = 1024 * 1024;

function setup(sb: Sandbox, threshold = '1m'): Repo {
  const r = initRepo(sb, 'repo');
  r.git('config', 'xet.chunk.threshold', threshold);
  r.commit('init', { 'small.txt': 'hello\n' });
  return r;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function capture(sb: Sandbox, r: Repo, extra: string[] = []): any {
  const res = xet(sb, r.dir, ['capture', '--json', ...extra]);
  assert.equal(res.status, 0, describeRun(res));
  return parseJson(res);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function manifest(r: Repo, snap: string): Record<string, any> {
  return JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`));
}

/** big.bin, 2 MiB, added and committed: its staged blob. */
function commitLargeFile(r: Repo): string {
  writeLargeFile(r.p('big.bin'), 2 * MiB, 9);
  r.git('add', 'big.bin');
  r.git('commit', '-qm', 'big');
  return r.git('rev-parse', ':big.bin').trim();
}

function packObjectCounts(r: Repo): Map<string, number> {
  const dir = `${r.gitPath('objects')}/pack`;
  const out = new Map<string, number>();
  for (const n of fs.readdirSync(dir).filter((n) => n.endsWith('.idx'))) {
    const lines = r.git('verify-pack', '-v', `${dir}/${n}`).split('\n');
    out.set(n, lines.filter((l) => /^[0-9a-f]{40} (blob|tree|commit|tag) /.test(l)).length);
  }
  return out;
}

/** big.bin of `snap` does not reassemble: restore fails INTEGRITY_MISMATCH leaving no copy and no
 * temporary, and verify reports chunk-integrity. */
function refusedAndReported(sb: Sandbox, r: Repo, snap: string, blob: string): void {
  const res = xet(sb, r.dir, ['restore', snap, sb.path('copy'), '--json']);
  assert.equal(res.status, 3, describeRun(res));
  assert.equal(parseJson(res).error.code, 'INTEGRITY_MISMATCH', describeRun(res));
  assert.equal(parseJson(res).error.details.path, 'big.bin');
  assert.equal(fs.existsSync(sb.path('copy')), false);
  assert.deepEqual(
    fs.readdirSync(sb.root).filter((n) => n.includes('xet-restore') || n.startsWith('.xr-')),
    [],
  );
  const v = xet(sb, r.dir, ['verify', '--json', snap, '.']);
  assert.equal(v.status, 1, describeRun(v));
  assert.deepEqual(parseJson(v).differences, [
    { kind: 'chunk-integrity', path: 'big.bin', expected: blob, actual: 'INTEGRITY_MISMATCH' },
  ]);
}

test('a large untracked file is stored as a pointer, its chunks under chunks/, manifest v3', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('data/big.bin'), 3 * MiB + 17, 3);
    r.write('small2.txt', 'x\n');
    const cap = capture(sb, r);
    const snap = cap.snapshot as string;
    const m = manifest(r, snap);
    assert.equal(m.schema, 'xet.snapshot/v3');
    assert.deepEqual(m.chunked, ['data/big.bin']);
    assert.equal(m.counts.chunkedFiles, 1);
    assert.ok(m.counts.chunks > 100, `chunks ${m.counts.chunks}`);
    assert.equal(m.counts.bytes, 3 * MiB + 17 + 6 + 2);
    assert.equal(cap.chunking.files, 1);
    const entry = r.git('ls-tree', `${snap}:files/data`).trim();
    assert.match(entry, /^100644 blob [0-9a-f]{40}\tbig\.bin$/);
    const data = Buffer.from(r.git('cat-file', 'blob', `${snap}:files/data/big.bin`));
    const p = parsePointer(data, 'sha1', 'data/big.bin');
    assert.equal(p.size, 3 * MiB + 17);
    assert.equal(p.blob, r.git('hash-object', 'data/big.bin').trim());
    assert.equal(r.git('ls-tree', `${snap}:chunks`).trim(), `040000 tree ${p.list}\t${p.list}`);
    const chunks = r.git('ls-tree', '-r', p.list).trim().split('\n');
    assert.equal(chunks.length, p.chunks);
    // The chunks' sizes add up to the file's.
    const sizes = r.git('ls-tree', '-r', '-l', p.list).trim().split('\n');
    assert.equal(
      sizes.reduce((n, l) => n + Number(l.split(/\s+/)[3]), 0),
      p.size,
    );
    // The small files are ordinary blobs.
    assert.equal(r.git('cat-file', 'blob', `${snap}:files/small2.txt`), 'x\n');
    // verify: the worktree matches (by content), and the snapshot reassembles.
    const v = xet(sb, r.dir, ['verify', '--json', snap, '.']);
    assert.equal(v.status, 0, describeRun(v));
    assert.equal(parseJson(v).ok, true);
    // A change of the file is a difference.
    const fd = fs.openSync(r.p('data/big.bin'), 'r+');
    fs.writeSync(fd, Buffer.from('changed'), 0, 7, 2 * MiB);
    fs.closeSync(fd);
    const v2 = xet(sb, r.dir, ['verify', '--json', snap, '.']);
    assert.equal(v2.status, 1, describeRun(v2));
    assert.deepEqual(
      parseJson(v2).differences.map((d: { kind: string; path: string }) => `${d.kind} ${d.path}`),
      ['file-modified data/big.bin'],
    );
  } finally {
    sb.cleanup();
  }
});

test('xet.chunk.threshold: off stores whole blobs (v1), an invalid value is CONFIG_INVALID', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb, 'off');
    writeLargeFile(r.p('big.bin'), 2 * MiB, 5);
    const cap = capture(sb, r);
    const m = manifest(r, cap.snapshot);
    assert.equal(m.schema, 'xet.snapshot/v1');
    assert.equal(m.chunked, undefined);
    assert.equal(r.git('rev-parse', `${cap.snapshot}:files/big.bin`).trim(), r.git('hash-object', 'big.bin').trim());
    r.git('config', 'xet.chunk.threshold', '3 parsecs');
    const bad = xet(sb, r.dir, ['capture', '--json']);
    assert.equal(bad.status !== 0, true);
    assert.equal(JSON.parse(bad.stdout || bad.stderr).error?.code ?? JSON.parse(bad.stdout).code, 'CONFIG_INVALID');
    // Default (8 MiB): a 2 MiB file is whole; lowering it later chunks the same file.
    r.git('config', '--unset', 'xet.chunk.threshold');
    assert.equal(manifest(r, capture(sb, r).snapshot).chunked, undefined);
    r.git('config', 'xet.chunk.threshold', '1m');
    const m2 = manifest(r, capture(sb, r).snapshot);
    assert.deepEqual(m2.chunked, ['big.bin']);
    // And raising it again: whole again.
    r.git('config', 'xet.chunk.threshold', '4m');
    const m3cap = capture(sb, r);
    assert.equal(manifest(r, m3cap.snapshot).chunked, undefined);
    assert.equal(r.git('rev-parse', `${m3cap.snapshot}:files/big.bin`).trim(), r.git('hash-object', 'big.bin').trim());
  } finally {
    sb.cleanup();
  }
});

test('a tracked large file as committed keeps its blob; an edited one is chunked', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    const staged = commitLargeFile(r);
    const cap = capture(sb, r);
    assert.equal(manifest(r, cap.snapshot).chunked, undefined);
    assert.equal(r.git('rev-parse', `${cap.snapshot}:files/big.bin`).trim(), staged);
    // Touched, same bytes: still the staged blob.
    const later = new Date(Date.now() + 5000);
    fs.utimesSync(r.p('big.bin'), later, later);
    const cap2 = capture(sb, r, ['--always']);
    assert.equal(manifest(r, cap2.snapshot).chunked, undefined);
    assert.equal(r.git('rev-parse', `${cap2.snapshot}:files/big.bin`).trim(), staged);
    // Edited: chunked.
    fs.appendFileSync(r.p('big.bin'), 'more');
    const cap3 = capture(sb, r);
    assert.deepEqual(manifest(r, cap3.snapshot).chunked, ['big.bin']);
    // The index tree still names the staged blob.
    assert.equal(r.git('rev-parse', `${cap3.snapshot}:index/big.bin`).trim(), staged);
  } finally {
    sb.cleanup();
  }
});

test('a large tracked file git calls modified but holding its staged blob is chunked once, then taken from the stat cache', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    const staged = commitLargeFile(r);
    // Stat data the index no longer matches (as after a copy of the tree), the bytes the same; a
    // time well before the capture, so the stat cache may vouch for it.
    const past = new Date(Date.now() - 60_000);
    fs.utimesSync(r.p('big.bin'), past, past);
    assert.equal(r.git('diff-files', '--name-only'), 'big.bin\n');
    const chunkedBy = (extra: string[]) => {
      const res = xet(sb, r.dir, ['capture', '--json', ...extra], { env: { GIT_XET_TRACE: '1' } });
      assert.equal(res.status, 0, describeRun(res));
      const m = /files: chunk (\d+)/.exec(res.stderr);
      assert.ok(m, describeRun(res));
      return { chunked: Number(m[1]), snapshot: parseJson(res).snapshot as string };
    };
    const first = chunkedBy([]);
    assert.equal(first.chunked, 1, 'chunked to learn what it holds');
    assert.equal(r.git('rev-parse', `${first.snapshot}:files/big.bin`).trim(), staged);
    const again = chunkedBy(['--always']);
    assert.equal(again.chunked, 0, 'the stat cache vouches for it now');
    assert.equal(r.git('rev-parse', `${again.snapshot}:files/big.bin`).trim(), staged);
    assert.equal(r.git('diff-files', '--name-only'), 'big.bin\n', 'the user index is left as it was');
    // Edited in place, same size and times put back: the ctime differs, so it is chunked again and
    // stored as what it now holds.
    const fd = fs.openSync(r.p('big.bin'), 'r+');
    fs.writeSync(fd, Buffer.from('edit'), 0, 4, 1000);
    fs.closeSync(fd);
    fs.utimesSync(r.p('big.bin'), past, past);
    const edited = chunkedBy([]);
    assert.equal(edited.chunked, 1);
    assert.deepEqual(manifest(r, edited.snapshot).chunked, ['big.bin']);
  } finally {
    sb.cleanup();
  }
});

test('unchanged re-capture reads no chunked file; an edit packs only a few new chunks', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 8 * MiB, 11);
    // A file written in the second before a capture is re-read by the next one (racy-safe cache).
    const past = new Date(Date.now() - 10_000);
    fs.utimesSync(r.p('big.bin'), past, past);
    const first = capture(sb, r);
    assert.equal(first.chunking.cacheHits, 0);
    assert.ok(first.chunking.newChunks > 500);
    // The hit count is the evidence: a hit means neither we nor git opened the file (it is not
    // given to update-index). (Making it unreadable would change its ctime: a miss, rightly.)
    const again = capture(sb, r);
    assert.equal(again.unchanged, true, JSON.stringify(again));
    assert.equal(again.snapshot, first.snapshot);
    assert.equal(again.chunking.cacheHits, 1);
    assert.equal(again.chunking.newChunks, 0);
    // In-place edit of 100 bytes in the middle: one or two new chunks, plus list, segment and pointer.
    const before = packObjectCounts(r);
    const fd = fs.openSync(r.p('big.bin'), 'r+');
    fs.writeSync(fd, Buffer.alloc(100, 0x41), 0, 100, 4 * MiB);
    fs.closeSync(fd);
    const edited = capture(sb, r);
    assert.equal(edited.unchanged, false);
    assert.equal(edited.chunking.cacheHits, 0);
    assert.ok(edited.chunking.newChunks >= 1 && edited.chunking.newChunks <= 3, JSON.stringify(edited.chunking));
    const after = packObjectCounts(r);
    const newPacks = [...after].filter(([n]) => !before.has(n));
    assert.equal(newPacks.length, 1);
    // chunks + pointer + list + segments (8 MiB ≈ 1000 chunks: 1 segment) + chunks/ + files trees + filemeta
    assert.ok(newPacks[0][1] < 12, `new pack holds ${newPacks[0][1]} objects`);
    const m = manifest(r, edited.snapshot);
    const p = parsePointer(Buffer.from(r.git('cat-file', 'blob', `${edited.snapshot}:files/big.bin`)), 'sha1', 'x');
    assert.equal(p.blob, r.git('hash-object', 'big.bin').trim());
    assert.equal(m.counts.bytes, 8 * MiB + 6);
    const v = xet(sb, r.dir, ['verify', '--json', edited.snapshot, '.']);
    assert.equal(v.status, 0, describeRun(v));
  } finally {
    sb.cleanup();
  }
});

test('hard links of a chunked file are one pointer and a filemeta link', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('a/big.bin'), 2 * MiB, 13);
    fs.mkdirSync(r.p('b'));
    fs.linkSync(r.p('a/big.bin'), r.p('b/link.bin'));
    const cap = capture(sb, r);
    const m = manifest(r, cap.snapshot);
    assert.deepEqual(m.chunked, ['a/big.bin', 'b/link.bin']);
    assert.equal(m.counts.hardLinks, 1);
    assert.equal(m.counts.bytes, 4 * MiB + 6);
    assert.equal(m.counts.diskBytes, 2 * MiB + 6);
    const a = r.git('rev-parse', `${cap.snapshot}:files/a/big.bin`).trim();
    assert.equal(r.git('rev-parse', `${cap.snapshot}:files/b/link.bin`).trim(), a);
    const meta = r.git('cat-file', 'blob', `${cap.snapshot}:filemeta`).split('\n');
    assert.match(meta[3], / =0$/);
    const v = xet(sb, r.dir, ['verify', '--json', cap.snapshot, '.']);
    assert.equal(v.status, 0, describeRun(v));
  } finally {
    sb.cleanup();
  }
});

test('a file that changes while its chunks are packed: WORKTREE_CHANGED, no snapshot ref', async () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 2 * MiB, 17);
    const run = await pausedAt(sb, r.dir, ['capture', '--json'], 'pack:mid-write');
    const fd = fs.openSync(r.p('big.bin'), 'r+');
    fs.writeSync(fd, Buffer.alloc(4096, 0x42), 0, 4096, MiB);
    fs.closeSync(fd);
    run.go();
    const done = await run.done;
    assert.notEqual(done.code, 0);
    assert.match(done.stdout, /WORKTREE_CHANGED/);
    assert.equal(r.git('for-each-ref', 'refs/xet/snapshots/').trim(), '');
  } finally {
    sb.cleanup();
  }
});

/** Repack every object but `victim` into one pack and drop the old packs: the repository lacks it. */
function repackWithout(r: Repo, victim: string): void {
  const dir = `${r.gitPath('objects')}/pack`;
  const old = fs.readdirSync(dir);
  const all = r
    .git('cat-file', '--batch-all-objects', '--batch-check=%(objectname)')
    .trim()
    .split('\n')
    .filter((o) => o !== victim);
  r.gitInput(`${all.join('\n')}\n`, 'pack-objects', '-q', `${dir}/pack`);
  for (const n of old) fs.rmSync(`${dir}/${n}`);
}

test('verify reports a chunked file of the snapshot that does not reassemble: chunk-integrity CHUNK_MISSING', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 2 * MiB, 19);
    const snap = capture(sb, r).snapshot as string;
    const p = parsePointer(Buffer.from(r.git('cat-file', 'blob', `${snap}:files/big.bin`)), 'sha1', 'big.bin');
    const victim = r.git('ls-tree', '-r', p.list).trim().split('\n')[3].split(/\s+/)[2];
    repackWithout(r, victim);
    assert.notEqual(r.gitTry('cat-file', '-e', victim).status, 0);
    const v = xet(sb, r.dir, ['verify', '--json', snap, '.']);
    assert.equal(v.status, 1, describeRun(v));
    assert.deepEqual(parseJson(v).differences, [
      { kind: 'chunk-integrity', path: 'big.bin', expected: p.blob, actual: 'CHUNK_MISSING' },
    ]);
  } finally {
    sb.cleanup();
  }
});

/** Replace chunk `victim` with a loose object of the same name and size but other bytes (git does
 * not re-hash what it reads, so every reader gets the wrong bytes under the right name). */
function corruptChunk(r: Repo, victim: string): void {
  const bytes = execFileSync('git', ['cat-file', 'blob', victim], { cwd: r.dir });
  repackWithout(r, victim);
  const wrong = Buffer.from(bytes);
  wrong[wrong.length >> 1] ^= 0xff;
  const loose = `${r.gitPath('objects')}/${victim.slice(0, 2)}`;
  fs.mkdirSync(loose, { recursive: true });
  fs.writeFileSync(
    `${loose}/${victim.slice(2)}`,
    zlib.deflateSync(Buffer.concat([Buffer.from(`blob ${wrong.length}\0`), wrong])),
  );
  assert.equal(r.git('cat-file', '-s', victim).trim(), String(bytes.length));
}

test('a chunk with wrong bytes under its name: restore fails INTEGRITY_MISMATCH and leaves nothing, verify reports chunk-integrity', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 2 * MiB + 3, 23);
    const snap = capture(sb, r).snapshot as string;
    const p = parsePointer(Buffer.from(r.git('cat-file', 'blob', `${snap}:files/big.bin`)), 'sha1', 'big.bin');
    const victim = r.git('ls-tree', '-r', p.list).trim().split('\n')[5].split(/\s+/)[2];
    corruptChunk(r, victim);
    refusedAndReported(sb, r, snap, p.blob);
  } finally {
    sb.cleanup();
  }
});

test('a chunk damaged inside its pack (stored and deflated): restore fails INTEGRITY_MISMATCH and leaves nothing, verify reports chunk-integrity', () => {
  for (const level of ['0', '1']) {
    const sb = createSandbox();
    try {
      const r = setup(sb);
      r.git('config', 'xet.chunk.compression', level);
      writeLargeFile(r.p('big.bin'), 2 * MiB + 3, 29);
      const snap = capture(sb, r).snapshot as string;
      const p = parsePointer(Buffer.from(r.git('cat-file', 'blob', `${snap}:files/big.bin`)), 'sha1', 'big.bin');
      const victim = r.git('ls-tree', '-r', p.list).trim().split('\n')[7].split(/\s+/)[2];
      // Where the victim's entry is in its pack (verify-pack: id type size size-in-pack offset).
      const dir = `${r.gitPath('objects')}/pack`;
      let hit: { pack: string; at: number; len: number } | null = null;
      for (const n of fs.readdirSync(dir).filter((n) => n.endsWith('.idx'))) {
        for (const line of r.git('verify-pack', '-v', `${dir}/${n}`).split('\n')) {
          const f = line.split(/\s+/);
          if (f[0] === victim) hit = { pack: `${dir}/${n.replace(/\.idx$/, '.pack')}`, at: +f[4], len: +f[3] };
        }
      }
      assert.ok(hit, 'the victim is in a pack');
      const fd = fs.openSync(hit.pack, 'r+');
      const b = Buffer.alloc(1);
      const at = hit.at + (hit.len >> 1);
      fs.readSync(fd, b, 0, 1, at);
      b[0] ^= 0x55;
      fs.writeSync(fd, b, 0, 1, at);
      fs.closeSync(fd);
      refusedAndReported(sb, r, snap, p.blob);
    } finally {
      sb.cleanup();
    }
  }
});

test('chunks already stored, packed or loose, are not stored again; the lookup finds exactly what the repository holds', () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 4 * MiB, 23);
    const first = capture(sb, r);
    assert.ok(first.chunking.newChunks > 200);
    // The same bytes at a new path (no record of them there): every chunk is looked up and found.
    fs.copyFileSync(r.p('big.bin'), r.p('copy.bin'));
    const copied = capture(sb, r);
    assert.equal(copied.chunking.newChunks, 0, JSON.stringify(copied.chunking));
    // Loose and packed objects, a missing one and a malformed id (src/git/object-presence.ts).
    const loose = r.gitInput('a loose object\n', 'hash-object', '-w', '--stdin').trim();
    const packed = r.git('rev-parse', 'HEAD').trim();
    const missing = 'f'.repeat(40);
    const objects = r.p('.git/objects');
    const held = heldLocally([loose, packed, missing, 'not-an-oid', loose], objects, 'sha1');
    const inPack = r.gitInput(`${packed}\n`, 'cat-file', '--batch-check');
    // A loose object's name says nothing of its content: only packs count.
    assert.equal(held.has(loose), false);
    assert.ok(!inPack.includes('missing'));
    // An empty file where a loose object belongs (a crash can leave one) is not an object.
    fs.mkdirSync(r.p(`.git/objects/${missing.slice(0, 2)}`), { recursive: true });
    fs.writeFileSync(r.p(`.git/objects/${missing.slice(0, 2)}/${missing.slice(2)}`), '');
    assert.deepEqual(
      [...held].filter((o) => o === missing || o === 'not-an-oid'),
      [],
    );
    r.git('repack', '-a', '-d', '-q');
    // (The loose blob is unreachable: repack -a -d leaves it loose, where it does not count.)
    assert.deepEqual([...heldLocally([loose, packed, missing], objects, 'sha1')], [packed]);
    // A repository borrowing objects through alternates sees the packs of its source.
    const borrower = sb.path('borrower');
    execFileSync('git', ['clone', '-q', '--shared', r.dir, borrower]);
    assert.deepEqual([...heldLocally([loose, packed, missing], `${borrower}/.git/objects`, 'sha1')], [packed]);
  } finally {
    sb.cleanup();
  }
});

test("a chunk list is read from the repository's packs, hash-checked, with no git process; a damaged entry there is git's to answer", async () => {
  const sb = createSandbox();
  try {
    const r = setup(sb);
    writeLargeFile(r.p('big.bin'), 3 * MiB + 5, 9);
    const snap = capture(sb, r).snapshot as string;
    const trace = sb.path('git-trace');
    const opts = { cwd: r.dir, env: { ...sb.env, GIT_TRACE: trace } };
    const snapshot = await readSnapshot(snap, opts);
    const entry = (await chunkedFiles(snapshot, opts)).get('big.bin');
    assert.ok(entry, 'big.bin is chunked');
    const whole = async (packs?: LocalPacks) => {
      const list = await ChunkList.fromPointer(entry.pointer, 'big.bin', { git: opts, format: 'sha1', packs });
      return (await list.chunksFor(0, entry.pointer.size)).map((c) => `${c.offset} ${c.size} ${c.oid}`);
    };
    const viaGit = await whole();
    assert.ok(viaGit.length > 10);
    fs.rmSync(trace, { force: true });
    const packs = LocalPacks.openDir(r.gitPath('objects'), 'sha1');
    try {
      assert.deepEqual(await whole(packs), viaGit);
    } finally {
      packs.close();
    }
    const ran = fs.existsSync(trace) ? fs.readFileSync(trace, 'utf8') : '';
    assert.doesNotMatch(ran, /cat-file/, 'the list and its segments came from the packs');

    // The list tree's entry damaged in the pack: the in-process read fails its checks and git is
    // asked, which refuses it too; the error is the one a read through git alone gives.
    const dir = `${r.gitPath('objects')}/pack`;
    let idx = '';
    let row: string | undefined;
    for (const n of fs.readdirSync(dir).filter((f) => f.endsWith('.idx'))) {
      row = r
        .gitInput(fs.readFileSync(`${dir}/${n}`), 'show-index')
        .split('\n')
        .find((l) => l.split(' ')[1] === entry.pointer.list);
      if (row) {
        idx = n;
        break;
      }
    }
    assert.ok(row, 'the list tree is in the capture pack');
    const offset = Number(row.split(' ')[0]);
    const pack = fs.openSync(`${dir}/${idx.replace(/\.idx$/, '.pack')}`, 'r+');
    const b = Buffer.alloc(1);
    fs.readSync(pack, b, 0, 1, offset + 8);
    b[0] ^= 0xff;
    fs.writeSync(pack, b, 0, 1, offset + 8);
    fs.closeSync(pack);
    const codeOf = async (packs?: LocalPacks) => {
      try {
        await whole(packs);
        return 'read';
      } catch (e) {
        return (e as { code?: string }).code ?? String(e);
      }
    };
    const alone = await codeOf();
    const damaged = LocalPacks.openDir(r.gitPath('objects'), 'sha1');
    try {
      assert.equal(await codeOf(damaged), alone);
    } finally {
      damaged.close();
    }
    assert.notEqual(alone, 'read', 'git refuses the damaged list too');
  } finally {
    sb.cleanup();
  }
});
