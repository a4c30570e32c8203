// The resident `git update-ref --stdin` (src/git/ref-updater.ts) and the daemon's writer of
// snapshot refs over it (src/daemon/ref-writer.ts), against the real git: what it writes is what
// `git update-ref -m` writes, a failed transaction writes nothing and the next one works, and a new
// config (a new config object) gets a new git that reads it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RefUpdater } from '../src/git/ref-updater';
import { ResidentRefWriter } from '../src/daemon/ref-writer';
import { readConfig } from '../src/git/config';
import { isXetError } from '../src/errors';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
}
function repo(t: { after(fn: () => void): void }): { d: string; commits: string[] } {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'xet-refwriter-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  git(d, 'init', '-q');
  const commits: string[] = [];
  for (let i = 0; i < 3; i++) {
    git(d, '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-q', '--allow-empty', '-m', `c${i}`);
    commits.push(git(d, 'rev-parse', 'HEAD'));
  }
  return { d, commits };
}
/** A reflog line without its time (the two writers run at different seconds). */
function reflog(d: string, ref: string): string[] {
  const file = path.join(d, '.git', 'logs', ref);
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.replace(/> \d+ [+-]\d{4}\t/, '> T\t'));
}
async function rejectsWith(p: Promise<unknown>, code: string, said: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(isXetError(e), String(e));
    assert.equal(e.code, code);
    assert.match(e.message, said);
    return true;
  });
}

test('one resident update-ref writes transaction after transaction, as git update-ref -m does', async (t) => {
  const { d, commits } = repo(t);
  git(d, 'config', 'core.logAllRefUpdates', 'always');
  const u = new RefUpdater({ cwd: d }, 'xet: capture');
  try {
    for (let i = 0; i < 3; i++) await u.update([{ ref: `refs/xet/snapshots/r${i}`, oid: commits[i] }]);
    // Overwrites, as `update-ref <ref> <new>` does without an old value.
    await u.update([{ ref: 'refs/xet/snapshots/r0', oid: commits[2] }]);
    assert.equal(u.alive, true);
  } finally {
    u.close();
  }
  for (let i = 0; i < 3; i++) git(d, 'update-ref', '-m', 'xet: capture', `refs/xet/by-git/r${i}`, commits[i]);
  git(d, 'update-ref', '-m', 'xet: capture', 'refs/xet/by-git/r0', commits[2]);
  for (let i = 0; i < 3; i++) {
    assert.equal(git(d, 'rev-parse', `refs/xet/snapshots/r${i}`), git(d, 'rev-parse', `refs/xet/by-git/r${i}`));
    assert.deepEqual(reflog(d, `refs/xet/snapshots/r${i}`), reflog(d, `refs/xet/by-git/r${i}`));
  }
  assert.equal(reflog(d, 'refs/xet/snapshots/r0').length, 2);
});

test('a refused transaction writes nothing, says what git said, and the next write starts another git', async (t) => {
  const { d, commits } = repo(t);
  const w = new ResidentRefWriter(
    { cwd: d },
    { commonDir: path.join(d, '.git'), objectsDir: path.join(d, '.git', 'objects') },
  );
  const config = await readConfig({ cwd: d });
  try {
    await w.write('refs/xet/snapshots/a', commits[0], 'xet: capture', config);
    // An object the repository lacks: git refuses at prepare.
    await rejectsWith(
      w.write('refs/xet/snapshots/b', 'f'.repeat(40), 'xet: capture', config),
      'GIT_FAILED',
      /nonexistent object/,
    );
    assert.throws(() => git(d, 'rev-parse', '--verify', '-q', 'refs/xet/snapshots/b'));
    // A ref another writer holds locked: refused, its lock left alone.
    const lock = path.join(d, '.git', 'refs', 'xet', 'snapshots', 'c.lock');
    fs.writeFileSync(lock, '');
    await rejectsWith(w.write('refs/xet/snapshots/c', commits[1], 'xet: capture', config), 'GIT_FAILED', /lock/);
    assert.ok(fs.existsSync(lock));
    fs.rmSync(lock);
    await w.write('refs/xet/snapshots/c', commits[1], 'xet: capture', config);
    assert.equal(git(d, 'rev-parse', 'refs/xet/snapshots/c'), commits[1]);
    // Not a ref this protocol carries as written: refused before git sees it.
    await rejectsWith(w.write('refs/xet/a b', commits[0], 'xet: capture', config), 'USAGE', /not a ref update/);
    await rejectsWith(w.write('refs/xet/x\nupdate', commits[0], 'xet: capture', config), 'USAGE', /not a ref/);
    assert.equal(
      git(d, 'for-each-ref', '--format=%(refname)', 'refs/xet/'),
      'refs/xet/snapshots/a\nrefs/xet/snapshots/c',
    );
  } finally {
    w.close();
  }
});

