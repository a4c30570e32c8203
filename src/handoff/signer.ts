// Signing and checking bytes with the user's Git signing setup, as `git commit -S` and
// `git verify-commit` do: gpg.format=ssh with user.signingKey (ssh-keygen -Y sign; gpg.ssh.program),
// or OpenPGP (gpg --detach-sign; gpg.program). Verification maps an ssh key to its principals in
// gpg.ssh.allowedSignersFile (validity dates, gpg.ssh.revocationFile) and an OpenPGP key to its
// uid's email and trust. The programs are the user's; their failures become SIGNING_FAILED when
// signing and a problem text when verifying (a signature is hostile input, never an error of ours).

import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import type { GitConfig } from '../git/config';

/** The ssh-keygen namespace of handoff signatures: a signature made for Git commits (namespace
 * `git`) or for anything else is not a handoff signature. */
export const SIGNATURE_NAMESPACE = 'git-xet-handoff';

export type SignatureFormat = 'ssh' | 'openpgp';

interface ProgramResult {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/** Run one program to its end with `input` on stdin; ENOENT and the like are SIGNING_FAILED. */
function runProgram(cmd: string, args: string[], input: Buffer, env?: NodeJS.ProcessEnv): Promise<ProgramResult> {
  return new Promise((resolve, reject) => {
    // Not run by a person at a terminal (an MCP server's call, a CI job): the program gets no
    // controlling terminal and no askpass, so a key that needs a passphrase fails at once with
    // SIGNING_FAILED instead of prompting on whatever terminal the host has and hanging the call
    // (review R15). A person at a terminal is asked, as git asks.
    const interactive = process.stdin.isTTY === true;
    const child = spawn(cmd, args, {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: interactive ? (env ?? process.env) : { ...(env ?? process.env), SSH_ASKPASS_REQUIRE: 'never' },
      detached: !interactive,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', (e) =>
      reject(new XetError('SIGNING_FAILED', `cannot run ${cmd}: ${e.message}`, { program: cmd, args })),
    );
    child.on('close', (code) =>
      resolve({ code: code ?? 1, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }),
    );
    // A program that exits without reading stdin closes the pipe: its exit code says what happened.
    child.stdin.on('error', () => undefined);
    child.stdin.end(input);
  });
}

/** A scratch directory for the files ssh-keygen and gpg insist on reading from disk. */
function withScratch<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'git-xet-sig-'));
  return fn(dir).finally(() => fs.rmSync(dir, { recursive: true, force: true }));
}

function expandHome(p: string): string {
  return p === '~' || p.startsWith('~/') ? path.join(os.homedir(), p.slice(1)) : p;
}

export function signingFormat(config: GitConfig): SignatureFormat {
  const f = (config.get('gpg.format') ?? 'openpgp').toLowerCase();
  if (f === 'ssh' || f === 'openpgp') return f;
  throw new XetError('SIGNING_FAILED', `gpg.format=${f} is not supported for handoff signatures (ssh or openpgp)`, {
    format: f,
  });
}

/** Sign `bytes` with the configured key: the armored signature. SIGNING_FAILED, nothing written. */
export async function signBytes(
  bytes: Buffer,
  config: GitConfig,
): Promise<{ format: SignatureFormat; armored: Buffer }> {
  const format = signingFormat(config);
  const key = config.get('user.signingkey');
  if (format === 'ssh') {
    if (!key) {
      throw new XetError(
        'SIGNING_FAILED',
        'gpg.format is ssh but user.signingKey is not set: git config user.signingKey <key file or "key::<public key>">',
      );
    }
    const program = config.get('gpg.ssh.program') ?? 'ssh-keygen';
    return withScratch(async (dir) => {
      let keyArgs: string[];
      // As git does: a literal public key ("key::…", or the older bare "ssh-…") is looked up in the
      // agent (-U); anything else is a file (a private key, or a public key whose private half the
      // agent holds).
      const literal = key.startsWith('key::') ? key.slice(5) : key.startsWith('ssh-') ? key : null;
      if (literal !== null) {
        const f = path.join(dir, 'key.pub');
        fs.writeFileSync(f, `${literal.trim()}\n`, { mode: 0o600 });
        keyArgs = ['-f', f, '-U'];
      } else keyArgs = ['-f', expandHome(key)];
      const r = await runProgram(program, ['-Y', 'sign', '-n', SIGNATURE_NAMESPACE, ...keyArgs], bytes);
      const armored = r.stdout;
      if (r.code !== 0 || !armored.toString('latin1').startsWith('-----BEGIN SSH SIGNATURE-----')) {
        throw new XetError('SIGNING_FAILED', `${program} -Y sign failed: ${r.stderr.trim() || `exit ${r.code}`}`, {
          program,
          code: r.code,
          stderr: r.stderr,
        });
      }
      return { format, armored };
    });
  }
  const program = config.get('gpg.program') ?? config.get('gpg.openpgp.program') ?? 'gpg';
  const r = await runProgram(
    program,
    [
      ...(process.stdin.isTTY === true ? [] : ['--batch', '--pinentry-mode', 'error']),
      '--status-fd=2',
      '--detach-sign',
      '--armor',
      ...(key ? ['--local-user', key] : []),
    ],
    bytes,
  );
  const armored = r.stdout;
  if (
    r.code !== 0 ||
    !/^\[GNUPG:\] SIG_CREATED /m.test(r.stderr) ||
    !armored.toString('latin1').startsWith('-----BEGIN PGP SIGNATURE-----')
  ) {
    const why = r.stderr
      .split('\n')
      .filter((l) => l && !l.startsWith('[GNUPG:]'))
      .join('; ');
    throw new XetError('SIGNING_FAILED', `${program} --detach-sign failed: ${why || `exit ${r.code}`}`, {
      program,
      code: r.code,
      stderr: r.stderr,
    });
  }
  return { format: 'openpgp', armored };
}

