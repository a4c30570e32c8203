// The guard hooks with real git, real guard files and real processes: a commit or a ref update in a
// worktree whose guard names a dead runner is refused (WORKDIR_RECOVERY_REQUIRED) in the main and in a
// linked worktree, allowed with a live runner or no guard, git xet's own refs/xet/ updates still go
// through; hooks already there keep running (their status honoured) and come back byte for byte;
// core.hooksPath, husky 9 and lefthook; install twice, at once, and after a kill half way.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import { once } from 'node:events';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { identify, type ProcessIdentity } from '../src/tasks/proc';
import { GUARD_SCHEMA, publishGuard } from '../src/tasks/slot';
import { killAt, pausedAt } from './support/faults';
import { Repo, git, gitTry, initRepo, run } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { XET_BIN, capture, expectError, expectExit, parseJson, xet } from './support/xet';

const TASK = '0123456789abcdef';
const HOOKS = ['pre-commit', 'pre-merge-commit', 'pre-rebase', 'reference-transaction'];
const BEGIN = '# >>> git xet guard';
const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

/** The identity of a process that ran and is gone (spawned, killed, reaped). */
async function deadRunner(): Promise<ProcessIdentity> {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const id = identify(child.pid!);
  assert.ok(id, 'the sleep runs');
  child.kill('SIGKILL');
  await once(child, 'exit');
  return id;
}

function guard(gitDir: string, runner: ProcessIdentity): void {
  publishGuard(
    { id: 'slot', worktree: '', gitDir, commonDir: '' },
    { schema: GUARD_SCHEMA, task: TASK, slot: 'slot', runner, command: null, createdAt: new Date().toISOString() },
  );
}

const absGitDir = (r: Repo) => r.git('rev-parse', '--absolute-git-dir').trim();
const commit = (r: Repo, msg: string, extra: string[] = [], cwd = r.dir) =>
  gitTry(r.sb, cwd, ['commit', '-q', '--allow-empty', ...extra, '-m', msg]);
const head = (r: Repo) => r.git('rev-parse', 'HEAD').trim();

function hooksJson(sb: Sandbox, cwd: string, verb: string) {
  const res = xet(sb, cwd, ['hooks', verb, '--json']);
  expectExit(res, 0);
  return parseJson(res) as {
    dir: string;
    hooks: { name: string; state: string; method?: string; restored?: string }[];
  };
}
const states = (r: { hooks: { name: string; state: string }[] }) =>
  Object.fromEntries(r.hooks.map((h) => [h.name, h.state]));

function assertRefused(res: ReturnType<typeof gitTry>, what: string): void {
  assert.notEqual(res.status, 0, `${what} must be refused`);
  assert.match(
    res.stderr.toString(),
    new RegExp(
      `git xet: WORKDIR_RECOVERY_REQUIRED: task ${TASK}'s runner died while it could write this worktree; run git xet task recover`,
    ),
    what,
  );
}

