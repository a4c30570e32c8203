// The main job on the embedded default: build a sample working tree in a temporary directory with
// every kind of state git xet captures, capture it, restore it elsewhere, and verify the copy with
// git xet and with git itself. Exits non-zero if anything differs.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const cli = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'git-xet');
const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'xet-demo-')));
const src = path.join(root, 'project');
const copy = path.join(root, 'restored');
const helperDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'remote-helper');
const env = {
  ...process.env,
  // git finds git-remote-xet on PATH (npm link puts it there too).
  PATH: `${helperDir}${path.delimiter}${process.env.PATH ?? ''}`,
  GIT_AUTHOR_NAME: 'Demo',
  GIT_AUTHOR_EMAIL: 'demo@example.com',
  GIT_COMMITTER_NAME: 'Demo',
  GIT_COMMITTER_EMAIL: 'demo@example.com',
};

const git = (cwd, ...args) => execFileSync('git', args, { cwd, env, encoding: 'utf8' });
const xet = (cwd, ...args) => execFileSync(process.execPath, [cli, ...args], { cwd, env, encoding: 'utf8' });
const write = (rel, content, mode) => {
  const f = path.join(src, rel);
  fs.mkdirSync(path.dirname(f), { recursive: true });
  fs.writeFileSync(f, content);
  if (mode) fs.chmodSync(f, mode);
};
const step = (text) => process.stdout.write(`\n== ${text}\n`);

try {
  step(`a sample project in ${src}`);
  fs.mkdirSync(src);
  git(src, 'init', '-q', '-b', 'main');
  write('README.md', '# demo\n');
  write('src/app.js', 'console.log("v1");\n');
  write('.gitignore', 'node_modules/\ndist/\n');
  git(src, 'add', '.');
  git(src, 'commit', '-qm', 'first release');
  git(src, 'tag', '-a', 'v1', '-m', 'v1');
  git(src, 'checkout', '-qb', 'feature');
  write('src/app.js', 'console.log("v2");\n');
  git(src, 'commit', '-qam', 'unpushed work');
  write('src/staged.js', 'export const staged = true;\n');
  git(src, 'add', 'src/staged.js');
  write('src/app.js', 'console.log("v3, not staged yet");\n');
  write('notes/todo.txt', 'untracked notes\n');
  write('node_modules/left-pad/index.js', 'module.exports = (s) => s;\n');
  write('node_modules/left-pad/cli.js', '#!/usr/bin/env node\n', 0o755);
  fs.mkdirSync(path.join(src, 'node_modules/.bin'), { recursive: true });
  fs.symlinkSync('../left-pad/cli.js', path.join(src, 'node_modules/.bin/left-pad'));
  write('dist/app.min.js', 'console.log("v3")\n');
  write('.env', 'API_KEY=not-for-snapshots\n');
  fs.mkdirSync(path.join(src, 'logs/empty'), { recursive: true });
  process.stdout.write(git(src, 'status', '--short', '--ignored'));

  step('git xet capture');
  const snap = JSON.parse(xet(src, 'capture', '-m', 'demo', '--json')).snapshot;
  process.stdout.write(xet(src, 'show', snap));

  step(`git xet restore ${snap.slice(0, 12)} ${copy}`);
  process.stdout.write(xet(src, 'restore', snap, copy));

  step('git xet verify');
  process.stdout.write(xet(src, 'verify', snap, copy));

  step('git itself agrees');
  const views = [
    ['status', '--porcelain=v2', '--untracked-files=all', '--ignored=matching'],
    ['diff', '--binary'],
    ['diff', '--cached', '--binary'],
    ['ls-files', '-s', '-v', '-t'],
    ['for-each-ref'],
  ];
  let same = true;
  for (const args of views) {
    const a = git(src, ...args)
      .split('\n')
      .filter((l) => !l.includes('.env'))
      .sort()
      .join('\n');
    const b = git(copy, ...args)
      .split('\n')
      .sort()
      .join('\n');
    const ok = a === b;
    same &&= ok;
    process.stdout.write(`${ok ? 'same' : 'DIFFERENT'}: git ${args.join(' ')}\n`);
  }
  process.stdout.write(`.env left behind as a secret: ${!fs.existsSync(path.join(copy, '.env'))}\n`);
  if (!same) process.exitCode = 1;
  step(same ? 'the restored copy is exactly the captured working tree' : 'MISMATCH');

  // The same snapshot handed to another agent through the embedded default store, a directory.
  const store = path.join(root, 'store');
  const bob = path.join(root, 'bob');
  const accepted = path.join(root, 'bob-copy');
  step(`a handoff from alice to bob through the xet store ${store}`);
  git(src, 'remote', 'add', 'team', `xet::${store}`);
  const id = JSON.parse(
    xet(src, 'handoff', 'create', snap, '--from', 'alice', '--to', 'bob', '--title', 'v3 in progress', '--json'),
  ).id;
  process.stdout.write(`handoff ${id}\n`);
  process.stdout.write(xet(src, 'push', 'team'));
  fs.mkdirSync(bob);
  git(bob, 'init', '-q');
  git(bob, 'remote', 'add', 'team', `xet::${store}`);
  process.stdout.write(xet(bob, 'fetch', 'team'));
  process.stdout.write(xet(bob, 'handoff', 'list', '--to', 'bob'));
  process.stdout.write(xet(bob, 'handoff', 'accept', id, accepted));
  process.stdout.write(xet(bob, 'verify', snap, accepted));
  process.stdout.write(xet(src, 'fsck', '--store', store));
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
