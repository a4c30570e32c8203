#!/usr/bin/env node
// Large files as content-defined chunks (issue 13, "Measured"): every goal in one run.
//
//   node bench/chunks.mjs            (after npm run build; ~18 minutes here under load, the first run
//                                    also builds the workloads and git add of 1 GiB twice: +5 min)
//   node bench/chunks.mjs --help     (options)
//
// Workloads (bench/lib/large-files.mjs, built once under bench/work/large-*/, ~45 s): a 1 GiB
// SQLite database (better-sqlite3: users + events with integers, text, JSON and an index) and a
// 256 MiB pseudo-random binary. The edits, seeded: 1% of the database's 4 KiB pages rewritten at
// random (in place, as SQLite writes), and 100 bytes inserted at the start of the binary.
//
// Two layers, each against the obvious alternative timed in the same run:
//   engine  the chunking engine alone (src/chunks chunkFile, buildChunkList, the pack writer, the
//           reader) in this process, on the frozen CLI's dist/: what a capture stores, how fast,
//           and what a range read touches; a partial clone (`--filter=blob:none`) of a bare
//           repository holding the chunked file shows what a lazy 4 KiB read transfers.
//   cli     the same through `git xet capture`, `cat --range`, `restore --from URL --lazy` and
//           `archive`, in real repositories; a part whose command (or chunked capture) the CLI does
//           not have yet is reported as "not run" with the reason.
// Also measured for docs/DESIGN-NOTES.md ("Large files: threshold and chunk sizes"): what 1% page
// rewrites add at 8/16/32/64 KiB average chunks, and what chunking costs a 1/4/8/32 MiB file.
// Baselines: `zstd -1 -T0 -c file > /dev/null`, `git add` + `git commit` of the same file, `tar -c`.
// Results: tables on stdout and bench/chunks-results.json (every sample, load at each phase).