function repo(sb: Sandbox, name = 'r'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

const blocks = (file: string) =>
  fs
    .readFileSync(file, 'latin1')
    .split('\n')
    .filter((l) => l.startsWith(BEGIN)).length;

test('a dead runner guard refuses commits (with --no-verify too) and branch updates; a live runner, no guard and refs/xet/ pass', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const st = hooksJson(sb, r.dir, 'install');
    assert.equal(st.dir, path.join(r.commonDir(), 'hooks'));
    assert.deepEqual(states(st), {
      'pre-commit': 'installed',
      'pre-merge-commit': 'installed',
      'pre-rebase': 'installed',
      'reference-transaction': 'installed',
    });
    assert.equal(commit(r, 'no guard').status, 0);
    const gitDir = absGitDir(r);

    guard(gitDir, identify(process.pid)!);
    assert.equal(commit(r, 'live runner').status, 0, 'a live runner: commits go through');

    guard(gitDir, await deadRunner());
    const before = head(r);
    assertRefused(commit(r, 'dead'), 'git commit');
    assertRefused(commit(r, 'dead', ['--no-verify']), 'git commit --no-verify (reference-transaction)');
    assertRefused(r.gitTry('branch', 'foo'), 'git branch foo');
    assert.equal(head(r), before, 'nothing committed');
    assert.equal(r.gitTry('rev-parse', '--verify', '-q', 'refs/heads/foo').status, 1, 'no branch foo');
    // git xet's own snapshot refs still move (recovery captures the worktree as evidence).
    assert.equal(r.gitTry('update-ref', 'refs/xet/snapshots/x', 'HEAD').status, 0, 'refs/xet/ update allowed');
    assert.equal(r.git('rev-parse', 'refs/xet/snapshots/x').trim(), before);
    r.write('untracked.txt', 'u\n');
    const snap = capture(sb, r.dir);
    assert.equal(r.git('rev-parse', `refs/xet/snapshots/${snap}`).trim(), snap, 'git xet capture still works');
    // ...but not in the same transaction as a branch.
    assertRefused(
      gitTry(sb, r.dir, ['update-ref', '--stdin'], {
        input: `start\nupdate refs/xet/snapshots/y ${before}\nupdate refs/heads/bar ${before}\ncommit\n`,
      }),
      'a transaction mixing refs/xet/ and a branch',
    );
    // Hooks can be switched off: the documented bypass (git xet itself checks the guard too).
    assert.equal(
      gitTry(sb, r.dir, ['-c', 'core.hooksPath=/dev/null', 'commit', '-q', '--allow-empty', '-m', 'bypass']).status,
      0,
    );

    fs.writeFileSync(path.join(gitDir, 'xet-guard'), 'xet-guard 1 not-a-task\n');
    const mal = commit(r, 'malformed');
    assert.notEqual(mal.status, 0);
    assert.match(mal.stderr.toString(), /WORKDIR_RECOVERY_REQUIRED: this worktree's task guard is unreadable/);

    fs.rmSync(path.join(gitDir, 'xet-guard'));
    assert.equal(commit(r, 'cleared').status, 0, 'guard cleared: commits again');
  }));

test('a linked worktree has its own guard; a .git file (separate git dir) is followed', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    r.git('worktree', 'add', '-q', '-b', 'side', sb.path('wt'));
    const wt: Repo = new Repo(sb, sb.path('wt'));
    hooksJson(sb, wt.dir, 'install');
    assert.ok(fs.existsSync(path.join(r.commonDir(), 'hooks', 'pre-commit')), 'installed in the shared hooks dir');
    guard(absGitDir(wt), await deadRunner());
    assertRefused(commit(wt, 'in wt'), 'commit in the linked worktree');
    fs.mkdirSync(wt.p('sub'));
    assertRefused(commit(wt, 'in wt/sub', [], wt.p('sub')), 'commit from a subdirectory of it');
    assert.equal(commit(r, 'in main').status, 0, 'the main worktree has no guard');

    const sep = sb.path('sep');
    git(sb, sb.root, ['init', '-q', '--separate-git-dir', sb.path('sep.git'), sep]);
    const s: Repo = new Repo(sb, sep);
    s.commit('c1');
    assert.ok(fs.statSync(s.p('.git')).isFile());
    hooksJson(sb, sep, 'install');
    guard(sb.path('sep.git'), await deadRunner());
    assertRefused(commit(s, 'sep'), 'commit with a .git file');
  }));

