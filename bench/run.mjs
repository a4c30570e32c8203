#!/usr/bin/env node
// git xet benchmark harness.
//
//   npm run bench                (= npm run build && node bench/run.mjs)
//   node bench/run.mjs --help    (options)
//
// Plain ESM, node built-ins only. Everything it creates lives under bench/work/
// (git-ignored): the workload (reused between runs, keyed by a hash of
// bench/workload/package-lock.json and the workload recipe below), a cache of
// `npm pack` tarballs, and a per-run temp dir that is removed at the end.
// Results: a table on stdout and bench/results.json.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readFileSync,
  writeFileSync,
  readdirSync,
  rmSync,
  lstatSync,
  readlinkSync,
  appendFileSync,
  unlinkSync,
  copyFileSync,
  openSync,
  readSync,
  closeSync,
  realpathSync,
} from 'node:fs';
import { dirname, join, resolve, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout, clearTimeout, setInterval, clearInterval } from 'node:timers';

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(BENCH_DIR, '..');
// Replaced by a frozen copy in main() (see freezeCli) unless --no-freeze-cli.
let CLI = join(ROOT, 'bin', 'git-xet');
const CLI_MAIN = join(ROOT, 'dist', 'src', 'cli', 'main.js');
export const WORK = join(BENCH_DIR, 'work');
const WORKLOAD_SRC = join(BENCH_DIR, 'workload');
const DEFAULT_RESULTS_FILE = join(BENCH_DIR, 'results.json');

// Bump when the workload recipe below changes: it is part of the cache key.
const WORKLOAD_RECIPE = 'v1';
// History of the workload repo: successive releases of one npm package.
export const HISTORY_PACKAGE = 'lodash';
const HISTORY_VERSIONS = ['4.17.15', '4.17.16', '4.17.17', '4.17.18', '4.17.19', '4.17.20', '4.17.21'];
const RECAPTURE_EDITS = 10;

const GOALS = {
  coldCaptureRatio: 2.0,
  recaptureRatio: 0.1,
  restoreRatio: 1.5,
  peakRssMB: 300,
};

const HELP = `usage: node bench/run.mjs [options]

  --reps N             repetitions per measurement, median reported (default 3)
  --baselines-only     build the workload and time only tar/zstd baselines
  --wait-for-cli MIN   if dist/src/cli/main.js is missing, poll for it up to MIN minutes
  --rebuild-workload   rebuild bench/work/workload-* even if cached
  --keep               keep the per-run temp dir under bench/work/ (debugging)
  --timeout SEC        per-command timeout for git xet commands (default 1800)
  --no-results         do not write bench/results.json
  --results FILE       write the results there instead of bench/results.json
  --no-freeze-cli      run bin/git-xet in place instead of a copy of bin/ + dist/ taken at start
                       (the copy keeps a concurrent \`npm run build\` from breaking a run)
  --tmp-base DIR       put the per-run copies/restores under DIR instead of bench/work/
                       (e.g. /dev/shm to take the disk out of the comparison)
`;

function parseArgs(argv) {
  const o = {
    reps: 3,
    baselinesOnly: false,
    waitForCliMin: 0,
    rebuildWorkload: false,
    keep: false,
    timeoutSec: 1800,
    writeResults: true,
    resultsFile: DEFAULT_RESULTS_FILE,
    tmpBase: WORK,
    freezeCli: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const num = (name) => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) die(`${name} needs a non-negative number`);
      return v;
    };
    if (a === '--reps') o.reps = Math.max(1, Math.floor(num(a)));
    else if (a === '--baselines-only') o.baselinesOnly = true;
    else if (a === '--wait-for-cli') o.waitForCliMin = num(a);
    else if (a === '--rebuild-workload') o.rebuildWorkload = true;
    else if (a === '--keep') o.keep = true;
    else if (a === '--timeout') o.timeoutSec = num(a);
    else if (a === '--no-results') o.writeResults = false;
    else if (a === '--results') o.resultsFile = resolve(argv[++i] ?? die('--results needs a file'));
    else if (a === '--no-freeze-cli') o.freezeCli = false;
    else if (a === '--tmp-base') o.tmpBase = resolve(argv[++i] ?? die('--tmp-base needs a directory'));
    else if (a === '-h' || a === '--help') {
      process.stdout.write(HELP);
      process.exit(0);
    } else die(`unknown option ${a}\n${HELP}`);
  }
  return o;
}

// ---------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------

export class BenchError extends Error {}

export function die(msg) {
  process.stderr.write(`bench: ${msg}\n`);
  process.exit(2);
}

