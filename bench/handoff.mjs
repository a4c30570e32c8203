#!/usr/bin/env node
// git xet handoff benchmarks: hand off a 10-file change through a xet store, against plain git.
//
//   npm run bench                   (= … && node bench/handoff.mjs)
//   node bench/handoff.mjs --help   (options)
//
// Plain ESM, node built-ins only; the workload comes from bench/lib/workload.mjs,
// the harness (options, processes, timing, results) from bench/lib/harness.mjs.
// Everything a run creates lives in <tmp-base>/xet-bench-handoff-<pid>/ (default /dev/shm): a frozen
// copy of the CLI and of remote-helper/ (first on PATH for every child, so git runs that
// git-remote-xet for xet:: URLs), the sending and receiving repositories, the xet store and the bare
// repository of the alternative. It is removed at exit, on SIGINT/SIGTERM too (overlay forks are
// unmounted first), and a run killed harder is cleaned up by the next one.
//
// Both sides start with the base remote: the xet side has pushed a snapshot of the workload (with a
// handoff of it) to a directory store, the git side has pushed a commit of the same worktree (every
// file, node_modules included: `git add -A -f`) to a bare repository. Each repetition then makes the
// same 10-file change on both sides and hands it over:
//
//   send      xet:  capture, handoff create, push store      git: add -A -f, commit, push alt
//             xet, one command (a second sender, its own store): capture, handoff create --push store2
//             the same from a third sender (its own store) whose daemon runs: both lines as a user
//             types them (`git xet …`: the native thin client hands each to the daemon). A sender of
//             its own: a capture the CLI made in the same worktree would send the daemon's next one
//             back to reading every directory (its watch no longer describes the stat cache).
//   receive   xet:  fetch store, handoff accept <id> <dir>    git: fetch alt, worktree add <dir> <commit>
//
// Results: tables on stdout and bench/handoff-results.json.

import { appendFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statfsSync } from 'node:fs';
import { join, relative } from 'node:path';
import {
  BenchError,
  GIT_ENV,
  ROOT,
  cleanStaleRuns,
  cliInfo,
  fmtB,
  fmtMB,
  fmtS,
  fmtX,
  freezeCli,
  isStopping,
  log,
  machineInfo,
  med,
  mountsUnder,
  parseArgs,
  printReport,
  quote,
  range,
  ratio,
  recorder,
  rmrf,
  run as runUntracked,
  runXet,
  settle,
  sleep,
  start,
  stopChildren,
  table,
  tail,
  unmountUnder,
  verdict,
  walk,
  writeResults,
} from './lib/harness.mjs';
import { HISTORY_PACKAGE, ensureWorkload } from './lib/workload.mjs';

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

const EDITS = 10;

const GOALS = {
  // capture + handoff create + push vs add -A -f + commit + push, wall time
  sendTime: 1.5,
  // growth of the store vs growth of the bare repository
  sendBytes: 1.2,
  // fetch + handoff accept (restore into a new dir) vs fetch + worktree add of the new commit
  receiveTime: 1.5,
};

const ARGS = {
  script: 'bench/handoff.mjs',
  results: 'handoff-results.json',
  common: {
    reps: 3,
    tmpBase: '/dev/shm',
    rebuildWorkload: false,
    timeoutSec: 900,
    keep: false,
    writeResults: true,
    resultsFile: null,
    freezeCli: true,
  },
  help: {
    reps: 'repetitions, median reported (default 3); each pushes a fresh 10-file change',
    tmpBase: 'where the run dir goes (default /dev/shm: the ext4 root is noisy, see\ndocs/BENCHMARKS.md "The disk")',
    keep: 'keep the run dir (debugging; overlay forks are still discarded)',
    freezeCli: 'run bin/git-xet and remote-helper/ in place instead of a copy taken at start',
  },
  options: [
    {
      flag: '--no-fork',
      key: 'fork',
      default: true,
      help: 'skip `handoff accept --fork --mode overlay` (needs root and overlayfs)',
    },
  ],
};

// Every child gets this environment: fixed git identity (GIT_ENV) and, once the CLI is frozen, the
// frozen remote-helper/ first on PATH.
let childEnv = { ...GIT_ENV };

const run = (cmd, args, opts = {}) => runUntracked(cmd, args, { ...opts, env: opts.env ?? childEnv });
const git = (cwd, args, opts = {}) => run('git', args, { cwd, ...opts });
const sh = (script, opts) => run('bash', ['-c', `set -euo pipefail\n${script}`], opts);

/** Sizes of the regular files under dir (apparent bytes), by relative path. */
function fileSizes(dir) {
  const out = new Map();
  if (!existsSync(dir)) return out;
  for (const e of walk(dir).entries) if (e.type === 'f') out.set(e.path, e.size);
  return out;
}
const total = (m) => [...m.values()].reduce((a, b) => a + b, 0);
/** What grew between two fileSizes() maps: byte delta, and the files that are new or changed. */
function growth(before, after) {
  const changed = [];
  for (const [p, s] of after) if (before.get(p) !== s) changed.push({ path: p, bytes: s });
  changed.sort((a, b) => b.bytes - a.bytes);
  return { bytes: total(after) - total(before), newFiles: changed.length, largest: changed.slice(0, 4) };
}

