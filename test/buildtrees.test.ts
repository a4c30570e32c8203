// Real build trees: modification times and hard links survive capture -> restore and forks, so a
// build tool finds nothing to do in the copy, git trusts every index entry without reading a file,
// and hard links stay links (same inode, same disk use). Runs real make, cc, strace and du.
import assert from 'node:assert/strict';
import { native } from '../src/native';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git, initRepo, Repo } from './support/git';
import { mountXfs, withMountSandbox, xfsUnavailable } from './support/mounts';
import type { Sandbox } from './support/sandbox';
import { capture, expectExit, parseJson, restore, showManifest, verify, xet, XET_BIN } from './support/xet';
import { parseIndex } from '../src/git/index-file';
import { refreshIndexStat } from '../src/snapshot/filemeta';

const has = (cmd: string) => spawnSync(cmd, ['--version'], { encoding: 'utf8' }).status === 0;
const noMake = has('make') && has('cc') ? false : 'make and cc are needed';
const noStrace = has('strace') ? false : 'strace is needed';
const isRoot = process.getuid?.() === 0;

function run(sb: Sandbox, cwd: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  return spawnSync(cmd, args, { cwd, env: { ...sb.env, ...env }, encoding: 'utf8' });
}

function fork(sb: Sandbox, cwd: string, snapshot: string, dir: string, mode: string) {
  const r = xet(sb, cwd, ['fork', snapshot, dir, '--mode', mode, '--json']);
  expectExit(r, 0);
  return parseJson(r) as { mode: string };
}

/** A small C project: several sources, a header generated from VERSION, objects, a linked binary. */
function buildMakeProject(sb: Sandbox): Repo {
  const r = initRepo(sb, 'src');
  r.write(
    'Makefile',
    [
      'OBJS = build/main.o build/util.o build/calc.o',
      'app: $(OBJS)',
      '\tcc -o $@ $(OBJS)',
      'build/%.o: src/%.c src/util.h build/version.h | build',
      '\tcc -Ibuild -Isrc -c -o $@ $<',
      'build/version.h: VERSION | build',
      `\tprintf '#define VERSION "%s"\\n' "$$(cat VERSION)" > $@`,
      'build:',
      '\tmkdir -p build',
      '',
    ].join('\n'),
  );
  r.write('VERSION', '1.0\n');
  r.write('.gitignore', 'build/\napp\n');
  r.write('src/util.h', 'int twice(int);\nint add(int, int);\n');
  r.write('src/util.c', '#include "util.h"\nint twice(int x) { return 2 * x; }\n');
  r.write('src/calc.c', '#include "util.h"\nint add(int a, int b) { return a + b; }\n');
  r.write(
    'src/main.c',
    '#include <stdio.h>\n#include "util.h"\n#include "version.h"\n' +
      'int main(void) { printf("%s %d\\n", VERSION, add(twice(2), 1)); return 0; }\n',
  );
  r.commit('sources');
  assert.equal(run(sb, r.dir, 'make', ['-s']).status, 0);
  // An unstaged edit, built too: the tree is up to date with work nobody committed.
  r.write('src/calc.c', '#include "util.h"\nint add(int a, int b) { return b + a; }\n');
  r.write('NOTES', 'untracked\n');
  assert.equal(run(sb, r.dir, 'make', ['-s']).status, 0);
  assert.equal(run(sb, r.dir, 'make', ['-q']).status, 0, 'the source is up to date');
  return r;
}

/** Every index entry's stat data against lstat (git truncates each field to 32 bits), except for
 * `edits`: entries whose staged blob is not the file's content carry none (git must read those). */
