// Conflicts, operations in progress and sparse checkout travel in a snapshot: for each kind, the
// restored copy's `git status` (long text and porcelain v2 with branch) is the source's, verify is
// clean, and continuing the operation in the source and in the copy gives the same commits.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git as gitRun, initRepo, Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { collectGitState, compareGitStates } from './support/state';
import { capture, describeRun, expectError, parseJson, restore, showManifest, verify, xet } from './support/xet';

/** What must be identical between a source and its copy while an operation is in progress. */
function observe(r: Repo): Record<string, string> {
  const run = (...args: string[]) => {
    const x = r.gitTry(...args);
    return `exit ${x.status}\n${x.stdout.toString('utf8')}`;
  };
  return {
    ...collectGitState(r.sb, r.dir),
    'status (long)': run('status'),
    'status --porcelain=v2 --branch': run('status', '--porcelain=v2', '--branch'),
    'ls-files -u': run('ls-files', '-u'),
    'sparse-checkout list': run('sparse-checkout', 'list'),
  };
}

function assertSame(src: Repo, copy: Repo, what: string): void {
  const problems = compareGitStates(observe(src), observe(copy));
  assert.deepEqual(problems, [], `${what}: copy differs from source:\n${problems.join('\n')}`);
}

let n = 0;
/** capture -> restore into a new directory -> same status, clean verify; returns the copy. */
function roundTripOperation(
  r: Repo,
  expectKinds: string[] | null,
  restoreArgs: string[] = [],
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
): { copy: Repo; snapshot: string; manifest: any } {
  const before = observe(r);
  const snapshot = capture(r.sb, r.dir);
  assert.deepEqual(compareGitStates(before, observe(r)), [], 'capture must not change the source');
  const manifest = showManifest(r.sb, r.dir, snapshot);
  assert.equal(manifest.schema, 'xet.snapshot/v2', 'a snapshot holding an operation or conflicts is v2');
  if (expectKinds) assert.deepEqual(manifest.operation?.kinds, expectKinds);
  const dir = r.sb.path(`copy-${++n}`);
  restore(r.sb, r.dir, snapshot, dir, restoreArgs);
  const copy = new Repo(r.sb, dir);
  assertSame(r, copy, 'after restore');
  const v = verify(r.sb, r.dir, snapshot, dir);
  assert.equal(v.status, 0, `verify of the copy:\n${describeRun(v)}`);
  return { copy, snapshot, manifest };
}

/** Run the same steps in source and copy; their history, refs and status must then agree. */
function continueBoth(src: Repo, copy: Repo, steps: (r: Repo) => void): void {
  steps(src);
  steps(copy);
  assertSame(src, copy, 'after continuing');
  const log = (r: Repo) => r.git('log', '--format=%T %P %s', 'HEAD');
  assert.equal(log(copy), log(src), 'continuing gives the same commits');
}

function twoBranches(sb: Sandbox, name = 'src', initArgs: string[] = []): Repo {
  const r = initRepo(sb, name, ['-b', 'main', ...initArgs]);
  r.commit('base', { 'f.txt': 'base\n', 'g.txt': 'g\n' });
  r.git('checkout', '-q', '-b', 'topic');
  r.commit('topic 1', { 'f.txt': 'topic\n' });
  r.commit('topic 2', { 't2.txt': 'two\n' });
  r.commit('topic 3', { 'g.txt': 'topic g\n' });
  r.git('checkout', '-q', 'main');
  r.commit('main 1', { 'f.txt': 'main\n' });
  return r;
}

const resolve = (file: string, content: string) => (r: Repo) => {
  r.write(file, content);
  r.git('add', file);
};

