#!/usr/bin/env node
// git xet storage and gc benchmarks (issue 9, "Speed and storage").
//
//   npm run bench               (= … && node bench/gc.mjs)
//   node bench/gc.mjs --help    (options)
//
// The tree: a small app repository (the user's own history: 3 commits) with a fixed node_modules,
// ignored (a subset of the Node workload's, bench/lib/workload.mjs), and vendor/eslint/, untracked,
// where each state unpacks the next of 100 consecutive eslint releases (7.0.0 … 9.1.0, `npm pack`ed
// once into bench/work/cache/packs/, git-ignored). Everything a run creates lives in
// <tmp-base>/xet-bench-gc-<pid>/ (default /dev/shm), removed at exit, on SIGINT/SIGTERM too.
//
//   history   100 states, `git xet capture` after each: growth of the repository (du -sb .git, and
//             git count-objects -v size-pack) vs the sum of a `tar | zstd -1` of each state. ≤ 0.05x.
//   drop      `git xet drop` 90 of them (all but every 10th), `git xet gc --grace 0`: the repository vs
//             one holding only the retained 10 and the user's history, built in the same run (a
//             copy of the app repository, the 10 states captured into it, then the same gc). ≤ 1.1x.
//   many      1,000 snapshots of one state with a one-line change between them: `git xet gc` vs
//             `git gc` on a copy of the same repository, ≤ 2x; `git xet gc --dry-run` ≤ 1 s. A capture
//             takes about 2 s here, so only the first --many-captured (20) are captures: the others
//             are derived from them, one `git fast-import` each (one pack each, rolled up past 50 as a capture does):
//             the captured snapshot's tree and parents, its files/NOTES.md changed by one line, a
//             committer time one second later, and its own refs/xet/snapshots/<oid>.
//
// A command that does not exist yet (drop and gc are being written) is reported as missing and the
// measurements that need it are skipped. Results: tables on stdout and bench/gc-results.json.

import { appendFileSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join, relative } from 'node:path';
import {
  BenchError,
  GIT_ENV,
  ROOT,
  WORK,
  compare,
  fmtMB,
  fmtMs,
  fmtS,
  fmtX,
  git,
  loadNoter,
  isStopping,
  log,
  med,
  openRunDir,
  parseArgs,
  printReport,
  quote,
  recorder,
  repeat,
  runCpu,
  setUpCli,
  rmrf,
  run,
  settle,
  sh,
  start,
  sum,
  table,
  verdict,
  writeResults,
  xetRunner,
} from './lib/harness.mjs';
import { ensureWorkload } from './lib/workload.mjs';

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

const RECIPE = 'gc-v1';
const PACKAGE = 'eslint';
// 100 consecutive releases (every x.y.z release from 7.0.0 to 9.1.0, as `npm view eslint versions`
// lists them): written out so the workload does not depend on what the registry publishes next.
const VERSIONS = (
  '7.0.0 7.1.0 7.2.0 7.3.0 7.3.1 7.4.0 7.5.0 7.6.0 7.7.0 7.8.0 7.8.1 7.9.0 7.10.0 7.11.0 7.12.0 7.12.1 ' +
  '7.13.0 7.14.0 7.15.0 7.16.0 7.17.0 7.18.0 7.19.0 7.20.0 7.21.0 7.22.0 7.23.0 7.24.0 7.25.0 7.26.0 ' +
  '7.27.0 7.28.0 7.29.0 7.30.0 7.31.0 7.32.0 8.0.0 8.0.1 8.1.0 8.2.0 8.3.0 8.4.0 8.4.1 8.5.0 8.6.0 8.7.0 ' +
  '8.8.0 8.9.0 8.10.0 8.11.0 8.12.0 8.13.0 8.14.0 8.15.0 8.16.0 8.17.0 8.18.0 8.19.0 8.20.0 8.21.0 ' +
  '8.22.0 8.23.0 8.23.1 8.24.0 8.25.0 8.26.0 8.27.0 8.28.0 8.29.0 8.30.0 8.31.0 8.32.0 8.33.0 8.34.0 ' +
  '8.35.0 8.36.0 8.37.0 8.38.0 8.39.0 8.40.0 8.41.0 8.42.0 8.43.0 8.44.0 8.45.0 8.46.0 8.47.0 8.48.0 ' +
  '8.49.0 8.50.0 8.51.0 8.52.0 8.53.0 8.54.0 8.55.0 8.56.0 8.57.0 8.57.1 9.0.0 9.1.0'
).split(' ');
// The fixed node_modules: these top-level entries of the Node workload's (about 70 MB, 15,000 files).
const NODE_MODULES = ['@babel', '@emotion', '@mui', 'express', 'lodash', 'react', 'react-dom', 'rxjs', 'scheduler'];
const PACKS = join(WORK, 'cache', 'packs');

