// The benchmark harness shared by every bench/*.mjs script: option parsing, child processes (tracked,
// so a signal can stop them), timing with repeats and medians, ratios against a baseline measured in
// the same run, the machine description, tables, and the bench/<area>-results.json writer.
// Plain ESM, node built-ins only. The workloads live in bench/lib/workload.mjs; what each script
// measures stays in the script.

import { spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout, clearTimeout } from 'node:timers';

export const BENCH_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT = resolve(BENCH_DIR, '..');
export const WORK = join(BENCH_DIR, 'work');
export const HAVE_GNU_TIME = existsSync('/usr/bin/time');

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

export function tail(s, n = 4000) {
  return s.length > n ? `…${s.slice(-n)}` : s;
}

export function quote(a) {
  return /^[\w@%+=:,./-]+$/.test(a) ? a : `'${String(a).replace(/'/g, `'\\''`)}'`;
}

export const MB = 1024 * 1024;
export const fmtS = (s) => (s == null ? '-' : s.toFixed(s < 10 ? 3 : 2));
export const fmtMB = (b) => (b == null ? '-' : `${(b / MB).toFixed(1)} MiB`);
export const fmtMs = (s) => (s == null ? '-' : `${(s * 1000).toFixed(0)} ms`);
export const fmtX = (r) => (r == null ? '-' : `${r < 0.1 ? r.toFixed(3) : r.toFixed(2)}x`);
export const fmtB = (b) => (b == null ? '-' : b < 1e6 ? `${(b / 1000).toFixed(1)} kB` : `${(b / 1e6).toFixed(1)} MB`);
export const sum = (xs) => xs.reduce((a, b) => a + b, 0);

export function rmrf(p) {
  rmSync(p, { recursive: true, force: true, maxRetries: 3 });
}

// ---------------------------------------------------------------------------
// Timing: repeats, medians, ratios against the baseline of the same run
// ---------------------------------------------------------------------------

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
/** Median of samples, null when there are none. */
export const med = (xs) => (xs?.length ? median(xs) : null);
export const ratio = (a, b) => (a != null && b ? a / b : null);
export const verdict = (r, goal) => (r == null ? 'not run' : r <= goal ? 'PASS' : 'FAIL');
/** "min-max" of samples (seconds), empty for fewer than two. */
export const range = (xs) => (xs?.length > 1 ? `${fmtS(Math.min(...xs))}-${fmtS(Math.max(...xs))}` : '');

/**
 * Runs fn(rep) for rep = 1..reps and returns what each call returned (usually seconds). Every
 * script times its steps with the child's own wall time (run().seconds), after a sync (settle()).
 */
export async function repeat(reps, fn) {
  const out = [];
  for (let rep = 1; rep <= reps; rep++) out.push(await fn(rep));
  return out;
}

/**
 * One result row: git xet's samples against the alternative's, both measured in this run; the
 * ratio is of the medians; goal null means information only. Lower is better for every goal.
 */
export function compare(label, xetSamples, baselineSamples, goal) {
  const x = med(xetSamples);
  const b = med(baselineSamples);
  const r = ratio(x, b);
  const status = r == null ? 'not run' : goal == null ? 'info' : verdict(r, goal);
  return { label, xet: x, baseline: b, ratio: r, goal, status };
}

/**
 * One result row in milliseconds, from samples in seconds: git xet's median against a baseline's
 * (both measured in this run). The goal is a ratio of the medians (goalRatio), a difference of them
 * (goalMs), or with `absolute` a bound on git xet's median alone (goalMs; no baseline). No goal:
 * information only.
 */
export function goalRow(label, xetS, baseS, { goalRatio = null, goalMs = null, absolute = false } = {}) {
  const ms = (s) => (s == null ? null : s * 1000);
  const x = ms(med(xetS));
  const b = ms(med(baseS));
  const r = x != null && b ? x / b : null;
  const d = x != null && b != null ? x - b : null;
  let status = 'not run';
  if (x != null) {
    if (absolute) status = goalMs == null ? 'info' : x <= goalMs ? 'PASS' : 'FAIL';
    else if (goalRatio != null) status = r == null ? 'not run' : r <= goalRatio ? 'PASS' : 'FAIL';
    else if (goalMs != null) status = d == null ? 'not run' : d <= goalMs ? 'PASS' : 'FAIL';
    else status = 'info';
  }
  return {
    label,
    xetMs: x,
    baselineMs: absolute ? null : b,
    ratio: absolute ? null : r,
    overheadMs: absolute ? null : d,
    goalRatio,
    goalMs,
    status,
  };
}

/** The table lines of goalRow() rows. */
export function goalTable(rows) {
  const f = (v) => (v == null ? '-' : Math.abs(v) < 10 ? `${v.toFixed(2)} ms` : fmtMs(v / 1000));
  return table(
    ['measurement', 'git xet', 'baseline', 'ratio', 'overhead', 'goal', 'result'],
    rows.map((r) => [
      r.label,
      f(r.xetMs),
      f(r.baselineMs),
      r.ratio == null ? '-' : r.ratio.toFixed(3),
      f(r.overheadMs),
      r.goalRatio != null ? `<= ${r.goalRatio}x` : r.goalMs != null ? `<= ${r.goalMs} ms` : '-',
      r.status,
    ]),
  );
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

// The options several scripts share. A script lists the ones it accepts and may change a default.
const COMMON = {
  reps: { flag: '--reps', arg: 'N', help: (d) => `repetitions per measurement, median reported (default ${d})`, d: 3 },
  tmpBase: { flag: '--tmp-base', arg: 'DIR', help: (d) => `where the run's temp dir goes (default ${d})`, d: WORK },
  rebuildWorkload: {
    flag: '--rebuild-workload',
    help: () => 'rebuild the cached workload under bench/work/',
    d: false,
  },
  timeoutSec: { flag: '--timeout', arg: 'SEC', help: (d) => `per-command timeout (default ${d})`, d: 1800 },
  keep: { flag: '--keep', help: () => 'keep the per-run temp dir (debugging)', d: false },
  writeResults: { flag: '--no-results', help: (_, f) => `do not write ${f}`, d: true },
  resultsFile: { flag: '--results', arg: 'FILE', help: () => 'write the results there instead', d: null },
  freezeCli: {
    flag: '--no-freeze-cli',
    help: () =>
      'run bin/git-xet in place instead of a copy of bin/ + dist/ taken at start\n' +
      '(the copy keeps a concurrent `npm run build` from breaking a run)',
    d: true,
  },
};

