// Regression tests for the defects of issue 8 ("Defects found"): each fails without its fix. Real
// git, real CLI, hand-forged refs and objects where the defect needs hostile input.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { git, gitTry, initRepo, run, type Repo } from '../support/git';
import { writeLargeFile } from '../support/fixtures';
import { withMountSandbox } from '../support/mounts';
import { withSandbox, type Sandbox } from '../support/sandbox';
import { sha256 } from '../support/state';
import {
  capture,
  expectError,
  expectExit,
  parseJson,
  restore,
  showManifest,
  verify,
  xet,
  XET_BIN,
} from '../support/xet';

function twoSnapshots(sb: Sandbox): { r: Repo; a: string; b: string } {
  const r = initRepo(sb, 'src');
  r.commit('init', { 'a.txt': 'one\n' });
  r.write('a.txt', 'state A\n');
  const a = capture(sb, r.dir);
  r.write('a.txt', 'state B\n');
  const b = capture(sb, r.dir);
  return { r, a, b };
}

test('a snapshot ref pointing at another commit never redirects a full id, and is refused by name', async () => {
  await withSandbox((sb) => {
    const { r, a, b } = twoSnapshots(sb);
    const h = xet(sb, r.dir, ['handoff', 'create', a, '--to', 'bob', '--from', 'alice', '--title', 'A', '--json']);
    expectExit(h, 0);
    const id = parseJson(h).id as string;
    // What a plain `git fetch 'refs/xet/*:refs/xet/*'` from a hostile remote can leave behind.
    r.git('update-ref', `refs/xet/snapshots/${a}`, b);
    const forgedName = 'f'.repeat(40);
    r.git('update-ref', `refs/xet/snapshots/${forgedName}`, b);

    restore(sb, r.dir, a, sb.path('copy-a'));
    assert.equal(fs.readFileSync(sb.path('copy-a', 'a.txt'), 'utf8'), 'state A\n');
    expectExit(verify(sb, r.dir, a, sb.path('copy-a')), 0);
    expectExit(xet(sb, r.dir, ['handoff', 'verify', id, '--json']), 0);
    expectExit(xet(sb, r.dir, ['handoff', 'accept', id, sb.path('accepted'), '--json']), 0);
    assert.equal(fs.readFileSync(sb.path('accepted', 'a.txt'), 'utf8'), 'state A\n');
    // The snapshot ref typed by name means the id in its name.
    restore(sb, r.dir, `refs/xet/snapshots/${a}`, sb.path('copy-by-ref'));
    assert.equal(fs.readFileSync(sb.path('copy-by-ref', 'a.txt'), 'utf8'), 'state A\n');

    // Abbreviations and ids with no object of their own go through refs: the bad ref is refused.
    expectError(xet(sb, r.dir, ['restore', a.slice(0, 12), sb.path('copy-abbrev'), '--json']), 'INTEGRITY_MISMATCH');
    assert.ok(!fs.existsSync(sb.path('copy-abbrev')));
    expectError(xet(sb, r.dir, ['restore', forgedName, sb.path('copy-forged'), '--json']), 'INTEGRITY_MISMATCH');
    expectError(xet(sb, r.dir, ['show', 'ffffff', '--json']), 'INTEGRITY_MISMATCH');
    expectError(xet(sb, r.dir, ['fork', forgedName, sb.path('fork-forged'), '--json']), 'INTEGRITY_MISMATCH');
    assert.ok(!fs.existsSync(sb.path('fork-forged')));

    const list = parseJson(xet(sb, r.dir, ['snapshots', '--json'])).snapshots as {
      snapshot: string;
      message: string;
    }[];
    const byId = new Map(list.map((s) => [s.snapshot, s]));
    assert.match(byId.get(a)?.message ?? '', /invalid ref: points at/);
    assert.match(byId.get(forgedName)?.message ?? '', /invalid ref: points at/);
    assert.equal(byId.get(b)?.message, '');
  });
});

