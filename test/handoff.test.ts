// Handoff descriptors end to end: create (ids, limits, create-once refs), list, show, verify (forged,
// tampered and broken handoffs built by hand with plumbing), accept (restore, fork, refusals) and a
// handoff travelling by plain `git fetch` to another repository. Real git, real CLI, fixtures on tmpfs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, type Repo } from './support/git';
import { withMountSandbox } from './support/mounts';
import type { Sandbox } from './support/sandbox';
import { sha256, sidecarRows } from './support/state';
import { capture, expectError, expectExit, parseJson, verify, xet } from './support/xet';

const ZERO = '0'.repeat(40);

/** A repository with tracked, untracked and symlinked files (and 257 small ones), and its snapshot. */
function source(sb: Sandbox, name = 'src'): { r: Repo; snap: string } {
  const r = initRepo(sb, name);
  const many: Record<string, string> = {};
  for (let i = 0; i < 257; i++) many[`many/${String(i).padStart(3, '0')}.txt`] = `${i}\n`;
  r.commit('init', { 'a.txt': 'a\n', 'dir/b.txt': 'b\n', ...many });
  r.symlink('a.txt', 'link');
  r.write('notes/untracked.md', 'findings\n');
  r.write('a.txt', 'edited\n');
  return { r, snap: capture(sb, r.dir) };
}

