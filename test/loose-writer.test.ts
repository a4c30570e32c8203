// Loose objects written in-process (src/git/loose-writer.ts: a capture's manifest blob and top tree)
// against git's own hash-object and mktree: the same ids, objects git reads back and fsck accepts,
// in SHA-1 and SHA-256 repositories, with names whose order differs between trees and blobs.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { identDate, keptAsUtf8, plainIdent } from '../src/git/ident';
import { native } from '../src/native';
import {
  commitContent,
  looseCompressionLevel,
  looseWriteLevel,
  treeContent,
  writeLooseObject,
} from '../src/git/loose-writer';
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

test('a commit dated now has the time zone git takes from TZ', (t) => {
  const module = JSON.stringify(require.resolve('../src/git/ident'));
  if (!native?.gitTzOffset) return t.skip('the native module is not loaded: git writes every commit dated now');
  const zones = [
    'UTC',
    'Asia/Kolkata',
    'America/New_York',
    'Australia/Lord_Howe',
    'Pacific/Chatham',
    // What node's own time zone reads otherwise than the C library (review 25): POSIX rules, and
    // right/ zones, whose leap seconds git counts into the offset.
    'CET-1CEST,M3.5.0,M10.5.0/3',
    'IST-5:30',
    '<+0545>-5:45',
    'UTC-05:30:30',
    ...(fs.existsSync('/usr/share/zoneinfo/right/Europe/Berlin') ? ['right/Europe/Berlin'] : []),
  ];
  for (const tz of zones) {
    const ours = execFileSync(
      process.execPath,
      ['-e', `process.stdout.write(String(require(${module}).identDate(undefined, Date.now())))`],
      { env: { ...process.env, TZ: tz }, encoding: 'utf8' },
    );
    // git's own "now" in the same zone, a moment later: the offset is the one to match.
    const viaGit = execFileSync('git', ['var', 'GIT_COMMITTER_IDENT'], {
      env: { ...process.env, TZ: tz, GIT_COMMITTER_NAME: 'a', GIT_COMMITTER_EMAIL: 'b', GIT_COMMITTER_DATE: '' },
      encoding: 'utf8',
    }).trim();
    assert.match(ours, /^\d+ [+-]\d{4}$/, tz);
    assert.equal(ours.split(' ')[1], viaGit.split(' ').at(-1), tz);
    assert.ok(Math.abs(Number(ours.split(' ')[0]) - Number(viaGit.split(' ').at(-2))) <= 2, tz);
  }
  // A TZ naming a file by path is left to git (this process may have read it before it changed).
  const byPath = execFileSync(
    process.execPath,
    ['-e', `process.stdout.write(String(require(${module}).identDate(undefined, Date.now())))`],
    { env: { ...process.env, TZ: ':/etc/localtime' }, encoding: 'utf8' },
  );
  assert.equal(byPath, 'null');
});