const numberOf = (flag, v) => {
  const n = Number(v);
  if (v == null || !Number.isFinite(n) || n < 0) die(`${flag} needs a non-negative number`);
  return n;
};

/**
 * Parses argv. spec: { script (e.g. 'bench/gc.mjs'), results (file name in bench/),
 * common: { reps: 3, tmpBase: '/dev/shm', ... } (the shared options it takes, with its defaults;
 * undefined keeps the shared default), help: { key: text } (a script's own help line for a shared
 * option), options: [{ flag, key, arg?, help, default, parse?(value) }] (an option without arg sets
 * key to !default) }. Returns the options object; --help prints and exits.
 */
export function parseArgs(argv, spec) {
  const resultsDefault = join(BENCH_DIR, spec.results);
  const defs = [];
  for (const [key, d] of Object.entries(spec.common ?? {})) {
    const c = COMMON[key];
    if (!c) throw new Error(`unknown common option ${key}`);
    const def = d === undefined ? c.d : d;
    defs.push({
      flag: c.flag,
      key,
      arg: c.arg,
      default: key === 'resultsFile' ? resultsDefault : def,
      help:
        spec.help?.[key] ??
        c.help(key === 'tmpBase' && def === WORK ? 'bench/work/' : def, relative(ROOT, resultsDefault)),
      parse:
        key === 'reps'
          ? (v) => Math.max(1, Math.floor(numberOf(c.flag, v)))
          : key === 'timeoutSec'
            ? (v) => numberOf(c.flag, v)
            : c.arg
              ? (v) => resolve(v)
              : undefined,
    });
  }
  defs.push(...(spec.options ?? []));
  const help =
    `usage: node ${spec.script} [options]\n\n` +
    defs
      .map((d) => {
        const head = `  ${d.flag}${d.arg ? ` ${d.arg}` : ''}`;
        const [first, ...rest] = String(d.help).split('\n');
        return [`${head.padEnd(22)} ${first}`, ...rest.map((l) => `${' '.repeat(23)}${l}`)].join('\n');
      })
      .join('\n') +
    '\n';
  const o = {};
  for (const d of defs) o[d.key] = d.default;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') {
      process.stdout.write(help);
      process.exit(0);
    }
    const d = defs.find((x) => x.flag === a);
    if (!d) die(`unknown option ${a}\n${help}`);
    if (!d.arg) o[d.key] = !d.default;
    else {
      const v = argv[++i];
      if (v == null) die(`${a} needs a value`);
      o[d.key] = d.parse ? d.parse(v) : v;
    }
  }
  return o;
}

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

