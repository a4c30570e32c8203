// Processes of a task: who they are (pid, start time, boot id — a pid alone is reused), whether they
// still run, and ending all of them. Linux /proc only; no node API is needed.
//
// A task's processes are its command's process group plus every process carrying the task's mark in
// its environment (XET_TASK_MARK): a descendant that called setsid or double-forked has left the
// group but still inherits the environment. A process that clears its environment and leaves the
// group escapes; docs/CLI.md says so. (cgroups would catch it, but these machines mount cgroup v1
// and a user may not create one.)

import * as fs from 'node:fs';

export interface ProcessIdentity {
  pid: number;
  /** Field 22 of /proc/<pid>/stat: start time in clock ticks since boot. */
  start: string;
  boot: string;
}

export type Liveness = 'alive' | 'gone' | 'unknown';

let cachedBoot: string | null | undefined;

/** This boot's id, or null if it cannot be read (then nothing can be proven gone or alive). */
export function bootId(): string | null {
  if (cachedBoot !== undefined) return cachedBoot;
  try {
    cachedBoot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    cachedBoot = null;
  }
  return cachedBoot;
}

interface Stat {
  state: string;
  ppid: number;
  pgid: number;
  start: string;
}

function readStat(pid: number): Stat | 'gone' | 'unknown' {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ESRCH'
      ? 'gone'
      : 'unknown';
  }
  // The command name (field 2) may hold spaces and parentheses: fields after the last ')' are fixed.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state), so field n is rest[n - 3].
  if (rest.length < 20) return 'unknown';
  return { state: rest[0], ppid: Number(rest[1]), pgid: Number(rest[2]), start: rest[19] };
}

/** A process's group (field 5 of /proc/<pid>/stat), or null if it cannot be read. */
export function processGroupOf(pid: number): number | null {
  const st = readStat(pid);
  return typeof st === 'string' ? null : st.pgid || null;
}

/** A process's start ticks, zombies included (a command already done still had a start). */
export function startTicksOf(pid: number): string | null {
  const st = readStat(pid);
  return typeof st === 'string' ? null : (st.start ?? null);
}

/** The identity of a running process, or null if it is not running. */
export function identify(pid: number): ProcessIdentity | null {
  const boot = bootId();
  const st = readStat(pid);
  if (!boot || typeof st === 'string' || st.state === 'Z' || st.state === 'X') return null;
  return { pid, start: st.start, boot };
}

/**
 * Whether exactly that process still runs: same boot, same pid, same start time. A zombie is gone
 * (it runs nothing). 'unknown' when /proc cannot answer (then a guard must stay).
 */
export function liveness(id: ProcessIdentity): Liveness {
  const boot = bootId();
  if (!boot) return 'unknown';
  if (boot !== id.boot) return 'gone';
  const st = readStat(id.pid);
  if (st === 'gone') return 'gone';
  if (st === 'unknown') return 'unknown';
  if (st.start !== id.start || st.state === 'Z' || st.state === 'X') return 'gone';
  return 'alive';
}

/** Pids (never this process) whose environment holds `XET_TASK_MARK=<mark>`, zombies excluded. */
export function findMarked(mark: string): number[] {
  const needle = Buffer.from(`\0XET_TASK_MARK=${mark}\0`);
  const first = Buffer.from(`XET_TASK_MARK=${mark}\0`);
  const found: number[] = [];
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return found;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    if (pid === process.pid) continue;
    let env: Buffer;
    try {
      env = fs.readFileSync(`/proc/${pid}/environ`);
    } catch {
      continue; // gone, or another user's
    }
    if (env.indexOf(needle) === -1 && !env.subarray(0, first.length).equals(first)) continue;
    const st = readStat(pid);
    if (typeof st === 'string' || st.state === 'Z') continue;
    found.push(pid);
  }
  return found;
}

/** Pids of the task still running: its process group and its marked processes. */
export function taskProcesses(pgid: number | null, mark: string): number[] {
  const pids = new Set(findMarked(mark));
  if (pgid) {
    // Members of the group that lost the mark (a process that replaced its environment).
    try {
      for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e)) continue;
        const st = readStat(Number(e));
        if (typeof st !== 'string' && st.pgid === pgid && st.state !== 'Z') pids.add(Number(e));
      }
    } catch {
      // no /proc: the marked ones are all we know
    }
  }
  pids.delete(process.pid);
  return [...pids];
}

function signal(pids: number[], pgid: number | null, sig: NodeJS.Signals): void {
  if (pgid) {
    try {
      process.kill(-pgid, sig);
    } catch {
      // the group is empty
    }
  }
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * End every process of a task: SIGTERM, up to `graceMs` for them to go, then SIGKILL, then wait
 * (up to 5 s) until none is left. Returns what had to be killed and whether any survived.
 */
export async function endTaskProcesses(
  pgid: number | null,
  mark: string,
  graceMs: number,
): Promise<{ terminated: number; killed: number; survivors: number[] }> {
  let pids = taskProcesses(pgid, mark);
  const terminated = pids.length;
  if (!pids.length) return { terminated: 0, killed: 0, survivors: [] };
  signal(pids, pgid, 'SIGTERM');
  const graceEnd = Date.now() + graceMs;
  while (Date.now() < graceEnd) {
    await sleep(50);
    pids = taskProcesses(pgid, mark);
    if (!pids.length) return { terminated, killed: 0, survivors: [] };
  }
  const killed = pids.length;
  const killEnd = Date.now() + 5000;
  while (pids.length && Date.now() < killEnd) {
    signal(pids, pgid, 'SIGKILL');
    await sleep(50);
    pids = taskProcesses(pgid, mark);
  }
  return { terminated, killed, survivors: pids };
}
