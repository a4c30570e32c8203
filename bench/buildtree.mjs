#!/usr/bin/env node
// git xet on a compiled build tree: what the Node workload (bench/run.mjs) lacks.
//
//   npm run bench                      (runs this after bench/run.mjs, forks.mjs and handoff.mjs)
//   node bench/buildtree.mjs --help    (options)
//
// The workload, built once and cached under bench/work/buildtree-<key>/repo:
//   - leveldb 1.20's C++ sources as an npm package ships them (leveldown@6.1.1, deps/leveldb),
//     tracked, built with its own Makefile: ~90 objects, static and shared libraries, symlinked
//     .so names, test and tool binaries. Whether `make` has anything to do depends on mtimes only.
//   - bin/: 40 hard links to one binary, as an install step makes them (git.git has 138 to `git`).
//   - a pnpm-installed node_modules (bench/buildtree/package.json + pnpm-lock.yaml) with its store
//     inside the tree (.pnpm-store/): every package file is a hard link between the two.
// Each git xet step is measured against the obvious alternative in the same run, as a ratio:
// capture vs `tar | zstd -1 -T0`; restore vs `zstd -d | tar -x` (of the untouched repository,
// .git included); then in the restored tree and in the tar copy: `make -q` (must say up to date),
// the time and number of compiles of a `make`, disk use (`du -s`, worktree without .git, each
// inode counted once) and the number of hard-linked files. Results: a table on stdout and
// bench/buildtree-results.json. Plain ESM; the harness is bench/lib/harness.mjs.

import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  BENCH_DIR,
  BenchError,
  GIT_ENV,
  ROOT,
  WORK,
  fmtMB,
  fmtS,
  freezeCli,
  git,
  log,
  machineInfo,
  compare,
  parseArgs,
  parseJsonOutput,
  printReport,
  quote,
  recorder,
  rmrf,
  run,
  runXet,
  settle,
  sh,
  start,
  table,
  tail,
  writeResults,
} from './lib/harness.mjs';

const RECIPE = 'buildtree-v1';
const LEVELDOWN = 'leveldown@6.1.1';
const LEVELDB_DIR = 'leveldb';
const TOOL_LINKS = 40;
const SRC = join(BENCH_DIR, 'buildtree');
const GOALS = { captureRatio: 2.0, restoreRatio: 1.5, diskRatio: 1.0 };
// A directory's size depends on how its entries were created and removed (one grown and emptied
// keeps its blocks), so a fresh copy of a tree, tar's as well as ours, may differ from the source
// by a few directory blocks without any file costing more.
const DIR_SLACK_BYTES = 64 * 1024;

const ARGS = {
  script: 'bench/buildtree.mjs',
  results: 'buildtree-results.json',
  common: {
    reps: 3,
    rebuildWorkload: false,
    tmpBase: WORK,
    timeoutSec: 1800,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'repetitions of capture and restore, median reported (default 3)',
    tmpBase: 'put the per-run copies/restores under DIR instead of bench/work/',
    timeoutSec: 'per-command timeout for git xet and make (default 1800)',
  },
  options: [
    {
      flag: '--no-rebuild',
      key: 'rebuild',
      default: true,
      help: 'do not time the `make` in the restored tree (it may recompile everything)',
    },
  ],
};

// ---------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------

const TOP_MAKEFILE = `# Build tree of the git xet benchmark (bench/buildtree.mjs): leveldb's own Makefile builds
# leveldb/out-static and out-shared; this one "installs" ${TOOL_LINKS} tool names as hard links to one
# binary, as git.git's build links its builtins to git.
TOOLS := $(foreach n,$(shell seq -w 1 ${TOOL_LINKS}),bin/ldb-tool-$(n))
BINARY := ${LEVELDB_DIR}/out-static/db_bench

all: $(TOOLS)

$(BINARY):
\t$(MAKE) -C ${LEVELDB_DIR}

bin/%: $(BINARY)
\t@mkdir -p bin
\tln -f $< $@

.PHONY: all
`;