test('hooks already there keep running: a failing one fails the commit, a passing one runs once; stdin reaches reference-transaction; uninstall restores bytes and modes', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const hooks = path.join(r.commonDir(), 'hooks');
    const log = sb.path('ran.log');
    const failing = '#!/bin/sh\necho "lint failed: fix your code" >&2\nexit 7\n';
    const passing = `#!/bin/bash\nset -eu\necho "pre-commit $(basename "$0")" >> ${log}\n`;
    const rt = `#!/bin/sh\nprintf '%s %s\\n' "$1" "$(cat)" >> ${log}\n`;
    const py = '#!/usr/bin/env python3\nimport sys\nopen(sys.argv[0] + ".ran", "w").write("x")\n';
    fs.writeFileSync(path.join(hooks, 'pre-commit'), failing, { mode: 0o755 });
    fs.writeFileSync(path.join(hooks, 'reference-transaction'), rt, { mode: 0o750 });
    fs.writeFileSync(path.join(hooks, 'pre-rebase'), py, { mode: 0o700 });
    fs.symlinkSync('../../hooks-src/merge-hook', path.join(hooks, 'pre-merge-commit'));
    const original = Object.fromEntries(
      HOOKS.map((h) => {
        const f = path.join(hooks, h);
        const st = fs.lstatSync(f);
        return [
          h,
          st.isSymbolicLink() ? `link:${fs.readlinkSync(f)}` : `${sha(fs.readFileSync(f))}:${st.mode & 0o7777}`,
        ];
      }),
    );
    const st = hooksJson(sb, r.dir, 'install');
    assert.deepEqual(
      st.hooks.map((h) => `${h.name}:${h.state}:${h.method}`),
      [
        'pre-commit:chained:block',
        'pre-merge-commit:chained:wrapper',
        'pre-rebase:chained:wrapper',
        'reference-transaction:chained:block',
      ],
    );

    const res = commit(r, 'fails');
    assert.equal(res.status, 1, describe(res));
    assert.match(res.stderr.toString(), /lint failed: fix your code/, "the user's hook ran and its failure stands");
    assert.doesNotMatch(res.stderr.toString(), /WORKDIR/);

    // A passing bash hook (set -eu) chained the same way, with $0 as git ran it.
    fs.writeFileSync(path.join(hooks, 'pre-commit'), passing, { mode: 0o755 });
    hooksJson(sb, r.dir, 'install');
    assert.equal(commit(r, 'passes').status, 0);
    const lines = fs.readFileSync(log, 'utf8').split('\n');
    assert.deepEqual(
      lines.filter((l) => l.startsWith('pre-commit')),
      ['pre-commit pre-commit'],
      'ran exactly once, basename intact',
    );
    assert.ok(
      lines.some((l) => /^prepared \S+ \S+ HEAD$/.test(l)),
      `reference-transaction got its stdin: ${lines.join('|')}`,
    );
    guard(absGitDir(r), await deadRunner());
    assertRefused(commit(r, 'dead'), 'commit through the chained bash hook');
    assert.equal(
      fs
        .readFileSync(log, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('pre-commit')).length,
      1,
      'not run when refused',
    );
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));

    // Under a dead guard the user's reference-transaction still gets refs/xet/ updates' stdin.
    guard(absGitDir(r), await deadRunner());
    r.git('update-ref', 'refs/xet/snapshots/z', 'HEAD');
    const after = fs.readFileSync(log, 'utf8');
    assert.match(after, /^prepared 0{40} [0-9a-f]{40} refs\/xet\/snapshots\/z$/m, 'stdin passed on after the check');
    assert.match(after, /^committed 0{40} [0-9a-f]{40} refs\/xet\/snapshots\/z$/m);
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));

    fs.writeFileSync(path.join(hooks, 'pre-commit'), failing, { mode: 0o755 });
    hooksJson(sb, r.dir, 'install');
    const un = hooksJson(sb, r.dir, 'uninstall');
    assert.deepEqual(
      un.hooks.map((h) => `${h.name}:${h.state}:${h.restored}`),
      HOOKS.map((h) => `${h}:absent:exact`),
    );
    for (const h of HOOKS) {
      const f = path.join(hooks, h);
      const s = fs.lstatSync(f);
      assert.equal(
        s.isSymbolicLink() ? `link:${fs.readlinkSync(f)}` : `${sha(fs.readFileSync(f))}:${s.mode & 0o7777}`,
        original[h],
        h,
      );
    }
    assert.ok(!fs.existsSync(path.join(hooks, 'xet-chained')), 'nothing of ours is left');
    assert.ok(!fs.existsSync(path.join(r.commonDir(), 'xet', 'hooks.json')));
  }));

function describe(res: ReturnType<typeof gitTry>): string {
  return `exit ${res.status}\nstdout: ${res.stdout}\nstderr: ${res.stderr}`;
}