test("refs fetched by git xet fetch are not captured and do not become a snapshot's parents", async () => {
  await withSandbox((sb) => {
    const alice = initRepo(sb, 'alice');
    alice.commit('alice', { 'shared.txt': 'x\n' });
    alice.write('alice-private.txt', 'not for bob\n');
    const aliceSnap = capture(sb, alice.dir);
    const bob = initRepo(sb, 'bob');
    bob.commit('bob', { 'b.txt': 'b\n' });
    bob.git('remote', 'add', 'team/alice', alice.dir);
    expectExit(xet(sb, bob.dir, ['fetch', 'team/alice', '--json']), 0);
    assert.ok(bob.git('for-each-ref', 'refs/remotes/team/alice/xet/').includes(aliceSnap));
    const snap = capture(sb, bob.dir);
    const refs = showManifest(sb, bob.dir, snap).refs as { name: string }[];
    assert.deepEqual(
      refs.map((x) => x.name).filter((n) => /xet\//.test(n)),
      [],
    );
    assert.ok(!bob.git('rev-list', snap).includes(aliceSnap), "alice's snapshot is reachable from bob's");
    restore(sb, bob.dir, snap, sb.path('copy'));
    expectExit(verify(sb, bob.dir, snap, sb.path('copy')), 0);
    // Nor do verify and diff count them as refs of the worktree (they were ref-extra / ref-created).
    expectExit(verify(sb, bob.dir, snap, bob.dir), 0);
    const d = xet(sb, bob.dir, ['diff', snap, '--json']);
    expectExit(d, 0);
    assert.deepEqual(parseJson(d).changes, []);
  });
});

test('captures during a commit loop record HEAD and its branch at one moment; each restore verifies', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'loop.txt': '0\n', 'still.txt': 'x\n' });
    // Commits land continuously, each moving HEAD's branch.
    const loop = spawn('bash', ['-c', 'i=0; while :; do i=$((i+1)); git commit -q --allow-empty -m "c$i"; done'], {
      cwd: r.dir,
      env: sb.env,
      detached: true,
      stdio: 'ignore',
    });
    const snaps: string[] = [];
    try {
      await new Promise((res) => setTimeout(res, 300));
      for (let n = 0; n < 20; n++) {
        const c = xet(sb, r.dir, ['capture', '--json']);
        if (c.status === 0) snaps.push(parseJson(c).snapshot as string);
        else expectError(c, 'WORKTREE_CHANGED');
      }
    } finally {
      process.kill(-(loop.pid as number), 'SIGKILL');
    }
    assert.ok(snaps.length >= 12, `only ${snaps.length} of 20 captures succeeded`);
    const torn = snaps.filter((s) => {
      const m = showManifest(sb, r.dir, s);
      return m.head.oid !== (m.refs as { name: string; oid: string }[]).find((x) => x.name === m.head.ref)?.oid;
    });
    assert.deepEqual(torn, [], `${torn.length} of ${snaps.length} manifests disagree on HEAD and its branch`);
    for (const [n, s] of snaps.entries()) {
      restore(sb, r.dir, s, sb.path(`copy-${n}`));
      expectExit(verify(sb, r.dir, s, sb.path(`copy-${n}`)), 0);
    }
  });
});

