// git xet cat: byte ranges of a snapshot's files, chunked or whole, against the real git. The range
// reader's list from the issue: seek to any offset, overlapping ranges, a range ending at EOF and
// one past it, a zero-length range, concurrent readers, cancellation (AbortSignal in-process,
// SIGTERM of the CLI: no partial -o file), bounded memory (RSS of a child reading 100 MiB); and a
// lazy restore from a bare Git server where a 4 KiB read transfers at most 2 chunks, then hydrate.
//
// Chunked snapshots are built here with plumbing (chunkFile, buildChunkList, writePack, mktree,
// commit-tree): a capture, then its files tree given a pointer entry, a chunks/ tree and a v3
// manifest — the format of docs/FORMAT.md, independent of capture's own chunking.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import { isXetError } from '../src/errors';
import { writePack, type PackItem } from '../src/git/pack-writer';
import { chunkFile } from '../src/chunks/chunk-file';
import { buildChunkList, type ChunkRef } from '../src/chunks/list-tree';
import { pointerOf, serializePointer } from '../src/chunks/pointer';
import { parseRange, resolveRange } from '../src/chunks/range';
import { parseManifest, serializeManifest, SNAPSHOT_SCHEMA_V3 } from '../src/snapshot/manifest';
import { cat, INLINE_MAX } from '../src/snapshot/cat';
import { git, initRepo } from './support/git';
import { createSandbox, type Sandbox } from './support/sandbox';
import { callError, callOk, withMcp } from './support/mcp';
import { expectError, parseJson, xet, XET_BIN } from './support/xet';

/** Deterministic pseudo-random bytes (tests must not depend on luck). */
function bytes(n: number, seed: string): Buffer {
  const out = Buffer.alloc(n);
  let at = 0;
  for (let i = 0; at < n; i++) at += crypto.createHash('sha256').update(`${seed}:${i}`).digest().copy(out, at);
  return out;
}

/** Large deterministic bytes, fast: AES-CTR of zeros under a key from the seed. */
function writeBytes(file: string, n: number, seed: string): void {
  const key = crypto.createHash('sha256').update(seed).digest().subarray(0, 16);
  const aes = crypto.createCipheriv('aes-128-ctr', key, Buffer.alloc(16));
  const fd = fs.openSync(file, 'w');
  const step = 8 << 20;
  const zeros = Buffer.alloc(step);
  for (let at = 0; at < n; at += step) fs.writeSync(fd, aes.update(zeros.subarray(0, Math.min(step, n - at))));
  fs.closeSync(fd);
}

interface Fixture {
  repo: string;
  snapshot: string;
  /** chunked path -> its chunks */
  chunks: Map<string, ChunkRef[]>;
  /** file in the sandbox holding each snapshot file's bytes */
  source: Map<string, string>;
}

/**
 * A capture of `repo` (small files), then the same snapshot with `chunked` files added to files/
 * as pointers (their chunks packed, except those `omit` names) and `whole` files as plain blobs.
 */