const GOALS = {
  // repository growth over 100 captures vs the sum of tar | zstd -1 of each state
  historyGrowth: 0.05,
  // after drop 90 + gc --grace 0: the repository vs one holding only the retained 10 (+ history)
  afterDropVsRetained: 1.1,
  // git xet gc of 1,000 snapshots vs git gc on a copy of the same repository, wall time
  gcVsGitGc: 2.0,
  // git xet gc --dry-run with 1,000 snapshots, seconds
  dryRunSeconds: 1.0,
};

const ARGS = {
  script: 'bench/gc.mjs',
  results: 'gc-results.json',
  common: {
    reps: 3,
    tmpBase: '/dev/shm',
    rebuildWorkload: false,
    timeoutSec: 1800,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'repetitions of the timed gc steps (each on a fresh copy), median reported (default 3)',
    tmpBase: 'where the run dir goes (default /dev/shm)',
  },
  options: [
    {
      flag: '--states',
      key: 'states',
      arg: 'N',
      default: VERSIONS.length,
      help: `releases to capture in the history part (default ${VERSIONS.length}, at most that)`,
      parse: (v) => Math.max(2, Math.min(VERSIONS.length, Math.floor(Number(v)) || 0)),
    },
    {
      flag: '--keep-every',
      key: 'keepEvery',
      arg: 'K',
      default: 10,
      help: 'retain every K-th snapshot of the history, drop the others (default 10)',
      parse: (v) => Math.max(1, Math.floor(Number(v)) || 1),
    },
    {
      flag: '--many',
      key: 'many',
      arg: 'N',
      default: 1000,
      help: 'snapshots of the gc-time part (default 1000; 0 skips it)',
      parse: (v) => Math.max(0, Math.floor(Number(v)) || 0),
    },
    {
      flag: '--many-captured',
      key: 'manyCaptured',
      arg: 'N',
      default: 20,
      help: 'of those, how many are real captures (default 20; the rest are derived from them)',
      parse: (v) => Math.max(1, Math.floor(Number(v)) || 1),
    },
    { flag: '--no-history', key: 'history', default: true, help: 'skip the history and drop parts' },
  ],
};

// ---------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------

/** The release tarballs, fetched once with one `npm pack` for all that are missing. */
async function ensurePacks(versions) {
  mkdirSync(PACKS, { recursive: true });
  const tgz = (v) => join(PACKS, `${PACKAGE}-${v}.tgz`);
  const missing = versions.filter((v) => !existsSync(tgz(v)));
  if (missing.length) {
    log(`npm pack ${missing.length} ${PACKAGE} releases into ${relative(ROOT, PACKS)}`);
    await run('npm', ['pack', '--silent', ...missing.map((v) => `${PACKAGE}@${v}`)], {
      cwd: PACKS,
      timeoutSec: 1800,
    });
    for (const v of missing) if (!existsSync(tgz(v))) throw new BenchError(`npm pack did not produce ${tgz(v)}`);
  }
  return tgz;
}