test('a dotfiles repository (GIT_DIR=~/.cfg GIT_WORK_TREE=~) and one with core.worktree capture, restore, verify and diff', async () => {
  await withSandbox((sb) => {
    // The dotfiles pattern: a bare git dir inside the worktree it tracks, found only through the env.
    const home = sb.path('dothome');
    fs.mkdirSync(path.join(home, '.config', 'tool'), { recursive: true });
    git(sb, home, ['init', '-q', '--bare', path.join(home, '.cfg')]);
    const env = { GIT_DIR: path.join(home, '.cfg'), GIT_WORK_TREE: home };
    fs.writeFileSync(path.join(home, '.bashrc'), 'alias ll=ls\n');
    fs.writeFileSync(path.join(home, '.config', 'tool', 'rc'), 'untracked\n');
    git(sb, home, ['add', '.bashrc'], { env });
    git(sb, home, ['commit', '-q', '-m', 'dotfiles'], { env });
    fs.appendFileSync(path.join(home, '.bashrc'), 'edited\n');
    const c = xet(sb, home, ['capture', '--json'], { env });
    expectExit(c, 0);
    const snap = parseJson(c).snapshot as string;
    const files = git(sb, home, ['ls-tree', '-r', '--name-only', `${snap}:files`], { env }).split('\n');
    assert.deepEqual(files.filter(Boolean).sort(), ['.bashrc', '.config/tool/rc'], 'the git dir is not captured');
    expectExit(xet(sb, home, ['restore', snap, sb.path('copy'), '--json'], { env }), 0);
    assert.equal(fs.readFileSync(sb.path('copy', '.bashrc'), 'utf8'), 'alias ll=ls\nedited\n');
    expectExit(xet(sb, home, ['verify', snap, sb.path('copy'), '--json'], { env }), 0);
    expectExit(xet(sb, home, ['verify', snap, home, '--json'], { env }), 0);
    assert.equal(parseJson(xet(sb, home, ['diff', snap, '--json'], { env })).identical, true);
    fs.appendFileSync(path.join(home, '.bashrc'), 'more\n');
    const v = xet(sb, home, ['verify', snap, home, '--json'], { env });
    expectExit(v, 1);
    assert.deepEqual(parseJson(v).differences, [{ kind: 'file-modified', path: '.bashrc' }]);

    // core.worktree: the git dir lives elsewhere and is where commands run.
    const meta = initRepo(sb, 'meta');
    const wt = sb.path('wt');
    fs.mkdirSync(wt);
    meta.git('config', 'core.worktree', wt);
    fs.writeFileSync(path.join(wt, 'a.txt'), 'a\n');
    meta.git('add', 'a.txt');
    meta.git('commit', '-q', '-m', 'a');
    fs.writeFileSync(path.join(wt, 'u.txt'), 'u\n');
    const s2 = capture(sb, meta.dir);
    restore(sb, meta.dir, s2, sb.path('copy2'));
    expectExit(verify(sb, meta.dir, s2, sb.path('copy2')), 0);
    expectExit(verify(sb, meta.dir, s2, wt), 0);
    assert.equal(parseJson(xet(sb, meta.dir, ['diff', s2, '--json'])).identical, true);
  });
});

test('a store file that is a FIFO or a directory is refused with a typed error, never waited on', async () => {
  await withSandbox((sb) => {
    const src = initRepo(sb, 'src');
    src.commit('one', { 'a.txt': 'a\n' });
    const store = sb.path('store');
    const snap = capture(sb, src.dir);
    src.git('push', '-q', `xet::${store}`, 'main', `refs/xet/snapshots/${snap}`);
    const [pack] = fs.readdirSync(path.join(store, 'packs')).filter((n) => n.endsWith('.pack'));
    const variants: { name: string; file: string; kind: 'fifo' | 'dir' }[] = [
      { name: 'pack-fifo', file: `packs/${pack}`, kind: 'fifo' },
      { name: 'pack-dir', file: `packs/${pack}`, kind: 'dir' },
      { name: 'state-fifo', file: 'state/000000000001.json', kind: 'fifo' },
      { name: 'state-dir', file: 'state/000000000001.json', kind: 'dir' },
      { name: 'header-fifo', file: 'XET-STORE', kind: 'fifo' },
    ];
    for (const v of variants) {
      const s = sb.path(v.name);
      fs.cpSync(store, s, { recursive: true });
      fs.rmSync(path.join(s, v.file));
      if (v.kind === 'dir') fs.mkdirSync(path.join(s, v.file));
      else run(sb, s, 'mkfifo', [path.join(s, v.file)]);
      const what = `${v.name}: `;
      const cl = gitTry(sb, sb.root, ['clone', '-q', `xet::${s}`, `clone-${v.name}`], { timeoutMs: 30_000 });
      assert.equal(cl.signal, null, `${what}clone hung`);
      assert.notEqual(cl.status, 0, what);
      assert.match(cl.stderr.toString(), /INTEGRITY_MISMATCH/, what + cl.stderr.toString());
      const into = initRepo(sb, `into-${v.name}`);
      into.git('remote', 'add', 'x', `xet::${s}`);
      const f = xet(sb, into.dir, ['fetch', 'x', '--json'], { timeoutMs: 30_000 });
      assert.equal(f.signal, null, `${what}fetch hung`);
      expectError(f, 'INTEGRITY_MISMATCH');
      const k = xet(sb, sb.root, ['fsck', '--store', s, '--json'], { timeoutMs: 30_000 });
      assert.equal(k.signal, null, `${what}fsck hung`);
      if (v.file === 'XET-STORE') expectError(k, 'INTEGRITY_MISMATCH');
      else {
        expectExit(k, 1);
        assert.ok(
          (parseJson(k).problems as string[]).some((p) => /not a regular file/.test(p)),
          `${what}${k.stdout}`,
        );
      }
    }
  });
});

