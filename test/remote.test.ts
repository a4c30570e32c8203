// git-remote-xet and publication end to end: the real git drives the helper (clone, fetch, push,
// ls-remote) against directory stores; `git xet push/fetch` against stores and a real git daemon;
// racing pushers, helpers SIGKILLed at each step, corrupted and forged stores, two agents handing
// work back and forth. Runs as root (CI does); fixtures live on tmpfs.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git, gitTry, initRepo, Repo } from './support/git';
import { withMountSandbox } from './support/mounts';
import {
  appendCraftedState,
  assertLinearLog,
  dirSnapshot,
  flipByte,
  groupKillerShim,
  lsRemote,
  publications,
  readStateLog,
  runAsync,
  startDaemon,
} from './support/remote';
import { REMOTE_HELPER_DIR, type Sandbox } from './support/sandbox';
import { XET_BIN, capture, describeRun, expectError, expectExit, parseJson, verify, xet } from './support/xet';
import { killAt } from './support/faults';

const isRoot = process.getuid?.() === 0;
const rootOnly = isRoot ? false : 'read-only bind mounts need root (CI runs as root)';

interface G {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** git in cwd, whatever its exit status, with strings. */
function g(sb: Sandbox, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): G {
  const r = gitTry(sb, cwd, args, { env });
  return { status: r.status, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
}

function show(what: string, r: G): string {
  return `${what} exited ${r.status}\nstdout: ${r.stdout.slice(0, 3000)}\nstderr: ${r.stderr.slice(0, 3000)}`;
}

function ok(sb: Sandbox, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): G {
  const r = g(sb, cwd, args, env);
  assert.equal(r.status, 0, show(`git ${args.join(' ')} (in ${cwd})`, r));
  return r;
}

function fails(sb: Sandbox, cwd: string, args: string[], env: NodeJS.ProcessEnv = {}): G {
  const r = g(sb, cwd, args, env);
  assert.notEqual(r.status, 0, show(`git ${args.join(' ')} (in ${cwd}) should fail`, r));
  return r;
}

const xurl = (store: string) => `xet::${store}`;

/** A source repository whose default branch is `trunk`, with a side branch that sorts before it. */
function source(sb: Sandbox, name = 'src'): { r: Repo; trunk: string; side: string } {
  const r = initRepo(sb, name, ['-b', 'trunk']);
  r.commit('one', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n' });
  r.git('checkout', '-q', '-b', 'aaa-side');
  const side = r.commit('side', { 'side.txt': 'side\n' });
  r.git('checkout', '-q', 'trunk');
  const trunk = r.commit('two', { 'a.txt': 'a2\n' });
  return { r, trunk, side };
}

/** A store with trunk (HEAD) and aaa-side pushed from a fresh source. */
function seededStore(sb: Sandbox, name = 'store'): { store: string; r: Repo; trunk: string; side: string } {
  const s = source(sb, `${name}-src`);
  const store = sb.path(name);
  ok(sb, s.r.dir, ['push', '-q', xurl(store), 'trunk', 'aaa-side']);
  return { store, ...s };
}

function clone(sb: Sandbox, url: string, name: string, cwd = sb.root): Repo {
  ok(sb, cwd, ['clone', '-q', url, name]);
  return new Repo(sb, path.resolve(cwd, name));
}

function fsckStore(sb: Sandbox, store: string): { status: number | null; out: { ok: boolean; problems: string[] } } {
  const r = xet(sb, sb.root, ['fsck', '--store', store, '--json']);
  return { status: r.status, out: parseJson(r) };
}

function assertStoreOk(sb: Sandbox, store: string): void {
  const f = fsckStore(sb, store);
  assert.equal(f.status, 0, `fsck --store ${store}: ${JSON.stringify(f.out)}`);
  assert.equal(f.out.ok, true);
  assertLinearLog(store);
}

function mapObj(m: Map<string, string>): Record<string, string> {
  return Object.fromEntries([...m.entries()].sort());
}

function pushIdCount(store: string, id: string): number {
  return readStateLog(store).filter((s) => s.outer.state.pushId === id).length;
}

/** Run the helper by hand, speaking the protocol on stdin, as git would. */
function helperSession(sb: Sandbox, cwd: string, url: string, input: string, env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(path.join(REMOTE_HELPER_DIR, 'git-remote-xet'), ['origin', url], {
    cwd,
    env: { ...sb.env, ...env },
    input,
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// ---------------------------------------------------------------------------------------------

test('clone, fetch and ls-remote through xet::/abs, xet::file:// and relative paths; HEAD is the pushed default', async () => {
  await withMountSandbox((sb) => {
    const { store, r, trunk, side } = seededStore(sb);
    // HEAD follows the pusher's branch (trunk), not the first branch name (aaa-side) nor main/master.
    const sym = ok(sb, r.dir, ['ls-remote', '--symref', xurl(store)]).stdout;
    assert.match(sym, /^ref: refs\/heads\/trunk\tHEAD$/m);
    assert.deepEqual(mapObj(lsRemote(sb, r.dir, xurl(store))), {
      HEAD: trunk,
      'refs/heads/aaa-side': side,
      'refs/heads/trunk': trunk,
    });

    const spaced = sb.path('my store');
    ok(sb, r.dir, ['push', '-q', xurl(spaced), 'trunk', 'aaa-side']);
    const urls = [
      ['abs', xurl(store)],
      ['file', `xet::file://${store}`],
      ['file-localhost', `xet::file://localhost${store}`],
      ['file-escaped', `xet::file://${spaced.replace(/ /g, '%20')}`],
    ];
    for (const [name, url] of urls) {
      const c = clone(sb, url, `clone-${name}`);
      assert.equal(c.git('symbolic-ref', 'HEAD').trim(), 'refs/heads/trunk', `${name}: checked-out branch`);
      assert.equal(c.git('rev-parse', 'HEAD').trim(), trunk, name);
      assert.equal(c.git('rev-parse', 'refs/remotes/origin/aaa-side').trim(), side, name);
      assert.equal(c.git('symbolic-ref', 'refs/remotes/origin/HEAD').trim(), 'refs/remotes/origin/trunk', name);
      assert.equal(fs.readFileSync(c.p('a.txt'), 'utf8'), 'a2\n');
      assert.equal(c.git('status', '--porcelain'), '');
      ok(sb, c.dir, ['fsck', '--strict']);
    }

    // A relative path is resolved against the working directory (the repository's top level).
    const probe = initRepo(sb, 'probe');
    assert.deepEqual(mapObj(lsRemote(sb, probe.dir, 'xet::../store')), mapObj(lsRemote(sb, r.dir, xurl(store))));
    const rel = clone(sb, 'xet::store', 'clone-rel');
    assert.equal(rel.git('rev-parse', 'HEAD').trim(), trunk);
    assert.equal(rel.git('symbolic-ref', 'HEAD').trim(), 'refs/heads/trunk');

    // fetch brings new commits, new branches and deletions (with --prune).
    const c = new Repo(sb, sb.path('clone-abs'));
    const next = r.commit('three', { 'c.txt': 'c\n' });
    r.git('branch', 'later');
    ok(sb, r.dir, ['push', '-q', xurl(store), 'trunk', 'later', ':aaa-side']);
    ok(sb, c.dir, ['fetch', '--prune', 'origin']);
    assert.equal(c.git('rev-parse', 'refs/remotes/origin/trunk').trim(), next);
    assert.equal(c.git('rev-parse', 'refs/remotes/origin/later').trim(), next);
    assert.equal(gitTry(sb, c.dir, ['rev-parse', '-q', '--verify', 'refs/remotes/origin/aaa-side']).status, 1);
    ok(sb, c.dir, ['pull', '-q', '--ff-only']);
    assert.equal(c.git('rev-parse', 'HEAD').trim(), next);
    // fetch by explicit URL into FETCH_HEAD.
    ok(sb, probe.dir, ['fetch', '-q', xurl(store), 'trunk']);
    assert.equal(probe.git('rev-parse', 'FETCH_HEAD').trim(), next);
  });
});

test('a clone from a relative xet:: path keeps working: fetch and push from inside the clone', async () => {
  await withMountSandbox((sb) => {
    const { store, r } = seededStore(sb);
    const c = clone(sb, 'xet::store', 'rel');
    const next = r.commit('after clone', { 'n.txt': 'n\n' });
    ok(sb, r.dir, ['push', '-q', xurl(store), 'trunk']);
    // git records the URL as given; the store must still be found from the clone (git's own
    // relative clones record an absolute path).
    const f = g(sb, c.dir, ['fetch', 'origin']);
    assert.equal(f.status, 0, show('git fetch in a clone made from xet::store', f));
    assert.equal(c.git('rev-parse', 'refs/remotes/origin/trunk').trim(), next);
  });
});

test('ls-remote works outside any repository, as it does for git transports', async () => {
  await withMountSandbox((sb) => {
    const { store, trunk } = seededStore(sb);
    const plain = sb.path('not-a-repo');
    fs.mkdirSync(plain);
    const r = g(sb, plain, ['ls-remote', xurl(store)]);
    assert.equal(r.status, 0, show('git ls-remote xet::<abs> outside a repository', r));
    assert.match(r.stdout, new RegExp(`^${trunk}\trefs/heads/trunk$`, 'm'));
  });
});

test('a store of sha256 objects clones into a sha256 repository (:object-format)', async () => {
  await withMountSandbox((sb) => {
    const r = initRepo(sb, 'src256', ['-b', 'dev', '--object-format=sha256']);
    const head = r.commit('one', { 'a.txt': 'a\n' });
    const store = sb.path('store256');
    ok(sb, r.dir, ['push', '-q', xurl(store), 'dev']);
    // git 2.39 asks with a bare `option object-format` (no value) and reads oids in the format the
    // helper names; without `:object-format sha256` it takes 40 of the 64 hex digits.
    const s = helperSession(sb, r.dir, xurl(store), 'option object-format\nlist\n\n');
    assert.equal(s.stdout, `ok\n:object-format sha256\n@refs/heads/dev HEAD\n${head} refs/heads/dev\n\n`, s.stderr);
    const ls = lsRemote(sb, r.dir, xurl(store));
    assert.equal(ls.get('refs/heads/dev'), head);
    const c = g(sb, sb.root, ['clone', xurl(store), 'c256']);
    assert.equal(c.status, 0, show('git clone of a sha256 store', c));
    assert.equal(git(sb, sb.path('c256'), ['rev-parse', '--show-object-format']).trim(), 'sha256');
    assert.equal(git(sb, sb.path('c256'), ['rev-parse', 'HEAD']).trim(), head);
  });
});

test('the helper speaks the protocol: capabilities, every option, list with HEAD and object-format', async () => {
  await withMountSandbox((sb) => {
    const { store, r, trunk, side } = seededStore(sb);
    const caps = helperSession(sb, r.dir, xurl(store), 'capabilities\n\n');
    assert.equal(caps.status, 0, caps.stderr);
    assert.deepEqual(caps.stdout.split('\n').filter(Boolean).sort(), ['fetch', 'object-format', 'option', 'push']);
    const opts = [
      'option verbosity 1',
      'option progress false',
      'option dry-run true',
      'option atomic true',
      'option cas "refs/heads/f\\303\\253ature-\\303\\274:0000000000000000000000000000000000000000"',
      'option cloning true',
      'option followtags true',
      'option object-format true',
      'option no-such-option x',
      'list',
      '',
    ];
    const s = helperSession(sb, r.dir, xurl(store), `${opts.join('\n')}\n`);
    assert.equal(s.status, 0, s.stderr);
    assert.equal(
      s.stdout,
      [
        ...Array(8).fill('ok'),
        'unsupported',
        ':object-format sha1',
        '@refs/heads/trunk HEAD',
        `${side} refs/heads/aaa-side`,
        `${trunk} refs/heads/trunk`,
        '',
        '',
      ].join('\n'),
    );
  });
});

test('helper-side compare-and-swap on a non-ASCII branch and --atomic collateral failures', async () => {
  await withMountSandbox((sb) => {
    const { store, r, trunk, side } = seededStore(sb);
    const ref = 'refs/heads/fëature-ü';
    r.git('branch', 'fëature-ü', 'trunk');
    ok(sb, r.dir, ['push', '-q', xurl(store), 'fëature-ü']);
    const next = r.commit('more', { 'm.txt': 'm\n' });
    const stale = side; // the branch is at `trunk` in the store
    const quoted = 'refs/heads/f\\303\\253ature-\\303\\274';
    const before = dirSnapshot(path.join(store, 'state'));
    // Stale expectation (git quotes the non-ASCII name): refused as "stale info"; atomic drags the other down.
    const s = helperSession(
      sb,
      r.dir,
      xurl(store),
      [
        'option atomic true',
        `option cas "${quoted}:${stale}"`,
        `push +refs/heads/trunk:${ref}`,
        'push refs/heads/trunk:refs/heads/also',
        '',
        '',
      ].join('\n'),
    );
    assert.equal(s.status, 0, s.stderr);
    assert.equal(s.stdout, `ok\nok\nerror ${ref} stale info\nerror refs/heads/also atomic push failed\n\n`);
    assert.deepEqual(dirSnapshot(path.join(store, 'state')), before, 'nothing published');
    // The right expectation: the forced update is accepted.
    const s2 = helperSession(
      sb,
      r.dir,
      xurl(store),
      [`option cas "${quoted}:${trunk}"`, `push +refs/heads/trunk:${ref}`, '', ''].join('\n'),
    );
    assert.equal(s2.stdout, `ok\nok ${ref}\n\n`, s2.stderr);
    assert.equal(lsRemote(sb, r.dir, xurl(store)).get(ref), next);
    assertStoreOk(sb, store);
  });
});

test('push: new branch, old:new, HEAD:new, delete, forced, extra remote refs, --all, tags and follow-tags', async () => {
  await withMountSandbox((sb) => {
    const { store, trunk } = seededStore(sb);
    const url = xurl(store);
    const c = clone(sb, url, 'c');
    c.git('branch', 'feature');
    let out = ok(sb, c.dir, ['push', 'origin', 'feature']);
    assert.match(out.stderr, /\* \[new branch\]\s+feature -> feature/);
    ok(sb, c.dir, ['push', '-q', 'origin', 'trunk:copy']);
    const h = c.commit('head commit', { 'h.txt': 'h\n' });
    ok(sb, c.dir, ['push', '-q', 'origin', 'HEAD:refs/heads/from-head']);
    let ls = lsRemote(sb, c.dir, url);
    assert.equal(ls.get('refs/heads/feature'), trunk);
    assert.equal(ls.get('refs/heads/copy'), trunk);
    assert.equal(ls.get('refs/heads/from-head'), h);
    assert.equal(ls.get('refs/heads/trunk'), trunk, 'trunk did not move');

    out = ok(sb, c.dir, ['push', 'origin', ':copy']);
    assert.match(out.stderr, /- \[deleted\]\s+copy/);
    ok(sb, c.dir, ['push', '-q', 'origin', '--delete', 'feature']);
    ls = lsRemote(sb, c.dir, url);
    assert.equal(ls.has('refs/heads/copy'), false);
    assert.equal(ls.has('refs/heads/feature'), false);
    const gone = fails(sb, c.dir, ['push', 'origin', ':never-was']);
    assert.match(gone.stderr, /never-was/);

    // Someone else adds a branch: ours still pushes and theirs stays.
    const other = clone(sb, url, 'other');
    const extra = other.commit('extra', { 'e.txt': 'e\n' });
    ok(sb, other.dir, ['push', '-q', 'origin', 'HEAD:refs/heads/extra']);
    ok(sb, c.dir, ['push', '-q', 'origin', 'trunk']); // fast-forward to h
    ls = lsRemote(sb, c.dir, url);
    assert.equal(ls.get('refs/heads/trunk'), h);
    assert.equal(ls.get('refs/heads/extra'), extra);

    // Forced push rewrites; without force it is refused.
    c.git('commit', '-q', '--amend', '-m', 'rewritten');
    const rewritten = c.git('rev-parse', 'HEAD').trim();
    const nf = fails(sb, c.dir, ['push', 'origin', 'trunk']);
    assert.match(nf.stderr, /! \[rejected\]\s+trunk -> trunk \(non-fast-forward\)/);
    out = ok(sb, c.dir, ['push', '--force', 'origin', 'trunk']);
    assert.match(out.stderr, /\+ [0-9a-f]+\.\.\.[0-9a-f]+ trunk -> trunk \(forced update\)/);
    assert.equal(lsRemote(sb, c.dir, url).get('refs/heads/trunk'), rewritten);

    // --all: every local branch.
    c.git('branch', 'b1');
    c.git('branch', 'b2', 'HEAD~1');
    ok(sb, c.dir, ['push', '-q', '--all', 'origin']);
    ls = lsRemote(sb, c.dir, url);
    for (const b of c.git('for-each-ref', '--format=%(refname)', 'refs/heads').trim().split('\n')) {
      assert.equal(ls.get(b), c.git('rev-parse', b).trim(), `--all pushed ${b}`);
    }

    // Tags: lightweight and annotated (the tag object itself is published), follow-tags.
    c.git('tag', 'light');
    c.git('tag', '-a', 'v1', '-m', 'release 1');
    ok(sb, c.dir, ['push', '-q', 'origin', 'light', 'v1']);
    ls = lsRemote(sb, c.dir, url);
    const v1 = c.git('rev-parse', 'refs/tags/v1').trim();
    assert.equal(ls.get('refs/tags/v1'), v1);
    assert.equal(c.git('cat-file', '-t', v1).trim(), 'tag');
    assert.equal(ls.get('refs/tags/light'), rewritten);
    const t = c.commit('for follow', { 'f.txt': 'f\n' });
    c.git('tag', '-a', 'v-follow', '-m', 'followed');
    ok(sb, c.dir, ['push', '-q', '--follow-tags', 'origin', 'trunk']);
    ls = lsRemote(sb, c.dir, url);
    assert.equal(ls.get('refs/heads/trunk'), t);
    assert.equal(ls.get('refs/tags/v-follow'), c.git('rev-parse', 'refs/tags/v-follow').trim(), '--follow-tags');
    // Moving a tag needs force.
    c.git('tag', '-f', 'v1', 'HEAD~1');
    const tagRej = fails(sb, c.dir, ['push', 'origin', 'v1']);
    assert.match(tagRej.stderr, /! \[rejected\]\s+v1 -> v1 \(already exists\)/);
    assert.equal(lsRemote(sb, c.dir, url).get('refs/tags/v1'), v1);

    // Fetching: tags come along (followtags), annotated ones intact.
    const f = initRepo(sb, 'fetcher');
    f.git('remote', 'add', 'origin', url);
    ok(sb, f.dir, ['fetch', 'origin']);
    assert.equal(f.git('rev-parse', 'refs/tags/v1').trim(), v1);
    assert.equal(f.git('rev-parse', 'refs/tags/v-follow').trim(), c.git('rev-parse', 'refs/tags/v-follow').trim());
    assert.equal(f.git('cat-file', 'tag', 'v1').includes('release 1'), true);
    ok(sb, f.dir, ['fsck', '--strict']);
    assertStoreOk(sb, store);
  });
});

function signingSetup(sb: Sandbox, r: Repo): { verifyEnv: NodeJS.ProcessEnv } | string {
  if (spawnSync('ssh-keygen', ['-?'], { encoding: 'utf8' }).error === undefined) {
    const key = sb.path('signing-key');
    const k = spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'xet-test', '-f', key]);
    if (k.status === 0) {
      r.git('config', 'gpg.format', 'ssh');
      r.git('config', 'user.signingkey', `${key}.pub`);
      const pub = fs.readFileSync(`${key}.pub`, 'utf8').trim();
      const allowed = sb.path('allowed-signers');
      fs.writeFileSync(allowed, `xet-test@example.invalid ${pub}\n`);
      return {
        verifyEnv: {
          GIT_CONFIG_COUNT: '2',
          GIT_CONFIG_KEY_0: 'gpg.format',
          GIT_CONFIG_VALUE_0: 'ssh',
          GIT_CONFIG_KEY_1: 'gpg.ssh.allowedSignersFile',
          GIT_CONFIG_VALUE_1: allowed,
        },
      };
    }
  }
  if (spawnSync('gpg', ['--version']).status !== 0) return 'neither ssh-keygen nor gpg is available';
  return 'ssh-keygen could not make a key and gpg keys are not set up here';
}

test('a signed tag travels through the store with its signature intact', async (t) => {
  await withMountSandbox((sb) => {
    const { store } = seededStore(sb);
    const c = clone(sb, xurl(store), 'c');
    const sig = signingSetup(sb, c);
    if (typeof sig === 'string') {
      process.stderr.write(`# skipping signed tags: ${sig}\n`);
      t.skip(sig);
      return;
    }
    c.git('tag', '-s', 'v-signed', '-m', 'signed release');
    ok(sb, c.dir, ['tag', '-v', 'v-signed'], sig.verifyEnv);
    ok(sb, c.dir, ['push', '-q', 'origin', 'v-signed']);
    const d = clone(sb, xurl(store), 'd');
    assert.equal(d.git('rev-parse', 'v-signed').trim(), c.git('rev-parse', 'v-signed').trim());
    const v = ok(sb, d.dir, ['tag', '-v', 'v-signed'], sig.verifyEnv);
    assert.match(v.stderr, /Good "git" signature/);
  });
});

test('refusals: fetch first, non-fast-forward with hints, atomic collateral, leases on fëature-ü, dry-run', async () => {
  await withMountSandbox((sb) => {
    const { store } = seededStore(sb);
    const url = xurl(store);
    const x = clone(sb, url, 'x');
    const y = clone(sb, url, 'y');
    x.commit('x1', { 'x.txt': 'x\n' });
    ok(sb, x.dir, ['push', '-q', 'origin', 'trunk']);
    y.commit('y1', { 'y.txt': 'y\n' });
    let before = lsRemote(sb, y.dir, url);
    const ff = fails(sb, y.dir, ['push', 'origin', 'trunk']);
    assert.match(ff.stderr, /! \[rejected\]\s+trunk -> trunk \(fetch first\)/);
    assert.match(ff.stderr, /hint: Updates were rejected because the remote contains work that you do/);
    assert.match(ff.stderr, /error: failed to push some refs to 'xet::/);
    ok(sb, y.dir, ['fetch', '-q', 'origin']);
    const nff = fails(sb, y.dir, ['push', 'origin', 'trunk']);
    assert.match(nff.stderr, /! \[rejected\]\s+trunk -> trunk \(non-fast-forward\)/);
    assert.match(nff.stderr, /hint: Updates were rejected because the tip of your current branch is behind/);
    assert.deepEqual(lsRemote(sb, y.dir, url), before, 'refused pushes change nothing');

    // --atomic: one rejected ref drags the others down, and nothing reaches the store.
    y.git('branch', 'atomic-new');
    let states = readStateLog(store).length;
    const at = fails(sb, y.dir, ['push', '--atomic', 'origin', 'trunk', 'atomic-new']);
    assert.match(at.stderr, /! \[(remote )?rejected\]\s+atomic-new -> atomic-new \(atomic push failed\)/);
    assert.deepEqual(lsRemote(sb, y.dir, url), before);
    assert.equal(readStateLog(store).length, states);
    // ...also when the refusal comes from the helper (a create-once ref, even forced).
    const one = y.git('rev-parse', 'HEAD~1').trim();
    ok(sb, y.dir, ['push', '-q', 'origin', `${one}:refs/xet/snapshots/s1`]);
    before = lsRemote(sb, y.dir, url);
    states = readStateLog(store).length;
    const at2 = fails(sb, y.dir, ['push', '--atomic', 'origin', '+HEAD:refs/xet/snapshots/s1', 'HEAD:refs/heads/at2']);
    assert.match(at2.stderr, /refs\/xet\/snapshots\/s1 \((already exists|.*)\)/);
    assert.match(at2.stderr, /HEAD -> at2 \(atomic push failed\)/);
    assert.deepEqual(lsRemote(sb, y.dir, url), before, '--atomic: nothing updated');
    assert.equal(readStateLog(store).length, states);
    // Without --atomic the other ref goes through and the create-once one still does not move.
    const na = fails(sb, y.dir, ['push', 'origin', '+HEAD:refs/xet/snapshots/s1', 'HEAD:refs/heads/at2']);
    assert.match(na.stderr, /refs\/xet\/snapshots\/s1 \(already exists\)/);
    const after = lsRemote(sb, y.dir, url);
    assert.equal(after.get('refs/xet/snapshots/s1'), one);
    assert.equal(after.get('refs/heads/at2'), y.git('rev-parse', 'HEAD').trim());
    // Handoff refs are never deleted by a push; snapshot refs may be (drop --remote, issue 9).
    ok(sb, y.dir, ['push', '-q', 'origin', `${one}:refs/xet/handoffs/h1`]);
    const del = fails(sb, y.dir, ['push', 'origin', ':refs/xet/handoffs/h1']);
    assert.match(del.stderr, /h1 \(create-once ref cannot be deleted\)/);
    assert.equal(lsRemote(sb, y.dir, url).get('refs/xet/handoffs/h1'), one, 'handoff refs are never deleted');
    ok(sb, y.dir, ['push', '-q', 'origin', ':refs/xet/snapshots/s1']);
    assert.equal(lsRemote(sb, y.dir, url).has('refs/xet/snapshots/s1'), false, 'snapshot refs may be deleted');

    // --force-with-lease on a branch with a non-ASCII name.
    const br = 'fëature-ü';
    x.git('checkout', '-q', '-b', br);
    const base = x.commit('feature base', { 'fe.txt': '1\n' });
    ok(sb, x.dir, ['push', '-q', 'origin', br]);
    x.git('commit', '-q', '--amend', '-m', 'feature rewritten');
    const rewritten = x.git('rev-parse', 'HEAD').trim();
    const lease = ok(sb, x.dir, ['push', `--force-with-lease=refs/heads/${br}:${base}`, 'origin', br]);
    assert.match(lease.stderr, /forced update/);
    assert.equal(lsRemote(sb, x.dir, url).get(`refs/heads/${br}`), rewritten);
    // Someone else moves it; a lease on what we last saw is stale.
    const z = clone(sb, url, 'z');
    z.git('checkout', '-q', br);
    const theirs = z.commit('theirs', { 'z.txt': 'z\n' });
    ok(sb, z.dir, ['push', '-q', 'origin', br]);
    x.git('commit', '-q', '--amend', '-m', 'feature rewritten again');
    const staleLease = fails(sb, x.dir, ['push', `--force-with-lease=${br}:${rewritten}`, 'origin', br]);
    assert.match(staleLease.stderr, /\(stale info\)/);
    assert.equal(lsRemote(sb, x.dir, url).get(`refs/heads/${br}`), theirs);
    // Plain --force-with-lease uses the remote-tracking ref, which is stale too.
    const staleTracking = fails(sb, x.dir, ['push', '--force-with-lease', 'origin', br]);
    assert.match(staleTracking.stderr, /\(stale info\)/);
    assert.equal(lsRemote(sb, x.dir, url).get(`refs/heads/${br}`), theirs);

    // --dry-run changes nothing in the store, whatever it would do.
    const bytes = dirSnapshot(store);
    const dry = ok(sb, x.dir, ['push', '--dry-run', 'origin', 'HEAD:refs/heads/dry', ':at2', `+${br}`]);
    assert.match(dry.stderr, /\[new branch\]\s+HEAD -> dry/);
    assert.deepEqual(dirSnapshot(store), bytes, '--dry-run wrote nothing');
    assert.equal(lsRemote(sb, x.dir, url).has('refs/heads/dry'), false);
    // ...not even the first push to a store that does not exist yet.
    const fresh = sb.path('dry-store');
    ok(sb, x.dir, ['push', '--dry-run', xurl(fresh), 'HEAD:refs/heads/dry']);
    assert.equal(fs.existsSync(fresh), false, '--dry-run created no store');
    assertStoreOk(sb, store);
  });
});

test('a helper SIGKILLed after the pack, after the state or before the reply: git reports failure, retry converges', async () => {
  await withMountSandbox((sb) => {
    const { store } = seededStore(sb);
    const url = xurl(store);
    const c = clone(sb, url, 'c');
    for (const point of ['after-pack', 'after-state', 'before-reply']) {
      const tip = c.commit(`tip ${point}`, { [`${point}.txt`]: `${point}\n` });
      const ref = `refs/heads/die-${point}`;
      const statesBefore = readStateLog(store).length;
      const r = fails(sb, c.dir, ['push', 'origin', `HEAD:${ref}`], { GIT_XET_TEST_DIE_AT: point });
      assert.match(r.stderr, /error: failed to push some refs|died of signal|fatal/, `${point}: git says it failed`);
      assert.doesNotMatch(r.stderr, /\[new branch\]/, `${point}: git does not report success`);
      assertStoreOk(sb, store);
      const landed = lsRemote(sb, c.dir, url).get(ref);
      if (point === 'after-pack') {
        assert.equal(landed, undefined, 'killed before the state: nothing published');
        assert.equal(readStateLog(store).length, statesBefore);
      } else {
        assert.equal(landed, tip, `${point}: the state was written, so the ref is there`);
        assert.equal(readStateLog(store).length, statesBefore + 1);
      }
      // Retrying converges, and does not add a state when there is nothing left to do.
      ok(sb, c.dir, ['push', '-q', 'origin', `HEAD:${ref}`]);
      assert.equal(lsRemote(sb, c.dir, url).get(ref), tip);
      assert.equal(readStateLog(store).length, statesBefore + 1, `${point}: one state for the push in all`);
      assertStoreOk(sb, store);
    }
    // Fetch killed while importing (before-reply is a push point; a fetch from a vanished store fails).
    const d = clone(sb, url, 'd');
    fs.renameSync(store, `${store}.away`);
    const lost = fails(sb, d.dir, ['fetch', 'origin']);
    assert.match(lost.stderr, /STORE_UNAVAILABLE/);
    fs.renameSync(`${store}.away`, store);
    ok(sb, d.dir, ['fsck', '--strict']);
  });
});

test('8 processes racing pushes to one store: every reported success is kept, the log is linear', async () => {
  await withMountSandbox(async (sb) => {
    const { store, trunk } = seededStore(sb);
    const url = xurl(store);
    const workers = Array.from({ length: 8 }, (_, i) => {
      const c = clone(sb, url, `w${i}`);
      c.commit(`worker ${i}`, { [`w${i}.txt`]: `${i}\n` });
      return c;
    });
    const shared = (i: number) => i < 4;
    const script = (i: number) =>
      shared(i)
        ? [
            'for n in $(seq 1 20); do',
            '  if git push origin HEAD:refs/heads/shared 2>err; then echo "ok $(git rev-parse HEAD)"; exit 0; fi',
            '  echo "rejected $(tr "\\n" " " < err)"',
            '  git pull -q --rebase origin shared >/dev/null 2>&1 || echo "pull-failed"',
            'done',
            'exit 1',
          ].join('\n')
        : [
            'set -e',
            `git push origin HEAD:refs/heads/own-${i} 2>err || { echo "rejected $(tr "\\n" " " < err)"; exit 1; }`,
            'echo "ok $(git rev-parse HEAD)"',
            `echo second > second-${i}.txt && git add . && git commit -q -m second`,
            `git push origin HEAD:refs/heads/own-${i} 2>err || { echo "rejected $(tr "\\n" " " < err)"; exit 1; }`,
            'echo "ok $(git rev-parse HEAD)"',
          ].join('\n');
    const results = await Promise.all(
      workers.map((w, i) => runAsync(sb, w.dir, 'bash', ['-c', script(i)], {}, 80_000)),
    );
    const oks: { i: number; oid: string }[] = [];
    results.forEach((r, i) => {
      for (const line of r.stdout.split('\n')) {
        if (line.startsWith('ok ')) oks.push({ i, oid: line.slice(3) });
        else if (line.startsWith('rejected ')) {
          // Every refusal says why, in git's own words.
          assert.match(line, /! \[(remote )?rejected\]\s+\S+ -> \S+ \([^)]+\)/, `worker ${i}: ${line}`);
        }
      }
      assert.equal(r.status, 0, `worker ${i} did not get its work in:\n${r.stdout}\n${r.stderr}`);
    });
    const fresh = clone(sb, url, 'final');
    const final = lsRemote(sb, fresh.dir, url);
    for (let i = 4; i < 8; i++) {
      const mine = oks.filter((o) => o.i === i);
      assert.equal(mine.length, 2, `own-branch worker ${i} pushed twice`);
      assert.equal(final.get(`refs/heads/own-${i}`), mine[1].oid);
    }
    const sharedOks = oks.filter((o) => shared(o.i));
    assert.equal(sharedOks.length, 4);
    for (const o of sharedOks) {
      const anc = gitTry(sb, fresh.dir, ['merge-base', '--is-ancestor', o.oid, 'refs/remotes/origin/shared']);
      assert.equal(anc.status, 0, `reported-successful ${o.oid} (worker ${o.i}) is in the final shared history`);
    }
    assert.ok(sharedOks.some((o) => o.oid === final.get('refs/heads/shared')));
    assert.equal(final.get('refs/heads/trunk'), trunk);
    // One state per successful push, chained; every push has its own id.
    const log = assertLinearLog(store);
    assert.equal(log.length, 1 + oks.length, `states: ${log.length}, successful pushes: ${oks.length}`);
    assert.equal(new Set(log.map((s) => s.outer.state.pushId)).size, log.length);
    assertStoreOk(sb, store);
    ok(sb, fresh.dir, ['fsck', '--strict']);
    const tracked = fresh.git('for-each-ref', '--format=%(refname:short)', 'refs/remotes/origin').split('\n');
    assert.equal(tracked.filter((r) => r.startsWith('origin/own-')).length, 4);
  });
});

test('git xet push killed after the state / after the pack: the next push resolves it, nothing twice', async () => {
  await withMountSandbox((sb) => {
    const a = initRepo(sb, 'a', ['-b', 'trunk']);
    a.commit('one', { 'a.txt': 'a\n' });
    const store = sb.path('store');
    a.git('remote', 'add', 'origin', xurl(store));
    const shim = groupKillerShim(sb);
    const killEnv = (point: string) => ({
      PATH: `${shim}${path.delimiter}${sb.env.PATH}`,
      XET_TEST_KILL_GROUP: '1',
      GIT_XET_TEST_DIE_AT: point,
    });
    const killed = (point: string) => {
      const r = xet(sb, a.dir, ['push', '--json'], { env: killEnv(point), wrap: ['setsid'] });
      assert.equal(r.signal, 'SIGKILL', `git xet push should have been killed:\n${describeRun(r)}`);
      const pending = publications(a.commonDir()).filter((p) => p.state === 'pending');
      assert.equal(pending.length, 1, `one pending publication: ${JSON.stringify(publications(a.commonDir()))}`);
      return pending[0].id;
    };

    // Killed after the state: published, but nobody recorded it.
    const s1 = capture(sb, a.dir);
    const id1 = killed('after-state');
    assert.equal(pushIdCount(store, id1), 1, 'the state carries the publication id');
    assertStoreOk(sb, store);
    let r = xet(sb, a.dir, ['push', '--json']);
    expectExit(r, 0);
    let out = parseJson(r);
    assert.deepEqual(out.resolved, [{ id: id1, state: 'published' }]);
    assert.deepEqual(out.refs, [{ ref: `refs/xet/snapshots/${s1}`, status: 'up-to-date' }]);
    assert.equal(pushIdCount(store, id1), 1, 'published exactly once');
    assert.equal(publications(a.commonDir()).find((p) => p.id === id1)?.state, 'published');

    // Killed after the pack: nothing published; the next push says so and publishes anew.
    a.write('b.txt', 'b\n');
    const s2 = capture(sb, a.dir);
    const statesBefore = readStateLog(store).length;
    const id2 = killed('after-pack');
    assert.equal(readStateLog(store).length, statesBefore);
    assertStoreOk(sb, store);
    r = xet(sb, a.dir, ['push', '--json']);
    expectExit(r, 0);
    out = parseJson(r);
    assert.deepEqual(out.resolved, [{ id: id2, state: 'not-published' }]);
    assert.ok(
      out.refs.some((x: { ref: string; status: string }) => x.ref === `refs/xet/snapshots/${s2}` && x.status === 'new'),
      JSON.stringify(out.refs),
    );
    assert.equal(pushIdCount(store, id2), 0);
    assert.equal(pushIdCount(store, out.publication), 1);
    assert.equal(lsRemote(sb, a.dir, xurl(store)).get(`refs/xet/snapshots/${s2}`), s2);

    // Killed, then the store is unreachable: the outcome cannot be established.
    a.write('c.txt', 'c\n');
    const s3 = capture(sb, a.dir);
    const id3 = killed('after-state');
    fs.renameSync(store, `${store}.away`);
    r = xet(sb, a.dir, ['push', '--json']);
    const err = expectError(r, 'OUTCOME_UNKNOWN', 3);
    assert.deepEqual(err.details.publications, [id3]);
    assert.equal(
      publications(a.commonDir()).find((p) => p.id === id3)?.state,
      'pending',
      'still pending, never guessed',
    );
    fs.renameSync(`${store}.away`, store);
    r = xet(sb, a.dir, ['push', '--json']);
    expectExit(r, 0);
    assert.deepEqual(parseJson(r).resolved, [{ id: id3, state: 'published' }]);
    assert.equal(pushIdCount(store, id3), 1);
    assert.equal(lsRemote(sb, a.dir, xurl(store)).get(`refs/xet/snapshots/${s3}`), s3);

    // Only the helper dies (git xet push survives): it reports failure or resolves it, never twice.
    // A helper runs only when git xet push goes through `git push` (it publishes to a directory
    // store in its own process otherwise, and dies with it, as killed() above).
    for (const point of ['after-state', 'before-reply', 'after-pack']) {
      a.write(`${point}.txt`, `${point}\n`);
      const s = capture(sb, a.dir);
      const res = xet(sb, a.dir, ['push', '--json'], {
        env: { GIT_XET_TEST_DIE_AT: point, GIT_XET_PUSH_THROUGH_GIT: '1' },
      });
      const body = parseJson(res);
      const pub = res.status === 0 ? body.publication : body.error.details.publication;
      assert.ok(res.status === 0 || res.status === 3, describeRun(res));
      if (point === 'after-pack') {
        expectError(res, 'GIT_FAILED', 3); // the helper died: git failed, the store is fine
        assert.equal(pushIdCount(store, pub), 0);
      } else if (res.status === 0) {
        assert.deepEqual(
          body.refs.find((x: { ref: string }) => x.ref === `refs/xet/snapshots/${s}`),
          { ref: `refs/xet/snapshots/${s}`, status: 'new' },
        );
        assert.equal(pushIdCount(store, pub), 1, `${point}: once`);
      }
      const again = xet(sb, a.dir, ['push', '--json']);
      expectExit(again, 0);
      const refs = parseJson(again).refs as { ref: string; status: string }[];
      const mine = refs.find((x) => x.ref === `refs/xet/snapshots/${s}`);
      assert.ok(mine, JSON.stringify(refs));
      if (point !== 'after-pack') assert.equal(mine.status, 'up-to-date', `${point}: not published twice`);
      assert.equal(publications(a.commonDir()).filter((p) => p.state === 'pending').length, 0);
      assertStoreOk(sb, store);
    }
    const ids = readStateLog(store).map((s) => s.outer.state.pushId);
    assert.equal(new Set(ids).size, ids.length, 'no publication id appears twice in the log');
  });
});

test('bad URLs and missing stores fail cleanly with the reason', async () => {
  await withMountSandbox((sb) => {
    const r = initRepo(sb, 'r');
    r.commit('one', { 'a.txt': 'a\n' });
    const bad: [string, RegExp][] = [
      ['xet::', /not a xet store URL|USAGE/],
      ['xet::ftp://x/y', /ftp:\/\/ is not supported|USAGE/],
      ['xet::file://otherhost/p', /otherhost/],
    ];
    for (const [url, why] of bad) {
      assert.match(fails(sb, r.dir, ['ls-remote', url]).stderr, why, `ls-remote ${url}`);
      assert.match(fails(sb, r.dir, ['fetch', url]).stderr, why, `fetch ${url}`);
      assert.match(fails(sb, r.dir, ['push', url, 'HEAD:refs/heads/x']).stderr, why, `push ${url}`);
      assert.match(fails(sb, sb.root, ['clone', url, 'badclone']).stderr, why, `clone ${url}`);
      assert.equal(fs.existsSync(sb.path('badclone')), false, `clone ${url} left nothing`);
    }
    assert.equal(fs.existsSync('/x'), false);

    const missing = sb.path('no-such-store');
    assert.match(fails(sb, r.dir, ['ls-remote', xurl(missing)]).stderr, /STORE_UNAVAILABLE/);
    assert.match(fails(sb, r.dir, ['fetch', xurl(missing)]).stderr, /STORE_UNAVAILABLE/);
    assert.match(fails(sb, sb.root, ['clone', xurl(missing), 'c']).stderr, /STORE_UNAVAILABLE/);
    assert.equal(fs.existsSync(sb.path('c')), false);
    assert.equal(fs.existsSync(missing), false, 'reading never creates a store');
    // A push needs the parent to exist; a non-empty directory that is not a store is left alone.
    const orphan = sb.path('no', 'parent', 'store');
    assert.match(fails(sb, r.dir, ['push', xurl(orphan), 'HEAD:refs/heads/x']).stderr, /STORE_UNAVAILABLE/);
    const notStore = sb.path('not-store');
    fs.mkdirSync(notStore);
    fs.writeFileSync(path.join(notStore, 'precious.txt'), 'mine\n');
    const before = dirSnapshot(notStore);
    assert.match(fails(sb, r.dir, ['push', xurl(notStore), 'HEAD:refs/heads/x']).stderr, /STORE_UNAVAILABLE/);
    assert.match(fails(sb, r.dir, ['ls-remote', xurl(notStore)]).stderr, /STORE_UNAVAILABLE/);
    assert.deepEqual(dirSnapshot(notStore), before);
    // git xet fetch from a missing store: a typed error.
    expectError(xet(sb, r.dir, ['fetch', xurl(missing), '--json']), 'STORE_UNAVAILABLE');
  });
});

test(
  'a read-only store: reads work, pushes fail with STORE_UNAVAILABLE and change nothing',
  { skip: rootOnly },
  async () => {
    await withMountSandbox((sb) => {
      const { store, r } = seededStore(sb);
      const ro = sb.path('ro-store');
      fs.mkdirSync(ro);
      assert.equal(spawnSync('mount', ['--bind', store, ro]).status, 0);
      assert.equal(spawnSync('mount', ['-o', 'remount,bind,ro', ro]).status, 0);
      const before = dirSnapshot(store);
      assert.deepEqual(mapObj(lsRemote(sb, r.dir, xurl(ro))), mapObj(lsRemote(sb, r.dir, xurl(store))));
      const c = clone(sb, xurl(ro), 'c');
      c.commit('new', { 'n.txt': 'n\n' });
      const p = fails(sb, c.dir, ['push', 'origin', 'HEAD:refs/heads/new']);
      assert.match(p.stderr, /STORE_UNAVAILABLE/, 'a read-only store is named as such');
      assert.doesNotMatch(p.stderr, /\n\s+at /, 'no stack trace');
      const del = fails(sb, c.dir, ['push', 'origin', ':aaa-side']);
      assert.match(del.stderr, /STORE_UNAVAILABLE/);
      assert.deepEqual(dirSnapshot(store), before);
      capture(sb, c.dir);
      expectError(xet(sb, c.dir, ['push', '--json']), 'STORE_UNAVAILABLE');
      assert.deepEqual(dirSnapshot(store), before);
    });
  },
);

test('corrupt packs, corrupt states and states naming absent objects are refused and reported', async () => {
  await withMountSandbox((sb) => {
    const { store, r } = seededStore(sb);
    assertStoreOk(sb, store);
    const copy = (name: string) => {
      const dst = sb.path(name);
      fs.cpSync(store, dst, { recursive: true });
      return dst;
    };
    const emptyFootprint = (repo: Repo) =>
      `${repo.git('for-each-ref')}|${fs.readdirSync(path.join(repo.commonDir(), 'objects', 'pack')).join(',')}`;

    // A flipped byte inside a pack.
    const badPack = copy('bad-pack');
    const packs = fs.readdirSync(path.join(badPack, 'packs')).filter((n) => n.endsWith('.pack'));
    assert.equal(packs.length, 1);
    const packFile = path.join(badPack, 'packs', packs[0]);
    flipByte(packFile, Math.floor(fs.statSync(packFile).size / 2));
    const cl = fails(sb, sb.root, ['clone', xurl(badPack), 'from-bad-pack']);
    assert.match(cl.stderr, /INTEGRITY_MISMATCH/);
    assert.equal(fs.existsSync(sb.path('from-bad-pack')), false);
    const into = initRepo(sb, 'into');
    const fp = emptyFootprint(into);
    fails(sb, into.dir, ['fetch', xurl(badPack), 'refs/heads/*:refs/remotes/bad/*']);
    assert.equal(emptyFootprint(into), fp, 'nothing imported');
    let f = fsckStore(sb, badPack);
    assert.equal(f.status, 1);
    assert.ok(
      f.out.problems.some((p) => p.includes(packs[0].replace(/\.pack$/, ''))),
      JSON.stringify(f.out.problems),
    );

    // A flipped hex digit in a state file (still JSON, wrong checksum).
    const badState = copy('bad-state');
    const stateFile = path.join(badState, 'state', '000000000001.json');
    const text = fs.readFileSync(stateFile, 'utf8');
    const at = text.indexOf('"refs/heads/trunk":"') + '"refs/heads/trunk":"'.length;
    fs.writeFileSync(stateFile, text.slice(0, at) + (text[at] === '0' ? '1' : '0') + text.slice(at + 1));
    assert.match(fails(sb, r.dir, ['ls-remote', xurl(badState)]).stderr, /INTEGRITY_MISMATCH/);
    assert.match(fails(sb, sb.root, ['clone', xurl(badState), 'from-bad-state']).stderr, /INTEGRITY_MISMATCH/);
    assert.equal(fs.existsSync(sb.path('from-bad-state')), false);
    assert.match(fails(sb, r.dir, ['push', xurl(badState), 'HEAD:refs/heads/x']).stderr, /INTEGRITY_MISMATCH/);
    f = fsckStore(sb, badState);
    assert.equal(f.status, 1);
    assert.ok(
      f.out.problems.some((p) => /checksum/.test(p)),
      JSON.stringify(f.out.problems),
    );

    // A well-formed state (right checksum, right prev) naming objects no pack holds.
    const ghostStore = copy('ghost');
    const ghost = crypto.randomBytes(20).toString('hex');
    appendCraftedState(ghostStore, (s) => ({ ...s, refs: { ...s.refs, 'refs/heads/ghost': ghost } }));
    assertLinearLog(ghostStore);
    f = fsckStore(sb, ghostStore);
    assert.equal(f.status, 1);
    assert.ok(
      f.out.problems.some((p) => /lacks/.test(p)),
      JSON.stringify(f.out.problems),
    );
    const gc = fails(sb, sb.root, ['clone', xurl(ghostStore), 'from-ghost']);
    assert.match(gc.stderr, /fatal|error/);
    assert.equal(fs.existsSync(sb.path('from-ghost')), false, 'a failed clone leaves nothing');
    const good = clone(sb, xurl(store), 'good');
    const refsBefore = good.git('for-each-ref');
    fails(sb, good.dir, ['fetch', xurl(ghostStore), 'refs/heads/*:refs/remotes/origin/*']);
    assert.equal(good.git('for-each-ref'), refsBefore, 'no ref points at a missing object');
    ok(sb, good.dir, ['fsck', '--strict']);
  });
});

test('a forged handoff pushed under an existing id is caught by handoff verify after fetch', async () => {
  await withMountSandbox((sb) => {
    const a = initRepo(sb, 'a', ['-b', 'trunk']);
    a.commit('one', { 'a.txt': 'a\n' });
    const snap = capture(sb, a.dir);
    const h = parseJson(
      xet(sb, a.dir, ['handoff', 'create', snap, '--to', 'B', '--from', 'A', '--title', 'real', '--json']),
    );
    const store = sb.path('store');
    // The forger has the snapshot and writes its own descriptor under the real handoff's id, first.
    const f = initRepo(sb, 'forger');
    f.git('fetch', '-q', a.dir, `refs/xet/snapshots/${snap}:refs/xet/snapshots/${snap}`);
    const bytes = Buffer.from(
      a.git('cat-file', 'blob', `refs/xet/handoffs/${h.id}:descriptor.json`).replace('"real"', '"evil"'),
    );
    const blob = f.gitInput(bytes, 'hash-object', '-w', '--stdin').trim();
    const tree = f.gitInput(`100644 blob ${blob}\tdescriptor.json\n`, 'mktree').trim();
    const forged = f.gitInput('forged\n', 'commit-tree', tree, '-p', snap).trim();
    ok(sb, f.dir, [
      'push',
      '-q',
      xurl(store),
      `${forged}:refs/xet/handoffs/${h.id}`,
      `${snap}:refs/xet/snapshots/${snap}`,
    ]);

    // The real author's publication is refused, not overwritten.
    a.git('remote', 'add', 'origin', xurl(store));
    const p = xet(sb, a.dir, ['push', '--json']);
    expectError(p, 'PUSH_REJECTED'); // push refuses; REF_IMMUTABLE is fetch's and handoff create's
    assert.equal(lsRemote(sb, a.dir, xurl(store)).get(`refs/xet/handoffs/${h.id}`), forged);

    const b = initRepo(sb, 'b');
    b.git('remote', 'add', 'origin', xurl(store));
    expectExit(xet(sb, b.dir, ['fetch', '--json']), 0);
    assert.equal(b.git('rev-parse', `refs/xet/handoffs/${h.id}`).trim(), forged);
    expectError(xet(sb, b.dir, ['handoff', 'verify', h.id, '--json']), 'INTEGRITY_MISMATCH');
    expectError(xet(sb, b.dir, ['handoff', 'accept', h.id, sb.path('evil'), '--json']), 'INTEGRITY_MISMATCH');
    assert.equal(fs.existsSync(sb.path('evil')), false);
    // And a receiver that has the real one keeps it: fetch never overwrites a create-once ref.
    const c = initRepo(sb, 'c');
    c.git('fetch', '-q', a.dir, 'refs/xet/*:refs/xet/*');
    c.git('remote', 'add', 'origin', xurl(store));
    expectError(xet(sb, c.dir, ['fetch', '--json']), 'REF_IMMUTABLE');
    assert.equal(c.git('rev-parse', `refs/xet/handoffs/${h.id}`).trim(), h.commit);
  });
});

test('git xet push/fetch with a git daemon: atomic, leased, a racing writer is refused not overwritten', async () => {
  await withMountSandbox(async (sb) => {
    const base = sb.path('srv');
    fs.mkdirSync(base);
    git(sb, base, ['init', '-q', '--bare', 'repo.git']);
    const daemon = await startDaemon(sb, base);
    try {
      const url = daemon.url('repo.git');
      const a = initRepo(sb, 'a', ['-b', 'trunk']);
      a.commit('one', { 'a.txt': 'a\n' });
      a.git('remote', 'add', 'hub', url);
      ok(sb, a.dir, ['push', '-q', 'hub', 'trunk']);
      const s1 = capture(sb, a.dir);
      const h = parseJson(
        xet(sb, a.dir, ['handoff', 'create', s1, '--to', 'B', '--from', 'A', '--title', 'T', '--json']),
      );
      let r = xet(sb, a.dir, ['push', 'hub', '--json']);
      expectExit(r, 0);
      let out = parseJson(r);
      assert.equal(out.kind, 'git');
      assert.deepEqual(
        out.refs.map((x: { ref: string; status: string }) => [x.ref, x.status]).sort(),
        [
          [`refs/xet/handoffs/${h.id}`, 'new'],
          [`refs/xet/snapshots/${s1}`, 'new'],
        ].sort(),
      );
      const server = lsRemote(sb, a.dir, url);
      assert.equal(server.get(`refs/xet/snapshots/${s1}`), s1);
      assert.equal(server.get(`refs/xet/handoffs/${h.id}`), h.commit);
      // Again: nothing new.
      out = parseJson(xet(sb, a.dir, ['push', 'hub', '--json']));
      assert.ok(
        out.refs.every((x: { status: string }) => x.status === 'up-to-date'),
        JSON.stringify(out),
      );

      // fetch sets up the refspec once and brings the refs.
      const b = initRepo(sb, 'b');
      b.git('remote', 'add', 'hub', url);
      r = xet(sb, b.dir, ['fetch', 'hub', '--json']);
      expectExit(r, 0);
      out = parseJson(r);
      assert.equal(out.refspecAdded, true);
      assert.equal(out.fetched.length, 2);
      assert.match(b.git('config', '--get-all', 'remote.hub.fetch'), /^\+refs\/xet\/\*:refs\/remotes\/hub\/xet\/\*$/m);
      assert.equal(parseJson(xet(sb, b.dir, ['fetch', 'hub', '--json'])).refspecAdded, false);
      expectExit(xet(sb, b.dir, ['handoff', 'verify', h.id, '--json']), 0);

      // A writer got there first with other content under the name of our next snapshot.
      a.write('b.txt', 'b\n');
      const s2 = capture(sb, a.dir);
      const racer = initRepo(sb, 'racer');
      const other = racer.commit('not a snapshot', { 'r.txt': 'r\n' });
      ok(sb, racer.dir, ['push', '-q', url, `${other}:refs/xet/snapshots/${s2}`]);
      r = xet(sb, a.dir, ['push', 'hub', '--json']);
      expectError(r, 'PUSH_REJECTED');
      assert.equal(lsRemote(sb, a.dir, url).get(`refs/xet/snapshots/${s2}`), other, 'not overwritten');

      // A writer that slips in between our listing and our push (a server hook creates the ref).
      a.write('c.txt', 'c\n');
      const s3 = capture(sb, a.dir);
      const hook = path.join(base, 'repo.git', 'hooks', 'pre-receive');
      fs.writeFileSync(
        hook,
        `#!/bin/sh\nenv -u GIT_QUARANTINE_PATH git update-ref refs/xet/snapshots/${s3} ${other} "" || exit 1\ncat >/dev/null\nexit 0\n`,
        { mode: 0o755 },
      );
      r = xet(sb, a.dir, ['push', 'hub', '--json']);
      fs.rmSync(hook);
      expectError(r, 'PUSH_REJECTED');
      const after = lsRemote(sb, a.dir, url);
      assert.equal(after.get(`refs/xet/snapshots/${s3}`), other, 'the racer keeps its ref; ours is refused');
      assert.equal(after.get(`refs/xet/snapshots/${s2}`), other);
      // A refused publication is recorded as such, not left pending.
      assert.equal(publications(a.commonDir()).filter((p) => p.state === 'pending').length, 0);
    } finally {
      daemon.stop();
    }
  });
});

test('two agents hand work back and forth through one xet store', async () => {
  await withMountSandbox((sb) => {
    const store = sb.path('store');
    const seed = initRepo(sb, 'seed', ['-b', 'trunk']);
    seed.commit('base', { 'app.txt': 'v1\n', 'lib/util.txt': 'util\n' });
    ok(sb, seed.dir, ['push', '-q', xurl(store), 'trunk']);
    const a = clone(sb, xurl(store), 'agent-a');
    const b = clone(sb, xurl(store), 'agent-b');

    // A: uncommitted work, captured and handed to B.
    a.write('app.txt', 'v2 in progress\n');
    a.write('notes/todo.md', 'finish the parser\n');
    const snapA = capture(sb, a.dir);
    const hA = parseJson(
      xet(sb, a.dir, ['handoff', 'create', snapA, '--to', 'B', '--from', 'A', '--title', 'parser wip', '--json']),
    );
    let r = xet(sb, a.dir, ['push', '--json']);
    expectExit(r, 0);
    assert.equal(parseJson(r).kind, 'xet');

    // B: fetch, find, verify, accept, check against A's snapshot.
    r = xet(sb, b.dir, ['fetch', '--json']);
    expectExit(r, 0);
    assert.equal(parseJson(r).refspecAdded, true);
    let list = parseJson(xet(sb, b.dir, ['handoff', 'list', '--to', 'B', '--json'])).handoffs;
    assert.deepEqual(
      list.map((x: { id: string; valid: boolean; from: string }) => [x.id, x.valid, x.from]),
      [[hA.id, true, 'A']],
    );
    expectExit(xet(sb, b.dir, ['handoff', 'verify', hA.id, '--json']), 0);
    const bdir = sb.path('b-work');
    expectExit(xet(sb, b.dir, ['handoff', 'accept', hA.id, bdir, '--json']), 0);
    expectExit(verify(sb, b.dir, snapA, bdir), 0);
    assert.equal(fs.readFileSync(path.join(bdir, 'notes', 'todo.md'), 'utf8'), 'finish the parser\n');

    // B works in the accepted tree, captures and hands back.
    const bw = new Repo(sb, bdir);
    if (gitTry(sb, bdir, ['remote', 'get-url', 'origin']).status !== 0) bw.git('remote', 'add', 'origin', xurl(store));
    bw.write('app.txt', 'v2 done\n');
    bw.write('notes/todo.md', 'parser finished\n');
    const snapB = capture(sb, bdir);
    const hB = parseJson(
      xet(sb, bdir, ['handoff', 'create', snapB, '--to', 'A', '--from', 'B', '--title', 'parser done', '--json']),
    );
    r = xet(sb, bdir, ['push', '--json']);
    expectExit(r, 0);

    // A: fetch, find B's handoff, accept, verify.
    expectExit(xet(sb, a.dir, ['fetch', '--json']), 0);
    list = parseJson(xet(sb, a.dir, ['handoff', 'list', '--to', 'A', '--json'])).handoffs;
    assert.deepEqual(
      list.map((x: { id: string; valid: boolean }) => [x.id, x.valid]),
      [[hB.id, true]],
    );
    expectExit(xet(sb, a.dir, ['handoff', 'verify', hB.id, '--json']), 0);
    const adir = sb.path('a-back');
    expectExit(xet(sb, a.dir, ['handoff', 'accept', hB.id, adir, '--json']), 0);
    expectExit(verify(sb, a.dir, snapB, adir), 0);
    assert.equal(fs.readFileSync(path.join(adir, 'app.txt'), 'utf8'), 'v2 done\n');
    assertStoreOk(sb, store);
    ok(sb, clone(sb, xurl(store), 'fresh').dir, ['fsck', '--strict']);
  });
});

test('a new snapshot pushes only what changed, although earlier snapshots are its siblings', async () => {
  await withMountSandbox((sb) => {
    const a = initRepo(sb, 'a');
    a.commit('base', { 'src.txt': 'v1\n', '.gitignore': 'deps/\n' });
    // 4 MiB of ignored content, the kind of thing (node_modules) a snapshot carries and git does not.
    fs.mkdirSync(a.p('deps'));
    fs.writeFileSync(a.p('deps/blob.bin'), crypto.randomBytes(4 << 20));
    const store = sb.path('store');
    a.git('remote', 'add', 'store', `xet::${store}`);
    capture(sb, a.dir);
    expectExit(xet(sb, a.dir, ['push', 'store', '--json']), 0);
    const size = () =>
      fs.readdirSync(path.join(store, 'packs')).reduce((n, f) => n + fs.statSync(path.join(store, 'packs', f)).size, 0);
    const before = size();
    assert.ok(before > 4 << 20, 'the first push holds the ignored content');
    fs.writeFileSync(a.p('src.txt'), 'v2\n');
    capture(sb, a.dir);
    expectExit(xet(sb, a.dir, ['push', 'store', '--json']), 0);
    const grown = size() - before;
    assert.ok(grown < 64 << 10, `the second snapshot's push wrote ${grown} bytes; only src.txt changed`);
    // And the store is still whole: a fresh repository fetches both snapshots and restores the second.
    const b = initRepo(sb, 'b');
    b.git('remote', 'add', 'store', `xet::${store}`);
    expectExit(xet(sb, b.dir, ['fetch', 'store', '--json']), 0);
    expectExit(xet(sb, sb.root, ['fsck', '--store', store, '--json']), 0);
    assert.equal(b.git('for-each-ref', 'refs/xet/snapshots').trim().split('\n').length, 2);
  });
});

test('review regressions: fetch never moves a xet ref, gc does not force a re-import, tag leases, fsck gaps', async () => {
  await withMountSandbox((sb) => {
    const { store, r } = seededStore(sb);
    const snap = capture(sb, r.dir);
    r.git('remote', 'add', 'st', xurl(store));
    expectExit(xet(sb, r.dir, ['push', 'st', '--json']), 0);
    // A remote that offers a descendant commit under an existing snapshot's name: a plain refspec
    // would fast-forward the local ref onto it. git xet fetch creates refs only where absent.
    const b = initRepo(sb, 'b');
    b.git('remote', 'add', 'st', xurl(store));
    expectExit(xet(sb, b.dir, ['fetch', 'st', '--json']), 0);
    assert.equal(b.git('rev-parse', `refs/xet/snapshots/${snap}`).trim(), snap);
    const forged = r.git('commit-tree', '-p', snap, '-m', 'forged', `${snap}^{tree}`).trim();
    // The helper refuses to move a create-once ref even when forced, so forge it in a state by hand
    // (its objects carried into the store under another name first).
    ok(sb, r.dir, ['push', xurl(store), `${forged}:refs/heads/carrier`]);
    appendCraftedState(store, (s) => ({ ...s, refs: { ...s.refs, [`refs/xet/snapshots/${snap}`]: forged } }));
    const err = expectError(xet(sb, b.dir, ['fetch', 'st', '--json']), 'REF_IMMUTABLE');
    assert.equal(err.details.clashes[0].ref, `refs/xet/snapshots/${snap}`);
    assert.equal(b.git('rev-parse', `refs/xet/snapshots/${snap}`).trim(), snap, 'the local snapshot ref did not move');
    ok(sb, b.dir, ['fetch', 'st']); // a plain fetch only updates the tracking namespace
    assert.equal(b.git('rev-parse', `refs/xet/snapshots/${snap}`).trim(), snap);
  });
  await withMountSandbox((sb) => {
    const { store } = seededStore(sb);
    const c = clone(sb, xurl(store), 'c');
    c.git('gc', '-q');
    const packs = () => fs.readdirSync(path.join(c.dir, '.git', 'objects', 'pack')).filter((f) => f.endsWith('.pack'));
    const before = packs().length;
    const w = clone(sb, xurl(store), 'w');
    w.commit('more', { 'more.txt': 'more\n' });
    ok(sb, w.dir, ['push', 'origin', 'HEAD:refs/heads/trunk']);
    ok(sb, c.dir, ['fetch', 'origin']);
    assert.equal(packs().length, before + 1, 'only the new store pack was imported after the local gc');
    // A lease on a tag that matches is a forced update, as with any git remote.
    w.git('tag', 't1');
    ok(sb, w.dir, ['push', 'origin', 't1']);
    const old = w.git('rev-parse', 't1').trim();
    w.commit('again', { 'again.txt': 'x\n' });
    w.git('tag', '-f', 't1');
    ok(sb, w.dir, ['push', `--force-with-lease=refs/tags/t1:${old}`, 'origin', 't1']);
    assert.equal(lsRemote(sb, w.dir, xurl(store)).get('refs/tags/t1'), w.git('rev-parse', 't1').trim());
    // A gap in the state log is reported as exactly the missing state.
    const states = fs.readdirSync(path.join(store, 'state')).sort();
    assert.ok(states.length >= 3);
    fs.rmSync(path.join(store, 'state', states[1]));
    const f = fsckStore(sb, store);
    assert.equal(f.status, 1);
    assert.ok(f.out.problems.includes('state 2 is missing'), JSON.stringify(f.out.problems));
    assert.ok(!f.out.problems.some((p) => /state [3-9] is missing/.test(p)), JSON.stringify(f.out.problems));
  });
});

test('restore and handoff accept refuse a target inside the git directory', async () => {
  await withMountSandbox((sb) => {
    const { r } = seededStore(sb);
    const snap = capture(sb, r.dir);
    expectError(
      xet(sb, r.dir, ['restore', snap, path.join(r.dir, '.git', 'refs', 'heads', 'zz'), '--json']),
      'TARGET_UNUSABLE',
    );
    const id = parseJson(
      xet(sb, r.dir, ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 't', '--json']),
    ).id;
    expectError(xet(sb, r.dir, ['handoff', 'accept', id, path.join(r.dir, '.git', 'x'), '--json']), 'TARGET_UNUSABLE');
    assert.equal(fs.existsSync(path.join(r.dir, '.git', 'refs', 'heads', 'zz')), false);
  });
});

test('a push that loses the race and then accepts a ref it refused sends that ref’s objects first', async () => {
  await withMountSandbox(async (sb) => {
    // The review's interleaving, made exact with the helper's pause points.
    const store = sb.path('store');
    const base = initRepo(sb, 'base', ['-b', 'main']);
    const a1 = base.commit('a1', { 'f.txt': '1\n' });
    ok(sb, base.dir, ['push', xurl(store), 'main', 'main:other']);
    const p1 = clone(sb, xurl(store), 'p1');
    const a2 = p1.commit('a2', { 'f.txt': '2\n' });
    p1.git('checkout', '-q', '-b', 'other', 'origin/other');
    p1.commit('b2', { 'g.txt': 'b\n' });
    p1.git('checkout', '-q', 'main');
    const p2 = clone(sb, xurl(store), 'p2');
    p2.git('checkout', '-q', '--orphan', 'x');
    const x = p2.commit('x', { 'x.txt': 'x\n' });
    const pauses = sb.path('pauses');
    fs.mkdirSync(pauses);
    const waitFor = async (name: string) => {
      const until = Date.now() + 30_000;
      while (!fs.existsSync(path.join(pauses, name))) {
        assert.ok(Date.now() < until, `the helper never reached ${name}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const push1 = runAsync(sb, p1.dir, 'git', ['push', 'origin', 'main', 'other'], {
      GIT_XET_TEST_PAUSE_AT: 'before-decide,after-pack',
      GIT_XET_TEST_PAUSE_DIR: pauses,
    });
    await waitFor('before-decide.reached');
    ok(sb, p2.dir, ['push', '-f', 'origin', `${x}:refs/heads/main`]); // P1 will find main unknown: "fetch first"
    fs.writeFileSync(path.join(pauses, 'before-decide.go'), '');
    await waitFor('after-pack.reached'); // its pack holds only `other`
    ok(sb, p2.dir, ['push', '-f', 'origin', `${a1}:refs/heads/main`]); // main back where P1 can fast-forward it
    fs.writeFileSync(path.join(pauses, 'after-pack.go'), '');
    const r = await push1;
    assert.equal(r.status, 0, `P1's push: ${r.stderr}`);
    assert.equal(lsRemote(sb, p1.dir, xurl(store)).get('refs/heads/main'), a2, 'main was accepted on the retry');
    assertStoreOk(sb, store);
    const c = clone(sb, xurl(store), 'fresh');
    assert.equal(c.git('rev-parse', 'origin/main').trim(), a2);
    ok(sb, c.dir, ['fsck', '--strict']);
  });
});

test('a push killed or SIGTERMed before a new store existed does not wedge it; a store absent after it was reached stays unknown', async () => {
  await withMountSandbox(async (sb) => {
    const a = initRepo(sb, 'a', ['-b', 'trunk']);
    a.commit('one', { 'a.txt': 'a\n' });
    const s1 = capture(sb, a.dir);
    const store = sb.path('new-store');
    a.git('remote', 'add', 'origin', xurl(store));
    const pendingIds = () =>
      publications(a.commonDir())
        .filter((p) => p.state === 'pending')
        .map((p) => p.id);

    // SIGKILL with the publication recorded, before git push (and so the helper) ran.
    killAt(sb, a.dir, ['push', '--json'], 'push:after-record');
    const [killedId] = pendingIds();
    assert.ok(killedId, 'the killed push left its publication pending');
    assert.equal(fs.existsSync(store), false, 'the store was never created');
    let r = xet(sb, a.dir, ['push', '--json']);
    expectExit(r, 0);
    const out = parseJson(r);
    assert.deepEqual(out.resolved, [{ id: killedId, state: 'not-published' }]);
    assert.deepEqual(out.refs, [{ ref: `refs/xet/snapshots/${s1}`, status: 'new' }]);
    assert.equal(lsRemote(sb, a.dir, xurl(store)).get(`refs/xet/snapshots/${s1}`), s1);
    assert.deepEqual(pendingIds(), []);

    // SIGTERM at the same point (what an MCP cancellation sends), to a second new store.
    const store2 = sb.path('new-store-2');
    const dir = sb.path('pause-term');
    fs.mkdirSync(dir);
    const child = spawn(process.execPath, [XET_BIN, 'push', xurl(store2), '--json'], {
      cwd: a.dir,
      env: { ...sb.env, GIT_XET_TEST_PAUSE_AT: 'push:after-record', GIT_XET_TEST_PAUSE_DIR: dir },
      stdio: 'ignore',
    });
    const ended = new Promise<string | null>((res) => child.once('close', (_c, sig) => res(sig)));
    while (!fs.existsSync(path.join(dir, 'push:after-record.reached'))) await new Promise((t) => setTimeout(t, 10));
    child.kill('SIGTERM');
    assert.equal(await ended, 'SIGTERM');
    const [termId] = pendingIds();
    assert.ok(termId);
    r = xet(sb, a.dir, ['push', xurl(store2), '--json']);
    expectExit(r, 0);
    assert.deepEqual(parseJson(r).resolved, [{ id: termId, state: 'not-published' }]);
    assert.equal(lsRemote(sb, a.dir, xurl(store2)).get(`refs/xet/snapshots/${s1}`), s1);

    // The helper reached a new store, published, and was killed; then the store is absent (an
    // unmounted or renamed path): a missing directory is no proof, the outcome stays unknown.
    a.write('b.txt', 'b\n');
    const s2 = capture(sb, a.dir);
    const store3 = sb.path('new-store-3');
    const shim = groupKillerShim(sb);
    const k = xet(sb, a.dir, ['push', xurl(store3), '--json'], {
      env: {
        PATH: `${shim}${path.delimiter}${sb.env.PATH}`,
        XET_TEST_KILL_GROUP: '1',
        GIT_XET_TEST_DIE_AT: 'after-state',
      },
      wrap: ['setsid'],
    });
    assert.equal(k.signal, 'SIGKILL', describeRun(k));
    const [reachedId] = pendingIds();
    fs.renameSync(store3, `${store3}.away`);
    r = xet(sb, a.dir, ['push', xurl(store3), '--json']);
    assert.deepEqual(expectError(r, 'OUTCOME_UNKNOWN', 3).details.publications, [reachedId]);
    assert.equal(fs.existsSync(store3), false, 'nothing was pushed: no new store in its place');
    fs.renameSync(`${store3}.away`, store3);
    r = xet(sb, a.dir, ['push', xurl(store3), '--json']);
    expectExit(r, 0);
    assert.deepEqual(parseJson(r).resolved, [{ id: reachedId, state: 'published' }]);
    assert.equal(lsRemote(sb, a.dir, xurl(store3)).get(`refs/xet/snapshots/${s2}`), s2);
    // A store whose parent directory does not exist: refused before anything could reach a store,
    // so nothing stays pending, and once the parent exists the next push publishes (review 34:
    // every later push to that URL was OUTCOME_UNKNOWN).
    const orphan = sb.path(path.join('no-such-parent', 'store'));
    r = xet(sb, a.dir, ['push', xurl(orphan), '--json']);
    const refused = expectError(r, 'STORE_UNAVAILABLE');
    assert.match(refused.message, /published nothing: .*its parent does not exist/);
    assert.deepEqual(pendingIds(), [], 'nothing pending');
    fs.mkdirSync(path.dirname(orphan));
    r = xet(sb, a.dir, ['push', xurl(orphan), '--json']);
    expectExit(r, 0);
    assert.deepEqual(parseJson(r).resolved, []);
    assert.equal(lsRemote(sb, a.dir, xurl(orphan)).get(`refs/xet/snapshots/${s2}`), s2);
    // Resolved publications leave no lock or marker files behind.
    const locks = path.join(a.commonDir(), 'xet', 'locks');
    assert.deepEqual(
      fs.readdirSync(locks).filter((n) => n.startsWith('publication-')),
      [],
    );
  });
});
