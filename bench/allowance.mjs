#!/usr/bin/env node
// git xet storage allowance benchmarks (issue 11, "Speed").
//
//   npm run bench                    (= … && node bench/allowance.mjs)
//   node bench/allowance.mjs --help  (options)
//
// The tree: a generated app (default 4,000 files in 40 directories, 10 of them 1 MiB, ~45 MB), or with
// --workload a copy of the Node workload's repository (bench/lib/workload.mjs). Everything a run
// creates lives in <tmp-base>/xet-bench-allowance-<pid>/ (default /dev/shm), removed at exit.
//
//   capture    cold capture and a re-capture after 10 edits, in two copies of the tree: one without
//              an allowance, one with xet.allowance.bytes/files set (so every admission measures the
//              repository root), samples alternated. Goals: cold ≤ 3% slower (ratio of the medians),
//              re-capture ≤ 10 ms slower (difference of the medians).
//   report     `git xet allowance --json` (no --recount) in the repository with an allowance and its
//              captures: wall ≤ 100 ms. Beside it `git xet version` (node's start and the CLI's load)
//              and, in-process in this node (the CLI under test's dist/), allowanceReport({cwd}) and
//              one admission (admitRepository + end: the check every capture makes), median of 30.
//
// Until the capture admission is merged (wip/capture), the capture part measures main's capture,
// which does not admit yet: the with/without difference is then the noise floor. Re-run after the
// merge. Results: tables on stdout and bench/allowance-results.json.

import { appendFileSync, existsSync, readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  BenchError,
  ROOT,
  git,
  goalRow,
  goalTable,
  loadLine,
  loadNoter,
  openRunDir,
  parseArgs,
  printReport,
  recorder,
  run,
  settle,
  setUpCli,
  start,
  writeResults,
  xetRunner,
} from './lib/harness.mjs';
import { ensureWorkload, makeApp, appEditFiles } from './lib/workload.mjs';

const GOALS = {
  coldCaptureRatio: 1.03,
  recaptureOverheadMs: 10,
  allowanceJsonMs: 100,
};
const EDITS = 10;
const IN_PROCESS_REPS = 30;

