#!/usr/bin/env node
// The chunking engine alone (issue 13, "chunking throughput", "cold capture ≤ 2x zstd -1 -T0"):
// each stage of a large file's capture and restore through src/chunks and the pack writer, timed on
// one file and reported as ratios against baselines measured in the same run on the same bytes.
//
//   npm run build && node bench/chunker.mjs [--file PATH] [--mib 256] [--reps 3]
//
// Without --file the workload is a synthetic page file (4 KiB pages: three quarters SQLite-like
// rows of text and numbers, a quarter random bytes, a few runs of zero pages), built in the run dir.
//
//   sha1           one core hashing the bytes once (crypto): the floor of anything that names them
//   cuts           GearChunker alone, one core: the chunker's own throughput (goal ≥ 500 MB/s/core)
//   chunkFile seq  cuts + every chunk's blob id + the whole file's blob id, in one thread
//   chunkFile par  the same on every core (worker regions joined at seams; must equal seq)
//   pack L0 / L1   every chunk packed as a file range (xet.chunk.compression 0 and 1)
//   cold L0 / L1   chunkFile par + pack: vs `zstd -1 -T0 -c FILE > /dev/null` (goal ≤ 2x)
//   read           readRange of the whole file from the L0 pack into a file (restore's path)
//
// Times are wall-clock medians; per-core rates divide the bytes by the process's CPU time. Other
// sessions share the machine: the load average is printed with the results.

import { createHash } from 'node:crypto';
import { createWriteStream, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import {
  MB,
  ROOT,
  fmtMB,
  fmtS,
  fmtX,
  loadNow,
  log,
  median,
  openRunDir,
  parseArgs,
  reportRun,
  run,
  start,
  table,
} from './lib/harness.mjs';

const require = createRequire(import.meta.url);
const dist = (m) => join(ROOT, 'dist', 'src', m);

const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/chunker.mjs',
  results: 'chunker-results.json',
  common: { reps: 3, tmpBase: '/dev/shm', keep: undefined, writeResults: undefined, resultsFile: undefined },
  options: [
    { flag: '--file', key: 'file', arg: 'PATH', help: 'chunk this file instead of the synthetic one', default: null },
    {
      flag: '--mib',
      key: 'mib',
      arg: 'N',
      help: 'size of the synthetic file (default 256)',
      default: 256,
      parse: Number,
    },
  ],
});

/** The synthetic page file, written in 4 MiB pieces (never whole in memory). */
function buildWorkload(file, bytes) {
  const page = 4096;
  const piece = Buffer.alloc(4 * MB);
  let seed = 0;
  const rand = (buf) => {
    for (let at = 0; at < buf.length;) at += createHash('sha256').update(`w${seed++}`).digest().copy(buf, at);
  };
  writeFileSync(file, '');
  const fd = require('node:fs').openSync(file, 'w');
  for (let written = 0, p = 0; written < bytes; written += piece.length) {
    for (let off = 0; off < piece.length; off += page, p++) {
      const pg = piece.subarray(off, off + page);
      if (p % 97 < 3) pg.fill(0);
      else if (p % 4 === 3) rand(pg);
      else {
        let s = '';
        for (let r = 0; s.length < page; r++)
          s += `${p * 50 + r}|user${(p * 7 + r) % 1000}|${(r * 0.37).toFixed(2)}|note ${seed++ % 9973};`;
        pg.write(s.slice(0, page), 'latin1');
      }
    }
    require('node:fs').writeSync(fd, piece, 0, Math.min(piece.length, bytes - written));
  }
  require('node:fs').closeSync(fd);
}

async function timed(reps, fn) {
  const walls = [];
  const cpus = [];
  let last;
  for (let i = 0; i < reps; i++) {
    const c = process.cpuUsage();
    const t = performance.now();
    last = await fn(i);
    walls.push((performance.now() - t) / 1000);
    const u = process.cpuUsage(c);
    cpus.push((u.user + u.system) / 1e6);
  }
  return { wall: median(walls), cpu: median(cpus), walls, last };
}

