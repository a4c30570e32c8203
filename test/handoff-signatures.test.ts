// Signed handoffs (xet.handoff-signature/v1) end to end with the real ssh-keygen and gpg: create
// --sign and `handoff sign` (countersignatures), what verify reports (principal, fingerprint,
// validity dates), accept --require-signed / --signer refusing before anything is written (a
// signature over other bytes, a stripped one, a revoked or expired key, a signer not in the
// allowed-signers file, the wrong signer), SIGNING_FAILED, signatures travelling through a xet store
// and a plain Git remote, the pre-publication check, store gc, and OpenPGP with a throwaway keyring.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { initRepo, type Repo } from './support/git';
import { lsRemote, readStateLog, sha256 } from './support/remote';
import { sidecarRows } from './support/state';
import { withSandbox, type Sandbox } from './support/sandbox';
import { gcOk } from './support/store-gc';
import { capture, expectError, expectExit, parseJson, xet } from './support/xet';

const ZERO = '0'.repeat(40);
const NS = 'git-xet-handoff';

interface Key {
  file: string;
  pub: string;
  /** `ssh-ed25519 AAAA…` (type and base64, no comment). */
  line: string;
  fingerprint: string;
}

function sshKey(sb: Sandbox, name: string): Key {
  const file = sb.path(`keys/${name}`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const r = spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', name, '-f', file], { env: sb.env });
  assert.equal(r.status, 0, r.stderr?.toString());
  const pubText = fs.readFileSync(`${file}.pub`, 'utf8').trim();
  const fp = spawnSync('ssh-keygen', ['-l', '-f', `${file}.pub`], { env: sb.env })
    .stdout.toString()
    .split(' ')[1];
  return { file, pub: `${file}.pub`, line: pubText.split(' ').slice(0, 2).join(' '), fingerprint: fp };
}

/** Writes the allowed-signers file the repository's gpg.ssh.allowedSignersFile names. */
function allow(sb: Sandbox, lines: string[]): void {
  fs.writeFileSync(sb.path('allowed_signers'), lines.map((l) => `${l}\n`).join(''));
}

interface Setup {
  r: Repo;
  snap: string;
  alice: Key;
  bob: Key;
}

/** A repository signing with alice's key (gpg.format=ssh), alice and bob in the allowed signers. */
function setup(sb: Sandbox, name = 'src'): Setup {
  const r = initRepo(sb, name);
  r.commit('init', { 'a.txt': 'a\n' });
  r.write('notes.md', 'wip\n');
  const snap = capture(sb, r.dir);
  const alice = sshKey(sb, `alice-${name}`);
  const bob = sshKey(sb, `bob-${name}`);
  useKey(r, alice);
  r.git('config', 'gpg.ssh.allowedSignersFile', sb.path('allowed_signers'));
  allow(sb, [`alice@example.com namespaces="${NS}" ${alice.line}`, `bob@example.com ${bob.line}`]);
  return { r, snap, alice, bob };
}

function useKey(r: Repo, k: Key): void {
  r.git('config', 'gpg.format', 'ssh');
  r.git('config', 'user.signingKey', k.file);
}

function create(sb: Sandbox, r: Repo, snap: string, extra: string[] = []) {
  const res = xet(sb, r.dir, [
    'handoff',
    'create',
    snap,
    '--to',
    'bob',
    '--from',
    'alice',
    '--title',
    'T',
    ...extra,
    '--json',
  ]);
  expectExit(res, 0);
  return parseJson(res);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function verifyJson(sb: Sandbox, r: Repo, id: string, env?: NodeJS.ProcessEnv): any {
  const res = xet(sb, r.dir, ['handoff', 'verify', id, '--json'], { env });
  expectExit(res, 0);
  return parseJson(res);
}

function signatureRefs(r: Repo, id?: string): string[] {
  return r
    .git('for-each-ref', '--format=%(refname)', `refs/xet/signatures/${id ? `${id}/` : ''}`)
    .split('\n')
    .filter(Boolean);
}

function acceptanceRows(r: Repo): unknown[] {
  return sidecarRows(r.commonDir(), 'SELECT handoff, dir FROM handoff_acceptances');
}

/** accept refused with HANDOFF_UNTRUSTED, and nothing written: no directory, no acceptance row. */
function refusedAccept(sb: Sandbox, r: Repo, id: string, extra: string[], why: RegExp): void {
  const target = sb.path(`refused-${Math.random().toString(16).slice(2)}`);
  const rows = acceptanceRows(r).length;
  const err = expectError(xet(sb, r.dir, ['handoff', 'accept', id, target, ...extra, '--json']), 'HANDOFF_UNTRUSTED');
  assert.match(err.message, why);
  assert.equal(fs.existsSync(target), false, 'nothing laid down');
  assert.equal(acceptanceRows(r).length, rows, 'no acceptance recorded');
}

/** Writes a signature commit by hand, laid out as the code should (the test's own copy of the format). */
function forgeSignature(
  r: Repo,
  o: {
    handoff: string;
    parent: string;
    armored: Buffer;
    refSigId?: string;
    signedAt?: string;
    format?: 'ssh' | 'openpgp';
  },
): string {
  const signedAt = o.signedAt ?? '2025-01-02T03:04:05Z';
  const format = o.format ?? 'ssh';
  const meta = `{"format":"${format}","handoff":"${o.handoff}","namespace":"${NS}","schema":"xet.handoff-signature/v1","signedAt":"${signedAt}"}`;
  const metaOid = r.gitInput(meta, 'hash-object', '-w', '--stdin').trim();
  const sigOid = r.gitInput(o.armored, 'hash-object', '-w', '--stdin').trim();
  const tree = r
    .gitInput(`100644 blob ${sigOid}\tsignature\n100644 blob ${metaOid}\tsignature.json\n`, 'mktree')
    .trim();
  const when = `${Date.parse(signedAt) / 1000} +0000`;
  const commit = [
    `tree ${tree}`,
    `parent ${o.parent}`,
    `author git xet <git-xet@localhost> ${when}`,
    `committer git xet <git-xet@localhost> ${when}`,
    '',
    `xet handoff signature: ${o.handoff.slice(0, 12)} (${format})`,
    '',
    'Schema: xet.handoff-signature/v1',
    '',
  ].join('\n');
  const oid = r.gitInput(commit, 'hash-object', '-w', '-t', 'commit', '--stdin').trim();
  const ref = `refs/xet/signatures/${o.handoff}/${o.refSigId ?? sha256(o.armored)}`;
  r.git('update-ref', ref, oid, ZERO);
  return ref;
}

test('sign and verify: create --sign keeps the id, verify names principal and fingerprint; a countersignature makes two', () =>
  withSandbox((sb) => {
    const { r, snap, alice, bob } = setup(sb);
    const plain = create(sb, r, snap, ['--request-id', 'one']);
    assert.equal(signatureRefs(r).length, 0);
    assert.equal(verifyJson(sb, r, plain.id).signatures.length, 0, 'unsigned: no signatures');
    // The same handoff again, signed: same id, same commit; the signature is beside it.
    const signed = create(sb, r, snap, ['--request-id', 'one', '--sign']);
    assert.equal(signed.id, plain.id, 'signing does not change the handoff id');
    assert.equal(signed.commit, plain.commit, 'nor its commit');
    assert.equal(signed.created, false);
    assert.equal(r.git('rev-parse', `refs/xet/handoffs/${plain.id}`).trim(), plain.commit);
    assert.equal(signed.signature.format, 'ssh');

    // The layout: refs/xet/signatures/<handoff>/<sha256 of the armored bytes> → a commit on the
    // handoff commit with exactly signature + signature.json.
    const [ref] = signatureRefs(r, plain.id);
    assert.equal(ref, signed.signature.ref);
    const armored = r.gitTry('cat-file', 'blob', `${ref}:signature`).stdout;
    assert.match(armored.toString(), /^-----BEGIN SSH SIGNATURE-----\n/);
    assert.equal(ref, `refs/xet/signatures/${plain.id}/${sha256(armored)}`);
    assert.equal(r.git('rev-parse', `${ref}^@`).trim(), plain.commit, 'one parent: the handoff commit');
    assert.equal(r.git('ls-tree', '--name-only', ref), 'signature\nsignature.json\n');
    const meta = r.git('cat-file', 'blob', `${ref}:signature.json`);
    assert.equal(
      meta,
      `{"format":"ssh","handoff":"${plain.id}","namespace":"${NS}","schema":"xet.handoff-signature/v1","signedAt":"${signed.signature.signedAt}"}`,
    );
    // The signature is ssh-keygen's over the descriptor's bytes, checkable without git xet.
    const desc = r.gitTry('cat-file', 'blob', `refs/xet/handoffs/${plain.id}:descriptor.json`).stdout;
    fs.writeFileSync(sb.path('sig'), armored);
    const check = spawnSync('ssh-keygen', ['-Y', 'check-novalidate', '-n', NS, '-s', sb.path('sig')], {
      input: desc,
      env: sb.env,
    });
    assert.equal(check.status, 0, check.stderr.toString());
    // The commit is built byte for byte: forging it by hand from the same contents gives the same id.
    const again = initRepo(sb, 'again');
    again.git('fetch', '-q', r.dir, `refs/xet/handoffs/${plain.id}:refs/xet/handoffs/${plain.id}`);
    const rebuilt = forgeSignature(again, {
      handoff: plain.id,
      parent: plain.commit,
      armored,
      signedAt: signed.signature.signedAt,
    });
    assert.equal(again.git('rev-parse', rebuilt).trim(), signed.signature.commit);

    const v = verifyJson(sb, r, plain.id);
    assert.equal(v.signatures.length, 1);
    assert.deepEqual(
      {
        valid: v.signatures[0].valid,
        format: v.signatures[0].format,
        principals: v.signatures[0].principals,
        fingerprint: v.signatures[0].fingerprint,
        problem: v.signatures[0].problem,
      },
      { valid: true, format: 'ssh', principals: ['alice@example.com'], fingerprint: alice.fingerprint, problem: null },
    );

    // A reviewer countersigns with their own key.
    useKey(r, bob);
    const counter = xet(sb, r.dir, ['handoff', 'sign', plain.id.slice(0, 10), '--json']);
    expectExit(counter, 0);
    assert.equal(parseJson(counter).created, true);
    assert.equal(signatureRefs(r, plain.id).length, 2);
    const v2 = verifyJson(sb, r, plain.id);
    assert.deepEqual(v2.signatures.map((s: { principals: string[] }) => s.principals[0]).sort(), [
      'alice@example.com',
      'bob@example.com',
    ]);
    assert.ok(v2.signatures.every((s: { valid: boolean }) => s.valid));
    assert.ok(v2.signatures.some((s: { fingerprint: string }) => s.fingerprint === bob.fingerprint));
    assert.equal(r.git('rev-parse', `refs/xet/handoffs/${plain.id}`).trim(), plain.commit, 'the handoff is untouched');
    const human = xet(sb, r.dir, ['handoff', 'verify', plain.id]);
    expectExit(human, 0);
    assert.match(human.stdout, /^signatures: 2 valid of 2$/m);
    assert.match(
      human.stdout,
      new RegExp(`valid +ssh +bob@example\\.com +${bob.fingerprint.replace(/[+/]/g, '\\$&')}`),
    );
    const list = parseJson(xet(sb, r.dir, ['handoff', 'list', '--json'])).handoffs;
    assert.equal(list[0].signed, 2);
    assert.match(xet(sb, r.dir, ['handoff', 'list']).stdout, /\(signed 2x\)/);
    const show = parseJson(xet(sb, r.dir, ['handoff', 'show', plain.id, '--json']));
    assert.equal(show.signed, 2);

    // Both accept: any allowed signer, and the named one.
    const out = xet(sb, r.dir, ['handoff', 'accept', plain.id, sb.path('ok'), '--signer', 'bob@example.com', '--json']);
    expectExit(out, 0);
    assert.deepEqual(parseJson(out).signedBy.sort(), ['alice@example.com', 'bob@example.com']);
    expectExit(xet(sb, r.dir, ['handoff', 'accept', plain.id, sb.path('ok2'), '--require-signed', '--json']), 0);
  }));

test('accept --require-signed refuses before writing: stripped, expired, revoked, not allowed, the wrong signer', () =>
  withSandbox((sb) => {
    const { r, snap, alice, bob } = setup(sb);
    const h = create(sb, r, snap, ['--sign']);
    // Unsigned handoffs are refused when a signature is required, by flag or by config.
    const unsigned = create(sb, r, snap, ['--title', 'unsigned']);
    refusedAccept(sb, r, unsigned.id, ['--require-signed'], /carries no signature/);

    // Expired: valid-before in the past on alice's allowed-signers line.
    allow(sb, [`alice@example.com namespaces="${NS}",valid-before="20200101" ${alice.line}`]);
    let s = verifyJson(sb, r, h.id).signatures[0];
    assert.equal(s.valid, false);
    assert.equal(s.validBefore, '20200101');
    assert.match(s.problem, /expired/);
    refusedAccept(sb, r, h.id, ['--require-signed'], /expired/);

    // Not yet valid is reported with its date too; then a valid window passes.
    allow(sb, [`alice@example.com valid-after="20200101",valid-before="29991231" ${alice.line}`]);
    s = verifyJson(sb, r, h.id).signatures[0];
    assert.deepEqual([s.valid, s.validAfter, s.validBefore], [true, '20200101', '29991231']);

    // Revoked: the key listed in gpg.ssh.revocationFile.
    fs.copyFileSync(alice.pub, sb.path('revoked'));
    r.git('config', 'gpg.ssh.revocationFile', sb.path('revoked'));
    s = verifyJson(sb, r, h.id).signatures[0];
    assert.equal(s.valid, false);
    assert.match(s.problem, /revoked/);
    refusedAccept(sb, r, h.id, ['--require-signed'], /revoked/);
    r.git('config', '--unset', 'gpg.ssh.revocationFile');

    // Not in the allowed-signers file (only bob is).
    allow(sb, [`bob@example.com ${bob.line}`]);
    s = verifyJson(sb, r, h.id).signatures[0];
    assert.equal(s.valid, false);
    assert.equal(s.fingerprint, alice.fingerprint, 'the key is still named');
    assert.deepEqual(s.principals, []);
    assert.match(s.problem, /not in gpg\.ssh\.allowedSignersFile/);
    refusedAccept(sb, r, h.id, ['--require-signed'], /not in gpg\.ssh\.allowedSignersFile/);
    // And signed for another namespace only: an allowed-signers line for Git commits does not do.
    allow(sb, [`alice@example.com namespaces="git" ${alice.line}`]);
    assert.equal(verifyJson(sb, r, h.id).signatures[0].valid, false);

    // The wrong signer: alice is allowed, bob is required.
    allow(sb, [`alice@example.com ${alice.line}`, `bob@example.com ${bob.line}`]);
    refusedAccept(sb, r, h.id, ['--signer', 'bob@example.com'], /bob@example\.com/);
    // xet.handoff.requireSigned=true with --signer: the same refusal without --require-signed.
    r.git('config', 'xet.handoff.requireSigned', 'true');
    refusedAccept(sb, r, unsigned.id, [], /no valid signature/);

    // Stripped: the signature ref deleted (a plain fetch that left it out); config alone refuses.
    const [ref] = signatureRefs(r, h.id);
    r.git('update-ref', '-d', ref);
    refusedAccept(sb, r, h.id, [], /carries no signature/);
    r.git('config', '--unset', 'xet.handoff.requireSigned');
    expectExit(xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('unrequired'), '--json']), 0);
  }));