/** The app repository with its history and the fixed node_modules, cached in bench/work/gc-<key>/. */
async function ensureApp(opts) {
  const wl = await ensureWorkload(opts);
  const key = createHash('sha256')
    .update(`${RECIPE}\0${NODE_MODULES.join(',')}\0${wl.key}`)
    .digest('hex')
    .slice(0, 16);
  const dir = join(WORK, `gc-${key}`);
  const repo = join(dir, 'repo');
  const ready = join(dir, 'READY.json');
  for (const name of readdirSync(WORK)) {
    if (name.startsWith('gc-') && name !== `gc-${key}`) rmrf(join(WORK, name));
  }
  if (existsSync(ready) && !opts.rebuildWorkload) {
    log(`reusing the gc workload ${relative(ROOT, repo)}`);
    return { ...JSON.parse(readFileSync(ready, 'utf8')), repo };
  }
  rmrf(dir);
  mkdirSync(repo, { recursive: true });
  await git(repo, ['init', '-q', '-b', 'main']);
  for (const [k, v] of [
    ['user.name', 'Bench Author'],
    ['user.email', 'bench@example.invalid'],
    ['commit.gpgsign', 'false'],
    ['gc.auto', '0'],
  ]) {
    await git(repo, ['config', k, v]);
  }
  const commit = async (msg, day) => {
    const date = `2024-02-0${day}T12:00:00Z`;
    await git(repo, ['add', '-A']);
    await run('git', ['commit', '-q', '--no-verify', '-m', msg], {
      cwd: repo,
      env: { ...GIT_ENV, GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date },
    });
  };
  writeFileSync(join(repo, '.gitignore'), 'node_modules/\n');
  writeFileSync(join(repo, 'package.json'), JSON.stringify({ name: 'gc-bench-app', private: true }, null, 2) + '\n');
  writeFileSync(join(repo, 'README.md'), '# gc bench app\n\nvendor/eslint/ holds the release under test.\n');
  await commit('app skeleton', 1);
  mkdirSync(join(repo, 'src'));
  writeFileSync(join(repo, 'src', 'index.js'), "module.exports = require('./lint');\n");
  writeFileSync(join(repo, 'src', 'lint.js'), "module.exports = () => require('../vendor/eslint');\n");
  await commit('src: entry points', 2);
  appendFileSync(join(repo, 'README.md'), '\nRun `node src/index.js`.\n');
  await commit('README: usage', 3);
  mkdirSync(join(repo, 'node_modules'));
  for (const name of NODE_MODULES) {
    cpSync(join(wl.repo, 'node_modules', name), join(repo, 'node_modules', name), {
      recursive: true,
      verbatimSymlinks: true,
    });
  }
  const nm = await run('du', ['-sb', join(repo, 'node_modules')]);
  const files = await sh(`find ${quote(join(repo, 'node_modules'))} -type f | wc -l`);
  const info = {
    key,
    nodeModules: { entries: NODE_MODULES, bytes: Number(nm.stdout.split(/\s/)[0]), files: Number(files.stdout) },
    commits: 3,
  };
  writeFileSync(ready, JSON.stringify(info, null, 2) + '\n');
  log(`gc workload built: node_modules ${info.nodeModules.files} files, ${fmtMB(info.nodeModules.bytes)}`);
  return { ...info, repo };
}

// ---------------------------------------------------------------------------
// Measuring a repository
// ---------------------------------------------------------------------------

/** The sizes of a repository's git dir: du -sb of all of it, and what count-objects -v says. */
async function repoSize(repo) {
  await settle();
  const du = await run('du', ['-sb', join(repo, '.git')]);
  const co = await git(repo, ['count-objects', '-v']);
  const f = Object.fromEntries(
    co.stdout
      .trim()
      .split('\n')
      .map((l) => l.split(': '))
      .map(([k, v]) => [k, Number(v)]),
  );
  const xetDir = join(repo, '.git', 'xet');
  const xet = existsSync(xetDir) ? Number((await run('du', ['-sb', xetDir])).stdout.split(/\s/)[0]) : 0;
  return {
    duBytes: Number(du.stdout.split(/\s/)[0]),
    sizePackBytes: f['size-pack'] * 1024,
    looseBytes: f.size * 1024,
    packs: f.packs,
    looseObjects: f.count,
    xetDirBytes: xet,
  };
}
/** A command's JSON for the results file: every list longer than 10 becomes its length and first 3. */
const brief = (v) =>
  Array.isArray(v)
    ? v.length > 10
      ? { count: v.length, first: v.slice(0, 3).map(brief) }
      : v.map(brief)
    : v && typeof v === 'object'
      ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, brief(x)]))
      : v;
const delta = (a, b) => Object.fromEntries(Object.keys(b).map((k) => [k, b[k] - a[k]]));

/** Bytes of `tar | zstd -1` of the worktree without .git (the alternative: one archive per state). */
async function tarZstdBytes(repo) {
  const r = await sh(`tar -C ${quote(repo)} --exclude=./.git -cf - . | zstd -1 -T0 -q -c | wc -c`);
  return Number(r.stdout.trim());
}