/** Canonical JSON written independently of the code under test: sorted keys, no whitespace. */
function canon(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canon(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function manifestSha(r: Repo, snap: string): string {
  return sha256(r.gitTry('cat-file', 'blob', `${snap}:manifest.json`).stdout);
}

/** A valid descriptor value for `snap`, with overrides. */
function descriptor(r: Repo, snap: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    schema: 'xet.handoff/v1',
    snapshot: { oid: snap, manifestSha256: manifestSha(r, snap) },
    from: 'alice',
    to: ['bob'],
    title: 'hand-made',
    summary: '',
    findings: [],
    negative: [],
    artifacts: ['a.txt'],
    createdAt: '2025-01-02T03:04:05Z',
    ...over,
  };
}

function create(sb: Sandbox, cwd: string, args: string[]): { id: string; commit: string; created: boolean } {
  const r = xet(sb, cwd, ['handoff', 'create', ...args, '--json']);
  expectExit(r, 0);
  const out = parseJson(r);
  assert.match(out.id, /^[0-9a-f]{64}$/);
  return out;
}

function descriptorFile(sb: Sandbox, bytes: Buffer | string): string {
  const f = sb.path(`descriptor-${sha256(bytes).slice(0, 12)}.json`);
  fs.writeFileSync(f, bytes);
  return f;
}

function storedBytes(r: Repo, id: string): Buffer {
  const res = r.gitTry('cat-file', 'blob', `refs/xet/handoffs/${id}:descriptor.json`);
  assert.equal(res.status, 0, res.stderr.toString());
  return res.stdout;
}

/** Everything a failed create could have left: refs under refs/xet and the object store. */
function footprint(r: Repo): string {
  return `${r.git('for-each-ref', 'refs/xet')}\n${r.git('count-objects', '-v')}`;
}

/** Write a handoff by hand: descriptor blob, tree (plus an extra entry), commit, ref named `id`. */
function forge(r: Repo, bytes: Buffer, o: { parent: string; id?: string; extra?: boolean }): string {
  const blob = r.gitInput(bytes, 'hash-object', '-w', '--stdin').trim();
  let entries = `100644 blob ${blob}\tdescriptor.json\n`;
  if (o.extra) entries += `100644 blob ${r.gitInput('x\n', 'hash-object', '-w', '--stdin').trim()}\tpayload.sh\n`;
  const tree = r.gitInput(entries, 'mktree').trim();
  const commit = r.gitInput('forged\n', 'commit-tree', tree, '-p', o.parent).trim();
  const id = o.id ?? sha256(bytes);
  r.git('update-ref', `refs/xet/handoffs/${id}`, commit, ZERO);
  return id;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function checksOf(details: any): Record<string, boolean | null> {
  return Object.fromEntries((details.checks as { check: string; ok: boolean | null }[]).map((c) => [c.check, c.ok]));
}

function acceptanceRows(r: Repo): { handoff: string; dir: string; mode: string; snapshot: string }[] {
  return sidecarRows(r.commonDir(), 'SELECT handoff, dir, mode, snapshot FROM handoff_acceptances ORDER BY dir');
}

test('create: the id is the sha256 of canonical bytes, stored as a commit on the snapshot; idempotent', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const out = create(sb, r.dir, [
      snap.slice(0, 10),
      '--to',
      'bob,carol',
      '--to',
      'dave',
      '--from',
      'alice',
      '--title',
      'Parser half done — café',
      '--summary',
      'line one\nline two',
      '--finding',
      'the lexer is fine',
      '--finding',
      'tests in dir/ pass',
      '--negative',
      'a regex parser was too slow',
      '--artifact',
      'a.txt',
      '--artifact',
      'link',
      '--artifact',
      'notes/untracked.md',
      '--correlation-id',
      'run 42/α',
      '--expires',
      '7d',
    ]);
    assert.equal(out.created, true);
    const bytes = storedBytes(r, out.id);
    assert.equal(sha256(bytes), out.id, 'the id is the sha256 of the stored bytes');
    const value = JSON.parse(bytes.toString('utf8'));
    assert.equal(canon(value), bytes.toString('utf8'), 'the stored bytes are canonical JSON');
    assert.equal(value.schema, 'xet.handoff/v1');
    assert.deepEqual(value.snapshot, { oid: snap, manifestSha256: manifestSha(r, snap) });
    assert.deepEqual(value.to, ['bob', 'carol', 'dave']);
    assert.equal(value.from, 'alice');
    assert.equal(value.title, 'Parser half done — café');
    assert.equal(value.summary, 'line one\nline two');
    assert.deepEqual(value.findings, ['the lexer is fine', 'tests in dir/ pass']);
    assert.deepEqual(value.negative, ['a regex parser was too slow']);
    assert.deepEqual(value.artifacts, ['a.txt', 'link', 'notes/untracked.md']);
    assert.equal(value.correlationId, 'run 42/α');
    assert.equal(Date.parse(value.expiresAt) - Date.parse(value.createdAt), 7 * 86400 * 1000);
    // The commit: exactly descriptor.json, one parent (the snapshot), a fixed identity dated createdAt.
    const ref = `refs/xet/handoffs/${out.id}`;
    assert.equal(r.git('rev-parse', ref).trim(), out.commit);
    assert.equal(r.git('ls-tree', '--name-only', ref), 'descriptor.json\n');
    assert.equal(r.git('rev-parse', `${ref}^@`).trim(), snap);
    assert.equal(
      r.git('log', '-1', '--format=%an <%ae> %at|%cn %ct', ref).trim(),
      `git xet <git-xet@localhost> ${Date.parse(value.createdAt) / 1000}|git xet ${Date.parse(value.createdAt) / 1000}`,
    );
    assert.equal(r.gitTry('fsck', '--strict', '--no-dangling').status, 0, 'git fsck accepts the objects');

    // The same descriptor again: same id, same commit, nothing new.
    const before = footprint(r);
    const again = create(sb, r.dir, ['--descriptor', descriptorFile(sb, bytes)]);
    assert.deepEqual([again.id, again.commit, again.created], [out.id, out.commit, false]);
    assert.equal(footprint(r), before);
  });
});

test('create-once: a ref already holding something else is REF_IMMUTABLE and is not moved', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const bytes = Buffer.from(canon(descriptor(r, snap)));
    const id = sha256(bytes);
    const head = r.git('rev-parse', 'HEAD').trim();
    r.git('update-ref', `refs/xet/handoffs/${id}`, head);
    const before = footprint(r);
    const e = expectError(
      xet(sb, r.dir, ['handoff', 'create', '--descriptor', descriptorFile(sb, bytes), '--json']),
      'REF_IMMUTABLE',
    );
    assert.equal(e.details.existing, head);
    assert.equal(r.git('rev-parse', `refs/xet/handoffs/${id}`).trim(), head, 'the ref did not move');
    assert.equal(footprint(r), before, 'nothing was written');
  });
});