function statMismatches(
  sb: Sandbox,
  dir: string,
  env: NodeJS.ProcessEnv = {},
  skipDev = false,
  edits: string[] = [],
): string[] {
  const out = run(sb, dir, 'git', ['-c', 'core.quotePath=false', 'ls-files', '--debug'], env).stdout;
  const bad: string[] = [];
  const lines = out.split('\n');
  let n = 0;
  for (let i = 0; i + 5 < lines.length; i += 6) {
    const p = lines[i];
    const rec = lines.slice(i + 1, i + 6).join(' ');
    const m =
      /ctime: (\d+):(\d+)\s+mtime: (\d+):(\d+)\s+dev: (\d+)\s+ino: (\d+)\s+uid: (\d+)\s+gid: (\d+)\s+size: (\d+)/.exec(
        rec,
      );
    assert.ok(m, `unexpected ls-files --debug output: ${rec}`);
    const st = fs.lstatSync(path.join(dir, p), { bigint: true });
    const u32 = (v: bigint) => String(BigInt.asUintN(32, v));
    const want = [
      u32(st.ctimeNs / 1_000_000_000n),
      String(st.ctimeNs % 1_000_000_000n),
      u32(st.mtimeNs / 1_000_000_000n),
      String(st.mtimeNs % 1_000_000_000n),
      skipDev ? m[5] : u32(st.dev),
      u32(st.ino),
      String(st.uid),
      String(st.gid),
      u32(st.size),
    ];
    if (!edits.includes(p) && want.join(' ') !== m.slice(1).join(' '))
      bad.push(`${p}: index ${m.slice(1).join(' ')} lstat ${want.join(' ')}`);
    n++;
  }
  assert.ok(n > 0, 'the index has entries');
  return bad;
}

/** Files of the worktree (not .git) that `git <args>` opens for reading, by strace. */
function filesOpenedBy(sb: Sandbox, dir: string, args: string[], cmd = 'git'): string[] {
  const log = path.join(sb.root, `strace-${process.hrtime.bigint()}.log`);
  const r = run(sb, dir, 'strace', ['-f', '-qq', '-e', 'trace=open,openat', '-o', log, cmd, ...args]);
  assert.equal(r.status, 0, r.stderr);
  const opened = new Set<string>();
  for (const line of fs.readFileSync(log, 'utf8').split('\n')) {
    const m = /open(?:at)?\((?:AT_FDCWD, )?"([^"]+)", ([^)]*)\) = \d+/.exec(line);
    if (!m || m[2].includes('O_DIRECTORY')) continue;
    const abs = path.resolve(dir, m[1]);
    const rel = path.relative(dir, abs);
    if (rel.startsWith('..') || rel === '.git' || rel.startsWith(`.git${path.sep}`)) continue;
    if (path.basename(rel) === '.gitignore') continue; // status reads ignore rules, not contents
    opened.add(rel);
  }
  fs.rmSync(log, { force: true });
  return [...opened].sort();
}

/** The repository copied (cp -a: times, modes, links within it) onto a reflink XFS mount. */
function copyToXfs(sb: Sandbox, src: Repo): Repo {
  const xfs = mountXfs(sb, 'xfs', 300);
  const r = run(sb, sb.root, 'cp', ['-a', src.dir, path.join(xfs, 'src')]);
  assert.equal(r.status, 0, r.stderr);
  return new Repo(sb, path.join(xfs, 'src'));
}

/** Restore sets times to the nanosecond through python3 (src/snapshot/set-times.ts), else to the
 * microsecond; .ci/run installs python3, so CI checks the nanoseconds. */
// Nanoseconds need the native module or python3 (src/snapshot/set-times.ts).
const EXACT_TIMES = native !== null || spawnSync('python3', ['-c', 'pass']).status === 0;
if (!EXACT_TIMES) {
  console.log('# no native module and no python3: restored times are compared to the microsecond only');
}
const TIME_UNIT = EXACT_TIMES ? 1n : 1000n;

function mtimesUs(dir: string, rels: string[]): Map<string, bigint> {
  return new Map(rels.map((p) => [p, fs.lstatSync(path.join(dir, p), { bigint: true }).mtimeNs / TIME_UNIT]));
}

const BUILT = ['app', 'build/main.o', 'build/util.o', 'build/calc.o', 'build/version.h', 'src/calc.c', 'Makefile'];

/** The copy is a tree make finds up to date, with the source's times, and git trusts its index. */
function assertFreshBuildTree(sb: Sandbox, src: Repo, copy: string, what: string, skipDev = false): void {
  assert.equal(run(sb, copy, 'make', ['-q']).status, 0, `${what}: make -q says up to date`);
  assert.deepEqual(
    mtimesUs(copy, BUILT),
    mtimesUs(src.dir, BUILT),
    `${what}: times to the ${EXACT_TIMES ? 'nanosecond' : 'microsecond'}`,
  );
  assert.equal(
    git(sb, copy, ['status', '--porcelain', '--untracked-files=all']),
    src.git('status', '--porcelain', '--untracked-files=all'),
    `${what}: git status`,
  );
  const edits = ['src/calc.c'];
  assert.equal(git(sb, copy, ['diff-files', '--name-only']), `${edits.join('\n')}\n`, `${what}: only the real edit`);
  assert.deepEqual(statMismatches(sb, copy, {}, skipDev, edits), [], `${what}: index stat data is lstat's`);
  // Git believes every other entry without reading a file.
  assert.deepEqual(filesOpenedBy(sb, copy, ['status', '--porcelain']), edits, `${what}: status reads only the edit`);
}

