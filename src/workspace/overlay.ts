// Kernel overlayfs for overlay forks: mounting, unmounting, asking whether a directory is mounted,
// probing whether this process may mount at all, and finding who keeps a busy mount busy.
// Facts these rely on (measured, docs/notes/forks-on-these-machines.md): without redirect_dir=on a
// directory rename inside the fork fails with EXDEV; upper and work must be on one filesystem;
// mount(8) exits 32 for every mount failure, so the reason is read from its message. Mounting goes
// through mount(2) in the native module when it loaded (src/native.ts): spawning mount(8) from a
// node process costs ~20 ms of fork and exec here, most of a fork through the daemon.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { XetError } from '../errors';
import { native } from '../native';
import { runTool } from './tools';

export interface OverlayLayers {
  lower: string;
  upper: string;
  work: string;
}

/** Overlay option values are split at ',' and lowerdir at ':'; a backslash escapes either. */
function escapeOption(p: string): string {
  return p.replace(/\\/g, '\\\\').replace(/,/g, '\\,').replace(/:/g, '\\:');
}

/** A path a mount names (a layer, the target): one with a newline or NUL cannot be passed whole
 * (mount options and mountinfo lines end at a newline, C strings at a NUL). */
export function refuseUnmountablePath(p: string): void {
  if (/[\n\0]/.test(p)) throw new XetError('USAGE', `cannot mount a path with a newline: ${JSON.stringify(p)}`);
}

export function overlayOptions(layers: OverlayLayers): string {
  for (const p of [layers.lower, layers.upper, layers.work]) refuseUnmountablePath(p);
  return [
    `lowerdir=${escapeOption(layers.lower)}`,
    `upperdir=${escapeOption(layers.upper)}`,
    `workdir=${escapeOption(layers.work)}`,
    'redirect_dir=on',
  ].join(',');
}

export interface MountFailure {
  /** The kernel or mount(8) refused for lack of privilege. */
  notPermitted: boolean;
  message: string;
}

/** Mount an overlay at target; returns null on success or why it failed. */
export async function mountOverlay(
  layers: OverlayLayers,
  target: string,
  opts: { readOnly?: boolean } = {},
): Promise<MountFailure | null> {
  if (native) {
    refuseUnmountablePath(target);
    const errno = native.mountOverlay(target, overlayOptions(layers), opts.readOnly ? 1 : 0);
    if (errno === 0) return null;
    const name = errnoName(errno);
    return {
      notPermitted: name === 'EPERM' || name === 'EACCES',
      message:
        `mount(2) of an overlay at ${target} failed: ${name}` +
        (name === 'EINVAL' ? ' (the kernel refused the layers or options; its log says why)' : ''),
    };
  }
  const options = `${opts.readOnly ? 'ro,' : ''}${overlayOptions(layers)}`;
  const r = await runTool('mount', ['-t', 'overlay', 'overlay', '-o', options, target]).catch((e: Error) => ({
    code: 127,
    stdout: '',
    stderr: e.message,
  }));
  if (r.code === 0) return null;
  return {
    notPermitted:
      r.code === 127 || /permission denied|must be superuser|operation not permitted|only root/i.test(r.stderr),
    message: r.stderr || `mount exited ${r.code}`,
  };
}

function errnoName(errno: number): string {
  for (const [name, n] of Object.entries(os.constants.errno)) if (n === errno) return name;
  return `errno ${errno}`;
}

/** Unmount target: 'ok', 'busy' (a process uses it; nothing changed) or an error message. */
export async function unmount(target: string): Promise<'ok' | 'busy' | { error: string }> {
  const r = await runTool('umount', [target]);
  if (r.code === 0) return 'ok';
  if (/target is busy|device is busy|EBUSY/i.test(r.stderr)) return 'busy';
  if (/not mounted/i.test(r.stderr) && !isMounted(target)) return 'ok';
  return { error: r.stderr || `umount exited ${r.code}` };
}

/** Detach a mount even if busy (teardown only: open files keep the old view until closed). */
export async function unmountLazy(target: string): Promise<void> {
  await runTool('umount', ['-l', target]);
}