async function chunkedSnapshot(
  sb: Sandbox,
  repo: string,
  chunked: Record<string, string>,
  whole: Record<string, string> = {},
  omit: (path: string, index: number) => boolean = () => false,
): Promise<Fixture> {
  const cap = parseJson(xet(sb, repo, ['capture', '--json', '-m', 'base']));
  const orig: string = cap.snapshot;
  const g = (args: string[], input?: string | Buffer) => git(sb, repo, args, { input }).trim();
  const mktree = (lines: string[]) => g(['mktree', '-z'], lines.map((l) => `${l}\0`).join(''));
  const top = (tree: string) =>
    g(['ls-tree', '-z', tree])
      .split('\0')
      .filter(Boolean)
      .map((rec) => ({ rec, name: rec.slice(rec.indexOf('\t') + 1) }));
  const filesTree = g(['rev-parse', `${orig}:files`]);
  const add = new Map<string, string>();
  const fx: Fixture = { repo, snapshot: '', chunks: new Map(), source: new Map() };
  const lists: string[] = [];
  for (const [p, file] of Object.entries(chunked)) {
    const cf = await chunkFile(file, { format: 'sha1' });
    const { list, segments } = buildChunkList(cf.chunks, 'sha1');
    const fd = fs.openSync(file, 'r');
    const items: PackItem[] = [];
    cf.chunks.forEach((c, i) => {
      if (omit(p, i)) return;
      const data = Buffer.alloc(c.size);
      fs.readSync(fd, data, 0, c.size, c.offset);
      items.push({ oid: c.oid, type: 'blob', data });
    });
    fs.closeSync(fd);
    for (const t of [list, ...segments]) items.push({ oid: t.oid, type: 'tree', data: t.data });
    await writePack(path.join(repo, '.git', 'objects'), 'sha1', items);
    const pointer = serializePointer(pointerOf(cf, list.oid));
    add.set(p, `100644 blob ${g(['hash-object', '-w', '--stdin'], pointer)}\t${p}`);
    lists.push(list.oid);
    fx.chunks.set(p, cf.chunks);
    fx.source.set(p, file);
  }
  for (const [p, file] of Object.entries(whole)) {
    add.set(p, `100644 blob ${g(['hash-object', '-w', '--', file])}\t${p}`);
    fx.source.set(p, file);
  }
  const idx = { GIT_INDEX_FILE: sb.path(`files-${crypto.randomBytes(4).toString('hex')}.index`) };
  git(sb, repo, ['read-tree', filesTree], { env: idx });
  git(sb, repo, ['update-index', '--add', '--index-info'], {
    env: idx,
    input: [...add.values()].map((l) => `${l}\n`).join(''),
  });
  const files = git(sb, repo, ['write-tree'], { env: idx }).trim();
  fs.rmSync(idx.GIT_INDEX_FILE);
  const chunksTree = mktree([...new Set(lists)].sort().map((l) => `040000 tree ${l}\t${l}`));
  const m = parseManifest(g(['cat-file', 'blob', `${orig}:manifest.json`]));
  m.schema = SNAPSHOT_SCHEMA_V3;
  m.chunked = Object.keys(chunked).sort();
  m.counts = {
    ...m.counts,
    files: m.counts.files + add.size,
    chunkedFiles: m.chunked.length,
    chunks: [...fx.chunks.values()].reduce((n, cs) => n + cs.length, 0),
  };
  const manifest = g(['hash-object', '-w', '--stdin'], serializeManifest(m));
  const rest = top(g(['rev-parse', `${orig}^{tree}`])).filter(
    // filemeta lists the capture's files; without it the added files get restore's defaults.
    (e) => !['files', 'manifest.json', 'chunks', 'filemeta'].includes(e.name),
  );
  const tree = mktree([
    ...rest.map((e) => e.rec),
    `040000 tree ${files}\tfiles`,
    `040000 tree ${chunksTree}\tchunks`,
    `100644 blob ${manifest}\tmanifest.json`,
  ]);
  const parents = g(['rev-list', '--parents', '-n1', orig]).split(' ').slice(1);
  const msg = g(['log', '-1', '--format=%B', orig]);
  fx.snapshot = g(['commit-tree', tree, ...parents.flatMap((p) => ['-p', p]), '-m', msg]);
  g(['update-ref', `refs/xet/snapshots/${fx.snapshot}`, fx.snapshot]);
  return fx;
}

/** `cat` in-process into memory. */
async function catBytes(
  cwd: string,
  target: string,
  range?: string,
): Promise<{ data: Buffer; r: Awaited<ReturnType<typeof cat>> }> {
  const parts: Buffer[] = [];
  const out = new Writable({
    write(c: Buffer, _e, cb) {
      parts.push(c);
      cb();
    },
  });
  const r = await cat({ cwd, target, range, output: out });
  return { data: Buffer.concat(parts), r };
}

const isCode = (code: string) => (e: unknown) => isXetError(e) && e.code === code;

/** Chunks overlapping [s, e). */
const overlapping = (cs: ChunkRef[], s: number, e: number) => cs.filter((c) => c.offset < e && c.offset + c.size > s);

// One sandbox for the suite: a repository with a 3 MiB chunked file, a small ordinary file and a
// 128 MiB chunked file (plus the same bytes as a whole blob) for the memory and cancellation tests.
let sb: Sandbox;
let fx: Fixture;
let small: Buffer;
let mid: Buffer;
const BIG = 128 << 20;