test(
  'a restored make tree is up to date, has the source times, and git reads none of its files',
  { skip: noMake || noStrace },
  async () => {
    await withMountSandbox(async (sb) => {
      const src = buildMakeProject(sb);
      const snap = capture(sb, src.dir);
      expectExit(verify(sb, src.dir, snap, src.dir), 0); // the source against its own snapshot
      // Past the racy window of the copy's stat cache: it reads again every file modified at or after
      // the second before the restore began (restored-cache.ts), so the build's outputs must be two
      // seconds older than the restore's start (1.1 s failed on a fast VM half the time: calc.o,
      // built in the second before the restore's, was read again, as it should be).
      await new Promise((done) => setTimeout(done, 2100));
      const copy = sb.path('copy');
      restore(sb, src.dir, snap, copy);
      assertFreshBuildTree(sb, src, copy, 'restore');
      expectExit(verify(sb, src.dir, snap, copy), 0);

      // Git believes every entry without reading one: status, diff-files and refresh open no file and
      // leave the index as it is.
      const index = path.join(copy, '.git', 'index');
      const before = fs.readFileSync(index);
      assert.deepEqual(filesOpenedBy(sb, copy, ['diff-files', '--name-only']), []);
      assert.deepEqual(filesOpenedBy(sb, copy, ['update-index', '-q', '--refresh']), ['src/calc.c']);
      assert.ok(fs.readFileSync(index).equals(before), 'no git command had to rewrite the index');
      // The capture cache of the copy (its files index) holds lstat's stat data too.
      const cacheDir = path.join(copy, '.git', 'xet', 'cache');
      const cache = path.join(cacheDir, fs.readdirSync(cacheDir).find((n) => n.endsWith('.index')) as string);
      assert.deepEqual(statMismatches(sb, copy, { GIT_INDEX_FILE: cache }), []);
      // …so the first capture in the copy reads no file at all (and finds it is the same tree).
      assert.deepEqual(filesOpenedBy(sb, copy, [XET_BIN, 'capture', '--json'], process.execPath), []);

      // make -q really looks: a newer header makes the copy out of date.
      fs.utimesSync(path.join(copy, 'src/util.h'), new Date(), new Date(Date.now() + 5000));
      assert.equal(run(sb, copy, 'make', ['-q']).status, 1);
      const r = verify(sb, src.dir, snap, copy);
      expectExit(r, 1);
      assert.deepEqual(
        parseJson(r).differences.map((d: { kind: string; path: string }) => `${d.kind} ${d.path}`),
        ['mtime src/util.h'],
        'a time is its own kind of difference and the only one',
      );

      // A handoff accepted elsewhere goes through the same restore.
      const h = xet(sb, src.dir, [
        'handoff',
        'create',
        snap,
        '--from',
        'agent-a',
        '--to',
        'agent-b',
        '--title',
        'build tree',
        '--json',
      ]);
      expectExit(h, 0);
      const accepted = sb.path('accepted');
      expectExit(xet(sb, src.dir, ['handoff', 'accept', parseJson(h).id, accepted, '--json']), 0);
      assertFreshBuildTree(sb, src, accepted, 'handoff accept');

      // Forks get the same times.
      const viaCopy = sb.path('fork-copy');
      fork(sb, src.dir, snap, viaCopy, 'copy');
      assertFreshBuildTree(sb, src, viaCopy, 'copy fork');
      if (isRoot) {
        const viaOverlay = sb.path('fork-overlay');
        fork(sb, src.dir, snap, viaOverlay, 'overlay');
        // Through overlayfs st_dev is the overlay's; git does not compare it.
        assertFreshBuildTree(sb, src, viaOverlay, 'overlay fork', true);
      }
      if (isRoot && !xfsUnavailable()) {
        // Clone forks need the repository on a reflink filesystem: the same tree, copied there.
        const onXfs = copyToXfs(sb, src);
        const snapXfs = capture(sb, onXfs.dir);
        fork(sb, onXfs.dir, snapXfs, sb.path('xfs', 'clone'), 'clone');
        assertFreshBuildTree(sb, onXfs, sb.path('xfs', 'clone'), 'clone fork');
      }
    });
  },
);

