// The index read from its file (listIndexFile) against git's own listing (`ls-files -s --debug`):
// for generated indexes of every version and both object formats (conflict stages, gitlinks,
// symlinks, assume-unchanged, skip-worktree, intent-to-add, shared path prefixes, long and odd
// names, the optional extensions git writes), entry for entry the same; and every index this reader
// leaves to git (split, sparse, a required extension it does not know, a damaged file) is left to
// git, which still answers readIndexEntries.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import {
  listIndexFile,
  parseIndex,
  parseIndexWritten,
  RECORDED_MIN_SIZE,
  writeIndexBuffer,
} from '../src/git/index-file';
import { readIndexEntries, readIndexEntriesFromGit } from '../src/git/plumbing';
import { rng } from './support/rng';
import { withSandbox, type Sandbox } from './support/sandbox';

function git(sb: Sandbox, cwd: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', args, { cwd, env: sb.env, input, encoding: 'utf8' });
}

const PARTS = [
  'src',
  'lib',
  'a',
  'ab',
  'abc',
  'node_modules',
  'é',
  'x y',
  'dir.d',
  'Z',
  '日本',
  'tab\there',
  'nl\nline',
];

/** An empty repository at `r` in the sandbox, and its index file's path. */
function newRepo(sb: Sandbox): { repo: string; file: string } {
  const repo = sb.path('r');
  fs.mkdirSync(repo);
  git(sb, repo, ['init', '-q']);
  return { repo, file: path.join(repo, '.git', 'index') };
}

/** The file reader's listing is git's; or, for an index it must leave to git (`leftToGit`), it
 * returns null and readIndexEntries still gives git's listing. Returns the entries compared. */
async function sameAsGit(
  sb: Sandbox,
  repo: string,
  format: 'sha1' | 'sha256',
  what: string,
  leftToGit = false,
): Promise<number> {
  const file = path.join(repo, '.git', 'index');
  const own = listIndexFile(file, format);
  const theirs = await readIndexEntriesFromGit({ cwd: repo, env: sb.env });
  if (leftToGit) {
    assert.equal(own, null, `${what}: read by this reader`);
    assert.deepEqual(await readIndexEntries({ cwd: repo, env: sb.env }, { file, format }), theirs, what);
    return 0;
  }
  assert.ok(own, `${what}: the reader left an index it should read to git`);
  // (git's listing has no `recorded`: it is checked against the debug lines below.)
  assert.deepEqual(
    own.map(({ recorded: _, ...e }) => e),
    theirs,
    what,
  );
  return own.length;
}