export function log(msg) {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function sha256(...parts) {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest('hex');
}

export function tail(s, n = 4000) {
  return s.length > n ? `…${s.slice(-n)}` : s;
}

export function quote(a) {
  return /^[\w@%+=:,./-]+$/.test(a) ? a : `'${String(a).replace(/'/g, `'\\''`)}'`;
}

export const MB = 1024 * 1024;
export const fmtS = (s) => (s == null ? '-' : s.toFixed(s < 10 ? 3 : 2));
export const fmtMB = (b) => (b == null ? '-' : `${(b / MB).toFixed(1)} MiB`);

/**
 * Run a child process. Resolves with {code, signal, stdout, stderr, seconds, pid};
 * rejects with a BenchError naming the command, cwd, exit status and output tail
 * unless allowFail is set. `onSpawn(child)` lets a caller sample the process.
 */
export function run(cmd, args, opts = {}) {
  const { cwd = ROOT, env = process.env, allowFail = false, timeoutSec = 0, stdio = 'pipe', onSpawn } = opts;
  const cmdline = [cmd, ...args].map(quote).join(' ');
  return new Promise((resolveP, rejectP) => {
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const t0 = performance.now();
    let child;
    try {
      child = spawn(cmd, args, {
        cwd,
        env,
        stdio: stdio === 'pipe' ? ['ignore', 'pipe', 'pipe'] : ['ignore', stdio, stdio],
      });
    } catch (e) {
      rejectP(new BenchError(`cannot start ${cmdline}: ${e.message}`));
      return;
    }
    const cap = 8 * MB;
    child.stdout?.on('data', (d) => {
      stdout += d;
      if (stdout.length > cap) stdout = stdout.slice(-cap);
    });
    child.stderr?.on('data', (d) => {
      stderr += d;
      if (stderr.length > cap) stderr = stderr.slice(-cap);
    });
    let timer;
    if (timeoutSec > 0) {
      timer = setTimeout(() => {
        timedOut = true;
        try {
          child.kill('SIGKILL');
        } catch {
          /* already gone */
        }
      }, timeoutSec * 1000);
    }
    if (onSpawn) onSpawn(child);
    child.on('error', (e) => {
      clearTimeout(timer);
      rejectP(new BenchError(`cannot run ${cmdline} (cwd ${cwd}): ${e.message}`));
    });
    child.on('close', (code, signal) => {
      const seconds = (performance.now() - t0) / 1000;
      clearTimeout(timer);
      const res = { cmdline, cwd, code, signal, stdout, stderr, seconds, pid: child.pid };
      if (timedOut) {
        const err = new BenchError(
          `timed out after ${timeoutSec}s: ${cmdline}\n  cwd: ${cwd}\n  stderr: ${tail(stderr, 2000)}`,
        );
        err.result = res;
        rejectP(err);
      } else if ((code !== 0 || signal) && !allowFail) {
        const err = new BenchError(
          `command failed (exit ${code}${signal ? `, signal ${signal}` : ''}): ${cmdline}\n` +
            `  cwd: ${cwd}\n  time: ${seconds.toFixed(2)}s\n` +
            (stdout.trim() ? `  stdout: ${tail(stdout.trim(), 3000)}\n` : '') +
            (stderr.trim() ? `  stderr: ${tail(stderr.trim(), 3000)}\n` : ''),
        );
        err.result = res;
        rejectP(err);
      } else resolveP(res);
    });
  });
}

export const sh = (script, opts) => run('bash', ['-c', `set -euo pipefail\n${script}`], opts);

// Harness git calls: fixed identity and dates so the workload is reproducible.
export const GIT_ENV = {
  ...process.env,
  GIT_AUTHOR_NAME: 'Bench Author',
  GIT_AUTHOR_EMAIL: 'bench@example.invalid',
  GIT_COMMITTER_NAME: 'Bench Author',
  GIT_COMMITTER_EMAIL: 'bench@example.invalid',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_TERMINAL_PROMPT: '0',
};
export const git = (cwd, args, opts = {}) => run('git', args, { cwd, env: GIT_ENV, ...opts });

/** Walk a directory tree (not following symlinks), optionally skipping top-level names. */
export function walk(root, { skipTop = [] } = {}) {
  const out = { files: 0, symlinks: 0, dirs: 0, bytes: 0, entries: [] };
  const rec = (abs, rel) => {
    for (const name of readdirSync(abs)) {
      if (rel === '' && skipTop.includes(name)) continue;
      const a = join(abs, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(a);
      if (st.isDirectory()) {
        out.dirs++;
        out.entries.push({ path: r, type: 'd' });
        rec(a, r);
      } else if (st.isSymbolicLink()) {
        out.symlinks++;
        out.entries.push({ path: r, type: 'l', target: readlinkSync(a) });
      } else if (st.isFile()) {
        out.files++;
        out.bytes += st.size;
        out.entries.push({ path: r, type: 'f', size: st.size, exec: (st.mode & 0o111) !== 0 });
      } else {
        out.entries.push({ path: r, type: 'other' });
      }
    }
  };
  rec(root, '');
  return out;
}

function fileDigest(path) {
  const h = createHash('sha1');
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(1 << 20);
    let n;
    while ((n = readSync(fd, buf, 0, buf.length, null)) > 0) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

export function rmrf(p) {
  rmSync(p, { recursive: true, force: true, maxRetries: 3 });
}

// ---------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------

export async function ensureWorkload(opts) {
  const pkgJson = readFileSync(join(WORKLOAD_SRC, 'package.json'));
  const lock = readFileSync(join(WORKLOAD_SRC, 'package-lock.json'));
  const key = sha256(
    WORKLOAD_RECIPE,
    '\0',
    HISTORY_PACKAGE,
    HISTORY_VERSIONS.join(','),
    '\0',
    pkgJson,
    '\0',
    lock,
  ).slice(0, 16);
  const dir = join(WORK, `workload-${key}`);
  const repo = join(dir, 'repo');
  const readyFile = join(dir, 'READY.json');
  mkdirSync(WORK, { recursive: true });

  // Drop workloads built from other lockfiles/recipes.
  for (const name of readdirSync(WORK)) {
    if (name.startsWith('workload-') && name !== `workload-${key}`) {
      log(`removing stale workload ${name}`);
      rmrf(join(WORK, name));
    }
  }
  if (existsSync(readyFile) && !opts.rebuildWorkload) {
    const info = JSON.parse(readFileSync(readyFile, 'utf8'));
    log(`reusing workload ${relative(ROOT, repo)} (key ${key})`);
    return { ...info, repo, dir, reused: true };
  }
  rmrf(dir);
  mkdirSync(dir, { recursive: true });
  log(`building workload in ${relative(ROOT, repo)} (key ${key})`);
  const t0 = performance.now();

  // 1. Release tarballs (cached across workload rebuilds).
  const packs = join(WORK, 'cache', 'packs');
  mkdirSync(packs, { recursive: true });
  for (const v of HISTORY_VERSIONS) {
    const tgz = join(packs, `${HISTORY_PACKAGE}-${v}.tgz`);
    if (existsSync(tgz)) continue;
    log(`npm pack ${HISTORY_PACKAGE}@${v}`);
    const r = await run('npm', ['pack', `${HISTORY_PACKAGE}@${v}`, '--silent', '--no-audit', '--no-fund'], {
      cwd: packs,
    });
    if (!existsSync(tgz)) {
      throw new BenchError(`npm pack ${HISTORY_PACKAGE}@${v} did not produce ${tgz} (stdout: ${r.stdout.trim()})`);
    }
  }

  // 2. Repository with history: one commit per release, vendored under vendor/<pkg>/.
  mkdirSync(repo);
  await git(repo, ['init', '-q', '-b', 'main']);
  for (const [k, v] of [
    ['user.name', 'Bench Author'],
    ['user.email', 'bench@example.invalid'],
    ['core.autocrlf', 'false'],
    ['commit.gpgsign', 'false'],
    ['tag.gpgsign', 'false'],
    ['gc.auto', '0'],
  ]) {
    await git(repo, ['config', k, v]);
  }
  let day = 0;
  const commit = async (msg) => {
    day++;
    const date = `2024-01-${String(day).padStart(2, '0')}T12:00:00Z`;
    await run('git', ['commit', '-q', '--no-verify', '-m', msg], {
      cwd: repo,
      env: { ...GIT_ENV, GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date },
    });
  };
  copyFileSync(join(WORKLOAD_SRC, 'package.json'), join(repo, 'package.json'));
  copyFileSync(join(WORKLOAD_SRC, 'package-lock.json'), join(repo, 'package-lock.json'));
  writeFileSync(join(repo, '.gitignore'), 'node_modules/\ndist/\n*.log\n');
  writeFileSync(
    join(repo, 'README.md'),
    '# bench workload\n\nA vendored library with release history, npm dependencies and build output.\n',
  );
  mkdirSync(join(repo, 'scripts'));
  writeFileSync(join(repo, 'scripts', 'build.sh'), '#!/bin/sh\nnode scripts/build.mjs "$@"\n', {
    mode: 0o755,
  });
  writeFileSync(join(repo, 'scripts', 'build.mjs'), '// see bench/run.mjs buildDist()\n');
  await git(repo, ['add', '-A']);
  await commit('initial: app skeleton and dependencies');

  const vendor = join(repo, 'vendor', HISTORY_PACKAGE);
  for (const v of HISTORY_VERSIONS) {
    rmrf(vendor);
    mkdirSync(vendor, { recursive: true });
    await run('tar', ['-xzf', join(packs, `${HISTORY_PACKAGE}-${v}.tgz`), '-C', vendor, '--strip-components=1']);
    await git(repo, ['add', '-A']);
    await commit(`vendor: ${HISTORY_PACKAGE} ${v}`);
    await git(repo, ['tag', `${HISTORY_PACKAGE}-v${v}`]);
  }
  // a tracked symlink and a second branch, so refs and modes are exercised
  await sh(`ln -s vendor/${HISTORY_PACKAGE} latest`, { cwd: repo });
  await git(repo, ['add', 'latest']);
  await commit('add latest symlink');
  await git(repo, ['branch', 'release/4.17', `${HISTORY_PACKAGE}-v${HISTORY_VERSIONS.at(-2)}`]);

  // 3. node_modules (ignored) from the committed lockfile.
  log('npm ci (this downloads ~100 MB from the npm registry once; the workload is then cached)');
  await run('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], {
    cwd: repo,
    timeoutSec: 1800,
  });

  // 4. Build output (ignored): transpiled-looking per-module files plus a bundle.
  buildDist(repo, vendor);
  writeFileSync(join(repo, 'npm-debug.log'), 'verbose bench log line\n'.repeat(200));

  // 5. Work in progress: unstaged, staged, partially staged, deleted, untracked.
  const tracked = (await git(repo, ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`])).stdout
    .split('\0')
    .filter((p) => p.endsWith('.js'))
    .sort();
  const pick = (i) => tracked[Math.floor((i * tracked.length) / 17)];
  const wip = {
    unstaged: [`vendor/${HISTORY_PACKAGE}/README.md`, pick(1), pick(2)],
    staged: [pick(3)],
    partiallyStaged: [pick(4)],
    deleted: [pick(5)],
    stagedNew: ['src/feature.js'],
    untracked: ['notes/TODO.md', 'scratch.txt'],
  };
  for (const f of wip.unstaged) appendFileSync(join(repo, f), '\n// local edit (unstaged)\n');
  for (const f of wip.staged) appendFileSync(join(repo, f), '\n// staged edit\n');
  for (const f of wip.partiallyStaged) appendFileSync(join(repo, f), '\n// staged half\n');
  mkdirSync(join(repo, 'src'));
  writeFileSync(join(repo, 'src', 'feature.js'), "module.exports = require('../vendor/lodash').identity;\n");
  await git(repo, ['add', ...wip.staged, ...wip.partiallyStaged, ...wip.stagedNew]);
  for (const f of wip.partiallyStaged) appendFileSync(join(repo, f), '// unstaged half\n');
  for (const f of wip.deleted) unlinkSync(join(repo, f));
  mkdirSync(join(repo, 'notes'));
  writeFileSync(join(repo, 'notes', 'TODO.md'), '- [ ] benchmark git xet\n');
  writeFileSync(join(repo, 'scratch.txt'), 'scratch\n');
  await git(repo, ['status', '--porcelain']); // refresh the index stat cache once

  // 6. Describe it.
  const info = { key, builtAt: new Date().toISOString(), wip, ...(await describeWorkload(repo)) };
  info.buildSeconds = (performance.now() - t0) / 1000;
  writeFileSync(readyFile, JSON.stringify(info, null, 2) + '\n');
  log(`workload built in ${info.buildSeconds.toFixed(1)}s`);
  return { ...info, repo, dir, reused: false };
}