async function layRelease(repo, tgz) {
  const vendor = join(repo, 'vendor', PACKAGE);
  rmrf(vendor);
  mkdirSync(vendor, { recursive: true });
  await run('tar', ['-xzf', tgz, '-C', vendor, '--strip-components=1']);
}

/**
 * Makes count snapshots from the captured ones (round robin), each with one `git fast-import`
 * (so one pack, as a capture writes one, rolled up past 50 packs as a capture does): the base's parents, author and message, its top-level
 * tree entries, files/NOTES.md with one more line, a committer time one second after the previous
 * one; then refs/xet/snapshots/<oid> for all of them in one `git update-ref --stdin`. Returns count.
 */
async function deriveSnapshots(repo, bases, count) {
  const info = [];
  for (const oid of bases) {
    const raw = (await git(repo, ['cat-file', 'commit', oid])).stdout;
    const [head, ...msg] = raw.split('\n\n');
    const lines = head.split('\n');
    const field = (k) => lines.filter((l) => l.startsWith(`${k} `)).map((l) => l.slice(k.length + 1));
    const entries = (await git(repo, ['ls-tree', '-z', oid])).stdout.split('\0').filter(Boolean);
    const notes = (await git(repo, ['cat-file', 'blob', `${oid}:files/NOTES.md`])).stdout;
    info.push({
      parents: field('parent'),
      author: field('author')[0],
      committer: field('committer')[0],
      message: msg.join('\n\n'),
      entries,
      notes,
    });
  }
  const marks = join(repo, '.git', 'bench-derive.marks');
  const packDir = join(repo, '.git', 'objects', 'pack');
  const refs = [];
  let time = Math.floor(Date.now() / 1000) - count;
  for (let i = 0; i < count; i++) {
    const b = info[i % info.length];
    const when = (who) => who.replace(/ \d+ ([+-]\d{4})$/, ` ${time} $1`);
    time++;
    const notes = `${b.notes}- derived ${i + 1}\n`;
    const msg = Buffer.from(b.message);
    const stream = [
      `commit refs/bench-derive/${i}`,
      'mark :1',
      `author ${b.author}`,
      `committer ${when(b.committer)}`,
      `data ${msg.length}`,
      b.message,
      ...(b.parents.length ? [`from ${b.parents[0]}`, ...b.parents.slice(1).map((p) => `merge ${p}`)] : []),
      'deleteall',
      ...b.entries.map((e) => {
        const [meta, path] = e.split('\t');
        const [mode, , oid] = meta.split(' ');
        return `M ${mode} ${oid} ${path}`;
      }),
      'M 100644 inline files/NOTES.md',
      `data ${Buffer.byteLength(notes)}`,
      notes,
      '',
    ].join('\n');
    await run('git', ['-c', 'fastimport.unpackLimit=0', 'fast-import', '--quiet', `--export-marks=${marks}`], {
      cwd: repo,
      env: GIT_ENV,
      input: stream,
    });
    const oid = readFileSync(marks, 'utf8').trim().split(' ')[1];
    refs.push({ tmp: `refs/bench-derive/${i}`, oid });
    // What a capture does after writing its pack (consolidatePacks in src/snapshot/capture.ts):
    // past 50 packs, git's geometric repack rolls up the small ones.
    if (readdirSync(packDir).filter((n) => n.endsWith('.idx')).length > 50) {
      await git(repo, ['repack', '-d', '-q', '--geometric=2', '--no-write-bitmap-index']);
    }
  }
  rmrf(marks);
  const tx =
    refs.flatMap((r) => [`create refs/xet/snapshots/${r.oid} ${r.oid}`, `delete ${r.tmp} ${r.oid}`]).join('\n') + '\n';
  await git(repo, ['update-ref', '--stdin'], { input: tx });
  return count;
}