test('the index read from its file is git listing, for generated indexes of every version and format', () =>
  withSandbox(async (sb) => {
    let compared = 0;
    for (let round = 0; round < 24; round++) {
      const rand = rng(1000 + round);
      const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)];
      const format = round % 4 === 3 ? 'sha256' : 'sha1';
      const hexLen = format === 'sha256' ? 64 : 40;
      const repo = sb.path(`r${round}`);
      fs.mkdirSync(repo);
      git(sb, repo, ['init', '-q', `--object-format=${format}`]);
      // Files on disk, added by git: real stat data and sizes (0 to a few KiB, some empty).
      const files = new Set<string>();
      const nFiles = 5 + Math.floor(rand() * 60);
      for (let i = 0; i < nFiles; i++) {
        const depth = Math.floor(rand() * 4);
        const parts = Array.from({ length: depth }, () => pick(PARTS));
        const name = [...parts, `f${i}${pick(['', '.c', '.txt', '-é', ' sp'])}`].join('/');
        const abs = path.join(repo, name);
        fs.mkdirSync(path.dirname(abs), { recursive: true });
        if (rand() < 0.1) fs.symlinkSync(pick(['target', 'x/../y', 'é']), abs);
        else {
          fs.writeFileSync(abs, crypto.randomBytes(Math.floor(rand() * rand() * 5000)));
          if (rand() < 0.2) fs.chmodSync(abs, 0o755);
        }
        files.add(name);
      }
      git(sb, repo, ['add', '-A']);
      if (rand() < 0.5) git(sb, repo, ['write-tree']); // a cache tree (TREE)
      if (rand() < 0.3) {
        // An untracked cache (UNTR), written by status while every entry's object exists.
        git(sb, repo, ['config', 'core.untrackedCache', 'true']);
        git(sb, repo, ['update-index', '--untracked-cache']);
        git(sb, repo, ['status', '--porcelain']);
      }
      // Entries without files, straight into the index: gitlinks, conflict stages, a long name.
      const info: string[] = [];
      const oid = () => crypto.randomBytes(hexLen / 2).toString('hex');
      for (let i = 0; i < Math.floor(rand() * 8); i++) info.push(`160000 ${oid()} 0\tmod${i}/sub`);
      const conflicted: string[] = [];
      for (let i = 0; i < Math.floor(rand() * 4); i++) {
        const p = `${pick(PARTS)}/conflict${i}`;
        conflicted.push(p);
        for (const stage of [1, 2, 3]) if (stage !== 1 || rand() < 0.7) info.push(`100644 ${oid()} ${stage}\t${p}`);
      }
      if (rand() < 0.3) info.push(`100644 ${oid()} 0\t${'long/'.repeat(900)}name`); // past 0xFFF bytes
      if (info.length) git(sb, repo, ['update-index', '-z', '--index-info'], info.map((l) => `${l}\0`).join(''));
      // A resolved conflict leaves resolve-undo data (REUC).
      if (conflicted.length && rand() < 0.5) {
        const p = conflicted[0];
        fs.mkdirSync(path.join(repo, path.dirname(p)), { recursive: true });
        fs.writeFileSync(path.join(repo, p), 'resolved\n');
        git(sb, repo, ['add', '--', p]);
      }
      const list = [...files].filter((f) => fs.lstatSync(path.join(repo, f)).isFile());
      const some = () => list.filter(() => rand() < 0.15);
      const flagged = (flag: string, paths: string[]) => {
        if (paths.length) git(sb, repo, ['update-index', '-z', flag, '--stdin'], paths.map((p) => `${p}\0`).join(''));
      };
      flagged('--assume-unchanged', some());
      // Skip-worktree entries are git's to list (it clears the flag of a file present in a sparse
      // checkout): in a third of the rounds.
      const skipping = round % 3 === 1 ? some() : [];
      flagged('--skip-worktree', skipping);
      const added: string[] = [];
      for (let i = 0; i < Math.floor(rand() * 3); i++) {
        const p = `new${i}-${pick(PARTS)}`;
        fs.writeFileSync(path.join(repo, p), 'new\n');
        added.push(p);
      }
      if (added.length) git(sb, repo, ['add', '-N', '--', ...added]);
      // Stat data git would call stale: a size that is not the file's (recorded as is).
      for (const f of some()) fs.appendFileSync(path.join(repo, f), 'more');
      // (Exits 1 for what still needs updating, the conflicts and gitlinks; it writes the index all the same.)
      if (rand() < 0.3) spawnSync('git', ['update-index', '-q', '--refresh'], { cwd: repo, env: sb.env });
      for (const version of [2, 3, 4, pick([2, 3, 4])]) {
        // Version 2 cannot hold extended flags: git keeps (or makes) such an index version 3.
        git(sb, repo, ['update-index', '--index-version', String(version)]);
        compared += await sameAsGit(sb, repo, format, `round ${round}, version ${version}`, skipping.length > 0);
      }
    }
    assert.ok(compared > 700, `only ${compared} entries compared`);
  }));

test('a large entry carries its recorded stat data and whether git would call it racily clean', () =>
  withSandbox(async (sb) => {
    const { repo, file } = newRepo(sb);
    fs.writeFileSync(path.join(repo, 'big'), Buffer.alloc(RECORDED_MIN_SIZE, 1));
    fs.writeFileSync(path.join(repo, 'small'), Buffer.alloc(RECORDED_MIN_SIZE - 1, 1));
    git(sb, repo, ['add', '.']);
    // Written in the same second as the file: racy.
    const fresh = listIndexFile(file, 'sha1')!;
    assert.equal(fresh.find((e) => e.path === 'small')!.recorded, undefined);
    assert.equal(fresh.find((e) => e.path === 'big')!.recorded!.racy, true);
    // The file a minute older than the index: not racy; and its stat data is what git shows.
    const past = Date.now() / 1000 - 60;
    fs.utimesSync(path.join(repo, 'big'), past, past);
    git(sb, repo, ['update-index', '--really-refresh']);
    const big = listIndexFile(file, 'sha1')!.find((e) => e.path === 'big')!;
    assert.equal(big.recorded!.racy, false);
    const debug = git(sb, repo, ['ls-files', '--debug', 'big']);
    const num = (re: RegExp) => debug.match(re)!.slice(1).map(Number);
    const st = big.recorded!.stat;
    assert.deepEqual(
      [st.readUInt32BE(0), st.readUInt32BE(4), st.readUInt32BE(8), st.readUInt32BE(12)],
      [...num(/ctime: (\d+):(\d+)/), ...num(/mtime: (\d+):(\d+)/)],
    );
    assert.deepEqual([st.readUInt32BE(16), st.readUInt32BE(20)], num(/dev: (\d+)\s+ino: (\d+)/));
    assert.deepEqual([st.readUInt32BE(28), st.readUInt32BE(32)], num(/uid: (\d+)\s+gid: (\d+)/));
    assert.equal(st.readUInt32BE(36), RECORDED_MIN_SIZE);
    assert.equal(st.readUInt32BE(8), Math.floor(past));
  }));

