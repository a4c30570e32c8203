// Helpers for remote-helper and publication tests: reading a directory store's state log as bytes,
// crafting states with the right checksum, racing processes, a git daemon, and a git-remote-xet shim
// that kills the whole `git xet push` process group once the real helper has finished.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { canonicalJson } from '../../src/snapshot/canonical-json';
import { run } from './git';
import { REMOTE_HELPER_DIR, type Sandbox } from './sandbox';
import { sidecarRows } from './state';

/** The publications ledger (the sidecar's) of the repository whose common git directory is
 * `commonDir`, oldest first; none before the sidecar exists. */
export function publications(commonDir: string): { id: string; state: string }[] {
  return sidecarRows(commonDir, 'SELECT id, state FROM publications ORDER BY created_at');
}

export const sha256 = (b: Buffer | string): string => crypto.createHash('sha256').update(b).digest('hex');

export interface StoreStateFile {
  seq: number;
  file: string;
  bytes: Buffer;
  /** sha256 of the file's bytes: what the next state's `prev` must be. */
  hash: string;
  outer: { sha256: string; state: StateBody };
}

export interface StateBody {
  schema: string;
  seq: number;
  prev: string | null;
  refs: Record<string, string>;
  head: string | null;
  packs: string[];
  pushId: string;
  createdAt: string;
}

/** Every state file of a store, ascending by file name. */
export function readStateLog(store: string): StoreStateFile[] {
  const dir = path.join(store, 'state');
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((n) => /^\d{12}\.json$/.test(n))
    .sort()
    .map((n) => {
      const file = path.join(dir, n);
      const bytes = fs.readFileSync(file);
      return {
        seq: Number(n.slice(0, 12)),
        file,
        bytes,
        hash: sha256(bytes),
        outer: JSON.parse(bytes.toString('utf8')) as StoreStateFile['outer'],
      };
    });
}

/** The state log is 1..N without gaps, each state names the hash of the previous file's bytes and
 * carries the checksum of its own canonical content. Returns the log. */
export function assertLinearLog(store: string): StoreStateFile[] {
  const log = readStateLog(store);
  log.forEach((s, i) => {
    assert.equal(s.seq, i + 1, `state files are numbered 1..N without gaps: ${log.map((x) => x.seq).join(',')}`);
    assert.equal(s.outer.state.seq, s.seq, `state ${s.seq} says it is ${s.outer.state.seq}`);
    assert.equal(s.outer.state.prev, i === 0 ? null : log[i - 1].hash, `state ${s.seq}: prev is the previous hash`);
    assert.equal(s.outer.sha256, sha256(canonicalJson(s.outer.state)), `state ${s.seq}: checksum`);
  });
  return log;
}

/** Append a state with a correct checksum and prev (for forging states that name absent objects). */
export function appendCraftedState(store: string, change: (s: StateBody) => StateBody): StateBody {
  const log = readStateLog(store);
  const last = log[log.length - 1];
  const state = change({
    ...last.outer.state,
    refs: { ...last.outer.state.refs },
    packs: [...last.outer.state.packs],
    seq: last.seq + 1,
    prev: last.hash,
    pushId: `forged-${crypto.randomBytes(4).toString('hex')}`,
    createdAt: new Date().toISOString(),
  });
  const bytes = Buffer.from(`${canonicalJson({ sha256: sha256(canonicalJson(state)), state })}\n`);
  fs.writeFileSync(path.join(store, 'state', `${String(state.seq).padStart(12, '0')}.json`), bytes, { flag: 'wx' });
  return state;
}

/** XOR one byte of a file in place. */
export function flipByte(file: string, offset: number): void {
  const fd = fs.openSync(file, 'r+');
  try {
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, offset);
    b[0] ^= 0x5a;
    fs.writeSync(fd, b, 0, 1, offset);
  } finally {
    fs.closeSync(fd);
  }
}

/** Copy of a directory tree's files and bytes (for "nothing changed" comparisons). */
export function dirSnapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.set(path.relative(dir, p), sha256(fs.readFileSync(p)));
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return out;
}

/** `git ls-remote <url>` as name -> oid, run in cwd; throws on failure. */
export function lsRemote(sb: Sandbox, cwd: string, url: string): Map<string, string> {
  const r = run(sb, cwd, 'git', ['ls-remote', url]);
  assert.equal(r.status, 0, `git ls-remote ${url} failed: ${r.stderr.toString()}`);
  const out = new Map<string, string>();
  for (const line of r.stdout.toString('utf8').split('\n')) {
    const [oid, name] = line.split('\t');
    if (name) out.set(name, oid);
  }
  return out;
}

export interface AsyncResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Run a process without blocking the event loop (so several can race). */
export function runAsync(
  sb: Sandbox,
  cwd: string,
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 60_000,
): Promise<AsyncResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...sb.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    });
  });
}

/** A TCP port nobody listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, ms: number): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.on('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`git daemon did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface Daemon {
  url(repo: string): string;
  stop(): void;
}

/** `git daemon` serving (and accepting pushes to) every repository under base. */
export async function startDaemon(sb: Sandbox, base: string): Promise<Daemon> {
  const port = await freePort();
  const pidFile = sb.path(`daemon-${port}.pid`);
  const r = run(sb, sb.root, 'git', [
    'daemon',
    '--export-all',
    '--enable=receive-pack',
    `--base-path=${base}`,
    `--port=${port}`,
    '--reuseaddr',
    '--listen=127.0.0.1',
    '--detach',
    `--pid-file=${pidFile}`,
    base,
  ]);
  assert.equal(r.status, 0, `git daemon: ${r.stderr.toString()}`);
  const stop = () => {
    try {
      process.kill(Number(fs.readFileSync(pidFile, 'utf8').trim()), 'SIGTERM');
    } catch {
      // already gone
    }
  };
  try {
    await waitForPort(port, 10_000);
  } catch (e) {
    stop();
    throw e;
  }
  return { url: (repo) => `git://127.0.0.1:${port}/${repo}`, stop };
}

/**
 * A directory holding a git-remote-xet shim to put first on PATH: for a push that carries a
 * publication id (`git xet push`) and XET_TEST_KILL_GROUP=1, it runs the real helper and then
 * SIGKILLs its whole process group, i.e. `git xet push` itself (run it under setsid), before it
 * can record the outcome. Everything else goes straight to the real helper.
 */
export function groupKillerShim(sb: Sandbox): string {
  const dir = sb.path('shim-bin');
  fs.mkdirSync(dir, { recursive: true });
  const real = path.join(REMOTE_HELPER_DIR, 'git-remote-xet');
  fs.writeFileSync(
    path.join(dir, 'git-remote-xet'),
    [
      '#!/bin/sh',
      'if [ -n "$GIT_XET_PUBLICATION_ID" ] && [ "$XET_TEST_KILL_GROUP" = 1 ]; then',
      `  ${JSON.stringify(real)} "$@"`,
      // Only a group of its own (setsid): pgid == sid. Never the test runner's group.
      '  read -r _ _ _ _ pgid sid _ < /proc/$$/stat',
      '  [ "$pgid" = "$sid" ] && kill -9 "-$pgid"',
      '  exit 1',
      'fi',
      `exec ${JSON.stringify(real)} "$@"`,
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  return dir;
}