// ---------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const { dir: runDir, cleanup } = openRunDir(opts.tmpBase, 'xet-bench-gc-', { keep: opts.keep });

  const results = {
    startedAt: new Date().toISOString(),
    machine: null,
    config: {
      reps: opts.reps,
      goals: GOALS,
      package: PACKAGE,
      versions: VERSIONS.slice(0, opts.states),
      keepEvery: opts.keepEvery,
      many: opts.many,
      tmpBase: opts.tmpBase,
    },
    workload: null,
    cli: null,
    commands: {},
    history: null,
    drop: null,
    many: null,
    load: [],
  };
  const { fail, warn, problem } = recorder(results);
  const noteLoad = loadNoter(results);

  let cli = join(ROOT, 'bin', 'git-xet');
  const xet = xetRunner(() => cli, opts);
  /** Whether the CLI knows a command (drop and gc arrive on main while this is written). */
  let commandList = null;
  const has = async (cmd) => {
    commandList ??= (await run(process.execPath, [cli, '--help'], { allowFail: true })).stdout;
    return new RegExp(`^  ${cmd}\\b`, 'm').test(commandList);
  };
  const capture = async (repo, msg) => {
    await settle();
    const r = await xet(repo, ['capture', '-m', msg, '--json']);
    const id = r.json?.snapshot;
    if (typeof id !== 'string' || !/^[0-9a-f]{40,64}$/.test(id)) {
      throw new BenchError(`capture printed no snapshot id: ${r.stdout.slice(0, 500)}`);
    }
    return { id, seconds: r.seconds };
  };
  const snapshotRefs = async (repo) =>
    (await git(repo, ['for-each-ref', '--format=%(refname)', 'refs/xet/snapshots/'])).stdout.split('\n').filter(Boolean)
      .length;
  /** Untimed: git fsck is clean and the given snapshot restores and verifies. */
  const checkRepo = async (repo, snapshot, what) => {
    const fsck = await git(repo, ['fsck', '--no-progress', '--no-dangling'], { allowFail: true, timeoutSec: 900 });
    if (fsck.code !== 0) problem(`git fsck after ${what}: exit ${fsck.code}: ${fsck.stderr.slice(0, 800)}`);
    if (!snapshot) return;
    const dest = join(runDir, `check-${Date.now()}`);
    try {
      await xet(repo, ['restore', snapshot, dest, '--json']);
      await xet(repo, ['verify', snapshot, dest, '--json']);
    } catch (e) {
      problem(`after ${what}: snapshot ${snapshot} does not restore and verify:\n${e.message}`);
    }
    rmrf(dest);
  };

  try {
    noteLoad('start');
    const app = await ensureApp(opts);
    const versions = VERSIONS.slice(0, opts.states);
    const tgz = await ensurePacks(opts.history ? versions : versions.slice(0, 1));
    results.workload = {
      repo: relative(ROOT, app.repo),
      nodeModules: app.nodeModules,
      userCommits: app.commits,
      package: PACKAGE,
      versions: `${versions[0]} … ${versions.at(-1)} (${versions.length})`,
    };
    if (!existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js'))) {
      throw new BenchError('dist/src/cli/main.js does not exist: run `npm run build` (npm run bench does it)');
    }
    cli = await setUpCli(opts, runDir, results);
    for (const c of ['capture', 'drop', 'gc', 'pin']) results.commands[c] = await has(c);
    const missing = Object.entries(results.commands)
      .filter(([, ok]) => !ok)
      .map(([c]) => c);
    if (missing.length) warn(`git xet has no ${missing.join(', ')} command yet: the parts that need it are skipped`);
    const C = results.commands;

    // ---- history: 100 states, one capture each ----------------------------------------------------
    if (opts.history) {
      const H = (results.history = { states: [], before: null, after: null });
      const repo = join(runDir, 'history');
      await run('cp', ['-a', app.repo, repo]);
      H.before = await repoSize(repo);
      for (const [i, v] of versions.entries()) {
        await layRelease(repo, tgz(v));
        const tz = await tarZstdBytes(repo);
        const c = await capture(repo, `${PACKAGE} ${v}`);
        H.states.push({ version: v, snapshot: c.id, captureSeconds: c.seconds, tarZstdBytes: tz });
        if ((i + 1) % 10 === 0 || i === 0) {
          log(`history ${i + 1}/${versions.length}: ${PACKAGE} ${v} captured in ${fmtS(c.seconds)}s`);
        }
      }
      H.after = await repoSize(repo);
      H.growth = delta(H.before, H.after);
      H.tarZstdSumBytes = sum(H.states.map((s) => s.tarZstdBytes));
      H.snapshotRefs = await snapshotRefs(repo);
      if (H.snapshotRefs !== versions.length) {
        problem(`${versions.length} captures but ${H.snapshotRefs} snapshot refs`);
      }
      noteLoad('history');
      if (C.gc) {
        const d = await repeat(opts.reps, async () => (await xet(repo, ['gc', '--dry-run', '--json'])).seconds);
        H.dryRunSeconds = d;
      }

      // ---- drop all but every K-th, gc --grace 0, vs a repository of only those -------------------
      if (C.drop && C.gc) {
        const D = (results.drop = {});
        const kept = H.states.filter((_, i) => (i + 1) % opts.keepEvery === 0);
        const dropped = H.states.filter((_, i) => (i + 1) % opts.keepEvery !== 0);
        D.kept = kept.map((s) => s.version);
        D.dropped = dropped.length;
        await settle();
        const dr = await xet(repo, ['drop', ...dropped.map((s) => s.snapshot), '--json']);
        D.dropSeconds = dr.seconds;
        await settle();
        const gc = await xet(repo, ['gc', '--grace', '0', '--json'], { cpu: true });
        D.gcSeconds = gc.seconds;
        D.gcCpuSeconds = gc.cpuSeconds;
        D.gcJson = brief(gc.json);
        D.after = await repoSize(repo);
        D.snapshotRefs = await snapshotRefs(repo);
        if (D.snapshotRefs !== kept.length)
          problem(`after drop + gc: ${D.snapshotRefs} snapshot refs, expected ${kept.length}`);
        log(
          `drop ${dropped.length} ${fmtS(dr.seconds)}s, gc --grace 0 ${fmtS(gc.seconds)}s: .git ${fmtMB(D.after.duBytes)}`,
        );
        await checkRepo(repo, kept.at(-1).snapshot, 'drop + gc --grace 0');
        // With the grace at 0 the dropped snapshots' own commits must be gone from the object store.
        const left = await git(repo, ['cat-file', '--batch-check'], {
          input: dropped.map((x) => x.snapshot).join('\n') + '\n',
        });
        D.droppedCommitsLeft = left.stdout.split('\n').filter((l) => l && !l.endsWith(' missing')).length;
        if (D.droppedCommitsLeft)
          warn(`after gc --grace 0, ${D.droppedCommitsLeft} dropped snapshot commits still exist`);

        // The baseline: the user's history and only the retained states, captured in order.
        const base = join(runDir, 'retained-only');
        await run('cp', ['-a', app.repo, base]);
        for (const s of kept) {
          await layRelease(base, tgz(s.version));
          await capture(base, `${PACKAGE} ${s.version}`);
        }
        D.baselineCaptured = await repoSize(base);
        // The same gc, so both sides are packed alike (nothing to drop there).
        const bgc = await xet(base, ['gc', '--grace', '0', '--json']);
        D.baselineGcSeconds = bgc.seconds;
        D.baseline = await repoSize(base);
        log(`baseline (${kept.length} captures, then gc): .git ${fmtMB(D.baseline.duBytes)}`);
        rmrf(base);
        noteLoad('drop');
      }
      if (!opts.keep) rmrf(repo);
    }

    // ---- many: 1,000 snapshots, gc vs git gc, dry-run ------------------------------------------------
    if (opts.many && C.capture) {
      const N = (results.many = { snapshots: opts.many, captureSeconds: [] });
      const repo = join(runDir, 'many');
      await run('cp', ['-a', app.repo, repo]);
      await layRelease(repo, tgz(versions[0]));
      const note = join(repo, 'NOTES.md');
      const captured = [];
      N.captured = Math.min(opts.manyCaptured, opts.many);
      for (let i = 1; i <= N.captured; i++) {
        appendFileSync(note, `- note ${i}\n`);
        const c = await capture(repo, `note ${i}`);
        captured.push(c.id);
        N.captureSeconds.push(c.seconds);
      }
      log(`many: ${N.captured} captures (median ${fmtS(med(N.captureSeconds))}s); deriving ${opts.many - N.captured}`);
      const t0 = Date.now();
      N.derived = await deriveSnapshots(repo, captured, opts.many - N.captured);
      N.deriveSeconds = (Date.now() - t0) / 1000;
      N.size = await repoSize(repo);
      N.snapshotRefs = await snapshotRefs(repo);
      if (N.snapshotRefs !== opts.many) problem(`${opts.many} snapshots made but ${N.snapshotRefs} snapshot refs`);
      noteLoad('many: captures');
      if (C.gc) {
        N.dryRunCpuSeconds = [];
        N.dryRunSeconds = await repeat(opts.reps, async () => {
          await settle();
          const r = await xet(repo, ['gc', '--dry-run', '--json'], { cpu: true });
          N.dryRunJson ??= brief(r.json);
          N.dryRunCpuSeconds.push(r.cpuSeconds);
          return r.seconds;
        });
        log(`gc --dry-run with ${opts.many} snapshots: ${fmtMs(med(N.dryRunSeconds))}`);
        N.gcSeconds = [];
        N.gitGcSeconds = [];
        N.gcCpuSeconds = [];
        N.gitGcCpuSeconds = [];
        for (let rep = 1; rep <= opts.reps; rep++) {
          // Interleaved, each on its own copy of the untouched repository.
          const a = join(runDir, `many-xet-${rep}`);
          const b = join(runDir, `many-git-${rep}`);
          await run('cp', ['-a', repo, a]);
          await run('cp', ['-a', repo, b]);
          await settle();
          const x = await xet(a, ['gc', '--json'], { cpu: true });
          N.gcSeconds.push(x.seconds);
          N.gcCpuSeconds.push(x.cpuSeconds);
          if (rep === 1) {
            N.gcJson = brief(x.json);
            N.afterGc = await repoSize(a);
          }
          await settle();
          const g = await runCpu('git', ['gc', '--quiet'], { cwd: b, env: GIT_ENV, timeoutSec: opts.timeoutSec });
          N.gitGcSeconds.push(g.seconds);
          N.gitGcCpuSeconds.push(g.cpuSeconds);
          if (rep === 1) N.afterGitGc = await repoSize(b);
          log(
            `rep ${rep}: git xet gc ${fmtS(x.seconds)}s (CPU ${fmtS(x.cpuSeconds)}s), git gc ${fmtS(g.seconds)}s (CPU ${fmtS(g.cpuSeconds)}s)`,
          );
          if (rep === 1) await checkRepo(a, null, `gc of ${opts.many} snapshots`);
          rmrf(a);
          rmrf(b);
        }
      }
      if (!opts.keep) rmrf(repo);
      noteLoad('many: gc');
    }
  } catch (e) {
    fail('harness', e);
  } finally {
    results.finishedAt = new Date().toISOString();
    results.summary = summarize(results);
    printTables(results);
    if (!isStopping()) await writeResults(opts, results);
    cleanup();
  }
  process.exitCode = results.errors.length || results.problems.length ? 1 : 0;
}

