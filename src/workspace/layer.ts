// Layers: the kernel route that bounds what an overlay fork's own processes write. A fork with an
// allowance gets its upper and work dirs on a filesystem of the allowance's size, so a write past
// it fails in the kernel (ENOSPC, or EDQUOT with a quota) whoever makes it — a task's grandchild
// included, which no accounting in git xet could stop. Routes, in the order `auto` picks them:
//   project-quota  the fork's dir is on XFS mounted with prjquota and xfs_quota is installed: the
//                  layer dir gets a project id with hard block and inode limits (detected at run
//                  time; these machines' kernel has no CONFIG_XFS_QUOTA, so it is not offered here)
//   image          a sparse ext4 image `xet/forks/<id>/layer.img` (mkfs.ext4 -N for the files
//                  limit), loop-mounted at `xet/forks/<id>/layer`; survives a reboot (mounted again
//                  before the overlay)
//   tmpfs          `git config xet.fork.layer tmpfs`: size= and nr_inodes= on a tmpfs; in memory, so
//                  a reboot or an unmount loses the fork's work
// The image's size is found by trial: mkfs, mount, statfs, and again larger until the space
// available to the fork (after the empty filesystem's own metadata, journal and upper/work dirs) is
// at least the allowance. `layer.json` beside it records what the empty layer already used, so the
// fork's usage is a statfs (cheap) minus that.

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { GitConfig } from '../git/config';
import { XetError } from '../errors';
import type { Amount } from '../allowance/model';
import { mountContaining, mountedType, unmount, unmountLazy } from './overlay';
import { runTool } from './tools';

export type LayerRoute = 'image' | 'tmpfs' | 'project-quota';
export type LayerSetting = 'auto' | 'image' | 'tmpfs' | 'none';

export interface LayerPaths {
  /** `xet/forks/<id>`: the fork's own dir. */
  own: string;
  image: string;
  mount: string;
  upper: string;
  work: string;
  info: string;
}

export function layerPaths(own: string): LayerPaths {
  const mount = path.join(own, 'layer');
  return {
    own,
    image: path.join(own, 'layer.img'),
    mount,
    upper: path.join(mount, 'upper'),
    work: path.join(mount, 'work'),
    info: path.join(own, 'layer.json'),
  };
}

export function layerSetting(config: GitConfig): LayerSetting {
  const v = config.get('xet.fork.layer');
  if (v === undefined) return 'auto';
  if (v === 'auto' || v === 'image' || v === 'tmpfs' || v === 'none') return v;
  throw new XetError('CONFIG_INVALID', `xet.fork.layer: '${v}' is not auto, image, tmpfs or none`, { value: v });
}

async function hasTool(cmd: string, args: string[]): Promise<boolean> {
  const r = await runTool(cmd, args).catch(() => null);
  return r !== null && r.code !== 127;
}

/** Whether an XFS project quota can bound a layer dir under `dir`: null if yes, else why not. */
export async function projectQuotaUnavailable(dir: string): Promise<string | null> {
  const real = fs.existsSync(dir) ? fs.realpathSync(dir) : dir;
  const m = mountContaining(real);
  if (!m) return `no mount holds ${real}`;
  if (m.type !== 'xfs') return `${real} is on ${m.type} (${m.point}), not XFS`;
  const opts = m.superOptions;
  if (!opts.some((o) => o === 'prjquota' || o === 'pquota' || o === 'pqnoenforce')) {
    return `the XFS filesystem at ${m.point} is not mounted with prjquota (options: ${opts.join(',')})`;
  }
  if (opts.includes('pqnoenforce'))
    return `the XFS filesystem at ${m.point} counts project quotas but does not enforce them`;
  if (!(await hasTool('xfs_quota', ['-V']))) return 'xfs_quota is not installed (Debian package xfsprogs)';
  return null;
}