test('a re-capture records a time that changed without a content change', async () => {
  await withMountSandbox((sb) => {
    const src = initRepo(sb, 'src');
    src.commit('one', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    capture(sb, src.dir);
    // Same content, same second, other nanoseconds: git's own stat check cannot tell (it compares
    // seconds), the capture must.
    const st = fs.lstatSync(src.p('a.txt'), { bigint: true });
    const sec = st.mtimeNs / 1_000_000_000n;
    const target = `${sec}.${String((st.mtimeNs % 1_000_000_000n) / 1000n === 999_999n ? 1 : 999_999).padStart(6, '0')}`;
    const t = run(sb, src.dir, 'touch', ['-m', '-d', `@${target}`, 'a.txt']);
    assert.equal(t.status, 0, t.stderr);
    const snap = capture(sb, src.dir);
    const meta = git(sb, src.dir, ['cat-file', 'blob', `${snap}:filemeta`]).split('\n');
    const want = fs.lstatSync(src.p('a.txt'), { bigint: true }).mtimeNs;
    assert.equal(meta[2], `${want / 1_000_000_000n}.${String(want % 1_000_000_000n).padStart(9, '0')}`);
    expectExit(verify(sb, src.dir, snap, src.dir), 0);
  });
});

/** Paths whose inode is shared, grouped (each group sorted), from lstat. */
function linkGroups(dir: string, rels: string[]): string[][] {
  const by = new Map<string, string[]>();
  for (const p of rels) {
    const st = fs.lstatSync(path.join(dir, p), { bigint: true });
    const k = `${st.dev}:${st.ino}`;
    by.set(k, [...(by.get(k) ?? []), p]);
  }
  return [...by.values()].map((g) => g.sort()).sort((a, b) => (a[0] < b[0] ? -1 : 1));
}

function duBytes(sb: Sandbox, dir: string): number {
  const r = run(sb, dir, 'du', ['-s', '-B1', '--exclude=.git', '.']);
  assert.equal(r.status, 0, r.stderr);
  return Number(r.stdout.split('\t')[0]);
}

test(
  'hard links stay links: groups, a pnpm-like store inside the tree, links outside it',
  { skip: noStrace },
  async () => {
    await withMountSandbox((sb) => {
      const src = initRepo(sb, 'src');
      src.commit('base', { README: 'x\n', '.gitignore': 'node_modules/\nbin/\n' });
      const big = Buffer.alloc(200_000, 7);
      // One binary under ten names (git.git's build links its commands like this).
      src.write('bin/tool', big, 0o755);
      const names = ['bin/tool', ...Array.from({ length: 9 }, (_, i) => `bin/tool-${i}`)];
      for (const n of names.slice(1)) fs.linkSync(src.p('bin/tool'), src.p(n));
      // pnpm: a content store inside the tree, hard-linked into each package's directory.
      const pkgs: string[][] = [];
      for (let i = 0; i < 5; i++) {
        const store = `node_modules/.pnpm-store/v3/files/${i}${i}/content-${i}`;
        src.write(store, `module.exports = ${i};\n`);
        const used = `node_modules/.pnpm/pkg${i}@1.0.0/node_modules/pkg${i}/index.js`;
        fs.mkdirSync(path.dirname(src.p(used)), { recursive: true });
        fs.linkSync(src.p(store), src.p(used));
        pkgs.push([store, used].sort());
      }
      // And a file whose other link is outside the tree (a store in the user's home).
      const outside = sb.path('home-store-file');
      fs.writeFileSync(outside, 'shared with the outside\n');
      fs.mkdirSync(src.p('node_modules/ext'), { recursive: true });
      fs.linkSync(outside, src.p('node_modules/ext/index.js'));
      const all = [...names, ...pkgs.flat(), 'node_modules/ext/index.js', 'README', '.gitignore'];
      // Built a while ago: a file written in the very second of a capture is "racily clean" to git,
      // which then re-reads it (per path) whenever it rewrites the index; that is git's own safety.
      for (const p of all) fs.utimesSync(src.p(p), new Date(1_600_000_000_000), new Date(1_600_000_000_000));

      // Capture reads each inode once: of the ten names only one is read (the others are opened
      // for their stat data, which says they are links of it, and closed unread).
      const log = sb.path('capture.strace');
      const r = run(sb, src.dir, 'strace', [
        '-f',
        '-qq',
        '-y',
        '-e',
        'trace=read,pread64',
        '-o',
        log,
        process.execPath,
        path.resolve(__dirname, '..', '..', 'bin', 'git-xet'),
        'capture',
        '--json',
      ]);
      assert.equal(r.status, 0, r.stderr + r.stdout);
      const out = JSON.parse(r.stdout);
      // `-y` names each descriptor's file: `read(23</abs/path>, …) = n`.
      const read = new Set(
        fs
          .readFileSync(log, 'utf8')
          .split('\n')
          .map((l) => /\b(?:read|pread64)\(\d+<([^>]+)>, .*\) = [1-9]\d*$/.exec(l))
          .filter((m): m is RegExpExecArray => !!m)
          .map((m) => path.relative(src.dir, m[1])),
      );
      assert.ok(read.size > 0, 'strace saw reads');
      assert.deepEqual(
        names.filter((n) => read.has(n)),
        ['bin/tool'],
        'one name of the inode is read',
      );

      assert.equal(out.hardLinks, 9 + 5);
      assert.equal(out.externalLinks, 1);
      assert.equal(
        out.bytes - out.diskBytes,
        9 * big.length + pkgs.reduce((n, [s]) => n + fs.statSync(src.p(s)).size, 0),
      );
      const m = showManifest(sb, src.dir, out.snapshot);
      assert.equal(m.counts.hardLinks, 14);
      assert.equal(m.counts.externalLinks, 1);
      assert.equal(m.counts.diskBytes, out.diskBytes);
      expectExit(verify(sb, src.dir, out.snapshot, src.dir), 0);

      const copy = sb.path('copy');
      restore(sb, src.dir, out.snapshot, copy);
      const groups = linkGroups(copy, all);
      assert.deepEqual(
        groups,
        linkGroups(src.dir, all).map((g) => g.filter((p) => p !== outside)),
      );
      assert.ok(groups.some((g) => g.length === 10));
      assert.equal(fs.statSync(path.join(copy, 'bin/tool')).nlink, 10);
      assert.equal(
        fs.statSync(path.join(copy, 'node_modules/ext/index.js')).nlink,
        1,
        'outside links: a file of its own',
      );
      assert.equal(duBytes(sb, copy), duBytes(sb, src.dir), 'the copy takes the disk space the source does');
      expectExit(verify(sb, src.dir, out.snapshot, copy), 0);
      assert.equal(git(sb, copy, ['status', '--porcelain']), src.git('status', '--porcelain'));
      assert.deepEqual(statMismatches(sb, copy), []);

      // A copy fork (and an overlay fork over its base) keeps the links too.
      const viaCopy = sb.path('fork-copy');
      fork(sb, src.dir, out.snapshot, viaCopy, 'copy');
      assert.deepEqual(linkGroups(viaCopy, all), groups);
      expectExit(verify(sb, src.dir, out.snapshot, viaCopy), 0);
      if (isRoot) {
        const viaOverlay = sb.path('fork-overlay');
        fork(sb, src.dir, out.snapshot, viaOverlay, 'overlay');
        assert.equal(fs.statSync(path.join(viaOverlay, 'bin/tool-3')).nlink, 10);
        expectExit(verify(sb, src.dir, out.snapshot, viaOverlay), 0);
      }
      if (isRoot && !xfsUnavailable()) {
        const onXfs = copyToXfs(sb, src);
        const snapXfs = capture(sb, onXfs.dir);
        fork(sb, onXfs.dir, snapXfs, sb.path('xfs', 'clone'), 'clone');
        assert.deepEqual(linkGroups(sb.path('xfs', 'clone'), all), groups);
        expectExit(verify(sb, onXfs.dir, snapXfs, sb.path('xfs', 'clone')), 0);
      }

      // A link broken in the copy is reported as such.
      fs.rmSync(path.join(copy, 'bin/tool-4'));
      assert.equal(run(sb, copy, 'cp', ['-p', 'bin/tool', 'bin/tool-4']).status, 0); // same bytes, mode, time
      const v = verify(sb, src.dir, out.snapshot, copy);
      expectExit(v, 1);
      assert.deepEqual(parseJson(v).differences, [
        { kind: 'hardlink', path: 'bin/tool-4', expected: 'bin/tool', actual: null },
      ]);
    });
  },
);

test('index files of versions 2, 3 and 4 are parsed as git lists them, and stat data is written as git would', async () => {
  await withMountSandbox((sb) => {
    for (const version of ['2', '3', '4']) {
      const r = initRepo(sb, `v${version}`);
      const names: Record<string, string> = { 'a.txt': 'a\n', 'dir/b.txt': 'b\n', 'dir/sub/c.txt': 'c\n' };
      for (let i = 0; i < 20; i++) names[`dir/sub/many-${String(i).padStart(2, '0')}-ünï.txt`] = `${i}\n`;
      r.commit('files', names);
      r.write('new.txt', 'new\n');
      if (version !== '2') {
        // Extended entries (git writes at least v3 for them).
        r.git('add', '--intent-to-add', 'new.txt');
        r.git('update-index', '--skip-worktree', 'dir/b.txt');
      }
      r.git('update-index', `--index-version=${version}`);
      const index = r.gitPath('index');
      const parsed = parseIndex(index, 'sha1');
      assert.equal(parsed.version, Number(version));
      const listed = r
        .git('ls-files', '-s', '-z')
        .split('\0')
        .filter(Boolean)
        .map((l) => l.replace(/\t/, ' '));
      assert.deepEqual(
        parsed.entries.map((e) => `${e.mode.toString(8)} ${e.oid} ${e.stage} ${e.path}`),
        listed,
        `v${version} entries`,
      );
      // Times change (ctime with them): written from lstat, git agrees without reading a file.
      for (const p of Object.keys(names)) fs.utimesSync(r.p(p), new Date(), new Date(2001, 1, 2));
      assert.ok(refreshIndexStat(index, r.dir, 'sha1') > 0);
      assert.deepEqual(statMismatches(sb, r.dir, {}, false, ['new.txt']), [], `v${version} stat data`);
      assert.equal(r.git('fsck', '--no-dangling', '--no-progress'), '', 'the checksum is right');
      assert.deepEqual(filesOpenedBy(sb, r.dir, ['diff-files', '--name-only']), []);
      assert.equal(r.git('status', '--porcelain'), version === '2' ? '?? new.txt\n' : ' A new.txt\n');
    }
  });
});

test('a crafted filemeta is refused: a link between different files, a wrong count, a huge blob', async () => {
  await withMountSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('two', { 'a.txt': 'a\n', 'b.txt': 'b\n', 'c.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const top = r.git('ls-tree', snap).trim().split('\n');
    /** The snapshot with its filemeta replaced (same files, index, manifest). */
    const craft = (meta: string | Buffer): string => {
      const blob = r.gitInput(meta, 'hash-object', '-w', '--stdin').trim();
      const entries = top.map((l) => (l.endsWith('\tfilemeta') ? `100644 blob ${blob}\tfilemeta` : l));
      const tree = r.gitInput(`${entries.join('\n')}\n`, 'mktree').trim();
      const commit = r.gitInput('crafted\n', 'commit-tree', tree).trim();
      r.git('update-ref', `refs/xet/snapshots/${commit}`, commit);
      return commit;
    };
    const good = r.git('cat-file', 'blob', `${snap}:filemeta`).split('\n');
    assert.equal(good[1], '3');
    const cases: [string, string | Buffer][] = [
      ['b.txt as a link of a.txt (other content)', `${good[0]}\n3\n${good[2]}\n${good[3]} =0\n${good[4]}\n`],
      ['a link to itself', `${good[0]}\n3\n${good[2]}\n${good[3]}\n${good[4]} =2\n`],
      ['a count that is not the tree', `${good[0]}\n2\n${good[2]}\n${good[3]}\n`],
      ['a malformed time', `${good[0]}\n3\n${good[2]}\n1.5\n${good[4]}\n`],
      ['a blob far larger than three entries need', Buffer.alloc(1 << 20, 0x31)],
    ];
    for (const [what, meta] of cases) {
      const bad = craft(meta);
      const dir = sb.path(`t-${cases.findIndex((c) => c[0] === what)}`);
      const err = xet(sb, r.dir, ['restore', bad, dir, '--json']);
      assert.equal(err.status, 3, `${what}: ${err.stdout}`);
      assert.equal(parseJson(err).error.code, 'SNAPSHOT_INVALID', what);
      assert.ok(!fs.existsSync(dir), `${what}: nothing is left behind`);
    }
    // The same link between equal files (a.txt and c.txt) is what a capture of links says: accepted.
    const ok = craft(`${good[0]}\n3\n${good[2]}\n${good[3]}\n${good[4]} =0\n`);
    restore(sb, r.dir, ok, sb.path('linked'));
    assert.equal(fs.statSync(sb.path('linked', 'c.txt')).ino, fs.statSync(sb.path('linked', 'a.txt')).ino);
  });
});

test('restored times are exact to the nanosecond; without python3 they are cut to the microsecond, never later', async () => {
  await withMountSandbox((sb) => {
    const src = initRepo(sb, 'src');
    src.commit('c1', { 'a.txt': 'a\n', 'b.txt': 'b\n' });
    // Times with nanoseconds no microsecond clock gives: 123456789 ns past the second.
    const stamp = (rel: string, sec: number) =>
      run(sb, src.dir, 'touch', ['-h', '-d', `@${sec}.123456789`, rel]).status === 0 || assert.fail('touch');
    stamp('a.txt', 1600000000);
    stamp('b.txt', 1600000001);
    src.write('old.txt', 'from before 1970\n');
    stamp('old.txt', -144676800); // 1965: node would set "now" for a negative time
    // 2300: past what int64 nanoseconds hold (2262), where the native read once wrapped it to 1715.
    src.write('future.txt', 'from after 2262\n');
    stamp('future.txt', 10413792000);
    const snap = capture(sb, src.dir);
    const ns = (dir: string, rel: string) => fs.lstatSync(path.join(dir, rel), { bigint: true }).mtimeNs;
    const exact = sb.path('exact');
    restore(sb, src.dir, snap, exact);
    const cut = sb.path('cut');
    expectExit(
      xet(sb, src.dir, ['restore', snap, cut, '--json'], { env: { GIT_XET_NATIVE: '0', GIT_XET_TEST_NO_PYTHON: '1' } }),
      0,
    );
    for (const rel of ['a.txt', 'b.txt']) {
      if (EXACT_TIMES) assert.equal(ns(exact, rel), ns(src.dir, rel), `${rel}: exact to the nanosecond`);
      assert.equal(ns(cut, rel), (ns(src.dir, rel) / 1000n) * 1000n, `${rel}: cut to the microsecond`);
    }
    if (EXACT_TIMES) assert.equal(ns(exact, 'old.txt'), ns(src.dir, 'old.txt'), '1965, to the nanosecond');
    if (EXACT_TIMES) assert.equal(ns(exact, 'future.txt'), ns(src.dir, 'future.txt'), '2300, to the nanosecond');
    assert.equal(ns(src.dir, 'future.txt'), 10413792000_123456789n);
    const ahead = ns(cut, 'future.txt') - ns(src.dir, 'future.txt');
    assert.ok(ahead > -1_000_000_000n && ahead < 1_000_000_000n, `2300 without python3: within a second (${ahead} ns)`);
    const drift = ns(cut, 'old.txt') - ns(src.dir, 'old.txt');
    assert.ok(drift > -1_000_000_000n && drift < 1_000_000_000n, `1965 without python3: within a second (${drift} ns)`);
    // Either way git reads no file and verify is satisfied (it compares to the microsecond).
    for (const dir of [exact, cut]) {
      assert.equal(git(sb, dir, ['status', '--porcelain']), src.git('status', '--porcelain'));
    }
    if (EXACT_TIMES) expectExit(verify(sb, src.dir, snap, exact), 0);
    // Without python3 a time before 1970 goes through a Date, to the millisecond: verify says so.
    const v = parseJson(verify(sb, src.dir, snap, cut));
    // (2300 through a double: its microsecond may be one off, so it may be listed too.)
    assert.deepEqual(
      v.differences
        .map((d: { kind: string; path: string }) => `${d.kind} ${d.path}`)
        .filter((d: string) => d !== 'mtime future.txt'),
      ['mtime old.txt'],
    );
  });
});