test('the writer keeps its git while the config object is the same, and starts one that reads a new config', async (t) => {
  const { d, commits } = repo(t);
  const w = new ResidentRefWriter(
    { cwd: d },
    { commonDir: path.join(d, '.git'), objectsDir: path.join(d, '.git', 'objects') },
  );
  try {
    const first = await readConfig({ cwd: d });
    await w.write('refs/xet/snapshots/one', commits[0], 'xet: capture', first);
    git(d, 'config', 'core.logAllRefUpdates', 'always');
    // The same object: the same git, started before the change (the daemon passes the object its
    // config memo returns, a new one whenever a config file changed).
    await w.write('refs/xet/snapshots/two', commits[1], 'xet: capture', first);
    assert.deepEqual(reflog(d, 'refs/xet/snapshots/two'), []);
    await w.write('refs/xet/snapshots/three', commits[2], 'xet: capture', await readConfig({ cwd: d }));
    assert.equal(reflog(d, 'refs/xet/snapshots/three').length, 1);
    assert.match(reflog(d, 'refs/xet/snapshots/three')[0], /\txet: capture$/);
  } finally {
    w.close();
  }
});

/** The pids of this process's `git update-ref` children. */
function updateRefChildren(): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (ppid === process.pid && cmd.includes('update-ref')) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

// Review 42: what a resident git does differently from one started for the write.
test('a write that logs gets its own git (a resident one dates every entry at its start), a closed writer starts none, a pack gone replaces it', async (t) => {
  const { d, commits } = repo(t);
  const dirs = { commonDir: path.join(d, '.git'), objectsDir: path.join(d, '.git', 'objects') };
  const w = new ResidentRefWriter({ cwd: d }, dirs);
  try {
    // core.logAllRefUpdates=always: each entry dated when it is written.
    git(d, 'config', 'core.logAllRefUpdates', 'always');
    const config = await readConfig({ cwd: d });
    const seconds = (ref: string) =>
      Number(/> (\d+) [+-]\d{4}\t/.exec(fs.readFileSync(path.join(d, '.git', 'logs', ref), 'utf8'))![1]);
    await w.write('refs/xet/snapshots/l1', commits[0], 'xet: capture', config);
    await new Promise((r) => setTimeout(r, 2100));
    await w.write('refs/xet/snapshots/l2', commits[1], 'xet: capture', config);
    assert.ok(
      seconds('refs/xet/snapshots/l2') - seconds('refs/xet/snapshots/l1') >= 2,
      'the second entry has its own date',
    );
    assert.equal(w.resident, false, 'no resident git for writes that log');
    git(d, 'config', '--unset', 'core.logAllRefUpdates');
    const plain = await readConfig({ cwd: d });
    // A pack the resident git mapped, removed by a repack: the next write has a new git.
    git(d, 'gc', '-q');
    await w.write('refs/xet/snapshots/p1', commits[0], 'xet: capture', plain);
    assert.equal(w.resident, true);
    const [first] = updateRefChildren();
    git(d, 'commit', '-q', '--allow-empty', '-m', 'more');
    git(d, 'repack', '-a', '-d', '-q');
    await w.write('refs/xet/snapshots/p2', commits[1], 'xet: capture', plain);
    const now = updateRefChildren();
    assert.equal(now.length, 1);
    assert.notEqual(now[0], first, 'a new resident git after a pack it may have mapped went away');
    assert.ok(!fs.readFileSync(`/proc/${now[0]}/maps`, 'utf8').includes('(deleted)'));
    // Closed (the daemon stopping while a capture finishes): a late write gets its own git.
    w.close();
    await w.write('refs/xet/snapshots/late', commits[2], 'xet: capture', plain);
    assert.equal(git(d, 'rev-parse', 'refs/xet/snapshots/late'), commits[2]);
    assert.equal(w.resident, false);
    const until = Date.now() + 5000;
    while (updateRefChildren().length && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(updateRefChildren(), [], 'no update-ref child left once closed');
  } finally {
    w.close();
  }
});