test('a signature over other bytes, on the wrong parent or under a wrong id is reported invalid, never trusted', () =>
  withSandbox((sb) => {
    const { r, snap } = setup(sb);
    const a = create(sb, r, snap, ['--sign', '--title', 'A']);
    const b = create(sb, r, snap, ['--title', 'B']);
    const armored = r.gitTry('cat-file', 'blob', `${a.signature.ref}:signature`).stdout;
    // A's real signature, laid out perfectly under B: it signs A's descriptor, not B's.
    forgeSignature(r, { handoff: b.id, parent: b.commit, armored });
    let s = verifyJson(sb, r, b.id).signatures;
    assert.equal(s.length, 1);
    assert.equal(s[0].valid, false);
    assert.match(s[0].problem, /does not verify over this handoff's descriptor/);
    refusedAccept(sb, r, b.id, ['--require-signed'], /does not verify/);
    // The list does not count it.
    const list = parseJson(xet(sb, r.dir, ['handoff', 'list', '--json'])).handoffs;
    assert.deepEqual(list.map((h: { title: string; signed: number }) => [h.title, h.signed]).sort(), [
      ['A', 1],
      ['B', 0],
    ]);

    // A's own signature hung on B's id but still on A's commit: its parent is not B's handoff commit.
    const c = create(sb, r, snap, ['--title', 'C']);
    forgeSignature(r, { handoff: c.id, parent: a.commit, armored });
    s = verifyJson(sb, r, c.id).signatures;
    assert.match(s[0].problem, /parents are \[.*\], not the handoff commit/);
    refusedAccept(sb, r, c.id, ['--require-signed'], /not the handoff commit/);

    // Named by a sig-id its signature does not hash to.
    const d = create(sb, r, snap, ['--title', 'D']);
    forgeSignature(r, { handoff: d.id, parent: d.commit, armored, refSigId: 'e'.repeat(64) });
    s = verifyJson(sb, r, d.id).signatures;
    assert.match(s[0].problem, /hashes to [0-9a-f]{64}, not to the id e{64}/);
    refusedAccept(sb, r, d.id, ['--require-signed'], /hashes to/);

    // A forged megabyte "signature": refused by its size, before it is read.
    const e = create(sb, r, snap, ['--title', 'E']);
    forgeSignature(r, { handoff: e.id, parent: e.commit, armored: Buffer.alloc(1024 * 1024, 0x41) });
    s = verifyJson(sb, r, e.id).signatures;
    assert.equal(s[0].valid, false);
    assert.match(s[0].problem, /too large/);
  }));

test('SIGNING_FAILED: no key, or the signer fails; nothing is written', () =>
  withSandbox((sb) => {
    const { r, snap } = setup(sb);
    const refs = () => r.git('for-each-ref', 'refs/xet/handoffs', 'refs/xet/signatures');
    r.git('config', '--unset', 'user.signingKey');
    const before = refs();
    let err = expectError(
      xet(sb, r.dir, ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 'T', '--sign', '--json']),
      'SIGNING_FAILED',
    );
    assert.match(err.message, /user\.signingKey/);
    assert.equal(refs(), before, 'no handoff created when it cannot be signed');
    // xet.handoff.sign=true signs every create.
    r.git('config', 'xet.handoff.sign', 'true');
    expectError(
      xet(sb, r.dir, ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 'T', '--json']),
      'SIGNING_FAILED',
    );
    assert.equal(refs(), before);
    r.git('config', '--unset', 'xet.handoff.sign');
    const h = create(sb, r, snap);
    const after = refs();
    // A key file that does not exist: ssh-keygen fails.
    r.git('config', 'user.signingKey', sb.path('no-such-key'));
    err = expectError(xet(sb, r.dir, ['handoff', 'sign', h.id, '--json']), 'SIGNING_FAILED');
    assert.match(err.message, /ssh-keygen -Y sign failed/);
    // A signing program that is not there (gpg.ssh.program honoured).
    r.git('config', 'gpg.ssh.program', sb.path('no-such-program'));
    expectError(xet(sb, r.dir, ['handoff', 'sign', h.id, '--json']), 'SIGNING_FAILED');
    assert.equal(refs(), after, 'no signature ref');
  }));

