// Shared fixture builders.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Repo } from './git';
import { sha256, walkTree } from './state';

/**
 * Ignored content of several kinds: node_modules with .bin symlinks, build outputs, logs,
 * .git/info/exclude, nested .gitignore, rooted / ** / negated patterns, and tracked files that
 * match ignore patterns (force-added, with unstaged edits).
 */
export function buildIgnoredFixture(r: Repo): void {
  r.write('.gitignore', 'node_modules/\nbuild/\n*.log\n!keep.log\n/rooted.txt\n**/tmp-*\ndocs/**/*.gen\n');
  r.write('package.json', '{"name":"fixture"}\n');
  r.write('src/index.js', 'console.log(1);\n');
  r.write('src/sub/keep.js', 'module.exports = 2;\n');
  r.write('src/.gitignore', 'local.cfg\n');
  r.write('docs/readme.md', 'docs\n');
  r.write('build/tracked-in-ignored-dir.txt', 'tracked although build/ is ignored\n');
  r.write('vendor.log', 'tracked although *.log is ignored\n');
  r.git('add', '-A');
  r.git('add', '-f', 'build/tracked-in-ignored-dir.txt', 'vendor.log');
  r.git('commit', '-q', '-m', 'initial');
  r.write('build/tracked-in-ignored-dir.txt', 'tracked, edited\n');
  r.write('vendor.log', 'tracked log, edited\n');
  // node_modules with .bin relative symlinks to files
  r.write('node_modules/pkg/package.json', '{"name":"pkg","bin":{"pkg":"bin/cli.js"}}\n');
  r.write('node_modules/pkg/bin/cli.js', '#!/usr/bin/env node\nconsole.log("cli");\n', 0o755);
  r.write('node_modules/pkg/index.js', 'module.exports = {};\n');
  r.write('node_modules/@scope/lib/index.js', 'exports.x = 1;\n');
  r.symlink('../pkg/bin/cli.js', 'node_modules/.bin/pkg');
  r.symlink('../@scope/lib/index.js', 'node_modules/.bin/lib');
  // build outputs
  r.write('build/out/app.js', 'compiled();\n');
  r.write('build/out/app.js.map', '{"version":3}\n');
  r.write('build/tool', '#!/bin/sh\necho built\n', 0o755);
  // logs and other patterns
  r.write('debug.log', 'log line\n');
  r.write('src/sub/trace.log', 'trace\n');
  r.write('keep.log', 'negated: not ignored\n');
  r.write('rooted.txt', 'ignored only at the root\n');
  r.write('src/rooted.txt', 'not ignored (pattern is rooted)\n');
  r.write('a/b/tmp-scratch', 'ignored by **/tmp-*\n');
  r.write('docs/x/y/z.gen', 'ignored by docs/**/*.gen\n');
  r.write('docs/top.gen', 'ignored by docs/**/*.gen\n');
  r.write('src/local.cfg', 'ignored by src/.gitignore\n');
  r.write('local.cfg', 'not ignored at the root\n');
  // .git/info/exclude
  fs.appendFileSync(r.gitPath('info/exclude'), '\n# local\nlocal-only/\n*.local\n');
  r.write('local-only/notes.txt', 'private notes\n');
  r.write('settings.local', 'x=1\n');
  // a normal untracked file and an unstaged edit, for contrast
  r.write('untracked.txt', 'u\n');
  r.write('src/index.js', 'console.log(2);\n');
}

/** Ignored entries as git reports them ("dir/" for whole directories). */
export function ignoredEntries(r: Repo): string[] {
  return r
    .git('status', '--porcelain=v1', '-z', '--ignored=matching', '--untracked-files=all')
    .split('\0')
    .filter((e) => e.startsWith('!! '))
    .map((e) => e.slice(3));
}

/** A repository with many kinds of state at once (staged, unstaged, untracked, ignored, stash, tags, flags). */
export function buildRichFixture(r: Repo): void {
  r.write('.gitignore', 'ignored/\n*.tmp\n');
  r.commit('c1', { 'a.txt': 'a1\n', 'b.txt': 'b1\n', 'dir/c.txt': 'c1\n', 'sw.txt': 'sw\n' });
  r.git('tag', 'v1');
  r.commit('c2', { 'a.txt': 'a2\n', 'script.sh': '#!/bin/sh\n' });
  r.git('tag', '-a', 'v2', '-m', 'release 2');
  r.git('branch', 'side', 'HEAD~1');
  r.write('b.txt', 'stashed change\n');
  r.git('stash', 'push', '-q', '-m', 'one');
  r.write('a.txt', 'staged\n');
  r.git('add', 'a.txt');
  r.write('a.txt', 'staged then edited\n');
  r.write('new.txt', 'intent\n');
  r.git('add', '-N', 'new.txt');
  r.git('update-index', '--skip-worktree', 'sw.txt');
  r.write('sw.txt', 'changed behind skip-worktree\n');
  r.chmod('script.sh', 0o755);
  r.rm('dir/c.txt');
  r.write('untracked/deep/file.txt', 'u\n');
  r.write('ignored/x.bin', Buffer.from([0, 1, 2, 3]));
  r.write('scratch.tmp', 'tmp\n');
  r.mkdir('emptydir/inner');
  r.symlink('a.txt', 'link-to-a');
}

/** paths + type + exec bit + symlink target + sha256 of the working tree, as one string. */
export function treeFingerprint(dir: string): string {
  const t = walkTree(dir);
  const lines = [...t.entries]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([rel, e]) => `${JSON.stringify(rel)} ${e.type} ${e.exec ?? ''} ${e.target ?? ''} ${e.sha256 ?? ''}`);
  return [...lines, ...t.emptyDirs.map((d) => `empty ${JSON.stringify(d)}`)].join('\n');
}

export function fileSha(abs: string): string {
  return sha256(fs.readFileSync(abs));
}

/** Writes size bytes to abs in 1 MiB chunks without holding the file in memory. */
export function writeLargeFile(abs: string, size: number, seed = 7): void {
  fs.mkdirSync(path.dirname(abs), { recursive: true });
  const fd = fs.openSync(abs, 'w');
  try {
    const chunk = Buffer.alloc(1024 * 1024);
    let written = 0;
    let x = seed;
    while (written < size) {
      // cheap varying content so chunks differ
      for (let i = 0; i < chunk.length; i += 4) {
        x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        chunk.writeUInt32LE(x, i);
      }
      const n = Math.min(chunk.length, size - written);
      fs.writeSync(fd, chunk, 0, n);
      written += n;
    }
  } finally {
    fs.closeSync(fd);
  }
}