export interface Verdict {
  /** A good signature over these bytes from an allowed (ssh) or trusted enough (openpgp) key. */
  valid: boolean;
  /** ssh: SHA256:… of the public key; openpgp: the primary key's fingerprint. */
  fingerprint: string | null;
  /** Identities the signature verified as: ssh, the literal allowed-signers principals (and the
   * `--signer` identity when ssh-keygen matched it against a pattern); openpgp, the emails of the
   * key's uids that are valid enough (gpg.minTrustLevel). Never a pattern. */
  principals: string[];
  /** ssh: the allowed-signers patterns (`*@example.com`) the key verified under: who may sign
   * under them, not who signed. openpgp: always empty. */
  patterns: string[];
  /** ssh: the allowed-signers entry's valid-after / valid-before, as written there. */
  validAfter: string | null;
  validBefore: string | null;
  /** openpgp: gpg's trust level (ultimate, fully, marginal, undefined, never). */
  trust: string | null;
  problem: string | null;
}

export const verdict = (v: Partial<Verdict>): Verdict => ({
  valid: false,
  fingerprint: null,
  principals: [],
  patterns: [],
  validAfter: null,
  validBefore: null,
  trust: null,
  problem: null,
  ...v,
});

/** The public key (type and base64 blob) and namespace inside an armored SSHSIG, read without trust. */
export function parseSshSignature(armored: Buffer): { keyType: string; keyBlob: string; namespace: string } | null {
  const m = /^-----BEGIN SSH SIGNATURE-----\n([A-Za-z0-9+/=\n]+)-----END SSH SIGNATURE-----\n?$/.exec(
    armored.toString('latin1'),
  );
  if (!m) return null;
  const b = Buffer.from(m[1].replace(/\n/g, ''), 'base64');
  if (b.length < 10 || b.toString('latin1', 0, 6) !== 'SSHSIG') return null;
  let i = 10; // magic and version
  const str = (): Buffer | null => {
    if (i + 4 > b.length) return null;
    const n = b.readUInt32BE(i);
    if (i + 4 + n > b.length) return null;
    const s = b.subarray(i + 4, i + 4 + n);
    i += 4 + n;
    return s;
  };
  const key = str();
  const ns = str();
  if (!key || !ns || key.length < 4) return null;
  const tl = key.readUInt32BE(0);
  if (4 + tl > key.length) return null;
  return { keyType: key.toString('latin1', 4, 4 + tl), keyBlob: key.toString('base64'), namespace: ns.toString() };
}

function sshFingerprint(keyBlob: string): string {
  const digest = crypto.createHash('sha256').update(Buffer.from(keyBlob, 'base64')).digest('base64');
  return `SHA256:${digest.replace(/=+$/, '')}`;
}

interface AllowedEntry {
  principals: string[];
  validAfter: string | null;
  validBefore: string | null;
}