test('an object directory nobody can write: handoff create fails as git reports it, nothing published', async (t) => {
  if (process.getuid?.() !== 0) {
    t.skip('needs root, to mount the object directory read-only (root writes through file modes)');
    return;
  }
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const objects = path.join(r.dir, '.git', 'objects');
    const mount = (args: string[]) => assert.equal(spawnSync('mount', args).status, 0, `mount ${args.join(' ')}`);
    mount(['--bind', objects, objects]);
    mount(['-o', 'remount,ro,bind', objects]);
    try {
      const args = ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 'read-only', '--json'];
      // Written in-process first, then by git, which refuses it: git's error, as before.
      const e = expectError(xet(sb, r.dir, args), 'GIT_FAILED');
      assert.match(e.message, /hash-object/);
      assert.equal(r.git('for-each-ref', 'refs/xet/handoffs/').trim(), '', 'no handoff ref');
    } finally {
      spawnSync('umount', [objects]);
    }
  });
});

test('every limit and bad input is refused with its code before anything is written', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const base = [snap, '--to', 'bob', '--from', 'alice', '--title', 'ok'];
    const before = footprint(r);
    const refuse = (args: string[], code: string, message: RegExp, exit = 3) => {
      const e = expectError(xet(sb, r.dir, ['handoff', 'create', ...args, '--json']), code, exit);
      assert.match(e.message, message);
      assert.equal(footprint(r), before, `create ${args.slice(0, 6).join(' ')}… wrote something`);
    };
    const file = (v: Record<string, unknown> | string) => descriptorFile(sb, typeof v === 'string' ? v : canon(v));

    refuse([...base, '--title', 'x'.repeat(257)], 'HANDOFF_INVALID', /title.*256 bytes/);
    refuse([...base, '--title', 'é'.repeat(129)], 'HANDOFF_INVALID', /title.*256 bytes/); // 258 UTF-8 bytes
    refuse([...base, '--title', 'two\nlines'], 'HANDOFF_INVALID', /title.*control character/);
    refuse([...base, '--summary', 's'.repeat(16 * 1024 + 1)], 'HANDOFF_INVALID', /summary/);
    refuse([...base, '--finding', 'f'.repeat(4097)], 'HANDOFF_INVALID', /finding.*4096/);
    const artifacts = (n: number) =>
      Array.from({ length: n }, (_, i) => ['--artifact', `many/${String(i).padStart(3, '0')}.txt`]).flat();
    refuse([...base, ...artifacts(257)], 'HANDOFF_INVALID', /at most 256 artifacts/);
    refuse([...base, '--artifact', 'no/such/file'], 'HANDOFF_INVALID', /no\/such\/file/);
    refuse([...base, '--artifact', 'dir'], 'HANDOFF_INVALID', /"dir"/); // a directory is not a file
    refuse([...base, '--artifact', '../escape'], 'HANDOFF_INVALID', /artifact path/);
    refuse([...base, '--artifact', 'a.txt', '--artifact', 'a.txt'], 'HANDOFF_INVALID', /twice/);
    refuse([...base, '--correlation-id', 'run\u0007bell'], 'HANDOFF_INVALID', /correlationId.*control/);
    refuse([...base, '--correlation-id', `${'é'.repeat(128)}a`], 'HANDOFF_INVALID', /correlationId.*256 bytes/);
    refuse([snap, '--to', 'bob smith', '--from', 'alice', '--title', 't'], 'HANDOFF_INVALID', /agent name/);
    refuse([snap, '--to', 'bob,bob', '--from', 'alice', '--title', 't'], 'HANDOFF_INVALID', /twice/);
    // 20 findings of 4000 bytes fit their own bounds but not the 64 KiB descriptor.
    refuse(
      [...base, ...Array.from({ length: 20 }, (_, i) => ['--finding', `${i}`.padEnd(4000, 'f')]).flat()],
      'HANDOFF_INVALID',
      /65536 bytes/,
    );
    refuse([...base, '--expires', 'soon'], 'USAGE', /--expires/, 2);
    refuse([snap, '--to', 'bob', '--title', 't'], 'USAGE', /--from/, 2);
    refuse(['0000000', ...base.slice(1)], 'SNAPSHOT_NOT_FOUND', /0000000/);

    // Hand-crafted descriptors: unknown field, non-canonical bytes, too big, wrong manifest hash.
    refuse(['--descriptor', file(descriptor(r, snap, { note: 'hi' }))], 'HANDOFF_INVALID', /note/);
    refuse(['--descriptor', file(JSON.stringify(descriptor(r, snap), null, 2))], 'HANDOFF_INVALID', /not canonical/);
    refuse(['--descriptor', file(`${canon(descriptor(r, snap))}\n`)], 'HANDOFF_INVALID', /not canonical/);
    const big = descriptor(r, snap, { summary: 's'.repeat(70 * 1024) });
    refuse(['--descriptor', file(big)], 'HANDOFF_INVALID', /65536 bytes/);
    refuse(['--descriptor', file(descriptor(r, snap, { schema: 'xet.handoff/v2' }))], 'SCHEMA_UNSUPPORTED', /v2/);
    const wrongManifest = descriptor(r, snap, { snapshot: { oid: snap, manifestSha256: 'ab'.repeat(32) } });
    refuse(['--descriptor', file(wrongManifest)], 'INTEGRITY_MISMATCH', /manifest/);
    refuse(['--descriptor', file(descriptor(r, snap)), '--title', 'x'], 'USAGE', /--descriptor/, 2);

    // The bounds themselves are allowed: 256 artifacts, a 256-byte correlation id.
    const ok = create(sb, r.dir, [...base, ...artifacts(256), '--correlation-id', 'é'.repeat(128)]);
    assert.equal(JSON.parse(storedBytes(r, ok.id).toString()).artifacts.length, 256);
  });
});

