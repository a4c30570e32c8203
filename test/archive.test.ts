// git xet archive: the archive, unpacked by the real tar, is the captured worktree (bytes, modes,
// symlinks, empty directories; every time the snapshot commit's); stdout and -o agree byte for byte;
// bad input is refused before any file appears; a forged snapshot is refused; memory stays bounded.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildRichFixture, fileSha, treeFingerprint, writeLargeFile } from './support/fixtures';
import { initRepo, run } from './support/git';
import { withSandbox, createSandbox } from './support/sandbox';
import { capture, describeRun, expectError, expectExit, parseJson, xet, XET_BIN } from './support/xet';

const LONG = `${'deep-directory-name/'.repeat(7)}a-file-name-longer-than-the-ustar-limit.txt`;

function fixture(sb: ReturnType<typeof createSandbox>) {
  const r = initRepo(sb, 'src');
  buildRichFixture(r);
  r.write(LONG, 'long path\n');
  r.write('naïve Ünïcode/файл.txt', 'unicode\n');
  r.write('with space/empty-file', '');
  r.symlink('with space', 'link-to-dir');
  r.symlink(`../${'x'.repeat(150)}`, 'long-link-target');
  r.write('bin/tool', '#!/bin/sh\necho tool\n', 0o755);
  return r;
}

function untar(sb: ReturnType<typeof createSandbox>, archive: string, into: string, flags = '-xf'): void {
  fs.mkdirSync(into, { recursive: true });
  const t = run(sb, into, 'tar', [flags, archive, '-C', into]);
  assert.equal(t.status, 0, `tar ${flags} failed: ${t.stderr.toString()}`);
}