test('core.hooksPath: installed where git looks; init installs (--no-hooks does not); status sees foreign and modified', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    r.git('config', 'core.hooksPath', 'githooks');
    const n = xet(sb, r.dir, ['init', '--no-hooks', '--json']);
    expectExit(n, 0);
    assert.equal(parseJson(n).hooks, null);
    assert.ok(!fs.existsSync(r.p('githooks')));
    // Missing in the worktree: Git would run no hook at all, so git xet makes the directory, ignored
    // as a whole (`.gitignore`: `*`, as husky makes its own): nothing untracked (R3, R4, N2).
    const made = xet(sb, r.dir, ['init', '--json']);
    expectExit(made, 0);
    assert.deepEqual(
      parseJson(made).hooks.hooks.map((h: { state: string }) => h.state),
      ['installed', 'installed', 'installed', 'installed'],
    );
    assert.equal(fs.readFileSync(r.p('githooks/.gitignore'), 'utf8'), '*\n');
    assert.equal(r.git('status', '--porcelain'), '', 'nothing untracked');
    expectExit(xet(sb, r.dir, ['hooks', 'uninstall', '--json']), 0);
    assert.ok(!fs.existsSync(r.p('githooks')), 'uninstall removes the directory git xet made');
    fs.mkdirSync(r.p('githooks'));
    fs.appendFileSync(path.join(r.commonDir(), 'info', 'exclude'), '/githooks/\n');
    const init = xet(sb, r.dir, ['init', '--json']);
    expectExit(init, 0);
    const out = parseJson(init);
    assert.equal(out.hooks.dir, r.p('githooks'));
    assert.ok(!fs.existsSync(path.join(r.commonDir(), 'hooks', 'pre-commit')), 'not in .git/hooks');
    guard(absGitDir(r), await deadRunner());
    assertRefused(commit(r, 'dead'), 'commit with core.hooksPath');
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));

    fs.writeFileSync(r.p('githooks/pre-commit'), '#!/bin/sh\nexit 0\n');
    const file = r.p('githooks/pre-rebase');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('return 1\n}', 'return 0\n}'));
    const st = states(hooksJson(sb, r.dir, 'status'));
    assert.equal(st['pre-commit'], 'foreign');
    assert.equal(st['pre-rebase'], 'modified');
    assert.deepEqual(
      Object.values(states(hooksJson(sb, r.dir, 'install'))),
      ['chained', 'installed', 'installed', 'installed'],
      'install repairs both',
    );
  }));

test('HOOK_CONFLICT: a hook with half a guard block is refused before any file changes; so is core.hooksPath=/dev/null', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    const hooks = path.join(r.commonDir(), 'hooks');
    const broken = '#!/bin/sh\n# >>> git xet guard v1 (pre-rebase): edited by hand\nexit 0\n';
    fs.writeFileSync(path.join(hooks, 'pre-rebase'), broken, { mode: 0o755 });
    const e = expectError(xet(sb, r.dir, ['hooks', 'install', '--json']), 'HOOK_CONFLICT');
    assert.match(e.message, /pre-rebase/);
    assert.equal(fs.readFileSync(path.join(hooks, 'pre-rebase'), 'utf8'), broken);
    assert.ok(!fs.existsSync(path.join(hooks, 'pre-commit')), 'no other hook written');
    r.git('config', 'core.hooksPath', '/dev/null');
    assert.match(
      expectError(xet(sb, r.dir, ['hooks', 'install', '--json']), 'HOOK_CONFLICT').message,
      /\/dev\/null: it is not a directory/,
    );
  }));