test('list filters by --to and --from and flags expired handoffs; show takes abbreviated ids', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const h1 = create(sb, r.dir, [snap, '--to', 'bob,carol', '--from', 'alice', '--title', 'one']);
    const h2 = create(sb, r.dir, [snap, '--to', 'carol', '--from', 'dave', '--title', 'two', '--supersedes', h1.id]);
    const old = create(sb, r.dir, [
      '--descriptor',
      descriptorFile(sb, canon(descriptor(r, snap, { title: 'old', expiresAt: '2025-01-03T03:04:05Z' }))),
    ]);
    const list = (...args: string[]) => {
      const res = xet(sb, r.dir, ['handoff', 'list', ...args, '--json']);
      expectExit(res, 0);
      return parseJson(res).handoffs as { id: string; title: string; expired: boolean; valid: boolean }[];
    };
    const ids = (l: { id: string }[]) => l.map((h) => h.id).sort();
    assert.deepEqual(ids(list()), [h1.id, h2.id, old.id].sort());
    assert.deepEqual(ids(list('--to', 'carol')), [h1.id, h2.id].sort());
    assert.deepEqual(ids(list('--to', 'bob')), [h1.id, old.id].sort());
    assert.deepEqual(ids(list('--from', 'dave')), [h2.id]);
    assert.deepEqual(ids(list('--from', 'alice', '--to', 'carol')), [h1.id]);
    assert.deepEqual(list('--to', 'nobody'), []);
    const all = list() as unknown as {
      id: string;
      expired: boolean;
      valid: boolean;
      supersededBy: string[];
      createdAt: string;
    }[];
    assert.deepEqual(
      all.map((h) => [h.id, h.expired, h.valid]),
      all.map((h) => [h.id, h.id === old.id, true]),
    );
    assert.deepEqual(all.find((h) => h.id === h1.id)?.supersededBy, [h2.id]);
    assert.equal(all[all.length - 1].id, old.id, 'newest first');

    const shown = xet(sb, r.dir, ['handoff', 'show', h2.id.slice(0, 8), '--json']);
    expectExit(shown, 0);
    const s = parseJson(shown);
    assert.equal(s.id, h2.id);
    assert.equal(s.descriptor.title, 'two');
    assert.equal(s.descriptor.supersedes, h1.id);
    assert.equal(canon(s.descriptor), storedBytes(r, h2.id).toString(), 'show prints the stored descriptor');
    expectError(xet(sb, r.dir, ['handoff', 'show', 'ffffffff', '--json']), 'HANDOFF_NOT_FOUND');
    expectError(xet(sb, r.dir, ['handoff', 'show', 'not-hex', '--json']), 'HANDOFF_NOT_FOUND');

    // Expired: verify passes and says so; accept refuses unless --allow-expired.
    const v = xet(sb, r.dir, ['handoff', 'verify', old.id, '--json']);
    expectExit(v, 0);
    assert.equal(parseJson(v).expired, true);
    assert.equal(parseJson(v).ok, true);
    const e = expectError(xet(sb, r.dir, ['handoff', 'accept', old.id, sb.path('late'), '--json']), 'HANDOFF_INVALID');
    assert.match(e.message, /expired/);
    assert.equal(fs.existsSync(sb.path('late')), false);
    const late = xet(sb, r.dir, ['handoff', 'accept', old.id, sb.path('late'), '--allow-expired', '--json']);
    expectExit(late, 0);
    assert.equal(parseJson(late).expired, true);
    expectExit(verify(sb, r.dir, snap, sb.path('late')), 0);
  });
});

