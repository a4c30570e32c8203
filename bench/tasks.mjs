#!/usr/bin/env node
// git xet tasks and hooks benchmarks (issue 10, "Speed").
//
//   npm run bench                 (= … && node bench/tasks.mjs)
//   node bench/tasks.mjs --help   (options)
//
// The tree: a small app repository (3 commits, 200 tracked files, an ignored build dir), or with
// --workload a copy of the Node workload's repository (bench/lib/workload.mjs: vendored lodash
// history, an npm-installed node_modules, work in progress). Everything a run creates lives in
// <tmp-base>/xet-bench-tasks-<pid>/ (default /dev/shm), removed at exit, on SIGINT/SIGTERM too.
//
//   run      `git xet task run --no-capture -- true` vs `true` alone, wall time: the overhead (the
//            difference of the medians) <= 150 ms. Also `task run -- true` (with the workspace
//            capture) for information.
//   result   `git xet task result <id> --max-bytes 65536 --json` of a 64 KiB chunk from the middle of
//            a spooled 1 MiB result: <= 100 ms. `git xet version` (node's start and the CLI's
//            loading) for information. The task is made by `task run` (its command writes the
//            result to $XET_TASK_RESULT); when task run does not work yet, through the store API of
//            the CLI under test (dist/src/tasks/store.js), as the tests do: noted in the results.
//   commit   `git commit` (one changed file), 20 in a row per sample, with git xet's hooks installed vs the same repository
//            without them, alternated: the overhead <= 5 ms. The hooks are installed with
//            `git xet hooks install` (or `git xet init`); if neither installs any, the row says
//            'hooks not installed'.
//
// A command that does not exist yet is reported as missing and the measurements that need it are
// skipped. Results: tables on stdout and bench/tasks-results.json.

import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import { dirname, join, relative } from 'node:path';
import {
  BenchError,
  GIT_ENV,
  ROOT,
  fmtMs,
  git,
  loadNoter,
  med,
  openRunDir,
  parseArgs,
  printReport,
  recorder,
  run,
  runCpu,
  setUpCli,
  start,
  table,
  writeResults,
  xetRunner,
} from './lib/harness.mjs';
import { ensureWorkload } from './lib/workload.mjs';

// Overheads, milliseconds (lower is better).
const GOALS = {
  taskRunOverheadMs: 150,
  taskResultChunkMs: 100,
  commitHookOverheadMs: 5,
};
const RESULT_BYTES = 1024 * 1024;
const CHUNK = 65536;
/** Commits per timed sample of the commit part. */
const COMMITS = 20;

const ARGS = {
  script: 'bench/tasks.mjs',
  results: 'tasks-results.json',
  common: {
    reps: 15,
    tmpBase: '/dev/shm',
    rebuildWorkload: false,
    timeoutSec: 600,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'repetitions of each timed command (commits: batches of 20, alternated), median reported (default 15)',
    tmpBase: 'where the run dir goes (default /dev/shm)',
    rebuildWorkload: 'with --workload: rebuild the cached Node workload under bench/work/',
  },
  options: [
    {
      flag: '--workload',
      key: 'workload',
      default: false,
      help: 'use a copy of the Node workload repository instead of the small app (bigger index and tree)',
    },
  ],
};

/** Small app: 3 commits, 200 tracked files in 10 dirs, an ignored build dir. */
async function makeApp(dir) {
  mkdirSync(dir, { recursive: true });
  await git(dir, ['init', '-q', '-b', 'main']);
  writeFileSync(join(dir, '.gitignore'), 'build/\n');
  for (let c = 0; c < 3; c++) {
    for (let d = 0; d < 10; d++) {
      mkdirSync(join(dir, 'src', `m${d}`), { recursive: true });
      for (let f = 0; f < 20; f++) {
        writeFileSync(join(dir, 'src', `m${d}`, `f${f}.js`), `// ${c}\nmodule.exports = ${d * 100 + f + c};\n`);
      }
    }
    await git(dir, ['add', '-A']);
    await git(dir, ['commit', '-q', '-m', `c${c}`]);
  }
  mkdirSync(join(dir, 'build'), { recursive: true });
  writeFileSync(join(dir, 'build', 'out.js'), 'built\n');
}