/** Rewrites the index's trailing hash after an edit (so only the edit is what the reader sees). */
function rehash(file: string, buf: Buffer): void {
  const sum = crypto
    .createHash('sha1')
    .update(buf.subarray(0, buf.length - 20))
    .digest();
  sum.copy(buf, buf.length - 20);
  fs.writeFileSync(file, buf);
}

test('what the index reader leaves to git is listed by git, and a missing index is an empty one', () =>
  withSandbox(async (sb) => {
    const { repo, file } = newRepo(sb);
    const ref = { file, format: 'sha1' as const };
    const opts = { cwd: repo, env: sb.env };
    assert.deepEqual(listIndexFile(file, 'sha1'), []);
    assert.deepEqual(await readIndexEntries(opts, ref), []);
    for (const d of ['a', 'b', 'c/d']) {
      fs.mkdirSync(path.join(repo, d), { recursive: true });
      fs.writeFileSync(path.join(repo, d, 'f'), `${d}\n`);
    }
    git(sb, repo, ['add', '-A']);
    git(sb, repo, ['commit', '-q', '-m', 'one']);
    const full = await readIndexEntriesFromGit(opts);
    assert.equal(full.length, 3);

    const leftToGit = async (what: string) => {
      assert.equal(listIndexFile(file, 'sha1'), null, `${what}: read by this reader`);
      assert.deepEqual(await readIndexEntries(opts, ref), await readIndexEntriesFromGit(opts), what);
    };

    // A split index: its entries are in the shared index the `link` extension names.
    git(sb, repo, ['update-index', '--split-index']);
    await leftToGit('a split index');
    git(sb, repo, ['update-index', '--no-split-index']);
    assert.deepEqual(listIndexFile(file, 'sha1'), full);

    // A sparse index: directories outside the cone are single tree entries (`sdir`); git expands them.
    git(sb, repo, ['config', 'index.sparse', 'true']);
    git(sb, repo, ['sparse-checkout', 'set', '--cone', 'a']);
    assert.match(fs.readFileSync(file).toString('latin1'), /sdir/);
    await leftToGit('a sparse index');
    // Not sparse (every directory an entry), skip-worktree outside the cone, one such file written
    // back: git clears its flag as it reads the index, so git lists these.
    git(sb, repo, ['config', 'index.sparse', 'false']);
    git(sb, repo, ['sparse-checkout', 'reapply']);
    assert.doesNotMatch(fs.readFileSync(file).toString('latin1'), /sdir/);
    fs.mkdirSync(path.join(repo, 'b'), { recursive: true });
    fs.writeFileSync(path.join(repo, 'b', 'f'), 'written back\n');
    await leftToGit('skip-worktree entries in a sparse checkout');
    const b = (await readIndexEntries(opts, ref)).find((e) => e.path === 'b/f')!;
    assert.equal(b.flags, 0, 'the flag git cleared for a file on disk');
    const c = (await readIndexEntries(opts, ref)).find((e) => e.path === 'c/d/f')!;
    assert.equal(c.flags, 1 << 30);
    fs.rmSync(path.join(repo, 'b', 'f'));
    git(sb, repo, ['sparse-checkout', 'disable']);
    git(sb, repo, ['update-index', '--index-version', '2']);
    assert.deepEqual(listIndexFile(file, 'sha1'), full);

    // A damaged file: one byte of stat data changed under the trailing hash.
    const good = fs.readFileSync(file);
    const damaged = Buffer.from(good);
    damaged[12 + 36 + 3] ^= 1; // the first entry's recorded size
    fs.writeFileSync(file, damaged);
    await leftToGit('a damaged index');

    // A required extension this reader does not know (a lowercase name): git refuses it.
    const body = good.subarray(0, good.length - 20);
    const ext = Buffer.concat([Buffer.from('abcd'), Buffer.from([0, 0, 0, 4]), Buffer.from('data')]);
    rehash(file, Buffer.concat([body, ext, Buffer.alloc(20)]));
    assert.equal(listIndexFile(file, 'sha1'), null);
    await assert.rejects(readIndexEntries(opts, ref), /abcd/);
    // An optional one (uppercase) is skipped, as git skips it.
    rehash(file, Buffer.concat([body, Buffer.from('ABCD'), ext.subarray(4), Buffer.alloc(20)]));
    assert.deepEqual(listIndexFile(file, 'sha1'), full);
    assert.deepEqual(await readIndexEntriesFromGit(opts), full);

    // A name whose length in the flags is not its length (git reads the flags' length, or refuses):
    // in version 2, and in version 4, whose names are prefix-compressed.
    for (const version of ['2', '4']) {
      fs.writeFileSync(file, good);
      git(sb, repo, ['update-index', '--index-version', version]);
      const edited = fs.readFileSync(file);
      const flagsAt = 12 + 40 + 20; // the first entry's flags: a/f, 3 bytes
      assert.equal(edited.readUInt16BE(flagsAt) & 0xfff, 3);
      edited.writeUInt16BE((edited.readUInt16BE(flagsAt) & ~0xfff) | 2, flagsAt);
      rehash(file, edited);
      assert.equal(listIndexFile(file, 'sha1'), null, `version ${version}`);
      const listed = await readIndexEntries(opts, ref).catch((e: Error) => e);
      const byGit = await readIndexEntriesFromGit(opts).catch((e: Error) => e);
      assert.deepEqual(listed, byGit, `version ${version}: what git makes of it`);
    }

    // Another index named in the environment is git's to find.
    fs.writeFileSync(file, good);
    const other = sb.path('other-index');
    git(sb, repo, ['read-tree', '--index-output', other, 'HEAD~0^{tree}']);
    git(sb, repo, ['rm', '-q', '--cached', 'a/f']);
    const viaEnv = await readIndexEntries({ cwd: repo, env: { ...sb.env, GIT_INDEX_FILE: other } }, ref);
    assert.equal(viaEnv.length, 3, 'GIT_INDEX_FILE names the index read');
    assert.equal((await readIndexEntries(opts, ref)).length, 2);
  }));