test('install twice, and twice at once, leaves one block per hook; a kill half way is repaired by running again', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const hooks = path.join(r.commonDir(), 'hooks');
    const user = '#!/bin/sh\necho user\n';
    fs.writeFileSync(path.join(hooks, 'pre-commit'), user, { mode: 0o755 });
    hooksJson(sb, r.dir, 'install');
    const bytes = HOOKS.map((h) => sha(fs.readFileSync(path.join(hooks, h))));
    hooksJson(sb, r.dir, 'install');
    assert.deepEqual(
      HOOKS.map((h) => sha(fs.readFileSync(path.join(hooks, h)))),
      bytes,
      'a second install changes nothing',
    );
    hooksJson(sb, r.dir, 'uninstall');

    const both = [0, 1].map(() => {
      const child = spawn(process.execPath, [XET_BIN, 'hooks', 'install', '--json'], {
        cwd: r.dir,
        env: sb.env,
        stdio: 'ignore',
      });
      return once(child, 'exit').then(([code]) => code);
    });
    assert.deepEqual(await Promise.all(both), [0, 0]);
    for (const h of HOOKS) assert.equal(blocks(path.join(hooks, h)), 1, `${h}: one block`);
    assert.deepEqual(
      HOOKS.map((h) => sha(fs.readFileSync(path.join(hooks, h)))),
      bytes,
      'the same files as one install',
    );
    hooksJson(sb, r.dir, 'uninstall');
    assert.equal(fs.readFileSync(path.join(hooks, 'pre-commit'), 'utf8'), user);

    // One installer at a time: the second waits while the first stands half way.
    const first = await pausedAt(sb, r.dir, ['hooks', 'install', '--json'], 'hooks:mid-install');
    const second = spawn(process.execPath, [XET_BIN, 'hooks', 'install', '--json'], {
      cwd: r.dir,
      env: sb.env,
      stdio: 'ignore',
    });
    const secondDone = once(second, 'exit').then(([code]) => code);
    let secondExited = false;
    void secondDone.then(() => (secondExited = true));
    await new Promise((res) => setTimeout(res, 1500));
    assert.equal(secondExited, false, 'the second install waits for the first');
    first.go();
    assert.equal((await first.done).code, 0);
    assert.equal(await secondDone, 0);
    for (const h of HOOKS) assert.equal(blocks(path.join(hooks, h)), 1, `${h}: one block`);
    hooksJson(sb, r.dir, 'uninstall');

    killAt(sb, r.dir, ['hooks', 'install'], 'hooks:mid-install');
    assert.equal(blocks(path.join(hooks, 'pre-commit')), 1, 'the first hook was written');
    assert.ok(!fs.existsSync(path.join(hooks, 'pre-merge-commit')), 'the second was not');
    assert.ok(!fs.existsSync(path.join(r.commonDir(), 'xet', 'hooks.json')), 'no record yet');
    assert.deepEqual(Object.values(states(hooksJson(sb, r.dir, 'install'))), [
      'chained',
      'installed',
      'installed',
      'installed',
    ]);
    assert.deepEqual(
      HOOKS.map((h) => sha(fs.readFileSync(path.join(hooks, h)))),
      bytes,
      'repaired to what one install writes',
    );
    const un = hooksJson(sb, r.dir, 'uninstall');
    assert.equal(un.hooks[0].restored, 'exact');
    assert.equal(fs.readFileSync(path.join(hooks, 'pre-commit'), 'utf8'), user);
  }));

test('ensureHooks: no git process when the hooks are in place; a new core.hooksPath is noticed', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    hooksJson(sb, r.dir, 'install');
    const gitDir = absGitDir(r);
    const script = (dir: string) =>
      `require(${JSON.stringify(path.resolve(__dirname, '..', 'src', 'hooks', 'install.js'))}).ensureHooks(${JSON.stringify(
        {
          worktree: dir,
          gitDir,
          commonDir: r.commonDir(),
          objectsDir: path.join(r.commonDir(), 'objects'),
          objectFormat: 'sha1',
        },
      )}).then(() => process.exit(0), (e) => { console.error(e.message); process.exit(9); })`;
    // PATH without git: any git process would fail this.
    const noGit = run(sb, r.dir, process.execPath, ['-e', script(r.dir)], { env: { PATH: '/nonexistent' } });
    assert.equal(noGit.status, 0, `ensureHooks ran git: ${noGit.stderr}`);

    r.git('config', 'core.hooksPath', '.hooks2');
    fs.mkdirSync(r.p('.hooks2'));
    fs.writeFileSync(r.p('.hooks2/.gitignore'), '*\n');
    const gone = run(sb, r.dir, process.execPath, ['-e', script(r.dir)], { env: { PATH: '/nonexistent' } });
    assert.equal(gone.status, 9, 'config changed: ensureHooks asks git (and, without it, fails)');
    const ok = run(sb, r.dir, process.execPath, ['-e', script(r.dir)]);
    assert.equal(ok.status, 0, ok.stderr.toString());
    for (const h of HOOKS) assert.equal(blocks(r.p(`.hooks2/${h}`)), 1, h);
  }));