// ---------------------------------------------------------------------------
// Mounts (overlay forks) and teardown
// ---------------------------------------------------------------------------

/** Synchronous (usable from signal handlers): unmount what is under runDir, then delete it. */
function teardown(runDir, keep = false) {
  if (unmountUnder(runDir).length) {
    log(`WARNING: still mounted under ${runDir}: ${mountsUnder(runDir).join(', ')}; not removing it`);
    return;
  }
  if (!keep) rmrf(runDir);
}

// ---------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2), ARGS);
  const started = new Date();
  mkdirSync(opts.tmpBase, { recursive: true });
  // Runs killed by SIGKILL leave their dir (and maybe a mount).
  cleanStaleRuns(opts.tmpBase, 'xet-bench-handoff-', teardown);

  const runDir = join(opts.tmpBase, `xet-bench-handoff-${process.pid}`);
  mkdirSync(runDir, { recursive: true });
  let tornDown = false;
  const cleanup = () => {
    if (tornDown) return;
    tornDown = true;
    teardown(runDir, opts.keep);
    if (opts.keep) log(`kept ${runDir}`);
  };
  process.on('exit', cleanup);
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, async () => {
      log(`${sig}: stopping the child processes, then removing ${runDir}`);
      await stopChildren();
      cleanup();
      process.exit(130);
    });
  }

  const results = {
    startedAt: started.toISOString(),
    machine: null,
    config: { reps: opts.reps, goals: GOALS, edits: EDITS, tmpBase: opts.tmpBase, fork: opts.fork },
    workload: null,
    cli: null,
    setup: {},
    reps: [],
    problems: [],
    warnings: [],
    errors: [],
  };
  const { fail, warn, problem } = recorder(results);

  let cli = join(ROOT, 'bin', 'git-xet');
  let helperDir = join(ROOT, 'remote-helper');

  /** `git xet ...` in cwd; any failure (exit status, no JSON) throws with the command, a repro line and stderr. */
  const xet = (cwd, args) =>
    runXet(cli, cwd, args, {
      timeoutSec: opts.timeoutSec,
      requireJson: true,
      runner: run,
      note: 'cwd is in the run dir, removed at exit unless --keep',
      reproPrefix: `PATH=${quote(helperDir)}:$PATH `,
      reproCli: cli,
    });
  /** `git xet ...` as a user types it (see runXet's `via`): the native thin client hands a capture
   * to a running daemon. */
  const xetViaGit = (cwd, args) =>
    runXet(cli, cwd, args, {
      timeoutSec: opts.timeoutSec,
      requireJson: true,
      runner: run,
      env: childEnv,
      via: 'git',
      reproCli: cli,
    });
  /** The repository whose daemon this run started (stopped at the end, whatever happened). */
  let daemonRepo = null;
  /** sync, then one timed command; returns its result (seconds in .seconds). */
  const timed = async (fn) => {
    await settle();
    return fn();
  };

  try {
    // ---- workload, CLI ----------------------------------------------------------------
    const wl = await ensureWorkload(opts);
    results.workload = { ...wl, repo: relative(ROOT, wl.repo), dir: undefined };
    log(
      `workload: ${wl.worktree.files} files, ${fmtMB(wl.worktree.bytes)} in worktree ` +
        `(node_modules ${wl.nodeModules.files} files, ${fmtMB(wl.nodeModules.bytes)})`,
    );
    // Preflight: the sender's copy, the git side's repos, the store and the receivers' packs, the
    // checkouts of one repetition; the store and the receiver grow by up to a copy of the objects per rep.
    const need = (8 + 0.7 * opts.reps) * wl.repoDuBytes;
    const fsBase = statfsSync(opts.tmpBase);
    const avail = fsBase.bavail * fsBase.bsize;
    if (avail < need) {
      throw new BenchError(`${opts.tmpBase} has ${fmtMB(avail)} free; this run needs about ${fmtMB(need)}`);
    }
    if (opts.fork && process.getuid?.() !== 0) {
      warn('not running as root: skipping `handoff accept --fork --mode overlay` (overlay mounts need root)');
      opts.fork = false;
    }

    if (!existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js'))) {
      throw new BenchError('dist/src/cli/main.js does not exist: run `npm run build` (npm run bench does it)');
    }
    results.cli = await cliInfo(false);
    if (opts.freezeCli) {
      cli = await freezeCli(runDir);
      helperDir = join(runDir, 'cli', 'remote-helper');
      results.cli.frozenCopy = true;
    }
    childEnv = { ...GIT_ENV, PATH: `${helperDir}:${process.env.PATH ?? ''}` };
    const which = (await sh('command -v git-remote-xet', { cwd: runDir })).stdout.trim();
    if (which !== join(helperDir, 'git-remote-xet')) {
      throw new BenchError(`git-remote-xet on PATH is ${which}, expected ${join(helperDir, 'git-remote-xet')}`);
    }
    results.cli.remoteHelper = which;
    results.machine = await machineInfo(opts.tmpBase);

    const A = join(runDir, 'A'); // the sender (xet)
    const store = join(runDir, 'store'); // the xet store
    const B = join(runDir, 'B'); // the receiver (xet)
    const A2 = join(runDir, 'A2'); // the second sender (xet, one command: capture, handoff create --push)
    const store2 = join(runDir, 'store2'); // its store
    const A3 = join(runDir, 'A3'); // the third sender (xet, one command, every line through its daemon)
    const store3 = join(runDir, 'store3'); // its store
    const P = join(runDir, 'P'); // the sender (git)
    const alt = join(runDir, 'alt.git'); // the bare repository
    const Q = join(runDir, 'Q'); // the receiver (git)
    const S = results.setup;

    // The 10 files to edit: tracked .js files under vendor/, none of the work in progress, spread out
    // (the same choice as bench/run.mjs's re-capture).
    const editable = (await git(wl.repo, ['ls-files', '-z', `vendor/${HISTORY_PACKAGE}`])).stdout
      .split('\0')
      .filter((p) => p.endsWith('.js') && !Object.values(wl.wip).flat().includes(p))
      .sort();
    const edits = Array.from({ length: EDITS }, (_, i) => editable[Math.floor(((i + 0.5) * editable.length) / EDITS)]);
    results.config.editedFiles = edits;
    const edit = (repo, round) => {
      for (const f of edits) appendFileSync(join(repo, f), `\n// bench handoff edit, round ${round}\n`);
    };
    const senders = {
      one: { dir: A2, store: store2, remote: 'store2', from: 'A2' },
      daemon: { dir: A3, store: store3, remote: 'store3', from: 'A3' },
    };

    /** One send from a one-command sender (A2 into store2, A3 into store3): a capture, then `handoff
     * create --push`, each run by `line(args)`; into O its snapshot, handoff, seconds and what the
     * store gained. */
    const sendOneCommand = async (O, sender, rep, label, line) => {
      const { dir, store: into, remote, from } = sender;
      edit(dir, `${rep}${label}`);
      const before = fileSizes(into);
      const cap = await timed(() => line(['capture', '-m', `handoff bench ${rep}${label}`, '--json']));
      const snap = cap.json.snapshot;
      const hp = await timed(() =>
        line([
          'handoff',
          'create',
          snap,
          '--to',
          'B',
          '--from',
          from,
          '--title',
          `change ${rep}${label}`,
          '--push',
          remote,
          '--json',
        ]),
      );
      const pushed = (hp.json.push?.refs ?? []).filter((r) => r.status === 'new').map((r) => r.ref);
      const want = [`refs/xet/handoffs/${hp.json.id}`, `refs/xet/snapshots/${snap}`].sort();
      if (JSON.stringify(pushed.sort()) !== JSON.stringify(want)) {
        problem(
          `handoff create --push ${rep}${label}: new refs ${JSON.stringify(pushed)}, expected ${JSON.stringify(want)}`,
        );
      }
      Object.assign(O, {
        snapshot: snap,
        handoff: hp.json.id,
        capture: cap.seconds,
        createPush: hp.seconds,
        total: cap.seconds + hp.seconds,
        store: growth(before, fileSizes(into)),
      });
      log(
        `rep ${rep}: xet send, one command${label} ${fmtS(O.total)}s (capture ${fmtS(O.capture)} + handoff create ` +
          `--push ${fmtS(O.createPush)}), ${remote} +${fmtB(O.store.bytes)} in ${O.store.newFiles} file(s)`,
      );
    };

    // ---- setup, xet side: A captures the workload, hands it off and pushes it to the store ------------
    log(`setup: copying the workload to ${A}, capture, handoff create, push to xet::${store}`);
    S.copySeconds = (await run('cp', ['-a', wl.repo, A])).seconds;
    await git(A, ['remote', 'add', 'store', `xet::${store}`]);
    const cap0 = await xet(A, ['capture', '--json']);
    S.captureSeconds = cap0.seconds;
    S.snapshot = cap0.json.snapshot;
    const h0 = await xet(A, ['handoff', 'create', S.snapshot, '--to', 'B', '--from', 'A', '--title', 'base', '--json']);
    S.handoff = h0.json.id;
    const push0 = await xet(A, ['push', 'store', '--json']);
    S.pushSeconds = push0.seconds;
    S.storeBytes = total(fileSizes(store));
    log(
      `base: capture ${fmtS(S.captureSeconds)}s -> ${S.snapshot.slice(0, 12)}, handoff ${S.handoff.slice(0, 12)}, ` +
        `push ${fmtS(S.pushSeconds)}s, store ${fmtB(S.storeBytes)}`,
    );

    // ---- setup, the second xet sender: the same, into its own store ---------------------------------
    log(`setup: copying the workload to ${A2}, capture, handoff create --push xet::${store2}`);
    await run('cp', ['-a', wl.repo, A2]);
    await git(A2, ['remote', 'add', 'store2', `xet::${store2}`]);
    const cap2 = await xet(A2, ['capture', '--json']);
    const h2 = await xet(A2, [
      'handoff',
      'create',
      cap2.json.snapshot,
      '--to',
      'B',
      '--from',
      'A2',
      '--title',
      'base',
      '--push',
      'store2',
      '--json',
    ]);
    S.secondSender = { snapshot: cap2.json.snapshot, handoff: h2.json.id, seconds: cap2.seconds + h2.seconds };
    log(`base (second sender): capture + handoff create --push ${fmtS(S.secondSender.seconds)}s`);

    // ---- setup, git side: a commit of the same worktree (every file) in a bare repo; P is a clone ------
    log(`setup: the same worktree committed with add -A -f and pushed to ${alt} (pack-objects takes ~15 s)`);
    const P0 = join(runDir, 'P0');
    await run('cp', ['-a', wl.repo, P0]);
    await git(P0, ['add', '-A', '-f']);
    await git(P0, ['commit', '-q', '--no-verify', '-m', 'base: the whole worktree']);
    S.baseCommit = (await git(P0, ['rev-parse', 'HEAD'])).stdout.trim();
    S.baseCommitFiles = (await git(P0, ['ls-files', '-z'])).stdout.split('\0').filter(Boolean).length;
    await git(runDir, ['init', '-q', '--bare', '-b', 'main', alt]);
    await git(alt, ['config', 'gc.auto', '0']);
    S.altPushSeconds = (await git(P0, ['push', '-q', alt, 'HEAD:refs/heads/main'])).seconds;
    rmrf(P0);
    // P: a developer's clone (packed objects, clean index), the remote named alt.
    await git(runDir, ['clone', '-q', '--origin', 'alt', alt, P]);
    await git(P, ['config', 'gc.auto', '0']);
    // The clone's checkout leaves its index racily clean (files as new as the index), so the first
    // `git add` would re-read every file. A status rewrites it, as A's cold capture filled its cache.
    await sleep(1100);
    await git(P, ['status', '--porcelain']);
    S.altBytes = total(fileSizes(alt));
    log(`base: commit ${S.baseCommit.slice(0, 12)} (${S.baseCommitFiles} files), alt.git ${fmtB(S.altBytes)}`);

    // ---- setup, receivers: B has fetched the base from the store, Q from the bare repo -------------------
    await git(runDir, ['init', '-q', B]);
    await git(B, ['remote', 'add', 'store', `xet::${store}`]);
    S.receiverFetchSeconds = (await xet(B, ['fetch', 'store', '--json'])).seconds;
    await git(runDir, ['init', '-q', Q]);
    await git(Q, ['config', 'gc.auto', '0']);
    await git(Q, ['remote', 'add', 'alt', alt]);
    S.altReceiverFetchSeconds = (await git(Q, ['fetch', '-q', 'alt'])).seconds;
    // One untimed accept / worktree add of the base each, so the first timed repetition is not special.
    const warm = join(runDir, 'warm-accept');
    S.warmAcceptSeconds = (await xet(B, ['handoff', 'accept', S.handoff, warm, '--json'])).seconds;
    rmrf(warm);
    const warmWt = join(runDir, 'warm-worktree');
    S.warmWorktreeAddSeconds = (await git(Q, ['worktree', 'add', '-q', '--detach', warmWt, S.baseCommit])).seconds;
    await git(Q, ['worktree', 'remove', '--force', warmWt]);
    log(
      `receivers: B fetched the store in ${fmtS(S.receiverFetchSeconds)}s, Q fetched alt.git in ` +
        `${fmtS(S.altReceiverFetchSeconds)}s; warm-up accept ${fmtS(S.warmAcceptSeconds)}s, ` +
        `worktree add ${fmtS(S.warmWorktreeAddSeconds)}s`,
    );

    // ---- setup, the third xet sender: its daemon runs, and every line goes through it -------------
    // (as a user who keeps one running sends). Its first capture reads everything; a warm-up send
    // follows, so the first timed one is not special.
    log(`setup: copying the workload to ${A3}, daemon start, git xet capture, git xet handoff create --push`);
    await run('cp', ['-a', wl.repo, A3]);
    await git(A3, ['remote', 'add', 'store3', `xet::${store3}`]);
    await xet(A3, ['daemon', 'start', '--json']);
    daemonRepo = A3;
    const cap3 = await xetViaGit(A3, ['capture', '--json']);
    await xetViaGit(A3, [
      'handoff',
      'create',
      cap3.json.snapshot,
      '--to',
      'B',
      '--from',
      'A3',
      '--title',
      'base',
      '--push',
      'store3',
      '--json',
    ]);
    await sendOneCommand({}, senders.daemon, 0, ' (warm-up)', (args) => xetViaGit(A3, args));

    // ---- repetitions ------------------------------------------------------------------------------
    for (let rep = 1; rep <= opts.reps; rep++) {
      const R = {
        rep,
        send: { xet: {}, one: {}, daemon: {}, git: {} },
        receive: { xet: {}, git: {} },
        fork: null,
      };
      results.reps.push(R);
      try {
        // -- send, xet
        const X = R.send.xet;
        edit(A, rep);
        const storeBefore = fileSizes(store);
        const storeRefsBefore = Object.values(
          JSON.parse(readFileSync(join(store, 'state', readdirSync(join(store, 'state')).sort().at(-1)), 'utf8')).state
            .refs,
        );
        const aGitBefore = fileSizes(join(A, '.git'));
        const cap = await timed(() => xet(A, ['capture', '-m', `handoff bench ${rep}`, '--json']));
        const snap = cap.json.snapshot;
        if (typeof snap !== 'string') throw new BenchError(`capture printed no snapshot: ${tail(cap.stdout, 500)}`);
        const hc = await timed(() =>
          xet(A, ['handoff', 'create', snap, '--to', 'B', '--from', 'A', '--title', `change ${rep}`, '--json']),
        );
        const hid = hc.json.id;
        if (typeof hid !== 'string' || hc.json.snapshot !== snap) {
          throw new BenchError(`handoff create: unexpected JSON ${tail(hc.stdout, 500)}`);
        }
        const pu = await timed(() => xet(A, ['push', 'store', '--json']));
        const pushedNew = (pu.json.refs ?? []).filter((r) => r.status === 'new').map((r) => r.ref);
        const wantNew = [`refs/xet/handoffs/${hid}`, `refs/xet/snapshots/${snap}`].sort();
        if (JSON.stringify(pushedNew.sort()) !== JSON.stringify(wantNew)) {
          problem(`push ${rep}: new refs ${JSON.stringify(pushedNew)}, expected ${JSON.stringify(wantNew)}`);
        }
        Object.assign(X, {
          snapshot: snap,
          handoff: hid,
          capture: cap.seconds,
          create: hc.seconds,
          push: pu.seconds,
          total: cap.seconds + hc.seconds + pu.seconds,
          incremental: cap.json.incremental,
          store: growth(storeBefore, fileSizes(store)),
          localGit: growth(aGitBefore, fileSizes(join(A, '.git'))).bytes,
        });
        // Untimed, for comparison: a pack of only the objects the store lacked. The trees of the
        // store's tips are excluded explicitly, because `--not <commit>` alone does not exclude the
        // tree of a commit that is not an ancestor of the new one (a sibling snapshot).
        const tips = [snap, hc.json.commit];
        const packInput = [...tips, '--not', ...storeRefsBefore, ...storeRefsBefore.map((o) => `${o}^{tree}`)];
        X.minimalPackBytes = Number(
          (
            await sh(
              `printf '%s\\n' ${packInput.map(quote).join(' ')} | ` +
                'git pack-objects --revs --stdout -q --delta-base-offset | wc -c',
              { cwd: A },
            )
          ).stdout.trim(),
        );
        log(
          `rep ${rep}: xet send ${fmtS(X.total)}s (capture ${fmtS(X.capture)} + handoff create ${fmtS(X.create)} + ` +
            `push ${fmtS(X.push)}), store +${fmtB(X.store.bytes)} in ${X.store.newFiles} file(s) ` +
            `(the objects it lacked: ${fmtB(X.minimalPackBytes)} as one pack)`,
        );

        // -- send, xet, one command: capture, then handoff create --push (the second sender);
        //    then the same as a user types both lines, each handed to its daemon (`git xet …`: the
        //    native client relays them)
        await sendOneCommand(R.send.one, senders.one, rep, '', (args) =>
          runXet(cli, A2, args, {
            timeoutSec: opts.timeoutSec,
            requireJson: true,
            runner: run,
            env: { ...childEnv, GIT_XET_NO_DAEMON: '1' },
            reproPrefix: 'GIT_XET_NO_DAEMON=1 ',
            reproCli: cli,
          }),
        );
        await sendOneCommand(R.send.daemon, senders.daemon, rep, ', daemon running', (args) => xetViaGit(A3, args));

        // -- send, git
        const G = R.send.git;
        edit(P, rep);
        const altBefore = fileSizes(alt);
        const pGitBefore = fileSizes(join(P, '.git'));
        const add = await timed(() => git(P, ['add', '-A', '-f']));
        const commit = await timed(() => git(P, ['commit', '-q', '--no-verify', '-m', `change ${rep}`]));
        const gpush = await timed(() => git(P, ['push', '-q', 'alt', 'HEAD:refs/heads/main']));
        const newCommit = (await git(P, ['rev-parse', 'HEAD'])).stdout.trim();
        const altHead = (await git(alt, ['rev-parse', 'refs/heads/main'])).stdout.trim();
        if (altHead !== newCommit) problem(`git push ${rep}: alt.git main is ${altHead}, expected ${newCommit}`);
        const changed = (await git(P, ['diff', '--name-only', 'HEAD~1', 'HEAD'])).stdout.trim().split('\n');
        if (JSON.stringify(changed.sort()) !== JSON.stringify([...edits].sort())) {
          problem(`git commit ${rep} changed ${changed.length} files, expected the ${EDITS} edited ones`);
        }
        Object.assign(G, {
          commit: newCommit,
          add: add.seconds,
          commitSeconds: commit.seconds,
          push: gpush.seconds,
          total: add.seconds + commit.seconds + gpush.seconds,
          alt: growth(altBefore, fileSizes(alt)),
          localGit: growth(pGitBefore, fileSizes(join(P, '.git'))).bytes,
        });
        log(
          `rep ${rep}: git send ${fmtS(G.total)}s (add -A -f ${fmtS(G.add)} + commit ${fmtS(G.commitSeconds)} + ` +
            `push ${fmtS(G.push)}), alt.git +${fmtB(G.alt.bytes)} in ${G.alt.newFiles} file(s)`,
        );

        // -- receive, xet: fetch, then accept (a restore into a new dir)
        const XR = R.receive.xet;
        const bGitBefore = fileSizes(join(B, '.git'));
        const fe = await timed(() => xet(B, ['fetch', 'store', '--json']));
        const fetchedRefs = (fe.json.fetched ?? []).map((f) => f.ref).sort();
        if (JSON.stringify(fetchedRefs) !== JSON.stringify(wantNew)) {
          problem(`fetch ${rep}: fetched ${JSON.stringify(fetchedRefs)}, expected ${JSON.stringify(wantNew)}`);
        }
        const fetchedBytes = growth(bGitBefore, fileSizes(join(B, '.git')));
        const accDir = join(runDir, `accept-${rep}`);
        const ac = await timed(() => xet(B, ['handoff', 'accept', hid, accDir, '--json']));
        if (ac.json.action !== 'restore' || ac.json.snapshot !== snap) {
          problem(`handoff accept ${rep}: unexpected JSON ${tail(ac.stdout, 500)}`);
        }
        Object.assign(XR, {
          fetch: fe.seconds,
          accept: ac.seconds,
          total: fe.seconds + ac.seconds,
          fetchedBytes: fetchedBytes.bytes,
          files: ac.json.files,
        });
        // Untimed checks: the edited files arrived; on the first rep, a full `git xet verify`.
        for (const f of edits) {
          if (readFileSync(join(accDir, f), 'utf8') !== readFileSync(join(A, f), 'utf8')) {
            problem(`accept ${rep}: ${f} differs from the sender's`);
          }
        }
        if (rep === 1) {
          const v = await xet(B, ['verify', snap, accDir, '--json']);
          XR.verifySeconds = v.seconds;
          XR.verifyJson = v.json;
        }
        rmrf(accDir);
        log(
          `rep ${rep}: xet receive ${fmtS(XR.total)}s (fetch ${fmtS(XR.fetch)} + accept ${fmtS(XR.accept)}), ` +
            `B/.git +${fmtB(XR.fetchedBytes)}`,
        );

        // -- receive, git: fetch, then the new commit checked out into a new dir
        const GR = R.receive.git;
        const qGitBefore = fileSizes(join(Q, '.git'));
        const gfe = await timed(() => git(Q, ['fetch', '-q', 'alt']));
        const qHead = (await git(Q, ['rev-parse', 'refs/remotes/alt/main'])).stdout.trim();
        if (qHead !== newCommit) problem(`git fetch ${rep}: alt/main is ${qHead}, expected ${newCommit}`);
        const gFetched = growth(qGitBefore, fileSizes(join(Q, '.git')));
        const wt = join(runDir, `worktree-${rep}`);
        const wa = await timed(() => git(Q, ['worktree', 'add', '-q', '--detach', wt, newCommit]));
        for (const f of edits) {
          if (readFileSync(join(wt, f), 'utf8') !== readFileSync(join(P, f), 'utf8')) {
            problem(`worktree add ${rep}: ${f} differs from the sender's`);
          }
        }
        const wst = await git(wt, ['status', '--porcelain']);
        if (wst.stdout.trim()) problem(`worktree ${rep} is not clean: ${tail(wst.stdout, 300)}`);
        await git(Q, ['worktree', 'remove', '--force', wt]);
        // The self-contained variant (what accept makes): clone --local (hard links) + checkout.
        const cl = join(runDir, `clone-${rep}`);
        const clo = await timed(() => git(runDir, ['clone', '-q', '--local', '--no-checkout', Q, cl]));
        const co = await timed(() => git(cl, ['checkout', '-q', '--detach', newCommit]));
        rmrf(cl);
        Object.assign(GR, {
          fetch: gfe.seconds,
          worktreeAdd: wa.seconds,
          total: gfe.seconds + wa.seconds,
          clone: clo.seconds,
          checkout: co.seconds,
          totalClone: gfe.seconds + clo.seconds + co.seconds,
          fetchedBytes: gFetched.bytes,
        });
        log(
          `rep ${rep}: git receive ${fmtS(GR.total)}s (fetch ${fmtS(GR.fetch)} + worktree add ${fmtS(GR.worktreeAdd)}); ` +
            `clone --local + checkout ${fmtS(GR.clone + GR.checkout)}s; Q/.git +${fmtB(GR.fetchedBytes)}`,
        );

        // -- extra: accept as an overlay fork (its first fork builds the snapshot's base)
        if (opts.fork) {
          const fdir = join(runDir, `fork-${rep}`);
          const fk = await timed(() =>
            xet(B, ['handoff', 'accept', hid, fdir, '--fork', '--mode', 'overlay', '--json']),
          );
          if (fk.json.action !== 'fork' || fk.json.mode !== 'overlay') {
            problem(`accept --fork ${rep}: unexpected JSON ${tail(fk.stdout, 500)}`);
          }
          for (const f of edits) {
            if (readFileSync(join(fdir, f), 'utf8') !== readFileSync(join(A, f), 'utf8')) {
              problem(`accept --fork ${rep}: ${f} differs from the sender's`);
            }
          }
          const dc = await xet(B, ['discard', fdir, '--no-capture', '--json']);
          if (existsSync(fdir) || mountsUnder(fdir).length) problem(`discard left ${fdir} behind`);
          // The base is derived data (rebuilt by the next fork of this snapshot): drop it, it is a full tree.
          rmrf(join(B, '.git', 'xet', 'bases', snap));
          R.fork = { seconds: fk.seconds, discardSeconds: dc.seconds };
          log(`rep ${rep}: accept --fork --mode overlay ${fmtS(fk.seconds)}s (builds the base)`);
        }
      } catch (e) {
        fail(`rep ${rep}`, e);
        break;
      }
    }
  } catch (e) {
    fail('harness', e);
  } finally {
    if (daemonRepo) await xet(daemonRepo, ['daemon', 'stop', '--json']).catch((e) => fail('daemon stop', e));
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
  const reps = results.reps.filter((r) => r.receive.git.total != null);
  const col = (f) => reps.map(f).filter((x) => x != null);
  const row = (label, xs, bs, goal, unit = 's') => {
    const x = med(xs);
    const b = med(bs);
    const r = ratio(x, b);
    return {
      label,
      unit,
      xet: x,
      xetSamples: xs,
      alt: b,
      altSamples: bs,
      ratio: r,
      goal,
      status: goal == null ? 'info' : verdict(r, goal),
    };
  };
  const main = [
    row(
      'send: capture + handoff create + push  vs  add -A -f + commit + push',
      col((r) => r.send.xet.total),
      col((r) => r.send.git.total),
      GOALS.sendTime,
    ),
    row(
      'send: capture + handoff create --push  vs  add -A -f + commit + push',
      col((r) => r.send.one.total),
      col((r) => r.send.git.total),
      GOALS.sendTime,
    ),
    row(
      'send: git xet capture + git xet handoff create --push (daemon running)  vs  add -A -f + commit + push',
      col((r) => r.send.daemon?.total),
      col((r) => r.send.git.total),
      GOALS.sendTime,
    ),
    row(
      'send: bytes written to the store  vs  to the bare repo',
      col((r) => r.send.xet.store?.bytes),
      col((r) => r.send.git.alt?.bytes),
      GOALS.sendBytes,
      'B',
    ),
    row(
      'receive: fetch + handoff accept  vs  fetch + worktree add',
      col((r) => r.receive.xet.total),
      col((r) => r.receive.git.total),
      GOALS.receiveTime,
    ),
  ];
  const info = [
    row(
      'send without capture: handoff create + push  vs  add -A -f + commit + push',
      col((r) => (r.send.xet.total == null ? null : r.send.xet.create + r.send.xet.push)),
      col((r) => r.send.git.total),
      null,
    ),
    row(
      'send without capture: handoff create --push  vs  add -A -f + commit + push',
      col((r) => r.send.one.createPush),
      col((r) => r.send.git.total),
      null,
    ),
    row(
      'send, one command: bytes written to its store  vs  to the bare repo',
      col((r) => r.send.one.store?.bytes),
      col((r) => r.send.git.alt?.bytes),
      null,
      'B',
    ),
    row(
      'receive: fetch + handoff accept  vs  fetch + clone --local + checkout',
      col((r) => r.receive.xet.total),
      col((r) => r.receive.git.totalClone),
      null,
    ),
    row(
      'accept --fork --mode overlay  vs  worktree add',
      col((r) => r.fork?.seconds),
      col((r) => r.receive.git.worktreeAdd),
      null,
    ),
    row(
      'send: store growth  vs  a pack of only the missing objects',
      col((r) => r.send.xet.store?.bytes),
      col((r) => r.send.xet.minimalPackBytes),
      null,
      'B',
    ),
    row(
      'receive: bytes fetched into the receiver .git',
      col((r) => r.receive.xet.fetchedBytes),
      col((r) => r.receive.git.fetchedBytes),
      null,
      'B',
    ),
    row(
      "sender's own .git growth",
      col((r) => r.send.xet.localGit),
      col((r) => r.send.git.localGit),
      null,
      'B',
    ),
  ];
  const steps = [
    ['xet send', 'capture', col((r) => r.send.xet.capture)],
    ['xet send', 'handoff create', col((r) => r.send.xet.create)],
    ['xet send', 'push store', col((r) => r.send.xet.push)],
    ['xet send, one command', 'capture', col((r) => r.send.one.capture)],
    ['xet send, one command', 'handoff create --push store2', col((r) => r.send.one.createPush)],
    ['xet send, daemon running', 'git xet capture', col((r) => r.send.daemon?.capture)],
    ['xet send, daemon running', 'git xet handoff create --push store3', col((r) => r.send.daemon?.createPush)],
    ['git send', 'add -A -f', col((r) => r.send.git.add)],
    ['git send', 'commit', col((r) => r.send.git.commitSeconds)],
    ['git send', 'push alt', col((r) => r.send.git.push)],
    ['xet receive', 'fetch store', col((r) => r.receive.xet.fetch)],
    ['xet receive', 'handoff accept (restore)', col((r) => r.receive.xet.accept)],
    ['git receive', 'fetch alt', col((r) => r.receive.git.fetch)],
    ['git receive', 'worktree add --detach', col((r) => r.receive.git.worktreeAdd)],
    ['git receive', 'clone --local --no-checkout', col((r) => r.receive.git.clone)],
    ['git receive', 'checkout --detach', col((r) => r.receive.git.checkout)],
    ['xet extra', 'handoff accept --fork --mode overlay', col((r) => r.fork?.seconds)],
  ].map(([side, step, xs]) => ({ side, step, seconds: med(xs), samples: xs }));
  return { reps: reps.length, main, info, steps };
}