/** The route a new overlay fork with an allowance gets under `forksDir`, or null with the reason. */
export async function chooseRoute(
  setting: LayerSetting,
  forksDir: string,
): Promise<{ route: LayerRoute | null; reason: string }> {
  if (setting === 'none') return { route: null, reason: 'xet.fork.layer is none' };
  if (setting === 'tmpfs') return { route: 'tmpfs', reason: '' };
  const pq = await projectQuotaUnavailable(forksDir);
  if (!pq && setting === 'auto') return { route: 'project-quota', reason: '' };
  if (await hasTool('mkfs.ext4', ['-V'])) return { route: 'image', reason: '' };
  const why = `mkfs.ext4 is not installed (Debian package e2fsprogs), and no project quota: ${pq ?? 'not chosen'}`;
  if (setting === 'image') throw new XetError('FORK_MODE_UNAVAILABLE', `xet.fork.layer=image: ${why}`);
  return { route: null, reason: why };
}

interface LayerInfo {
  schema: 'xet.fork-layer/v1';
  route: LayerRoute;
  /** What the empty layer used (metadata, root, upper and work dirs): not the fork's. */
  baseline: Amount;
  imageBytes: number | null;
  projectId: number | null;
  /** The fork's allowance, so `fsck --rebuild` gives a rebuilt row its route and allowance back. */
  allowance?: { bytes: number; files: number | null };
  /** An image's statfs f_blocks (its block count less ext4's overhead), so its usage can be read
   * from the superblock while it is not mounted, in the same terms as the baseline. */
  statfsBlocks?: number;
}