function buildDist(repo, vendor) {
  const dist = join(repo, 'dist');
  mkdirSync(join(dist, 'cjs'), { recursive: true });
  const banner = '/*! bench build | MIT */\n"use strict";\n';
  const bundle = [];
  let n = 0;
  for (const name of readdirSync(vendor).sort()) {
    if (!name.endsWith('.js')) continue;
    const src = readFileSync(join(vendor, name), 'utf8');
    writeFileSync(join(dist, 'cjs', name), banner + src);
    writeFileSync(
      join(dist, 'cjs', `${name}.map`),
      JSON.stringify({ version: 3, file: name, sources: [`../../vendor/lodash/${name}`], mappings: '' }),
    );
    bundle.push(`// ---- ${name}\n(function(){\n${src}\n})();\n`);
    n++;
  }
  writeFileSync(join(dist, 'bundle.js'), banner + bundle.join(''));
  writeFileSync(join(dist, 'manifest.json'), JSON.stringify({ modules: n }, null, 2));
}

async function describeWorkload(repo) {
  const all = walk(repo, { skipTop: ['.git'] });
  const nm = walk(join(repo, 'node_modules'));
  const dist = walk(join(repo, 'dist'));
  const gitDir = walk(join(repo, '.git'));
  const commits = Number((await git(repo, ['rev-list', '--all', '--count'])).stdout.trim());
  const trackedFiles = (await git(repo, ['ls-files', '-z'])).stdout.split('\0').filter(Boolean).length;
  const refs = (await git(repo, ['for-each-ref', '--format=%(refname)'])).stdout.trim().split('\n').length;
  const status = (await git(repo, ['status', '--porcelain=v1', '-uall'])).stdout.trimEnd();
  let largest = { path: null, size: 0 };
  for (const e of all.entries) if (e.type === 'f' && e.size > largest.size) largest = e;
  const du = (await run('du', ['-sb', repo])).stdout.split(/\s/)[0];
  const duNm = (await run('du', ['-sb', join(repo, 'node_modules')])).stdout.split(/\s/)[0];
  return {
    worktree: { files: all.files, symlinks: all.symlinks, dirs: all.dirs, bytes: all.bytes },
    nodeModules: { files: nm.files, symlinks: nm.symlinks, bytes: nm.bytes, duBytes: Number(duNm) },
    dist: { files: dist.files, bytes: dist.bytes },
    gitDir: { files: gitDir.files, bytes: gitDir.bytes },
    repoDuBytes: Number(du),
    largestFile: { path: largest.path, bytes: largest.size },
    commits,
    trackedFiles,
    refs,
    statusLines: status ? status.split('\n') : [],
  };
}