/** Runs the CLI under /usr/bin/time -v: exit status, stdout and the peak RSS (MB) of it and its git children. */
function xetMeasured(
  sb: Sandbox,
  cwd: string,
  args: string[],
): { status: number | null; stdout: string; peakMB: number } {
  const r = run(sb, cwd, '/usr/bin/time', ['-v', process.execPath, XET_BIN, ...args]);
  const m = /Maximum resident set size \(kbytes\): (\d+)/.exec(r.stderr.toString());
  assert.ok(m, r.stderr.toString());
  return { status: r.status, stdout: r.stdout.toString(), peakMB: Number(m[1]) / 1024 };
}

test('a forged ref to a 200 MB blob or manifest is refused by its size, never read', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const sparse = sb.path('big');
    fs.closeSync(fs.openSync(sparse, 'w'));
    fs.truncateSync(sparse, 200 * 1024 * 1024);
    const big = r.git('hash-object', '-w', sparse).trim();
    fs.rmSync(sparse);
    // A handoff ref pointing straight at the blob.
    r.git('update-ref', `refs/xet/handoffs/${'a'.repeat(64)}`, big);
    // A snapshot commit whose manifest.json is the blob.
    const tree = r
      .gitInput(
        `040000 tree ${r.git('rev-parse', `${snap}:files`).trim()}\tfiles\n` +
          `040000 tree ${r.git('rev-parse', `${snap}:index`).trim()}\tindex\n` +
          `100644 blob ${big}\tmanifest.json\n`,
        'mktree',
      )
      .trim();
    const forged = r.gitInput('forged\n', 'commit-tree', tree).trim();
    r.git('update-ref', `refs/xet/snapshots/${forged}`, forged);
    // What node and git need anyway, far below the blob.
    const LIMIT_MB = 150;

    const list = xetMeasured(sb, r.dir, ['handoff', 'list', '--json']);
    assert.equal(list.status, 0, list.stdout);
    const h = (JSON.parse(list.stdout).handoffs as { id: string; valid: boolean; problems: string[] }[])[0];
    assert.equal(h.valid, false);
    assert.match(h.problems.join(' '), /209715200-byte object/);
    assert.ok(list.peakMB < LIMIT_MB, `handoff list peaked at ${list.peakMB.toFixed(0)} MB`);
    const hv = xetMeasured(sb, r.dir, ['handoff', 'verify', 'a'.repeat(64), '--json']);
    assert.equal(hv.status, 3, hv.stdout);
    assert.ok(hv.peakMB < LIMIT_MB, `handoff verify peaked at ${hv.peakMB.toFixed(0)} MB`);

    const snaps = xetMeasured(sb, r.dir, ['snapshots', '--json']);
    assert.equal(snaps.status, 0, snaps.stdout);
    const entry = (JSON.parse(snaps.stdout).snapshots as { snapshot: string; message: string }[]).find(
      (x) => x.snapshot === forged,
    );
    assert.match(entry?.message ?? '', /unreadable manifest: 209715200 bytes/);
    assert.ok(snaps.peakMB < LIMIT_MB, `snapshots peaked at ${snaps.peakMB.toFixed(0)} MB`);
    for (const cmd of [
      ['show', forged, '--json'],
      ['restore', forged, sb.path('copy'), '--json'],
    ]) {
      const x = xetMeasured(sb, r.dir, cmd);
      assert.equal(x.status, 3, x.stdout);
      assert.equal(JSON.parse(x.stdout).error.code, 'SNAPSHOT_INVALID');
      assert.ok(x.peakMB < LIMIT_MB, `${cmd[0]} peaked at ${x.peakMB.toFixed(0)} MB`);
    }
  });
});