function writeInfo(p: LayerPaths, info: LayerInfo): void {
  const tmp = `${p.info}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, `${JSON.stringify(info)}\n`);
  fs.renameSync(tmp, p.info);
}

function readInfo(p: LayerPaths): LayerInfo | null {
  try {
    const st = fs.statSync(p.info);
    if (st.size > 4096) return null; // ours is a line; anything larger is not
    const v = JSON.parse(fs.readFileSync(p.info, 'utf8')) as LayerInfo;
    if (v.schema !== 'xet.fork-layer/v1' || typeof v.baseline?.bytes !== 'number') return null;
    if (typeof v.baseline.files !== 'number') return null;
    return v;
  } catch {
    return null;
  }
}

function usedOn(dir: string): Amount & { availBytes: number; availFiles: number } {
  const st = fs.statfsSync(dir);
  return {
    bytes: (st.blocks - st.bfree) * st.bsize,
    files: st.files - st.ffree,
    availBytes: st.bavail * st.bsize,
    availFiles: st.ffree,
  };
}

/** The image is a sparse file and stays one: mkfs writes neither the journal's nor the inode
 * tables' zeros (a fresh sparse file reads as zeros already), the kernel does not zero them in the
 * background either (noinit_itable), and space the fork frees goes back to the host (discard punches
 * holes through the loop device). */
const MKFS_EXTENDED = 'root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1';
const IMAGE_MOUNT = 'loop,noinit_itable,discard';

/** Inodes the empty layer needs besides the fork's files: ext4's reserved ones and lost+found, the
 * root, upper, work and the overlay's work/work and work/index, with some to spare. */
const LAYER_INODES = 24;

/** Run a tool; a failure is FORK_MODE_UNAVAILABLE when making a layer (this machine cannot: no loop
 * devices, no tmpfs mounts), FORK_BROKEN for an existing fork's layer. */
async function must(cmd: string, args: string[], what: string, making = false): Promise<void> {
  const r = await runTool(cmd, args).catch((e: Error) => ({ code: 127, stdout: '', stderr: e.message }));
  if (r.code !== 0) {
    const hint = making ? ' (git config xet.fork.layer tmpfs or none where this cannot work)' : '';
    const code = r.code === 127 || making ? 'FORK_MODE_UNAVAILABLE' : 'FORK_BROKEN';
    throw new XetError(code, `${what}: ${r.stderr}${hint}`, {
      command: [cmd, ...args].join(' '),
    });
  }
}

/** Make and mount the layer of a new fork; upper and work exist in it afterwards. */
export async function makeLayer(
  p: LayerPaths,
  route: LayerRoute,
  allowance: { bytes: number; files: number | null },
  id: string,
): Promise<void> {
  fs.mkdirSync(p.mount, { recursive: true });
  let imageBytes: number | null = null;
  let projectId: number | null = null;
  if (route === 'image') imageBytes = await makeImage(p, allowance);
  else if (route === 'tmpfs') {
    const opts = [`size=${Math.max(allowance.bytes, 4096)}`, 'mode=0700'];
    if (allowance.files !== null) opts.push(`nr_inodes=${allowance.files + LAYER_INODES}`);
    await must(
      'mount',
      ['-t', 'tmpfs', '-o', opts.join(','), `xet-fork-${id}`, p.mount],
      'cannot mount the tmpfs layer',
      true,
    );
  } else {
    projectId = projectIdOf(id);
    const at = mountContaining(fs.realpathSync(p.mount))?.point ?? p.mount;
    await must('xfs_quota', ['-x', '-c', `project -s -p ${p.mount} ${projectId}`, at], 'cannot set the project', true);
    const limit = [
      `bhard=${Math.ceil(allowance.bytes / 1024)}k`,
      ...(allowance.files !== null ? [`ihard=${allowance.files}`] : []),
    ];
    await must('xfs_quota', ['-x', '-c', `limit -p ${limit.join(' ')} ${projectId}`, at], 'cannot set the quota');
  }
  fs.mkdirSync(p.upper, { recursive: true });
  fs.mkdirSync(p.work, { recursive: true });
  if (allowance.files !== null && route !== 'project-quota') padInodes(p, allowance.files + overlayInodes(route));
  const u = usedOn(p.mount);
  writeInfo(p, {
    schema: 'xet.fork-layer/v1',
    route,
    ...(route === 'image' ? { statfsBlocks: fs.statfsSync(p.mount).blocks } : {}),
    // Overlay makes work/work and work/index at its first mount: not the fork's.
    baseline:
      route === 'project-quota' ? { bytes: 0, files: 0 } : { bytes: u.bytes, files: u.files + overlayInodes(route) },
    imageBytes,
    projectId,
    allowance,
  });
}

/** Inodes the overlay takes on the layer at its mounts (work/work, and on tmpfs one more), as
 * measured on these machines' kernel (test/allowance-forks: ENOSPC comes at the files allowance). */
const OVERLAY_DIRS = 2;
const overlayInodes = (route: LayerRoute): number => (route === 'image' ? 1 : OVERLAY_DIRS);

/** mkfs rounds an inode count up (whole inode table blocks per group) and tmpfs's nr_inodes must
 * cover the layer's own: what is free beyond the fork's files (and the overlay's own dirs) is taken
 * by empty files in `layer/.reserve`, outside upper and work, so ENOSPC comes at the allowance. */
function padInodes(p: LayerPaths, inodes: number): void {
  const spare = fs.statfsSync(p.mount).ffree - inodes;
  if (spare <= 0) return;
  const dir = path.join(p.mount, '.reserve');
  fs.mkdirSync(dir); // one of the spare inodes
  for (let i = 0; i < spare - 1; i++) fs.closeSync(fs.openSync(path.join(dir, String(i)), 'wx', 0o400));
}

/** A project id from the fork id (never 0, the default project). */
function projectIdOf(id: string): number {
  return (parseInt(id.slice(0, 7), 16) || 0) + 1;
}

/** mkfs an image and mount it, resized each try until the space available to the fork is at least
 * the allowance and at most a little more (2%, or 256 KiB for small ones). */
async function makeImage(p: LayerPaths, allowance: { bytes: number; files: number | null }): Promise<number> {
  const inodes = allowance.files === null ? null : allowance.files + LAYER_INODES;
  const slack = Math.max(Math.ceil(allowance.bytes / 50), 256 << 10);
  // A first guess: ext4 holds back about 2% of blocks for delayed allocation and needs its inode
  // tables (256 bytes per inode) and a journal; what is short or over is measured and corrected.
  let size = Math.ceil(allowance.bytes * 1.04) + (inodes ?? 0) * 256 + (256 << 10);
  let good: number | null = null;
  let lastError = '';
  for (let attempt = 0; attempt < 8; attempt++) {
    const last = attempt === 7;
    if (last && good !== null) size = good;
    size = Math.max(Math.ceil(size / 65536) * 65536, 1 << 20);
    fs.rmSync(p.image, { force: true });
    fs.closeSync(fs.openSync(p.image, 'w', 0o600));
    fs.truncateSync(p.image, size);
    const args = ['-q', '-F', '-m', '0', '-E', MKFS_EXTENDED, ...(inodes !== null ? ['-N', String(inodes)] : [])];
    const mk = await runTool('mkfs.ext4', [...args, p.image]).catch((e: Error) => ({
      code: 127,
      stdout: '',
      stderr: e.message,
    }));
    if (mk.code === 127) throw new XetError('FORK_MODE_UNAVAILABLE', `mkfs.ext4 cannot run: ${mk.stderr}`);
    if (mk.code !== 0) {
      // Too small for its inodes or its journal: double it.
      lastError = mk.stderr;
      size *= 2;
      continue;
    }
    await must('mount', ['-t', 'ext4', '-o', IMAGE_MOUNT, p.image, p.mount], 'cannot loop-mount the layer image', true);
    fs.mkdirSync(p.upper, { recursive: true });
    fs.mkdirSync(p.work, { recursive: true });
    const u = usedOn(p.mount);
    const enoughFiles = inodes === null || u.availFiles >= allowance.files! + OVERLAY_DIRS;
    const over = u.availBytes - allowance.bytes;
    if (enoughFiles && over >= 0 && (over <= slack || last || size === good)) return size;
    lastError = `${u.availBytes} bytes and ${u.availFiles} inodes available in a ${size}-byte image`;
    await unmountLayer(p);
    if (enoughFiles && over >= 0) {
      good = good === null ? size : Math.min(good, size);
      size -= over - Math.floor(slack / 2);
    } else {
      size += Math.ceil(Math.max(-over, 0) * 1.05) + (64 << 10);
      if (!enoughFiles) size *= 2;
    }
  }
  throw new XetError('FORK_BROKEN', `cannot size an ext4 image for ${allowance.bytes} bytes: ${lastError}`, {
    image: p.image,
  });
}

/** Whether the layer filesystem is mounted (image, tmpfs), or exists (project quota). */
export function layerMounted(p: LayerPaths, route: LayerRoute): boolean {
  if (route === 'project-quota') return fs.existsSync(p.upper);
  return mountedType(p.mount) === (route === 'image' ? 'ext4' : 'tmpfs');
}

/** Mount a fork's layer again (after a reboot or an unmount) before its overlay is mounted. */
export async function mountLayer(p: LayerPaths, route: LayerRoute, id: string): Promise<boolean> {
  if (layerMounted(p, route)) return false;
  if (route === 'tmpfs') {
    throw new XetError(
      'FORK_BROKEN',
      `the tmpfs layer of fork ${id} is gone (a reboot or an unmount loses a tmpfs fork's work); ` +
        'git xet discard --no-capture removes the fork',
      { layer: p.mount, route },
    );
  }
  if (route === 'project-quota') {
    throw new XetError('FORK_BROKEN', `the upper layer of fork ${id} is missing (${p.upper})`, { layer: p.mount });
  }
  if (!fs.existsSync(p.image)) {
    throw new XetError('FORK_BROKEN', `the layer image of fork ${id} is missing (${p.image})`, { image: p.image });
  }
  fs.mkdirSync(p.mount, { recursive: true });
  await must('mount', ['-t', 'ext4', '-o', IMAGE_MOUNT, p.image, p.mount], `cannot mount the layer of fork ${id}`);
  return true;
}

