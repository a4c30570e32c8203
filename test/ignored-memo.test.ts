// The daemon's memo of git's ignored listing (src/daemon/ignored-memo.ts) with a real tree watch
// (src/daemon/tree-watch.ts) and the real git: after every kind of change that moves the listing
// (names made, removed and renamed, ignore files edited in place — even back to their old size and
// mtime —, made and removed in subdirectories, info/exclude, the excludes file, a path staged, a
// directory's permissions) and after random content edits, the memo's answer is what git says at
// that moment; git is not asked again after changes that cannot move the listing.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { TreeWatch } from '../src/daemon/tree-watch';
import { ignoredListingMemo, IGNORED_LISTING_ARGS } from '../src/daemon/ignored-memo';
import { configMemo } from '../src/daemon/config-memo';
import { gitZ } from '../src/git/exec';
import { findRepo, repoOpts } from '../src/git/repo';
import { native, nativeMissing } from '../src/native';
import { resolvePolicy } from '../src/snapshot/policy';
import { walkWorktree } from '../src/snapshot/walk';
import { GitConfig } from '../src/git/config';
import { rng } from './support/rng';

const settle = () => new Promise((r) => setTimeout(r, 150));

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.email=a@b', '-c', 'user.name=a', ...args], { cwd, encoding: 'utf8' });
}

/** What a capture does in the daemon, with a real watch: the memo's listing (held to git's), then a
 * watched walk with it; `asked` counts the listings asked of git. */
async function watchedCaptures(t: { after(fn: () => void): void }, d: string) {
  const repo = await findRepo(d);
  const opts = repoOpts(repo);
  const readConfig = configMemo(repo);
  const watch = new TreeWatch(repo.worktree);
  t.after(() => watch.close());
  let asked = 0;
  const memo = ignoredListingMemo(repo, watch, (o) => {
    asked++;
    return gitZ(IGNORED_LISTING_ARGS, o);
  });
  const capture = async (
    policy: ReturnType<typeof resolvePolicy>,
    what: string,
    meanwhile?: () => void,
  ): Promise<string[]> => {
    const listing = await memo(await readConfig(), opts);
    assert.deepEqual(listing.sort(), (await gitZ(IGNORED_LISTING_ARGS, opts)).sort(), what);
    // A change after the listing, before the walk: the walk drains its events, the next capture
    // must still not take the listing from before it.
    meanwhile?.();
    const tracked = new Set(git(d, 'ls-files', '-z').split('\0').filter(Boolean));
    const inputs = { root: repo.worktree, tracked, ignored: new Set(listing), policy, gitDirs: [repo.gitDir] };
    const m = watch.begin(inputs);
    const r = walkWorktree({ ...inputs, memo: m ?? undefined });
    if (m) watch.end(m, m.next ?? null);
    return r.paths;
  };
  return { repo, capture, asked: () => asked };
}