test('signatures travel: push <id> to a xet store and fetch, a plain bare remote; forged ones are not published; store gc takes them with their handoff', () =>
  withSandbox((sb) => {
    const { r, snap, bob } = setup(sb);
    const h = create(sb, r, snap, ['--sign', '--expires', '1h']);
    useKey(r, bob);
    expectExit(xet(sb, r.dir, ['handoff', 'sign', h.id, '--json']), 0);
    const sigs = signatureRefs(r, h.id);
    assert.equal(sigs.length, 2);
    const store = sb.path('store');
    const xurl = `xet::${store}`;
    r.git('push', '-q', xurl, 'HEAD:refs/heads/main');
    // Publishing the handoff by id brings its signatures (and its snapshot).
    expectExit(xet(sb, r.dir, ['push', xurl, h.id.slice(0, 8), '--json']), 0);
    const remote = lsRemote(sb, r.dir, xurl);
    for (const s of sigs) assert.equal(remote.get(s), r.git('rev-parse', s).trim(), `${s} published`);
    // Create-once on the store: a signature ref is never moved.
    const moved = r.gitTry('push', xurl, `+${snap}:${sigs[0]}`);
    assert.notEqual(moved.status, 0);
    assert.equal(lsRemote(sb, r.dir, xurl).get(sigs[0]), r.git('rev-parse', sigs[0]).trim());

    const b = initRepo(sb, 'b');
    b.git('config', 'gpg.ssh.allowedSignersFile', sb.path('allowed_signers'));
    expectExit(xet(sb, b.dir, ['fetch', xurl, '--json']), 0);
    assert.deepEqual(signatureRefs(b, h.id), sigs);
    const vb = verifyJson(sb, b, h.id);
    assert.deepEqual(
      vb.signatures.map((s: { valid: boolean }) => s.valid),
      [true, true],
    );
    expectExit(
      xet(sb, b.dir, ['handoff', 'accept', h.id, sb.path('b-copy'), '--signer', 'alice@example.com', '--json']),
      0,
    );

    // A plain Git remote (a bare repository) carries them too.
    const bare = sb.path('bare.git');
    spawnSync('git', ['init', '-q', '--bare', bare], { env: sb.env });
    expectExit(xet(sb, r.dir, ['push', bare, '--json']), 0);
    const c = initRepo(sb, 'c');
    c.git('config', 'gpg.ssh.allowedSignersFile', sb.path('allowed_signers'));
    expectExit(xet(sb, c.dir, ['fetch', bare, '--json']), 0);
    assert.deepEqual(signatureRefs(c, h.id), sigs);
    assert.ok(verifyJson(sb, c, h.id).signatures.every((s: { valid: boolean }) => s.valid));

    // A signature ref whose commit is not on its handoff's commit is refused before publication.
    const armored = r.gitTry('cat-file', 'blob', `${sigs[0]}:signature`).stdout;
    const other = create(sb, r, snap, ['--title', 'other']);
    const forged = forgeSignature(r, { handoff: other.id, parent: h.commit, armored });
    const store2 = sb.path('store2');
    r.git('push', '-q', `xet::${store2}`, 'HEAD:refs/heads/main');
    const err = expectError(xet(sb, r.dir, ['push', `xet::${store2}`, other.id, '--json']), 'INTEGRITY_MISMATCH');
    assert.match(err.message, new RegExp(forged));
    assert.equal(lsRemote(sb, r.dir, `xet::${store2}`).has(forged), false, 'nothing was pushed');
    assert.equal(lsRemote(sb, r.dir, `xet::${store2}`).has(`refs/xet/handoffs/${other.id}`), false);

    // Store gc: once the handoff's expiry is older than the grace, its signatures go with it.
    const refsOf = () => Object.keys(readStateLog(store).slice(-1)[0].outer.state.refs);
    const later = gcOk(sb, r.dir, store, ['--now', new Date(Date.now() + 30 * 86400_000).toISOString()]);
    assert.deepEqual(
      later.refs.removed.map((x: { ref: string }) => x.ref).sort(),
      [`refs/xet/handoffs/${h.id}`, ...sigs].sort(),
    );
    for (const s of sigs) assert.equal(refsOf().includes(s), false, `${s} removed with its handoff`);
  }));