test('a long-running process whose zone file changed, or a year git cannot count, lets git write "now"', (t) => {
  if (!native?.gitTzOffset) return t.skip('the native module is not loaded: git writes every commit dated now');
  const module = JSON.stringify(require.resolve('../src/git/ident'));
  const zones = '/usr/share/zoneinfo';
  if (!fs.existsSync(path.join(zones, 'Asia/Kolkata')) || !fs.existsSync(path.join(zones, 'Europe/Berlin')))
    return t.skip('no system zone data to copy');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-tz-'));
  try {
    fs.mkdirSync(path.join(dir, 'Test'));
    fs.copyFileSync(path.join(zones, 'Asia/Kolkata'), path.join(dir, 'Test/Zone'));
    // One process: the zone file replaced between two commits (a tzdata upgrade under a daemon).
    const script = [
      `const { identDate } = require(${module});`,
      `const fs = require('fs');`,
      `const first = identDate(undefined, 1751328000000);`,
      `fs.copyFileSync(${JSON.stringify(path.join(zones, 'Europe/Berlin'))}, ${JSON.stringify(path.join(dir, 'Test/Zone.new'))});`,
      `fs.renameSync(${JSON.stringify(path.join(dir, 'Test/Zone.new'))}, ${JSON.stringify(path.join(dir, 'Test/Zone'))});`,
      `const second = identDate(undefined, 1751328000000);`,
      `process.stdout.write(JSON.stringify([first, second]));`,
    ].join('\n');
    const out = execFileSync(process.execPath, ['-e', script], {
      env: { ...process.env, TZ: 'Test/Zone', TZDIR: dir },
      encoding: 'utf8',
    });
    assert.deepEqual(JSON.parse(out), ['1751328000 +0530', null]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // The last hours of 2099 where it is already 2100: git's day count fails there (it prints an
  // overflowed offset), so git writes the commit.
  const at = (tz: string) =>
    execFileSync(
      process.execPath,
      ['-e', `process.stdout.write(String(require(${module}).identDate(undefined, 4102444799000)))`],
      { env: { ...process.env, TZ: tz }, encoding: 'utf8' },
    );
  assert.equal(at('UTC'), '4102444799 +0000');
  assert.equal(at('Asia/Kolkata'), 'null');
});

test('git commit-tree ignores commit.gpgSign and rewrites noncharacters: what the in-process commit relies on', async () => {
  await withSandbox(async (sb) => {
    const repo = sb.path('sign');
    fs.mkdirSync(repo);
    git(repo, ['init', '-q']);
    const objects = path.join(repo, '.git', 'objects');
    const tree = git(repo, ['mktree'], '');
    const env = {
      ...process.env,
      GIT_AUTHOR_NAME: 'a',
      GIT_AUTHOR_EMAIL: 'b',
      GIT_COMMITTER_NAME: 'a',
      GIT_COMMITTER_EMAIL: 'b',
      GIT_AUTHOR_DATE: '@1700000000 +0000',
      GIT_COMMITTER_DATE: '@1700000000 +0000',
    };
    const ours = (message: string) =>
      writeLooseObject(
        objects,
        'sha1',
        'commit',
        commitContent({
          tree,
          parents: [],
          name: 'a',
          email: 'b',
          authored: '1700000000 +0000',
          committed: '1700000000 +0000',
          message,
        }),
      );
    const theirs = (message: string, ...config: string[]) =>
      execFileSync('git', [...config, 'commit-tree', tree], {
        cwd: repo,
        input: message,
        env,
        encoding: 'utf8',
      }).trim();
    // Signing on: commit-tree still writes the unsigned commit (it signs only with -S; no key here).
    assert.equal(theirs('m\n', '-c', 'commit.gpgsign=true', '-c', 'gpg.program=false'), ours('m\n'));
    // Noncharacters: git re-encodes them, so such a commit is left to git.
    for (const ch of ['\ufffe', '\uffff', '\ufdd0', '\u{1fffe}']) {
      assert.equal(keptAsUtf8(`x${ch}`), false, ch);
      assert.notEqual(
        spawnSync('git', ['commit-tree', tree], { cwd: repo, input: `x${ch}\n`, env, encoding: 'utf8' }).stdout.trim(),
        ours(`x${ch}\n`),
        ch,
      );
    }
    for (const s of ['plain', 'é 名前 \u{1f600}', '\ufffd', '\ufdcf\ufdf0']) assert.equal(keptAsUtf8(s), true, s);
  });
});

test("the level loose objects are deflated at is git's: core.looseCompression, else core.compression, else 1", () => {
  const level = (entries: Record<string, string>) => looseCompressionLevel({ get: (k: string) => entries[k] });
  assert.equal(level({}), 1);
  assert.equal(level({ 'core.compression': '9' }), 9);
  assert.equal(level({ 'core.compression': '9', 'core.loosecompression': '0' }), 0);
  assert.equal(level({ 'core.loosecompression': '-1' }), 6, "-1 is zlib's default");
  assert.equal(level({ 'core.compression': '10' }), null, 'git refuses it: git is left to say so');
  assert.equal(level({ 'core.compression': 'best' }), null);
  // Shared permissions are git's to set: git writes, at any level.
  assert.equal(looseWriteLevel({ get: (k: string) => ({ 'core.sharedrepository': 'group' })[k] }), null);
  assert.equal(looseWriteLevel({ get: () => undefined }), 1);
  // The zlib header says the level's class: 78 01 at 1, 78 da at 9.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-loose-level-'));
  try {
    for (const [lvl, flg] of [
      [1, 0x01],
      [9, 0xda],
    ] as const) {
      const oid = writeLooseObject(dir, 'sha1', 'blob', Buffer.from(`level ${lvl}\n`), lvl);
      const z = fs.readFileSync(path.join(dir, oid.slice(0, 2), oid.slice(2)));
      assert.deepEqual([z[0], z[1]], [0x78, flg], `level ${lvl}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