function printTables(results) {
  const s = results.summary;
  const out = ['', 'git xet handoff benchmark'];
  const w = results.workload;
  if (w) {
    out.push(
      `workload: ${w.worktree.files} files + ${w.worktree.symlinks} symlinks, ${fmtMB(w.worktree.bytes)} in worktree ` +
        `(node_modules ${w.nodeModules.files} files); base snapshot ${results.setup.snapshot?.slice(0, 12) ?? '-'}, ` +
        `base commit ${results.setup.baseCommit?.slice(0, 12) ?? '-'} (${results.setup.baseCommitFiles ?? '-'} files)`,
    );
  }
  const m = results.machine;
  if (m) out.push(`machine: ${m.nproc} cores, ${fmtMB(m.memBytes)} RAM, kernel ${m.kernel}; run dir on ${m.fs}`);
  out.push(
    `median of ${s.reps} repetition(s), each a fresh ${EDITS}-file change on top of the last; sync before every step; page cache warm`,
  );
  out.push('');
  const fmtV = (r, v) => (r.unit === 'B' ? fmtB(v) : fmtS(v));
  const rangeV = (r, xs) =>
    r.unit === 'B' ? (xs?.length > 1 ? `${fmtB(Math.min(...xs))}-${fmtB(Math.max(...xs))}` : '') : range(xs);
  const rows = (list) =>
    list.map((r) => [
      r.label,
      fmtV(r, r.xet),
      rangeV(r, r.xetSamples),
      fmtV(r, r.alt),
      rangeV(r, r.altSamples),
      fmtX(r.ratio),
      r.goal != null ? `<= ${r.goal}x` : '-',
      r.status,
    ]);
  out.push(
    ...table(
      ['measurement', 'git xet', '(min-max)', 'alternative', '(min-max)', 'ratio', 'goal', 'result'],
      [...rows(s.main), ...rows(s.info)],
    ),
  );
  out.push('');
  out.push('Steps (seconds, median; each step is one command, timed after a sync)');
  out.push(
    ...table(
      ['side', 'step', 'seconds', '(min-max)'],
      s.steps.map((x) => [x.side, x.step, fmtS(x.seconds), range(x.samples)]),
    ),
  );
  printReport(out, results);
}

start(main);