async function ensureWorkload(opts) {
  const pkgJson = readFileSync(join(SRC, 'package.json'));
  const lock = readFileSync(join(SRC, 'pnpm-lock.yaml'));
  const key = createHash('sha256')
    .update(`${RECIPE}\0${LEVELDOWN}\0${TOOL_LINKS}\0${TOP_MAKEFILE}\0`)
    .update(pkgJson)
    .update('\0')
    .update(lock)
    .digest('hex')
    .slice(0, 16);
  const dir = join(WORK, `buildtree-${key}`);
  const repo = join(dir, 'repo');
  const ready = join(dir, 'READY.json');
  mkdirSync(WORK, { recursive: true });
  for (const name of readdirSync(WORK)) {
    if (name.startsWith('buildtree-') && name !== `buildtree-${key}`) {
      log(`removing stale build-tree workload ${name}`);
      rmrf(join(WORK, name));
    }
  }
  if (existsSync(ready) && !opts.rebuildWorkload) {
    log(`reusing build-tree workload ${relative(ROOT, repo)} (key ${key})`);
    return { ...JSON.parse(readFileSync(ready, 'utf8')), repo, reused: true };
  }
  rmrf(dir);
  mkdirSync(repo, { recursive: true });
  const t0 = performance.now();
  log(`building build-tree workload in ${relative(ROOT, repo)} (key ${key})`);

  const packs = join(WORK, 'cache', 'packs');
  mkdirSync(packs, { recursive: true });
  const tgz = join(packs, `${LEVELDOWN.replace('@', '-')}.tgz`);
  if (!existsSync(tgz)) {
    log(`npm pack ${LEVELDOWN}`);
    await run('npm', ['pack', LEVELDOWN, '--silent', '--no-audit', '--no-fund'], { cwd: packs });
    if (!existsSync(tgz)) throw new BenchError(`npm pack ${LEVELDOWN} did not produce ${tgz}`);
  }

  await git(repo, ['init', '-q', '-b', 'main']);
  for (const [k, v] of [
    ['user.name', 'Bench Author'],
    ['user.email', 'bench@example.invalid'],
    ['core.autocrlf', 'false'],
    ['commit.gpgsign', 'false'],
    ['gc.auto', '0'],
  ]) {
    await git(repo, ['config', k, v]);
  }
  mkdirSync(join(repo, LEVELDB_DIR));
  await run('tar', [
    '-xzf',
    tgz,
    '-C',
    join(repo, LEVELDB_DIR),
    '--strip-components=4',
    'package/deps/leveldb/leveldb-1.20',
  ]);
  // npm tarballs drop the exec bit of the platform probe leveldb's Makefile runs.
  await run('chmod', ['+x', join(repo, LEVELDB_DIR, 'build_detect_platform')]);
  writeFileSync(join(repo, 'Makefile'), TOP_MAKEFILE);
  copyFileSync(join(SRC, 'package.json'), join(repo, 'package.json'));
  copyFileSync(join(SRC, 'pnpm-lock.yaml'), join(repo, 'pnpm-lock.yaml'));
  writeFileSync(
    join(repo, '.gitignore'),
    [
      'node_modules/',
      '.pnpm-store/',
      'bin/',
      `${LEVELDB_DIR}/out-static/`,
      `${LEVELDB_DIR}/out-shared/`,
      `${LEVELDB_DIR}/build_config.mk`,
      '',
    ].join('\n'),
  );
  await git(repo, ['add', '-A']);
  const date = '2024-02-01T12:00:00Z';
  await run('git', ['commit', '-q', '--no-verify', '-m', 'leveldb 1.20 sources, top-level Makefile, pnpm project'], {
    cwd: repo,
    env: { ...GIT_ENV, GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date },
  });

  log('pnpm install (store inside the tree: .pnpm-store/, hard links into node_modules/)');
  await run(
    'npx',
    [
      '-y',
      'pnpm@9',
      'install',
      '--frozen-lockfile',
      '--store-dir',
      './.pnpm-store',
      '--package-import-method',
      'hardlink',
      '--reporter',
      'silent',
    ],
    { cwd: repo, timeoutSec: 900 },
  );
  log('make (leveldb: ~90 objects, libraries and binaries; a few minutes on a busy 2-core machine)');
  await run('nice', ['make', '-j2'], { cwd: repo, timeoutSec: 3600 });
  const q = await makeQ(repo);
  if (!q.upToDate) throw new BenchError(`the freshly built workload is not up to date for make -q: ${q.detail}`);
  await git(repo, ['status', '--porcelain']); // refresh the index stat cache once

  const info = { key, builtAt: new Date().toISOString(), ...(await describeTree(repo)) };
  info.buildSeconds = (performance.now() - t0) / 1000;
  writeFileSync(ready, JSON.stringify(info, null, 2) + '\n');
  log(`build-tree workload built in ${info.buildSeconds.toFixed(1)}s`);
  return { ...info, repo, reused: false };
}