test('verify, show, list and accept detect forged, tampered and broken handoffs', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const good = create(sb, r.dir, [snap, '--to', 'bob', '--from', 'alice', '--title', 'genuine']);
    const goodV = xet(sb, r.dir, ['handoff', 'verify', good.id, '--json']);
    expectExit(goodV, 0);
    assert.ok(Object.values(checksOf(parseJson(goodV))).every((ok) => ok === true));

    const head = r.git('rev-parse', 'HEAD').trim();
    const valid = (over: Record<string, unknown> = {}) => Buffer.from(canon(descriptor(r, snap, over)));
    const cases: { name: string; id: string; code: string; check: string }[] = [
      // A descriptor under another handoff's id (bytes do not hash to the name).
      {
        name: 'forged',
        id: forge(r, valid({ title: 'evil' }), { parent: snap, id: 'ab'.repeat(32) }),
        code: 'INTEGRITY_MISMATCH',
        check: 'hash',
      },
      {
        name: 'extra tree entry',
        id: forge(r, valid({ title: 'extra' }), { parent: snap, extra: true }),
        code: 'INTEGRITY_MISMATCH',
        check: 'tree',
      },
      {
        name: 'wrong parent',
        id: forge(r, valid({ title: 'parent' }), { parent: head }),
        code: 'INTEGRITY_MISMATCH',
        check: 'parent',
      },
      {
        name: 'wrong manifest hash',
        id: forge(r, valid({ snapshot: { oid: snap, manifestSha256: 'cd'.repeat(32) } }), { parent: snap }),
        code: 'INTEGRITY_MISMATCH',
        check: 'manifest',
      },
      {
        name: 'missing artifact',
        id: forge(r, valid({ artifacts: ['a.txt', 'gone.txt'] }), { parent: snap }),
        code: 'HANDOFF_INVALID',
        check: 'artifacts',
      },
      {
        name: 'non-canonical',
        id: forge(r, Buffer.from(JSON.stringify(descriptor(r, snap), null, 1)), { parent: snap }),
        code: 'HANDOFF_INVALID',
        check: 'canonical',
      },
      {
        name: 'unknown field',
        id: forge(r, valid({ extra: 1 }), { parent: snap }),
        code: 'HANDOFF_INVALID',
        check: 'schema',
      },
    ];
    for (const c of cases) {
      const e = expectError(xet(sb, r.dir, ['handoff', 'verify', c.id, '--json']), c.code);
      assert.equal(checksOf(e.details)[c.check], false, `${c.name}: the ${c.check} check fails\n${e.message}`);
      const failed = Object.entries(checksOf(e.details)).filter(([, ok]) => ok === false);
      assert.deepEqual(
        failed.map(([k]) => k),
        [c.check],
        `${c.name}: only the ${c.check} check fails`,
      );
      // Accept verifies first and lays nothing down.
      const target = sb.path(`accept-${c.check}`);
      expectError(xet(sb, r.dir, ['handoff', 'accept', c.id, target, '--json']), c.code);
      expectError(
        xet(sb, r.dir, ['handoff', 'accept', c.id, `${target}-fork`, '--fork', '--mode', 'copy', '--json']),
        c.code,
      );
      assert.equal(fs.existsSync(target) || fs.existsSync(`${target}-fork`), false, `${c.name}: nothing restored`);
    }
    // Structural forgeries are caught without reading the snapshot: show refuses, list marks them.
    for (const c of cases.filter((x) => ['hash', 'tree', 'parent', 'canonical', 'schema'].includes(x.check))) {
      expectError(xet(sb, r.dir, ['handoff', 'show', c.id, '--json']), c.code);
    }
    const l = xet(sb, r.dir, ['handoff', 'list', '--json']);
    expectExit(l, 0);
    const listed = parseJson(l).handoffs as { id: string; valid: boolean; problems: string[] }[];
    const validity = Object.fromEntries(listed.map((h) => [h.id, h.valid]));
    assert.equal(validity[good.id], true);
    for (const c of cases.filter((x) => ['hash', 'tree', 'parent', 'canonical', 'schema'].includes(x.check))) {
      assert.equal(validity[c.id], false, `list marks ${c.name} invalid`);
    }
    assert.ok(listed.find((h) => h.id === cases[0].id)?.problems[0]?.startsWith('hash:'));
    // Nothing was accepted anywhere: no directories, no temporary restores, no forks, no ledger rows.
    assert.deepEqual(
      fs.readdirSync(sb.root).filter((n) => n.includes('accept')),
      [],
    );
    assert.deepEqual(acceptanceRows(r), []);
    assert.equal(r.git('worktree', 'list', '--porcelain').match(/^worktree /gm)?.length, 1);
  });
});