test('the ignored listing memo answers as git does after every change that moves it, and asks git only then', async (t) => {
  if (!native) return t.diagnostic(`skipped: the native module is not loaded (${nativeMissing}): no watch`);
  if (process.platform !== 'linux') return t.diagnostic('skipped: inotify is Linux only');
  const d = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'xet-ignmemo-')));
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-ignmemo-home-'));
  t.after(() => {
    fs.rmSync(d, { recursive: true, force: true });
    fs.rmSync(home, { recursive: true, force: true });
  });
  git(d, 'init', '-q');
  fs.writeFileSync(path.join(d, '.gitignore'), 'build/\n*.log\n');
  for (const dir of ['src/a', 'src/b', 'build/x', 'docs']) fs.mkdirSync(path.join(d, dir), { recursive: true });
  for (const f of ['src/a/1.js', 'src/a/2.js', 'src/b/3.js', 'docs/r.md', 'build/x/o.bin', 'src/a/t.log'])
    fs.writeFileSync(path.join(d, f), `${f}\n`);
  git(d, 'add', '.');
  git(d, 'commit', '-qm', 'one');
  const h = await watchedCaptures(t, d);
  const repo = h.repo;
  const policy = resolvePolicy(new GitConfig([]), { ignored: 'all' });
  const capture = async (what: string, meanwhile?: () => void): Promise<void> => {
    assert.ok((await h.capture(policy, what, meanwhile)).length > 0);
  };
  // Captures until one is answered from the memo: a first walk reads ahead of its watches, a second
  // reads under them, and only a listing taken once the clock's margin has passed is kept (three
  // captures, a few more on a loaded machine).
  const steady = async (what: string): Promise<void> => {
    for (let n = 0; n < 8; n++) {
      await settle();
      const before = h.asked();
      await capture(`${what} (${n})`);
      if (h.asked() === before) return;
    }
    assert.fail(`${what}: git was asked at every capture`);
  };
  const changes: [string, () => void][] = [
    ['an ignored file made', () => fs.writeFileSync(path.join(d, 'src/b/new.log'), 'x')],
    ['an untracked directory made', () => fs.mkdirSync(path.join(d, 'src/c'))],
    ['a file in it', () => fs.writeFileSync(path.join(d, 'src/c/z.log'), 'x')],
    ['.gitignore edited in place', () => fs.appendFileSync(path.join(d, '.gitignore'), '*.md\n')],
    [
      '.gitignore rewritten at its size, its mtime put back',
      () => {
        const f = path.join(d, '.gitignore');
        const { atime, mtime } = fs.statSync(f);
        fs.writeFileSync(f, fs.readFileSync(f, 'utf8').replace('*.md', '*.js'));
        fs.utimesSync(f, atime, mtime);
      },
    ],
    ['a .gitignore made in a subdirectory', () => fs.writeFileSync(path.join(d, 'src/a/.gitignore'), '2.js\n!t.log\n')],
    ['that .gitignore edited', () => fs.appendFileSync(path.join(d, 'src/a/.gitignore'), '1.js\n')],
    ['info/exclude edited', () => fs.appendFileSync(path.join(repo.commonDir, 'info', 'exclude'), 'docs/\n')],
    ['an ignored path staged', () => git(d, 'add', '-f', 'src/b/new.log')],
    ['a staged path removed from the index', () => git(d, 'rm', '-q', '--cached', 'src/a/1.js')],
    [
      'an excludes file configured',
      () => {
        fs.writeFileSync(path.join(home, 'ignore'), '3.js\n');
        git(d, 'config', 'core.excludesFile', path.join(home, 'ignore'));
      },
    ],
    ['the excludes file edited', () => fs.appendFileSync(path.join(home, 'ignore'), 'r.md\n')],
    // Review 42: an excludes file through a symlink (a dotfiles manager's), edited at its target.
    [
      'the excludes file a symlink',
      () => {
        fs.writeFileSync(path.join(home, 'target'), '3.js\n');
        fs.symlinkSync(path.join(home, 'target'), path.join(home, 'link'));
        git(d, 'config', 'core.excludesFile', path.join(home, 'link'));
      },
    ],
    ['its target edited', () => fs.appendFileSync(path.join(home, 'target'), '*.md\n')],
    // Config alone (no ignore file changes): a name ignored only case-insensitively.
    ['a file named in another case', () => fs.writeFileSync(path.join(d, 'src/a/UP.LOG'), 'x')],
    ['core.ignoreCase set', () => git(d, 'config', 'core.ignoreCase', 'true')],
    ['a directory renamed', () => fs.renameSync(path.join(d, 'src/c'), path.join(d, 'src/c2'))],
    ['an ignored directory removed', () => fs.rmSync(path.join(d, 'build'), { recursive: true })],
    ['a directory made unreadable', () => fs.chmodSync(path.join(d, 'src/b'), 0)],
    ['and readable again', () => fs.chmodSync(path.join(d, 'src/b'), 0o755)],
  ];
  await steady('at the start');
  // A change between a capture's listing and its walk.
  await capture('a file made during a capture', () => fs.writeFileSync(path.join(d, 'src/a/during.log'), 'x'));
  {
    await settle();
    const before = h.asked();
    await capture('after the file made during a capture');
    assert.equal(h.asked(), before + 1, 'git asked after a change the last walk drained');
  }
  await steady('after the file made during a capture');
  for (const [what, change] of changes) {
    change();
    const before = h.asked();
    await capture(what); // at once: within the margin of the change, git is asked
    assert.equal(h.asked(), before + 1, `${what}: git asked`);
    await steady(what);
  }
  // An ignore file's time within the margin (here, ahead of the clock): nothing is kept while it is
  // (the margin covers an edit within one tick of the kernel's coarse clock after git read the file).
  {
    const ahead = new Date(Date.now() + 20_000);
    fs.utimesSync(path.join(d, '.gitignore'), ahead, ahead);
    const before = h.asked();
    for (let n = 0; n < 3; n++) {
      await settle();
      await capture(`an ignore file dated ahead (${n})`);
    }
    assert.equal(h.asked(), before + 3, 'a listing taken within the margin is never kept');
    const back = new Date(Date.now() - 5000);
    fs.utimesSync(path.join(d, '.gitignore'), back, back);
    await steady('the ignore file dated back');
  }
  // Content edits and touches of files that are not ignore files move nothing: answered from the memo.
  const rnd = rng(7);
  const files = ['src/a/2.js', 'src/b/3.js', 'docs/r.md', 'src/a/t.log'];
  for (let round = 0; round < 6; round++) {
    for (const f of files) if (rnd() < 0.6) fs.appendFileSync(path.join(d, f), `edit ${round}\n`);
    await settle();
    const before = h.asked();
    await capture(`edits, round ${round}`);
    assert.equal(h.asked(), before, `edits, round ${round}: answered from the memo`);
  }
});