// ---------------------------------------------------------------------------
// Summary and tables
// ---------------------------------------------------------------------------

function summarize(results) {
  const rows = [];
  const bytes = (label, x, b, goal) => ({
    ...compare(label, x == null ? [] : [x], b == null ? [] : [b], goal),
    bytes: true,
  });
  const H = results.history;
  if (H?.growth) {
    rows.push(
      bytes(
        `history: .git growth (du -sb) vs sum of tar|zstd -1 of ${H.states.length} states`,
        H.growth.duBytes,
        H.tarZstdSumBytes,
        GOALS.historyGrowth,
      ),
    );
    rows.push(
      bytes(
        'history: size-pack growth vs the same sum',
        H.growth.sizePackBytes + H.growth.looseBytes,
        H.tarZstdSumBytes,
        GOALS.historyGrowth,
      ),
    );
  }
  const D = results.drop;
  if (D?.baseline) {
    rows.push(
      bytes(
        `after drop ${D.dropped} + gc --grace 0: .git (du -sb) vs ${D.kept.length} retained only`,
        D.after.duBytes,
        D.baseline.duBytes,
        GOALS.afterDropVsRetained,
      ),
    );
    rows.push(
      bytes(
        'the same, size-pack + loose',
        D.after.sizePackBytes + D.after.looseBytes,
        D.baseline.sizePackBytes + D.baseline.looseBytes,
        GOALS.afterDropVsRetained,
      ),
    );
  }
  const N = results.many;
  if (N?.gcSeconds?.length) {
    rows.push({
      ...compare(
        `gc of ${N.snapshots} snapshots vs git gc (same repository)`,
        N.gcSeconds,
        N.gitGcSeconds,
        GOALS.gcVsGitGc,
      ),
    });
    const cpu = (xs) => (xs ?? []).filter((x) => x != null);
    if (cpu(N.gcCpuSeconds).length) {
      rows.push(
        compare('the same in CPU time (user + sys, with children)', cpu(N.gcCpuSeconds), cpu(N.gitGcCpuSeconds), null),
      );
    }
  }
  if (N?.dryRunSeconds?.length) {
    const s = med(N.dryRunSeconds);
    rows.push({
      label: `gc --dry-run, ${N.snapshots} snapshots`,
      xet: s,
      baseline: null,
      ratio: null,
      goal: GOALS.dryRunSeconds,
      status: verdict(s, GOALS.dryRunSeconds),
      absolute: true,
    });
    const c = med((N.dryRunCpuSeconds ?? []).filter((x) => x != null));
    if (c != null) {
      rows.push({ label: 'the same in CPU time', xet: c, baseline: null, ratio: null, goal: null, status: 'info' });
    }
  }
  return { rows };
}