test('accept restores or forks the snapshot, verified, and records the acceptance', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const h = create(sb, r.dir, [snap, '--to', 'bob', '--from', 'alice', '--title', 'take it', '--artifact', 'link']);

    const a = xet(sb, r.dir, ['handoff', 'accept', h.id.slice(0, 7), sb.path('copy'), '--json']);
    expectExit(a, 0);
    const out = parseJson(a);
    assert.equal(out.handoff, h.id);
    assert.equal(out.snapshot, snap);
    assert.equal(out.action, 'restore');
    assert.equal(out.mode, 'restore');
    assert.equal(out.dir, sb.path('copy'));
    const v = verify(sb, r.dir, snap, sb.path('copy'));
    expectExit(v, 0);
    assert.equal(fs.readFileSync(sb.path('copy', 'a.txt'), 'utf8'), 'edited\n');
    assert.equal(fs.readlinkSync(sb.path('copy', 'link')), 'a.txt');

    const f = xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('fork'), '--fork', '--mode', 'copy', '--json']);
    expectExit(f, 0);
    const fo = parseJson(f);
    assert.equal(fo.action, 'fork');
    assert.equal(fo.mode, 'copy');
    assert.match(fo.fork, /^[0-9a-f]+$/);
    const forks = parseJson(xet(sb, r.dir, ['forks', '--json'])).forks as { id: string; dir: string }[];
    assert.deepEqual(
      forks.map((x) => [x.id, x.dir]),
      [[fo.fork, sb.path('fork')]],
    );
    const fv = verify(sb, r.dir, snap, sb.path('fork'));
    expectExit(fv, 0);
    assert.equal(parseJson(fv).scope, 'fork');

    // Recorded: in the sidecar, and shown by show and list.
    assert.deepEqual(acceptanceRows(r), [
      { handoff: h.id, dir: sb.path('copy'), mode: 'restore', snapshot: snap },
      { handoff: h.id, dir: sb.path('fork'), mode: 'copy', snapshot: snap },
    ]);
    const s = parseJson(xet(sb, r.dir, ['handoff', 'show', h.id, '--json']));
    assert.deepEqual(
      (s.acceptances as { dir: string; mode: string }[]).map((x) => [x.dir, x.mode]),
      [
        [sb.path('copy'), 'restore'],
        [sb.path('fork'), 'copy'],
      ],
    );
    assert.equal(parseJson(xet(sb, r.dir, ['handoff', 'list', '--json'])).handoffs[0].accepted, 2);

    // A target that is not empty is refused by restore itself, and nothing more is recorded.
    fs.mkdirSync(sb.path('busy'));
    fs.writeFileSync(sb.path('busy', 'x'), 'x');
    expectError(xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('busy'), '--json']), 'TARGET_NOT_EMPTY');
    expectError(xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('m'), '--mode', 'copy', '--json']), 'USAGE', 2);
    assert.equal(acceptanceRows(r).length, 2);
  });
});