test('OpenPGP: gpg signs (gpg.format unset) and verify reports the uid email, fingerprint and trust', () =>
  withSandbox((sb) => {
    const gnupg = sb.path('gnupg');
    fs.mkdirSync(gnupg, { mode: 0o700 });
    const env = { GNUPGHOME: gnupg };
    const gpg = (args: string[]) => spawnSync('gpg', ['--batch', ...args], { env: { ...sb.env, ...env } });
    try {
      const made = gpg([
        '--passphrase',
        '',
        '--quick-gen-key',
        'Carol <carol@example.com>',
        'ed25519',
        'sign',
        'never',
      ]);
      assert.equal(made.status, 0, made.stderr.toString());
      const fpr = /^fpr:+([0-9A-F]{40}):/m.exec(
        gpg(['--with-colons', '--list-keys', 'carol@example.com']).stdout.toString(),
      )?.[1];
      assert.ok(fpr);
      const r = initRepo(sb, 'src');
      r.commit('init', { 'a.txt': 'a\n' });
      const snap = capture(sb, r.dir);
      r.git('config', 'user.signingKey', 'carol@example.com');
      const res = xet(
        sb,
        r.dir,
        ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 'T', '--sign', '--json'],
        { env },
      );
      expectExit(res, 0);
      const h = parseJson(res);
      assert.equal(h.signature.format, 'openpgp');
      const armored = r.gitTry('cat-file', 'blob', `${h.signature.ref}:signature`).stdout.toString();
      assert.match(armored, /^-----BEGIN PGP SIGNATURE-----/);
      const s = verifyJson(sb, r, h.id, env).signatures[0];
      assert.deepEqual(
        [s.valid, s.format, s.principals, s.fingerprint, s.trust],
        [true, 'openpgp', ['carol@example.com'], fpr, 'ultimate'],
      );
      expectExit(
        xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('ok'), '--signer', 'carol@example.com', '--json'], { env }),
        0,
      );
      // Without the key in the keyring, the same signature is not trusted.
      const empty = sb.path('empty-gnupg');
      fs.mkdirSync(empty, { mode: 0o700 });
      const none = verifyJson(sb, r, h.id, { GNUPGHOME: empty }).signatures[0];
      assert.equal(none.valid, false);
      assert.match(none.problem, /gpg cannot check the signature/);
      expectError(
        xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('no'), '--require-signed', '--json'], {
          env: { GNUPGHOME: empty },
        }),
        'HANDOFF_UNTRUSTED',
      );
      spawnSync('gpgconf', ['--kill', 'all'], { env: { ...sb.env, GNUPGHOME: empty } });
    } finally {
      spawnSync('gpgconf', ['--kill', 'all'], { env: { ...sb.env, ...env } });
    }
  }));

