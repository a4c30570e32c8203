// Safety: crafted snapshots never write outside the target, a killed restore never verifies, killed
// and concurrent captures leave the repository and sidecar consistent, unknown formats are refused.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { Repo, initRepo } from '../support/git';
import { createSandbox, type Sandbox } from '../support/sandbox';
import { killAt } from '../support/faults';
import { XET_BIN, capture, expectError, expectExit, parseJson, verify, xet } from '../support/xet';

/** Raw tree object from entries, written with --literally so any name (even "../x") goes in. */
function rawTree(r: Repo, entries: { mode: string; name: string; oid: string }[]): string {
  const parts = entries.map((e) => Buffer.concat([Buffer.from(`${e.mode} ${e.name}\0`), Buffer.from(e.oid, 'hex')]));
  return r.gitInput(Buffer.concat(parts), 'hash-object', '-t', 'tree', '--literally', '-w', '--stdin').trim();
}

/** A copy of a real snapshot whose files/ tree is replaced by a crafted one. */
function craftSnapshot(
  r: Repo,
  base: string,
  files: string,
  manifestEdit?: (m: Record<string, unknown>) => void,
): string {
  const manifest = JSON.parse(r.git('cat-file', 'blob', `${base}:manifest.json`));
  manifestEdit?.(manifest);
  const mblob = r.gitInput(JSON.stringify(manifest), 'hash-object', '-w', '--stdin').trim();
  const index = r.git('rev-parse', `${base}:index`).trim();
  const top = r
    .gitInput(
      `040000 tree ${files}\tfiles\n040000 tree ${index}\tindex\n100644 blob ${mblob}\tmanifest.json\n`,
      'mktree',
    )
    .trim();
  return r.gitInput('crafted\n', 'commit-tree', top).trim();
}

function setup(): { sb: Sandbox; r: Repo; base: string; blob: string } {
  const sb = createSandbox();
  const r = initRepo(sb, 'src');
  r.commit('init', { 'README.md': 'hi\n' });
  const base = capture(sb, r.dir);
  const blob = r.gitInput('payload\n', 'hash-object', '-w', '--stdin').trim();
  return { sb, r, base, blob };
}

test('crafted snapshots are refused before any byte is written', () => {
  const { sb, r, base, blob } = setup();
  try {
    const outside = sb.path('outside');
    fs.mkdirSync(outside);
    const link = r.gitInput(outside, 'hash-object', '-w', '--stdin').trim();
    const sub = rawTree(r, [{ mode: '100644', name: 'pwned', oid: blob }]);
    const cases: [string, string, string][] = [
      ['dot-dot entry', rawTree(r, [{ mode: '100644', name: '..', oid: blob }]), 'PATH_ESCAPE'],
      ['slash in a name', rawTree(r, [{ mode: '100644', name: 'a/../../../outside/pwned', oid: blob }]), 'PATH_ESCAPE'],
      [
        'absolute name',
        rawTree(r, [{ mode: '100644', name: `/${outside}/pwned`.replace('//', '/'), oid: blob }]),
        'PATH_ESCAPE',
      ],
      [
        '.git entry',
        rawTree(r, [
          { mode: '040000', name: '.git', oid: rawTree(r, [{ mode: '100644', name: 'config', oid: blob }]) },
        ]),
        'PATH_ESCAPE',
      ],
      [
        'symlink then a path through it',
        rawTree(r, [
          { mode: '120000', name: 'a', oid: link },
          { mode: '040000', name: 'a', oid: sub },
        ]),
        'PATH_CONFLICT',
      ],
      [
        'colliding names',
        rawTree(r, [
          { mode: '100644', name: 'x', oid: blob },
          { mode: '100644', name: 'x', oid: blob },
        ]),
        'PATH_CONFLICT',
      ],
    ];
    for (const [what, tree, code] of cases) {
      const snap = craftSnapshot(r, base, tree);
      const target = sb.path(`t-${what.replace(/\W+/g, '-')}`);
      expectError(xet(sb, r.dir, ['restore', snap, target, '--json']), code);
      assert.ok(!fs.existsSync(target), `${what}: target must not exist`);
      assert.deepEqual(fs.readdirSync(outside), [], `${what}: nothing may land outside`);
      const leftovers = fs.readdirSync(sb.root).filter((n) => n.includes('xet-restore'));
      assert.deepEqual(leftovers, [], `${what}: no temporary directory left behind`);
    }
    // An empty directory listed through a symlink the snapshot creates.
    const withLink = rawTree(r, [{ mode: '120000', name: 'l', oid: link }]);
    const snap = craftSnapshot(r, base, withLink, (m) => {
      m.emptyDirs = ['l/inside'];
    });
    expectError(xet(sb, r.dir, ['restore', snap, sb.path('t-emptydir'), '--json']), 'PATH_CONFLICT');
    assert.deepEqual(fs.readdirSync(outside), []);
  } finally {
    sb.cleanup();
  }
});