// ---------------------------------------------------------------------------
// Peak-RSS sampling of a process tree via /proc
// ---------------------------------------------------------------------------

function readProcStatus(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const get = (k) => {
      const m = s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm'));
      return m ? Number(m[1]) * 1024 : 0;
    };
    const name = (s.match(/^Name:\s+(.*)$/m) || [])[1] || '?';
    return { name, rss: get('VmRSS'), hwm: get('VmHWM'), pss: readPss(pid) };
  } catch {
    return null;
  }
}

/** Proportional set size: pages shared between processes are split between them. A child that
 * node has forked but not yet exec'd shares every page of its parent; summing plain RSS would count
 * the parent twice for that instant. Null where smaps_rollup is unreadable (then RSS is used). */
function readPss(pid) {
  try {
    const m = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').match(/^Pss:\s+(\d+) kB/m);
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

function procChildren(pid) {
  const out = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        const c = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
        if (c) out.push(...c.split(/\s+/).map(Number));
      } catch {
        /* thread exited */
      }
    }
  } catch {
    /* process exited */
  }
  return out;
}

function procCmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return '';
  }
}

/** Samples the tree under rootPid every intervalMs; `skipRoot` excludes the wrapper (/usr/bin/time). */
class TreeSampler {
  constructor(rootPid, { intervalMs = 20, skipRoot = false } = {}) {
    this.rootPid = rootPid;
    this.skipRoot = skipRoot;
    this.procs = new Map(); // pid -> {name, cmd, hwm, rss, firstSeenMs, lastSeenMs}
    this.t0 = performance.now();
    this.peakSum = 0;
    this.samples = 0;
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.sample();
  }
  sample() {
    let sum = 0;
    const parts = [];
    const stack = [this.rootPid];
    const seen = new Set();
    while (stack.length) {
      const pid = stack.pop();
      if (seen.has(pid)) continue;
      seen.add(pid);
      stack.push(...procChildren(pid));
      if (this.skipRoot && pid === this.rootPid) continue;
      const st = readProcStatus(pid);
      if (!st) continue;
      // The tree's total is summed in PSS (see readPss); each process's own peak stays RSS.
      const share = st.pss ?? st.rss;
      sum += share;
      parts.push({ pid, name: st.name, rssBytes: share });
      let p = this.procs.get(pid);
      if (!p) {
        const t = performance.now() - this.t0;
        p = { pid, name: st.name, cmd: procCmdline(pid).slice(0, 200), hwm: 0, rss: 0, firstSeenMs: t };
        this.procs.set(pid, p);
      }
      p.lastSeenMs = performance.now() - this.t0;
      p.hwm = Math.max(p.hwm, st.hwm);
      p.rss = Math.max(p.rss, st.rss);
    }
    this.samples++;
    if (sum > this.peakSum) {
      this.peakSum = sum;
      this.peakParts = parts;
    }
  }
  stop() {
    clearInterval(this.timer);
    const procs = [...this.procs.values()];
    const isNode = (p) => /git-xet/.test(p.cmd) || p.name === 'node';
    const nodeProcs = procs.filter(isNode);
    const gitProcs = procs.filter((p) => !isNode(p) && /^git/.test(p.name));
    const maxBy = (xs) => xs.reduce((a, b) => (b.hwm > (a?.hwm ?? -1) ? b : a), null);
    const node = maxBy(nodeProcs);
    const gitMax = maxBy(gitProcs);
    return {
      samples: this.samples,
      processesSeen: procs.length,
      gitProcessesSeen: gitProcs.length,
      nodePeakBytes: node?.hwm ?? null,
      largestGitChild: gitMax ? { bytes: gitMax.hwm, cmd: gitMax.cmd } : null,
      peakConcurrentTreeBytes: this.peakSum,
      // what was running at the sample with the largest sum
      atPeak: (this.peakParts ?? []).map((x) => ({ ...x, cmd: this.procs.get(x.pid)?.cmd })),
      // every process seen, in start order: a coarse timeline of the capture's phases
      timeline: procs.map((p) => ({
        pid: p.pid,
        cmd: p.cmd.replace(/^\S*\/node \S*git-xet/, 'git-xet').slice(0, 120),
        firstSeenMs: Math.round(p.firstSeenMs),
        lastSeenMs: Math.round(p.lastSeenMs),
        hwmBytes: p.hwm,
      })),
      topByPeak: [...procs]
        .sort((a, b) => b.hwm - a.hwm)
        .slice(0, 6)
        .map((p) => ({ pid: p.pid, hwmBytes: p.hwm, cmd: p.cmd })),
    };
  }
}

// ---------------------------------------------------------------------------
// git xet invocation
// ---------------------------------------------------------------------------

const HAVE_GNU_TIME = existsSync('/usr/bin/time');