test('a handoff fetched by plain git brings its snapshot: verified and accepted in another repository', async () => {
  await withMountSandbox((sb) => {
    const { r, snap } = source(sb);
    const h = create(sb, r.dir, [snap, '--to', 'bob', '--from', 'alice', '--title', 'travel', '--artifact', 'a.txt']);
    const bytes = storedBytes(r, h.id);

    const b = initRepo(sb, 'receiver');
    b.git('fetch', '-q', r.dir, 'refs/xet/handoffs/*:refs/xet/handoffs/*');
    assert.equal(b.git('for-each-ref', '--format=%(refname)', 'refs/xet'), `refs/xet/handoffs/${h.id}\n`);
    const v = xet(sb, b.dir, ['handoff', 'verify', h.id.slice(0, 10), '--json']);
    expectExit(v, 0);
    assert.equal(parseJson(v).snapshot, snap);
    const listed = parseJson(xet(sb, b.dir, ['handoff', 'list', '--to', 'bob', '--json'])).handoffs;
    assert.deepEqual(
      listed.map((x: { id: string; valid: boolean }) => [x.id, x.valid]),
      [[h.id, true]],
    );
    const a = xet(sb, b.dir, ['handoff', 'accept', h.id, sb.path('bob-copy'), '--json']);
    expectExit(a, 0);
    expectExit(verify(sb, b.dir, snap, sb.path('bob-copy')), 0);
    assert.equal(fs.readFileSync(sb.path('bob-copy', 'notes', 'untracked.md'), 'utf8'), 'findings\n');
    assert.equal(acceptanceRows(b).length, 1);
    assert.equal(acceptanceRows(r).length, 0, 'the acceptance is recorded where it happened');

    // Same descriptor, same commit anywhere: a third repository with only the snapshot makes it
    // from the bytes and gets the very commit the first one made.
    const c = initRepo(sb, 'third');
    c.git('fetch', '-q', r.dir, `refs/xet/snapshots/${snap}:refs/xet/snapshots/${snap}`);
    const made = create(sb, c.dir, ['--descriptor', descriptorFile(sb, bytes)]);
    assert.deepEqual([made.id, made.commit, made.created], [h.id, h.commit, true]);

    // Tampering on the way: the receiver's copy of the ref moved to a forged commit is caught.
    const forged = forge(b, Buffer.from(canon(descriptor(b, snap, { title: 'evil' }))), {
      parent: snap,
      id: 'ef'.repeat(32),
    });
    expectError(xet(sb, b.dir, ['handoff', 'accept', forged, sb.path('evil'), '--json']), 'INTEGRITY_MISMATCH');
    assert.equal(fs.existsSync(sb.path('evil')), false);
  });
});
