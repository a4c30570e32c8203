// Everything that reads a snapshot's files works on chunked files exactly as on whole ones: restore
// and fork reassemble them (bytes, modes, times, hard links; `git status` as in the source, with
// true stat data so git reads none of them again), diff compares by content (a file that became
// chunked with the same bytes is unchanged), export commits whole blobs, archive streams them (and
// its extraction is the restore, file by file), and push/fetch through a plain Git repository and a
// xet store carry the chunks, so `restore --from` is byte-exact. The chunked snapshots are made from
// ordinary ones with plumbing (test/support/chunked.ts), their whole blobs pruned where it matters.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { chunkSnapshot } from './support/chunked';
import { treeFingerprint, writeLargeFile } from './support/fixtures';
import { fork } from './support/forks';
import { git, gitTry, initRepo, run, type Repo } from './support/git';
import { withSandbox, type Sandbox } from './support/sandbox';
import { capture, describeRun, expectExit, parseJson, restore, xet } from './support/xet';

const MiB = 1024 * 1024;

/** A repository whose big files are of every kind restore treats differently. */
function fixture(sb: Sandbox): Repo {
  const r = initRepo(sb, 'src');
  r.write('.gitignore', 'ignored/\n');
  writeLargeFile(r.p('model.bin'), 2 * MiB + 77, 3); // tracked, clean
  writeLargeFile(r.p('db.sqlite'), 3 * MiB, 4); // tracked, then edited in place (same size)
  r.commit('one', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n' });
  const db = fs.openSync(r.p('db.sqlite'), 'r+');
  fs.writeSync(db, Buffer.alloc(4096, 0x5a), 0, 4096, MiB);
  fs.closeSync(db);
  writeLargeFile(r.p('data/blob.bin'), 2 * MiB + 4321, 5); // untracked, executable, hard-linked
  fs.chmodSync(r.p('data/blob.bin'), 0o755);
  fs.linkSync(r.p('data/blob.bin'), r.p('data/blob-link.bin'));
  writeLargeFile(r.p('ignored/cache.bin'), MiB + 1, 6); // ignored
  r.write('untracked.txt', 'u\n');
  r.symlink('model.bin', 'link-to-model');
  r.mkdir('empty/inner');
  fs.utimesSync(r.p('model.bin'), new Date('2020-01-02T03:04:05.678Z'), new Date('2020-01-02T03:04:05.678Z'));
  return r;
}

const BIG = ['data/blob-link.bin', 'data/blob.bin', 'db.sqlite', 'ignored/cache.bin', 'model.bin'];

/** The fixture captured, its big files chunked and their whole blobs pruned. */
async function chunkedSource(sb: Sandbox): Promise<{ r: Repo } & Awaited<ReturnType<typeof chunkSnapshot>>> {
  const r = fixture(sb);
  const whole = capture(sb, r.dir);
  return { r, ...(await chunkSnapshot(sb, r.dir, whole, BIG, { dropWhole: true })) };
}

/** `git status` as a list (porcelain v1, untracked and ignored files listed one by one). */
function status(sb: Sandbox, dir: string): string {
  return git(sb, dir, ['status', '--porcelain=v1', '--untracked-files=all', '--ignored=matching']);
}

/** The index's recorded stat data of a path: mtime, size, inode. */
function recorded(sb: Sandbox, dir: string, rel: string, indexFile?: string): { oid: string; stat: string } {
  const env = indexFile ? { GIT_INDEX_FILE: indexFile } : undefined;
  const out = git(sb, dir, ['ls-files', '-s', '--debug', '--', rel], { env });
  const oid = out.split(' ')[1];
  const mtime = /mtime: (\d+):(\d+)/.exec(out);
  const size = /size: (\d+)/.exec(out);
  const ino = /ino: (\d+)/.exec(out);
  assert.ok(mtime && size && ino, out);
  return { oid, stat: `${mtime[1]}.${mtime[2]} ${size[1]} ${ino[1]}` };
}

function statOf(abs: string): string {
  const st = fs.lstatSync(abs, { bigint: true });
  const sec = st.mtimeNs / 1_000_000_000n;
  return `${sec}.${st.mtimeNs - sec * 1_000_000_000n} ${st.size} ${BigInt.asUintN(32, st.ino)}`;
}

/** Every file below dir (no .git) byte for byte, with its mode and link target. */
function assertSameTree(a: string, b: string): void {
  assert.equal(treeFingerprint(b), treeFingerprint(a));
}

test('restore reassembles chunked files: bytes, modes, times, hard links, and git status as in the source without reading them', () =>
  withSandbox(async (sb) => {
    const { r, snapshot, files } = await chunkedSource(sb);
    // The untracked file's whole blob is gone: only the chunks can give its bytes back.
    assert.notEqual(gitTry(sb, r.dir, ['cat-file', '-e', files.get('data/blob.bin')!.blob]).status, 0);
    const show = parseJson(xet(sb, r.dir, ['show', snapshot, '--json']));
    assert.deepEqual((show.manifest ?? show).chunked, BIG);

    const out = sb.path('copy');
    restore(sb, r.dir, snapshot, out);
    assertSameTree(r.dir, out);
    for (const p of BIG) assert.ok(fs.readFileSync(path.join(out, p)).equals(r.read(p)), p);
    assert.equal(fs.statSync(path.join(out, 'data/blob.bin')).mode & 0o777, 0o755);
    assert.equal(fs.statSync(path.join(out, 'model.bin')).mode & 0o777, 0o644);
    assert.equal(
      fs.statSync(path.join(out, 'data/blob.bin')).ino,
      fs.statSync(path.join(out, 'data/blob-link.bin')).ino,
      'the hard link is a hard link again',
    );
    assert.equal(Math.round(fs.statSync(path.join(out, 'model.bin')).mtimeMs), Date.parse('2020-01-02T03:04:05.678Z'));
    for (const p of BIG) {
      const us = (abs: string) => fs.lstatSync(abs, { bigint: true }).mtimeNs / 1000n;
      assert.equal(us(path.join(out, p)), us(r.p(p)), `${p} has its captured mtime`);
    }
    // No temporary file is left beside them.
    assert.deepEqual(
      fs.readdirSync(path.join(out, 'data')).filter((n) => n.startsWith('.xet-')),
      [],
    );
    assert.equal(status(sb, out), status(sb, r.dir));
    // The index: the tracked clean file has its staged blob (its bytes) with true stat data, so git
    // trusts it; the files index (capture's stat cache) names the pointers, with the same stat data.
    const m = recorded(sb, out, 'model.bin');
    assert.equal(m.oid, files.get('model.bin')!.blob);
    assert.equal(m.stat, statOf(path.join(out, 'model.bin')));
    const cacheDir = path.join(out, '.git', 'xet', 'cache');
    const cache = fs.readdirSync(cacheDir).find((n) => n.endsWith('.index'));
    assert.ok(cache, 'restore leaves the files index as the capture cache');
    for (const p of BIG) {
      const f = recorded(sb, out, p, path.join(cacheDir, cache));
      assert.equal(f.oid, files.get(p)!.pointer, `${p}: the files index names its pointer`);
      assert.equal(f.stat, statOf(path.join(out, p)), `${p}: with the file's stat data`);
    }
    // git's own check agrees (diff-files reports entries whose stat data does not match).
    assert.equal(git(sb, out, ['diff-files', '--name-only']), 'db.sqlite\n');
  }));

test('a chunk missing from the repository fails the restore with CHUNK_MISSING and leaves nothing', () =>
  withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('one', { 'a.txt': 'a\n' });
    writeLargeFile(r.p('big.bin'), MiB + 5, 9);
    const whole = capture(sb, r.dir);
    const { snapshot } = await chunkSnapshot(sb, r.dir, whole, ['big.bin'], { dropWhole: true });
    // Take one chunk out: repack everything but it.
    const list = git(sb, r.dir, ['ls-tree', `${snapshot}:chunks`])
      .split('\n')[0]
      .split(/\s+/)[2];
    const victim = git(sb, r.dir, ['ls-tree', '-r', list]).split('\n')[3].split(/\s+/)[2];
    const keep = git(sb, r.dir, ['rev-list', '--objects', '--all'])
      .split('\n')
      .map((l) => l.split(' ')[0])
      .filter((o) => o && o !== victim);
    const packDir = path.join(r.dir, '.git', 'objects', 'pack');
    const old = fs.readdirSync(packDir);
    git(sb, r.dir, ['pack-objects', '-q', path.join(packDir, 'pack')], { input: `${keep.join('\n')}\n` });
    for (const f of old) fs.rmSync(path.join(packDir, f));
    git(sb, r.dir, ['prune', '--expire=now']);
    assert.notEqual(gitTry(sb, r.dir, ['cat-file', '-e', victim]).status, 0);
    const res = xet(sb, r.dir, ['restore', snapshot, sb.path('copy'), '--json']);
    assert.equal(res.status, 3, describeRun(res));
    assert.equal(parseJson(res).error.code, 'CHUNK_MISSING');
    assert.equal(parseJson(res).error.details.chunk, victim);
    assert.equal(fs.existsSync(sb.path('copy')), false);
    assert.deepEqual(
      fs.readdirSync(sb.root).filter((n) => n.includes('xet-restore')),
      [],
    );
  }));