test('parseIndexWritten gives the parse writeIndexBuffer kept only while the file is the one written, once', () =>
  withSandbox(async (sb) => {
    const { repo, file } = newRepo(sb);
    for (const f of ['a', 'b']) fs.writeFileSync(path.join(repo, f), `${f}\n`);
    git(sb, repo, ['add', '-A']);
    const parsed = parseIndex(file, 'sha1');
    writeIndexBuffer(file, parsed, undefined, true);
    assert.equal(parseIndexWritten(file, 'sha1'), parsed, 'the kept parse');
    assert.notEqual(parseIndexWritten(file, 'sha1'), parsed, 'taken once: read again after');
    // Not kept unless asked; not for the other format (the file is read as that format: refused).
    writeIndexBuffer(file, parsed);
    assert.notEqual(parseIndexWritten(file, 'sha1'), parsed);
    writeIndexBuffer(file, parsed, undefined, true);
    assert.throws(() => parseIndexWritten(file, 'sha256'), /index/);
    // Replaced by git since (a new inode): the file is read, and is git's.
    writeIndexBuffer(file, parsed, undefined, true);
    fs.writeFileSync(path.join(repo, 'c'), 'c\n');
    git(sb, repo, ['add', 'c']);
    const now = parseIndexWritten(file, 'sha1');
    assert.notEqual(now, parsed);
    assert.equal(now.entries.length, 3);
    // Written in place (the same inode) at the same size, a later time: the file is read.
    const again = parseIndex(file, 'sha1');
    writeIndexBuffer(file, again, undefined, true);
    const st = fs.statSync(file);
    const bytes = fs.readFileSync(file);
    bytes[12] ^= 1; // the first entry's ctime
    fs.writeFileSync(file, bytes);
    fs.utimesSync(file, st.atime, new Date(st.mtimeMs + 1000));
    const read = parseIndexWritten(file, 'sha1');
    assert.notEqual(read, again);
    assert.deepEqual(read.buf, bytes);
  }));
