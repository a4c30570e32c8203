#!/usr/bin/env node
// git xet fork benchmarks.
//
//   npm run bench                  (= npm run build && node bench/run.mjs && node bench/forks.mjs)
//   node bench/forks.mjs --help    (options)
//
// Plain ESM, node built-ins only; the workload comes from bench/lib/workload.mjs,
// the harness (options, processes, timing, results) from bench/lib/harness.mjs.
// Everything a run creates lives in <tmp-base>/xet-bench-forks-<pid>/ (default /dev/shm): a frozen
// copy of the CLI and a fresh XFS image (reflink=1) loop-mounted at .../mnt, into which the workload
// repo is copied. Forks, copies and baselines all live on that one filesystem, so clone mode works
// and `df` of it counts exactly what the benchmark wrote. Every overlay and the XFS mount are
// unmounted and the image deleted at exit, on SIGINT/SIGTERM too, and a run killed harder is cleaned
// up by the next one. Runs as root (mount, overlayfs). Results: tables on stdout and
// bench/forks-results.json.

import { existsSync, mkdirSync, readdirSync, readFileSync, appendFileSync, statfsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { spawnSync } from 'node:child_process';
import {
  BenchError,
  ROOT,
  cleanStaleRuns,
  cliInfo,
  die,
  fmtMB,
  fmtMs,
  fmtS,
  fmtX,
  freezeCli,
  git,
  isStopping,
  log,
  machineInfo,
  med,
  mountsUnder,
  parseArgs,
  printReport,
  quote,
  ratio,
  recorder,
  rmrf,
  run,
  runXet,
  settle,
  sleep,
  start,
  stopChildren,
  sum,
  table,
  tail,
  unmountUnder,
  verdict,
  writeResults,
} from './lib/harness.mjs';
import { HISTORY_PACKAGE, ensureWorkload } from './lib/workload.mjs';

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

const MODES = ['overlay', 'clone', 'copy'];
const CHANGES_EDITS = 10;

const GOALS = {
  // steady-state overlay fork creation (base exists) vs one `cp -a` of the worktree, through the CLI
  overlayCreateVsCp: 0.05,
  // the same through the resident process (`git xet daemon`): the request on its socket
  overlayDaemonVsCp: 0.01,
  // df of 16 overlay forks, base included, vs df of one full copy
  overlayDisk16VsCopy: 1.1,
  // df of 4 clone forks, base included, vs df of one full copy
  cloneDisk4VsCopy: 0.5,
  // `changes` on an overlay fork with 10 modified files vs with 1: cost follows the changes, not the
  // tree. Read here as: at most 1.5x for 10x the changes, and at most 0.5x a full scan (clone fork).
  overlayChanges10vs1: 1.5,
  overlayChangesVsScan: 0.5,
};

// The "test" run in a fork to call it test-ready: load the app's dependencies and the vendored
// library from the fork's tree (node_modules is ignored, vendor/ tracked) and render one component.
// It reads ~1,000 files, among them typescript's 9 MB lib, through whatever the fork is made of.
const TEST_JS = [
  "const _ = require('./vendor/lodash');",
  "const React = require('react');",
  "const { renderToString } = require('react-dom/server');",
  "require('express'); require('rxjs'); require('date-fns'); require('@babel/core'); require('typescript');",
  "process.stdout.write(renderToString(React.createElement('p', null, _.join(['fork', 'ready'], '-'))));",
].join(' ');
const TEST_OUTPUT = '<p>fork-ready</p>';

const ARGS = {
  script: 'bench/forks.mjs',
  results: 'forks-results.json',
  common: {
    reps: 3,
    tmpBase: '/dev/shm',
    rebuildWorkload: false,
    timeoutSec: 900,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'repetitions of each single measurement, median reported (default 3)',
    tmpBase: 'where the XFS image and the frozen CLI go (default /dev/shm)',
  },
  options: [
    {
      flag: '--counts',
      key: 'counts',
      arg: 'LIST',
      default: [1, 4, 16],
      help: 'fork counts per round, comma-separated (default 1,4,16)',
      parse: (v) => {
        const counts = v.split(',').map((x) => Math.floor(Number(x)));
        if (!counts.length || counts.some((n) => !(n >= 1))) die('--counts needs positive integers');
        return counts;
      },
    },
    {
      flag: '--modes',
      key: 'modes',
      arg: 'LIST',
      default: [...MODES],
      help: 'fork modes to measure (default overlay,clone,copy)',
      parse: (v) => {
        const modes = v.split(',');
        for (const m of modes) if (!MODES.includes(m)) die(`unknown mode ${m}`);
        return modes;
      },
    },
    {
      flag: '--image-size',
      key: 'imageSize',
      arg: 'SIZE',
      default: '12G',
      help: 'size of the sparse XFS image, as for truncate -s (default 12G: 16 copy forks\nof the workload need about 9.5 GB)',
    },
    {
      flag: '--no-npm-ci',
      key: 'npmCi',
      default: true,
      help: 'skip the `git worktree add` + `npm ci --offline` baseline',
    },
  ],
};

// ---------------------------------------------------------------------------
// Mounts: the XFS image, the overlays under it, teardown
// ---------------------------------------------------------------------------

/**
 * Synchronous, so it can run from a signal or 'exit' handler: unmount everything under the run's
 * mount point (overlays first, then the XFS, which detaches the loop device), then delete the run dir.
 */
function teardown(runDir) {
  const mnt = join(runDir, 'mnt');
  // The repo's daemon has its cwd on the XFS: it goes first, or the XFS stays busy.
  try {
    const pid = Number(readFileSync(join(mnt, 'repo', '.git', 'xet', 'daemon', 'pid'), 'utf8').trim());
    if (pid > 0) {
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 50 && existsSync(`/proc/${pid}`); i++) spawnSync('sleep', ['0.02']);
    }
  } catch {
    // no daemon
  }
  if (unmountUnder(mnt).length) {
    // Never rm -rf through a mount: drop the image file only (freed when the loop detaches).
    log(`WARNING: still mounted under ${mnt}: ${mountsUnder(mnt).join(', ')}; removing only the image`);
    rmrf(join(runDir, 'xfs.img'));
    return;
  }
  rmrf(runDir);
}

