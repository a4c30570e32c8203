// Review findings of issue 10 on the guard hooks, each with the reviewer's repro: a chained hook that
// is a relative symlink or a script finding helpers next to itself keeps working, and one that goes
// missing refuses instead of being skipped (R2, R2b); a shared core.hooksPath survives uninstall in
// one repository (R10); hooks a task's install step removed are reported (R7); a tracked or
// per-worktree hooks dir gets no untracked files (R3, R4); core.hooksPath=/dev/null is a typed
// state, never an internal error (R17).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { identify, type ProcessIdentity } from '../src/tasks/proc';
import { GUARD_SCHEMA, publishGuard } from '../src/tasks/slot';
import { Repo, gitTry, initRepo, run } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { expectError, expectExit, parseJson, xet } from './support/xet';

const TASK = '0123456789abcdef';

async function deadRunner(): Promise<ProcessIdentity> {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const id = identify(child.pid!);
  assert.ok(id);
  child.kill('SIGKILL');
  await once(child, 'exit');
  return id;
}

function deadGuard(r: Repo, runner: ProcessIdentity): void {
  const gitDir = r.git('rev-parse', '--absolute-git-dir').trim();
  publishGuard(
    { id: 'slot', worktree: '', gitDir, commonDir: '' },
    { schema: GUARD_SCHEMA, task: TASK, slot: 'slot', runner, command: null, createdAt: new Date().toISOString() },
  );
}

function repo(sb: Sandbox, name = 'r'): Repo {
  const r = initRepo(sb, name);
  r.commit('c1', { 'a.txt': 'a\n' });
  return r;
}

const commit = (r: Repo, msg: string) => gitTry(r.sb, r.dir, ['commit', '-q', '--allow-empty', '-m', msg]);

type Hooks = {
  dir: string;
  disabled?: boolean;
  shared?: boolean;
  intact?: boolean;
  hooks: { name: string; state: string; method?: string; restored?: string; reason?: string }[];
};
function hooksJson(sb: Sandbox, cwd: string, verb: string, extra: string[] = []): Hooks {
  const res = xet(sb, cwd, ['hooks', verb, ...extra, '--json']);
  expectExit(res, 0);
  return parseJson(res) as Hooks;
}
const states = (r: Hooks) => Object.fromEntries(r.hooks.map((h) => [h.name, h.state]));

/** Calls a function of src/hooks/install.ts in its own process, on the repository at `cwd`. */
type Api = {
  intact?: boolean;
  state?: string;
  dir?: string | null;
  problems?: string[];
  skipped?: string[];
  message?: string;
};
function hooksApi(sb: Sandbox, cwd: string, fn: 'ensureHooks' | 'hooksIntact'): Api {
  const dist = path.resolve(__dirname, '..', 'src');
  const script = `const { findRepo } = require(${JSON.stringify(path.join(dist, 'git', 'repo.js'))});
const h = require(${JSON.stringify(path.join(dist, 'hooks', 'install.js'))});
findRepo(process.cwd()).then((r) => h.${fn}(r)).then(
  (v) => { process.stdout.write(JSON.stringify(v)); process.exit(0); },
  (e) => { console.error(e.code + ': ' + e.message); process.exit(9); });`;
  const res = run(sb, cwd, process.execPath, ['-e', script]);
  assert.equal(res.status, 0, `${fn}: ${res.stderr}`);
  return JSON.parse(res.stdout.toString());
}