test('merge with a conflict: stages, MERGE_HEAD and message travel; git merge --continue gives the same merge', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    assert.notEqual(r.gitTry('merge', 'topic').status, 0, 'fixture: the merge conflicts');
    r.write('untracked.txt', 'u\n');
    const { copy, manifest, snapshot } = roundTripOperation(r, ['merge']);
    const d = xet(sb, r.dir, ['diff', snapshot, '--json']);
    assert.equal(parseJson(d).identical, true, `diff of the source against its own snapshot: ${describeRun(d)}`);
    assert.deepEqual(
      manifest.unmerged.map((e: { stage: number; path: string }) => `${e.stage} ${e.path}`),
      ['1 f.txt', '2 f.txt', '3 f.txt'],
    );
    assert.match(copy.read('f.txt').toString(), /^<<<<<<< HEAD\nmain\n=======\ntopic\n>>>>>>> topic\n$/);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'merged\n')(x);
      x.git('merge', '--continue');
    });
    assert.equal(copy.git('rev-parse', 'HEAD^2').trim(), r.git('rev-parse', 'topic').trim());
  }));

test('merge --no-commit in a linked worktree (no conflict) restores as a merge in progress', () =>
  withSandbox((sb) => {
    const main = twoBranches(sb, 'main-repo');
    main.git('worktree', 'add', '-q', '-b', 'wt', sb.path('linked'), 'main');
    const wt = new Repo(sb, sb.path('linked'));
    wt.commit('on wt', { 'wt.txt': 'wt\n' });
    wt.git('merge', '-q', '--no-commit', '--no-ff', 'topic~1', '-X', 'theirs');
    assert.ok(fs.existsSync(wt.gitPath('MERGE_HEAD')), 'fixture: per-worktree MERGE_HEAD');
    const { copy } = roundTripOperation(wt, ['merge']);
    continueBoth(wt, copy, (x) => x.git('commit', '--no-edit', '-q'));
  }));

test('rebase -m stopped by a conflict: git rebase --continue finishes the same way in the copy', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    r.git('checkout', '-q', 'topic');
    assert.notEqual(r.gitTry('rebase', '-m', 'main').status, 0, 'fixture: the rebase conflicts');
    assert.ok(fs.existsSync(r.gitPath('rebase-merge/git-rebase-todo')));
    const { copy } = roundTripOperation(r, ['rebase-merge']);
    assert.match(copy.git('status'), /You are currently rebasing branch 'topic' on '[0-9a-f]+'/);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('rebase', '--continue');
    });
    assert.equal(copy.git('symbolic-ref', 'HEAD').trim(), 'refs/heads/topic');
    assert.equal(fs.existsSync(copy.gitPath('rebase-merge')), false);
  }));

test('rebase --apply stopped by a conflict: git rebase --continue finishes the same way in the copy', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    r.git('checkout', '-q', 'topic');
    assert.notEqual(r.gitTry('rebase', '--apply', 'main').status, 0, 'fixture: the rebase conflicts');
    assert.ok(fs.existsSync(r.gitPath('rebase-apply/rebasing')));
    const { copy, manifest } = roundTripOperation(r, ['rebase-apply']);
    assert.ok(manifest.unmerged.length > 0, 'the 3-way fallback left unmerged entries');
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('rebase', '--continue');
    });
    assert.equal(fs.existsSync(copy.gitPath('rebase-apply')), false);
  }));

test('cherry-pick of a range stopped at the 2nd pick: the sequencer continues with the rest', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('base', { 'f.txt': 'base\n' });
    r.git('checkout', '-q', '-b', 'picks');
    r.commit('pick 1', { 'p1.txt': 'one\n' });
    r.commit('pick 2', { 'f.txt': 'picks\n' });
    r.commit('pick 3', { 'p3.txt': 'three\n' });
    r.git('checkout', '-q', 'main');
    r.commit('main 1', { 'f.txt': 'main\n' });
    assert.notEqual(r.gitTry('cherry-pick', 'main..picks').status, 0, 'fixture: the 2nd pick conflicts');
    assert.ok(fs.existsSync(r.p('p1.txt')), 'fixture: the 1st pick was applied');
    const todo = fs.readFileSync(r.gitPath('sequencer/todo'), 'utf8');
    assert.match(todo, /^pick [0-9a-f]+ pick 3$/m, `fixture: the 3rd pick remains: ${todo}`);
    const { copy } = roundTripOperation(r, ['cherry-pick', 'sequencer']);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('cherry-pick', '--continue');
    });
    assert.ok(fs.existsSync(copy.p('p3.txt')), 'the 3rd pick was applied in the copy');
    assert.equal(fs.existsSync(copy.gitPath('sequencer')), false);
  }));