/** Files, hard-linked files, symlinks, apparent bytes, and disk use of the worktree (without .git). */
async function describeTree(dir) {
  const counts = await sh(
    `cd ${quote(dir)} && echo "$(find . -path ./.git -prune -o -type f -print | wc -l) ` +
      `$(find . -path ./.git -prune -o -type f -links +1 -print | wc -l) ` +
      `$(find . -path ./.git -prune -o -type l -print | wc -l) ` +
      `$(find . -path ./.git -prune -o -type f -name '*.o' -print | wc -l)"`,
  );
  const [files, hardLinked, symlinks, objects] = counts.stdout.trim().split(/\s+/).map(Number);
  return {
    files,
    hardLinkedFiles: hardLinked,
    symlinks,
    objectFiles: objects,
    apparentBytes: await du(dir, ['--apparent-size', '--count-links']),
    diskBytes: await du(dir),
  };
}

/** du -s in bytes of dir without its .git; each inode counted once unless --count-links. */
async function du(dir, extra = []) {
  const r = await run('du', ['-s', '-B1', '--exclude=./.git', ...extra, '.'], { cwd: dir });
  return Number(r.stdout.split(/\s/)[0]);
}

async function makeQ(dir) {
  const a = await run('make', ['-q', '-C', LEVELDB_DIR], { cwd: dir, allowFail: true });
  const b = await run('make', ['-q'], { cwd: dir, allowFail: true });
  return {
    upToDate: a.code === 0 && b.code === 0,
    detail: `make -q -C ${LEVELDB_DIR}: exit ${a.code}; make -q: exit ${b.code}`,
  };
}

/** Runs the build the way a user continues one (leveldb's make, then the top-level links); counts
 * what it compiled and linked. */
async function makeAgain(dir, timeoutSec) {
  await settle();
  const r = await sh(`make -j2 -C ${LEVELDB_DIR} && make`, { cwd: dir, timeoutSec, allowFail: true });
  const lines = `${r.stdout}\n${r.stderr}`.split('\n');
  const tool = /^(g\+\+|c\+\+|gcc|cc)\s/;
  const compiles = lines.filter((l) => tool.test(l) && /\s-c\s/.test(l)).length;
  const links = lines.filter((l) => (tool.test(l) && !/\s-c\s/.test(l)) || /^ln\s/.test(l)).length;
  const actions = lines.filter((l) => /^(g\+\+|c\+\+|gcc|cc|ar|ln|rm|mkdir)\s/.test(l)).length;
  return {
    seconds: r.seconds,
    exit: r.code,
    compiles,
    links,
    nothingToDo: r.code === 0 && actions === 0,
    output: tail(lines.filter(Boolean).slice(0, 5).join('\n'), 600),
  };
}

/** Files whose mtime (whole seconds) differs between two trees, of those present in both. */
async function mtimeDrift(src, dst) {
  const list = async (dir) => {
    const r = await run('find', ['.', '-path', './.git', '-prune', '-o', '-type', 'f', '-printf', '%T@ %p\\n'], {
      cwd: dir,
    });
    const m = new Map();
    for (const line of r.stdout.split('\n')) {
      const sp = line.indexOf(' ');
      if (sp > 0) m.set(line.slice(sp + 1), Math.floor(Number(line.slice(0, sp))));
    }
    return m;
  };
  const a = await list(src);
  const b = await list(dst);
  let differ = 0;
  let compared = 0;
  for (const [p, t] of a) {
    if (!b.has(p)) continue;
    compared++;
    if (b.get(p) !== t) differ++;
  }
  return { compared, differ };
}

// ---------------------------------------------------------------------------
// git xet invocation
// ---------------------------------------------------------------------------

let CLI = join(ROOT, 'bin', 'git-xet');