/** mtime of every entry below dir (symlinks themselves), in seconds. */
function mtimes(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  const visit = (abs: string, rel: string) => {
    for (const name of fs.readdirSync(abs)) {
      const a = path.join(abs, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(a);
      out.set(r, Math.floor(st.mtimeMs / 1000));
      if (st.isDirectory()) visit(a, r);
    }
  };
  visit(dir, '');
  return out;
}

test('archive -o: tar -x of it is the captured worktree, every entry at the snapshot commit time', () =>
  withSandbox((sb) => {
    const r = fixture(sb);
    const snap = capture(sb, r.dir);
    const res = xet(sb, r.dir, ['archive', snap, '-o', sb.path('a.tar'), '--json']);
    expectExit(res, 0);
    const out = parseJson(res);
    assert.equal(out.snapshot, snap);
    assert.equal(out.format, 'tar');
    assert.equal(out.output, sb.path('a.tar'));
    assert.equal(out.symlinks, 3);
    // The worktree without .git: the source minus its git dir is what must come out.
    untar(sb, sb.path('a.tar'), sb.path('x'));
    assert.equal(treeFingerprint(sb.path('x')), treeFingerprint(r.dir));
    assert.equal(fs.readlinkSync(sb.path('x', 'long-link-target')), `../${'x'.repeat(150)}`);
    assert.equal(fs.statSync(sb.path('x', 'bin/tool')).mode & 0o777, 0o755);
    assert.equal(fs.statSync(sb.path('x', 'a.txt')).mode & 0o777, 0o644);
    assert.ok(fs.statSync(sb.path('x', 'emptydir/inner')).isDirectory());
    const commitTime = Number(r.git('log', '-1', '--format=%ct', snap).trim());
    assert.equal(out.mtime, new Date(commitTime * 1000).toISOString());
    const times = mtimes(sb.path('x'));
    assert.ok(times.size > 10);
    for (const [p, t] of times) assert.equal(t, commitTime, `mtime of ${p}`);
    assert.deepEqual(
      fs.readdirSync(sb.root).filter((n) => n.includes('xet-archive')),
      [],
      'no temporary file is left',
    );
  }));

test('archive to stdout with --prefix equals -o, byte for byte; tar.gz from the -o name', () =>
  withSandbox((sb) => {
    const r = fixture(sb);
    const snap = capture(sb, r.dir);
    const piped = run(sb, r.dir, process.execPath, [XET_BIN, 'archive', snap, '--prefix', 'pkg/v1/']);
    assert.equal(piped.status, 0, piped.stderr.toString());
    expectExit(xet(sb, r.dir, ['archive', snap, '--prefix', 'pkg/v1', '-o', sb.path('p.tar')]), 0);
    assert.ok(piped.stdout.equals(fs.readFileSync(sb.path('p.tar'))), 'stdout and -o differ');
    untar(sb, sb.path('p.tar'), sb.path('x'));
    assert.deepEqual(fs.readdirSync(sb.path('x')), ['pkg']);
    assert.equal(treeFingerprint(sb.path('x', 'pkg', 'v1')), treeFingerprint(r.dir));

    const gz = xet(sb, r.dir, ['archive', snap, '-o', sb.path('a.tgz'), '--json']);
    expectExit(gz, 0);
    assert.equal(parseJson(gz).format, 'tar.gz');
    untar(sb, sb.path('a.tgz'), sb.path('z'), '-xzf');
    assert.equal(treeFingerprint(sb.path('z')), treeFingerprint(r.dir));
  }));

test('archive refuses bad arguments before writing anything', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('one', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const o = sb.path('out.tar');
    for (const prefix of ['../up', '/abs', 'a/../b', 'x/.git/y']) {
      expectError(xet(sb, r.dir, ['archive', snap, '--prefix', prefix, '-o', o, '--json']), 'USAGE', 2);
    }
    expectError(xet(sb, r.dir, ['archive', snap, '--format', 'zip', '-o', o, '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['archive', snap, '--json']), 'USAGE', 2);
    expectError(xet(sb, r.dir, ['archive', 'f00d', '-o', o, '--json']), 'SNAPSHOT_NOT_FOUND');
    expectError(xet(sb, r.dir, ['archive', snap, '-o', sb.path('no-such-dir', 'a.tar'), '--json']), 'TARGET_UNUSABLE');
    fs.mkdirSync(sb.path('a-dir'));
    expectError(xet(sb, r.dir, ['archive', snap, '-o', sb.path('a-dir'), '--json']), 'TARGET_UNUSABLE');
    assert.equal(fs.existsSync(o), false);
    assert.deepEqual(
      fs.readdirSync(sb.root).filter((n) => n.includes('xet-archive')),
      [],
    );
  }));

test('forged snapshots (a symlink with an 8 KB target, one with an empty target) are refused and leave no file', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('one', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const blob = r.git('rev-parse', `${snap}:files/a.txt`).trim();
    const top = r.git('ls-tree', snap).split('\n').filter(Boolean);
    // The same snapshot with its files tree replaced by one holding a bad "symlink" after a real file.
    const forge = (target: string): string => {
      const link = r.gitInput(target, 'hash-object', '-w', '--stdin').trim();
      const files = r.gitInput(`100644 blob ${blob}\ta.txt\n120000 blob ${link}\tlink\n`, 'mktree').trim();
      const lines = top.map((l) => (l.endsWith('\tfiles') ? `040000 tree ${files}\tfiles` : l));
      const tree = r.gitInput(`${lines.join('\n')}\n`, 'mktree').trim();
      return r.gitInput('forged\n', 'commit-tree', tree).trim();
    };
    for (const target of ['x'.repeat(8192), '']) {
      const res = xet(sb, r.dir, ['archive', forge(target), '-o', sb.path('f.tar'), '--json']);
      expectError(res, 'SNAPSHOT_INVALID');
      assert.equal(fs.existsSync(sb.path('f.tar')), false, describeRun(res));
      assert.deepEqual(
        fs.readdirSync(sb.root).filter((n) => n.includes('xet-archive')),
        [],
      );
    }
  }));

test('a gitlink in the files tree (an uninitialised submodule) becomes an empty directory', () =>
  withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    const head = r.commit('one', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const blob = r.git('rev-parse', `${snap}:files/a.txt`).trim();
    const files = r.gitInput(`100644 blob ${blob}\ta.txt\n160000 commit ${head}\tsub\n`, 'mktree').trim();
    const top = r.git('ls-tree', snap).split('\n').filter(Boolean);
    const lines = top.map((l) => (l.endsWith('\tfiles') ? `040000 tree ${files}\tfiles` : l));
    const tree = r.gitInput(`${lines.join('\n')}\n`, 'mktree').trim();
    const withLink = r.gitInput('with a gitlink\n', 'commit-tree', tree).trim();
    const res = xet(sb, r.dir, ['archive', withLink, '-o', sb.path('g.tar'), '--json']);
    expectExit(res, 0);
    assert.equal(parseJson(res).dirs, 1);
    untar(sb, sb.path('g.tar'), sb.path('x'));
    assert.deepEqual(fs.readdirSync(sb.path('x')).sort(), ['a.txt', 'sub']);
    assert.deepEqual(fs.readdirSync(sb.path('x', 'sub')), []);
  }));

test('archive streams: a 160 MiB file passes through a node process that stays far smaller', () => {
  // tmpfs: the root disk here is slow for a large file written three times.
  const sb = createSandbox('xet-archive-', '/dev/shm');
  try {
    {
      const r = initRepo(sb, 'src');
      r.commit('one', { 'small.txt': 's\n' });
      writeLargeFile(r.p('big.bin'), 160 * 1024 * 1024);
      const snap = capture(sb, r.dir, [], 300_000);
      // The CLI's own peak (getrusage of the node process alone, not its git children).
      const probe = sb.path('rss.js');
      fs.writeFileSync(
        probe,
        "process.on('exit', () => require('fs').writeFileSync(process.env.XET_RSS_FILE, String(process.resourceUsage().maxRSS)));\n",
      );
      const res = run(sb, r.dir, process.execPath, ['-r', probe, XET_BIN, 'archive', snap, '-o', sb.path('b.tar')], {
        env: { ...sb.env, XET_RSS_FILE: sb.path('rss.txt') },
        timeoutMs: 300_000,
      });
      assert.equal(res.status, 0, res.stderr.toString());
      const rssMiB = Number(fs.readFileSync(sb.path('rss.txt'), 'utf8')) / 1024;
      assert.ok(rssMiB < 150, `node peaked at ${rssMiB.toFixed(0)} MiB for a 160 MiB file`);
      untar(sb, sb.path('b.tar'), sb.path('x'));
      assert.equal(fileSha(sb.path('x', 'big.bin')), fileSha(r.p('big.bin')));
    }
  } finally {
    sb.cleanup();
  }
});