// Every running child, so that a signal handler can stop them before it removes the run dir (a
// `git xet fork` with its cwd in the repo keeps a mount busy).
export const children = new Set();
let stopping = false;
export const isStopping = () => stopping;

/** SIGTERM every running child and wait up to 5 s for them; no new child starts afterwards. */
export async function stopChildren() {
  stopping = true;
  for (const c of children) c.kill('SIGTERM');
  for (let i = 0; i < 50 && children.size; i++) await sleep(100);
}

/**
 * Run a child process. Resolves with {code, signal, stdout, stderr, seconds, pid};
 * rejects with a BenchError naming the command, cwd, exit status and output tail
 * unless allowFail is set. `onSpawn(child)` lets a caller sample the process; `input` (string or
 * Buffer) is written to its stdin.
 */
export function run(cmd, args, opts = {}) {
  const { cwd = ROOT, env = process.env, allowFail = false, timeoutSec = 0, stdio = 'pipe', onSpawn, input } = opts;
  const cmdline = [cmd, ...args].map(quote).join(' ');
  if (stopping) return Promise.reject(new BenchError(`interrupted; not starting ${cmdline}`));
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
        stdio: [input == null ? 'ignore' : 'pipe', ...(stdio === 'pipe' ? ['pipe', 'pipe'] : [stdio, stdio])],
      });
    } catch (e) {
      rejectP(new BenchError(`cannot start ${cmdline}: ${e.message}`));
      return;
    }
    children.add(child);
    if (input != null) child.stdin.end(input);
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
      children.delete(child);
      rejectP(new BenchError(`cannot run ${cmdline} (cwd ${cwd}): ${e.message}`));
    });
    child.on('close', (code, signal) => {
      const seconds = (performance.now() - t0) / 1000;
      clearTimeout(timer);
      children.delete(child);
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

/**
 * run() under GNU time: the result also has cpuSeconds, the user + system time of the child and
 * every descendant it waited for (null without /usr/bin/time). On a loaded machine wall time
 * measures the neighbours as much as the command; CPU time much less so.
 */
export async function runCpu(cmd, args, opts = {}) {
  if (!HAVE_GNU_TIME) return { ...(await run(cmd, args, opts)), cpuSeconds: null };
  const file = join(os.tmpdir(), `xet-bench-cpu-${process.pid}-${process.hrtime.bigint()}`);
  try {
    const res = await run('/usr/bin/time', ['-f', '%U %S', '-o', file, cmd, ...args], opts);
    // GNU time writes "Command exited with non-zero status N" before the format on a failure.
    const [u, s] = (readFileSync(file, 'utf8').trim().split('\n').at(-1) ?? '').split(' ').map(Number);
    res.cpuSeconds = Number.isFinite(u) && Number.isFinite(s) ? u + s : null;
    return res;
  } finally {
    rmSync(file, { force: true });
  }
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

// Flush dirty pages from the previous (untimed) step so it does not bleed into the next timed one.
export const settle = () => run('sync', []);

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

/** The error for a failed `git xet` run: the command, a line to repeat it by hand, the output. */
export function xetError(args, res, cwd, { note = '', what, reproPrefix = '', reproCli } = {}) {
  const how = what ?? `failed (exit ${res.code}${res.signal ? `, signal ${res.signal}` : ''})`;
  const err = new BenchError(
    `git xet ${args.join(' ')} ${how} after ${res.seconds.toFixed(2)}s\n` +
      `  repro: cd ${quote(cwd)} && ${reproPrefix}node ${quote(reproCli ?? join(ROOT, 'bin', 'git-xet'))} ${args.map(quote).join(' ')}\n` +
      (note ? `  (${note})\n` : '') +
      (res.stdout.trim() ? `  stdout: ${tail(res.stdout.trim(), 3000)}\n` : '') +
      (res.stderr.trim() ? `  stderr: ${tail(res.stderr.trim(), 3000)}\n` : ''),
  );
  err.result = res;
  return err;
}

/**
 * `git xet args` in cwd, run as `via` says: 'node' (node <cli> …), 'program' (<cli> … run as a
 * program, as git runs it: its native thin client first) or 'git' (`git xet …` with the CLI's bin/
 * first on PATH, as a user types it). Resolves with run()'s result plus json (parsed stdout).
 * Throws xetError on a failure, and when requireJson is set and stdout holds no JSON; note,
 * reproPrefix and reproCli go to xetError. env undefined: run()'s (or runner's) default; cpu: run it
 * under runCpu (the result has cpuSeconds).
 */
export async function runXet(cli, cwd, args, opts = {}) {
  const { timeoutSec = 0, requireJson = false, env, cpu = false, via = 'node', ...errorOpts } = opts;
  const runner = opts.runner ?? (cpu ? runCpu : run);
  delete errorOpts.runner;
  const [cmd, argv] = {
    node: [process.execPath, [cli, ...args]],
    program: [cli, args],
    git: ['git', ['xet', ...args]],
  }[via];
  const gitEnv = via === 'git' ? { PATH: `${dirname(cli)}:${(env ?? process.env).PATH}` } : null;
  const res = await runner(cmd, argv, {
    cwd,
    timeoutSec,
    allowFail: true,
    ...(env || gitEnv ? { env: { ...(env ?? process.env), ...gitEnv } } : {}),
  });
  res.json = parseJsonOutput(res.stdout);
  if (res.code !== 0 || res.signal) throw xetError(args, res, cwd, errorOpts);
  if (requireJson && !res.json) throw xetError(args, res, cwd, { ...errorOpts, what: 'printed no JSON' });
  return res;
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

/**
 * `git xet args` of the CLI under measurement, with a script's usual options: its --timeout, JSON
 * required after --json, the note that the cwd is in the run dir. `cliPath()` is read at each call
 * (setUpCli replaces the path by a frozen copy); `defaults` and each call's options override.
 */
export function xetRunner(cliPath, opts, defaults = {}) {
  return (cwd, args, o = {}) =>
    runXet(cliPath(), cwd, args, {
      timeoutSec: opts.timeoutSec,
      requireJson: args.includes('--json'),
      note: 'cwd is in the run dir, removed at exit unless --keep',
      ...defaults,
      ...o,
    });
}

/** The CLI under measurement: results.cli (its commit), a frozen copy in runDir unless
 * --no-freeze-cli, results.machine. Returns the path of the CLI to run. */
export async function setUpCli(opts, runDir, results) {
  results.cli = await cliInfo(opts.freezeCli);
  const cli = opts.freezeCli ? await freezeCli(runDir) : join(ROOT, 'bin', 'git-xet');
  results.machine = await machineInfo(runDir);
  return cli;
}

/** The commit of the tree under measurement, and whether src/ has uncommitted edits. */
export async function cliInfo(frozenCopy) {
  const head = await git(ROOT, ['rev-parse', '--short', 'HEAD'], { allowFail: true });
  const dirty = await git(ROOT, ['status', '--porcelain', '--', 'src'], { allowFail: true });
  return { commit: head.stdout.trim() || null, srcDirty: dirty.stdout.trim() !== '', frozenCopy };
}

// ---------------------------------------------------------------------------
// Files and mounts
// ---------------------------------------------------------------------------

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

/** Mount points at or under `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsUnder(dir) {
  let text;
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    if (f.length < 5) continue;
    const mp = f[4].replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
    if (mp === dir || mp.startsWith(`${dir}/`)) out.push(mp);
  }
  return [...new Set(out)].sort((a, b) => b.length - a.length);
}

/** Synchronous (usable from signal and exit handlers): unmount everything under dir, deepest first. */
export function unmountUnder(dir) {
  for (const mp of mountsUnder(dir)) {
    let r = spawnSync('umount', [mp], { encoding: 'utf8' });
    if (r.status !== 0) {
      log(`umount ${mp} failed (${(r.stderr || '').trim()}); detaching it lazily`);
      r = spawnSync('umount', ['-l', mp], { encoding: 'utf8' });
      if (r.status !== 0) log(`umount -l ${mp} failed too: ${(r.stderr || '').trim()}`);
    }
  }
  return mountsUnder(dir);
}

/**
 * This run's dir <base>/<prefix><pid>: stale dirs of killed runs torn down first, and this one torn
 * down at exit and on SIGINT/SIGTERM (after the child processes are stopped). `teardown(dir)`
 * unmounts and removes (default: rmrf); with `keep` the dir is only reported. `cleanup()` tears it
 * down early (idempotent).
 */
export function openRunDir(base, prefix, { teardown = rmrf, keep = false } = {}) {
  mkdirSync(base, { recursive: true });
  cleanStaleRuns(base, prefix, teardown);
  const dir = join(base, `${prefix}${process.pid}`);
  mkdirSync(dir, { recursive: true });
  let done = false;
  const cleanup = () => {
    if (done) return;
    done = true;
    if (keep) log(`kept ${dir}`);
    else teardown(dir);
  };
  process.on('exit', cleanup);
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, async () => {
      log(`${sig}: stopping the child processes, then removing ${dir}`);
      await stopChildren();
      cleanup();
      process.exit(130);
    });
  }
  return { dir, cleanup };
}

/** Run dirs <base>/<prefix><pid> of runs killed harder than a signal: teardown(dir) those whose pid is gone. */
export function cleanStaleRuns(base, prefix, teardown) {
  if (!existsSync(base)) return;
  for (const name of readdirSync(base)) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length));
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
      continue; // alive
    } catch {
      /* dead */
    }
    log(`cleaning up the stale run dir ${join(base, name)}`);
    teardown(join(base, name));
  }
}