test('a file name that is not UTF-8 inside one fork is PATH_ENCODING for that fork only', async () => {
  await withMountSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n' });
    const snap = capture(sb, r.dir);
    const bad = Buffer.from([0x66, 0xff, 0xfe, 0x2e, 0x74, 0x78, 0x74]); // "f\xff\xfe.txt"
    const writeBad = (dir: string) => fs.writeFileSync(Buffer.concat([Buffer.from(`${dir}/dir/`), bad]), 'x\n');
    const forks: Record<string, string> = {};
    for (const mode of ['overlay', 'copy']) {
      forks[mode] = sb.path(`fork-${mode}`);
      expectExit(xet(sb, r.dir, ['fork', snap, forks[mode], '--mode', mode, '--json']), 0);
    }
    const clean = sb.path('fork-clean');
    expectExit(xet(sb, r.dir, ['fork', snap, clean, '--mode', 'copy', '--json']), 0);
    writeBad(forks.overlay);
    writeBad(forks.copy);

    const list = xet(sb, r.dir, ['forks', '--json']);
    expectExit(list, 0);
    const rows = parseJson(list).forks as { dir: string; bytes: number | null; error?: unknown }[];
    assert.equal(rows.length, 3);
    for (const f of rows) {
      assert.equal(f.error, undefined, JSON.stringify(f));
      assert.ok((f.bytes ?? 0) > 0, JSON.stringify(f));
    }
    for (const mode of ['overlay', 'copy']) {
      const e = expectError(xet(sb, r.dir, ['changes', forks[mode], '--json']), 'PATH_ENCODING');
      assert.equal(e.details.nameHex, bad.toString('hex'), mode);
      expectError(xet(sb, r.dir, ['discard', forks[mode], '--json']), 'PATH_ENCODING');
      assert.ok(fs.existsSync(forks[mode]), `${mode} fork kept`);
    }
    expectExit(xet(sb, r.dir, ['changes', clean, '--json']), 0);
    // Without capture, discard removes the fork, the odd name too.
    expectExit(xet(sb, r.dir, ['discard', forks.copy, '--no-capture', '--json']), 0);
    assert.ok(!fs.existsSync(forks.copy));
    expectExit(xet(sb, r.dir, ['discard', forks.overlay, '--no-capture', '--json']), 0);
    assert.ok(!fs.existsSync(forks.overlay) || fs.readdirSync(forks.overlay).length === 0);
  });
});

/** Starts the CLI and SIGKILLs it as soon as `landed()` holds (polled every 2 ms); resolves with
 * whether the kill happened there (false: the command finished first). */
function killWhen(sb: Sandbox, cwd: string, args: string[], landed: () => boolean): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [XET_BIN, ...args], { cwd, env: sb.env, stdio: 'ignore' });
    let killed = false;
    const timer = setInterval(() => {
      if (!killed && landed()) {
        killed = true;
        child.kill('SIGKILL');
      }
    }, 2);
    child.on('error', reject);
    child.on('close', () => {
      clearInterval(timer);
      resolve(killed);
    });
  });
}