test('a snapshot from a newer major format is refused with SCHEMA_UNSUPPORTED', () => {
  const { sb, r, base } = setup();
  try {
    const files = r.git('rev-parse', `${base}:files`).trim();
    const snap = craftSnapshot(r, base, files, (m) => {
      m.schema = 'xet.snapshot/v5';
    });
    expectError(xet(sb, r.dir, ['show', snap, '--json']), 'SCHEMA_UNSUPPORTED');
    expectError(xet(sb, r.dir, ['restore', snap, sb.path('t'), '--json']), 'SCHEMA_UNSUPPORTED');
    assert.ok(!fs.existsSync(sb.path('t')));
    const notSnap = r.git('rev-parse', 'HEAD').trim();
    expectError(xet(sb, r.dir, ['show', notSnap, '--json']), 'SNAPSHOT_INVALID');
  } finally {
    sb.cleanup();
  }
});

function bigTree(r: Repo, dirs: number, files: number): void {
  for (let d = 0; d < dirs; d++) {
    fs.mkdirSync(r.p(`gen/d${d}`), { recursive: true });
    for (let f = 0; f < files; f++) fs.writeFileSync(r.p(`gen/d${d}/f${f}.txt`), `${d}/${f}\n`.repeat(200));
  }
}

test('a restore killed at each of its fault points leaves no target that verifies, and can be redone', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    bigTree(r, 10, 50);
    const snap = capture(sb, r.dir);
    const points = ['restore:after-objects', 'restore:after-files', 'restore:before-rename'] as const;
    for (const [n, point] of points.entries()) {
      for (const existing of [false, true]) {
        const target = sb.path(`copy-${n}-${existing}`);
        if (existing) fs.mkdirSync(target); // an existing empty target directory stays just that
        killAt(sb, r.dir, ['restore', snap, target, '--json'], point);
        if (existing) assert.deepEqual(fs.readdirSync(target), [], `${point}: the empty target stays empty`);
        else assert.equal(fs.existsSync(target), false, `${point}: no target`);
        const v = verify(sb, r.dir, snap, target);
        expectExit(v, 1);
        const out = parseJson(v);
        assert.equal(out.ok, false);
        assert.deepEqual(
          out.differences.map((d: { kind: string }) => d.kind),
          [existing ? 'not-a-repository' : 'missing'],
          `${point}: ${v.stdout}`,
        );
        // The half-made restore is in a hidden sibling. Before the rename it still says it is
        // unfinished: verify reports it, and a capture in it is refused.
        const hidden = fs
          .readdirSync(path.dirname(target))
          .filter((name) => name.startsWith(`.${path.basename(target)}.xet-restore-`));
        assert.equal(hidden.length, 1, `${point}: one hidden sibling: ${hidden.join(', ')}`);
        const sibling = path.join(path.dirname(target), hidden[0]);
        if (point !== 'restore:before-rename') {
          const vs = parseJson(verify(sb, r.dir, snap, sibling));
          assert.deepEqual(
            vs.differences.map((d: { kind: string }) => d.kind),
            ['incomplete'],
            `${point}: ${JSON.stringify(vs)}`,
          );
          expectError(xet(sb, sibling, ['capture', '--json']), 'RESTORE_INCOMPLETE');
        }
        fs.rmSync(sibling, { recursive: true, force: true });
        // A new restore into the same place succeeds and verifies.
        expectExit(xet(sb, r.dir, ['restore', snap, target]), 0);
        expectExit(verify(sb, r.dir, snap, target), 0);
      }
    }
  } finally {
    sb.cleanup();
  }
});