const xet = (cwd, args, timeoutSec) => runXet(CLI, cwd, args, { timeoutSec });

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const tmp = join(opts.tmpBase, `tmp-buildtree-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  const cleanup = () => {
    if (!opts.keep) rmrf(tmp);
  };
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      cleanup();
      process.exit(130);
    });
  }
  const results = {
    startedAt: new Date().toISOString(),
    machine: await machineInfo(opts.tmpBase),
    config: { reps: opts.reps, goals: GOALS },
    workload: null,
    cli: null,
    measurements: {
      capture: { xet: [], baseline: [] },
      restore: { xet: [], baseline: [] },
      archive: { xet: [], baseline: [] },
    },
    after: null,
    problems: [],
    warnings: [],
    errors: [],
  };
  const { fail } = recorder(results);
  try {
    const wl = await ensureWorkload(opts);
    const { repo } = wl;
    results.workload = { ...wl, repo: relative(ROOT, repo) };
    log(
      `workload: ${wl.files} files (${wl.hardLinkedFiles} hard-linked, ${wl.objectFiles} .o), ${wl.symlinks} symlinks, ` +
        `${fmtMB(wl.apparentBytes)} apparent, ${fmtMB(wl.diskBytes)} on disk`,
    );
    const head = await git(ROOT, ['rev-parse', '--short', 'HEAD'], { allowFail: true });
    results.cli = { commit: head.stdout.trim() || null, frozenCopy: opts.freezeCli };
    if (opts.freezeCli) CLI = await freezeCli(tmp);

    // The restore baseline's input: the untouched repository, .git included, as tar.zst.
    const srcTar = join(tmp, 'repo.tar.zst');
    await sh(`tar -C ${quote(repo)} -cf - . | zstd -1 -T0 -q -o ${quote(srcTar)}`);
    const M = results.measurements;
    let snapshot = null;
    let captured = null;
    for (let rep = 1; rep <= opts.reps; rep++) {
      const out = join(tmp, 'out.tar.zst');
      rmrf(out);
      await settle();
      const tz = await sh(`tar -C ${quote(repo)} --exclude=./.git -cf - . | zstd -1 -T0 -q -o ${quote(out)}`);
      M.capture.baseline.push(tz.seconds);
      rmrf(out);
      const copy = join(tmp, `capture-${rep}`);
      await run('cp', ['-a', repo, copy]);
      await settle();
      try {
        const c = await xet(copy, ['capture', '-m', `bench build tree ${rep}`, '--json'], opts.timeoutSec);
        M.capture.xet.push(c.seconds);
        log(`rep ${rep}: capture ${fmtS(c.seconds)}s vs tar|zstd ${fmtS(tz.seconds)}s`);
        if (rep === opts.reps) {
          snapshot = c.json?.snapshot;
          captured = copy;
          M.capture.json = c.json;
        } else rmrf(copy);
      } catch (e) {
        fail(`capture rep ${rep}`, e);
        rmrf(copy);
        break;
      }
    }
    if (snapshot) {
      // Information only, once: `git xet archive` of the snapshot against tar of the same files.
      const a = join(tmp, 'archive.tar');
      await settle();
      try {
        const x = await xet(captured, ['archive', snapshot, '-o', a], opts.timeoutSec);
        rmrf(a);
        await settle();
        const t = await sh(`tar -C ${quote(repo)} --exclude=./.git -cf ${quote(a)} .`);
        rmrf(a);
        M.archive.xet.push(x.seconds);
        M.archive.baseline.push(t.seconds);
        log(`archive ${fmtS(x.seconds)}s vs tar -cf ${fmtS(t.seconds)}s`);
      } catch (e) {
        fail('archive', e);
      }
    }
    let firstRestore = null;
    for (let rep = 1; rep <= opts.reps && snapshot; rep++) {
      const untar = join(tmp, `untar-${rep}`);
      await settle();
      const tx = await sh(`mkdir ${quote(untar)} && zstd -d -c -q ${quote(srcTar)} | tar -xf - -C ${quote(untar)}`);
      M.restore.baseline.push(tx.seconds);
      const dest = join(tmp, `restore-${rep}`);
      await settle();
      try {
        const r = await xet(captured, ['restore', snapshot, dest, '--json'], opts.timeoutSec);
        M.restore.xet.push(r.seconds);
        log(`rep ${rep}: restore ${fmtS(r.seconds)}s vs zstd -d|tar -x ${fmtS(tx.seconds)}s`);
      } catch (e) {
        fail(`restore rep ${rep}`, e);
        rmrf(untar);
        break;
      }
      if (rep === 1) firstRestore = { dest, untar };
      else {
        rmrf(dest);
        rmrf(untar);
      }
    }
    if (firstRestore) {
      // Independent of the timings: does the restored tree match the snapshot (files, index, refs)?
      const v = await run(process.execPath, [CLI, 'verify', snapshot, firstRestore.dest, '--json'], {
        cwd: captured,
        timeoutSec: opts.timeoutSec,
        allowFail: true,
      });
      const vj = parseJsonOutput(v.stdout);
      results.verify = { exit: v.code, ok: vj?.ok ?? null, differences: (vj?.differences ?? []).slice(0, 20) };
      if (v.code !== 0)
        results.problems.push(`git xet verify of the restored tree: exit ${v.code} ${tail(v.stdout, 600)}`);
      results.after = await afterRestore(repo, firstRestore, opts, results);
    }
  } catch (e) {
    fail('harness', e);
  } finally {
    results.finishedAt = new Date().toISOString();
    results.summary = summarize(results);
    printTable(results);
    await writeResults(opts, results);
    cleanup();
  }
  process.exitCode = results.errors.length ? 1 : 0;
}

/** The restored tree and the tar copy, side by side: what a build tool and the disk see. */
async function afterRestore(repo, { dest, untar }, opts, results) {
  const side = async (dir) => {
    const d = await describeTree(dir);
    // Before make -q: leveldb's Makefile rewrites build_config.mk on every run.
    const drift = await mtimeDrift(repo, dir);
    const q = await makeQ(dir);
    const st = await git(dir, ['status', '--porcelain'], { allowFail: true });
    return { ...d, makeQ: q, mtimeDrift: drift, gitStatusLines: st.stdout.split('\n').filter(Boolean).length };
  };
  const source = await describeTree(repo);
  const restored = await side(dest);
  const tarCopy = await side(untar);
  if (!restored.makeQ.upToDate) {
    results.problems.push(`make -q in the restored tree: not up to date (${restored.makeQ.detail})`);
  }
  if (restored.diskBytes > source.diskBytes + DIR_SLACK_BYTES) {
    results.problems.push(
      `restored worktree uses ${fmtMB(restored.diskBytes)} on disk, the source ${fmtMB(source.diskBytes)} ` +
        `(hard-linked files: ${restored.hardLinkedFiles} restored, ${source.hardLinkedFiles} in the source)`,
    );
  }
  if (!tarCopy.makeQ.upToDate) results.warnings.push(`make -q in the tar copy: ${tarCopy.makeQ.detail}`);
  log(
    `make -q: restored ${restored.makeQ.upToDate ? 'up to date' : 'NOT up to date'}, tar copy ${tarCopy.makeQ.upToDate ? 'up to date' : 'NOT up to date'}`,
  );
  let makeRestored = null;
  const makeTar = await makeAgain(untar, opts.timeoutSec);
  log(`make in the tar copy: ${fmtS(makeTar.seconds)}s, ${makeTar.compiles} compiles`);
  if (opts.rebuild) {
    makeRestored = await makeAgain(dest, opts.timeoutSec);
    log(
      `make in the restored tree: ${fmtS(makeRestored.seconds)}s, ${makeRestored.compiles} compiles, ${makeRestored.links} links`,
    );
  }
  if (!opts.keep) {
    rmrf(dest);
    rmrf(untar);
  }
  return { source, restored, tarCopy, makeRestored, makeTar };
}

function summarize(results) {
  const M = results.measurements;
  const row = (label, d, goal) => ({ ...compare(label, d.xet, d.baseline, goal), samples: d });
  const rows = [
    row('capture vs tar | zstd -1 -T0', M.capture, GOALS.captureRatio),
    row('restore vs zstd -d | tar -x (incl .git)', M.restore, GOALS.restoreRatio),
    { ...row('archive -o FILE vs tar -cf (info, 1 run)', M.archive, null), status: 'info' },
  ];
  const a = results.after;
  if (a) {
    const mr = a.makeRestored;
    rows.push({
      label: 'make afterwards: restored vs tar copy',
      xet: mr?.seconds ?? null,
      baseline: a.makeTar.seconds,
      ratio: mr ? mr.seconds / a.makeTar.seconds : null,
      goal: null,
      status: a.restored.makeQ.upToDate ? 'PASS' : 'FAIL',
      note:
        `make -q restored: ${a.restored.makeQ.upToDate ? 'up to date' : 'not up to date'}; ` +
        (mr ? `recompiled ${mr.compiles} objects, ${mr.links} links` : 'make not timed (--no-rebuild)'),
    });
    rows.push({
      label: 'disk use (du -s, worktree): restored vs source',
      xet: a.restored.diskBytes,
      baseline: a.source.diskBytes,
      ratio: a.restored.diskBytes / a.source.diskBytes,
      goal: GOALS.diskRatio,
      status: a.restored.diskBytes <= a.source.diskBytes + DIR_SLACK_BYTES ? 'PASS' : 'FAIL',
      bytes: true,
    });
    // Same filesystem as the restore (the source may be on another one, e.g. with --tmp-base).
    rows.push({
      label: 'disk use (du -s, worktree): restored vs tar copy',
      xet: a.restored.diskBytes,
      baseline: a.tarCopy.diskBytes,
      ratio: a.restored.diskBytes / a.tarCopy.diskBytes,
      goal: GOALS.diskRatio,
      status: a.restored.diskBytes <= a.tarCopy.diskBytes ? 'PASS' : 'FAIL',
      bytes: true,
    });
  }
  return { rows };
}

function printTable(results) {
  const out = [''];
  const w = results.workload;
  out.push('git xet benchmark: build tree (leveldb make build + pnpm store with hard links)');
  if (w) {
    out.push(
      `workload: ${w.files} files (${w.objectFiles} .o, ${w.hardLinkedFiles} hard-linked), ${w.symlinks} symlinks; ` +
        `${fmtMB(w.apparentBytes)} apparent, ${fmtMB(w.diskBytes)} on disk (du -s)`,
    );
  }
  out.push(`machine: ${results.machine.nproc} cores, ${results.machine.fs}; median of ${results.config.reps}`);
  out.push('');
  const hdr = ['measurement', 'git xet', 'alternative', 'ratio', 'goal', 'result'];
  const fmt = (r, v) => (v == null ? '-' : r.bytes ? fmtMB(v) : `${fmtS(v)} s`);
  const rows = results.summary.rows.map((r) => [
    r.label,
    fmt(r, r.xet),
    fmt(r, r.baseline),
    r.ratio == null ? '-' : `${r.ratio.toFixed(2)}x`,
    r.goal == null ? (r.status === 'info' ? '-' : 'nothing to do') : `<= ${r.goal}x`,
    r.status,
  ]);
  out.push(...table(hdr, rows));
  const a = results.after;
  if (a) {
    out.push('');
    for (const [name, s] of [
      ['source  ', a.source],
      ['restored', a.restored],
      ['tar copy', a.tarCopy],
    ]) {
      out.push(
        `${name}: ${s.files} files, ${s.hardLinkedFiles} hard-linked, ${fmtMB(s.diskBytes)} on disk` +
          (s.makeQ ? `; make -q ${s.makeQ.upToDate ? 'up to date' : 'NOT up to date'}` : '') +
          (s.mtimeDrift
            ? `; mtime differs from the source for ${s.mtimeDrift.differ} of ${s.mtimeDrift.compared} files`
            : '') +
          (s.gitStatusLines != null ? `; git status: ${s.gitStatusLines} lines` : ''),
      );
    }
    if (results.verify) out.push(`git xet verify of the restored tree: exit ${results.verify.exit}`);
    if (a.makeRestored) {
      out.push(
        `make in the restored tree: ${a.makeRestored.compiles} compiles, ${a.makeRestored.links} links, ${fmtS(a.makeRestored.seconds)} s`,
      );
    }
    out.push(
      `make in the tar copy: ${a.makeTar.compiles} compiles, ${a.makeTar.links} links, ${fmtS(a.makeTar.seconds)} s`,
    );
  }
  printReport(out, results);
}

start(main);
