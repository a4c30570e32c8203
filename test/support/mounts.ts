// Real filesystems for fork tests: a sandbox on tmpfs, XFS images with reflink loop-mounted in it,
// small tmpfs mounts to fill up, and a teardown that unmounts everything under the sandbox (deepest
// first, lazily if busy) before removing it, whatever the test left mounted.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { createSandbox, type Sandbox } from './sandbox';

function sh(cmd: string, args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return { status: r.status, stderr: `${r.stderr ?? ''}${r.error ? r.error.message : ''}` };
}

function must(cmd: string, args: string[]): void {
  const r = sh(cmd, args);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
}

/** Mount points at or below dir, deepest first. */
export function mountsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f.length < 5) continue;
    const mp = f[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp === dir || mp.startsWith(`${dir}/`)) out.push(mp);
  }
  return out.sort((a, b) => b.length - a.length);
}

export function unmountAll(dir: string): void {
  for (let round = 0; round < 5; round++) {
    const mps = mountsUnder(dir);
    if (!mps.length) return;
    for (const mp of mps) if (sh('umount', [mp]).status !== 0) sh('umount', ['-l', mp]);
  }
}

export async function withMountSandbox<T>(fn: (sb: Sandbox) => T | Promise<T>): Promise<T> {
  const base = fs.existsSync('/dev/shm') ? '/dev/shm' : undefined;
  const sb = createSandbox('xet-fork-test-', base);
  try {
    return await fn(sb);
  } finally {
    unmountAll(sb.root);
    sb.cleanup();
  }
}

/** Why XFS-with-reflink cannot be set up here, or null if it can. */
export function xfsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'loop-mounting an XFS image needs root';
  if (sh('mkfs.xfs', ['-V']).status !== 0) return 'mkfs.xfs is not installed (Debian package xfsprogs)';
  return null;
}

/** An XFS filesystem with reflink=1 from a sparse image, mounted at sb.path(name). */
export function mountXfs(sb: Sandbox, name: string, sizeMiB = 512): string {
  const img = sb.path(`${name}.img`);
  const mp = sb.path(name);
  fs.mkdirSync(mp, { recursive: true });
  fs.closeSync(fs.openSync(img, 'w'));
  fs.truncateSync(img, sizeMiB * 1024 * 1024);
  must('mkfs.xfs', ['-q', '-m', 'reflink=1', img]);
  must('mount', ['-o', 'loop', img, mp]);
  return mp;
}

/** A tmpfs of the given size at sb.path(name): a filesystem that fills up. */
export function mountTmpfs(sb: Sandbox, name: string, sizeKiB: number): string {
  const mp = sb.path(name);
  fs.mkdirSync(mp, { recursive: true });
  must('mount', ['-t', 'tmpfs', '-o', `size=${sizeKiB}k`, 'xet-test-tmpfs', mp]);
  return path.resolve(mp);
}

/** Filesystem type at a path (for asserting where a test's files really are). */
export function fsType(dir: string): string {
  const r = spawnSync('stat', ['-f', '-c', '%T', dir], { encoding: 'utf8' });
  return r.stdout.trim();
}
