// A fork's linked worktree written directly (src/workspace/worktree.ts) against the one git makes:
// twin repositories with the same commits, one forked by git xet (copy mode: no mounts needed), the
// other given `git worktree add --no-checkout --detach` + `git worktree lock` by the real git. The
// admin files are byte for byte the same, and git answers the same about both: worktree list,
// status, log, reflog, lock, unlock, prune.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git, gitTry, initRepo, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, expectExit, parseJson, xet } from './support/xet';

/** The files `git worktree add` + `lock` write into an admin dir (git xet adds index and its marker). */
const GIT_FILES = ['HEAD', 'commondir', 'gitdir', 'locked', 'logs/HEAD'];

function twin(sb: Sandbox, side: string): Repo {
  const r = initRepo(sb, `${side}/src`);
  r.commit('one', { 'a.txt': 'a\n', 'd/b.txt': 'b\n' });
  r.commit('two', { 'a.txt': 'a2\n' });
  return r;
}

function adminOf(worktree: string): string {
  const m = /^gitdir: (.*)\n$/.exec(fs.readFileSync(path.join(worktree, '.git'), 'utf8'));
  assert.ok(m, `${worktree}/.git is a gitdir link`);
  return m[1];
}

function files(dir: string, rel = ''): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...files(dir, r));
    else out.push(r);
  }
  return out.sort();
}

/** Fork `side`'s snapshot with git xet into <side>/<name>; returns the fork id. */
function xetFork(sb: Sandbox, src: Repo, name: string, env: NodeJS.ProcessEnv = {}): string {
  const snap = capture(sb, src.dir);
  const r = xet(sb, src.dir, ['fork', snap, path.join(path.dirname(src.dir), name), '--mode', 'copy', '--json'], {
    env,
  });
  expectExit(r, 0);
  return parseJson(r).id as string;
}

/** What git makes for the same fork in the twin repository. */
function gitFork(sb: Sandbox, src: Repo, name: string, id: string, env: NodeJS.ProcessEnv = {}): void {
  const dir = path.join(path.dirname(src.dir), name);
  const head = src.git('rev-parse', 'HEAD').trim();
  git(sb, src.dir, ['worktree', 'add', '-q', '--no-checkout', '--detach', dir, head], { env });
  git(sb, src.dir, ['worktree', 'lock', '--reason', `git xet fork ${id}`, dir], { env });
}

function assertSameAdmin(one: string, two: string, name: string): void {
  const a1 = adminOf(path.join(one, name));
  const a2 = adminOf(path.join(two, name));
  assert.equal(a1.replace(one, two), a2, 'the .git links name the same admin dir');
  const own = files(a1).filter((f) => !GIT_FILES.includes(f));
  assert.deepEqual(own, ['index', 'xet-fork.json'], 'besides git’s files, only the index and the fork marker');
  assert.deepEqual(files(a2), GIT_FILES.filter((f) => fs.existsSync(path.join(a2, f))).sort());
  for (const f of files(a2)) {
    const t1 = fs.readFileSync(path.join(a1, f), 'utf8').split(one).join(two);
    assert.equal(t1, fs.readFileSync(path.join(a2, f), 'utf8'), `${f} of the admin dir`);
    assert.equal(fs.statSync(path.join(a1, f)).mode, fs.statSync(path.join(a2, f)).mode, `mode of ${f}`);
  }
}

/** git's answers about a worktree, with the side's path taken out. */
function answers(sb: Sandbox, src: Repo, name: string, side: string): Record<string, string> {
  const dir = path.join(path.dirname(src.dir), name);
  const strip = (s: string) => s.split(path.dirname(src.dir)).join(`<${side}>`);
  const run = (cwd: string, args: string[]) => {
    const r = gitTry(sb, cwd, args);
    return strip(`${r.status} ${r.stdout.toString('utf8')}${r.stderr.toString('utf8')}`);
  };
  return {
    list: run(src.dir, ['worktree', 'list', '--porcelain']),
    head: run(dir, ['rev-parse', 'HEAD']),
    symbolic: run(dir, ['symbolic-ref', '-q', 'HEAD']),
    log: run(dir, ['log', '--format=%H %s']),
    reflog: run(dir, ['reflog', '--format=%H %gs']),
    gitDir: run(dir, ['rev-parse', '--git-dir', '--git-common-dir', '--show-toplevel']),
    prune: run(src.dir, ['worktree', 'prune', '-n', '-v']),
    lockAgain: run(src.dir, ['worktree', 'lock', dir]),
    removeLocked: run(src.dir, ['worktree', 'remove', dir]),
  };
}