test('local gc deletes an expired handoff and its signatures together', () =>
  withSandbox((sb) => {
    const { r, snap } = setup(sb);
    const manifestSha256 = sha256(r.gitTry('cat-file', 'blob', `${snap}:manifest.json`).stdout);
    const bytes =
      `{"artifacts":[],"createdAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-03T03:04:05Z","findings":[],` +
      `"from":"alice","negative":[],"schema":"xet.handoff/v1","snapshot":{"manifestSha256":"${manifestSha256}",` +
      `"oid":"${snap}"},"summary":"","title":"old","to":["bob"]}`;
    fs.writeFileSync(sb.path('old.json'), bytes);
    const made = xet(sb, r.dir, ['handoff', 'create', '--descriptor', sb.path('old.json'), '--sign', '--json']);
    expectExit(made, 0);
    const h = parseJson(made).id as string;
    assert.equal(h, sha256(bytes));
    const kept = create(sb, r, snap, ['--sign', '--title', 'current']);
    assert.equal(signatureRefs(r, h).length, 1);
    const gc = xet(sb, r.dir, ['gc', '--json']);
    expectExit(gc, 0);
    assert.equal(r.gitTry('rev-parse', '-q', '--verify', `refs/xet/handoffs/${h}`).status, 1, 'the handoff went');
    assert.deepEqual(signatureRefs(r, h), [], 'and its signature with it');
    assert.equal(signatureRefs(r, kept.id).length, 1, "an unexpired handoff's signature stays");
  }));