/** husky 9 and lefthook from the npm registry, installed once per run (skipped offline). */
function toolProject(sb: Sandbox): string | null {
  const dir = sb.path('tools');
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'package.json'), '{"name":"tools","version":"1.0.0","private":true}\n');
  const res = spawnSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--prefer-offline', 'husky@9', 'lefthook@2'],
    {
      cwd: dir,
      env: { ...sb.env, npm_config_cache: path.join(os.homedir(), '.npm') },
      encoding: 'utf8',
      timeout: 120_000,
    },
  );
  return res.status === 0 ? dir : null;
}

test('husky 9 (core.hooksPath=.husky/_) and lefthook keep working, and are refused under a dead guard', (t) =>
  withSandbox(async (sb) => {
    const tools = toolProject(sb);
    if (!tools) return t.skip('husky and lefthook cannot be installed from the npm registry here');
    const r = repo(sb, 'husky');
    fs.symlinkSync(path.join(tools, 'node_modules'), r.p('node_modules'));
    fs.writeFileSync(r.p('package.json'), '{"name":"p","version":"1.0.0"}\n');
    const init = run(sb, r.dir, process.execPath, [r.p('node_modules/husky/bin.js'), 'init']);
    assert.equal(init.status, 0, init.stderr.toString());
    assert.equal(r.git('config', 'core.hooksPath').trim(), '.husky/_');
    const log = sb.path('husky.log');
    fs.writeFileSync(r.p('.husky/pre-commit'), `echo "husky ran $(basename "$0")" >> ${log}\n`);
    const st = hooksJson(sb, r.dir, 'install');
    assert.equal(st.dir, r.p('.husky/_'));
    assert.equal(states(st)['pre-commit'], 'chained');
    assert.equal(commit(r, 'with husky').status, 0);
    assert.equal(fs.readFileSync(log, 'utf8'), 'husky ran pre-commit\n');
    fs.writeFileSync(r.p('.husky/pre-commit'), 'echo "husky says no" >&2; exit 3\n');
    const no = commit(r, 'husky refuses');
    assert.notEqual(no.status, 0);
    assert.match(no.stderr.toString(), /husky says no/);
    guard(absGitDir(r), await deadRunner());
    assertRefused(commit(r, 'dead'), 'commit under husky');
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));
    // husky rewrites its stubs on every `npm install` (prepare): ours are gone, status says so.
    const again = run(sb, r.dir, process.execPath, [r.p('node_modules/husky/bin.js')]);
    assert.equal(again.status, 0);
    assert.equal(states(hooksJson(sb, r.dir, 'status'))['pre-commit'], 'foreign');
    assert.equal(states(hooksJson(sb, r.dir, 'install'))['pre-commit'], 'chained');

    const l = repo(sb, 'lefthook');
    fs.symlinkSync(path.join(tools, 'node_modules'), l.p('node_modules'));
    fs.writeFileSync(
      l.p('lefthook.yml'),
      `pre-commit:\n  commands:\n    hello:\n      run: echo lefthook ran >> ${sb.path('lh.log')}\n`,
    );
    const lh = run(sb, l.dir, l.p('node_modules/.bin/lefthook'), ['install']);
    assert.equal(lh.status, 0, lh.stderr.toString());
    assert.equal(states(hooksJson(sb, l.dir, 'install'))['pre-commit'], 'chained');
    l.write('b.txt', 'b\n');
    l.git('add', 'b.txt');
    assert.equal(commit(l, 'with lefthook').status, 0);
    assert.equal(fs.readFileSync(sb.path('lh.log'), 'utf8'), 'lefthook ran\n');
    guard(absGitDir(l), await deadRunner());
    assertRefused(commit(l, 'dead'), 'commit under lefthook');
  }));