function printTables(results) {
  const out = ['', 'git xet storage and gc benchmark'];
  const w = results.workload;
  if (w) {
    out.push(
      `tree: ${w.userCommits}-commit app + node_modules (${w.nodeModules.files} files, ${fmtMB(w.nodeModules.bytes)}, ignored) ` +
        `+ vendor/${w.package}/ (untracked): ${w.versions}`,
    );
  }
  const m = results.machine;
  if (m) out.push(`machine: ${m.nproc} cores, ${fmtMB(m.memBytes)} RAM, ${m.fs}; load at start ${m.loadAvg.join(' ')}`);
  const c = results.commands;
  out.push(
    `commands: ${Object.entries(c)
      .map(([k, v]) => `${k} ${v ? 'yes' : 'MISSING'}`)
      .join(', ')}`,
  );
  out.push('');
  const fmt = (r, v) => (v == null ? '-' : r.bytes ? fmtMB(v) : `${fmtS(v)} s`);
  out.push(
    ...table(
      ['measurement', 'git xet', 'alternative', 'ratio', 'goal', 'result'],
      results.summary.rows.map((r) => [
        r.label,
        fmt(r, r.xet),
        fmt(r, r.baseline),
        fmtX(r.ratio),
        r.goal == null ? '-' : r.absolute ? `<= ${r.goal} s` : `<= ${r.goal}x`,
        r.status,
      ]),
    ),
  );
  const H = results.history;
  if (H?.growth) {
    const cs = H.states.map((s) => s.captureSeconds);
    out.push(
      '',
      `history: .git ${fmtMB(H.before.duBytes)} -> ${fmtMB(H.after.duBytes)} (${H.after.packs} packs, .git/xet ${fmtMB(H.after.xetDirBytes)}); ` +
        `capture median ${fmtS(med(cs))}s (first ${fmtS(cs[0])}s); gc --dry-run (${H.states.length} snapshots) ${fmtMs(med(H.dryRunSeconds))}`,
    );
  }
  const D = results.drop;
  if (D) {
    out.push(
      `drop: ${D.dropped} dropped in ${fmtS(D.dropSeconds)}s, gc --grace 0 ${fmtS(D.gcSeconds)}s; .git ${fmtMB(D.after?.duBytes)}; ` +
        `retained-only baseline ${fmtMB(D.baselineCaptured?.duBytes)} after its captures, ${fmtMB(D.baseline?.duBytes)} after its gc`,
    );
  }
  const N = results.many;
  if (N) {
    out.push(
      `many: ${N.snapshots} snapshots (${N.captured} captures, median ${fmtS(med(N.captureSeconds))}s; ${N.derived} derived in ${fmtS(N.deriveSeconds)}s), ` +
        `.git ${fmtMB(N.size?.duBytes)} in ${N.size?.packs} packs; ` +
        `after git xet gc ${fmtMB(N.afterGc?.duBytes)}, after git gc ${fmtMB(N.afterGitGc?.duBytes)}`,
    );
  }
  out.push(
    `load average during the run: ${results.load.map((l) => `${l.phase} ${l.loadAvg.map((x) => x.toFixed(1)).join('/')}`).join('; ')}`,
  );
  printReport(out, results);
}

start(main);