/** Run `git xet ...` (as `node bin/git-xet ...`), optionally under /usr/bin/time -f %M. */
async function xet(cwd, args, opts = {}) {
  const { tmp, measureMaxRss = false, sampler = false, timeoutSec } = opts;
  let cmd = process.execPath;
  let argv = [CLI, ...args];
  let rssFile = null;
  if (measureMaxRss && HAVE_GNU_TIME) {
    rssFile = join(tmp, `maxrss-${process.hrtime.bigint()}.txt`);
    argv = ['-f', '%M', '-o', rssFile, cmd, ...argv];
    cmd = '/usr/bin/time';
  }
  let s = null;
  const res = await run(cmd, argv, {
    cwd,
    timeoutSec,
    allowFail: true,
    onSpawn: sampler ? (child) => (s = new TreeSampler(child.pid, { skipRoot: !!rssFile })) : undefined,
  });
  res.sampled = s ? s.stop() : null;
  if (rssFile && existsSync(rssFile)) {
    // GNU time appends "Command exited with non-zero status N" lines before %M on failure.
    const lines = readFileSync(rssFile, 'utf8').trim().split('\n');
    const kb = Number(lines.at(-1));
    res.maxRssBytes = Number.isFinite(kb) ? kb * 1024 : null;
    rmSync(rssFile, { force: true });
  }
  res.json = parseJsonOutput(res.stdout);
  if (res.code !== 0 || res.signal) {
    const err = new BenchError(
      `git xet ${args.join(' ')} failed (exit ${res.code}${res.signal ? `, signal ${res.signal}` : ''}) after ${res.seconds.toFixed(2)}s\n` +
        `  repro: cd ${quote(cwd)} && node ${quote(join(ROOT, 'bin', 'git-xet'))} ${args.map(quote).join(' ')}\n` +
        `  (cwd is a temp copy of the workload, removed at exit unless --keep)\n` +
        (res.stdout.trim() ? `  stdout: ${tail(res.stdout.trim(), 3000)}\n` : '') +
        (res.stderr.trim() ? `  stderr: ${tail(res.stderr.trim(), 3000)}\n` : ''),
    );
    err.result = res;
    throw err;
  }
  return res;
}

export function parseJsonOutput(stdout) {
  const t = stdout.trim();
  if (!t) return null;
  try {
    return JSON.parse(t);
  } catch {
    /* fall through: maybe log lines before the JSON */
  }
  const lines = t.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    try {
      return JSON.parse(lines.slice(i).join('\n'));
    } catch {
      /* keep looking */
    }
  }
  return null;
}

function snapshotOf(res, what) {
  const oid = res.json?.snapshot;
  if (typeof oid !== 'string' || !/^[0-9a-f]{40,64}$/.test(oid)) {
    throw new BenchError(
      `${what}: expected JSON with {"snapshot":"<oid>"} on stdout, got: ${tail(res.stdout.trim() || '(empty)', 2000)}`,
    );
  }
  return oid;
}

// ---------------------------------------------------------------------------
// Independent check of a restore (not timed): worktree bytes/modes and git state
// ---------------------------------------------------------------------------

async function gitState(dir) {
  const q = async (args) => (await git(dir, args, { allowFail: true })).stdout.trimEnd();
  return {
    head: await q(['rev-parse', 'HEAD']),
    headRef: await q(['symbolic-ref', '-q', 'HEAD']),
    refs: (await q(['for-each-ref', '--format=%(refname) %(objectname)']))
      .split('\n')
      .filter((l) => l && !l.startsWith('refs/xet/'))
      .join('\n'),
    index: await q(['ls-files', '-s']),
    status: await q(['status', '--porcelain=v1', '-uall']),
    ignored: await q(['status', '--porcelain=v1', '--ignored']),
  };
}

async function compareRestore(srcDir, dstDir) {
  const problems = [];
  const a = walk(srcDir, { skipTop: ['.git'] });
  const b = walk(dstDir, { skipTop: ['.git'] });
  const mapA = new Map(a.entries.map((e) => [e.path, e]));
  const mapB = new Map(b.entries.map((e) => [e.path, e]));
  for (const [p, ea] of mapA) {
    const eb = mapB.get(p);
    if (!eb) problems.push(`missing in restore: ${p} (${ea.type})`);
    else if (ea.type !== eb.type) problems.push(`type differs: ${p} (${ea.type} vs ${eb.type})`);
    else if (ea.type === 'l' && ea.target !== eb.target) problems.push(`symlink target differs: ${p}`);
    else if (ea.type === 'f') {
      if (ea.size !== eb.size) problems.push(`size differs: ${p} (${ea.size} vs ${eb.size})`);
      else if (ea.exec !== eb.exec) problems.push(`exec bit differs: ${p}`);
      else if (fileDigest(join(srcDir, p)) !== fileDigest(join(dstDir, p))) problems.push(`content differs: ${p}`);
    }
    if (problems.length > 50) break;
  }
  for (const p of mapB.keys()) {
    if (!mapA.has(p)) problems.push(`extra in restore: ${p}`);
    if (problems.length > 60) break;
  }
  const sa = await gitState(srcDir);
  const sb = await gitState(dstDir);
  for (const k of Object.keys(sa)) {
    if (sa[k] !== sb[k]) {
      problems.push(`git ${k} differs:\n    source:   ${tail(sa[k], 600)}\n    restored: ${tail(sb[k], 600)}`);
    }
  }
  return { entriesCompared: a.entries.length, problems };
}

// ---------------------------------------------------------------------------
// Benchmark phases
// ---------------------------------------------------------------------------

async function waitForCli(minutes) {
  if (existsSync(CLI_MAIN)) return true;
  if (!minutes) return false;
  const deadline = Date.now() + minutes * 60_000;
  while (Date.now() < deadline) {
    log(`waiting for ${relative(ROOT, CLI_MAIN)} (run npm run build); retrying in 120s`);
    await sleep(120_000);
    if (existsSync(CLI_MAIN)) return true;
    await run('npm', ['run', 'build', '--silent'], { cwd: ROOT, allowFail: true });
    if (existsSync(CLI_MAIN)) return true;
  }
  return false;
}

/**
 * Copy bin/, dist/ (and the other runtime dirs) to tmp so that a rebuild of dist/ during
 * the run (tsc cleans and rewrites it) cannot break or change the CLI under measurement.
 * node_modules is symlinked, so module resolution is unchanged.
 */
export async function freezeCli(tmp) {
  const dst = join(tmp, 'cli');
  mkdirSync(dst, { recursive: true });
  for (const d of ['bin', 'dist', 'hooks', 'remote-helper']) {
    if (existsSync(join(ROOT, d))) await run('cp', ['-a', join(ROOT, d), join(dst, d)]);
  }
  copyFileSync(join(ROOT, 'package.json'), join(dst, 'package.json'));
  await run('ln', ['-s', join(ROOT, 'node_modules'), join(dst, 'node_modules')]);
  if (!existsSync(join(dst, 'dist', 'src', 'cli', 'main.js'))) {
    throw new BenchError('dist/ changed while it was being copied; run again');
  }
  return join(dst, 'bin', 'git-xet');
}