/** Hook files in the hooks directory git uses that look like git xet's. */
async function xetHooks(repo) {
  const rel = (await git(repo, ['rev-parse', '--git-path', 'hooks'])).stdout.trim();
  const dir = rel.startsWith('/') ? rel : join(repo, rel);
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((n) => {
    if (n.endsWith('.sample')) return false;
    try {
      return /xet/i.test(readFileSync(join(dir, n), 'utf8'));
    } catch {
      return false;
    }
  });
}

const ms = (s) => (s == null ? null : s * 1000);
/** One row: git xet's samples against the baseline's, compared by the difference of the medians. */
function overhead(label, xetS, baseS, goalMs) {
  const x = ms(med(xetS));
  const b = ms(med(baseS));
  const d = x != null && b != null ? x - b : null;
  const status = d == null ? 'not run' : goalMs == null ? 'info' : d <= goalMs ? 'PASS' : 'FAIL';
  return { label, xetMs: x, baselineMs: b, overheadMs: d, goalMs, status };
}
function absolute(label, xetS, goalMs) {
  const x = ms(med(xetS));
  const status = x == null ? 'not run' : goalMs == null ? 'info' : x <= goalMs ? 'PASS' : 'FAIL';
  return { label, xetMs: x, baselineMs: null, overheadMs: null, goalMs, status };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const { dir: runDir, cleanup } = openRunDir(opts.tmpBase, 'xet-bench-tasks-', { keep: opts.keep });

  const results = {
    startedAt: new Date().toISOString(),
    machine: null,
    config: {
      reps: opts.reps,
      goals: GOALS,
      workload: opts.workload,
      tmpBase: opts.tmpBase,
      resultBytes: RESULT_BYTES,
    },
    tree: null,
    cli: null,
    commands: {},
    run: null,
    result: null,
    commit: null,
    summary: null,
    load: [],
  };
  const { fail, warn } = recorder(results);
  const noteLoad = loadNoter(results);

  let cli = join(ROOT, 'bin', 'git-xet');
  const xet = xetRunner(() => cli, opts);
  let commandList = null;
  const has = async (...words) => {
    const args = [cli, ...words.slice(0, -1), '--help'];
    const text = (await run(process.execPath, args, { allowFail: true })).stdout;
    if (words.length === 1) commandList = text;
    return new RegExp(`^  ${words.at(-1)}\\b`, 'm').test(text);
  };

  try {
    noteLoad('start');
    if (!existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js'))) {
      throw new BenchError('dist/src/cli/main.js does not exist: run `npm run build` (npm run bench does it)');
    }
    cli = await setUpCli(opts, runDir, results);
    results.commands.task = await has('task');
    results.commands.hooks = await has('hooks');
    results.commands['task run'] = results.commands.task && (await has('task', 'run'));
    results.commands['task result'] = results.commands.task && (await has('task', 'result'));
    void commandList;
    const missing = Object.entries(results.commands)
      .filter(([, ok]) => !ok)
      .map(([c]) => c);
    if (missing.length) warn(`git xet has no ${missing.join(', ')} command yet: the parts that need it are skipped`);

    // The repository every part works in (commit gets two copies of it).
    const app = join(runDir, 'app');
    if (opts.workload) {
      const w = await ensureWorkload(opts);
      await run('cp', ['-a', w.repo, app]);
      results.tree = { kind: 'node workload', repo: relative(ROOT, w.repo) };
    } else {
      await makeApp(app);
      results.tree = { kind: 'small app', files: 201, commits: 3 };
    }
    await xet(app, ['init', '--json']);

    // ---- run: task run --no-capture -- true vs true ----------------------------------------------
    const R = (results.run = {
      trueSeconds: [],
      trueCpuSeconds: [],
      noCaptureSeconds: [],
      noCaptureCpuSeconds: [],
      captureSeconds: [],
      captureCpuSeconds: [],
    });
    try {
      const sample = async (key, fn) => {
        const r = await fn();
        R[`${key}Seconds`].push(r.seconds);
        if (r.cpuSeconds != null) R[`${key}CpuSeconds`].push(r.cpuSeconds);
      };
      for (let i = 0; i < opts.reps; i++) await sample('true', () => runCpu('true', [], { cwd: app }));
      if (results.commands['task run']) {
        await xet(app, ['task', 'run', '--no-capture', '--', 'true']); // warm: the first run makes the task dirs
        for (let i = 0; i < opts.reps; i++) {
          await sample('noCapture', () => xet(app, ['task', 'run', '--no-capture', '--', 'true'], { cpu: true }));
        }
        for (let i = 0; i < opts.reps; i++) {
          await sample('capture', () => xet(app, ['task', 'run', '--', 'true'], { cpu: true }));
        }
      }
    } catch (e) {
      fail('run', e);
    }
    noteLoad('run');

    // ---- result: one 64 KiB chunk of a spooled 1 MiB result ---------------------------------------
    const S = (results.result = {
      via: null,
      task: null,
      versionSeconds: [],
      versionCpuSeconds: [],
      chunkSeconds: [],
      chunkCpuSeconds: [],
      checked: false,
    });
    try {
      // 18 bytes repeated; 1 MiB is 58,254 of them and 'abcd': valid UTF-8 throughout.
      const payload = Buffer.alloc(RESULT_BYTES, 'abcdefghij€😀\n');
      const payloadFile = join(runDir, 'payload.txt');
      writeFileSync(payloadFile, payload);
      let id = null;
      if (results.commands['task run']) {
        try {
          const r = await xet(app, [
            'task',
            'run',
            '--no-capture',
            '--json',
            '--',
            'sh',
            '-c',
            'cat "$1" >"$XET_TASK_RESULT"',
            'sh',
            payloadFile,
          ]);
          id = [r.json?.task, r.json?.taskId, r.json?.task?.id].find((x) => typeof x === 'string') ?? null;
          if (id) S.via = 'task run';
        } catch (e) {
          warn(`task run could not make the result task (${e.message.split('\n')[0]}); using the store API`);
        }
      }
      if (!id) {
        id = await storeApiTask(cli, app, payload);
        S.via = 'store API (dist/src/tasks/store.js)';
      }
      S.task = id;
      for (let i = 0; i < opts.reps; i++) {
        const r = await xet(app, ['version'], { cpu: true });
        S.versionSeconds.push(r.seconds);
        if (r.cpuSeconds != null) S.versionCpuSeconds.push(r.cpuSeconds);
      }
      if (results.commands['task result']) {
        // A multiple of the fill pattern's 18 bytes: a character boundary, 256 KiB in.
        const offset = 18 * Math.floor((4 * CHUNK) / 18);
        const args = ['task', 'result', id, '--offset', String(offset), '--max-bytes', String(CHUNK), '--json'];
        // Checked once with the output kept as bytes: run() decodes each pipe read on its own, so
        // a character split between two reads comes out as U+FFFD there (timing is unaffected).
        const first = {
          json: JSON.parse(execFileSync(process.execPath, [cli, ...args], { cwd: app }).toString('utf8')),
        };
        const bytes = Buffer.from(first.json.text, 'utf8');
        const expect = payload.subarray(first.json.offsetBytes, first.json.nextOffsetBytes);
        S.checked = bytes.equals(expect) && first.json.sha256 === createHash('sha256').update(payload).digest('hex');
        if (!S.checked) {
          throw new BenchError(
            `task result returned other bytes than the command wrote (task ${id}, bytes ${first.json.offsetBytes}..${first.json.nextOffsetBytes}: ${bytes.equals(expect) ? 'same' : 'different'}, sha256 ${first.json.sha256})`,
          );
        }
        S.chunkBytes = bytes.length;
        for (let i = 0; i < opts.reps; i++) {
          const r = await xet(app, args, { cpu: true });
          S.chunkSeconds.push(r.seconds);
          if (r.cpuSeconds != null) S.chunkCpuSeconds.push(r.cpuSeconds);
        }
      }
    } catch (e) {
      fail('result', e);
    }
    noteLoad('result');

    // ---- commit: with git xet's hooks vs without ------------------------------------------------
    const C = (results.commit = {
      hooks: [],
      installedWith: null,
      withSeconds: [],
      withCpuSeconds: [],
      withoutSeconds: [],
      withoutCpuSeconds: [],
    });
    try {
      const plain = join(runDir, 'commit-plain');
      const hooked = join(runDir, 'commit-hooked');
      cpSync(app, plain, { recursive: true });
      cpSync(app, hooked, { recursive: true });
      for (const how of [
        ['hooks', 'install', '--json'],
        ['init', '--json'],
      ]) {
        if (how[0] === 'hooks' && !results.commands.hooks) continue;
        await xet(hooked, how, { requireJson: false });
        C.hooks = await xetHooks(hooked);
        if (C.hooks.length) {
          C.installedWith = `git xet ${how.slice(0, -1).join(' ')}`;
          break;
        }
      }
      if (!C.hooks.length) warn('hooks not installed: neither git xet hooks install nor git xet init installed any');
      // One sample: a shell making COMMITS commits in a row (each of one changed file, bench-commit.txt,
      // staged by git add), so the per-commit times are above GNU time's 10 ms resolution and the
      // shell's start is paid once.
      const script =
        `for i in $(seq ${COMMITS}); do echo "$1 $i" >bench-commit.txt && git add bench-commit.txt && ` +
        `git commit -q -m "c$1 $i" || exit 1; done`;
      const batch = (repo, i) => runCpu('sh', ['-c', script, 'sh', String(i)], { cwd: repo, env: GIT_ENV });
      const sample = async (side, repo, i) => {
        const r = await batch(repo, i);
        C[`${side}Seconds`].push(r.seconds / COMMITS);
        if (r.cpuSeconds != null) C[`${side}CpuSeconds`].push(r.cpuSeconds / COMMITS);
      };
      for (const repo of [plain, hooked]) await batch(repo, 0); // warm both
      for (let i = 1; i <= opts.reps; i++) {
        // alternated, so a change in the machine's load touches both sides alike
        await sample('without', plain, i);
        if (C.hooks.length) await sample('with', hooked, i);
      }
    } catch (e) {
      fail('commit', e);
    }
    noteLoad('commit');

    const rows = [
      overhead('task run --no-capture -- true vs true', R.noCaptureSeconds, R.trueSeconds, GOALS.taskRunOverheadMs),
      overhead('the same, CPU time (user + sys, with children)', R.noCaptureCpuSeconds, R.trueCpuSeconds, null),
      overhead('task run -- true (with capture) vs true', R.captureSeconds, R.trueSeconds, null),
      absolute(`task result, one ${CHUNK}-byte chunk of a 1 MiB spool`, S.chunkSeconds, GOALS.taskResultChunkMs),
      absolute('the same, CPU time (user + sys)', S.chunkCpuSeconds, null),
      absolute('git xet version (node start + CLI load)', S.versionSeconds, null),
      absolute('the same, CPU time (user + sys)', S.versionCpuSeconds, null),
      {
        ...overhead(
          'git commit with git xet hooks vs without (per commit)',
          C.withSeconds,
          C.withoutSeconds,
          GOALS.commitHookOverheadMs,
        ),
        ...(C.hooks.length ? {} : { status: 'hooks not installed' }),
      },
      overhead('the same, CPU time (user + sys, with the hooks)', C.withCpuSeconds, C.withoutCpuSeconds, null),
    ];
    results.summary = { rows };
  } catch (e) {
    fail('setup', e);
  }
  results.finishedAt = new Date().toISOString();
  printTables(results);
  await writeResults(opts, results);
  cleanup();
  process.exitCode = results.errors.length ? 1 : 0;
}