test('a copy fork of a chunked snapshot has the files and a clean status', () =>
  withSandbox(async (sb) => {
    const { r, snapshot } = await chunkedSource(sb);
    const dir = sb.path('f1');
    fork(sb, r.dir, snapshot, dir, ['--mode', 'copy']);
    for (const p of BIG) assert.ok(fs.readFileSync(path.join(dir, p)).equals(r.read(p)), p);
    assert.equal(status(sb, dir), status(sb, r.dir));
    assert.equal(git(sb, dir, ['diff-files', '--name-only']), 'db.sqlite\n');
    // The fork's changes: none; a chunked file touched (hashed again, whole) is still unchanged.
    const changes = () => parseJson(xet(sb, r.dir, ['changes', dir, '--json']));
    assert.deepEqual(changes().modified, []);
    fs.utimesSync(path.join(dir, 'model.bin'), new Date(), new Date());
    assert.deepEqual(changes().modified, []);
    const f = fs.openSync(path.join(dir, 'data/blob.bin'), 'r+');
    fs.writeSync(f, Buffer.from('edit'), 0, 4, 100);
    fs.closeSync(f);
    assert.deepEqual(changes().modified, ['data/blob-link.bin', 'data/blob.bin']);
  }));

test('diff compares by content: a file that became chunked with the same bytes is unchanged, an edit is reported', () =>
  withSandbox(async (sb) => {
    const r = fixture(sb);
    const whole = capture(sb, r.dir);
    const { snapshot: chunked } = await chunkSnapshot(sb, r.dir, whole, BIG, { keepOld: true });
    const d = parseJson(xet(sb, r.dir, ['diff', whole, chunked, '--json']));
    assert.equal(d.identical, true, JSON.stringify(d.changes));
    const back = parseJson(xet(sb, r.dir, ['diff', chunked, whole, '--json']));
    assert.equal(back.identical, true, JSON.stringify(back.changes));
    // Against the working tree (hashed whole): identical too.
    const wt = parseJson(xet(sb, r.dir, ['diff', chunked, '--json']));
    assert.deepEqual(
      wt.changes.filter((c: { kind: string }) => c.kind.startsWith('file-')),
      [],
    );
    // One big file edited, another deleted: exactly those, as for whole files.
    const f = fs.openSync(r.p('data/blob.bin'), 'r+');
    fs.writeSync(f, Buffer.from('changed'), 0, 7, 12345);
    fs.closeSync(f);
    fs.rmSync(r.p('ignored/cache.bin'));
    const later = capture(sb, r.dir);
    const { snapshot: chunkedLater } = await chunkSnapshot(
      sb,
      r.dir,
      later,
      BIG.filter((p) => p !== 'ignored/cache.bin'),
      { keepOld: true },
    );
    const kinds = (x: { changes: { kind: string; path: string }[] }) =>
      x.changes.filter((c) => c.kind.startsWith('file-')).map((c) => `${c.kind} ${c.path}`);
    const expected = [
      'file-modified data/blob-link.bin',
      'file-modified data/blob.bin',
      'file-deleted ignored/cache.bin',
    ];
    assert.deepEqual(kinds(parseJson(xet(sb, r.dir, ['diff', chunked, chunkedLater, '--json']))), expected);
    assert.deepEqual(kinds(parseJson(xet(sb, r.dir, ['diff', whole, chunkedLater, '--json']))), expected);
    assert.deepEqual(kinds(parseJson(xet(sb, r.dir, ['diff', chunked, later, '--json']))), expected);
    const human = xet(sb, r.dir, ['diff', chunked, chunkedLater]);
    expectExit(human, 0);
    assert.match(human.stdout, /file-modified\s+data\/blob\.bin/);
  }));