test('concurrent captures in one repository queue on the lock: all succeed and stay consistent', async () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    bigTree(r, 10, 50);
    const runs = await Promise.all(
      [0, 1, 2, 3].map(
        (i) =>
          new Promise<{ code: number | null; out: string }>((res) => {
            const child = spawn(process.execPath, [XET_BIN, 'capture', '-m', `c${i}`, '--json'], {
              cwd: r.dir,
              env: sb.env,
            });
            let out = '';
            child.stdout.on('data', (b) => (out += b));
            child.on('close', (code) => res({ code, out }));
          }),
      ),
    );
    // They wait for each other (BUSY only after 30 s of waiting, docs/CLI.md), so every one succeeds.
    const snaps: string[] = [];
    for (const run of runs) {
      assert.equal(run.code, 0, run.out);
      snaps.push(JSON.parse(run.out).snapshot);
    }
    const refs = r.git('for-each-ref', '--format=%(objectname)', 'refs/xet/snapshots/').trim().split('\n');
    for (const s of snaps) assert.ok(refs.includes(s), `snapshot ${s} has its ref`);
    r.git('fsck', '--no-progress', '--strict');
    const list = parseJson(xet(sb, r.dir, ['snapshots', '--json']));
    assert.equal(list.snapshots.length, refs.length);
    const target = sb.path('copy');
    expectExit(xet(sb, r.dir, ['restore', snaps[0], target]), 0);
    expectExit(verify(sb, r.dir, snaps[0], target), 0);
  } finally {
    sb.cleanup();
  }
});

test('a capture killed at each of its fault points leaves no snapshot ref or a complete one', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    bigTree(r, 10, 50);
    const snapshotRefs = () => r.git('for-each-ref', '--format=%(objectname)', 'refs/xet/').split('\n').filter(Boolean);
    const listed = () => parseJson(xet(sb, r.dir, ['snapshots', '--json'])).snapshots.length as number;
    for (const point of ['pack:mid-write', 'capture:after-pack', 'capture:before-ref', 'capture:after-ref'] as const) {
      const before = snapshotRefs();
      const listedBefore = listed();
      r.write(`gen/changed-${point.replace(':', '-')}.txt`, `${point}\n`); // something new to store
      killAt(sb, r.dir, ['capture', '--json'], point);
      const added = snapshotRefs().filter((oid) => !before.includes(oid));
      if (point === 'pack:mid-write') {
        const packs = fs.readdirSync(path.join(r.dir, '.git', 'objects', 'pack'));
        assert.ok(
          packs.some((n) => n.startsWith('tmp_pack_xet_')),
          `killed with a pack half written: ${packs.join(', ')}`,
        );
      }
      if (point === 'capture:after-ref') {
        // The ref is the publication: the snapshot is whole although the sidecar never heard of it.
        assert.equal(added.length, 1, `${point}: one new snapshot ref`);
        assert.equal(listed(), listedBefore + 1);
        const target = sb.path(`killed-${added[0]}`);
        expectExit(xet(sb, r.dir, ['restore', added[0], target]), 0);
        expectExit(verify(sb, r.dir, added[0], target), 0);
      } else {
        assert.deepEqual(added, [], `${point}: no snapshot ref`);
        assert.equal(listed(), listedBefore);
      }
      const snap = capture(sb, r.dir);
      const target = sb.path(`copy-${snap}`);
      expectExit(xet(sb, r.dir, ['restore', snap, target]), 0);
      expectExit(verify(sb, r.dir, snap, target), 0);
    }
    r.git('fsck', '--no-progress');
  } finally {
    sb.cleanup();
  }
});