/** A succeeded task whose spooled result is `payload`, made as the tests make one. */
async function storeApiTask(cli, app, payload) {
  const dist = join(dirname(dirname(cli)), 'dist', 'src');
  const req = createRequire(join(dist, 'index.js'));
  const { openSidecar } = req(join(dist, 'sidecar', 'db.js'));
  const store = req(join(dist, 'tasks', 'store.js'));
  const { ensureTaskDir, taskFile } = req(join(dist, 'tasks', 'paths.js'));
  const { storeResult } = req(join(dist, 'tasks', 'result.js'));
  const common = (await git(app, ['rev-parse', '--path-format=absolute', '--git-common-dir'])).stdout.trim();
  const db = openSidecar(common);
  try {
    const id = randomBytes(8).toString('hex');
    const now = new Date().toISOString();
    const manifestJson = JSON.stringify({ schema: 'xet.task/v1', taskId: id, bench: true });
    const nulls = Object.fromEntries(
      ['startedAt', 'endedAt', 'errorCode', 'exitCode', 'exitSignal', 'correlationId', 'sessionId', 'continuesTask']
        .concat(['forkId', 'baseSnapshot', 'resultSnapshot', 'runnerPid', 'runnerStart', 'pid', 'pidStart', 'bootId'])
        .concat(['resultStorage', 'resultSource', 'resultSizeBytes', 'resultSha256', 'recovery', 'cancelRequestedAt'])
        .map((k) => [k, null]),
    );
    store.insertTask(db, {
      ...nulls,
      id,
      createdAt: now,
      status: 'created',
      command: 'sh',
      slot: 'bench',
      worktree: app,
      gitDir: join(app, '.git'),
      mode: 'worktree',
      deadlineAt: new Date(Date.now() + 3600_000).toISOString(),
      detached: false,
      capture: false,
      manifestJson,
      manifestSha256: createHash('sha256').update(manifestJson).digest('hex'),
      mark: randomBytes(8).toString('hex'),
    });
    store.updateTask(db, id, { status: 'succeeded', startedAt: now, endedAt: now, exitCode: 0 });
    ensureTaskDir(common, id);
    writeFileSync(taskFile(common, id, 'stdout'), payload);
    const info = storeResult(db, common, store.getTask(db, id));
    if (info.storage !== 'spool')
      throw new BenchError(`a ${payload.length}-byte result was not spooled: ${JSON.stringify(info)}`);
    return id;
  } finally {
    db.close();
  }
}