test('export of a chunked snapshot commits whole blobs', () =>
  withSandbox(async (sb) => {
    const { r, snapshot, files } = await chunkedSource(sb);
    const res = xet(sb, r.dir, ['export', snapshot, '--branch', 'work', '--json']);
    expectExit(res, 0);
    const out = parseJson(res);
    assert.ok(out.commit);
    // Tracked edit and untracked files (not the ignored one) as git add -A records them: whole blobs.
    for (const p of ['db.sqlite', 'data/blob.bin', 'data/blob-link.bin']) {
      assert.equal(git(sb, r.dir, ['rev-parse', `work:${p}`]).trim(), files.get(p)!.blob, p);
      const body = gitTry(sb, r.dir, ['cat-file', 'blob', `work:${p}`]).stdout;
      assert.ok(body.equals(r.read(p)), `${p}: the committed bytes`);
    }
    assert.equal(git(sb, r.dir, ['rev-parse', 'work:model.bin']).trim(), files.get('model.bin')!.blob);
    assert.equal(gitTry(sb, r.dir, ['rev-parse', '-q', '--verify', 'work:ignored/cache.bin']).status, 1);
    assert.equal(git(sb, r.dir, ['ls-tree', 'work', 'data/blob.bin']).split(' ')[0], '100755');
    assert.deepEqual(git(sb, r.dir, ['diff', '--name-only', 'HEAD', 'work']).trim().split('\n').sort(), [
      'data/blob-link.bin',
      'data/blob.bin',
      'db.sqlite',
      'link-to-model',
      'untracked.txt',
    ]);
  }));