test('init is idempotent and creates the sidecar in the common git dir (shared by linked worktrees)', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    const first = parseJson(xet(sb, r.dir, ['init', '--json']));
    const again = parseJson(xet(sb, r.dir, ['init', '--json']));
    assert.deepEqual(first, again);
    assert.equal(first.sidecar, path.join(r.dir, '.git', 'xet', 'xet.db'));
    r.git('worktree', 'add', '-q', sb.path('wt'));
    const fromWt = parseJson(xet(sb, sb.path('wt'), ['init', '--json']));
    assert.equal(fromWt.sidecar, first.sidecar);
    expectError(xet(sb, sb.root, ['init', '--json']), 'NOT_A_REPOSITORY');
  } finally {
    sb.cleanup();
  }
});

test('a second capture of an unchanged tree is incremental and yields the same files tree', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    bigTree(r, 5, 20);
    const a = parseJson(xet(sb, r.dir, ['capture', '--json']));
    const b = parseJson(xet(sb, r.dir, ['capture', '--json']));
    assert.equal(a.incremental, false);
    assert.equal(b.incremental, true);
    assert.equal(r.git('rev-parse', `${a.snapshot}:files`), r.git('rev-parse', `${b.snapshot}:files`));
    assert.equal(b.bytes, a.bytes);
    assert.equal(b.files, a.files);
    // Edit, delete and add: the totals follow the tree (counted from the diff, not a full listing).
    fs.appendFileSync(r.p('gen/d0/f0.txt'), 'more\n');
    fs.rmSync(r.p('gen/d1/f1.txt'));
    fs.writeFileSync(r.p('gen/new.txt'), '12345');
    const c = parseJson(xet(sb, r.dir, ['capture', '--json']));
    const listing = r.git('ls-tree', '-r', '-l', `${c.snapshot}:files`).trim().split('\n');
    const bytes = listing.reduce((n, l) => n + Number(l.split(/\s+/)[3]), 0);
    assert.equal(c.files, listing.length);
    assert.equal(c.bytes, bytes);
    const d = parseJson(xet(sb, r.dir, ['diff', a.snapshot, c.snapshot, '--json']));
    const kinds = Object.fromEntries(d.changes.map((x: { path: string; kind: string }) => [x.path, x.kind]));
    assert.deepEqual(kinds, {
      'gen/d0/f0.txt': 'file-modified',
      'gen/d1/f1.txt': 'file-deleted',
      'gen/new.txt': 'file-added',
    });
  } finally {
    sb.cleanup();
  }
});

test('packs from many captures are rolled up past xet.capture.maxPacks, and every snapshot survives', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n' });
    r.git('config', 'xet.capture.maxPacks', '3');
    const packCount = () => fs.readdirSync(r.p('.git/objects/pack')).filter((n) => n.endsWith('.idx')).length;
    const snaps: string[] = [];
    let repacked = false;
    for (let i = 0; i < 6; i++) {
      r.write(`f${i}.txt`, `content ${i}\n`.repeat(100));
      const out = parseJson(xet(sb, r.dir, ['capture', '--json']));
      snaps.push(out.snapshot);
      repacked ||= out.repacked;
      assert.deepEqual(out.warnings, []);
    }
    assert.ok(repacked, 'a capture consolidated packs');
    assert.ok(packCount() <= 4, `packs after consolidation: ${packCount()}`);
    r.git('fsck', '--no-progress', '--strict');
    for (const s of snaps) {
      const target = sb.path(`copy-${s.slice(0, 8)}`);
      expectExit(xet(sb, r.dir, ['restore', s, target]), 0);
      expectExit(verify(sb, r.dir, s, target), 0);
    }
  } finally {
    sb.cleanup();
  }
});