test('revert with a conflict: git revert --continue gives the same revert commit', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('c1', { 'f.txt': 'one\n' });
    r.commit('c2', { 'f.txt': 'two\n' });
    r.commit('c3', { 'f.txt': 'three\n' });
    assert.notEqual(r.gitTry('revert', '--no-edit', 'HEAD~1').status, 0, 'fixture: the revert conflicts');
    const { copy } = roundTripOperation(r, ['revert']);
    assert.match(copy.git('status'), /You are currently reverting commit [0-9a-f]+\./);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'reverted\n')(x);
      x.git('revert', '--continue');
    });
  }));

test('am stopped by a failing patch: --continue and --skip behave the same in the copy', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    const patches = sb.path('patches');
    r.git('format-patch', '-q', '-o', patches, 'main~1..topic');
    const files = fs
      .readdirSync(patches)
      .map((f) => path.join(patches, f))
      .sort();
    assert.notEqual(r.gitTry('am', '-3', ...files).status, 0, 'fixture: the first patch conflicts');
    const { copy } = roundTripOperation(r, ['am']);
    assert.match(copy.git('status'), /You are in the middle of an am session\./);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('am', '--continue');
    });
    // A second session, stopped by a patch that does not apply at all, then skipped.
    r.commit('main 3', { 'g.txt': 'main g again\n' });
    assert.notEqual(r.gitTry('am', files[2]).status, 0, 'fixture: the patch does not apply');
    const second = roundTripOperation(r, ['am']);
    continueBoth(r, second.copy, (x) => x.git('am', '--skip'));
  }));

test('bisect midway: status and the next step (git bisect good|bad) are the same in the copy', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    for (let i = 1; i <= 9; i++) r.commit(`c${i}`, { 'f.txt': `${i}\n`, [`f${i}.txt`]: 'x\n' });
    r.git('bisect', 'start', 'HEAD', 'HEAD~8');
    r.git('bisect', 'good');
    const { copy, manifest, snapshot } = roundTripOperation(r, ['bisect']);
    assert.ok(manifest.operation.refs.some((x: { name: string }) => x.name === 'refs/bisect/bad'));
    assert.match(
      copy.git('status'),
      /^HEAD detached at [0-9a-f]+\nYou are currently bisecting, started from branch 'main'\./,
    );
    const step = (term: string) => (x: Repo) => x.git('bisect', term);
    for (const term of ['bad', 'good']) {
      step(term)(r);
      step(term)(copy);
      assert.equal(copy.git('rev-parse', 'HEAD'), r.git('rev-parse', 'HEAD'), `after bisect ${term}`);
      assertSame(r, copy, `after bisect ${term}`);
    }
    assert.equal(copy.git('bisect', 'log'), r.git('bisect', 'log'));
    const kinds = parseJson(verify(sb, r.dir, snapshot, copy.dir)).differences.map(
      (d: { kind: string; path?: string }) => `${d.kind} ${d.path ?? ''}`,
    );
    for (const k of [
      'operation-ref-missing refs/bisect/bad',
      'operation-ref-extra refs/bisect/bad',
      'gitstate-modified BISECT_LOG',
    ]) {
      assert.ok(kinds.includes(k), `verify after two more steps reports ${k}: ${kinds.join(', ')}`);
    }
  }));

test('rebase with exec lines: restore refuses them unless --allow-exec, then --continue runs them', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    r.git('checkout', '-q', 'topic');
    assert.notEqual(r.gitTry('rebase', '-x', 'echo ran >> ../exec-$(basename $PWD).log', 'main').status, 0);
    const snapshot = capture(sb, r.dir);
    const target = sb.path('refused');
    const res = xet(sb, r.dir, ['restore', snapshot, target, '--json']);
    const err = expectError(res, 'OPERATION_RUNS_COMMANDS');
    assert.ok(
      err.details.commands.some((c: string) => c.includes('echo ran')),
      JSON.stringify(err.details),
    );
    assert.equal(fs.existsSync(target), false, 'nothing written');
    const { copy } = roundTripOperation(r, ['rebase-merge'], ['--allow-exec']);
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('rebase', '--continue');
    });
    assert.equal(fs.readFileSync(sb.path(`exec-${path.basename(copy.dir)}.log`), 'utf8'), 'ran\nran\nran\n');
  }));