test('a fork’s worktree admin files are the ones git worktree add + lock writes, and git treats them alike', async () => {
  await withSandbox((sb) => {
    const one = twin(sb, 'one');
    const two = twin(sb, 'two');
    assert.equal(one.git('rev-parse', 'HEAD'), two.git('rev-parse', 'HEAD'), 'twins');
    const id = xetFork(sb, one, 'wt');
    gitFork(sb, two, 'wt', id);
    const [d1, d2] = [path.dirname(one.dir), path.dirname(two.dir)];
    assertSameAdmin(d1, d2, 'wt');
    // The twin gets the files the fork has, so both are clean checkouts (read-tree: no reflog entry).
    git(sb, path.join(d2, 'wt'), ['read-tree', '-u', '--reset', 'HEAD']);
    assert.deepEqual(answers(sb, one, 'wt', 'side'), answers(sb, two, 'wt', 'side'));
    for (const d of [d1, d2]) assert.equal(git(sb, path.join(d, 'wt'), ['status', '--porcelain', '-uall']), '');
    // A second fork of the same name elsewhere gets git's next admin name (wt1), in both.
    fs.mkdirSync(path.join(d1, 'x'));
    fs.mkdirSync(path.join(d2, 'x'));
    const id2 = xetFork(sb, one, 'x/wt');
    gitFork(sb, two, 'x/wt', id2);
    assert.match(adminOf(path.join(d1, 'x', 'wt')), /\/worktrees\/wt1$/);
    assertSameAdmin(d1, d2, 'x/wt');
    // Unlocked and gone: prune takes both away alike.
    for (const [src, d] of [
      [one, d1],
      [two, d2],
    ] as const) {
      src.git('worktree', 'unlock', path.join(d, 'wt'));
      fs.rmSync(path.join(d, 'wt'), { recursive: true, force: true });
    }
    // prune -v reports on stderr.
    const pruneN = (r: Repo, d: string) =>
      r.gitTry('worktree', 'prune', '-n', '-v').stderr.toString('utf8').split(d).join('<side>');
    assert.equal(pruneN(one, d1), pruneN(two, d2));
    assert.match(pruneN(one, d1), /Removing worktrees\/wt: gitdir file points to non-existent/);
    one.git('worktree', 'prune');
    two.git('worktree', 'prune');
    assert.deepEqual(fs.readdirSync(path.join(one.dir, '.git', 'worktrees')), ['wt1']);
    assert.deepEqual(fs.readdirSync(path.join(two.dir, '.git', 'worktrees')), ['wt1']);
  });
});

test('without GIT_COMMITTER_DATE the reflog line has the time of the fork; with logAllRefUpdates=false there is none', async () => {
  await withSandbox((sb) => {
    const one = twin(sb, 'one');
    const two = twin(sb, 'two');
    const now = { GIT_COMMITTER_DATE: undefined } as NodeJS.ProcessEnv;
    const before = Math.floor(Date.now() / 1000);
    const id = xetFork(sb, one, 'wt', now);
    const after = Math.ceil(Date.now() / 1000);
    gitFork(sb, two, 'wt', id, now);
    const [d1, d2] = [path.dirname(one.dir), path.dirname(two.dir)];
    const line = (d: string) => fs.readFileSync(path.join(adminOf(path.join(d, 'wt')), 'logs', 'HEAD'), 'utf8');
    const re = /^0{40} ([0-9a-f]{40}) Xet Test <xet-test@example\.invalid> (\d+) ([+-]\d{4})\n$/;
    const [m1, m2] = [re.exec(line(d1)), re.exec(line(d2))];
    assert.ok(m1 && m2, `${line(d1)} / ${line(d2)}`);
    assert.equal(m1[1], m2[1]);
    assert.equal(m1[3], m2[3], 'the same time zone offset');
    assert.ok(Number(m1[2]) >= before && Number(m1[2]) <= after, `${m1[2]} within [${before}, ${after}]`);

    for (const r of [one, two]) r.git('config', 'core.logAllRefUpdates', 'false');
    const id2 = xetFork(sb, one, 'nolog');
    gitFork(sb, two, 'nolog', id2);
    assert.equal(fs.existsSync(path.join(adminOf(path.join(d1, 'nolog')), 'logs')), false);
    assertSameAdmin(d1, d2, 'nolog');
  });
});

test('where git would write something else, git makes the worktree: a name it changes, a reference-transaction hook', async () => {
  await withSandbox((sb) => {
    const one = twin(sb, 'one');
    const two = twin(sb, 'two');
    const [d1, d2] = [path.dirname(one.dir), path.dirname(two.dir)];
    // git names the admin dir "a-b" for "a b".
    const id = xetFork(sb, one, 'a b');
    gitFork(sb, two, 'a b', id);
    assert.match(adminOf(path.join(d1, 'a b')), /\/worktrees\/a-b$/);
    assertSameAdmin(d1, d2, 'a b');
    // A reference-transaction hook runs for the new worktree's HEAD: it must see it.
    for (const r of [one, two]) {
      const hook = path.join(r.dir, '.git', 'hooks', 'reference-transaction');
      fs.writeFileSync(hook, `#!/bin/sh\ncat >> "${r.dir}.hook-log"\n`, { mode: 0o755 });
    }
    const id2 = xetFork(sb, one, 'hooked');
    gitFork(sb, two, 'hooked', id2);
    assertSameAdmin(d1, d2, 'hooked');
    const log = (r: Repo) => fs.readFileSync(`${r.dir}.hook-log`, 'utf8');
    assert.match(log(one), /HEAD\n/, 'the hook saw the fork’s HEAD');
    // git xet's capture moved refs too: the fork's own lines are the last ones, alike in both.
    const tail = (r: Repo) => log(r).trim().split('\n').slice(-2).join('\n');
    assert.equal(tail(one), tail(two));
  });
});