/** /proc/self/mountinfo escapes space, tab, newline and backslash in paths as octal. */
function unescapeMountPath(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Mount points, their filesystem types and whether they are read-only (the mount or its
 * filesystem), in mount order (later ones are on top). */
function mountTable(): { point: string; type: string; readOnly: boolean; superOptions: string[] }[] {
  let text: string;
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const out: { point: string; type: string; readOnly: boolean; superOptions: string[] }[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const fields = line.split(' ');
    const sep = fields.indexOf('-');
    const ro = (opts: string | undefined) => (opts ?? '').split(',').includes('ro');
    out.push({
      point: unescapeMountPath(fields[4]),
      type: sep >= 0 ? fields[sep + 1] : 'unknown',
      readOnly: ro(fields[5]) || (sep >= 0 && ro(fields[sep + 3])),
      superOptions: sep >= 0 ? (fields[sep + 3] ?? '').split(',') : [],
    });
  }
  return out;
}

/** The filesystem type mounted exactly at `dir` (the topmost mount), or null. */
export function mountedType(dir: string): string | null {
  let found: string | null = null;
  for (const m of mountTable()) if (m.point === dir) found = m.type;
  return found;
}

/** The topmost mount that holds `dir` (a real path): its point, type and filesystem options. */
export function mountContaining(dir: string): { point: string; type: string; superOptions: string[] } | null {
  let found: { point: string; type: string; superOptions: string[] } | null = null;
  for (const m of mountTable()) {
    const holds = m.point === '/' || m.point === dir || dir.startsWith(`${m.point}/`);
    if (holds && (!found || m.point.length >= found.point.length)) found = m;
  }
  return found;
}

/** Mount points at or below `dir`. */
export function mountsUnder(dir: string): string[] {
  return [...new Set(mountTable().map((m) => m.point))].filter((p) => p === dir || p.startsWith(`${dir}/`));
}

export function isMounted(dir: string): boolean {
  return mountedType(dir) === 'overlay';
}

/** Whether the topmost mount exactly at `dir` is read-only (false if nothing is mounted there). */
export function isMountedReadOnly(dir: string): boolean {
  let ro = false;
  for (const m of mountTable()) if (m.point === dir) ro = m.readOnly;
  return ro;
}

/** `mount -o remount,ro|rw` of the mount at `dir`: null, or why it failed (busy with open files
 * for writing, not permitted, …). */
export async function remountMode(dir: string, mode: 'ro' | 'rw'): Promise<string | null> {
  const r = await runTool('mount', ['-o', `remount,${mode}`, dir]).catch((e: Error) => ({
    code: 127,
    stdout: '',
    stderr: e.message,
  }));
  return r.code === 0 ? null : r.stderr || `mount exited ${r.code}`;
}

/** Processes whose working directory or an open file is under `dir` (best effort, for messages). */
export function holders(dir: string): number[] {
  const pids: number[] = [];
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return pids;
  }
  const under = (link: string) => link === dir || link.startsWith(`${dir}/`);
  for (const pid of entries) {
    try {
      if (under(fs.readlinkSync(`/proc/${pid}/cwd`))) {
        pids.push(Number(pid));
        continue;
      }
      for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
        if (under(fs.readlinkSync(`/proc/${pid}/fd/${fd}`))) {
          pids.push(Number(pid));
          break;
        }
      }
    } catch {
      // gone, or not ours to read
    }
  }
  return pids;
}

let probed: Promise<MountFailure | null> | null = null;

/** What decides whether a mount is allowed: this boot, this user, these capabilities. */
function mountContext(): string {
  const read = (f: string) => {
    try {
      return fs.readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  };
  const caps = /^CapEff:\s*(\S+)/m.exec(read('/proc/self/status'))?.[1] ?? '';
  return `${read('/proc/sys/kernel/random/boot_id').trim()}:${process.geteuid?.() ?? ''}:${caps}`;
}

/** Can this process mount an overlay? Tried for real in a scratch dir under `parent`; a success is
 * remembered there for this boot, user and capability set (a probe costs two mount calls). */
export function probeOverlay(parent: string): Promise<MountFailure | null> {
  probed ??= (async () => {
    fs.mkdirSync(parent, { recursive: true });
    const memo = path.join(parent, 'overlay-probe-ok');
    const context = mountContext();
    if (fs.existsSync(memo) && fs.readFileSync(memo, 'utf8') === context) return null;
    const failure = await probeOnce(parent);
    if (!failure) fs.writeFileSync(memo, context);
    return failure;
  })();
  return probed;
}

async function probeOnce(parent: string): Promise<MountFailure | null> {
  {
    const dir = fs.mkdtempSync(path.join(parent, 'overlay-probe-'));
    const [lower, upper, work, merged] = ['lower', 'upper', 'work', 'merged'].map((n) => path.join(dir, n));
    for (const d of [lower, upper, work, merged]) fs.mkdirSync(d);
    try {
      const failure = await mountOverlay({ lower, upper, work }, merged);
      if (!failure) await unmount(merged);
      return failure;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}