async function main() {
  const { dir, cleanup } = openRunDir(opts.tmpBase, 'xet-bench-chunker-', { keep: opts.keep });
  await reportRun(
    opts,
    { stages: {} },
    async (results, rec) => {
      const { chunkFile } = require(dist('chunks/chunk-file.js'));
      const { GearChunker } = require(dist('chunks/gear.js'));
      const { chunkParamsFor } = require(dist('chunks/params.js'));
      const { buildChunkList } = require(dist('chunks/list-tree.js'));
      const { writePack } = require(dist('git/pack-writer.js'));
      const { ChunkList, readRange } = require(dist('chunks/reader.js'));
      let file = opts.file;
      if (!file) {
        file = join(dir, 'pages.bin');
        log(`building a ${opts.mib} MiB page file`);
        buildWorkload(file, opts.mib * MB);
      }
      const size = statSync(file).size;
      results.file = { path: opts.file ?? 'synthetic page file', bytes: size };
      const S = results.stages;
      const reps = opts.reps;

      log('sha1 (one core)');
      const data = size <= 1024 * MB ? readFileSync(file) : null;
      if (data) S.sha1 = await timed(reps, () => createHash('sha1').update(data).digest('hex'));
      log('cuts (GearChunker, one core)');
      if (data) {
        S.cuts = await timed(reps, () => {
          const cuts = [];
          new GearChunker(chunkParamsFor(size)).push(data, cuts);
          return cuts.length;
        });
      }
      log('chunkFile, sequential and parallel');
      S.seq = await timed(reps, () => chunkFile(file, { format: 'sha1', workers: 0 }));
      S.par = await timed(reps, () => chunkFile(file, { format: 'sha1' }));
      const cf = S.par.last;
      if (JSON.stringify(cf) !== JSON.stringify(S.seq.last)) rec.problem('parallel chunks differ from sequential ones');
      results.chunks = cf.chunks.length;
      const { list, segments } = buildChunkList(cf.chunks, 'sha1');
      const repo = join(dir, 'repo');
      await run('git', ['init', '-q', repo]);
      const items = () => [
        ...cf.chunks.map((c) => ({ oid: c.oid, type: 'blob', file, range: { offset: c.offset, size: c.size } })),
        ...[list, ...segments].map((t) => ({ oid: t.oid, type: 'tree', data: t.data })),
      ];
      for (const level of [0, 1]) {
        log(`pack at level ${level}`);
        S[`pack${level}`] = await timed(reps, async () => {
          rmSync(join(repo, '.git/objects/pack'), { recursive: true, force: true });
          return writePack(join(repo, '.git/objects'), 'sha1', items(), 1, undefined, { chunkLevel: level });
        });
        S[`pack${level}`].bytes = S[`pack${level}`].last.bytes;
      }
      rmSync(join(repo, '.git/objects/pack'), { recursive: true, force: true });
      await writePack(join(repo, '.git/objects'), 'sha1', items(), 1, undefined, { chunkLevel: 0 });
      log('zstd -1 -T0');
      S.zstd = await timed(reps, () => run('bash', ['-c', `zstd -1 -T0 -q -c '${file}' > /dev/null`]));
      S.zstd.cpu = null;
      log('read the whole file back');
      const pointer = { size, blob: cf.blob, list: list.oid, chunks: cf.chunks.length, params: cf.params };
      const ctx = { git: { cwd: repo }, format: 'sha1' };
      const out = join(dir, 'out.bin');
      S.read = await timed(reps, async () => {
        const cl = await ChunkList.fromPointer(pointer, 'f', ctx);
        const w = createWriteStream(out);
        const n = await readRange(cl, 0, size, w, ctx);
        await new Promise((r) => w.end(r));
        return n;
      });
      S.cat = await timed(reps, () => run('bash', ['-c', `cat '${file}' > '${out}.cat'`]));
      S.cat.cpu = null;

      const rate = (s) => (s ? `${(size / s / 1e6).toFixed(0)} MB/s` : '-');
      const rows = [];
      const row = (name, st, base, baseName, note = '') =>
        st &&
        rows.push([
          name,
          fmtS(st.wall),
          rate(st.wall),
          rate(st.cpu),
          base ? `${fmtX(st.wall / base.wall)} ${baseName}` : '',
          note,
        ]);
      row('sha1 (1 core)', S.sha1);
      row('cuts (1 core)', S.cuts, S.sha1, 'sha1', 'goal ≥ 500 MB/s per core');
      row('chunkFile seq', S.seq, S.sha1, 'sha1');
      row('chunkFile par', S.par, S.sha1, 'sha1', `${os.availableParallelism()} cores`);
      row('pack L0', S.pack0, S.zstd, 'zstd', `pack ${(S.pack0.bytes / size).toFixed(3)} of the file`);
      row('pack L1', S.pack1, S.zstd, 'zstd', `pack ${(S.pack1.bytes / size).toFixed(3)} of the file`);
      row('zstd -1 -T0', S.zstd);
      for (const l of [0, 1]) {
        const cold = { wall: S.par.wall + S[`pack${l}`].wall, cpu: S.par.cpu + S[`pack${l}`].cpu };
        S[`cold${l}`] = cold;
        row(`cold L${l}`, cold, S.zstd, 'zstd', 'goal ≤ 2x zstd -1 -T0');
      }
      row('read (restore)', S.read, S.cat, 'cat');
      row('cat', S.cat);
      for (const st of Object.values(S)) delete st.last;
      const report = [
        '',
        `chunker engine: ${fmtMB(size)} (${results.file.path}), ${results.chunks} chunks, median of ${reps}`,
        loadNow(),
        '',
        ...table(['stage', 'wall s', 'wall rate', 'per-core (CPU)', 'vs baseline', 'note'], rows),
      ];
      return report;
    },
    () => cleanup(),
  );
}

mkdirSync(opts.tmpBase, { recursive: true });
start(main);