import { createHash } from 'node:crypto';
import {
  closeSync,
  copyFileSync,
  existsSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { deflateSync } from 'node:zlib';
import {
  BenchError,
  HAVE_GNU_TIME,
  MB,
  ROOT,
  WORK,
  fmtMB,
  fmtS,
  fmtX,
  git,
  loadLine,
  loadNoter,
  log,
  med,
  openRunDir,
  parseArgs,
  printReport,
  quote,
  recorder,
  run,
  runCpu,
  settle,
  setUpCli,
  sh,
  start,
  table,
  walk,
  writeResults,
  xetRunner,
} from './lib/harness.mjs';
import { copyWithInsert, ensureLargeFiles, rewritePages, rng } from './lib/large-files.mjs';

const GOALS = {
  editAddsOfFile: 0.05, // the second snapshot adds ≤ 5% of the file's size, chunk lists included
  insertChunks: 2, // ≤ 2 chunks plus the chunk list
  chunkMBpsPerCore: 500,
  coldVsZstd: 2,
  recaptureVsCold: 0.5,
  rangeChunks: 2, // a 4 KiB range read from a lazy restore transfers ≤ 2 chunks
  rangeRssMiB: 64, // a 100 MiB range read: ≤ 64 MiB above the baseline
  archiveVsTar: 2,
};
const RANGE_READS = 200; // random 4 KiB reads whose chunk counts are reported
const LAZY_READS = 5;
const AVERAGES_KIB = [8, 16, 32, 64];
const SMALL_MIB = [1, 4, 8, 32];

const ARGS = {
  script: 'bench/chunks.mjs',
  results: 'chunks-results.json',
  common: {
    reps: 3,
    tmpBase: WORK,
    rebuildWorkload: false,
    timeoutSec: 1800,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    tmpBase: 'where the run dir goes (default bench/work/: it holds several GiB of copies)',
    reps: 'repetitions of each timed step, median reported (default 3)',
  },
  options: [
    {
      flag: '--db-mib',
      key: 'dbMiB',
      arg: 'N',
      default: 1024,
      help: 'size of the SQLite database (default 1024)',
      parse: Number,
    },
    {
      flag: '--bin-mib',
      key: 'binMiB',
      arg: 'N',
      default: 256,
      help: 'size of the binary (default 256)',
      parse: Number,
    },
    { flag: '--no-engine', key: 'engine', default: true, help: 'skip the engine layer' },
    { flag: '--no-cli', key: 'cli', default: true, help: 'skip the CLI layer' },
    { flag: '--no-study', key: 'study', default: true, help: 'skip the chunk-size and threshold study' },
    {
      flag: '--regit',
      key: 'regit',
      default: false,
      help: 'measure git add + commit again (its sizes are cached with the workload)',
    },
  ],
};

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

const blobId = (data) => createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
const cpuNow = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
/** Wall and CPU seconds (this process, all threads) of fn; its result as `value`. */
async function timed(fn) {
  const c0 = cpuNow();
  const t0 = performance.now();
  const value = await fn();
  return { value, seconds: (performance.now() - t0) / 1000, cpuSeconds: cpuNow() - c0 };
}
const pct = (x) => (x == null ? '-' : `${(x * 100).toFixed(2)}%`);
const objectsBytes = (gitDir) => (existsSync(join(gitDir, 'objects')) ? walk(join(gitDir, 'objects')).bytes : 0);
const packsIn = (gitDir) => {
  const d = join(gitDir, 'objects', 'pack');
  return existsSync(d) ? readdirSync(d).filter((n) => n.endsWith('.pack')) : [];
};

/** The engine's modules from the CLI under measurement (the frozen copy's dist/). */
function engineModules(cli) {
  const dist = join(dirname(dirname(cli)), 'dist', 'src');
  const req = createRequire(join(dist, 'index.js'));
  return {
    dist,
    ...req(join(dist, 'chunks', 'chunk-file.js')),
    ...req(join(dist, 'chunks', 'list-tree.js')),
    ...req(join(dist, 'chunks', 'pointer.js')),
    ...req(join(dist, 'chunks', 'reader.js')),
    ...req(join(dist, 'chunks', 'gear.js')),
    ...req(join(dist, 'chunks', 'params.js')),
    ...req(join(dist, 'git', 'pack-writer.js')),
  };
}

// ---------------------------------------------------------------------------
// Engine: a capture of one file as chunks into a repository's objects
// ---------------------------------------------------------------------------

/**
 * Chunk `file` and pack what `objectsDir` lacks: the chunks not in `prev` (the previous capture's
 * chunk list, as capture compares), the segment trees not in it, the list tree, the pointer and
 * a chunks/ tree. Returns sizes, counts and the time of each half.
 */
async function engineCapture(E, gitDir, file, prev = null) {
  const objectsDir = join(gitDir, 'objects');
  const chunk = await timed(() => E.chunkFile(file, { format: 'sha1' }));
  const cf = chunk.value;
  const before = packsIn(gitDir);
  const pack = await timed(async () => {
    const { list, segments } = E.buildChunkList(cf.chunks, 'sha1');
    const have = new Set(prev ? prev.chunks.map((c) => c.oid) : []);
    const haveTrees = new Set(prev ? prev.segments.map((s) => s.oid) : []);
    const fresh = cf.chunks.filter((c) => !have.has(c.oid));
    const newSegments = segments.filter((s) => !haveTrees.has(s.oid));
    const pointer = { size: cf.size, blob: cf.blob, list: list.oid, chunks: cf.chunks.length, params: cf.params };
    const pdata = E.serializePointer(pointer);
    const ct = E.chunksTree([list.oid], 'sha1');
    const items = [
      ...fresh.map((c) => ({ oid: c.oid, type: 'blob', file, range: { offset: c.offset, size: c.size } })),
      ...newSegments.map((s) => ({ oid: s.oid, type: 'tree', data: s.data })),
      { oid: list.oid, type: 'tree', data: list.data },
      { oid: blobId(pdata), type: 'blob', data: pdata },
      { oid: ct.oid, type: 'tree', data: ct.data },
    ];
    const r = await E.writePack(objectsDir, 'sha1', items);
    return { r, list, segments, newSegments, fresh, pointer, pointerOid: blobId(pdata), chunksTreeOid: ct.oid };
  });
  const p = pack.value;
  const added = packsIn(gitDir).filter((n) => !before.includes(n));
  const packBytes = added.reduce((s, n) => s + statSync(join(objectsDir, 'pack', n)).size, 0);
  const idxBytes = added.reduce((s, n) => s + statSync(join(objectsDir, 'pack', n.replace(/\.pack$/, '.idx'))).size, 0);
  const uniqFresh = new Map(p.fresh.map((c) => [c.oid, c]));
  return {
    file,
    size: cf.size,
    params: cf.params,
    chunks: cf.chunks,
    segments: p.segments,
    list: p.list,
    pointer: p.pointer,
    pointerOid: p.pointerOid,
    chunksTreeOid: p.chunksTreeOid,
    newChunks: uniqFresh.size,
    newChunkBytes: [...uniqFresh.values()].reduce((s, c) => s + c.size, 0),
    listBytes: p.list.data.length + p.segments.reduce((s, x) => s + x.data.length, 0),
    newListBytes: p.list.data.length + p.newSegments.reduce((s, x) => s + x.data.length, 0),
    objects: p.r.objects,
    packBytes,
    idxBytes,
    chunkSeconds: chunk.seconds,
    chunkCpuSeconds: chunk.cpuSeconds,
    packSeconds: pack.seconds,
    packCpuSeconds: pack.cpuSeconds,
    seconds: chunk.seconds + pack.seconds,
    cpuSeconds: chunk.cpuSeconds + pack.cpuSeconds,
  };
}

const summaryOf = (c) => {
  const { chunks, segments, list, pointer, file, ...rest } = c;
  void chunks;
  void segments;
  void list;
  void file;
  return { ...rest, pointerList: pointer.list, chunkCount: c.chunks.length };
};

/** A commit in `gitDir` whose tree is files/<name> → the pointer and chunks/<list> → the list. */
async function commitPointer(gitDir, name, cap) {
  const mk = async (input) => (await git(gitDir, ['mktree'], { input })).stdout.trim();
  const files = await mk(`100644 blob ${cap.pointerOid}\t${name}\n`);
  const top = await mk(`040000 tree ${files}\tfiles\n040000 tree ${cap.chunksTreeOid}\tchunks\n`);
  const commit = (await git(gitDir, ['commit-tree', top, '-m', `bench ${name}`])).stdout.trim();
  await git(gitDir, ['update-ref', 'refs/heads/main', commit]);
  return commit;
}

const inPack = async (gitDir) => {
  const out = (await git(gitDir, ['count-objects', '-v'])).stdout;
  const n = (k) => Number(new RegExp(`^${k}: (\\d+)`, 'm').exec(out)?.[1] ?? 0);
  return { objects: n('count') + n('in-pack'), kib: n('size') + n('size-pack') };
};

/** The sum over a process tree of VmRSS (bytes), from /proc. */
function treeRss(pid) {
  let sum = 0;
  const stack = [pid];
  while (stack.length) {
    const p = stack.pop();
    try {
      const s = readFileSync(`/proc/${p}/status`, 'utf8');
      sum += Number(/^VmRSS:\s+(\d+) kB/m.exec(s)?.[1] ?? 0) * 1024;
      for (const t of readdirSync(`/proc/${p}/task`)) {
        const c = readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim();
        if (c) stack.push(...c.split(/\s+/).map(Number));
      }
    } catch {
      /* gone */
    }
  }
  return sum;
}

/** Run a command, sampling its process tree's RSS every 10 ms: { ...result, peakTreeRss }. */
async function runSampled(cmd, args, opts) {
  let peak = 0;
  let timer = null;
  const res = await run(cmd, args, {
    ...opts,
    onSpawn: (child) => {
      timer = setInterval(() => (peak = Math.max(peak, treeRss(child.pid))), 10);
    },
  });
  clearInterval(timer);
  return { ...res, peakTreeRss: peak };
}

// The child of the engine's range-RSS measurement: open the list, note the RSS (node + its git
// children), read the range to /dev/null, report the peak. Run as `node -e`.
const RANGE_CHILD = `
const [dist, cwd, ptr, start, len] = process.argv.slice(1);
const { ChunkList, readRange } = require(dist + '/chunks/reader.js');
const { parsePointer } = require(dist + '/chunks/pointer.js');
const fs = require('fs');
const tree = () => { let s = 0; const st = [process.pid]; while (st.length) { const p = st.pop(); try {
  s += Number(/^VmRSS:\\s+(\\d+) kB/m.exec(fs.readFileSync('/proc/' + p + '/status', 'utf8'))[1]) * 1024;
  for (const t of fs.readdirSync('/proc/' + p + '/task')) { const c = fs.readFileSync('/proc/' + p + '/task/' + t + '/children', 'utf8').trim(); if (c) st.push(...c.split(/\\s+/).map(Number)); } } catch {} } return s; };
(async () => {
  const ctx = { git: { cwd }, format: 'sha1' };
  const list = await ChunkList.fromPointer(parsePointer(Buffer.from(ptr, 'base64'), 'sha1', 'f'), 'f', ctx);
  await list.chunksFor(0, list.size); // every segment read: the list is part of the baseline
  global.gc?.();
  const base = tree();
  let peak = base;
  const timer = setInterval(() => { peak = Math.max(peak, tree()); }, 5);
  const out = fs.createWriteStream('/dev/null');
  const t0 = Date.now();
  const n = await readRange(list, Number(start), Number(start) + Number(len), out, ctx);
  clearInterval(timer);
  peak = Math.max(peak, tree());
  process.stdout.write(JSON.stringify({ base, peak, bytes: n, seconds: (Date.now() - t0) / 1000 }));
})().catch((e) => { console.error(e); process.exit(1); });
`;

// ---------------------------------------------------------------------------
// The chunk-size study: cuts at any parameters (the engine's chunkFile picks them by size)
// ---------------------------------------------------------------------------

/** Chunks of a file at given parameters: [{offset, size, oid}], one sequential read. */
function cutFile(E, path, params) {
  const fd = openSync(path, 'r');
  try {
    const chunker = new E.GearChunker(params);
    const out = [];
    const buf = Buffer.allocUnsafe(16 * MB);
    const carry = [];
    let offset = 0;
    let pos = 0;
    const cuts = [];
    const name = (parts, len) => {
      const h = createHash('sha1').update(`blob ${len}\0`);
      for (const p of parts) h.update(p);
      return h.digest('hex');
    };
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (!n) break;
      pos += n;
      const b = buf.subarray(0, n);
      cuts.length = 0;
      chunker.push(b, cuts);
      let s = 0;
      for (const e of cuts) {
        const parts = [...carry, b.subarray(s, e)];
        const len = parts.reduce((a, p) => a + p.length, 0);
        out.push({ offset, size: len, oid: name(parts, len) });
        offset += len;
        carry.length = 0;
        s = e;
      }
      if (s < n) carry.push(Buffer.from(b.subarray(s)));
    }
    if (carry.length) {
      const len = carry.reduce((a, p) => a + p.length, 0);
      out.push({ offset, size: len, oid: name(carry, len) });
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

/** Bytes the chunks of `b` not in `a` take: raw, deflated at level 1 (as the pack stores them). */
function newBytes(E, file, a, b) {
  const have = new Set(a.map((c) => c.oid));
  const fresh = [...new Map(b.filter((c) => !have.has(c.oid)).map((c) => [c.oid, c])).values()];
  const fd = openSync(file, 'r');
  let raw = 0;
  let deflated = 0;
  try {
    for (const c of fresh) {
      const buf = Buffer.allocUnsafe(c.size);
      readSync(fd, buf, 0, c.size, c.offset);
      raw += c.size;
      deflated += deflateSync(buf, { level: 1 }).length;
    }
  } finally {
    closeSync(fd);
  }
  const la = E.buildChunkList(a, 'sha1');
  const lb = E.buildChunkList(b, 'sha1');
  const segs = new Set(la.segments.map((s) => s.oid));
  const listNew =
    lb.list.data.length + lb.segments.filter((s) => !segs.has(s.oid)).reduce((s, x) => s + x.data.length, 0);
  return {
    chunks: b.length,
    newChunks: fresh.length,
    raw,
    deflated,
    listNew,
    listAll: lb.list.data.length + lb.segments.reduce((s, x) => s + x.data.length, 0),
  };
}

// ---------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const { dir: runDir } = openRunDir(opts.tmpBase, 'xet-bench-chunks-', { keep: opts.keep });
  const results = {
    startedAt: new Date().toISOString(),
    machine: null,
    cli: null,
    config: { reps: opts.reps, goals: GOALS, dbMiB: opts.dbMiB, binMiB: opts.binMiB },
    workload: null,
    baseline: {},
    engine: {},
    cliRuns: {},
    study: {},
    summary: null,
    load: [],
  };
  const { fail, warn, problem } = recorder(results);
  const noteLoad = loadNoter(results);
  let cli = join(ROOT, 'bin', 'git-xet');
  const xet = xetRunner(() => cli, opts, { cpu: true });
  const B = results.baseline;
  const EN = results.engine;
  const C = results.cliRuns;

  try {
    noteLoad('start');
    cli = await setUpCli(opts, runDir, results);
    const E = engineModules(cli);
    const wl = await ensureLargeFiles(opts, { dbMiB: opts.dbMiB, binMiB: opts.binMiB });
    results.workload = wl;
    const db = wl.db.path;
    const bin = wl.bin.path;
    log(`workload: ${fmtMB(wl.db.bytes)} SQLite (${wl.db.rows} events), ${fmtMB(wl.bin.bytes)} binary`);
    // The edited versions, in the run dir.
    const db2 = join(runDir, 'events-edited.db');
    copyFileSync(db, db2);
    const edit = rewritePages(db2, { fraction: 0.01, seed: 1 });
    results.workload.edit = edit;
    const bin2 = join(runDir, 'blob-inserted.bin');
    copyWithInsert(bin, bin2, { n: 100, at: 0, seed: 2 });
    log(
      `edit: ${edit.pages} of ${edit.ofPages} pages rewritten (${fmtMB(edit.bytes)}); binary: 100 bytes inserted at 0`,
    );
    noteLoad('workload');

    // ---- baselines: zstd -1 -T0 of the database, git add + commit of both versions -------------
    try {
      await run('cat', [db], { stdio: 'ignore' }); // warm the page cache for both sides
      B.zstd = [];
      B.zstdCpu = [];
      for (let rep = 1; rep <= opts.reps; rep++) {
        await settle();
        const r = await runCpu('bash', ['-c', `zstd -1 -T0 -q -c ${quote(db)} > /dev/null`]);
        B.zstd.push(r.seconds);
        if (r.cpuSeconds != null) B.zstdCpu.push(r.cpuSeconds);
      }
      B.zstdBytes = Number((await sh(`zstd -1 -T0 -q -c ${quote(db)} | wc -c`)).stdout.trim());
      log(`zstd -1 -T0: ${fmtS(med(B.zstd))} s (${fmtMB(B.zstdBytes)})`);
    } catch (e) {
      fail('baseline zstd', e);
    }
    noteLoad('zstd');
    try {
      // Sizes only (the bytes are seeded and git's zlib is deterministic), so they are cached with
      // the workload, keyed by git's version: git add of 1 GiB at zlib's default level takes minutes.
      const gv = (await run('git', ['--version'])).stdout.trim();
      const cache = join(wl.dir, `git-alone-${gv.replace(/[^\w.]+/g, '_')}.json`);
      B.git = existsSync(cache) && !opts.regit ? { ...JSON.parse(readFileSync(cache, 'utf8')), cached: cache } : {};
      for (const [name, v1, v2, path] of [
        ['sqlite', db, db2, 'events.db'],
        ['binary', bin, bin2, 'blob.bin'],
      ]) {
        if (B.git[name]) continue;
        const repo = join(runDir, `git-alone-${name}`);
        await git(runDir, ['init', '-q', repo]);
        copyFileSync(v1, join(repo, path));
        const t1 = await git(repo, ['add', path]);
        await git(repo, ['commit', '-q', '-m', 'v1']);
        const o1 = objectsBytes(join(repo, '.git'));
        copyFileSync(v2, join(repo, path));
        const t2 = await git(repo, ['add', path]);
        await git(repo, ['commit', '-q', '-m', 'v2']);
        const o2 = objectsBytes(join(repo, '.git'));
        B.git[name] = { firstBytes: o1, secondAddsBytes: o2 - o1, addSeconds: [t1.seconds, t2.seconds], git: gv };
        log(`git alone (${name}): the second commit adds ${fmtMB(o2 - o1)} (git add ${fmtS(t2.seconds)} s)`);
        await run('rm', ['-rf', repo]);
        writeFileSync(cache, JSON.stringify({ sqlite: B.git.sqlite, binary: B.git.binary }, null, 2) + '\n');
      }
    } catch (e) {
      fail('baseline git', e);
    }
    noteLoad('git alone');

    // ---- engine -------------------------------------------------------------------------------
    if (opts.engine) {
      try {
        // Throughput: the gear loop on a buffer in memory, then chunkFile end to end (warm cache).
        const buf = Buffer.allocUnsafe(256 * MB);
        const fd = openSync(db, 'r');
        readSync(fd, buf, 0, buf.length, 0);
        closeSync(fd);
        EN.gear = [];
        for (let rep = 1; rep <= opts.reps; rep++) {
          const g = new E.GearChunker(E.chunkParamsFor(wl.db.bytes));
          const t = await timed(() => g.push(buf, []));
          EN.gear.push({ seconds: t.seconds, cpuSeconds: t.cpuSeconds, MBps: buf.length / 1e6 / t.cpuSeconds });
        }
        EN.chunkFile = [];
        for (let rep = 1; rep <= opts.reps; rep++) {
          const t = await timed(() => E.chunkFile(db, { format: 'sha1' }));
          EN.chunkFile.push({
            seconds: t.seconds,
            cpuSeconds: t.cpuSeconds,
            MBps: wl.db.bytes / 1e6 / t.seconds,
            MBpsPerCore: wl.db.bytes / 1e6 / t.cpuSeconds,
          });
        }
        log(
          `engine: gear loop ${med(EN.gear.map((x) => x.MBps)).toFixed(0)} MB/s per core; chunkFile ` +
            `${med(EN.chunkFile.map((x) => x.MBps)).toFixed(0)} MB/s wall, ${med(EN.chunkFile.map((x) => x.MBpsPerCore)).toFixed(0)} MB/s per core`,
        );
      } catch (e) {
        fail('engine throughput', e);
      }
      noteLoad('engine throughput');

      let cold = null;
      let coldRepo = null;
      try {
        EN.cold = [];
        for (let rep = 1; rep <= opts.reps; rep++) {
          const repo = join(runDir, `engine-${rep}.git`);
          await git(runDir, ['init', '-q', '--bare', repo]);
          await settle();
          const c = await engineCapture(E, repo, db);
          EN.cold.push(summaryOf(c));
          log(
            `engine cold capture ${rep}: ${fmtS(c.seconds)} s (chunk ${fmtS(c.chunkSeconds)} + pack ${fmtS(c.packSeconds)}), pack ${fmtMB(c.packBytes)}, ${c.objects} objects`,
          );
          if (coldRepo) await run('rm', ['-rf', coldRepo]);
          cold = c;
          coldRepo = repo;
        }
        const re = [];
        for (let rep = 1; rep <= opts.reps; rep++) {
          // Each re-capture into a fresh copy of the cold repository (hard links: cp -al is instant).
          const repo = join(runDir, `engine-re-${rep}.git`);
          await run('cp', ['-al', coldRepo, repo]);
          await settle();
          const r = await engineCapture(E, repo, db2, cold);
          re.push(summaryOf(r));
          log(
            `engine re-capture ${rep}: ${fmtS(r.seconds)} s, ${r.newChunks} new chunks (${fmtMB(r.newChunkBytes)}), pack ${fmtMB(r.packBytes)}`,
          );
          await run('rm', ['-rf', repo]);
        }
        EN.recapture = re;
      } catch (e) {
        fail('engine capture', e);
      }
      noteLoad('engine capture');

      try {
        const repo = join(runDir, 'engine-bin.git');
        await git(runDir, ['init', '-q', '--bare', repo]);
        const a = await engineCapture(E, repo, bin);
        const b = await engineCapture(E, repo, bin2, a);
        // What changed, by position: the chunks of b before its first chunk shared with a.
        const have = new Set(a.chunks.map((c) => c.oid));
        EN.insert = {
          chunksBefore: a.chunks.length,
          chunksAfter: b.chunks.length,
          newChunks: b.newChunks,
          newChunkBytes: b.newChunkBytes,
          newChunkOffsets: b.chunks.filter((c) => !have.has(c.oid)).map((c) => c.offset),
          newListBytes: b.newListBytes,
          objects: b.objects,
          trees: b.objects - b.newChunks - 1, // segments + list + chunks/ tree; the 1 is the pointer blob
          packBytes: b.packBytes,
        };
        log(
          `engine insertion: ${b.newChunks} new chunks (${b.newChunkBytes} bytes) + ${EN.insert.trees} trees (${b.newListBytes} list bytes)`,
        );
        await run('rm', ['-rf', repo]);
      } catch (e) {
        fail('engine insertion', e);
      }
      noteLoad('engine insertion');

      if (cold) {
        const ctx = { git: { cwd: coldRepo }, format: 'sha1' };
        try {
          // 4 KiB range reads at random offsets: chunks each touches, and the time of one.
          const list = await E.ChunkList.fromPointer(cold.pointer, 'events.db', ctx);
          const r = rng(4);
          const counts = [];
          const secs = [];
          const { Writable } = await import('node:stream');
          for (let i = 0; i < RANGE_READS; i++) {
            const s = r.int(cold.size - 4096);
            counts.push((await list.chunksFor(s, s + 4096)).length);
            if (i < 20) {
              const sink = new Writable({ write: (_c, _e, cb) => cb() });
              const t = await timed(() => E.readRange(list, s, s + 4096, sink, ctx));
              secs.push(t.seconds);
            }
          }
          const hist = {};
          for (const n of counts) hist[n] = (hist[n] ?? 0) + 1;
          EN.range4k = {
            reads: RANGE_READS,
            chunksMax: Math.max(...counts),
            chunksMean: counts.reduce((a, b) => a + b, 0) / counts.length,
            histogram: hist,
            seconds: secs,
          };
          log(
            `engine 4 KiB reads: ${EN.range4k.chunksMean.toFixed(2)} chunks on average, at most ${EN.range4k.chunksMax} (${JSON.stringify(hist)})`,
          );
        } catch (e) {
          fail('engine range reads', e);
        }
        try {
          // A 100 MiB range read in a child: RSS of node + git above its baseline (list open).
          const ptr = E.serializePointer(cold.pointer).toString('base64');
          const args = [
            '--expose-gc',
            '-e',
            RANGE_CHILD,
            E.dist,
            coldRepo,
            ptr,
            String(Math.floor(cold.size / 3)),
            String(100 * MB),
          ];
          const r = await run(process.execPath, args);
          const j = JSON.parse(r.stdout);
          EN.range100m = { ...j, aboveBaseline: j.peak - j.base };
          log(
            `engine 100 MiB range read: ${fmtS(j.seconds)} s, RSS ${fmtMB(j.base)} -> peak ${fmtMB(j.peak)} (+${fmtMB(j.peak - j.base)})`,
          );
        } catch (e) {
          fail('engine 100 MiB range read', e);
        }
        try {
          // Lazy: a partial clone (blob:none) of a bare repository that holds the chunked file;
          // each 4 KiB read fetches the chunks it lacks from the server (git's lazy fetch).
          await commitPointer(coldRepo, 'events.db', cold);
          await git(coldRepo, ['config', 'uploadpack.allowFilter', 'true']);
          await git(coldRepo, ['config', 'uploadpack.allowAnySHA1InWant', 'true']);
          const lazy = join(runDir, 'lazy.git');
          const clone = await git(runDir, ['clone', '-q', '--bare', '--filter=blob:none', `file://${coldRepo}`, lazy]);
          const after = await inPack(lazy);
          const lctx = { git: { cwd: lazy }, format: 'sha1' };
          const list = await E.ChunkList.fromPointer(cold.pointer, 'events.db', lctx);
          const r = rng(5);
          const reads = [];
          const { Writable } = await import('node:stream');
          for (let i = 0; i < LAZY_READS; i++) {
            const s = r.int(cold.size - 4096);
            const before = await inPack(lazy);
            const sink = new Writable({ write: (_c, _e, cb) => cb() });
            const t = await timed(() => E.readRange(list, s, s + 4096, sink, lctx));
            const got = await inPack(lazy);
            reads.push({
              offset: s,
              chunks: (await list.chunksFor(s, s + 4096)).length,
              objectsFetched: got.objects - before.objects,
              kibFetched: got.kib - before.kib,
              seconds: t.seconds,
            });
          }
          EN.lazy = { cloneSeconds: clone.seconds, cloneObjects: after.objects, cloneKiB: after.kib, reads };
          log(
            `engine lazy: clone ${after.objects} objects (${after.kib} KiB); 4 KiB reads fetched ${reads.map((x) => x.objectsFetched).join(', ')} objects`,
          );
          await run('rm', ['-rf', lazy]);
        } catch (e) {
          fail('engine lazy read', e);
        }
        noteLoad('engine reads');
      }
      if (coldRepo) await run('rm', ['-rf', coldRepo]);
    }

    // ---- the chunk-size and threshold study (docs/DESIGN-NOTES.md) ------------------------------
    if (opts.study) {
      try {
        const S = (results.study.averages = []);
        for (const kib of AVERAGES_KIB) {
          const params = { min: (kib * 1024) / 4, avg: kib * 1024, max: kib * 1024 * 8 };
          const a = cutFile(E, db, params);
          const b = cutFile(E, db2, params);
          const n = newBytes(E, db2, a, b);
          S.push({ avgKiB: kib, ...n, ofFile: (n.deflated + n.listNew) / wl.db.bytes, rawOfFile: n.raw / wl.db.bytes });
          log(
            `study ${kib} KiB: ${n.newChunks}/${n.chunks} chunks new, ${fmtMB(n.raw)} raw, ${fmtMB(n.deflated)} deflated + ${fmtMB(n.listNew)} list = ${pct((n.deflated + n.listNew) / wl.db.bytes)}`,
          );
        }
      } catch (e) {
        fail('study: averages', e);
      }
      noteLoad('study averages');
      try {
        const T = (results.study.small = []);
        for (const mib of SMALL_MIB) {
          const f1 = join(runDir, `small-${mib}.bin`);
          const f2 = join(runDir, `small-${mib}-edited.bin`);
          const fd = openSync(db, 'r');
          const buf = Buffer.allocUnsafe(mib * MB);
          const got = readSync(fd, buf, 0, buf.length, Math.max(0, Math.min(64 * MB, wl.db.bytes - buf.length))); // pages from inside the database
          closeSync(fd);
          if (got !== buf.length) throw new BenchError(`the database is smaller than ${mib} MiB`);
          writeFileSync(f1, buf);
          writeFileSync(f2, buf);
          const ed = rewritePages(f2, { fraction: 0.01, seed: 7 + mib });
          const whole = [];
          const chunked = [];
          let wholeRes = null;
          let chunkRes = null;
          let reWhole = null;
          let reChunk = null;
          for (let rep = 1; rep <= Math.max(opts.reps, 5); rep++) {
            const rw = join(runDir, `small-w-${rep}.git`);
            const rc = join(runDir, `small-c-${rep}.git`);
            await git(runDir, ['init', '-q', '--bare', rw]);
            await git(runDir, ['init', '-q', '--bare', rc]);
            const t = await timed(() =>
              E.writePack(join(rw, 'objects'), 'sha1', [{ oid: blobId(buf), type: 'blob', file: f1 }]),
            );
            whole.push(t.seconds);
            const c = await engineCapture(E, rc, f1);
            chunked.push(c.seconds);
            if (rep === 1) {
              wholeRes = {
                objects: t.value.objects,
                packBytes: packsIn(rw).reduce((s, n) => s + statSync(join(rw, 'objects', 'pack', n)).size, 0),
              };
              chunkRes = {
                objects: c.objects,
                packBytes: c.packBytes,
                listBytes: c.listBytes,
                chunks: c.chunks.length,
              };
              const b2 = readFileSync(f2);
              const before = packsIn(rw);
              await E.writePack(join(rw, 'objects'), 'sha1', [{ oid: blobId(b2), type: 'blob', file: f2 }]);
              reWhole = packsIn(rw)
                .filter((n) => !before.includes(n))
                .reduce((s, n) => s + statSync(join(rw, 'objects', 'pack', n)).size, 0);
              reChunk = (await engineCapture(E, rc, f2, c)).packBytes;
            }
            await run('rm', ['-rf', rw, rc]);
          }
          T.push({
            mib,
            pagesRewritten: ed.pages,
            whole: { ...wholeRes, seconds: whole, editAddsBytes: reWhole },
            chunked: { ...chunkRes, seconds: chunked, editAddsBytes: reChunk },
            timeRatio: med(chunked) / med(whole),
          });
          log(
            `study ${mib} MiB: whole ${fmtS(med(whole))} s, chunked ${fmtS(med(chunked))} s (${chunkRes.objects} objects, list ${chunkRes.listBytes} B); 1% edit adds ${fmtMB(reWhole)} whole vs ${fmtMB(reChunk)} chunked`,
          );
        }
      } catch (e) {
        fail('study: small files', e);
      }
      noteLoad('study small files');
    }

    // ---- CLI ----------------------------------------------------------------------------------
    if (opts.cli) {
      try {
        await cliLayer({ opts, runDir, wl, db, bin, bin2, xet, C, warn, problem, cliPath: () => cli });
      } catch (e) {
        fail('cli', e);
      }
      noteLoad('cli');
    }
  } catch (e) {
    fail('harness', e);
  } finally {
    results.finishedAt = new Date().toISOString();
    results.summary = summarize(results);
    printTable(results);
    await writeResults(opts, results);
  }
}

// ---------------------------------------------------------------------------
// CLI layer: the same goals through git xet
// ---------------------------------------------------------------------------

async function help(xet, dir, args) {
  try {
    const r = await xet(dir, [...args, '--help']);
    return r.stdout;
  } catch {
    return '';
  }
}

/** A repository with one tracked README and the large file untracked (capture chunks it). */
async function makeRepo(dir, file, name) {
  await git(dirname(dir), ['init', '-q', dir]);
  writeFileSync(join(dir, 'README.md'), '# bench\n');
  await git(dir, ['add', 'README.md']);
  await git(dir, ['commit', '-q', '-m', 'init']);
  copyFileSync(file, join(dir, name));
}

async function cliLayer({ opts, runDir, wl, db, bin, bin2, xet, C, warn, problem, cliPath }) {
  const top = await help(xet, runDir, []);
  const has = {
    cat: /^\s+cat\b/m.test(top),
    archive: /^\s+archive\b/m.test(top),
    lazy: /--lazy/.test(await help(xet, runDir, ['restore'])),
  };
  C.has = has;
  const show = async (dir, snap) => (await xet(dir, ['show', snap, '--json'])).json;
  const chunked = (m) =>
    (m?.manifest?.chunked ?? m?.chunked ?? []).length > 0 ||
    (m?.counts?.chunkedFiles ?? m?.manifest?.counts?.chunkedFiles ?? 0) > 0;

  // ---- cold capture of the database vs zstd; re-capture after the 1% edit ----------------------
  const cold = [];
  const re = [];
  let keep = null;
  for (let rep = 1; rep <= opts.reps; rep++) {
    const repo = join(runDir, `cli-sqlite-${rep}`);
    await makeRepo(repo, db, 'events.db');
    await settle();
    const before = objectsBytes(join(repo, '.git'));
    const c = await xet(repo, ['capture', '-m', 'cold', '--json']);
    const mid = objectsBytes(join(repo, '.git'));
    const snap1 = c.json.snapshot;
    rewritePages(join(repo, 'events.db'), { fraction: 0.01, seed: 1 });
    await settle();
    const r = await xet(repo, ['capture', '-m', 'edit', '--json']);
    const after = objectsBytes(join(repo, '.git'));
    cold.push({ seconds: c.seconds, cpuSeconds: c.cpuSeconds, addsBytes: mid - before });
    re.push({ seconds: r.seconds, cpuSeconds: r.cpuSeconds, addsBytes: after - mid });
    log(
      `cli capture ${rep}: cold ${fmtS(c.seconds)} s (+${fmtMB(mid - before)}), re-capture ${fmtS(r.seconds)} s (+${fmtMB(after - mid)})`,
    );
    if (rep === 1) {
      const m = await show(repo, r.json.snapshot);
      C.chunkedCapture = chunked(m);
      C.showJson = m;
      if (!C.chunkedCapture)
        warn(
          'git xet capture did not chunk the 1 GiB file (the CLI predates issue 13): the CLI rows measure whole-blob captures',
        );
    }
    if (rep === opts.reps) keep = { repo, snap1, snap2: r.json.snapshot };
    else await run('rm', ['-rf', repo]);
  }
  C.cold = cold;
  C.recapture = re;
  // An unchanged re-capture (the stat cache: nothing read).
  const u = await xet(keep.repo, ['capture', '-m', 'unchanged', '--json']);
  C.unchanged = { seconds: u.seconds, json: u.json };

  // ---- insertion at the start of the binary ----------------------------------------------------
  {
    const repo = join(runDir, 'cli-binary');
    await makeRepo(repo, bin, 'blob.bin');
    const s1 = (await xet(repo, ['capture', '-m', 'v1', '--json'])).json.snapshot;
    const before = packsIn(join(repo, '.git'));
    const tmp = join(repo, '.blob.bin.tmp');
    copyFileSync(bin2, tmp);
    renameSync(tmp, join(repo, 'blob.bin'));
    const s2 = (await xet(repo, ['capture', '-m', 'v2', '--json'])).json.snapshot;
    const added = packsIn(join(repo, '.git')).filter((n) => !before.includes(n));
    const oids = [];
    for (const p of added) {
      const idx = join(repo, '.git', 'objects', 'pack', p.replace(/\.pack$/, '.idx'));
      const out = (await sh(`git show-index < ${quote(idx)}`)).stdout.trim().split('\n');
      oids.push(...out.map((l) => l.split(' ')[1]).filter(Boolean));
    }
    const types = (await git(repo, ['cat-file', '--batch-check'], { input: oids.map((o) => `${o}\n`).join('') })).stdout
      .trim()
      .split('\n');
    const count = {};
    for (const t of types) count[t.split(' ')[1]] = (count[t.split(' ')[1]] ?? 0) + 1;
    C.insert = {
      snapshots: [s1, s2],
      newPacks: added.length,
      objects: oids.length,
      byType: count,
      packBytes: added.reduce((s, n) => s + statSync(join(repo, '.git', 'objects', 'pack', n)).size, 0),
    };
    log(`cli insertion: new pack(s) hold ${JSON.stringify(count)}`);
    await run('rm', ['-rf', repo]);
  }

  // ---- range reads through cat --------------------------------------------------------------------
  if (has.cat) {
    const spec = `${keep.snap2}:events.db`;
    const r = rng(6);
    const reads = [];
    for (let i = 0; i < 5; i++) {
      const s = r.int(wl.db.bytes - 4096);
      const out = join(runDir, 'range.out');
      const t = await xet(keep.repo, ['cat', spec, '--range', `${s}+4096`, '-o', out, '--json']);
      reads.push({ offset: s, seconds: t.seconds, bytes: statSync(out).size, chunksRead: t.json?.chunksRead ?? null });
    }
    C.cat4k = reads;
    // To stdout, redirected by a shell that then execs node (never `-o /dev/null`: -o renames a
    // temporary over its target). The sampled tree is node and its git processes.
    const catTo = (range) =>
      runSampled(
        'bash',
        ['-c', `exec ${[process.execPath, cliPath(), 'cat', spec, '--range', range].map(quote).join(' ')} > /dev/null`],
        {
          cwd: keep.repo,
        },
      );
    const base = await catTo('0+4096');
    const big = await catTo(`${Math.floor(wl.db.bytes / 3)}+${100 * MB}`);
    C.cat100m = {
      baselinePeak: base.peakTreeRss,
      peak: big.peakTreeRss,
      aboveBaseline: big.peakTreeRss - base.peakTreeRss,
      seconds: big.seconds,
    };
    log(`cli cat 100 MiB: peak ${fmtMB(big.peakTreeRss)} vs 4 KiB read ${fmtMB(base.peakTreeRss)}`);
  } else warn('git xet has no cat command yet: the CLI range rows are not run');

  // ---- lazy restore from a plain bare repository (a Git server) ---------------------------------
  if (has.lazy && has.cat) {
    const server = join(runDir, 'server.git');
    await git(runDir, ['init', '-q', '--bare', server]);
    await git(server, ['config', 'uploadpack.allowFilter', 'true']);
    await git(server, ['config', 'uploadpack.allowAnySHA1InWant', 'true']);
    await xet(keep.repo, ['push', server, keep.snap2]);
    const dest = join(runDir, 'lazy-restore');
    const rs = await xet(runDir, ['restore', keep.snap2, dest, '--from', `file://${server}`, '--lazy', '--json']);
    const o0 = await inPack(join(dest, '.git'));
    const r = rng(7);
    const reads = [];
    for (let i = 0; i < LAZY_READS; i++) {
      const s = r.int(wl.db.bytes - 4096);
      const b = await inPack(join(dest, '.git'));
      const t = await xet(dest, [
        'cat',
        `${keep.snap2}:events.db`,
        '--range',
        `${s}+4096`,
        '-o',
        join(runDir, 'lazy.out'),
        '--json',
      ]);
      const a = await inPack(join(dest, '.git'));
      reads.push({
        offset: s,
        seconds: t.seconds,
        objectsFetched: a.objects - b.objects,
        kibFetched: a.kib - b.kib,
        chunksRead: t.json?.chunksRead ?? null,
        chunksFetched: t.json?.chunksFetched ?? null,
      });
    }
    C.lazy = {
      restoreSeconds: rs.seconds,
      restoreObjects: o0.objects,
      restoreKiB: o0.kib,
      lazy: rs.json?.lazy ?? null,
      reads,
    };
    log(
      `cli lazy: restore holds ${o0.objects} objects; 4 KiB reads fetched ${reads.map((x) => x.objectsFetched).join(', ')}`,
    );
  } else warn('git xet restore has no --lazy (or no cat) yet: the CLI lazy row is not run');

  // ---- archive vs tar -c ---------------------------------------------------------------------
  if (has.archive) {
    const out = join(runDir, 'out.tar');
    C.archive = [];
    C.tar = [];
    for (let rep = 1; rep <= opts.reps; rep++) {
      await settle();
      const a = await xet(keep.repo, ['archive', keep.snap2, '-o', out]);
      C.archive.push(a.seconds);
      C.archiveBytes = statSync(out).size;
      await run('rm', ['-f', out]);
      await settle();
      const t = await run('tar', ['-C', keep.repo, '--exclude=./.git', '-cf', out, '.']);
      C.tar.push(t.seconds);
      C.tarBytes = statSync(out).size;
      await run('rm', ['-f', out]);
    }
    log(`cli archive ${fmtS(med(C.archive))} s vs tar -c ${fmtS(med(C.tar))} s`);
  }
  await run('rm', ['-rf', keep.repo]);
  void problem;
}

// ---------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------

function summarize(results) {
  const { engine: EN, baseline: B, cliRuns: C, workload: W, config } = results;
  const G = config.goals;
  const rows = [];
  const size = W?.db?.bytes;
  const row = (layer, label, value, goal, pass, note = '') =>
    rows.push({
      layer,
      label,
      value,
      goal,
      status: value == null ? 'not run' : pass == null ? 'info' : pass ? 'PASS' : 'FAIL',
      note,
    });
  const gitSecond = B.git?.sqlite?.secondAddsBytes;
  const zstd = med(B.zstd);

  // The second snapshot's bytes.
  const eRe = EN.recapture?.[0];
  if (eRe) {
    const f = eRe.packBytes / size;
    row(
      'engine',
      '1% page edit: 2nd snapshot adds (pack) / file size',
      pct(f),
      `≤ ${pct(G.editAddsOfFile)}`,
      f <= G.editAddsOfFile,
      `${fmtMB(eRe.packBytes)}: ${eRe.newChunks} chunks (${fmtMB(eRe.newChunkBytes)} raw), list ${fmtMB(eRe.newListBytes)}`,
    );
    if (gitSecond)
      row(
        'engine',
        '  the same / git add + commit of the edited file',
        pct(eRe.packBytes / gitSecond),
        '(git alone 100%)',
        null,
        `git adds ${fmtMB(gitSecond)}`,
      );
  } else row('engine', '1% page edit: 2nd snapshot adds / file size', null, `≤ ${pct(G.editAddsOfFile)}`);
  const cRe = C.recapture?.[0];
  if (cRe) {
    const f = cRe.addsBytes / size;
    row(
      'cli',
      '1% page edit: 2nd capture adds (.git/objects) / file size',
      pct(f),
      `≤ ${pct(G.editAddsOfFile)}`,
      f <= G.editAddsOfFile,
      C.chunkedCapture ? '' : 'NOT CHUNKED (CLI before issue 13)',
    );
    if (gitSecond)
      row('cli', '  the same / git add + commit', pct(cRe.addsBytes / gitSecond), '(git alone 100%)', null);
  } else row('cli', '1% page edit: 2nd capture adds / file size', null, `≤ ${pct(G.editAddsOfFile)}`);

  // Insertion.
  if (EN.insert) {
    row(
      'engine',
      '100 B inserted at 0 of 256 MiB: chunks added',
      EN.insert.newChunks,
      `≤ ${G.insertChunks} + list`,
      EN.insert.newChunks <= G.insertChunks,
      `${EN.insert.newChunkBytes} B; + ${EN.insert.trees} trees (${EN.insert.newListBytes} B list); git alone adds ${fmtMB(B.git?.binary?.secondAddsBytes)}`,
    );
  } else row('engine', '100 B inserted: chunks added', null, `≤ ${G.insertChunks} + list`);
  if (C.insert) {
    const blobs = C.insert.byType.blob ?? 0;
    row(
      'cli',
      '100 B inserted: blobs in the new pack (chunks + pointer + manifest…)',
      blobs,
      `≤ ${G.insertChunks} chunks + list`,
      null,
      JSON.stringify(C.insert.byType),
    );
  }

  // Throughput.
  if (EN.chunkFile) {
    const pc = med(EN.chunkFile.map((x) => x.MBpsPerCore));
    row(
      'engine',
      'chunkFile throughput, MB/s per core (CPU time)',
      pc.toFixed(0),
      `≥ ${G.chunkMBpsPerCore}`,
      pc >= G.chunkMBpsPerCore,
      `wall ${med(EN.chunkFile.map((x) => x.MBps)).toFixed(0)} MB/s; gear loop alone ${med(EN.gear.map((x) => x.MBps)).toFixed(0)} MB/s per core`,
    );
  }
  // Cold capture vs zstd; re-capture vs cold.
  if (EN.cold && zstd) {
    const x = med(EN.cold.map((c) => c.seconds));
    row(
      'engine',
      'cold capture / zstd -1 -T0 (wall)',
      fmtX(x / zstd),
      `≤ ${G.coldVsZstd}x`,
      x / zstd <= G.coldVsZstd,
      `${fmtS(x)} s vs ${fmtS(zstd)} s`,
    );
    const zc = med(B.zstdCpu);
    const xc = med(EN.cold.map((c) => c.cpuSeconds));
    if (zc) {
      row(
        'engine',
        '  the same in CPU time (user + sys, all threads)',
        fmtX(xc / zc),
        '(load-proof)',
        null,
        `${fmtS(xc)} s vs ${fmtS(zc)} s`,
      );
    }
    if (EN.recapture) {
      const y = med(EN.recapture.map((c) => c.seconds));
      row(
        'engine',
        're-capture after the 1% edit / cold',
        fmtX(y / x),
        `≤ ${G.recaptureVsCold}x`,
        y / x <= G.recaptureVsCold,
        `${fmtS(y)} s`,
      );
    }
  }
  if (C.cold && zstd) {
    const x = med(C.cold.map((c) => c.seconds));
    row(
      'cli',
      'git xet capture (cold) / zstd -1 -T0',
      fmtX(x / zstd),
      `≤ ${G.coldVsZstd}x`,
      x / zstd <= G.coldVsZstd,
      `${fmtS(x)} s vs ${fmtS(zstd)} s`,
    );
    const y = med(C.recapture.map((c) => c.seconds));
    row(
      'cli',
      'git xet capture after the 1% edit / cold',
      fmtX(y / x),
      `≤ ${G.recaptureVsCold}x`,
      y / x <= G.recaptureVsCold,
      `${fmtS(y)} s; unchanged re-capture ${fmtS(C.unchanged?.seconds)} s`,
    );
  }
  // Reads.
  if (EN.lazy) {
    const m = Math.max(...EN.lazy.reads.map((r) => r.objectsFetched));
    row(
      'engine',
      '4 KiB read from a blob:none partial clone: objects fetched (max)',
      m,
      `≤ ${G.rangeChunks}`,
      m <= G.rangeChunks,
      `per read ${EN.lazy.reads.map((r) => r.objectsFetched).join(',')}; ${EN.range4k ? `${RANGE_READS} reads touch ${EN.range4k.chunksMean.toFixed(2)} chunks on average, max ${EN.range4k.chunksMax}` : ''}`,
    );
  }
  if (EN.range4k) {
    const h = EN.range4k.histogram;
    row(
      'engine',
      `4 KiB reads at ${EN.range4k.reads} random offsets: chunks touched (max)`,
      EN.range4k.chunksMax,
      `≤ ${G.rangeChunks}`,
      EN.range4k.chunksMax <= G.rangeChunks,
      `${Object.entries(h)
        .map(([k, v]) => `${v} × ${k}`)
        .join(', ')}; mean ${EN.range4k.chunksMean.toFixed(2)}`,
    );
  }
  if (C.lazy) {
    const m = Math.max(...C.lazy.reads.map((r) => r.objectsFetched));
    row(
      'cli',
      'restore --lazy, cat --range 4 KiB: objects fetched (max)',
      m,
      `≤ ${G.rangeChunks}`,
      C.chunkedCapture ? m <= G.rangeChunks : null,
      `${C.chunkedCapture ? '' : 'NOT CHUNKED (the file came whole with the restore); '}per read ${C.lazy.reads.map((r) => r.objectsFetched).join(',')}`,
    );
  } else row('cli', 'restore --lazy, cat --range 4 KiB: objects fetched', null, `≤ ${G.rangeChunks}`);
  if (EN.range100m) {
    const mib = EN.range100m.aboveBaseline / MB;
    row(
      'engine',
      '100 MiB range read: RSS above baseline (node + git)',
      fmtMB(EN.range100m.aboveBaseline),
      `≤ ${G.rangeRssMiB} MiB`,
      mib <= G.rangeRssMiB,
      `${fmtS(EN.range100m.seconds)} s`,
    );
  }
  if (C.cat100m) {
    const mib = C.cat100m.aboveBaseline / MB;
    row(
      'cli',
      'cat --range 100 MiB: peak tree RSS above a 4 KiB cat',
      fmtMB(C.cat100m.aboveBaseline),
      `≤ ${G.rangeRssMiB} MiB`,
      mib <= G.rangeRssMiB,
      `${C.chunkedCapture ? '' : 'NOT CHUNKED; '}peak ${fmtMB(C.cat100m.peak)}`,
    );
  } else row('cli', 'cat --range 100 MiB: RSS above baseline', null, `≤ ${G.rangeRssMiB} MiB`);
  if (C.archive) {
    const r = med(C.archive) / med(C.tar);
    row(
      'cli',
      'git xet archive / tar -c (same tree)',
      fmtX(r),
      `≤ ${G.archiveVsTar}x`,
      r <= G.archiveVsTar,
      `${fmtS(med(C.archive))} s vs ${fmtS(med(C.tar))} s${C.chunkedCapture ? '' : '; NOT CHUNKED'}`,
    );
  } else row('cli', 'git xet archive / tar -c', null, `≤ ${G.archiveVsTar}x`);
  return { rows };
}

function printTable(results) {
  const out = ['', 'git xet large files (issue 13)'];
  const w = results.workload;
  if (w?.db)
    out.push(
      `workload: SQLite ${fmtMB(w.db.bytes)} (${w.db.rows} events; ${w.edit?.pages ?? '?'} of ${w.db.pages} pages rewritten), binary ${fmtMB(w.bin.bytes)} (+100 B at 0)`,
    );
  const m = results.machine;
  if (m)
    out.push(
      `machine: ${m.nproc} cores, ${fmtMB(m.memBytes)} RAM, ${m.fs}; cli ${results.cli?.commit}${results.cli?.srcDirty ? ' (src dirty)' : ''}`,
    );
  if (results.load?.length) out.push(loadLine(results));
  out.push('');
  out.push(
    ...table(
      ['layer', 'measurement', 'value', 'goal', 'result', 'detail'],
      results.summary.rows.map((r) => [r.layer, r.label, r.value ?? '-', r.goal, r.status, r.note]),
    ),
  );
  const S = results.study;
  if (S.averages?.length) {
    out.push('', 'chunk size study: 1% of 4 KiB pages rewritten, new bytes by average chunk size');
    out.push(
      ...table(
        ['avg', 'chunks', 'new chunks', 'raw new', 'deflated new', 'list new', 'adds / file'],
        S.averages.map((a) => [
          `${a.avgKiB} KiB`,
          a.chunks,
          `${a.newChunks} (${pct(a.newChunks / a.chunks)})`,
          fmtMB(a.raw),
          fmtMB(a.deflated),
          fmtMB(a.listNew),
          pct(a.ofFile),
        ]),
      ),
    );
  }
  if (S.small?.length) {
    out.push('', 'threshold study: one file stored whole vs as chunks (engine: chunkFile + pack writer)');
    out.push(
      ...table(
        ['size', 'whole s', 'chunked s', 'ratio', 'objects', 'list bytes', '1% edit adds: whole', 'chunked'],
        S.small.map((s) => [
          `${s.mib} MiB`,
          fmtS(med(s.whole.seconds)),
          fmtS(med(s.chunked.seconds)),
          fmtX(s.timeRatio),
          `1 vs ${s.chunked.objects}`,
          s.chunked.listBytes,
          fmtMB(s.whole.editAddsBytes),
          fmtMB(s.chunked.editAddsBytes),
        ]),
      ),
    );
  }
  if (!HAVE_GNU_TIME) out.push('', '(no /usr/bin/time: CPU times of child processes are missing)');
  printReport(out, results);
}

start(main);