function printTables(results) {
  const out = ['', 'git xet tasks and hooks benchmark'];
  if (results.tree) out.push(`tree: ${results.tree.kind}${results.tree.repo ? ` (${results.tree.repo})` : ''}`);
  const m = results.machine;
  if (m) out.push(`machine: ${m.nproc} cores, ${m.fs}; load at start ${m.loadAvg.join(' ')}; ${m.git}`);
  out.push(
    `commands: ${Object.entries(results.commands)
      .map(([k, v]) => `${k} ${v ? 'yes' : 'MISSING'}`)
      .join(', ')}`,
  );
  if (results.result?.via) out.push(`result task made through ${results.result.via}`);
  if (results.commit?.installedWith) {
    out.push(`hooks: ${results.commit.hooks.join(', ')} (installed with ${results.commit.installedWith})`);
  }
  out.push('');
  const f = (v) => (v == null ? '-' : v < 10 ? `${v.toFixed(1)} ms` : fmtMs(v / 1000));
  out.push(
    ...table(
      ['measurement', 'git xet', 'baseline', 'overhead', 'goal', 'result'],
      (results.summary?.rows ?? []).map((r) => [
        r.label,
        f(r.xetMs),
        f(r.baselineMs),
        f(r.overheadMs),
        r.goalMs == null ? '-' : `<= ${r.goalMs} ms`,
        r.status,
      ]),
    ),
  );
  printReport(out, results);
}

start(main);