/** The allowed-signers lines naming this very key (principals, options, key type, key). */
function allowedEntries(text: string, keyBlob: string): AllowedEntry[] {
  const out: AllowedEntry[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    // Tokens, keeping quoted option values (namespaces="a,b") whole.
    const tokens = line.match(/(?:[^\s"]+|"[^"]*")+/g) ?? [];
    const k = tokens.findIndex((t, n) => n > 0 && tokens[n + 1] === keyBlob);
    if (k < 0) continue;
    const options = tokens.slice(1, k).join(',');
    const opt = (name: string) => new RegExp(`(?:^|,)${name}="?([0-9]{8,14}Z?)"?`, 'i').exec(options)?.[1] ?? null;
    out.push({
      principals: (tokens[0] ?? '').replace(/^"|"$/g, '').split(','),
      validAfter: opt('valid-after'),
      validBefore: opt('valid-before'),
    });
  }
  return out;
}

/** An allowed-signers time (YYYYMMDD[HHMM[SS]][Z]) → epoch ms; local time unless Z, as ssh-keygen. */
function allowedTime(s: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})(\d{2})?(\d{2})?(\d{2})?(Z)?$/i.exec(s);
  if (!m) return NaN;
  const parts = [Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0)];
  return m[7]
    ? Date.UTC(...(parts as [number, number, number, number, number, number]))
    : new Date(...(parts as [number, number, number, number, number, number])).getTime();
}

/** Check one signature over `bytes`: ssh-keygen or gpg does the cryptography, with the user's files. */
export async function verifyBytes(
  bytes: Buffer,
  format: SignatureFormat,
  armored: Buffer,
  config: GitConfig,
  now = new Date(),
  identity?: string,
): Promise<Verdict> {
  // OpenPGP identities are the key's valid uids, all listed: nothing to ask per identity.
  return format === 'ssh' ? verifySsh(bytes, armored, config, now, identity) : verifyOpenPgp(bytes, armored, config);
}

/** Allowed-signers pattern characters (ssh-keygen(1) PATTERNS): wildcards, negation, lists. */
export const isPattern = (s: string): boolean => /[*?!,]/.test(s);