// Flush dirty pages from the previous (untimed) step so it does not bleed into the next timed one.
export const settle = () => run('sync', []);

async function tarZstd(srcRepo, out) {
  rmSync(out, { force: true });
  await settle();
  const r = await sh(`tar -C ${quote(srcRepo)} --exclude=./.git -cf - . | zstd -1 -T0 -q -o ${quote(out)}`, {});
  return r.seconds;
}

function editTrackedFiles(repo, files, round) {
  for (const f of files) appendFileSync(join(repo, f), `\n// bench re-capture edit, round ${round}\n`);
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const started = new Date();
  mkdirSync(WORK, { recursive: true });

  // stale temp dirs from killed runs
  for (const name of readdirSync(WORK)) {
    const m = name.match(/^tmp-(\d+)$/);
    if (!m) continue;
    let alive = false;
    try {
      process.kill(Number(m[1]), 0);
      alive = true;
    } catch {
      /* dead */
    }
    if (!alive || Number(m[1]) === process.pid) rmrf(join(WORK, name));
  }
  const tmp =
    opts.tmpBase === WORK ? join(WORK, `tmp-${process.pid}`) : join(opts.tmpBase, `xet-bench-tmp-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  const cleanup = () => {
    if (!opts.keep) rmrf(tmp);
  };
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      log(`${sig}: cleaning up ${relative(ROOT, tmp)}`);
      cleanup();
      process.exit(130);
    });
  }

  const results = {
    startedAt: started.toISOString(),
    machine: await machineInfo(opts.tmpBase),
    config: { reps: opts.reps, goals: GOALS, recaptureEdits: RECAPTURE_EDITS },
    workload: null,
    measurements: {},
    correctness: null,
    errors: [],
  };
  const fail = (phase, e) => {
    const msg = e instanceof BenchError ? e.message : e.stack || String(e);
    log(`ERROR in ${phase}:\n${msg}`);
    results.errors.push({ phase, message: msg });
  };

  try {
    const wl = await ensureWorkload(opts);
    const { repo } = wl;
    results.workload = { ...wl, repo: relative(ROOT, repo), dir: undefined };
    log(
      `workload: ${wl.worktree.files} files, ${fmtMB(wl.worktree.bytes)} in worktree ` +
        `(node_modules ${wl.nodeModules.files} files, ${fmtMB(wl.nodeModules.bytes)}), ` +
        `${wl.commits} commits, ${wl.trackedFiles} tracked files`,
    );
    if (wl.nodeModules.files < 20000 || wl.nodeModules.bytes < 200 * 1e6) {
      log('WARNING: node_modules is smaller than the intended >= 20,000 files / >= 200 MB');
    }

    // The CLI.
    let cliReady = false;
    if (!opts.baselinesOnly) {
      cliReady = await waitForCli(opts.waitForCliMin);
      if (!cliReady) {
        fail(
          'cli',
          new BenchError(`${relative(ROOT, CLI_MAIN)} does not exist: run \`npm run build\` (npm run bench does it)`),
        );
      }
    }

    if (cliReady) {
      const head = await git(ROOT, ['rev-parse', '--short', 'HEAD'], { allowFail: true });
      const dirty = await git(ROOT, ['status', '--porcelain', '--', 'src'], { allowFail: true });
      results.cli = {
        commit: head.stdout.trim() || null,
        srcDirty: dirty.stdout.trim() !== '',
        distBuiltAt: lstatSync(CLI_MAIN).mtime.toISOString(),
        frozenCopy: opts.freezeCli,
      };
      if (opts.freezeCli) CLI = await freezeCli(tmp);
    }

    // Uncompressed tar of the pristine workload incl. .git: the restore baseline's input.
    const srcTar = join(tmp, 'workload.tar');
    await run('tar', ['-C', repo, '-cf', srcTar, '.']);

    const M = results.measurements;
    const m = (name) => (M[name] ??= { xet: [], baseline: [], notes: {} });
    const tarOut = join(tmp, 'out.tar.zst');
    // warm the page cache once so the first repetition is not special
    await tarZstd(repo, tarOut);

    const editFiles = (await git(repo, ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`])).stdout
      .split('\0')
      .filter((p) => p.endsWith('.js') && !Object.values(wl.wip).flat().includes(p))
      .sort();
    const tenFiles = Array.from(
      { length: RECAPTURE_EDITS },
      (_, i) => editFiles[Math.floor(((i + 0.5) * editFiles.length) / RECAPTURE_EDITS)],
    );

    // ---- capture (cold) and re-capture -----------------------------------
    let lastCopy = null;
    let coldSnapshot = null;
    for (let rep = 1; rep <= opts.reps; rep++) {
      const tz = await tarZstd(repo, tarOut);
      m('coldCapture').baseline.push(tz);
      m('recapture').baseline.push(tz);
      m('coldCapture').notes.tarZstdBytes = lstatSync(tarOut).size;
      rmSync(tarOut, { force: true });
      log(`rep ${rep}: tar|zstd -1 -T0 ${fmtS(tz)}s`);
      if (!cliReady) continue;

      const copy = join(tmp, `capture-${rep}`);
      await run('cp', ['-a', repo, copy]);
      await settle();
      try {
        const cold = await xet(copy, ['capture', '-m', `bench cold ${rep}`, '--json'], {
          tmp,
          measureMaxRss: true,
          timeoutSec: opts.timeoutSec,
        });
        const snap = snapshotOf(cold, 'capture');
        m('coldCapture').xet.push(cold.seconds);
        (m('coldCapture').notes.maxRssBytes ??= []).push(cold.maxRssBytes ?? null);
        log(`rep ${rep}: cold capture ${fmtS(cold.seconds)}s -> ${snap}`);
        if (rep === 1) {
          const ref = await git(copy, ['for-each-ref', '--format=%(refname)', 'refs/xet/'], { allowFail: true });
          m('coldCapture').notes.xetRefsAfterCapture = ref.stdout.trim().split('\n').filter(Boolean);
          const gd = walk(join(copy, '.git'));
          m('coldCapture').notes.gitDirBytesAfterCapture = gd.bytes;
          m('coldCapture').notes.gitDirBytesBefore = wl.gitDir.bytes;
          m('coldCapture').notes.captureJson = cold.json;
        }

        editTrackedFiles(copy, tenFiles, rep);
        await settle();
        const re = await xet(copy, ['capture', '-m', `bench re-capture ${rep}`, '--json'], {
          tmp,
          measureMaxRss: true,
          timeoutSec: opts.timeoutSec,
        });
        const snap2 = snapshotOf(re, 're-capture');
        if (snap2 === snap)
          log(`WARNING: re-capture after ${RECAPTURE_EDITS} edits returned the same snapshot ${snap}`);
        m('recapture').xet.push(re.seconds);
        (m('recapture').notes.maxRssBytes ??= []).push(re.maxRssBytes ?? null);
        log(`rep ${rep}: re-capture (${RECAPTURE_EDITS} edits) ${fmtS(re.seconds)}s -> ${snap2}`);
        if (rep === opts.reps) {
          lastCopy = copy;
          coldSnapshot = snap;
        } else rmrf(copy);
      } catch (e) {
        fail(`capture rep ${rep}`, e);
        rmrf(copy);
        break;
      }
    }

    // ---- peak RSS of a cold capture, sampled --------------------------------
    if (cliReady && coldSnapshot) {
      const copy = join(tmp, 'capture-rss');
      await run('cp', ['-a', repo, copy]);
      await settle();
      try {
        const r = await xet(copy, ['capture', '-m', 'bench rss', '--json'], {
          tmp,
          measureMaxRss: true,
          sampler: true,
          timeoutSec: opts.timeoutSec,
        });
        snapshotOf(r, 'capture (rss run)');
        M.peakRss = {
          seconds: r.seconds,
          maxSingleProcessBytesFromTime: r.maxRssBytes ?? null,
          ...r.sampled,
        };
        log(
          `rss run: node ${fmtMB(r.sampled.nodePeakBytes)}, largest git child ${fmtMB(r.sampled.largestGitChild?.bytes)}, ` +
            `tree peak ${fmtMB(r.sampled.peakConcurrentTreeBytes)}, /usr/bin/time %M ${fmtMB(r.maxRssBytes)}`,
        );
      } catch (e) {
        fail('peak RSS capture', e);
      }
      rmrf(copy);
    }

    // ---- restore, verify ------------------------------------------------------
    for (let rep = 1; rep <= opts.reps; rep++) {
      const untar = join(tmp, `untar-${rep}`);
      await settle();
      const tx = await sh(`mkdir ${quote(untar)} && tar -xf ${quote(srcTar)} -C ${quote(untar)}`, {});
      m('restore').baseline.push(tx.seconds);
      rmrf(untar);
      log(`rep ${rep}: tar -x ${fmtS(tx.seconds)}s`);
      if (!lastCopy) continue;

      const dest = join(tmp, `restore-${rep}`);
      await settle();
      try {
        const r = await xet(lastCopy, ['restore', coldSnapshot, dest, '--json'], {
          tmp,
          measureMaxRss: true,
          timeoutSec: opts.timeoutSec,
        });
        m('restore').xet.push(r.seconds);
        (m('restore').notes.maxRssBytes ??= []).push(r.maxRssBytes ?? null);
        log(`rep ${rep}: restore ${fmtS(r.seconds)}s`);
      } catch (e) {
        fail(`restore rep ${rep}`, e);
        rmrf(dest);
        break;
      }
      await settle();
      try {
        const v = await xet(lastCopy, ['verify', coldSnapshot, dest, '--json'], {
          tmp,
          timeoutSec: opts.timeoutSec,
        });
        m('verify').xet.push(v.seconds);
        if (rep === 1) m('verify').notes.verifyJson = v.json;
        log(`rep ${rep}: verify ${fmtS(v.seconds)}s`);
      } catch (e) {
        fail(`verify rep ${rep}`, e);
      }
      const gs = await git(dest, ['status', '--porcelain'], { allowFail: true });
      m('verify').baseline.push(gs.seconds);
      if (gs.code !== 0) m('verify').notes.gitStatusError = tail(gs.stderr, 1000);
      log(`rep ${rep}: git status in restored dir ${fmtS(gs.seconds)}s`);
      if (rep === 1) {
        // Independent check against a pristine copy of the captured state.
        const ref = join(tmp, 'reference');
        await sh(`mkdir ${quote(ref)} && tar -xf ${quote(srcTar)} -C ${quote(ref)}`, {});
        log('checking restored tree against the captured workload (bytes, modes, symlinks, HEAD, refs, index, status)');
        results.correctness = await compareRestore(ref, dest);
        rmrf(ref);
        const n = results.correctness.problems.length;
        log(
          n ? `restore check: ${n} problem(s), first: ${results.correctness.problems[0]}` : 'restore check: identical',
        );
      }
      rmrf(dest);
    }
  } catch (e) {
    fail('harness', e);
  } finally {
    results.finishedAt = new Date().toISOString();
    const summary = summarize(results);
    results.summary = summary;
    printTable(results, summary);
    if (opts.writeResults) {
      writeFileSync(opts.resultsFile, JSON.stringify(results, null, 2) + '\n');
      await formatResults(opts.resultsFile);
      log(`wrote ${relative(ROOT, opts.resultsFile)}`);
    }
    cleanup();
  }
  process.exitCode = results.errors.length ? 1 : 0;
}

/** `npm run lint` checks bench/ with prettier: format results.json with the project's prettier if present. */
export async function formatResults(file) {
  const prettier = join(ROOT, 'node_modules', '.bin', 'prettier');
  if (!existsSync(prettier)) return;
  const r = await run(prettier, ['--write', '--log-level', 'warn', file], { allowFail: true });
  if (r.code !== 0) log(`warning: prettier could not format ${file}: ${tail(r.stderr, 500)}`);
}

function summarize(results) {
  const M = results.measurements;
  const row = (key, label, goal) => {
    const d = M[key];
    if (!d) return { key, label, goal, status: 'not run' };
    const xs = d.xet.length ? median(d.xet) : null;
    const bs = d.baseline.length ? median(d.baseline) : null;
    const ratio = xs != null && bs ? xs / bs : null;
    let status = 'not run';
    if (ratio != null) status = goal == null ? 'info' : ratio <= goal ? 'PASS' : 'FAIL';
    return { key, label, xetSeconds: xs, baselineSeconds: bs, ratio, goal, status, samples: d };
  };
  const rows = [
    row('coldCapture', 'cold capture vs tar|zstd -1 -T0', GOALS.coldCaptureRatio),
    row('recapture', `re-capture (${RECAPTURE_EDITS} edits) vs tar|zstd`, GOALS.recaptureRatio),
    row('restore', 'restore vs tar -x (incl .git)', GOALS.restoreRatio),
    row('verify', 'verify vs git status (restored)', null),
  ];
  const p = M.peakRss;
  let rss = { key: 'peakRss', label: 'peak RSS, cold capture', goal: GOALS.peakRssMB, status: 'not run' };
  if (p) {
    const gated = Math.max(p.peakConcurrentTreeBytes || 0, p.maxSingleProcessBytesFromTime || 0);
    rss = { ...rss, bytes: gated, status: gated / MB <= GOALS.peakRssMB ? 'PASS' : 'FAIL', detail: p };
  }
  return { rows, rss };
}

function printTable(results, summary) {
  const out = [];
  const w = results.workload;
  out.push('');
  out.push('git xet benchmark');
  if (w) {
    out.push(
      `workload: ${w.worktree.files} files + ${w.worktree.symlinks} symlinks, ${fmtMB(w.worktree.bytes)} in worktree; ` +
        `node_modules ${w.nodeModules.files} files ${fmtMB(w.nodeModules.bytes)}; ${w.commits} commits; ` +
        `.git ${fmtMB(w.gitDir.bytes)}`,
    );
  }
  out.push(`machine: ${results.machine.nproc} cores, ${fmtMB(results.machine.memBytes)} RAM, ${results.machine.fs}`);
  out.push(`median of ${results.config.reps} runs, page cache warm (same for both sides)`);
  out.push('');
  const hdr = ['measurement', 'git xet s', '(min-max)', 'baseline s', '(min-max)', 'ratio', 'goal', 'result'];
  const range = (xs) => (xs?.length ? `${fmtS(Math.min(...xs))}-${fmtS(Math.max(...xs))}` : '');
  const rows = summary.rows.map((r) => [
    r.label,
    fmtS(r.xetSeconds),
    range(r.samples?.xet),
    fmtS(r.baselineSeconds),
    range(r.samples?.baseline),
    r.ratio == null ? '-' : `${r.ratio.toFixed(3)}x`,
    r.goal == null ? '-' : `<= ${r.goal}x`,
    r.status,
  ]);
  const s = summary.rss;
  rows.push([s.label, s.bytes != null ? fmtMB(s.bytes) : '-', '', '', '', '', `<= ${s.goal} MiB`, s.status]);
  const widths = hdr.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => String(c).padEnd(widths[i])).join('  ');
  out.push(line(hdr));
  out.push(widths.map((n) => '-'.repeat(n)).join('  '));
  for (const r of rows) out.push(line(r));
  if (s.detail) {
    const d = s.detail;
    out.push('');
    out.push(
      `peak RSS detail: node CLI ${fmtMB(d.nodePeakBytes)} (VmHWM), largest git child ${fmtMB(d.largestGitChild?.bytes)}` +
        `${d.largestGitChild ? ` (${d.largestGitChild.cmd.slice(0, 60)})` : ''}, ` +
        `concurrent tree (PSS) ${fmtMB(d.peakConcurrentTreeBytes)} (sampled every 20 ms, ${d.gitProcessesSeen} git processes seen), ` +
        `max single process ${fmtMB(d.maxSingleProcessBytesFromTime)} (/usr/bin/time %M)`,
    );
    out.push(
      `  at the peak sample: ${(d.atPeak ?? []).map((x) => `${fmtMB(x.rssBytes)} ${(x.cmd || x.name).replace(/^\S*\/node \S*git-xet/, 'git-xet').slice(0, 48)}`).join(' + ')}`,
    );
  }
  if (results.correctness) {
    const c = results.correctness;
    out.push(
      `restore check: ${c.problems.length ? `${c.problems.length} PROBLEM(S)` : 'identical'} ` +
        `(${c.entriesCompared} worktree entries, HEAD, refs, index, status)`,
    );
    for (const p of c.problems.slice(0, 10)) out.push(`  - ${p}`);
  }
  if (results.errors.length) {
    out.push('');
    out.push(`ERRORS (${results.errors.length}):`);
    for (const e of results.errors) out.push(`  [${e.phase}] ${e.message.split('\n').join('\n    ')}`);
  }
  out.push('');
  process.stdout.write(out.join('\n') + '\n');
}

export async function machineInfo(tmpBase) {
  const df = await run('df', ['-T', tmpBase], { allowFail: true });
  const fsLine = df.stdout.trim().split('\n')[1]?.split(/\s+/) ?? [];
  const gv = await run('git', ['--version'], { allowFail: true });
  const tv = await run('tar', ['--version'], { allowFail: true });
  const zv = await run('zstd', ['--version'], { allowFail: true });
  return {
    nproc: os.availableParallelism?.() ?? os.cpus().length,
    cpu: os.cpus()[0]?.model,
    memBytes: os.totalmem(),
    fs: fsLine.length ? `${fsLine[1]} (${fsLine[0]})` : 'unknown',
    tmpBase,
    kernel: os.release(),
    node: process.version,
    git: gv.stdout.trim(),
    tar: tv.stdout.split('\n')[0],
    zstd: zv.stdout.trim(),
    gnuTime: HAVE_GNU_TIME,
  };
}

// Run only when executed: bench/forks.mjs imports the workload builder and the helpers above.
if (process.argv[1] && realpathSync(resolve(process.argv[1])) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`bench: ${e.stack || e}\n`);
    process.exit(1);
  });
}

/** The end of a harness report: problems, warnings and errors after the tables, then print it all. */
export function printReport(out, results) {
  for (const [title, list] of [
    ['PROBLEMS', results.problems],
    ['WARNINGS', results.warnings],
  ]) {
    if (!list.length) continue;
    out.push('', `${title} (${list.length}):`);
    for (const p of list) out.push(`  - ${p.split('\n').join('\n    ')}`);
  }
  if (results.errors.length) {
    out.push('', `ERRORS (${results.errors.length}):`);
    for (const e of results.errors) out.push(`  [${e.phase}] ${e.message.split('\n').join('\n    ')}`);
  }
  out.push('');
  process.stdout.write(out.join('\n') + '\n');
}