test('R2: a hook that is a relative symlink keeps running after install (its failure stands, $0 keeps its basename); uninstall puts the link back', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    r.write('scripts/pre-commit', '#!/bin/sh\necho "LINT-HOOK-RAN as $(basename "$0")" >&2\nexit 9\n', 0o755);
    const link = path.join(r.commonDir(), 'hooks', 'pre-commit');
    fs.symlinkSync('../../scripts/pre-commit', link);
    const before = commit(r, 'a');
    assert.equal(before.status, 1);
    assert.match(before.stderr.toString(), /LINT-HOOK-RAN as pre-commit/);

    const st = hooksJson(sb, r.dir, 'install');
    assert.deepEqual(st.hooks[0], { name: 'pre-commit', state: 'chained', method: 'wrapper' });
    const res = commit(r, 'a');
    assert.equal(res.status, 1, 'the failing lint hook still stops the commit');
    assert.match(res.stderr.toString(), /LINT-HOOK-RAN as pre-commit/, 'it ran, and saw its own name in $0');

    // The target gone (a branch without scripts/): the wrapper refuses rather than skip the hook.
    fs.renameSync(r.p('scripts/pre-commit'), r.p('scripts/moved'));
    const gone = commit(r, 'b');
    assert.equal(gone.status, 1, 'a chained hook that is gone fails closed');
    assert.match(
      gone.stderr.toString(),
      /git xet: the pre-commit hook git xet chained .* is missing or not executable/,
    );
    const status = hooksJson(sb, r.dir, 'status');
    assert.equal(status.hooks[0].state, 'broken');
    assert.match(status.hooks[0].reason ?? '', /is gone|no longer executable/);
    assert.equal(status.intact, false);
    fs.renameSync(r.p('scripts/moved'), r.p('scripts/pre-commit'));

    const un = hooksJson(sb, r.dir, 'uninstall');
    assert.equal(un.hooks[0].restored, 'exact');
    assert.equal(fs.readlinkSync(link), '../../scripts/pre-commit', 'the same link text');
    assert.ok(!fs.existsSync(path.join(r.commonDir(), 'hooks', 'xet-chained')));
    assert.equal(commit(r, 'c').status, 1, 'and it still fails the commit');
  }));

test('R2b: a non-sh hook that loads a helper next to itself still works after install; removed or made non-executable, commits are refused', () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    const hooks = path.join(r.commonDir(), 'hooks');
    fs.writeFileSync(path.join(hooks, 'lint-helper.js'), 'module.exports=()=>{console.error("LINT-OK");}\n');
    const hook = `#!${process.execPath}\nrequire("./lint-helper.js")();\n`;
    fs.writeFileSync(path.join(hooks, 'pre-commit'), hook, { mode: 0o755 });
    assert.equal(commit(r, 'a').status, 0);

    assert.equal(states(hooksJson(sb, r.dir, 'install'))['pre-commit'], 'chained');
    const res = commit(r, 'b');
    assert.equal(res.status, 0, res.stderr.toString());
    assert.match(res.stderr.toString(), /LINT-OK/);
    deadGuard(r, await deadRunner());
    const dead = commit(r, 'dead');
    assert.notEqual(dead.status, 0);
    assert.match(dead.stderr.toString(), /WORKDIR_RECOVERY_REQUIRED/);
    assert.doesNotMatch(dead.stderr.toString(), /LINT-OK/);
    fs.rmSync(path.join(r.git('rev-parse', '--absolute-git-dir').trim(), 'xet-guard'));

    const kept = path.join(hooks, 'pre-commit.xet-chained');
    fs.chmodSync(kept, 0o644);
    assert.equal(commit(r, 'not executable').status, 1, 'a hook that ran before is not silently skipped');
    assert.equal(hooksJson(sb, r.dir, 'status').hooks[0].state, 'broken');
    fs.chmodSync(kept, 0o755);
    assert.equal(commit(r, 'again').status, 0);

    const un = hooksJson(sb, r.dir, 'uninstall');
    assert.equal(un.hooks[0].restored, 'exact');
    assert.equal(fs.readFileSync(path.join(hooks, 'pre-commit'), 'utf8'), hook);
    assert.equal(fs.statSync(path.join(hooks, 'pre-commit')).mode & 0o777, 0o755);
    assert.ok(!fs.existsSync(kept));

    // Gone entirely: refused, status broken, uninstall says it had nothing to put back.
    hooksJson(sb, r.dir, 'install');
    fs.rmSync(kept);
    assert.equal(commit(r, 'gone').status, 1);
    assert.equal(hooksJson(sb, r.dir, 'status').hooks[0].state, 'broken');
    assert.equal(hooksJson(sb, r.dir, 'uninstall').hooks[0].restored, 'lost');
    assert.ok(!fs.existsSync(path.join(hooks, 'pre-commit')));
  }));