async function verifySsh(
  bytes: Buffer,
  armored: Buffer,
  config: GitConfig,
  now: Date,
  identity?: string,
): Promise<Verdict> {
  const parsed = parseSshSignature(armored);
  if (!parsed) return verdict({ problem: 'the signature is not an armored SSH signature' });
  const fingerprint = sshFingerprint(parsed.keyBlob);
  if (parsed.namespace !== SIGNATURE_NAMESPACE) {
    return verdict({
      fingerprint,
      problem: `the signature is for namespace ${JSON.stringify(parsed.namespace)}, not ${SIGNATURE_NAMESPACE}`,
    });
  }
  const program = config.get('gpg.ssh.program') ?? 'ssh-keygen';
  const allowedFile = config.get('gpg.ssh.allowedsignersfile');
  const revocation = config.get('gpg.ssh.revocationfile');
  return withScratch(async (dir) => {
    const sigFile = path.join(dir, 'signature');
    fs.writeFileSync(sigFile, armored);
    // The signature itself, with no trust decision (is it over these bytes at all?), asked only when
    // a check fails: a good signature is proved by -Y verify alone, one process instead of two.
    const notOverTheseBytes = async (): Promise<Verdict | null> => {
      const check = await runProgram(
        program,
        ['-Y', 'check-novalidate', '-n', SIGNATURE_NAMESPACE, '-s', sigFile],
        bytes,
      ).catch((e: XetError) => ({ code: -1, stdout: Buffer.alloc(0), stderr: e.message }));
      if (check.code === 0) return null;
      return verdict({
        fingerprint,
        problem: `the signature does not verify over this handoff's descriptor: ${check.stderr.trim() || `exit ${check.code}`}`,
      });
    };
    const refuse = async (v: Partial<Verdict>): Promise<Verdict> =>
      (await notOverTheseBytes()) ?? verdict({ fingerprint, ...v });
    if (!allowedFile) {
      return refuse({ problem: 'gpg.ssh.allowedSignersFile is not configured: no key can be mapped to a principal' });
    }
    let text: string;
    try {
      text = fs.readFileSync(expandHome(allowedFile), 'utf8');
    } catch (e) {
      return refuse({ problem: `cannot read gpg.ssh.allowedSignersFile: ${(e as Error).message}` });
    }
    const entries = allowedEntries(text, parsed.keyBlob);
    const listed = [...new Set(entries.flatMap((e) => e.principals))];
    if (!listed.length) {
      // Certificate authorities and other forms this reader does not parse: ask ssh-keygen.
      const found = await runProgram(
        program,
        ['-Y', 'find-principals', '-f', expandHome(allowedFile), '-s', sigFile],
        Buffer.alloc(0),
      ).catch(() => null);
      if (found?.code === 0) listed.push(...found.stdout.toString('utf8').split(/[\n,]/).filter(Boolean));
    }
    if (!listed.length) {
      return refuse({ problem: `the key ${fingerprint} is not in gpg.ssh.allowedSignersFile` });
    }
    // One ssh-keygen -Y verify -I per name: ssh-keygen itself matches the identity against the
    // line's pattern list (negations, namespaces, dates, revocation), so its verdict is the trust.
    // A pattern is tried as its own text (`*@example.com` matches itself), which tells whether the
    // key is allowed under it, and is reported as a pattern; a negation (`!eve@…`) names nobody.
    const verifiesAs = async (name: string): Promise<{ ok: boolean; why: string }> => {
      const args = ['-Y', 'verify', '-f', expandHome(allowedFile), '-I', name, '-n', SIGNATURE_NAMESPACE];
      if (revocation) args.push('-r', expandHome(revocation));
      const r = await runProgram(program, [...args, '-s', sigFile], bytes);
      return { ok: r.code === 0, why: r.stderr.trim() || `exit ${r.code}` };
    };
    const principals: string[] = [];
    const patterns: string[] = [];
    let problem: string | null = null;
    for (const p of listed) {
      if (p.startsWith('!')) continue;
      const r = await verifiesAs(p);
      if (r.ok) (isPattern(p) ? patterns : principals).push(p);
      else problem ??= r.why;
    }
    if (identity !== undefined && !principals.includes(identity)) {
      // The one question `--signer` asks: does ssh-keygen accept this signature as that identity?
      if ((await verifiesAs(identity)).ok) principals.push(identity);
    }
    // The dates of the line that allowed the key (a key may be on an expired and a current line).
    const entry = entries.find((e) => e.principals.some((p) => principals.includes(p) || patterns.includes(p))) ??
      entries[0] ?? { validAfter: null, validBefore: null };
    const dates = { validAfter: entry.validAfter, validBefore: entry.validBefore };
    if (principals.length || patterns.length)
      return verdict({ valid: true, fingerprint, principals, patterns, ...dates });
    // Say why in our words where we can tell; ssh-keygen's own text otherwise. ssh-keygen checks the
    // dates against the time of verification (now), not the signature's signedAt, as git does.
    const t = now.getTime();
    if (entry.validBefore && allowedTime(entry.validBefore) <= t) {
      problem = `the key's allowed-signers entry expired (valid-before ${entry.validBefore})`;
    } else if (entry.validAfter && allowedTime(entry.validAfter) > t) {
      problem = `the key's allowed-signers entry is not valid yet (valid-after ${entry.validAfter})`;
    } else if (revocation) {
      // ssh-keygen says little about a revoked key: one that verifies without the file is revoked.
      const first = listed.find((p) => !p.startsWith('!')) ?? listed[0];
      const args = ['-Y', 'verify', '-f', expandHome(allowedFile), '-I', first, '-n', SIGNATURE_NAMESPACE];
      const r = await runProgram(program, [...args, '-s', sigFile], bytes);
      if (r.code === 0) problem = `the key ${fingerprint} is revoked (gpg.ssh.revocationFile)`;
    }
    return refuse({ principals: [], ...dates, problem: problem ?? 'ssh-keygen refused the signature' });
  });
}

const TRUST_LEVELS = ['never', 'undefined', 'marginal', 'fully', 'ultimate'];

/** gpg --with-colons validity letters → git's trust level names; revoked/expired uids name nobody. */
const UID_VALIDITY: Record<string, string> = { u: 'ultimate', f: 'fully', m: 'marginal', n: 'never' };

/** The address a uid names: its trailing `<addr>` (as gpg's mailbox rule), or the uid when it is one. */
function uidEmail(uid: string): string {
  return /<([^<>\s]+)>\s*$/.exec(uid)?.[1] ?? uid;
}