const ARGS = {
  script: 'bench/allowance.mjs',
  results: 'allowance-results.json',
  common: {
    reps: 5,
    tmpBase: '/dev/shm',
    rebuildWorkload: false,
    timeoutSec: 1800,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'captures per side (cold + re-capture, alternated) and allowance --json runs ×3, median reported (default 5)',
    tmpBase: 'where the run dir goes (default /dev/shm)',
    rebuildWorkload: 'with --workload: rebuild the cached Node workload under bench/work/',
  },
  options: [
    {
      flag: '--workload',
      key: 'workload',
      default: false,
      help: 'use a copy of the Node workload repository instead of the generated app',
    },
    {
      flag: '--files',
      key: 'files',
      arg: 'N',
      default: 4000,
      help: 'files of the generated app (default 4000)',
      parse: (v) => Math.max(100, Math.floor(Number(v)) || 0),
    },
  ],
};

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const { dir: runDir, cleanup } = openRunDir(opts.tmpBase, 'xet-bench-allowance-', { keep: opts.keep });
  const results = {
    startedAt: new Date().toISOString(),
    machine: null,
    config: { reps: opts.reps, goals: GOALS, workload: opts.workload, files: opts.files, edits: EDITS },
    tree: null,
    cli: null,
    admissionOnMain: null,
    capture: null,
    report: null,
    summary: null,
    load: [],
  };
  const { fail, warn } = recorder(results);
  const noteLoad = loadNoter(results);
  let cli = join(ROOT, 'bin', 'git-xet');
  const xet = xetRunner(() => cli, opts, { cpu: true });

  try {
    noteLoad('start');
    cli = await setUpCli(opts, runDir, results);
    const dist = join(dirname(dirname(cli)), 'dist', 'src');
    const req = createRequire(join(dist, 'index.js'));
    const hasAllowance = /^ {2}allowance\b/m.test((await run(process.execPath, [cli, '--help'])).stdout);
    if (!hasAllowance) warn('git xet has no allowance command: the report part is skipped');
    // Does this CLI's capture admit? (wip/capture calls admitRepository from src/snapshot/.)
    const snapshotDir = join(dist, 'snapshot');
    results.admissionOnMain =
      existsSync(snapshotDir) &&
      readdirSync(snapshotDir).some(
        (n) => n.endsWith('.js') && /admitRepository/.test(readFileSync(join(snapshotDir, n), 'utf8')),
      );
    if (!results.admissionOnMain) {
      warn('this capture does not admit yet (wip/capture not merged): the capture rows are the noise floor');
    }

    const app = join(runDir, 'app');
    if (opts.workload) {
      const w = await ensureWorkload(opts);
      await run('cp', ['-a', w.repo, app]);
      results.tree = { kind: 'node workload', repo: relative(ROOT, w.repo) };
    } else {
      await makeApp(app, opts.files);
      results.tree = { kind: 'generated app', files: opts.files + 10 + 200 };
    }
    const edits = await appEditFiles(app, EDITS);

    // ---- capture: without vs with an allowance, alternated --------------------------------------
    const C = (results.capture = {
      coldNone: [],
      coldSet: [],
      coldNoneCpu: [],
      coldSetCpu: [],
      reNone: [],
      reSet: [],
      reNoneCpu: [],
      reSetCpu: [],
    });
    let lastSet = null;
    try {
      for (let rep = 1; rep <= opts.reps; rep++) {
        const sides = rep % 2 ? ['None', 'Set'] : ['Set', 'None'];
        for (const side of sides) {
          const copy = join(runDir, `${side.toLowerCase()}-${rep}`);
          await run('cp', ['-a', app, copy]);
          if (side === 'Set') {
            await git(copy, ['config', 'xet.allowance.bytes', '100G']);
            await git(copy, ['config', 'xet.allowance.files', '10000000']);
          }
          await settle();
          const cold = await xet(copy, ['capture', '-m', `cold ${rep}`, '--json']);
          C[`cold${side}`].push(cold.seconds);
          if (cold.cpuSeconds != null) C[`cold${side}Cpu`].push(cold.cpuSeconds);
          for (const f of edits) appendFileSync(join(copy, f), `// edit ${rep}\n`);
          await settle();
          const re = await xet(copy, ['capture', '-m', `re ${rep}`, '--json']);
          if (re.json?.unchanged) throw new BenchError(`the re-capture after ${EDITS} edits was unchanged (${copy})`);
          C[`re${side}`].push(re.seconds);
          if (re.cpuSeconds != null) C[`re${side}Cpu`].push(re.cpuSeconds);
          // The last rep's copy with an allowance stays for the report part.
          if (side === 'Set' && rep === opts.reps) lastSet = copy;
          else await run('rm', ['-rf', copy]);
        }
      }
    } catch (e) {
      fail('capture', e);
    }
    noteLoad('capture');

    // ---- report: allowance --json, version, in-process ------------------------------------------
    const R = (results.report = {
      repo: lastSet ? relative(runDir, lastSet) : null,
      allowance: [],
      allowanceCpu: [],
      version: [],
      versionCpu: [],
      inProcessReportMs: [],
      inProcessAdmitMs: [],
      used: null,
    });
    try {
      if (!lastSet) throw new BenchError('no repository with an allowance and captures (the capture part failed)');
      for (let i = 0; i < opts.reps * 3; i++) {
        const v = await xet(lastSet, ['version']);
        R.version.push(v.seconds);
        if (v.cpuSeconds != null) R.versionCpu.push(v.cpuSeconds);
        if (!hasAllowance) continue;
        const a = await xet(lastSet, ['allowance', '--json']);
        R.allowance.push(a.seconds);
        if (a.cpuSeconds != null) R.allowanceCpu.push(a.cpuSeconds);
        R.used = a.json?.roots?.[0]?.used ?? null;
      }
      if (hasAllowance) {
        // In this process: the CLI under test's modules, the same repository. The first call loads
        // modules and warms git's caches: not counted.
        const { allowanceReport } = req(join(dist, 'allowance', 'report.js'));
        const { admitRepository } = req(join(dist, 'allowance', 'admit.js'));
        const { findRepo } = req(join(dist, 'git', 'repo.js'));
        const { readConfig } = req(join(dist, 'git', 'config.js'));
        const { repoOpts } = req(join(dist, 'git', 'repo.js'));
        const repo = await findRepo(lastSet);
        const config = await readConfig(repoOpts(repo));
        const time = async (fn) => {
          const t0 = performance.now();
          await fn();
          return performance.now() - t0;
        };
        await allowanceReport({ cwd: lastSet });
        for (let i = 0; i < IN_PROCESS_REPS; i++)
          R.inProcessReportMs.push(await time(() => allowanceReport({ cwd: lastSet })));
        const admitOnce = async () =>
          (await admitRepository(repo, { bytes: 1, files: 1 }, 'grow', 'bench', config)).end();
        await admitOnce();
        for (let i = 0; i < IN_PROCESS_REPS; i++) R.inProcessAdmitMs.push(await time(admitOnce));
      }
    } catch (e) {
      fail('report', e);
    }
    noteLoad('report');

    const inProc = (xs) => xs.map((x) => x / 1000);
    results.summary = {
      rows: [
        goalRow('cold capture, allowance set vs none (ratio)', C.coldSet, C.coldNone, {
          goalRatio: GOALS.coldCaptureRatio,
        }),
        goalRow('the same, CPU time (user + sys, with children)', C.coldSetCpu, C.coldNoneCpu, {}),
        goalRow(`re-capture (${EDITS} edits), allowance set vs none`, C.reSet, C.reNone, {
          goalMs: GOALS.recaptureOverheadMs,
        }),
        goalRow('the same, CPU time (user + sys, with children)', C.reSetCpu, C.reNoneCpu, {}),
        goalRow('git xet allowance --json, wall', R.allowance, null, { goalMs: GOALS.allowanceJsonMs, absolute: true }),
        goalRow('the same, CPU time (user + sys, with children)', R.allowanceCpu, null, { absolute: true }),
        goalRow('git xet version (node start + CLI load), wall', R.version, null, { absolute: true }),
        goalRow('the same, CPU time (user + sys)', R.versionCpu, null, { absolute: true }),
        goalRow(
          'allowanceReport({cwd}) in-process (its git rev-parse and git config included)',
          inProc(R.inProcessReportMs),
          null,
          {
            absolute: true,
          },
        ),
        goalRow('one admission in-process (admitRepository + end, limits set)', inProc(R.inProcessAdmitMs), null, {
          absolute: true,
        }),
      ],
    };
  } catch (e) {
    fail('setup', e);
  }
  results.finishedAt = new Date().toISOString();
  printTables(results);
  await writeResults(opts, results);
  cleanup();
  process.exitCode = results.errors.length ? 1 : 0;
}

function printTables(results) {
  const out = ['', 'git xet storage allowance benchmark'];
  if (results.tree)
    out.push(
      `tree: ${results.tree.kind}${results.tree.repo ? ` (${results.tree.repo})` : ` (${results.tree.files} files)`}`,
    );
  const m = results.machine;
  if (m) out.push(`machine: ${m.nproc} cores, ${m.fs}; load at start ${m.loadAvg.join(' ')}; ${m.git}`);
  out.push(`capture admits: ${results.admissionOnMain ? 'yes' : 'NO (wip/capture not merged: noise floor only)'}`);
  out.push(loadLine(results));

  out.push('');
  out.push(...goalTable(results.summary?.rows ?? []));
  printReport(out, results);
}

start(main);