test('a first capture in a second worktree stores only what differs from the newest snapshot', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'a.txt': 'a\n', '.gitignore': 'node_modules/\n' });
    for (let i = 0; i < 300; i++) r.write(`node_modules/pkg${i % 30}/f${i}.js`, `module.exports = ${i};\n`.repeat(20));
    capture(sb, r.dir);
    const wt = sb.path('wt');
    r.git('worktree', 'add', '-q', wt);
    fs.cpSync(r.p('node_modules'), path.join(wt, 'node_modules'), { recursive: true });
    fs.writeFileSync(path.join(wt, 'node_modules', 'only-here.js'), 'new\n');
    const packs = () => fs.readdirSync(r.p('.git/objects/pack')).filter((n) => n.endsWith('.idx'));
    const before = new Set(packs());
    const snap = capture(sb, wt);
    const added = packs().filter((n) => !before.has(n));
    const objects = added
      .map((n) => r.git('verify-pack', '-v', r.p(`.git/objects/pack/${n}`)))
      .join('')
      .split('\n')
      .filter((l) => /^[0-9a-f]{40} /.test(l));
    // The new file, plus the trees on its path; none of the 300 shared files.
    assert.ok(objects.length <= 4, `objects stored: ${objects.length}`);
    const target = sb.path('copy');
    expectExit(xet(sb, wt, ['restore', snap, target]), 0);
    expectExit(verify(sb, wt, snap, target), 0);
    r.git('fsck', '--no-progress', '--strict');
  } finally {
    sb.cleanup();
  }
});

test("a caller's GIT_DIR never redirects restore's writes into the source repository", () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('one', { 'f.txt': 'hi\n' });
    const snap = capture(sb, r.dir);
    r.git('checkout', '-qb', 'work');
    r.commit('unique work', { 'w.txt': 'w\n' });
    const refsBefore = r.git('for-each-ref');
    const indexBefore = fs.readFileSync(r.p('.git/index'));
    const env = { GIT_DIR: r.p('.git'), GIT_WORK_TREE: r.dir, GIT_INDEX_FILE: r.p('.git/index') };
    expectExit(xet(sb, r.dir, ['restore', snap, sb.path('copy')], { env }), 0);
    assert.equal(r.git('for-each-ref'), refsBefore);
    assert.equal(r.git('symbolic-ref', 'HEAD').trim(), 'refs/heads/work');
    assert.ok(fs.readFileSync(r.p('.git/index')).equals(indexBefore));
    expectExit(verify(sb, r.dir, snap, sb.path('copy')), 0);
    // And the caller's GIT_DIR still names the repository the user means, from anywhere.
    const list = parseJson(xet(sb, sb.root, ['snapshots', '--json'], { env }));
    assert.deepEqual(
      list.snapshots.map((s: { snapshot: string }) => s.snapshot),
      [snap],
    );
  } finally {
    sb.cleanup();
  }
});

test('crafted index flags and config cannot write outside the target or run commands', () => {
  const sb = createSandbox();
  try {
    const r = initRepo(sb, 'src');
    r.commit('init', { 'f.txt': 'f\n' });
    const outside = sb.path('outside');
    fs.mkdirSync(outside);
    fs.symlinkSync(outside, r.p('evil'));
    const base = capture(sb, r.dir);
    const files = r.git('rev-parse', `${base}:files`).trim();
    // intent-to-add through a symlink the snapshot creates
    const ita = craftSnapshot(r, base, files, (m) => {
      (m.index as { intentToAdd: string[] }).intentToAdd = ['evil/sub/pwned'];
    });
    // (git allows such an entry: an intent-to-add file whose directory became something else; what
    // matters is that restoring it never follows the link.)
    const t1 = sb.path('t1');
    expectExit(xet(sb, r.dir, ['restore', ita, t1]), 0);
    assert.deepEqual(fs.readdirSync(outside), []);
    assert.equal(fs.readlinkSync(path.join(t1, 'evil')), outside);
    // config that would run a command (fsmonitor) is refused before anything is written
    const marker = sb.path('PWNED');
    const cfg = craftSnapshot(r, base, files, (m) => {
      (m.config as { key: string; value: string }[]).push({ key: 'core.fsmonitor', value: `touch ${marker}; true` });
    });
    expectError(xet(sb, r.dir, ['restore', cfg, sb.path('t2'), '--json']), 'SNAPSHOT_INVALID');
    assert.ok(!fs.existsSync(marker));
    assert.ok(!fs.existsSync(sb.path('t2')));
  } finally {
    sb.cleanup();
  }
});
