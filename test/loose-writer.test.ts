// Loose objects written in-process (src/git/loose-writer.ts: a capture's manifest blob and top tree)
// against git's own hash-object and mktree: the same ids, objects git reads back and fsck accepts,
// in SHA-1 and SHA-256 repositories, with names whose order differs between trees and blobs.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { identDate, plainIdent } from '../src/git/ident';
import { commitContent, treeContent, writeLooseObject } from '../src/git/loose-writer';
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
// tree, parents, identity, dates and message, in both object formats; the dates as git reads them
// (raw forms, odd offsets, now in the zone TZ names); the identities git would rewrite are the
// ones left to git.
test('in-process commits are the commits git commit-tree writes', async () => {
  await withSandbox(async (sb) => {
    for (const format of ['sha1', 'sha256'] as const) {
      const repo = sb.path(`commit-${format}`);
      fs.mkdirSync(repo);
      git(repo, ['init', '-q', `--object-format=${format}`]);
      const objects = path.join(repo, '.git', 'objects');
      const tree = git(repo, ['mktree'], '');
      let parents: string[] = [];
      const cases = [
        {
          name: 'git xet',
          email: 'git-xet@localhost',
          authored: '@1733500000 +0000',
          committed: '@1733500000 +0000',
          message: 'xet: snapshot\n',
        },
        {
          name: 'Zoë d’Été 名前',
          email: 'z@example.org',
          authored: '@1733500000 +0530',
          committed: '@1733500001 -0800',
          message: 'xet: é\n\nSchema: x\n',
        },
        { name: 'A', email: 'a', authored: '@0 -1200', committed: '@0099 +0090', message: 'no newline at the end' },
        {
          name: 'Dr. Who',
          email: 'who@tardis',
          authored: '@4102444800 +1400',
          committed: '@4102444800 -0000',
          message: '\n\nblank first\n',
        },
      ];
      for (const c of cases) {
        assert.ok(plainIdent(c.name) && plainIdent(c.email), c.name);
        const authored = identDate(c.authored, 0);
        const committed = identDate(c.committed, 0);
        assert.ok(authored && committed, JSON.stringify(c));
        const ours = writeLooseObject(
          objects,
          format,
          'commit',
          commitContent({ tree, parents, name: c.name, email: c.email, authored, committed, message: c.message }),
        );
        const theirs = execFileSync('git', ['commit-tree', tree, ...parents.flatMap((p) => ['-p', p])], {
          cwd: repo,
          input: c.message,
          env: {
            ...process.env,
            GIT_AUTHOR_NAME: c.name,
            GIT_AUTHOR_EMAIL: c.email,
            GIT_COMMITTER_NAME: c.name,
            GIT_COMMITTER_EMAIL: c.email,
            GIT_AUTHOR_DATE: c.authored,
            GIT_COMMITTER_DATE: c.committed,
          },
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
    undefined,
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
    'a\0b',
  ]) {
    assert.equal(plainIdent(s), false, JSON.stringify(s));
  }
  for (const s of ['a', 'A. B', 'a.b@c', 'é', 'x y z', '名前', 'tab\tinside']) assert.equal(plainIdent(s), true, s);
  // Dates only git parses.
  for (const d of [
    '2024-01-01',
    '1700000000',
    '@1700000000',
    '1700000000 +0000',
    '@1700000000 +000',
    '1700000000 0000',
    'x1 +0000',
    '1 +0000\n',
  ]) {
    assert.equal(identDate(d, 0), null, d);
  }
});

test('a commit dated now has the time zone git takes from TZ', () => {
  const when = 1751328000; // 2025-07-01: summer time where there is one
  const module = JSON.stringify(require.resolve('../src/git/ident'));
  for (const tz of [
    'UTC',
    'Asia/Kolkata',
    'America/New_York',
    'Australia/Lord_Howe',
    'Pacific/Chatham',
    'Europe/Berlin',
  ]) {
    for (const unset of [undefined, '']) {
      const ours = execFileSync(
        process.execPath,
        ['-e', `process.stdout.write(require(${module}).identDate(${JSON.stringify(unset)}, ${when * 1000 + 999}))`],
        { env: { ...process.env, TZ: tz }, encoding: 'utf8' },
      );
      // git's own reading of the same instant in the same zone (a bare number: the zone is local).
      const viaGit = execFileSync('git', ['var', 'GIT_COMMITTER_IDENT'], {
        env: {
          ...process.env,
          TZ: tz,
          GIT_COMMITTER_NAME: 'a',
          GIT_COMMITTER_EMAIL: 'b',
          GIT_COMMITTER_DATE: `${when}`,
        },
        encoding: 'utf8',
      }).trim();
      assert.equal(`a <b> ${ours}`, viaGit, tz);
    }
  }
});