before(async () => {
  sb = createSandbox();
  const r = initRepo(sb, 'repo');
  r.commit('c1', { 'a.txt': 'hello\n' });
  mid = bytes(3 * 1024 * 1024 + 4321, 'mid');
  fs.writeFileSync(sb.path('mid.bin'), mid);
  small = bytes(70_000, 'small');
  fs.writeFileSync(sb.path('small.bin'), small);
  writeBytes(sb.path('big.bin'), BIG, 'big');
  fx = await chunkedSnapshot(
    sb,
    r.dir,
    { 'data/mid.bin': sb.path('mid.bin'), 'big.bin': sb.path('big.bin') },
    { 'small.bin': sb.path('small.bin'), 'whole.bin': sb.path('big.bin') },
  );
});

after(() => sb?.cleanup());

test('ranges: any offset, overlapping, to EOF and past it, zero-length, open; chunked and whole files alike', async () => {
  const chunks = fx.chunks.get('data/mid.bin') as ChunkRef[];
  const size = mid.length;
  const cases: [string, number, number][] = [];
  // Every chunk boundary and its neighbours, and pseudo-random offsets.
  for (const c of chunks.slice(0, 8)) {
    for (const s of [c.offset - 1, c.offset, c.offset + 1])
      if (s >= 0) cases.push([`${s}+4096`, s, Math.min(size, s + 4096)]);
  }
  for (let i = 0; i < 10; i++) {
    const s = crypto.createHash('sha1').update(`o${i}`).digest().readUInt32BE(0) % size;
    const e = Math.min(size - 1, s + ((i * 7919) % 200_000));
    cases.push([`${s}-${e}`, s, e + 1]);
  }
  cases.push(
    [`0-0`, 0, 1],
    [`${size - 1}-${size - 1}`, size - 1, size], // the last byte
    [`${size - 10}-${size - 1}`, size - 10, size], // ending exactly at EOF
    [`${size - 10}-${size + 5000}`, size - 10, size], // past EOF: clamped
    [`${size - 10}+100`, size - 10, size],
    [`100-`, 100, size],
    ['5+0', 5, 5],
    [`${size}+0`, size, size], // zero-length at EOF: an empty read
  );
  for (const [range, s, e] of cases) {
    const { data, r } = await catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, range);
    assert.ok(data.equals(mid.subarray(s, e)), `range ${range}`);
    assert.deepEqual(
      { start: r.start, end: r.end, bytes: r.bytes, chunked: r.chunked, size: r.size },
      { start: s, end: e, bytes: e - s, chunked: true, size },
      range,
    );
    // Only the chunks overlapping the range are read.
    assert.equal(r.chunksRead, e > s ? overlapping(chunks, s, e).length : 0, `chunks read for ${range}`);
  }
  // Overlapping ranges read concurrently agree on their common bytes.
  const c7 = chunks[7];
  const [x, y] = await Promise.all([
    catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, `${c7.offset - 3000}+6000`),
    catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, `${c7.offset}+6000`),
  ]);
  assert.ok(x.data.subarray(3000).equals(y.data.subarray(0, 3000)));
  // A 1-byte read inside one chunk reads that chunk only; one across a boundary reads two.
  assert.equal((await catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, `${c7.offset + 5}+1`)).r.chunksRead, 1);
  assert.equal((await catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, `${c7.offset - 1}+2`)).r.chunksRead, 2);
  // Past the end: RANGE_NOT_SATISFIABLE, for a span starting at the size too (HTTP's rule).
  for (const range of [`${size}-${size + 10}`, `${size + 1}+0`, `${size}+1`, `${size}-`]) {
    await assert.rejects(
      catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, range),
      isCode('RANGE_NOT_SATISFIABLE'),
      range,
    );
  }
  // The whole file, checked against the pointer's blob id.
  assert.ok((await catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`)).data.equals(mid));
  // An ordinary blob: the same ranges, streamed with a skip.
  for (const [range, s, e] of [
    ['0-0', 0, 1],
    ['65535+3', 65535, 65538],
    [`${small.length - 5}-${small.length + 100}`, small.length - 5, small.length],
    ['1000+0', 1000, 1000],
    [`${small.length}+0`, small.length, small.length],
  ] as [string, number, number][]) {
    const { data, r } = await catBytes(fx.repo, `${fx.snapshot}:small.bin`, range);
    assert.ok(data.equals(small.subarray(s, e)), `blob range ${range}`);
    assert.equal(r.chunked, false);
    assert.equal(r.chunksRead, 0);
  }
  await assert.rejects(
    catBytes(fx.repo, `${fx.snapshot}:small.bin`, `${small.length}-`),
    isCode('RANGE_NOT_SATISFIABLE'),
  );
  assert.ok((await catBytes(fx.repo, `${fx.snapshot}:small.bin`)).data.equals(small));
  // Bad ranges and targets are usage errors.
  for (const bad of ['10-5', 'abc', '-5', '1e3-2000', '5+']) assert.throws(() => parseRange(bad), isCode('USAGE'), bad);
  assert.throws(() => resolveRange({ kind: 'span', start: 0, end: null }, 0, 'empty'), isCode('RANGE_NOT_SATISFIABLE'));
  assert.deepEqual(resolveRange({ kind: 'length', start: 0, length: 0 }, 0, 'empty'), { start: 0, end: 0 });
  await assert.rejects(catBytes(fx.repo, `${fx.snapshot}:data`), isCode('USAGE'));
  await assert.rejects(catBytes(fx.repo, `${fx.snapshot}:nope.txt`), isCode('USAGE'));
  await assert.rejects(catBytes(fx.repo, `${fx.snapshot}:../x`), isCode('USAGE'));
});

test('the CLI: stdout bytes, -o written atomically, --json shapes (inline content, capped), errors by code', () => {
  const s = fx.snapshot;
  const r = xet(sb, fx.repo, ['cat', `${s}:data/mid.bin`, '--range', '1000-1999']);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(Buffer.from(r.stdout, 'latin1').length > 0);
  const out = sb.path('out.bin');
  const j = parseJson(xet(sb, fx.repo, ['cat', `${s}:data/mid.bin`, '--range', '1000-1999', '-o', out, '--json']));
  assert.deepEqual(j, {
    snapshot: s,
    path: 'data/mid.bin',
    size: mid.length,
    start: 1000,
    end: 2000,
    bytes: 1000,
    chunked: true,
    chunksRead: j.chunksRead,
    chunksFetched: 0,
    output: out,
  });
  assert.ok(fs.readFileSync(out).equals(mid.subarray(1000, 2000)));
  assert.deepEqual(
    fs.readdirSync(path.dirname(out)).filter((n) => n.includes('xet-cat')),
    [],
  );
  // --json without -o: the bytes inline (text when UTF-8).
  const t = parseJson(xet(sb, fx.repo, ['cat', `${s}:a.txt`, '--json']));
  assert.equal(t.content, 'hello\n');
  assert.equal(t.encoding, 'utf8');
  const b = parseJson(xet(sb, fx.repo, ['cat', `${s}:small.bin`, '--range', '10+20', '--json']));
  assert.equal(b.encoding, 'base64');
  assert.ok(Buffer.from(b.content, 'base64').equals(small.subarray(10, 30)));
  expectError(xet(sb, fx.repo, ['cat', `${s}:big.bin`, '--range', `0+${INLINE_MAX + 1}`, '--json']), 'USAGE', 2);
  expectError(
    xet(sb, fx.repo, ['cat', `${s}:data/mid.bin`, '--range', `${mid.length}-`, '--json']),
    'RANGE_NOT_SATISFIABLE',
    3,
  );
});

test('a chunk the repository lacks is CHUNK_MISSING, and -o leaves nothing', async () => {
  const sb2 = createSandbox();
  try {
    const r = initRepo(sb2, 'repo');
    r.commit('c1', { 'a.txt': 'a\n' });
    fs.writeFileSync(sb2.path('f.bin'), mid);
    const f = await chunkedSnapshot(sb2, r.dir, { 'f.bin': sb2.path('f.bin') }, {}, (_p, i) => i === 3);
    const cs = f.chunks.get('f.bin') as ChunkRef[];
    // Ranges that avoid the missing chunk read fine; one that touches it fails by name.
    assert.ok(
      (await catBytes(r.dir, `${f.snapshot}:f.bin`, `0+${cs[3].offset}`)).data.equals(mid.subarray(0, cs[3].offset)),
    );
    await assert.rejects(catBytes(r.dir, `${f.snapshot}:f.bin`, `${cs[3].offset + 10}+1`), isCode('CHUNK_MISSING'));
    const out = sb2.path('o.bin');
    expectError(xet(sb2, r.dir, ['cat', `${f.snapshot}:f.bin`, '-o', out, '--json']), 'CHUNK_MISSING', 3);
    assert.deepEqual(
      fs.readdirSync(sb2.root).filter((n) => n.startsWith('o.bin') || n.includes('xet-cat')),
      [],
    );
  } finally {
    sb2.cleanup();
  }
});

test('concurrent readers: in-process and CLI processes reading the same file at once', async () => {
  const ranges = Array.from({ length: 8 }, (_, i) => [i * 300_000 + 17, i * 300_000 + 17 + 250_000] as const);
  const got = await Promise.all(
    ranges.map(([s, e]) => catBytes(fx.repo, `${fx.snapshot}:data/mid.bin`, `${s}-${e - 1}`)),
  );
  got.forEach((g, i) => assert.ok(g.data.equals(mid.subarray(...ranges[i])), `reader ${i}`));
  const procs = ranges
    .slice(0, 4)
    .map(([s, e], i) =>
      runCli(['cat', `${fx.snapshot}:data/mid.bin`, '--range', `${s}-${e - 1}`, '-o', sb.path(`par-${i}.bin`)]),
    );
  const codes = await Promise.all(procs.map((p) => p.done));
  codes.forEach((c, i) => {
    assert.equal(c.code, 0, c.stderr);
    assert.ok(fs.readFileSync(sb.path(`par-${i}.bin`)).equals(mid.subarray(...ranges[i])));
  });
});

/** The CLI as a child process we can signal and watch. */
function runCli(args: string[], cwd = fx.repo, onStdout?: (b: Buffer) => void) {
  const child = spawn(process.execPath, [XET_BIN, ...args], { cwd, env: sb.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  child.stdout.on('data', (b: Buffer) => onStdout?.(b));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((res) =>
    child.on('close', (code, signal) => res({ code, signal, stderr })),
  );
  return { child, done };
}

test('cancellation: an AbortSignal mid-read, and SIGTERM of the CLI mid-stream, leave no -o file', async () => {
  // In-process: abort once the first bytes are out.
  const ac = new AbortController();
  let seen = 0;
  const slow = new Writable({
    highWaterMark: 1 << 16,
    write(c: Buffer, _e, cb) {
      seen += c.length;
      if (seen > 1 << 20) ac.abort();
      setTimeout(cb, 1);
    },
  });
  await assert.rejects(cat({ cwd: fx.repo, target: `${fx.snapshot}:big.bin`, output: slow, signal: ac.signal }));
  assert.ok(seen < BIG, 'the read stopped early');
  const dir = sb.path('cancel');
  fs.mkdirSync(dir);
  const ac2 = new AbortController();
  setTimeout(() => ac2.abort(), 30);
  await assert.rejects(
    cat({ cwd: fx.repo, target: `${fx.snapshot}:big.bin`, output: path.join(dir, 'x.bin'), signal: ac2.signal }),
    isCode('CANCELLED'),
  );
  assert.deepEqual(fs.readdirSync(dir), []);
  // The CLI: SIGTERM as soon as its temporary file has bytes in it.
  for (const file of ['big.bin', 'whole.bin']) {
    const p = runCli(['cat', `${fx.snapshot}:${file}`, '-o', path.join(dir, 'y.bin')]);
    let signalled = false;
    while (!signalled) {
      const tmp = fs.readdirSync(dir).find((n) => n.includes('xet-cat'));
      if (tmp && fs.statSync(path.join(dir, tmp)).size > 0) {
        p.child.kill('SIGTERM');
        signalled = true;
      } else if (fs.existsSync(path.join(dir, 'y.bin'))) {
        assert.fail('the read finished before it could be signalled');
      } else await new Promise((res) => setTimeout(res, 2));
    }
    const res = await p.done;
    assert.notEqual(res.code, 0, `${file}: a cancelled cat fails`);
    assert.match(res.stderr, /CANCELLED/);
    assert.deepEqual(fs.readdirSync(dir), [], `${file}: nothing left behind`);
  }
  // A reader that closes the pipe early ends cat quietly (exit 0), as `cat | head` would wish.
  const piped = runCli(['cat', `${fx.snapshot}:big.bin`], fx.repo, () => piped.child.stdout.destroy());
  const pres = await piped.done;
  assert.equal(pres.code, 0, pres.stderr);
  assert.equal(pres.stderr, '');
});

test('bounded memory: a child reading a 100 MiB range stays within 64 MiB of its baseline RSS', async (t) => {
  if (!fs.existsSync('/proc/self/status')) {
    t.skip('no /proc: cannot read a child process RSS');
    return;
  }
  const peak = async (file: string, range: string): Promise<{ hwm: number; bytes: number; sha: string }> => {
    const h = crypto.createHash('sha1');
    let n = 0;
    const p = runCli(['cat', `${fx.snapshot}:${file}`, '--range', range], fx.repo, (b) => {
      n += b.length;
      h.update(b);
    });
    let hwm = 0;
    const timer = setInterval(() => {
      try {
        const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${p.child.pid}/status`, 'utf8'));
        if (m) hwm = Math.max(hwm, Number(m[1]) * 1024);
      } catch {
        /* exited */
      }
    }, 5);
    const res = await p.done;
    clearInterval(timer);
    assert.equal(res.code, 0, res.stderr);
    return { hwm, bytes: n, sha: h.digest('hex') };
  };
  const fd = fs.openSync(sb.path('big.bin'), 'r');
  const buf = Buffer.alloc(100 << 20);
  fs.readSync(fd, buf, 0, buf.length, 1000);
  fs.closeSync(fd);
  const wantSha = crypto.createHash('sha1').update(buf).digest('hex');
  for (const file of ['big.bin', 'whole.bin']) {
    const base = await peak(file, '1000+4096');
    const big = await peak(file, `1000+${100 << 20}`);
    assert.equal(big.bytes, 100 << 20);
    assert.equal(big.sha, wantSha);
    const over = big.hwm - base.hwm;
    assert.ok(
      base.hwm > 0 && over <= 64 << 20,
      `${file}: peak RSS ${big.hwm} is ${over} bytes over the baseline ${base.hwm}`,
    );
  }
});