test('HOOK_CONFLICT: a hook the repository tracks (core.hooksPath inside the worktree) is never rewritten; with the printed block committed, install chains it', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const mine = '#!/bin/sh\necho "team hook" >&2\n';
    r.write('.githooks/pre-commit', mine, 0o755);
    r.git('add', '.githooks/pre-commit');
    r.git('commit', '-q', '-m', 'team hooks');
    r.git('config', 'core.hooksPath', '.githooks');
    const e = expectError(xet(sb, r.dir, ['hooks', 'install', '--json']), 'HOOK_CONFLICT');
    assert.match(e.message, /\.githooks\/pre-commit.*tracks it/);
    assert.equal(fs.readFileSync(r.p('.githooks/pre-commit'), 'utf8'), mine, 'not rewritten');
    assert.equal(r.git('status', '--porcelain'), '', 'nothing written');

    const printed = xet(sb, r.dir, ['hooks', 'block', 'pre-commit']);
    expectExit(printed, 0);
    const [shebang, ...rest] = mine.split(/(?<=\n)/);
    r.write('.githooks/pre-commit', shebang + printed.stdout + rest.join(''), 0o755);
    r.git('commit', '-q', '-am', 'guard in the team hook');
    // The other hooks would be new untracked files in the worktree: hooks install refuses, naming
    // them (R3); init installs what it can and reports the rest, writing nothing into the worktree.
    const un = expectError(xet(sb, r.dir, ['hooks', 'install', '--json']), 'HOOK_CONFLICT');
    assert.deepEqual(un.details.files, [
      '.githooks/pre-merge-commit',
      '.githooks/pre-rebase',
      '.githooks/reference-transaction',
    ]);
    assert.match(un.message, /untracked/);
    const init = xet(sb, r.dir, ['init', '--json']);
    expectExit(init, 0);
    assert.deepEqual(states(parseJson(init).hooks), {
      'pre-commit': 'chained',
      'pre-merge-commit': 'skipped',
      'pre-rebase': 'skipped',
      'reference-transaction': 'skipped',
    });
    assert.equal(r.git('status', '--porcelain'), '', 'no untracked hook files in the worktree');
    assert.equal(blocks(r.p('.githooks/pre-commit')), 1);
    guard(absGitDir(r), await deadRunner());
    assertRefused(commit(r, 'dead'), 'commit with the committed block');
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));
    // Uninstall leaves the committed block alone and says so.
    const committed = fs.readFileSync(r.p('.githooks/pre-commit'));
    const out = hooksJson(sb, r.dir, 'uninstall');
    assert.equal(out.hooks[0].restored, 'tracked');
    assert.deepEqual(fs.readFileSync(r.p('.githooks/pre-commit')), committed, 'tracked file untouched');
    assert.equal(r.git('status', '--porcelain'), '', 'nothing modified');
    // Ignored hook files are fine: they stay out of status, captures of tracked state and commits.
    fs.appendFileSync(path.join(r.commonDir(), 'info', 'exclude'), '/.githooks/pre-*\n/.githooks/reference-*\n');
    assert.deepEqual(Object.values(states(hooksJson(sb, r.dir, 'install'))), [
      'chained',
      'installed',
      'installed',
      'installed',
    ]);
    assert.equal(r.git('status', '--porcelain'), '');
    expectError(xet(sb, r.dir, ['hooks', 'block', 'post-commit', '--json']), 'USAGE', 2);
  }));

test('a hook made non-executable after install (Git skips it) is moved aside behind a wrapper, still skipped', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const file = path.join(r.commonDir(), 'hooks', 'pre-commit');
    const user = `#!/bin/sh\necho ran >> ${sb.path('ran')}\n`;
    fs.writeFileSync(file, user, { mode: 0o755 });
    hooksJson(sb, r.dir, 'install');
    fs.chmodSync(file, 0o644);
    assert.equal(states(hooksJson(sb, r.dir, 'status'))['pre-commit'], 'modified');
    const st = hooksJson(sb, r.dir, 'install');
    assert.deepEqual(st.hooks[0], { name: 'pre-commit', state: 'chained', method: 'wrapper' });
    assert.equal(commit(r, 'skips it').status, 0);
    assert.ok(!fs.existsSync(sb.path('ran')), 'the non-executable hook did not run');
    guard(absGitDir(r), await deadRunner());
    assertRefused(commit(r, 'dead'), 'commit');
    fs.rmSync(path.join(absGitDir(r), 'xet-guard'));
    hooksJson(sb, r.dir, 'uninstall');
    assert.equal(fs.readFileSync(file, 'utf8'), user);
    assert.equal(fs.statSync(file).mode & 0o777, 0o644);
  }));
