#!/usr/bin/env node
// Starting git from a large node process (issue 14, docs/DESIGN-NOTES.md "Spawning git"): the
// main thread's cost of each start through node's child_process.spawn (fork: the page tables of the
// whole process are copied) and through src/git/spawn.ts's posix_spawn route, at three sizes of the
// process (its own start, then after holding 200 MB and 400 MB of buffers, about what a capture and
// the daemon hold). Each start runs `git --version` to its end; the figure is the time spent in the
// start call itself, which the main thread cannot use for anything else, and the whole round trip.
//
//   npm run build && node bench/spawn.mjs [--reps 3] [--count 40]

import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ROOT, fmtX, loadNow, log, median, parseArgs, reportRun, start, table } from './lib/harness.mjs';

const require = createRequire(import.meta.url);
const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/spawn.mjs',
  results: 'spawn-results.json',
  common: { reps: 3, tmpBase: '/dev/shm', writeResults: undefined, resultsFile: undefined },
  options: [
    {
      flag: '--count',
      key: 'count',
      arg: 'N',
      help: 'starts per measurement (default 40)',
      default: 40,
      parse: Number,
    },
  ],
});

/** Start `git --version` `count` times in turn; the median per start of the call and of the round trip. */
async function starts(route, count) {
  const { startProcessVia } = require(join(ROOT, 'dist', 'src', 'git', 'spawn.js'));
  const env = { ...process.env, LC_ALL: 'C' };
  const call = [];
  const trip = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    const p = startProcessVia(route, 'git', ['--version'], { env });
    const t1 = performance.now();
    if (!p) throw new Error(`the ${route} route is not available (the native module did not load)`);
    p.stdout.resume();
    p.stderr.resume();
    p.stdin.end();
    const { code } = await p.exited;
    if (code !== 0) throw new Error(`git --version exited ${code}`);
    call.push(t1 - t0);
    trip.push(performance.now() - t0);
  }
  return { call: median(call), trip: median(trip) };
}

async function main() {
  const held = [];
  const rows = [];
  await reportRun(opts, { sizes: [] }, async (results) => {
    for (const mb of [0, 200, 400]) {
      while (held.length < mb) held.push(Buffer.alloc(1 << 20, 1)); // touched: resident, as a heap is
      const rss = process.memoryUsage().rss / 2 ** 20;
      const m = { heldMiB: mb, rssMiB: Math.round(rss), node: [], posix: [] };
      for (let r = 0; r < opts.reps; r++) {
        for (const route of ['node', 'posix']) m[route].push(await starts(route, opts.count));
      }
      const pick = (route, k) => median(m[route].map((x) => x[k]));
      m.median = {
        nodeCall: pick('node', 'call'),
        posixCall: pick('posix', 'call'),
        nodeTrip: pick('node', 'trip'),
        posixTrip: pick('posix', 'trip'),
      };
      results.sizes.push(m);
      log(
        `rss ${m.rssMiB} MiB: node ${m.median.nodeCall.toFixed(2)} ms, posix_spawn ${m.median.posixCall.toFixed(2)} ms`,
      );
      rows.push([
        `${m.rssMiB} MiB`,
        `${m.median.nodeCall.toFixed(2)} ms`,
        `${m.median.posixCall.toFixed(2)} ms`,
        fmtX(m.median.posixCall / m.median.nodeCall),
        `${m.median.nodeTrip.toFixed(2)} ms`,
        `${m.median.posixTrip.toFixed(2)} ms`,
        fmtX(m.median.posixTrip / m.median.nodeTrip),
      ]);
    }
    const report = [
      '',
      `starting git --version: median of ${opts.reps} x ${opts.count} starts per route, alternated`,
      loadNow(),
      '',
      ...table(
        ['process RSS', 'node spawn call', 'posix_spawn call', 'ratio', 'node round trip', 'posix round trip', 'ratio'],
        rows,
      ),
    ];
    return report;
  });
}

start(main);