test('sparse checkout, cone mode (with and without a sparse index): patterns, flags and status match', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('c1', { 'a/1.txt': '1\n', 'b/2.txt': '2\n', 'c/d/3.txt': '3\n', 'c/e/4.txt': '4\n', 'top.txt': 't\n' });
    r.git('sparse-checkout', 'set', 'a', 'c/d');
    assert.equal(fs.existsSync(r.p('b/2.txt')), false, 'fixture: b/ is not checked out');
    r.write('a/new.txt', 'untracked\n');
    const { copy, manifest } = roundTripOperation(r, null);
    assert.equal(manifest.sparse.cone, 'true');
    assert.equal(copy.git('sparse-checkout', 'list'), 'a\nc/d\n');
    assert.equal(copy.git('config', '--worktree', 'core.sparseCheckout').trim(), 'true');
    continueBoth(r, copy, (x) => {
      x.git('sparse-checkout', 'add', 'b');
      x.git('add', 'a/new.txt');
      x.git('commit', '-q', '-m', 'more');
    });
    assert.ok(fs.existsSync(copy.p('b/2.txt')));

    r.git('config', 'index.sparse', 'true');
    r.git('sparse-checkout', 'reapply');
    assert.match(r.git('ls-files', '--sparse'), /^c\/e\/$/m, 'fixture: a sparse index');
    const second = roundTripOperation(r, null);
    assert.equal(second.copy.git('ls-files', '--sparse'), r.git('ls-files', '--sparse'), 'the copy has a sparse index');
  }));

test('sparse checkout, non-cone patterns: restored sparse, git sparse-checkout list matches', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('c1', { 'keep.txt': 'k\n', 'drop.md': 'd\n', 'sub/x.txt': 'x\n', 'sub/y.md': 'y\n' });
    r.git('sparse-checkout', 'set', '--no-cone', '*.txt');
    assert.equal(fs.existsSync(r.p('drop.md')), false, 'fixture: *.md not checked out');
    const { copy, manifest, snapshot } = roundTripOperation(r, null);
    assert.equal(manifest.sparse.cone, 'false');
    assert.equal(copy.git('sparse-checkout', 'list'), '*.txt\n');
    assert.equal(fs.existsSync(copy.p('sub/y.md')), false);
    continueBoth(r, copy, (x) => x.git('sparse-checkout', 'reapply'));
    copy.git('sparse-checkout', 'disable');
    const v = parseJson(verify(sb, r.dir, snapshot, copy.dir));
    const kinds = v.differences.map((d: { kind: string; path?: string }) => `${d.kind} ${d.path ?? ''}`);
    for (const k of ['sparse core.sparseCheckout', 'index-flag-missing drop.md', 'file-extra drop.md']) {
      assert.ok(
        kinds.includes(k),
        `verify of a copy whose sparse checkout was disabled reports ${k}: ${kinds.join(', ')}`,
      );
    }
  }));