test('temporary files of a SIGKILLed capture or restore are removed by the next run, never a live one', async () => {
  await withSandbox(async (sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    writeLargeFile(r.p('big.bin'), 96 * 1024 * 1024);
    const packDir = path.join(r.commonDir(), 'objects', 'pack');
    const xetTmp = path.join(r.commonDir(), 'xet', 'tmp');
    const ls = (dir: string, re: RegExp) => (fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => re.test(n)) : []);
    const tmpPacks = () => ls(packDir, /^tmp_(pack|idx)_xet_/);
    // Every scratch directory a capture makes (capture-, index-: the staged tree's) is one.
    const scratch = () => ls(xetTmp, /^[a-z]+-\d+-/);
    // A live process's temporary files (this test's own pid) must survive every cleanup.
    fs.mkdirSync(packDir, { recursive: true });
    const livePack = path.join(packDir, `tmp_pack_xet_${process.pid}_abcdef`);
    fs.writeFileSync(livePack, 'in use');
    fs.mkdirSync(path.join(xetTmp, `capture-${process.pid}-AbCdEf`), { recursive: true });

    const killed = await killWhen(sb, r.dir, ['capture', '--json'], () => tmpPacks().length > 1);
    assert.ok(killed, 'the capture finished before its pack appeared');
    assert.ok(tmpPacks().length > 1 && scratch().length > 1, `left: ${tmpPacks()} ${scratch()}`);
    assert.equal(r.git('for-each-ref', 'refs/xet/').trim(), '', 'no snapshot from the killed capture');
    // Counted until the next run removes them (the live process's are not leftovers).
    const leftovers = () => parseJson(xet(sb, r.dir, ['status', '--json'])).leftovers as number;
    assert.equal(leftovers(), tmpPacks().length - 1 + scratch().length - 1);

    const c = xet(sb, r.dir, ['capture', '--json']);
    expectExit(c, 0);
    assert.match(parseJson(c).warnings.join(' '), /removed \d+ temporary file\(s\)/);
    assert.deepEqual(tmpPacks(), [path.basename(livePack)]);
    assert.deepEqual(scratch(), [`capture-${process.pid}-AbCdEf`]);
    assert.equal(leftovers(), 0);
    const snap = parseJson(c).snapshot as string;

    const siblings = () => ls(sb.root, /\.xet-restore-/);
    const k2 = await killWhen(sb, r.dir, ['restore', snap, sb.path('copy1'), '--json'], () => siblings().length > 0);
    assert.ok(k2, 'the restore finished before its temporary sibling appeared');
    assert.equal(siblings().length, 1);
    assert.ok(!fs.existsSync(sb.path('copy1')));
    const live = sb.path(`.copy9.xet-restore-${process.pid}-abcd1234`);
    fs.mkdirSync(live);
    const rs = restore(sb, r.dir, snap, sb.path('copy2'));
    assert.match(parseJson(rs).warnings.join(' '), /removed 1 temporary file\(s\)/);
    assert.deepEqual(siblings(), [path.basename(live)]);
    expectExit(verify(sb, r.dir, snap, sb.path('copy2')), 0);
  });
});

test('a path longer than PATH_MAX is PATH_TOO_LONG for capture and for restore of a forged snapshot', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const good = capture(sb, r.dir);
    // 25 levels of 200-byte names: 5000 bytes, made with relative paths as only they can.
    const name = 'd'.repeat(200);
    run(sb, r.dir, 'bash', ['-c', `for i in $(seq 25); do mkdir ${name} && cd ${name} || exit 1; done; echo x > f`]);
    try {
      const e = expectError(xet(sb, r.dir, ['capture', '--json']), 'PATH_TOO_LONG');
      assert.ok(e.details.bytes >= 4096, JSON.stringify(e.details));
    } finally {
      // rm(1) walks with relative paths; node's rmSync would fail on this tree (and so the cleanup).
      run(sb, r.dir, 'rm', ['-rf', name]);
    }

    // A forged snapshot whose files tree holds the same path.
    let tree = r.gitInput(`100644 blob ${r.git('rev-parse', `${good}:files/a.txt`).trim()}\tf\n`, 'mktree').trim();
    for (let i = 0; i < 25; i++) tree = r.gitInput(`040000 tree ${tree}\t${name}\n`, 'mktree').trim();
    const top = r
      .gitInput(
        `040000 tree ${tree}\tfiles\n040000 tree ${r.git('rev-parse', `${good}:index`).trim()}\tindex\n` +
          `100644 blob ${r.git('rev-parse', `${good}:manifest.json`).trim()}\tmanifest.json\n`,
        'mktree',
      )
      .trim();
    const forged = r.gitInput('forged\n', 'commit-tree', top).trim();
    r.git('update-ref', `refs/xet/snapshots/${forged}`, forged);
    expectError(xet(sb, r.dir, ['restore', forged, sb.path('copy'), '--json']), 'PATH_TOO_LONG');
    assert.deepEqual(
      fs.readdirSync(sb.root).filter((n) => n.includes('copy')),
      [],
      'nothing of the restore is left',
    );
  });
});