test('lazy restore from a bare Git server: a 4 KiB read fetches at most 2 chunks; hydrate writes the rest', async () => {
  const bare = sb.path('server.git');
  git(sb, sb.root, ['init', '--quiet', '--bare', bare]);
  git(sb, bare, ['config', 'uploadpack.allowFilter', 'true']);
  git(sb, bare, ['config', 'uploadpack.allowAnySHA1InWant', 'true']);
  git(sb, fx.repo, ['push', '--quiet', bare, `refs/xet/snapshots/${fx.snapshot}`]);
  const dst = sb.path('lazy');
  const res = parseJson(
    xet(sb, sb.root, ['restore', fx.snapshot, dst, '--from', `file://${bare}`, '--lazy', '--json']),
  );
  assert.deepEqual(res.lazy, { source: `file://${bare}`, deferred: ['big.bin', 'data/mid.bin'] }, JSON.stringify(res));
  assert.equal(fs.readFileSync(path.join(dst, 'a.txt'), 'utf8'), 'hello\n');
  assert.ok(fs.readFileSync(path.join(dst, 'small.bin')).equals(small));
  assert.ok(!fs.existsSync(path.join(dst, 'data/mid.bin')) && !fs.existsSync(path.join(dst, 'big.bin')));
  // Which of a file's chunks the copy holds, asked without fetching.
  const present = (p: string): number => {
    const cs = fx.chunks.get(p) as ChunkRef[];
    // rev-list --missing=print never asks the promisor: it lists what is absent.
    const list = git(sb, dst, ['rev-list', '--objects', '--missing=print', `${fx.snapshot}:chunks`]);
    const missing = new Set(
      list
        .split('\n')
        .filter((l) => l.startsWith('?'))
        .map((l) => l.slice(1)),
    );
    return cs.filter((c) => !missing.has(c.oid)).length;
  };
  assert.equal(present('data/mid.bin'), 0, 'no chunk came with the lazy restore');
  assert.equal(present('big.bin'), 0);
  const cs = fx.chunks.get('data/mid.bin') as ChunkRef[];
  const at = cs[10].offset + 100;
  const j = parseJson(xet(sb, dst, ['cat', `${fx.snapshot}:data/mid.bin`, '--range', `${at}+4096`, '--json']));
  assert.ok(Buffer.from(j.content, 'base64').equals(mid.subarray(at, at + 4096)));
  assert.ok(j.chunksFetched >= 1 && j.chunksFetched <= 2, `${j.chunksFetched} chunks fetched`);
  const arrived = present('data/mid.bin');
  assert.ok(arrived >= 1 && arrived <= 2, `${arrived} chunks arrived for a 4 KiB read`);
  assert.equal(present('big.bin'), 0);
  // Read again: nothing more to fetch.
  const again = parseJson(xet(sb, dst, ['cat', `${fx.snapshot}:data/mid.bin`, '--range', `${at}+4096`, '--json']));
  assert.equal(again.chunksFetched, 0);
  // hydrate one file, then the rest.
  const h = parseJson(xet(sb, dst, ['hydrate', 'data/mid.bin', '--json']));
  assert.deepEqual(h.hydrated, [{ path: 'data/mid.bin', size: mid.length }]);
  assert.deepEqual(h.remaining, ['big.bin']);
  assert.equal(h.chunksFetched, cs.length - arrived);
  assert.ok(fs.readFileSync(path.join(dst, 'data/mid.bin')).equals(mid));
  expectError(xet(sb, dst, ['hydrate', 'data/mid.bin', '--json']), 'USAGE', 2);
  const h2 = parseJson(xet(sb, dst, ['hydrate', '--json']));
  assert.deepEqual(h2.remaining, []);
  assert.equal(
    crypto
      .createHash('sha1')
      .update(fs.readFileSync(path.join(dst, 'big.bin')))
      .digest('hex'),
    crypto
      .createHash('sha1')
      .update(fs.readFileSync(sb.path('big.bin')))
      .digest('hex'),
  );
});