// Review 42: a walk under `--ignored none` leaves unread the directories git lists whole as ignored,
// which git itself reads (to learn that all of an untracked directory is ignored): nothing then
// vouches for them, and the listing is asked of git at every capture. An excludes path through a
// file (ENOTDIR) is asked of git too, never an error.
test('the ignored listing memo keeps nothing after a walk that leaves ignored directories unread, nor for a path it cannot stamp', async (t) => {
  if (!native) return t.diagnostic(`skipped: the native module is not loaded (${nativeMissing}): no watch`);
  if (process.platform !== 'linux') return t.diagnostic('skipped: inotify is Linux only');
  const d = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'xet-ignmemo-none-')));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  git(d, 'init', '-q');
  fs.writeFileSync(path.join(d, '.gitignore'), '*.log\n');
  fs.writeFileSync(path.join(d, 'a.txt'), 'a\n');
  git(d, 'add', '.');
  git(d, 'commit', '-qm', 'one');
  fs.mkdirSync(path.join(d, 'cache'));
  fs.writeFileSync(path.join(d, 'cache', 'run.log'), '1\n');
  const h = await watchedCaptures(t, d);
  const capture = (policy: ReturnType<typeof resolvePolicy>) => h.capture(policy, '');
  const none = resolvePolicy(new GitConfig([]), { ignored: 'none' });
  for (let n = 0; n < 4; n++) {
    await settle();
    const before = h.asked();
    await capture(none);
    assert.equal(h.asked(), before + 1, `capture ${n} under --ignored none: git asked`);
  }
  fs.writeFileSync(path.join(d, 'cache', 'notes.txt'), 'keep\n');
  await settle();
  assert.ok((await capture(none)).includes('cache/notes.txt'), 'the new file in a directory git had listed whole');
  // An excludes path through a file: git ignores it; the memo asks git and keeps nothing.
  git(d, 'config', 'core.excludesFile', path.join(d, 'a.txt', 'ignore'));
  const all = resolvePolicy(new GitConfig([]), { ignored: 'all' });
  for (let n = 0; n < 4; n++) {
    await settle();
    const before = h.asked();
    await capture(all);
    assert.equal(h.asked(), before + 1, `capture ${n} with an excludes path through a file: git asked`);
  }
});
