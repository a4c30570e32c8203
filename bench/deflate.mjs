#!/usr/bin/env node
// The deflate of a capture's files (issue 14, docs/DESIGN-NOTES.md "A faster deflate for large
// captures"): every file of the workload up to 8 MiB (what a capture holds whole and deflates into
// its pack, one zlib stream a file), deflated on one thread by node's zlib at level 1, libdeflate at
// level 1 (the native module's deflateInto: small captures) and ISA-L's igzip at level 1 (its
// deflateFastInto: captures that read 32 MiB or more). Each stream is inflated back and compared
// before anything is reported. Seconds are CPU-bound on one core; a capture runs two workers.
//
//   npm run build && node bench/deflate.mjs [--reps 3]

import { readFileSync, readdirSync, lstatSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as zlib from 'node:zlib';
import { ROOT, fmtB, fmtX, loadNow, log, median, parseArgs, reportRun, start, table } from './lib/harness.mjs';
import { ensureWorkload } from './lib/workload.mjs';

const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/deflate.mjs',
  results: 'deflate-results.json',
  common: { reps: 3, tmpBase: '/dev/shm', writeResults: undefined, resultsFile: undefined },
  options: [],
});

const require = createRequire(import.meta.url);
const BIG = 8 * 1024 * 1024;

/** Every regular file under dir (not .git) of at most BIG bytes. */
function filesOf(dir, out = []) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === '.git') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) filesOf(p, out);
    else if (e.isFile() && lstatSync(p).size <= BIG) out.push(readFileSync(p));
  }
  return out;
}

async function main() {
  await reportRun(opts, {}, async (results) => {
    const { native } = require(join(ROOT, 'dist', 'src', 'native.js'));
    if (!native) throw new Error('the native module is not built (npm run build with libdeflate-dev)');
    const wl = await ensureWorkload(opts);
    const files = filesOf(wl.repo);
    const bytes = files.reduce((a, f) => a + f.length, 0);
    log(`${files.length} files, ${fmtB(bytes)}`);
    const bound = (n) => native.deflateBound(n);
    const out = Buffer.allocUnsafe(bound(BIG) + 1024);
    const methods = {
      'node zlib, level 1': (f) => zlib.deflateSync(f, { level: 1 }),
      'libdeflate, level 1': (f) => out.subarray(0, native.deflateInto(f, 1, out, 0)),
    };
    if (typeof native.deflateFastInto === 'function') {
      methods['igzip, level 1'] = (f) => {
        const n = native.deflateFastInto(f, out, 0);
        if (n < 0) throw new Error('igzip had no room');
        return out.subarray(0, n);
      };
    } else log('igzip: the native module was built without ISA-L (libisal-dev); not measured');
    // Every stream reads back as its file before a time is taken.
    for (const [name, fn] of Object.entries(methods)) {
      for (const f of files) {
        const back = zlib.inflateSync(fn(f));
        if (!back.equals(f)) throw new Error(`${name}: a stream does not inflate to its file`);
      }
    }
    const rows = [];
    const m = {};
    for (const [name, fn] of Object.entries(methods)) {
      const secs = [];
      let size = 0;
      for (let r = 0; r < opts.reps; r++) {
        size = 0;
        const t0 = performance.now();
        for (const f of files) size += fn(f).length;
        secs.push((performance.now() - t0) / 1000);
      }
      m[name] = { seconds: median(secs), bytes: size, samples: secs };
    }
    const base = m['libdeflate, level 1'];
    for (const [name, r] of Object.entries(m)) {
      rows.push([
        name,
        `${r.seconds.toFixed(3)} s`,
        `${(bytes / r.seconds / 1e6).toFixed(0)} MB/s`,
        fmtB(r.bytes),
        `${((100 * r.bytes) / bytes).toFixed(1)} %`,
        fmtX(r.seconds / base.seconds),
        fmtX(r.bytes / base.bytes),
      ]);
    }
    results.files = files.length;
    results.bytes = bytes;
    results.methods = m;
    const report = [
      '',
      `deflate of the workload's ${files.length} files up to 8 MiB (${fmtB(bytes)}), one thread, median of ${opts.reps}`,
      loadNow(),
      '',
      ...table(['method', 'time', 'speed', 'output', 'of input', 'time / libdeflate', 'bytes / libdeflate'], rows),
    ];
    return report;
  });
}

start(main);