/** A copy of snapshot `snap` whose gitstate/ tree gets one more file (path -> content). */
function forge(r: Repo, snap: string, extra: Record<string, string>): string {
  const top = r.git('ls-tree', snap).trim().split('\n');
  const stateLine = top.find((l) => l.endsWith('\tgitstate')) as string;
  const state = r.git('ls-tree', stateLine.split(/\s+/)[2]).trim().split('\n');
  const dirs = new Map<string, string[]>();
  for (const [p, content] of Object.entries(extra)) {
    const blob = r.gitInput(content, 'hash-object', '-w', '--stdin').trim();
    const slash = p.indexOf('/');
    if (slash < 0) state.push(`100644 blob ${blob}\t${p}`);
    else
      dirs.set(p.slice(0, slash), [
        ...(dirs.get(p.slice(0, slash)) ?? []),
        `100644 blob ${blob}\t${p.slice(slash + 1)}`,
      ]);
  }
  for (const [d, lines] of dirs) {
    const existing = state.findIndex((l) => l.endsWith(`\t${d}`));
    const base = existing >= 0 ? r.git('ls-tree', state[existing].split(/\s+/)[2]).trim().split('\n') : [];
    if (existing >= 0) state.splice(existing, 1);
    state.push(`040000 tree ${r.gitInput(`${[...base, ...lines].join('\n')}\n`, 'mktree').trim()}\t${d}`);
  }
  const stateTree = r.gitInput(`${state.join('\n')}\n`, 'mktree').trim();
  const newTop = top.map((l) => (l === stateLine ? `040000 tree ${stateTree}\tgitstate` : l));
  const tree = r.gitInput(`${newTop.join('\n')}\n`, 'mktree').trim();
  const parents = r
    .git('log', '-1', '--format=%P', snap)
    .trim()
    .split(' ')
    .flatMap((p) => ['-p', p]);
  const commit = r.gitInput('forged\n', 'commit-tree', tree, ...parents).trim();
  r.git('update-ref', `refs/xet/snapshots/${commit}`, commit);
  return commit;
}

test('a forged snapshot whose gitstate/ names a file outside the allow-list is refused, nothing written', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    assert.notEqual(r.gitTry('merge', 'topic').status, 0);
    const snap = capture(sb, r.dir);
    const cases: [Record<string, string>, string][] = [
      [{ 'hooks/post-checkout': '#!/bin/sh\ntouch /tmp/pwned\n' }, 'SNAPSHOT_INVALID'],
      [{ config: '[core]\n\tfsmonitor = touch /tmp/pwned\n' }, 'SNAPSHOT_INVALID'],
      [{ 'rebase-merge/../config': 'x\n' }, 'SNAPSHOT_INVALID'],
      [{ ORIG_HEAD: 'ref: refs/heads/main\n' }, 'SNAPSHOT_INVALID'],
      [{ 'rebase-merge/head-name': 'refs/heads/../../config\n' }, 'SNAPSHOT_INVALID'],
      [{ 'sequencer/opts': '[options]\n\tstrategy = ../../x\n\tevil = 1\n' }, 'SNAPSHOT_INVALID'],
      [{ 'rebase-merge/git-rebase-todo': 'exec touch pwned\n' }, 'OPERATION_RUNS_COMMANDS'],
    ];
    let tried = 0;
    for (const [extra, code] of cases) {
      let forged: string;
      try {
        forged = forge(r, snap, extra);
      } catch {
        continue; // git mktree itself refuses the name (e.g. "..")
      }
      tried++;
      const target = sb.path(`forged-${Object.keys(extra)[0].replace(/\W/g, '_')}`);
      const res = xet(sb, r.dir, ['restore', forged, target, '--json']);
      expectError(res, code);
      assert.equal(fs.existsSync(target), false, `nothing written for ${JSON.stringify(extra)}`);
      assert.deepEqual(
        fs.readdirSync(sb.root).filter((f) => f.includes('xet-restore')),
        [],
        'no temporary directory left',
      );
    }
    assert.ok(tried >= cases.length - 1, `only ${tried} forged snapshots could be built`);
    assert.equal(fs.existsSync('/tmp/pwned'), false);
  }));