test('--signer is an identity ssh-keygen matches against allowed-signers patterns; patterns are reported as patterns', () =>
  withSandbox((sb) => {
    const { r, snap, alice } = setup(sb);
    const h = create(sb, r, snap, ['--sign']);
    allow(sb, [`*@example.com ${alice.line}`]);
    let s = verifyJson(sb, r, h.id).signatures[0];
    assert.deepEqual([s.valid, s.principals, s.patterns], [true, [], ['*@example.com']]);
    const human = xet(sb, r.dir, ['handoff', 'verify', h.id]);
    expectExit(human, 0);
    assert.match(human.stdout.toString(), /valid {4}ssh {2}pattern \*@example\.com/);
    // ssh-keygen -Y verify -I alice@example.com matches the `*@example.com` line.
    const ok = xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('ok'), '--signer', 'alice@example.com', '--json']);
    expectExit(ok, 0);
    assert.deepEqual(parseJson(ok).signedBy, ['alice@example.com']);
    refusedAccept(sb, r, h.id, ['--signer', 'alice@example.org'], /alice@example\.org/);
    // A pattern (or a list) as --signer is refused before anything: it would name nobody.
    for (const bad of ['*@example.com', 'a?ice@example.com', '!eve@example.com', 'alice@example.com,bob@x', '']) {
      const target = sb.path('pattern');
      const err = expectError(
        xet(sb, r.dir, ['handoff', 'accept', h.id, target, '--signer', bad, '--json']),
        'USAGE',
        2,
      );
      assert.match(err.message, /one identity/);
      assert.equal(fs.existsSync(target), false);
    }
    // A negation on the line is ssh-keygen's to apply: alice is excluded, carol is not.
    allow(sb, [`"*@example.com,!alice@example.com" ${alice.line}`]);
    refusedAccept(sb, r, h.id, ['--signer', 'alice@example.com'], /no valid signature from "alice@example\.com"/);
    expectExit(
      xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('carol'), '--signer', 'carol@example.com', '--json']),
      0,
    );
    // The dates reported are those of the line that allowed the key, not of the file's first line.
    allow(sb, [
      `old@example.com valid-before="20200101" ${alice.line}`,
      `alice@example.com valid-after="20200101",valid-before="29991231" ${alice.line}`,
    ]);
    s = verifyJson(sb, r, h.id).signatures[0];
    assert.deepEqual(
      [s.valid, s.principals, s.patterns, s.validAfter, s.validBefore],
      [true, ['alice@example.com'], [], '20200101', '29991231'],
    );
  }));