test('MCP: the read-only cat tool answers with the bytes inline, refuses a file and a range over 1 MiB', async () => {
  await withMcp(sb, ['--repo', fx.repo, '--read-only'], async (s) => {
    const r = await callOk(s, 'cat', { target: `${fx.snapshot}:data/mid.bin`, range: '100+64' });
    assert.equal(r.encoding, 'base64');
    assert.ok(Buffer.from(r.content, 'base64').equals(mid.subarray(100, 164)));
    assert.equal(r.chunked, true);
    assert.equal((await callOk(s, 'cat', { target: `${fx.snapshot}:a.txt` })).content, 'hello\n');
    await callError(s, 'cat', { target: `${fx.snapshot}:a.txt`, output: path.join(fx.repo, 'mcp.out') }, 'USAGE');
    assert.ok(!fs.existsSync(path.join(fx.repo, 'mcp.out')));
    await callError(s, 'cat', { target: `${fx.snapshot}:big.bin` }, 'USAGE');
    await callError(s, 'cat', { target: `${fx.snapshot}:a.txt`, range: '6-' }, 'RANGE_NOT_SATISFIABLE');
  });
});

test('a real capture, lazily restored and hydrated, has the captured mtime and verifies clean', () => {
  const src = initRepo(sb, 'mtime-src').dir;
  git(sb, src, ['config', 'xet.chunk.threshold', '1m']);
  const data = crypto.randomBytes(3 * 1024 * 1024);
  fs.writeFileSync(path.join(src, 'data.db'), data);
  fs.writeFileSync(path.join(src, 'note.txt'), 'n\n');
  const when = new Date('2021-03-04T05:06:07.123Z');
  fs.utimesSync(path.join(src, 'data.db'), when, when);
  const snap = parseJson(xet(sb, src, ['capture', '--json'])).snapshot as string;
  const bare = sb.path('mtime-server.git');
  git(sb, sb.root, ['init', '--quiet', '--bare', bare]);
  git(sb, bare, ['config', 'uploadpack.allowFilter', 'true']);
  git(sb, bare, ['config', 'uploadpack.allowAnySHA1InWant', 'true']);
  git(sb, src, ['push', '--quiet', bare, `refs/xet/snapshots/${snap}`]);
  const dst = sb.path('mtime-lazy');
  const res = parseJson(xet(sb, sb.root, ['restore', snap, dst, '--from', `file://${bare}`, '--lazy', '--json']));
  assert.deepEqual(res.lazy.deferred, ['data.db']);
  // Not written is not deleted: a capture before hydrate would lose the file.
  expectError(xet(sb, dst, ['capture', '--json']), 'LAZY_DEFERRED');
  // Readers of the lazy copy fetch the chunks they lack in one batch (git would fetch one at a time).
  const tarFile = sb.path('mtime-lazy.tar');
  parseJson(xet(sb, dst, ['archive', snap, '-o', tarFile, '--json']));
  const out = sb.path('mtime-untar');
  fs.mkdirSync(out);
  const tarRun = spawnSync('tar', ['-xf', tarFile, '-C', out]);
  assert.equal(tarRun.status, 0, String(tarRun.stderr));
  assert.ok(fs.readFileSync(path.join(out, 'data.db')).equals(data));
  const h = parseJson(xet(sb, dst, ['hydrate', '--json']));
  assert.deepEqual(h.hydrated, [{ path: 'data.db', size: data.length }]);
  assert.ok(fs.readFileSync(path.join(dst, 'data.db')).equals(data));
  assert.equal(fs.statSync(path.join(dst, 'data.db')).mtime.getTime(), when.getTime(), 'the captured mtime');
  const v = parseJson(xet(sb, dst, ['verify', snap, '.', '--json']));
  assert.equal(v.ok, true, JSON.stringify(v.differences));
  // Hydrated: captures again, and the snapshot holds the file (chunked with the source's threshold).
  git(sb, dst, ['config', 'xet.chunk.threshold', '1m']);
  const again = parseJson(xet(sb, dst, ['capture', '--json']));
  assert.equal(again.chunkedFiles, 1);
});

