// Loose objects written in-process (src/git/loose-writer.ts: a capture's manifest blob and top tree)
// against git's own hash-object and mktree: the same ids, objects git reads back and fsck accepts,
// in SHA-1 and SHA-256 repositories, with names whose order differs between trees and blobs.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { commitContent, plainIdentPart, treeContent, writeLooseObject } from '../src/git/loose-writer';
import type { TreeEntryInput } from '../src/git/plumbing';
import { withSandbox } from './support/sandbox';

function git(cwd: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', args, { cwd, input, encoding: 'utf8' }).trim();
}

test('in-process loose objects are the objects git hash-object and mktree write', async () => {
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const repo = sb.path(`repo-${format}`);
      fs.mkdirSync(repo);
      git(repo, ['init', '-q', `--object-format=${format}`]);
      const objects = path.join(repo, '.git', 'objects');
      const data = Buffer.from(`{"schema":"x"}\n\0binary\xff`, 'latin1');
      const blob = writeLooseObject(objects, format, 'blob', data);
      assert.equal(blob, git(repo, ['hash-object', '--stdin'], data));
      assert.equal(git(repo, ['cat-file', '-t', blob]), 'blob');
      // Written twice: the same id, the object left as it was.
      const file = path.join(objects, blob.slice(0, 2), blob.slice(2));
      const before = fs.statSync(file).ino;
      assert.equal(writeLooseObject(objects, format, 'blob', data), blob);
      assert.equal(fs.statSync(file).ino, before);
      const empty = git(repo, ['mktree'], '');
      // Names where git's order (a tree as if it ended in '/') differs from plain byte order.
      const entries: TreeEntryInput[] = [
        { mode: '040000', type: 'tree', oid: empty, name: 'a' },
        { mode: '100644', type: 'blob', oid: blob, name: 'a.b' },
        { mode: '100755', type: 'blob', oid: blob, name: 'a-' },
        { mode: '120000', type: 'blob', oid: blob, name: 'a0' },
        { mode: '040000', type: 'tree', oid: empty, name: 'files' },
        { mode: '100644', type: 'blob', oid: blob, name: 'filemeta' },
        { mode: '100644', type: 'blob', oid: blob, name: 'manifest.json' },
        { mode: '100644', type: 'blob', oid: blob, name: 'é' },
      ];
      const tree = writeLooseObject(objects, format, 'tree', treeContent(entries, format));
      const viaGit = git(
        repo,
        ['mktree', '-z'],
        entries.map((e) => `${e.mode} ${e.type} ${e.oid}\t${e.name}\0`).join(''),
      );
      assert.equal(tree, viaGit);
      git(repo, ['fsck', '--strict', '--no-dangling']);
      for (const bad of [
        { mode: '100600', type: 'blob', oid: blob, name: 'x' },
        { mode: '100644', type: 'tree', oid: blob, name: 'x' },
        { mode: '100644', type: 'blob', oid: blob.slice(1), name: 'x' },
        { mode: '100644', type: 'blob', oid: blob, name: 'a/b' },
        { mode: '100644', type: 'blob', oid: blob, name: '..' },
        { mode: '100644', type: 'blob', oid: blob, name: '' },
      ] as TreeEntryInput[]) {
        assert.throws(() => treeContent([bad], format), /tree entry/, JSON.stringify(bad));
      }
      assert.throws(() => treeContent([entries[1], entries[1]], format), /twice/);
    }
  });
});

// The snapshot's commit (capture.ts commitsAsGit): the bytes `git commit-tree` writes for the same
// tree, parents, identity, time and message, in both object formats; the time zone as git reads it
// from TZ; and the identities git would rewrite are the ones left to git.
test('in-process commits are the commits git commit-tree writes', async () => {
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const repo = sb.path(`commit-${format}`);
      fs.mkdirSync(repo);
      git(repo, ['init', '-q', `--object-format=${format}`]);
      const objects = path.join(repo, '.git', 'objects');
      const tree = git(repo, ['mktree'], '');
      const env = (name: string, email: string, when: string) => ({
        ...process.env,
        GIT_AUTHOR_NAME: name,
        GIT_AUTHOR_EMAIL: email,
        GIT_COMMITTER_NAME: name,
        GIT_COMMITTER_EMAIL: email,
        GIT_AUTHOR_DATE: `@${when}`,
        GIT_COMMITTER_DATE: `@${when}`,
      });
      let parents: string[] = [];
      const cases = [
        { name: 'git xet', email: 'git-xet@localhost', when: '1733500000 +0000', message: 'xet: snapshot\n' },
        { name: 'Zoë d’Été 名前', email: 'z@example.org', when: '1733500000 +0530', message: 'xet: é\n\nSchema: x\n' },
        { name: 'A', email: 'a', when: '0 -1200', message: 'no newline at the end' },
        { name: 'Dr. Who', email: 'who@tardis', when: '4102444800 +1400', message: '\n\nblank first\n' },
      ];
      for (const c of cases) {
        assert.ok(plainIdentPart(c.name) && plainIdentPart(c.email), c.name);
        const ours = writeLooseObject(objects, format, 'commit', commitContent({ tree, parents, ...c }));
        const theirs = execFileSync('git', ['commit-tree', tree, ...parents.flatMap((p) => ['-p', p])], {
          cwd: repo,
          input: c.message,
          env: env(c.name, c.email, c.when),
          encoding: 'utf8',
        }).trim();
        assert.equal(ours, theirs, JSON.stringify(c));
        parents = [...parents, ours].slice(-3); // then one, two and three parents
      }
      git(repo, ['fsck', '--strict', '--no-dangling']);
    }
  });
  // What git strips or drops is never written here (git then writes the commit itself).
  for (const s of [
    '',
    ' a',
    'a ',
    '.a',
    'a.',
    'a,',
    ';a',
    '"a"',
    "a'",
    'a\\',
    'a<b',
    'a>b',
    'a\nb',
    'a\tb',
    'a\x7fb',
    '\ud800',
  ]) {
    assert.equal(plainIdentPart(s), false, JSON.stringify(s));
  }
  for (const s of ['a', 'A. B', 'a.b@c', 'é', 'x y z', '名前']) assert.equal(plainIdentPart(s), true, s);
});

test('the commit time zone is the one git takes from TZ', () => {
  const when = 1751328000; // 2025-07-01: summer time where there is one
  for (const tz of [
    'UTC',
    'Asia/Kolkata',
    'America/New_York',
    'Australia/Lord_Howe',
    'Pacific/Chatham',
    'Europe/Berlin',
  ]) {
    const ours = execFileSync(
      process.execPath,
      [
        '-e',
        `process.stdout.write(require(${JSON.stringify(require.resolve('../src/git/loose-writer'))}).gitTimestamp(${when * 1000 + 999}))`,
      ],
      { env: { ...process.env, TZ: tz }, encoding: 'utf8' },
    );
    // git's own reading of the same instant in the same zone (a bare number: the zone is local).
    const viaGit = execFileSync('git', ['var', 'GIT_COMMITTER_IDENT'], {
      env: { ...process.env, TZ: tz, GIT_COMMITTER_NAME: 'a', GIT_COMMITTER_EMAIL: 'b', GIT_COMMITTER_DATE: `${when}` },
      encoding: 'utf8',
    }).trim();
    assert.equal(`a <b> ${ours}`, viaGit, tz);
  }
});