test('bidi control characters are refused in every handoff text field, and list escapes forged names', async () => {
  await withSandbox((sb) => {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const snap = capture(sb, r.dir);
    const base = ['handoff', 'create', snap, '--to', 'bob', '--from', 'alice', '--json'];
    const cases = [
      ...[
        '\u202a',
        '\u202b',
        '\u202c',
        '\u202d',
        '\u202e',
        '\u2066',
        '\u2067',
        '\u2068',
        '\u2069',
        '\u200e',
        '\u200f',
        '\u061c',
        '\u2028',
        '\u2029',
      ].map((c) => ['--title', `ok ${c}evil`]),
      ['--title', 't', '--summary', 'line\n\u202ex'],
      ['--title', 't', '--finding', 'f\u2067'],
      ['--title', 't', '--negative', '\u202dn'],
      ['--title', 't', '--correlation-id', 'c\u2066'],
      ['--title', 't', '--artifact', 'a\u202e.txt'],
    ];
    for (const extra of cases) {
      const e = expectError(xet(sb, r.dir, [...base, ...extra]), 'HANDOFF_INVALID');
      assert.match(e.message, /bidirectional control (or separator )?character/, extra.join(' '));
    }
    assert.equal(r.git('for-each-ref', 'refs/xet/handoffs/'), '', 'nothing was created');

    // Someone else's descriptor with a bidi override, and a ref whose very name holds one.
    const bytes = Buffer.from(
      JSON.stringify({
        artifacts: [],
        createdAt: '2025-01-02T03:04:05Z',
        findings: [],
        from: 'mallory',
        negative: [],
        schema: 'xet.handoff/v1',
        snapshot: { manifestSha256: sha256(r.gitTry('cat-file', 'blob', `${snap}:manifest.json`).stdout), oid: snap },
        summary: '',
        title: 'fix \u202egnp.exe',
        to: ['bob'],
      }),
    );
    const blob = r.gitInput(bytes, 'hash-object', '-w', '--stdin').trim();
    const tree = r.gitInput(`100644 blob ${blob}\tdescriptor.json\n`, 'mktree').trim();
    const commit = r.gitInput('x\n', 'commit-tree', tree, '-p', snap).trim();
    r.git('update-ref', `refs/xet/handoffs/${sha256(bytes)}`, commit);
    r.git('update-ref', 'refs/xet/handoffs/\u202eevil', commit);
    const list = xet(sb, r.dir, ['handoff', 'list', '--json']);
    expectExit(list, 0);
    const hs = parseJson(list).handoffs as { id: string; valid: boolean; title: string | null; problems: string[] }[];
    const forged = hs.find((h) => h.id === sha256(bytes));
    assert.equal(forged?.valid, false);
    assert.equal(forged?.title, null);
    assert.match(forged?.problems.join(' ') ?? '', /bidirectional control (or separator )?character/);
    const human = xet(sb, r.dir, ['handoff', 'list']);
    expectExit(human, 0);
    assert.ok(!/[\u202a-\u202e\u2066-\u2069]/.test(human.stdout), human.stdout);
    assert.match(human.stdout, /\\u\{202e\}evil/);
  });
});