test('hydrate lays hard links of a chunked file as links, as restore does, and the copy verifies clean', () => {
  const src = initRepo(sb, 'links-src').dir;
  git(sb, src, ['config', 'xet.chunk.threshold', '1m']);
  const data = crypto.randomBytes(2 * 1024 * 1024 + 11);
  fs.writeFileSync(path.join(src, 'a.bin'), data);
  fs.linkSync(path.join(src, 'a.bin'), path.join(src, 'b.bin'));
  fs.mkdirSync(path.join(src, 'sub'));
  fs.linkSync(path.join(src, 'a.bin'), path.join(src, 'sub', 'c.bin'));
  const snap = parseJson(xet(sb, src, ['capture', '--json'])).snapshot as string;
  const dst = sb.path('links-lazy');
  const res = parseJson(xet(sb, sb.root, ['restore', snap, dst, '--from', `file://${src}`, '--lazy', '--json']));
  assert.deepEqual([...res.lazy.deferred].sort(), ['a.bin', 'b.bin', 'sub/c.bin']);
  const h = parseJson(xet(sb, dst, ['hydrate', '--json']));
  assert.deepEqual(h.hydrated.map((x: { path: string }) => x.path).sort(), ['a.bin', 'b.bin', 'sub/c.bin']);
  const ino = (p: string) => fs.statSync(path.join(dst, p)).ino;
  assert.equal(ino('b.bin'), ino('a.bin'));
  assert.equal(ino('sub/c.bin'), ino('a.bin'));
  assert.equal(fs.statSync(path.join(dst, 'a.bin')).nlink, 3);
  assert.ok(fs.readFileSync(path.join(dst, 'b.bin')).equals(data));
  const v = parseJson(xet(sb, dst, ['verify', snap, '.', '--json']));
  assert.equal(v.ok, true, JSON.stringify(v.differences));
});