test('verify reports unmerged stages and operation files that differ, each as its own kind', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    r.git('checkout', '-q', 'topic');
    assert.notEqual(r.gitTry('rebase', '-m', 'main').status, 0);
    const { copy, snapshot } = roundTripOperation(r, ['rebase-merge']);
    fs.appendFileSync(copy.gitPath('rebase-merge/git-rebase-todo'), 'pick 0000000 extra\n');
    copy.write('f.txt', 'resolved\n');
    copy.git('add', 'f.txt');
    fs.writeFileSync(copy.gitPath('MERGE_MSG'), 'changed\n');
    const v = verify(sb, r.dir, snapshot, copy.dir);
    assert.equal(v.status, 1, describeRun(v));
    const kinds = parseJson(v).differences.map((d: { kind: string; path?: string }) => `${d.kind} ${d.path ?? ''}`);
    for (const k of [
      'unmerged-missing f.txt',
      'index-extra f.txt',
      'gitstate-modified rebase-merge/git-rebase-todo',
      'gitstate-modified MERGE_MSG',
    ]) {
      assert.ok(kinds.includes(k), `verify should report ${k}: ${kinds.join(', ')}`);
    }
    copy.git('rebase', '--abort');
    const after = parseJson(verify(sb, r.dir, snapshot, copy.dir)).differences;
    assert.ok(
      after.some((d: { kind: string }) => d.kind === 'operation'),
      `an aborted rebase is an operation difference: ${JSON.stringify(after)}`,
    );
  }));

test('rebase -i --rebase-merges stopped at an edit, restored --from a bare remote: labels and picks arrive', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src', ['-b', 'main']);
    r.commit('base', { 'f.txt': 'base\n' });
    r.git('checkout', '-q', '-b', 'side');
    r.commit('side 1', { 's.txt': 's\n' });
    r.git('checkout', '-q', 'main');
    r.git('merge', '-q', '--no-ff', 'side', '-m', 'merge side');
    r.commit('main 1', { 'm.txt': 'm\n' });
    r.git('checkout', '-q', '-b', 'topic', 'main~2');
    r.commit('topic 1', { 't.txt': 't\n' });
    r.git('checkout', '-q', 'main');
    gitRun(sb, r.dir, ['rebase', '-q', '-i', '--rebase-merges', 'topic'], {
      env: { GIT_SEQUENCE_EDITOR: "sed -i 's/^pick \\([0-9a-f]*\\) main 1/edit \\1 main 1/'" },
    });
    assert.ok(fs.existsSync(r.gitPath('rebase-merge/amend')), 'fixture: stopped at the edit');
    assert.match(r.git('for-each-ref', 'refs/rewritten/'), /refs\/rewritten\/onto/);
    const snapshot = capture(sb, r.dir);
    const bare = sb.path('remote.git');
    r.git('init', '-q', '--bare', bare);
    r.git('push', '-q', bare, `refs/xet/snapshots/${snapshot}`);
    const dir = sb.path('far-copy');
    restore(sb, sb.root, snapshot, dir, ['--from', bare]);
    const copy = new Repo(sb, dir);
    assertSame(r, copy, 'after restore --from');
    assert.equal(copy.git('for-each-ref', 'refs/rewritten/'), r.git('for-each-ref', 'refs/rewritten/'));
    continueBoth(r, copy, (x) => {
      x.write('m.txt', 'edited\n');
      x.git('commit', '-q', '-a', '--amend', '--no-edit');
      x.git('rebase', '--continue');
    });
    assert.equal(copy.git('for-each-ref', 'refs/rewritten/'), '', 'labels are cleaned up at the end');
  }));

test('fork of a snapshot holding an operation or a sparse checkout is refused (restore it instead)', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    assert.notEqual(r.gitTry('merge', 'topic').status, 0);
    const merging = capture(sb, r.dir);
    const target = sb.path('fork-of-merge');
    const err = expectError(
      xet(sb, r.dir, ['fork', merging, target, '--mode', 'copy', '--json']),
      'OPERATION_IN_PROGRESS',
    );
    assert.equal(err.details.operation, 'merge');
    assert.equal(fs.existsSync(target), false, 'nothing created');
    r.git('merge', '--abort');
    r.git('sparse-checkout', 'set', 'nothing-here');
    const sparse = capture(sb, r.dir);
    expectError(
      xet(sb, r.dir, ['fork', sparse, sb.path('fork-of-sparse'), '--mode', 'copy', '--json']),
      'SPARSE_CHECKOUT',
    );
    assert.equal(fs.existsSync(sb.path('fork-of-sparse')), false, 'nothing created');
  }));