/** Unmount the layer (lazily if something still holds it) and detach every loop device on its
 * image. Safe on a layer half made or never made: what is not there is skipped. */
export async function unmountLayer(p: LayerPaths): Promise<void> {
  for (let round = 0; round < 4 && mountedType(p.mount) !== null; round++) {
    if ((await unmount(p.mount)) !== 'ok') await unmountLazy(p.mount);
  }
  if (!fs.existsSync(p.image)) return;
  // mount -o loop sets autoclear, but a process killed between losetup and mount left none.
  const r = await runTool('losetup', ['-j', p.image]).catch(() => null);
  for (const line of (r?.stdout ?? '').split('\n')) {
    const dev = /^(\/dev\/loop\d+):/.exec(line)?.[1];
    if (dev) await runTool('losetup', ['-d', dev]);
  }
}

/** Take a fork's layer down: unmounted, its loop devices detached, a project's limits cleared. The
 * caller removes `own` (the image with it). */
export async function removeLayer(p: LayerPaths): Promise<void> {
  const info = readInfo(p);
  await unmountLayer(p);
  if (info?.route === 'project-quota' && info.projectId) {
    const at = mountContaining(fs.realpathSync(p.own))?.point ?? p.own;
    await runTool('xfs_quota', ['-x', '-c', `limit -p bhard=0 ihard=0 ${info.projectId}`, at]).catch(() => null);
  }
}