function parseSize(s) {
  const m = /^(\d+(?:\.\d+)?)([KMGT]?)i?B?$/i.exec(s);
  if (!m) die(`cannot read size ${s}`);
  return Number(m[1]) * 1024 ** ' KMGT'.indexOf(m[2].toUpperCase() || ' ');
}

// ---------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const started = new Date();
  mkdirSync(opts.tmpBase, { recursive: true });
  // Runs killed by SIGKILL leave their dir and mounts.
  cleanStaleRuns(opts.tmpBase, 'xet-bench-forks-', teardown);

  const runDir = join(opts.tmpBase, `xet-bench-forks-${process.pid}`);
  const img = join(runDir, 'xfs.img');
  const mnt = join(runDir, 'mnt');
  mkdirSync(mnt, { recursive: true });
  let tornDown = false;
  const cleanup = () => {
    if (tornDown) return;
    tornDown = true;
    teardown(runDir);
  };
  process.on('exit', cleanup);
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, async () => {
      log(`${sig}: stopping the child processes, then unmounting and removing ${runDir}`);
      await stopChildren();
      cleanup();
      process.exit(130);
    });
  }

  const results = {
    startedAt: started.toISOString(),
    machine: null,
    config: {
      reps: opts.reps,
      counts: opts.counts,
      modes: opts.modes,
      goals: GOALS,
      imageSize: opts.imageSize,
      tmpBase: opts.tmpBase,
      testCommand: `node -e ${quote(TEST_JS)}`,
      changesEdits: CHANGES_EDITS,
    },
    workload: null,
    cli: null,
    setup: {},
    baselines: {},
    modes: {},
    changes: {},
    problems: [],
    warnings: [],
    errors: [],
  };
  const { fail, warn, problem } = recorder(results);

  let cli = join(ROOT, 'bin', 'git-xet');
  let repo = null;
  let snapshot = null;
  let headCommit = null;
  let expectedStatus = null;

  /** `git xet ...` in the repo (or cwd); any failure throws with the command, a repro line and stderr. */
  const xet = (args, { cwd = repo } = {}) =>
    runXet(cli, cwd, args, {
      timeoutSec: opts.timeoutSec,
      requireJson: true,
      note: "cwd is on the run's XFS image, removed at exit",
    });

  /** Used bytes of the XFS mount, after sync, read until it stops moving (XFS frees inodes in the background). */
  const dfUsed = async () => {
    let last = null;
    for (let i = 0; i < 40; i++) {
      await settle();
      const r = await run('df', ['-B1', '--output=used', mnt]);
      const used = Number(r.stdout.trim().split('\n')[1]);
      if (used === last) return used;
      last = used;
      await sleep(250);
    }
    warn(`df of ${mnt} did not settle; using the last reading`);
    return last;
  };
  /** Give freed blocks back to the image's backing file (tmpfs), outside any timing. */
  const trim = async () => {
    const r = await run('fstrim', [mnt], { allowFail: true });
    if (r.code !== 0) warn(`fstrim ${mnt} failed: ${tail(r.stderr.trim(), 300)}`);
  };

  const forksRoot = () => join(mnt, 'forks');
  let forkSeq = 0;
  const forkDir = (tag) => join(forksRoot(), `${tag}-${++forkSeq}`);

  /** One timed `git xet fork` (sync first). Checks the JSON; expectBase: the baseBuilt it must report. */
  const fork = async (mode, dir, expectBase) => {
    await settle();
    const r = await xet(['fork', snapshot, dir, '--mode', mode, '--json']);
    const j = r.json;
    if (j.mode !== mode || typeof j.id !== 'string' || typeof j.baseBuilt !== 'boolean') {
      throw new BenchError(`fork --mode ${mode}: unexpected JSON ${tail(r.stdout.trim(), 1000)}`);
    }
    if (expectBase != null && j.baseBuilt !== expectBase) {
      warn(`fork --mode ${mode} ${dir}: baseBuilt ${j.baseBuilt}, expected ${expectBase}`);
    }
    if (j.head !== headCommit) problem(`fork ${dir}: head ${j.head}, expected ${headCommit}`);
    return { seconds: r.seconds, json: j };
  };

  /** One timed fork through the repo's daemon: `via` 'cli' is `git xet fork` answered by the daemon
   * (run with no git on PATH, so a CLI that had to make the fork itself would fail) through node's
   * client, 'native' the same through the native thin client (no node started), 'socket' is
   * the request on the daemon's socket from this process (what a resident client pays). */
  let daemonClient = null;
  const forkViaDaemon = async (via, dir) => {
    await settle();
    let seconds;
    let j;
    if (via === 'cli' || via === 'native') {
      // 'native': bin/git-xet run as a program, as git runs it: its native client relays the line
      // (with no node on PATH either, a line it did not relay fails).
      const r = await runXet(cli, repo, ['fork', snapshot, dir, '--mode', 'overlay', '--json'], {
        timeoutSec: opts.timeoutSec,
        requireJson: true,
        env: { ...process.env, PATH: '/nonexistent' },
        note: 'through the daemon, with no git on PATH',
        via: via === 'native' ? 'program' : 'node',
      });
      seconds = r.seconds;
      j = r.json;
    } else {
      if (!daemonClient) {
        const req = createRequire(cli);
        const dist = join(dirname(cli), '..', 'dist', 'src', 'daemon');
        daemonClient = { ...req(join(dist, 'client.js')), ...req(join(dist, 'locate.js')) };
      }
      const place = daemonClient.locateDaemon(repo);
      const t0 = performance.now();
      const reply = await daemonClient.sendToDaemon(place, {
        op: 'fork',
        cwd: repo,
        input: { snapshot, dir, mode: 'overlay' },
      });
      seconds = (performance.now() - t0) / 1000;
      if (!reply?.ok) throw new BenchError(`fork through the daemon's socket: ${JSON.stringify(reply ?? null)}`);
      j = reply.result;
    }
    if (j.mode !== 'overlay' || j.baseBuilt !== false || typeof j.id !== 'string') {
      throw new BenchError(`fork through the daemon (${via}): unexpected result ${JSON.stringify(j).slice(0, 1000)}`);
    }
    if (j.head !== headCommit) problem(`fork ${dir} (daemon, ${via}): head ${j.head}, expected ${headCommit}`);
    return { seconds, json: j };
  };

  /** The test command in dir, right after whatever made dir (no sync in between). */
  const testIn = async (dir) => {
    const r = await run(process.execPath, ['-e', TEST_JS], { cwd: dir, timeoutSec: opts.timeoutSec });
    if (r.stdout !== TEST_OUTPUT) problem(`test in ${dir} printed ${JSON.stringify(tail(r.stdout, 200))}`);
    return r.seconds;
  };

  /** Untimed: the fork is registered, active, and git sees exactly the source repo's state. */
  const checkFork = async (dir, mode) => {
    const st = await git(dir, ['status', '--porcelain=v1', '-uall'], { allowFail: true });
    if (st.code !== 0) problem(`git status in ${mode} fork ${dir} failed: ${tail(st.stderr, 500)}`);
    else if (st.stdout.trimEnd() !== expectedStatus) {
      problem(`git status in ${mode} fork differs from the source repo:\n${tail(st.stdout, 800)}`);
    }
    const l = await xet(['forks', '--json']);
    const row = l.json.forks?.find((f) => f.dir === dir);
    if (!row || row.state !== 'active' || row.mode !== mode) {
      problem(`forks --json does not list ${dir} as an active ${mode} fork: ${JSON.stringify(row ?? null)}`);
    }
  };

  const discard = async (dir) => {
    const r = await xet(['discard', dir, '--no-capture', '--json']);
    if (existsSync(dir)) problem(`discard --no-capture left ${dir} behind`);
    return r.seconds;
  };

  const liveForks = async () => (await xet(['forks', '--json'])).json.forks ?? [];

  /** Drop the snapshot's base (derived data, rebuilt by the next overlay/clone fork); only with no forks. */
  const removeBase = async () => {
    const live = await liveForks();
    if (live.length) throw new BenchError(`cannot drop the base: ${live.length} fork(s) still listed`);
    const bases = join(repo, '.git', 'xet', 'bases');
    if (existsSync(bases)) for (const name of readdirSync(bases)) rmrf(join(bases, name));
    await trim();
  };

  try {
    // ---- workload, CLI, filesystem -------------------------------------------
    const wl = await ensureWorkload(opts);
    results.workload = { ...wl, repo: relative(ROOT, wl.repo), dir: undefined };
    log(
      `workload: ${wl.worktree.files} files, ${fmtMB(wl.worktree.bytes)} in worktree ` +
        `(node_modules ${wl.nodeModules.files} files, ${fmtMB(wl.nodeModules.bytes)})`,
    );
    if (wl.worktree.files < 20000 || wl.worktree.bytes < 200 * 1e6) {
      warn('the workload is smaller than the intended >= 20,000 files / >= 200 MB');
    }
    if (process.getuid?.() !== 0) warn('not running as root: overlay forks and the loop mount will fail');

    // Preflight: the image is sparse, but its pages live in tmp-base (RAM for /dev/shm).
    const maxForks = Math.max(...opts.counts);
    const need = (maxForks * (opts.modes.includes('copy') ? 1.3 : 0.2) + 2.5) * wl.repoDuBytes;
    const fsBase = statfsSync(opts.tmpBase);
    const avail = fsBase.bavail * fsBase.bsize;
    if (avail < need) {
      throw new BenchError(
        `${opts.tmpBase} has ${fmtMB(avail)} free; this run may write about ${fmtMB(need)} into the image. ` +
          'Use --tmp-base, fewer --counts or --modes without copy',
      );
    }
    if (parseSize(opts.imageSize) < need) {
      warn(`--image-size ${opts.imageSize} may be too small: about ${fmtMB(need)} is needed`);
    }

    if (!existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js'))) {
      throw new BenchError('dist/src/cli/main.js does not exist: run `npm run build` (npm run bench does it)');
    }
    results.cli = await cliInfo(opts.freezeCli);
    if (opts.freezeCli) cli = await freezeCli(runDir);

    log(`making a ${opts.imageSize} XFS image (reflink=1) at ${img}, mounted on ${mnt}`);
    await run('truncate', ['-s', opts.imageSize, img]);
    await run('mkfs.xfs', ['-q', '-m', 'reflink=1', img]);
    await run('mount', ['-o', 'loop', img, mnt]);
    mkdirSync(forksRoot());
    results.machine = await machineInfo(opts.tmpBase);
    const mi = await machineInfo(mnt);
    const xi = await run('xfs_info', [mnt], { allowFail: true });
    results.machine.benchFs = {
      fs: mi.fs,
      mkfs: (await run('mkfs.xfs', ['-V'], { allowFail: true })).stdout.trim(),
      reflink: /reflink=1/.test(xi.stdout),
      backing: `${opts.imageSize} sparse image in ${opts.tmpBase} (${results.machine.fs})`,
    };

    repo = join(mnt, 'repo');
    const cp = await run('cp', ['-a', wl.repo, repo]);
    results.setup.copyRepoSeconds = cp.seconds;
    await settle();
    const cap = await xet(['capture', '-m', 'bench forks', '--json']);
    snapshot = cap.json.snapshot;
    if (typeof snapshot !== 'string') throw new BenchError(`capture printed no snapshot: ${tail(cap.stdout, 500)}`);
    results.setup.captureSeconds = cap.seconds;
    results.setup.snapshot = snapshot;
    headCommit = (await git(repo, ['rev-parse', 'HEAD'])).stdout.trim();
    expectedStatus = (await git(repo, ['status', '--porcelain=v1', '-uall'])).stdout.trimEnd();
    const entries = readdirSync(repo)
      .filter((n) => n !== '.git')
      .sort();
    log(`workload copied to the XFS in ${fmtS(cp.seconds)}s; captured ${snapshot} in ${fmtS(cap.seconds)}s`);

    // ---- baselines ----------------------------------------------------------------
    const B = results.baselines;
    B.fullCopy = { what: 'cp -a --reflink=never <worktree without .git>', seconds: [], testSeconds: [], bytes: [] };
    B.cpA = { what: 'cp -a <worktree without .git> (reflinks on XFS)', seconds: [], testSeconds: [], bytes: [] };
    B.worktreeNpmCi = {
      what: 'git worktree add <dir> <HEAD commit> && npm ci --offline --ignore-scripts',
      addSeconds: [],
      npmSeconds: [],
      seconds: [],
      testSeconds: [],
      bytes: [],
      unavailable: opts.npmCi ? null : 'skipped (--no-npm-ci)',
    };
    const copyTree = async (key, extra, rep) => {
      const dst = join(mnt, `copy-${key}-${rep}`);
      mkdirSync(dst);
      const before = await dfUsed();
      const r = await run('cp', ['-a', ...extra, '-t', dst, ...entries], { cwd: repo, timeoutSec: opts.timeoutSec });
      const t = await testIn(dst);
      B[key].seconds.push(r.seconds);
      B[key].testSeconds.push(t);
      B[key].bytes.push((await dfUsed()) - before);
      rmrf(dst);
      await trim();
      log(`rep ${rep}: ${B[key].what}: ${fmtS(r.seconds)}s, test ${fmtS(t)}s, ${fmtMB(B[key].bytes.at(-1))}`);
    };
    for (let rep = 1; rep <= opts.reps; rep++) {
      try {
        await copyTree('fullCopy', ['--reflink=never'], rep);
        await copyTree('cpA', [], rep);
      } catch (e) {
        fail(`cp -a baseline rep ${rep}`, e);
      }
      const W = B.worktreeNpmCi;
      if (W.unavailable) continue;
      const wt = join(mnt, `worktree-${rep}`);
      try {
        const before = await dfUsed();
        const add = await git(repo, ['worktree', 'add', '-q', wt, headCommit]);
        const npm = await run(
          'npm',
          ['ci', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'],
          { cwd: wt, timeoutSec: opts.timeoutSec, allowFail: true },
        );
        if (npm.code !== 0 || npm.signal) {
          // Not retried: without the tarballs in npm's cache it would go to the network every rep.
          W.unavailable = `npm ci --offline failed (exit ${npm.code}${npm.signal ? `, ${npm.signal}` : ''}): ${tail(npm.stderr.trim() || npm.stdout.trim(), 800)}`;
          warn(`worktree + npm ci baseline unavailable: ${W.unavailable}`);
        } else {
          const t = await testIn(wt);
          W.addSeconds.push(add.seconds);
          W.npmSeconds.push(npm.seconds);
          W.seconds.push(add.seconds + npm.seconds);
          W.testSeconds.push(t);
          W.bytes.push((await dfUsed()) - before);
          log(
            `rep ${rep}: worktree add ${fmtS(add.seconds)}s + npm ci --offline ${fmtS(npm.seconds)}s, test ${fmtS(t)}s`,
          );
        }
      } catch (e) {
        fail(`worktree + npm ci baseline rep ${rep}`, e);
      }
      await git(repo, ['worktree', 'remove', '--force', wt], { allowFail: true });
      rmrf(wt);
      await git(repo, ['worktree', 'prune'], { allowFail: true });
      await trim();
    }

    // ---- forks, per mode ------------------------------------------------------------
    for (const mode of opts.modes) {
      const M = (results.modes[mode] = {
        baseBuild: mode === 'copy' ? null : { seconds: [], testSeconds: [] },
        testReady: { forkSeconds: [], testSeconds: [] },
        rounds: {},
        disk: {},
        discardSeconds: [],
      });
      try {
        await removeBase();
        const df0 = await dfUsed();
        M.disk.before = df0;
        let checked = false;

        // The first fork of the snapshot materialises its base: timed on its own, reps times.
        if (M.baseBuild) {
          for (let rep = 1; rep <= opts.reps; rep++) {
            if (rep > 1) await removeBase();
            const dir = forkDir(`${mode}-base`);
            const f = await fork(mode, dir, true);
            const t = await testIn(dir);
            M.baseBuild.seconds.push(f.seconds);
            M.baseBuild.testSeconds.push(t);
            log(`${mode} rep ${rep}: first fork (builds the base) ${fmtS(f.seconds)}s, test ${fmtS(t)}s`);
            if (!checked) {
              await checkFork(dir, mode);
              checked = true;
            }
            M.discardSeconds.push(await discard(dir));
            await trim();
          }
          M.disk.baseBytes = (await dfUsed()) - df0;
        }

        // Fork-to-test-ready with the base in place.
        for (let rep = 1; rep <= opts.reps; rep++) {
          const dir = forkDir(`${mode}-ready`);
          const f = await fork(mode, dir, M.baseBuild ? false : null);
          const t = await testIn(dir);
          M.testReady.forkSeconds.push(f.seconds);
          M.testReady.testSeconds.push(t);
          log(`${mode} rep ${rep}: fork ${fmtS(f.seconds)}s + test ${fmtS(t)}s`);
          if (!checked) {
            await checkFork(dir, mode);
            checked = true;
          }
          M.discardSeconds.push(await discard(dir));
          await trim();
        }

        // Rounds of N forks, created one after another; the base exists (it is in the df figures).
        for (const n of opts.counts) {
          const R = (M.rounds[n] = { forkSeconds: [], totalSeconds: [], diskBytes: null, forksListSeconds: null });
          const repeats = n === 1 ? opts.reps : 1;
          for (let k = 0; k < repeats; k++) {
            const dirs = [];
            try {
              for (let i = 0; i < n; i++) {
                const dir = forkDir(`${mode}-x${n}`);
                const f = await fork(mode, dir, M.baseBuild ? false : null);
                dirs.push(dir);
                R.forkSeconds.push(f.seconds);
              }
              R.totalSeconds.push(sum(R.forkSeconds.slice(-n)));
              if (k === 0) {
                R.diskBytes = (await dfUsed()) - df0;
                const l = await xet(['forks', '--json']);
                R.forksListSeconds = l.seconds;
                const live = l.json.forks ?? [];
                R.forksListBytes = live.map((x) => x.bytes);
                const bad = live.filter((x) => x.state !== 'active' || x.mode !== mode);
                if (live.length !== n || bad.length) {
                  problem(`after ${n} ${mode} forks, forks --json lists ${live.length}, not active: ${bad.length}`);
                }
                const ov = mountsUnder(forksRoot()).length;
                if (mode === 'overlay' && ov !== n) problem(`${n} overlay forks but ${ov} mounts under ${forksRoot()}`);
              }
              log(
                `${mode} x${n}: per fork ${fmtS(med(R.forkSeconds.slice(-n)))}s (median), ` +
                  `total ${fmtS(R.totalSeconds.at(-1))}s, df +${fmtMB(R.diskBytes)} (base included)`,
              );
            } finally {
              for (const dir of dirs) {
                try {
                  M.discardSeconds.push(await discard(dir));
                } catch (e) {
                  fail(`discard ${dir}`, e);
                }
              }
              await trim();
            }
          }
        }
        // Through the resident process: the same rounds, the daemon answering.
        if (mode === 'overlay') {
          M.daemon = {};
          await xet(['daemon', 'start', '--json']);
          try {
            for (const via of ['native', 'cli', 'socket']) {
              for (const n of opts.counts) {
                const R = ((M.daemon[via] ??= {})[n] = { forkSeconds: [], totalSeconds: [] });
                const repeats = n === 1 ? opts.reps : 1;
                for (let k = 0; k < repeats; k++) {
                  const dirs = [];
                  try {
                    for (let i = 0; i < n; i++) {
                      const dir = forkDir(`overlay-daemon-${via}-x${n}`);
                      const f = await forkViaDaemon(via, dir);
                      dirs.push(dir);
                      R.forkSeconds.push(f.seconds);
                    }
                    R.totalSeconds.push(sum(R.forkSeconds.slice(-n)));
                    if (k === 0) await checkFork(dirs[0], mode);
                    log(`overlay via daemon (${via}) x${n}: per fork ${fmtMs(med(R.forkSeconds.slice(-n)))}`);
                  } finally {
                    for (const dir of dirs) {
                      try {
                        M.discardSeconds.push(await discard(dir));
                      } catch (e) {
                        fail(`discard ${dir}`, e);
                      }
                    }
                    await trim();
                  }
                }
              }
            }
          } finally {
            await xet(['daemon', 'stop', '--json']);
          }
        }
        if (mode === 'overlay' && mountsUnder(forksRoot()).length) {
          problem(`overlay mounts left after discarding every fork: ${mountsUnder(forksRoot()).join(', ')}`);
        }
      } catch (e) {
        fail(`${mode} forks`, e);
        for (const f of await liveForks().catch(() => [])) await discard(f.dir).catch((e2) => fail('cleanup', e2));
      }
    }

    // ---- changes: 0, 1 and 10 modified files ------------------------------------------
    const vendorJs = (await git(repo, ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`])).stdout
      .split('\0')
      .filter((p) => p.endsWith('.js') && !Object.values(wl.wip).flat().includes(p))
      .sort();
    const edits = Array.from(
      { length: CHANGES_EDITS },
      (_, i) => vendorJs[Math.floor(((i + 0.5) * vendorJs.length) / CHANGES_EDITS)],
    );
    results.changes.files = edits;
    for (const mode of opts.modes) {
      const C = (results.changes[mode] = { edits0: [], edits1: [], edits10: [], gitStatus: {}, method: null });
      const dir = forkDir(`${mode}-changes`);
      try {
        await fork(mode, dir, null);
        // The first `changes` in a clone/copy fork can be the one that re-stats every file: recorded apart.
        await settle();
        C.first = (await xet(['changes', dir, '--json'])).seconds;
        const measure = async (key, expected) => {
          for (let rep = 1; rep <= opts.reps; rep++) {
            await settle();
            const r = await xet(['changes', dir, '--json']);
            C[key].push(r.seconds);
            C.method = r.json.method;
            const got = [...(r.json.added ?? []), ...(r.json.modified ?? []), ...(r.json.deleted ?? [])].sort();
            if (
              JSON.stringify(got) !== JSON.stringify([...expected].sort()) ||
              (r.json.modified ?? []).length !== expected.length
            ) {
              problem(`changes in ${mode} fork with ${expected.length} edits: ${JSON.stringify(r.json).slice(0, 600)}`);
            }
          }
          const gs = [];
          for (let rep = 1; rep <= opts.reps; rep++) {
            await settle();
            gs.push((await git(dir, ['status', '--porcelain'])).seconds);
          }
          C.gitStatus[key] = gs;
          log(
            `${mode}: changes with ${expected.length} modified: ${fmtMs(med(C[key]))} (git status ${fmtMs(med(gs))})`,
          );
        };
        await measure('edits0', []);
        appendFileSync(join(dir, edits[0]), '\n// bench fork edit\n');
        await measure('edits1', edits.slice(0, 1));
        for (const f of edits.slice(1)) appendFileSync(join(dir, f), '\n// bench fork edit\n');
        await measure('edits10', edits);
      } catch (e) {
        fail(`changes (${mode})`, e);
      }
      await discard(dir).catch((e) => fail(`discard ${dir}`, e));
      await trim();
    }
    const leftovers = await liveForks();
    if (leftovers.length) problem(`forks left at the end: ${leftovers.map((f) => f.dir).join(', ')}`);
  } catch (e) {
    fail('harness', e);
  } finally {
    results.finishedAt = new Date().toISOString();
    results.summary = summarize(results);
    printTables(results);
    if (!isStopping()) await writeResults(opts, results);
    cleanup();
    const left = mountsUnder(mnt);
    if (left.length) log(`WARNING: mounts left behind: ${left.join(', ')}`);
  }
  process.exitCode = results.errors.length || results.problems.length ? 1 : 0;
}

// ---------------------------------------------------------------------------
// Summary and tables
// ---------------------------------------------------------------------------

function summarize(results) {
  const B = results.baselines;
  const full = med(B.fullCopy?.seconds);
  const cpA = med(B.cpA?.seconds);
  const npm = med(B.worktreeNpmCi?.seconds);
  const copyBytes = med(B.fullCopy?.bytes);
  const creation = [];
  const testReady = [];
  const disk = [];
  const baseRows = [];
  for (const [mode, M] of Object.entries(results.modes)) {
    if (M.baseBuild?.seconds.length) {
      const s = med(M.baseBuild.seconds);
      creation.push({ label: `${mode}: first fork (builds the base)`, n: 1, perFork: s, total: s });
      testReady.push({
        label: `${mode} fork + test, first fork (base built)`,
        seconds: med(M.baseBuild.seconds.map((x, i) => x + M.baseBuild.testSeconds[i])),
      });
    }
    for (const [n, R] of Object.entries(M.rounds)) {
      const row = {
        label: `${mode}: ${n} fork${n === '1' ? '' : 's'}${M.baseBuild ? ', base exists' : ''}`,
        mode,
        n: Number(n),
        perFork: med(R.forkSeconds),
        total: med(R.totalSeconds),
      };
      if (mode === 'overlay' && n === '1') {
        row.goal = GOALS.overlayCreateVsCp;
        row.status = verdict(ratio(row.perFork, full), row.goal);
      }
      creation.push(row);
      const base = M.disk.baseBytes ?? 0;
      const d = {
        label: `${mode}: ${n} fork${n === '1' ? '' : 's'}${M.baseBuild ? ', base included' : ''}`,
        mode,
        n: Number(n),
        bytes: R.diskBytes,
        withoutBase: R.diskBytes == null ? null : R.diskBytes - base,
      };
      if (mode === 'overlay' && n === '16') d.goal = GOALS.overlayDisk16VsCopy;
      if (mode === 'clone' && n === '4') d.goal = GOALS.cloneDisk4VsCopy;
      if (d.goal != null) d.status = verdict(ratio(d.bytes, copyBytes), d.goal);
      disk.push(d);
    }
    for (const [via, rounds] of Object.entries(M.daemon ?? {})) {
      for (const [n, R] of Object.entries(rounds)) {
        const row = {
          label: `${mode} via daemon (${{ native: 'git xet fork', cli: 'node bin/git-xet fork', socket: 'its socket' }[via]}): ${n} fork${n === '1' ? '' : 's'}`,
          mode,
          n: Number(n),
          perFork: med(R.forkSeconds),
          total: med(R.totalSeconds),
        };
        if (n === '1') {
          row.goal = via === 'socket' ? GOALS.overlayDaemonVsCp : GOALS.overlayCreateVsCp;
          row.status = verdict(ratio(row.perFork, full), row.goal);
        }
        creation.push(row);
      }
    }
    if (M.testReady.forkSeconds.length) {
      testReady.push({
        label: `${mode} fork + test, base exists`,
        seconds: med(M.testReady.forkSeconds.map((x, i) => x + M.testReady.testSeconds[i])),
      });
    }
    if (M.baseBuild) baseRows.push({ label: `${mode}: the base alone`, mode, n: 0, bytes: M.disk.baseBytes });
  }
  for (const r of creation) {
    r.vsFullCopy = ratio(r.perFork, full);
    r.vsCpA = ratio(r.perFork, cpA);
    r.vsNpm = ratio(r.perFork, npm);
  }
  const sumTest = (b) => (b?.seconds.length ? med(b.seconds.map((x, i) => x + b.testSeconds[i])) : null);
  const tr = {
    fullCopy: sumTest(B.fullCopy),
    cpA: sumTest(B.cpA),
    npm: sumTest(B.worktreeNpmCi),
    test: med(B.fullCopy?.testSeconds),
  };
  for (const r of testReady) {
    r.vsFullCopy = ratio(r.seconds, tr.fullCopy);
    r.vsCpA = ratio(r.seconds, tr.cpA);
    r.vsNpm = ratio(r.seconds, tr.npm);
  }
  disk.unshift(...baseRows);
  for (const d of disk) d.vsCopy = ratio(d.bytes, copyBytes);

  const changes = [];
  const scan = results.changes.clone ? med(results.changes.clone.edits10) : null;
  for (const mode of Object.keys(results.changes).filter((k) => MODES.includes(k))) {
    const C = results.changes[mode];
    const [c0, c1, c10] = [med(C.edits0), med(C.edits1), med(C.edits10)];
    const row = { mode, method: C.method, first: C.first ?? null, c0, c1, c10, ratio10to1: ratio(c10, c1) };
    row.gitStatus10 = med(C.gitStatus?.edits10);
    if (mode === 'overlay') {
      row.vsScan = ratio(c10, scan);
      const ok =
        row.ratio10to1 != null &&
        row.ratio10to1 <= GOALS.overlayChanges10vs1 &&
        (row.vsScan == null || row.vsScan <= GOALS.overlayChangesVsScan);
      row.status = row.ratio10to1 == null ? 'not run' : ok ? 'PASS' : 'FAIL';
    }
    changes.push(row);
  }
  return {
    baselines: {
      fullCopySeconds: full,
      cpASeconds: cpA,
      worktreeNpmCiSeconds: npm,
      worktreeNpmCiUnavailable: B.worktreeNpmCi?.unavailable ?? null,
      fullCopyBytes: copyBytes,
      cpABytes: med(B.cpA?.bytes),
      worktreeNpmCiBytes: med(B.worktreeNpmCi?.bytes),
      testReady: tr,
    },
    creation,
    testReady,
    disk,
    changes,
  };
}

function printTables(results) {
  const s = results.summary;
  const b = s.baselines;
  const out = ['', 'git xet fork benchmark'];
  const w = results.workload;
  if (w) {
    out.push(
      `workload: ${w.worktree.files} files + ${w.worktree.symlinks} symlinks, ${fmtMB(w.worktree.bytes)} in worktree ` +
        `(node_modules ${w.nodeModules.files} files); snapshot ${results.setup.snapshot ?? '-'}`,
    );
  }
  const m = results.machine;
  if (m) {
    out.push(
      `machine: ${m.nproc} cores, ${fmtMB(m.memBytes)} RAM, kernel ${m.kernel}; forks on ${m.benchFs?.fs} ` +
        `(reflink=${m.benchFs?.reflink ? 1 : 0}), ${m.benchFs?.backing}`,
    );
  }
  out.push(
    `median of ${results.config.reps} (single forks and baselines); rounds of N forks are created one after another, ` +
      'sync before each; page cache warm',
  );
  const npmNote = b.worktreeNpmCiUnavailable ? ` (unavailable: ${b.worktreeNpmCiUnavailable.split('\n')[0]})` : '';
  out.push(
    `baselines: cp -a --reflink=never ${fmtS(b.fullCopySeconds)}s (${fmtMB(b.fullCopyBytes)}), ` +
      `cp -a ${fmtS(b.cpASeconds)}s (${fmtMB(b.cpABytes)}, reflinked), ` +
      `git worktree add + npm ci --offline ${fmtS(b.worktreeNpmCiSeconds)}s${npmNote}`,
  );
  out.push('');
  out.push('Fork creation (seconds per fork; ratios to one copy / one worktree+npm ci)');
  out.push(
    ...table(
      ['measurement', 'per fork s', 'total s', 'vs cp -a full', 'vs cp -a reflink', 'vs wt+npm ci', 'goal', 'result'],
      s.creation.map((r) => [
        r.label,
        fmtS(r.perFork),
        fmtS(r.total),
        fmtX(r.vsFullCopy),
        fmtX(r.vsCpA),
        fmtX(r.vsNpm),
        r.goal != null ? `<= ${r.goal}x cp -a full` : '-',
        r.status ?? 'info',
      ]),
    ),
  );
  out.push('');
  out.push(`Fork-to-test-ready (make the tree, then the test: node requiring react, express, typescript, ... )`);
  const tr = b.testReady;
  out.push(
    ...table(
      ['measurement', 'seconds', 'vs cp -a full + test', 'vs cp -a + test', 'vs wt+npm ci + test'],
      [
        ...s.testReady.map((r) => [r.label, fmtS(r.seconds), fmtX(r.vsFullCopy), fmtX(r.vsCpA), fmtX(r.vsNpm)]),
        ['cp -a --reflink=never + test', fmtS(tr.fullCopy), '', '', ''],
        ['cp -a + test', fmtS(tr.cpA), '', '', ''],
        ['git worktree add + npm ci + test', fmtS(tr.npm), '', '', ''],
        ['(the test alone, in the copy)', fmtS(tr.test), '', '', ''],
      ],
    ),
  );
  out.push('');
  out.push(
    `Disk (df used bytes of the XFS after sync, delta from before the base) vs one full copy ${fmtMB(b.fullCopyBytes)}`,
  );
  out.push(
    ...table(
      ['measurement', 'df delta', 'vs one copy', 'without base', 'goal', 'result'],
      s.disk.map((d) => [
        d.label,
        fmtMB(d.bytes),
        fmtX(d.vsCopy),
        d.n && d.withoutBase != null && d.mode !== 'copy' ? fmtMB(d.withoutBase) : '',
        d.goal != null ? `<= ${d.goal}x` : '-',
        d.status ?? 'info',
      ]),
    ),
  );
  out.push('');
  out.push(`changes (${CHANGES_EDITS} vs 1 modified files, appended to tracked vendor/ files)`);
  out.push(
    ...table(
      ['fork', 'method', 'first call', '0 edits', '1 edit', '10 edits', '10 vs 1', 'git status (10)', 'goal', 'result'],
      s.changes.map((c) => [
        c.mode,
        c.method ?? '-',
        fmtMs(c.first),
        fmtMs(c.c0),
        fmtMs(c.c1),
        fmtMs(c.c10),
        fmtX(c.ratio10to1),
        fmtMs(c.gitStatus10),
        c.mode === 'overlay'
          ? `10/1 <= ${GOALS.overlayChanges10vs1}x, <= ${GOALS.overlayChangesVsScan}x clone scan (${fmtX(c.vsScan)})`
          : '-',
        c.status ?? 'info',
      ]),
    ),
  );
  printReport(out, results);
}

start(main);