test('OpenPGP: principals are the uids gpg considers valid, not the primary uid; one signature per file', () =>
  withSandbox((sb) => {
    const mine = sb.path('gnupg');
    const eves = sb.path('gnupg-eve');
    for (const d of [mine, eves]) fs.mkdirSync(d, { mode: 0o700 });
    const gpg = (home: string, args: string[], input?: Buffer) => {
      const res = spawnSync('gpg', ['--batch', ...args], { env: { ...sb.env, GNUPGHOME: home }, input });
      assert.equal(res.status, 0, `gpg ${args.join(' ')}: ${res.stderr.toString()}`);
      return res.stdout;
    };
    const fprOf = (home: string, uid: string) =>
      /^fpr:+([0-9A-F]{40}):/m.exec(gpg(home, ['--with-colons', '--list-keys', uid]).toString())?.[1] ?? '';
    try {
      const gen = (home: string, uid: string) =>
        gpg(home, ['--passphrase', '', '--quick-gen-key', uid, 'ed25519', 'sign', 'never']);
      gen(mine, 'Alice <alice@example.com>');
      gen(mine, 'Dave <dave@example.com>');
      gen(eves, 'Eve <eve@example.com>');
      const alice = fprOf(mine, 'alice@example.com');
      const eve = fprOf(eves, 'eve@example.com');
      // Eve adds an uncertified uid claiming to be alice and makes it primary.
      gpg(eves, ['--passphrase', '', '--quick-add-uid', eve, 'Alice <alice@example.com>']);
      gpg(eves, ['--quick-set-primary-uid', eve, 'Alice <alice@example.com>']);
      // The verifier certifies Eve's real uid only.
      gpg(mine, ['--import'], gpg(eves, ['--armor', '--export', eve]));
      gpg(mine, ['-u', alice, '--quick-lsign-key', eve, 'Eve <eve@example.com>']);

      const r = initRepo(sb, 'src');
      r.commit('init', { 'a.txt': 'a\n' });
      const snap = capture(sb, r.dir);
      r.git('config', 'user.signingKey', eve);
      const res = xet(
        sb,
        r.dir,
        ['handoff', 'create', snap, '--to', 'b', '--from', 'a', '--title', 'T', '--sign', '--json'],
        { env: { GNUPGHOME: eves } },
      );
      expectExit(res, 0);
      const h = parseJson(res);
      const env = { GNUPGHOME: mine };
      const s = verifyJson(sb, r, h.id, env).signatures[0];
      assert.deepEqual([s.valid, s.principals, s.fingerprint], [true, ['eve@example.com'], eve]);
      refusedAccept(sb, r, h.id, ['--signer', 'alice@example.com'], /alice@example\.com/);
      // (refusedAccept runs without env: do it again with the verifier's keyring.)
      const err = expectError(
        xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('no'), '--signer', 'alice@example.com', '--json'], { env }),
        'HANDOFF_UNTRUSTED',
      );
      assert.match(err.message, /signed by eve@example\.com/);
      assert.equal(fs.existsSync(sb.path('no')), false);
      expectExit(
        xet(sb, r.dir, ['handoff', 'accept', h.id, sb.path('yes'), '--signer', 'eve@example.com', '--json'], { env }),
        0,
      );

      // Two signatures in one file (alice and dave, both ultimately trusted): not a handoff signature.
      const commit = r.git('rev-parse', `refs/xet/handoffs/${h.id}`).trim();
      const bytes = r.gitTry('cat-file', 'blob', `${commit}:descriptor.json`).stdout as Buffer;
      const two = gpg(mine, ['--armor', '--detach-sign', '-u', alice, '-u', fprOf(mine, 'dave@example.com')], bytes);
      forgeSignature(r, { handoff: h.id, parent: commit, armored: two, format: 'openpgp' });
      const both = verifyJson(sb, r, h.id, env).signatures.find((x: { id: string }) => x.id === sha256(two));
      assert.ok(both);
      assert.equal(both.valid, false);
      assert.match(both.problem, /holds 2 OpenPGP signatures/);
      assert.deepEqual(both.principals, []);
    } finally {
      for (const d of [mine, eves]) spawnSync('gpgconf', ['--kill', 'all'], { env: { ...sb.env, GNUPGHOME: d } });
    }
  }));