/** A fork's layer as its `layer.json` records it (for `fsck --rebuild`), or null without one. */
export function recordedLayer(own: string): {
  route: LayerRoute;
  paths: LayerPaths;
  allowance: { bytes: number; files: number | null } | null;
} | null {
  const paths = layerPaths(own);
  const info = readInfo(paths);
  if (!info || !['image', 'tmpfs', 'project-quota'].includes(info.route)) return null;
  const a = info.allowance;
  const ok = a && Number.isSafeInteger(a.bytes) && (a.files === null || Number.isSafeInteger(a.files));
  return { route: info.route, paths, allowance: ok ? a : null };
}

/** What the fork uses on its layer (statfs, minus the empty layer's own), or null if unmounted. */
export function layerUsage(p: LayerPaths, route: LayerRoute): Amount | null {
  if (!layerMounted(p, route)) return null;
  const base = readInfo(p)?.baseline ?? { bytes: 0, files: 0 };
  const u = usedOn(route === 'project-quota' ? p.upper : p.mount);
  return { bytes: Math.max(0, u.bytes - base.bytes), files: Math.max(0, u.files - base.files) };
}

/** What the fork uses on an image that is not mounted (a reboot), read from its ext4 superblock:
 * the free block and inode counts the kernel wrote there at its last unmount (after a crash, as of
 * its last commit of the superblock). Null when the image is not one we can read. */
export function imageUsage(p: LayerPaths): (Amount & { at: string }) | null {
  const info = readInfo(p);
  if (!info || info.route !== 'image') return null;
  let sb: Buffer;
  let at: string;
  try {
    const fd = fs.openSync(p.image, 'r');
    try {
      at = fs.fstatSync(fd).mtime.toISOString();
      sb = Buffer.alloc(1024);
      if (fs.readSync(fd, sb, 0, 1024, 1024) !== 1024) return null;
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return null;
  }
  // The image is a file in the repository: its superblock is checked before its figures are used.
  if (sb.readUInt16LE(0x38) !== 0xef53) return null;
  const logBlock = sb.readUInt32LE(0x18);
  if (logBlock > 6) return null;
  const blockSize = 1024 << logBlock;
  const wide = (sb.readUInt32LE(0x60) & 0x80) !== 0; // INCOMPAT_64BIT: the high halves are valid
  const u64 = (lo: number, hi: number) => sb.readUInt32LE(lo) + (wide ? sb.readUInt32LE(hi) * 2 ** 32 : 0);
  const blocks = u64(0x4, 0x150);
  const freeBlocks = u64(0xc, 0x158);
  const inodes = sb.readUInt32LE(0x0);
  const freeInodes = sb.readUInt32LE(0x10);
  if (freeBlocks > blocks || freeInodes > inodes) return null;
  // statfs counts blocks less ext4's overhead (journal, tables): the baseline is in those terms.
  // A layer.json from before statfsBlocks was recorded: the overhead counts as used (an over-count).
  const counted = info.statfsBlocks !== undefined && info.statfsBlocks <= blocks ? info.statfsBlocks : blocks;
  return {
    bytes: Math.max(0, (counted - Math.min(freeBlocks, counted)) * blockSize - info.baseline.bytes),
    files: Math.max(0, inodes - freeInodes - info.baseline.files),
    at,
  };
}

/** The route's one-line description for `allowance --json`. */
export function describeRoute(p: LayerPaths, route: LayerRoute, allowance: { bytes: number | null }): string {
  const size = `${allowance.bytes ?? '?'} bytes`;
  if (route === 'image') {
    return `upper and work dirs on an ext4 image (${p.image}) loop-mounted at ${p.mount}, at least ${size} usable: a write past it fails with ENOSPC`;
  }
  if (route === 'tmpfs') {
    return `upper and work dirs on a ${size} tmpfs at ${p.mount}: a write past it fails with ENOSPC; a reboot loses the fork's work`;
  }
  return `an XFS project quota of ${size} on ${p.mount}: a write past it fails with EDQUOT`;
}