// ---------------------------------------------------------------------------
// The machine, the report, the results file
// ---------------------------------------------------------------------------

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
    // Other sessions share the machine: the load at the start says how quiet it was.
    loadAvg: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

/** A function that records the load average at a phase in results.load: how quiet the machine was. */
export function loadNoter(results) {
  results.load ??= [];
  return (phase) => results.load.push({ phase, at: new Date().toISOString(), loadAvg: os.loadavg() });
}

/** The load average now, as one line of a report: other sessions share the machine. */
export function loadNow() {
  return `load average ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')} on ${os.availableParallelism()} cores`;
}

/** The load average loadNoter() recorded at each phase, as one line of a report. */
export function loadLine(results) {
  return `load by phase: ${results.load.map((l) => `${l.phase} ${l.loadAvg.map((x) => x.toFixed(2)).join(' ')}`).join('; ')}`;
}

/** The result lists every script keeps, and the functions that fill them (each also logs). */
export function recorder(results) {
  results.problems ??= [];
  results.warnings ??= [];
  results.errors ??= [];
  return {
    fail(phase, e) {
      if (stopping) return; // the failures that follow an interrupt are its echoes
      const msg = e instanceof BenchError ? e.message : e.stack || String(e);
      log(`ERROR in ${phase}:\n${msg}`);
      results.errors.push({ phase, message: msg });
    },
    warn(msg) {
      log(`WARNING: ${msg}`);
      results.warnings.push(msg);
    },
    problem(msg) {
      log(`PROBLEM: ${msg}`);
      results.problems.push(msg);
    },
  };
}