test('R10: a hooks dir outside the repository (global core.hooksPath) is not uninstalled without --force; status says absent, not foreign, once the files are gone', () =>
  withSandbox(async (sb) => {
    const ghooks = sb.path('ghooks');
    fs.appendFileSync(path.join(sb.env.HOME!, '.gitconfig'), `[core]\n\thooksPath = ${ghooks}\n`);
    const a = repo(sb, 'gA');
    const b = repo(sb, 'gB');
    const st = hooksJson(sb, a.dir, 'install');
    assert.equal(st.dir, ghooks);
    assert.equal(st.shared, true);
    hooksJson(sb, b.dir, 'install');
    deadGuard(b, await deadRunner());

    const e = expectError(xet(sb, a.dir, ['hooks', 'uninstall', '--json']), 'HOOK_CONFLICT');
    assert.match(e.message, /outside this repository.*--force/);
    assert.equal(e.details.dir, ghooks);
    assert.ok(fs.existsSync(path.join(ghooks, 'pre-commit')), 'nothing removed');
    const refused = commit(b, 'under a dead guard');
    assert.notEqual(refused.status, 0, 'gB is still guarded');
    assert.match(refused.stderr.toString(), /WORKDIR_RECOVERY_REQUIRED/);

    const forced = hooksJson(sb, a.dir, 'uninstall', ['--force']);
    assert.deepEqual(
      forced.hooks.map((h) => h.restored),
      ['removed', 'removed', 'removed', 'removed'],
    );
    assert.deepEqual(Object.values(states(hooksJson(sb, b.dir, 'status'))), ['absent', 'absent', 'absent', 'absent']);
  }));

test('R7: hooks a project install step deletes or rewrites are reported: hooksIntact and hooks status say so without a task ending', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    assert.equal(hooksApi(sb, r.dir, 'hooksIntact').intact, false, 'never installed');
    hooksJson(sb, r.dir, 'install');
    const ok = hooksApi(sb, r.dir, 'hooksIntact');
    assert.deepEqual(ok, { intact: true, dir: path.join(r.commonDir(), 'hooks'), problems: [] });
    assert.equal(hooksJson(sb, r.dir, 'status').intact, true);
    // What simple-git-hooks does: deletes hooks it does not manage, overwrites pre-commit.
    const hooks = path.join(r.commonDir(), 'hooks');
    fs.rmSync(path.join(hooks, 'reference-transaction'));
    fs.writeFileSync(path.join(hooks, 'pre-commit'), '#!/bin/sh\nnpx lint-staged\n', { mode: 0o755 });
    const broken = hooksApi(sb, r.dir, 'hooksIntact');
    assert.equal(broken.intact, false);
    assert.deepEqual(broken.problems, ['pre-commit: foreign', 'reference-transaction: absent']);
    const st = hooksJson(sb, r.dir, 'status');
    assert.equal(st.intact, false);
    assert.equal(states(st)['reference-transaction'], 'absent');
    assert.equal(hooksApi(sb, r.dir, 'ensureHooks').state, 'installed', 'ensureHooks puts them back');
    assert.equal(hooksApi(sb, r.dir, 'hooksIntact').intact, true);
    assert.equal(hooksApi(sb, r.dir, 'ensureHooks').state, 'intact');
  }));

