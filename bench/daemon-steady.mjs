#!/usr/bin/env node
// A warm daemon's re-capture, steady (issue 14's "re-capture after 10 edits through a warm resident
// process", docs/DESIGN-NOTES.md "A daemon re-capture patched where the edits are"): in a copy of
// the workload, a daemon is started and warmed with a few captures on its socket, then ten edits
// and a capture on the socket, again and again, a short pause between them, as an agent's session
// would send them. The main bench (run.mjs) times one such capture per repetition after ~12 s of
// other work; this is the figure of a daemon in use. Against tar+zstd of the same copy, timed in
// the same run.
//
//   npm run build && node bench/daemon-steady.mjs [--reps 12] [--tmp-base /dev/shm]

import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  BenchError,
  GIT_ENV,
  ROOT,
  fmtS,
  fmtX,
  loadNow,
  log,
  median,
  parseArgs,
  quote,
  reportRun,
  rmrf,
  sh,
  sleep,
  start,
  table,
} from './lib/harness.mjs';
import { HISTORY_PACKAGE, ensureWorkload } from './lib/workload.mjs';

const opts = parseArgs(process.argv.slice(2), {
  script: 'bench/daemon-steady.mjs',
  results: 'daemon-steady-results.json',
  common: { reps: 12, tmpBase: '/dev/shm', writeResults: undefined, resultsFile: undefined },
  options: [],
});

/** Captures on the socket before the timed ones: the first walks read everything, and a fresh
 * process compiles the capture path over its first few captures. */
const WARM_UPS = 4;
const PAUSE_MS = 300;
const EDITS = 10;
const GOAL = 0.05;

const CLI = join(ROOT, 'bin', 'git-xet');

async function main() {
  const tmp = mkdtempSync(join(opts.tmpBase, 'xet-bench-daemon-'));
  const root = join(tmp, 'repo');
  const xet = (args) => {
    const r = spawnSync(process.execPath, [CLI, ...args], { cwd: root, encoding: 'utf8' });
    if (r.status !== 0) throw new BenchError(`git xet ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  let daemon = false;
  await reportRun(
    opts,
    {},
    async (results) => {
      const wl = await ensureWorkload(opts);
      const cp = spawnSync('cp', ['-a', wl.repo, root]);
      if (cp.status !== 0) throw new BenchError(`cp -a failed: ${cp.stderr}`);
      const listed = spawnSync('git', ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`], {
        cwd: root,
        env: GIT_ENV,
        encoding: 'utf8',
        maxBuffer: 1 << 28,
      });
      const js = listed.stdout
        .split('\0')
        .filter((p) => p.endsWith('.js'))
        .sort();
      if (js.length < EDITS) throw new BenchError(`the workload has fewer than ${EDITS} files to edit`);
      const files = Array.from({ length: EDITS }, (_, i) => js[Math.floor(((i + 0.5) * js.length) / EDITS)]);
      const edit = (round) => {
        for (const f of files) appendFileSync(join(root, f), `\n// bench daemon edit ${round}\n`);
      };
      // tar+zstd of the same files (the page cache warmed by the first).
      const out = join(tmp, 'out.tar.zst');
      const tarZstd = async () => {
        rmSync(out, { force: true });
        const r = await sh(`tar -C ${quote(root)} --exclude=./.git -cf - . | zstd -1 -T0 -q -o ${quote(out)}`, {});
        return r.seconds;
      };
      await tarZstd();
      const tars = [await tarZstd(), await tarZstd(), await tarZstd()];
      xet(['capture', '-m', 'bench daemon: first', '--json']);
      xet(['daemon', 'start', '--json']);
      daemon = true;
      const req = createRequire(CLI);
      const dist = join(ROOT, 'dist', 'src', 'daemon');
      const client = { ...req(join(dist, 'client.js')), ...req(join(dist, 'locate.js')) };
      const onSocket = async (message) => {
        const t0 = performance.now();
        const reply = await client.sendToDaemon(client.locateDaemon(root), {
          op: 'capture',
          cwd: root,
          input: { message },
        });
        const ms = performance.now() - t0;
        if (!reply?.ok || typeof reply.result?.snapshot !== 'string' || reply.result.unchanged)
          throw new BenchError(`${message}: ${JSON.stringify(reply ?? null).slice(0, 1000)}`);
        return ms;
      };
      const warm = [];
      for (let w = 0; w < WARM_UPS; w++) {
        edit(`warm-up ${w}`);
        await sleep(PAUSE_MS);
        warm.push(await onSocket(`bench daemon: warm-up ${w}`));
      }
      const timed = [];
      for (let r = 0; r < opts.reps; r++) {
        edit(r);
        await sleep(PAUSE_MS);
        timed.push(await onSocket(`bench daemon: ${r}`));
      }
      xet(['daemon', 'stop', '--json']);
      daemon = false;
      const ms = median(timed);
      const tar = median(tars);
      results.warmUpsMs = warm;
      results.timedMs = timed;
      results.tarZstdSeconds = tars;
      results.ratio = ms / 1000 / tar;
      log(
        `warm-ups ${warm.map((x) => x.toFixed(0)).join(', ')} ms; timed ${timed.map((x) => x.toFixed(0)).join(', ')} ms`,
      );
      return [
        '',
        `a warm daemon's re-capture of ${EDITS} edits on its socket: ${opts.reps} captures after ${WARM_UPS} warm-ups, ${PAUSE_MS} ms apart`,
        loadNow(),
        '',
        ...table(
          ['re-capture on the socket, median (min-max)', 'tar|zstd -1 -T0, median', 'ratio', 'goal', 'result'],
          [
            [
              `${ms.toFixed(0)} ms (${Math.min(...timed).toFixed(0)}-${Math.max(...timed).toFixed(0)})`,
              `${fmtS(tar)} s`,
              fmtX(ms / 1000 / tar),
              `<= ${GOAL}x`,
              ms / 1000 / tar <= GOAL ? 'PASS' : 'FAIL',
            ],
          ],
        ),
      ];
    },
    () => {
      if (daemon) spawnSync(process.execPath, [CLI, 'daemon', 'stop', '--json'], { cwd: root });
      rmrf(tmp);
    },
  );
}

start(main);