/** A copy of snapshot `snap` whose manifest is changed by `edit`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function forgeManifest(r: Repo, snap: string, edit: (m: any) => void): string {
  const m = JSON.parse(r.git('cat-file', 'blob', `${snap}:manifest.json`));
  edit(m);
  const blob = r.gitInput(JSON.stringify(m), 'hash-object', '-w', '--stdin').trim();
  const top = r
    .git('ls-tree', snap)
    .trim()
    .split('\n')
    .map((l) => (l.endsWith('\tmanifest.json') ? `100644 blob ${blob}\tmanifest.json` : l));
  const tree = r.gitInput(`${top.join('\n')}\n`, 'mktree').trim();
  const parents = r
    .git('log', '-1', '--format=%P', snap)
    .trim()
    .split(' ')
    .flatMap((p) => ['-p', p]);
  const commit = r.gitInput('forged\n', 'commit-tree', tree, ...parents).trim();
  r.git('update-ref', `refs/xet/snapshots/${commit}`, commit);
  return commit;
}

test('a forged manifest with unsafe unmerged entries, operation refs or sparse settings is refused, nothing written', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb);
    assert.notEqual(r.gitTry('merge', 'topic').status, 0);
    const snap = capture(sb, r.dir);
    const blob = r.git('rev-parse', 'HEAD:g.txt').trim();
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const cases: [string, (m: any) => void, string][] = [
      [
        'unmerged path into .git',
        (m) => m.unmerged.push({ path: '.git/hooks/pre-commit', stage: 3, mode: '100755', oid: blob }),
        'PATH_ESCAPE',
      ],
      ['unmerged path ..', (m) => (m.unmerged[0].path = '../outside'), 'PATH_ESCAPE'],
      ['unmerged stage 0', (m) => (m.unmerged[0].stage = 0), 'SNAPSHOT_INVALID'],
      [
        'unmerged and staged',
        (m) => m.unmerged.push({ path: 'g.txt', stage: 2, mode: '100644', oid: blob }),
        'SNAPSHOT_INVALID',
      ],
      ['unmerged blob absent', (m) => (m.unmerged[0].oid = 'f'.repeat(40)), 'SNAPSHOT_INVALID'],
      [
        'operation ref outside refs/bisect',
        (m) => m.operation.refs.push({ name: 'refs/heads/main', oid: blob }),
        'SNAPSHOT_INVALID',
      ],
      [
        'sparse value',
        (m) =>
          (m.sparse = {
            sparseCheckout: 'true\n[core]',
            cone: null,
            sparseIndex: null,
            worktreeConfig: false,
            patterns: null,
          }),
        'SNAPSHOT_INVALID',
      ],
    ];
    for (const [what, edit, code] of cases) {
      const forged = forgeManifest(r, snap, edit);
      const target = sb.path(`forged-${what.replace(/\W/g, '_')}`);
      expectError(xet(sb, r.dir, ['restore', forged, target, '--json']), code);
      assert.equal(fs.existsSync(target), false, `nothing written for ${what}`);
    }
  }));

test('cherry-pick conflict in a sha256 repository: 64-hex ids in the state are checked and kept', () =>
  withSandbox((sb) => {
    const r = twoBranches(sb, 'src', ['--object-format=sha256']);
    assert.notEqual(r.gitTry('cherry-pick', 'topic~2').status, 0, 'fixture: the pick conflicts');
    const snapshot = capture256(r);
    assert.match(snapshot, /^[0-9a-f]{64}$/);
    const dir = sb.path('copy-256');
    restore(sb, r.dir, snapshot, dir);
    const copy = new Repo(sb, dir);
    assertSame(r, copy, 'after restore');
    continueBoth(r, copy, (x) => {
      resolve('f.txt', 'resolved\n')(x);
      x.git('cherry-pick', '--continue');
    });
  }));

/** capture in a sha256 repository (the support helper expects 40-hex ids). */
function capture256(r: Repo): string {
  const res = xet(r.sb, r.dir, ['capture', '--json']);
  assert.equal(res.status, 0, describeRun(res));
  return parseJson(res).snapshot as string;
}