test('R4, N2: a relative core.hooksPath (husky .husky/_) has one record per worktree hooks dir; a linked worktree without .husky/_ gets an ignored one, removed by uninstall', async () =>
  withSandbox(async (sb) => {
    const r = repo(sb);
    // husky 9's layout: .husky/_ holds the stubs and a .gitignore of '*'.
    const stub = '#!/usr/bin/env sh\n. "$(dirname "$0")/h"\n';
    r.write('.husky/_/.gitignore', '*\n');
    r.write('.husky/_/h', '#!/usr/bin/env sh\nexit 0\n', 0o755);
    for (const h of ['pre-commit', 'pre-merge-commit', 'pre-rebase']) r.write(`.husky/_/${h}`, stub, 0o755);
    r.git('config', 'core.hooksPath', '.husky/_');
    assert.equal(states(hooksJson(sb, r.dir, 'install'))['pre-commit'], 'chained');
    assert.equal(r.git('status', '--porcelain'), '');

    const wt = sb.path('wt');
    r.git('worktree', 'add', '-q', '-b', 'side', wt);
    // No .husky/_ there until husky runs: Git would run no hook, so git xet makes it, ignored as a
    // whole as husky makes its own, and takes it away again on uninstall.
    const made = hooksJson(sb, wt, 'install');
    assert.equal(states(made)['pre-commit'], 'installed');
    assert.equal(fs.readFileSync(path.join(wt, '.husky', '_', '.gitignore'), 'utf8'), '*\n');
    assert.equal(gitTry(sb, wt, ['status', '--porcelain']).stdout.toString(), '', 'nothing untracked');
    assert.equal(hooksApi(sb, wt, 'ensureHooks').state, 'intact');
    // A task in that worktree (runner alive) puts a guard there; a dead runner's guard refuses.
    const wtRepo = new Repo(sb, wt);
    deadGuard(wtRepo, await deadRunner());
    const refused = commit(wtRepo, 'x');
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr.toString(), /WORKDIR_RECOVERY_REQUIRED/);
    fs.rmSync(path.join(wtRepo.git('rev-parse', '--absolute-git-dir').trim(), 'xet-guard'));
    const gone = hooksJson(sb, wt, 'uninstall');
    assert.ok(gone.hooks.every((h) => h.restored === 'removed'));
    assert.ok(!fs.existsSync(path.join(wt, '.husky', '_')), 'the directory git xet made is gone');

    // Its own .husky/_ (husky ran there): both dirs recorded, each uninstalled exactly.
    fs.mkdirSync(path.join(wt, '.husky', '_'), { recursive: true });
    fs.writeFileSync(path.join(wt, '.husky', '_', '.gitignore'), '*\n');
    fs.writeFileSync(path.join(wt, '.husky', '_', 'pre-commit'), stub, { mode: 0o755 });
    hooksJson(sb, wt, 'install');
    const rec = JSON.parse(fs.readFileSync(path.join(r.commonDir(), 'xet', 'hooks.json'), 'utf8'));
    assert.deepEqual(Object.keys(rec.dirs).sort(), [path.join(wt, '.husky', '_'), r.p('.husky/_')].sort());
    const un = hooksJson(sb, r.dir, 'uninstall');
    assert.deepEqual(
      un.hooks.map((h) => h.restored),
      ['exact', 'exact', 'exact', 'removed'],
    );
    assert.equal(fs.readFileSync(r.p('.husky/_/pre-commit'), 'utf8'), stub);
    assert.equal(states(hooksJson(sb, wt, 'status'))['pre-commit'], 'chained', "the other worktree's hooks stay");
    assert.equal(hooksApi(sb, wt, 'hooksIntact').intact, true);
    assert.equal(hooksJson(sb, wt, 'uninstall').hooks[0].restored, 'exact');
  }));

test('R17: core.hooksPath=/dev/null: init succeeds and says hooks are off, ensureHooks returns disabled, task run still runs; never exit 70', () =>
  withSandbox((sb) => {
    const r = repo(sb);
    r.git('config', 'core.hooksPath', '/dev/null');
    const init = xet(sb, r.dir, ['init', '--json']);
    expectExit(init, 0);
    assert.equal(parseJson(init).hooks.disabled, true);
    assert.equal(parseJson(init).hooks.shared, undefined, 'nothing there to share');
    assert.ok(parseJson(init).hooks.hooks.every((h: { state: string }) => h.state === 'skipped'));
    assert.match(xet(sb, r.dir, ['init']).stdout, /switched off/);
    const st = hooksJson(sb, r.dir, 'status');
    assert.equal(st.disabled, true);
    assert.equal(st.intact, false);
    assert.equal(hooksJson(sb, r.dir, 'uninstall').disabled, true);
    expectError(xet(sb, r.dir, ['hooks', 'install', '--json']), 'HOOK_CONFLICT');
    const ens = hooksApi(sb, r.dir, 'ensureHooks');
    assert.equal(ens.state, 'disabled');
    assert.match(ens.message ?? '', /Git runs no hooks/);
    const task = xet(sb, r.dir, ['task', 'run', '--no-capture', '--json', '--', 'true']);
    expectExit(task, 0);
  }));