/** `\xHH` escapes of gpg's colon listings. */
const unescapeColons = (s: string) =>
  s.replace(/\\x([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));

/**
 * The identities of the key `fpr` that gpg considers valid enough, uid by uid: a key's trust is its
 * best uid's, and anyone can add a uid (and make it primary) to their own key, so the signature's
 * GOODSIG uid says nothing about who signed unless that very uid is certified.
 */
async function validUids(program: string, fpr: string, minTrust: string): Promise<string[]> {
  const r = await runProgram(
    program,
    ['--batch', '--with-colons', '--fixed-list-mode', '--list-keys', '--', fpr],
    Buffer.alloc(0),
  ).catch(() => null);
  if (!r || r.code !== 0) return [];
  const out: string[] = [];
  let inKey = false;
  let sawFpr = false;
  for (const l of r.stdout.toString('utf8').split('\n')) {
    const f = l.split(':');
    if (f[0] === 'pub') [inKey, sawFpr] = [false, false];
    else if (f[0] === 'fpr' && !sawFpr) [inKey, sawFpr] = [f[9] === fpr, true];
    else if (f[0] === 'uid' && inKey) {
      const level = UID_VALIDITY[f[1]] ?? (f[1] === 'r' || f[1] === 'e' ? null : 'undefined');
      if (level !== null && TRUST_LEVELS.indexOf(level) >= TRUST_LEVELS.indexOf(minTrust)) {
        out.push(uidEmail(unescapeColons(f[9] ?? '')));
      }
    }
  }
  return [...new Set(out.filter(Boolean))];
}

async function verifyOpenPgp(bytes: Buffer, armored: Buffer, config: GitConfig): Promise<Verdict> {
  if (!armored.toString('latin1').startsWith('-----BEGIN PGP SIGNATURE-----')) {
    return verdict({ problem: 'the signature is not an armored OpenPGP signature' });
  }
  const program = config.get('gpg.program') ?? config.get('gpg.openpgp.program') ?? 'gpg';
  // git's gpg.minTrustLevel; marginal by default, as `git merge --verify-signatures`.
  const minTrust = (config.get('gpg.mintrustlevel') ?? 'marginal').toLowerCase();
  return withScratch(async (dir) => {
    const sigFile = path.join(dir, 'signature.asc');
    fs.writeFileSync(sigFile, armored);
    const r = await runProgram(program, ['--batch', '--status-fd=1', '--verify', sigFile, '-'], bytes).catch(
      (e: XetError) => ({ code: -1, stdout: Buffer.alloc(0), stderr: e.message }),
    );
    const status = r.stdout.toString('utf8').split('\n');
    const line = (kw: string) => status.find((l) => l.startsWith(`[GNUPG:] ${kw} `) || l === `[GNUPG:] ${kw}`);
    // A detached file may hold several signatures, and gpg reports each in turn: one lookup per
    // keyword would mix one signature's uid with another's trust. A handoff signature is one.
    const count = status.filter((l) => l.startsWith('[GNUPG:] NEWSIG')).length;
    if (count > 1) {
      return verdict({ problem: `the signature file holds ${count} OpenPGP signatures; a handoff signature is one` });
    }
    const valid = line('VALIDSIG')?.split(' ');
    // VALIDSIG's last field is the primary key's fingerprint (field 11), else the signing key's.
    const fingerprint = valid ? (valid[11] ?? valid[2] ?? null) : null;
    const good = line('GOODSIG');
    const trustLine = status.find((l) => l.startsWith('[GNUPG:] TRUST_'));
    const trust = trustLine ? trustLine.split(' ')[1].slice('TRUST_'.length).toLowerCase() : null;
    const base = { fingerprint, trust };
    if (line('BADSIG')) return verdict({ ...base, problem: 'BAD signature: not over these bytes' });
    if (line('REVKEYSIG')) return verdict({ ...base, problem: 'the key that made the signature is revoked' });
    if (line('EXPKEYSIG')) return verdict({ ...base, problem: 'the key that made the signature has expired' });
    if (line('EXPSIG')) return verdict({ ...base, problem: 'the signature has expired' });
    if (!good || !valid || !fingerprint || r.code !== 0) {
      const err = line('ERRSIG') ?? line('NO_PUBKEY');
      return verdict({
        ...base,
        problem: err
          ? `gpg cannot check the signature (${err.slice(9)})`
          : `gpg refused the signature: ${r.stderr.trim()}`,
      });
    }
    if (TRUST_LEVELS.indexOf(trust ?? 'undefined') < TRUST_LEVELS.indexOf(minTrust)) {
      return verdict({
        ...base,
        problem: `the key's trust is ${trust ?? 'undefined'}, below gpg.minTrustLevel ${minTrust}`,
      });
    }
    const principals = await validUids(program, fingerprint, minTrust);
    if (!principals.length) {
      return verdict({ ...base, problem: `no uid of the key is valid at gpg.minTrustLevel ${minTrust}` });
    }
    return verdict({ ...base, principals, valid: true });
  });
}