test('archive (--format tgz) streams chunked files; extracted, it is the restore file by file', () =>
  withSandbox(async (sb) => {
    const { r, snapshot } = await chunkedSource(sb);
    const copy = sb.path('copy');
    restore(sb, r.dir, snapshot, copy);
    for (const [format, flags] of [
      ['tgz', '-xzf'],
      ['tar', '-xf'],
    ]) {
      const file = sb.path(`a.${format}`);
      const res = xet(sb, r.dir, ['archive', snapshot, '--format', format, '-o', file, '--json']);
      expectExit(res, 0);
      const out = parseJson(res);
      assert.equal(out.format, format === 'tgz' ? 'tar.gz' : 'tar');
      const into = sb.path(`x-${format}`);
      fs.mkdirSync(into);
      const t = run(sb, into, 'tar', [flags, file, '-C', into]);
      assert.equal(t.status, 0, t.stderr.toString());
      // Modes, symlinks, empty directories and every file's bytes, as restore laid them.
      assertSameTree(copy, into);
      assert.equal(fs.readlinkSync(path.join(into, 'link-to-model')), 'model.bin');
      assert.ok(fs.statSync(path.join(into, 'empty/inner')).isDirectory());
      assert.equal(fs.statSync(path.join(into, 'data/blob.bin')).mode & 0o777, 0o755);
      let bytes = 0;
      for (const p of BIG) bytes += fs.statSync(r.p(p)).size;
      assert.ok(out.bytes >= bytes, `bytes ${out.bytes} counts the chunked files' real sizes`);
    }
  }));

test('push and fetch carry chunked snapshots: a bare Git repository and a xet store, restore --from byte-exact', () =>
  withSandbox(async (sb) => {
    const { r, snapshot } = await chunkedSource(sb);
    const bare = sb.path('bare.git');
    git(sb, sb.root, ['init', '-q', '--bare', bare]);
    const store = sb.path('store');
    for (const remote of [bare, `xet::${store}`]) {
      const p = xet(sb, r.dir, ['push', remote, snapshot, '--json']);
      expectExit(p, 0);
      const name = remote === bare ? 'git' : 'xet';
      // restore --from the remote: a new repository from the remote's objects alone.
      const copy = sb.path(`from-${name}`);
      const res = xet(sb, sb.root, ['restore', snapshot, copy, '--from', remote, '--json']);
      expectExit(res, 0);
      for (const p2 of BIG) assert.ok(fs.readFileSync(path.join(copy, p2)).equals(r.read(p2)), `${name}: ${p2}`);
      assertSameTree(r.dir, copy);
      assert.equal(status(sb, copy), status(sb, r.dir));
      // git xet fetch into another repository, then a local restore there.
      const other = initRepo(sb, `other-${name}`);
      other.commit('unrelated', { 'x.txt': 'x\n' });
      expectExit(xet(sb, other.dir, ['fetch', remote, '--json']), 0);
      const local = sb.path(`local-${name}`);
      restore(sb, other.dir, snapshot, local);
      for (const p2 of BIG) assert.ok(fs.readFileSync(path.join(local, p2)).equals(r.read(p2)), `${name}: ${p2}`);
      // git's own connectivity check: every chunk arrived.
      git(sb, other.dir, ['fsck', '--connectivity-only', '--no-dangling']);
    }
  }));