/** Lines of a plain-text table, columns padded to their widest cell. */
export function table(hdr, rows) {
  const widths = hdr.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) =>
    r
      .map((c, i) => String(c).padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return [line(hdr), widths.map((n) => '-'.repeat(n)).join('  '), ...rows.map(line)];
}

/** The end of a harness report: problems, warnings and errors after the tables, then print it all. */
export function printReport(out, results) {
  for (const [title, list] of [
    ['PROBLEMS', results.problems ?? []],
    ['WARNINGS', results.warnings ?? []],
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

/** `npm run lint` checks bench/ with prettier: format results.json with the project's prettier if present. */
export async function formatResults(file) {
  const prettier = join(ROOT, 'node_modules', '.bin', 'prettier');
  if (!existsSync(prettier)) return;
  const r = await run(prettier, ['--write', '--log-level', 'warn', file], { allowFail: true });
  if (r.code !== 0) log(`warning: prettier could not format ${file}: ${tail(r.stderr, 500)}`);
}

/** Write results (stamped finishedAt) to opts.resultsFile unless --no-results, formatted as lint wants. */
export async function writeResults(opts, results) {
  if (!opts.writeResults) return;
  writeFileSync(opts.resultsFile, JSON.stringify(results, null, 2) + '\n');
  await formatResults(opts.resultsFile);
  log(`wrote ${relative(ROOT, opts.resultsFile)}`);
}

/**
 * One script's run, measured as a whole: the results (the machine, the start time and `fields`) and
 * their recorder go to `body`, which returns the report's lines. The results are then written and
 * the report printed; a failure is recorded and printed instead, with exit status 1. `cleanup` runs
 * last either way.
 */
export async function reportRun(opts, fields, body, cleanup = () => {}) {
  const results = { machine: await machineInfo(opts.tmpBase), startedAt: new Date().toISOString(), ...fields };
  const rec = recorder(results);
  try {
    const report = await body(results, rec);
    await writeResults(opts, results);
    printReport(report, results);
  } catch (e) {
    rec.fail('run', e);
    printReport([], results);
    process.exitCode = 1;
  } finally {
    cleanup();
  }
}

/** Runs main(); an exception escaping it is the harness's own bug: print it and exit 1. */
export function start(main) {
  main().catch((e) => {
    process.stderr.write(`bench: ${e.stack || e}\n`);
    process.exit(1);
  });
}
