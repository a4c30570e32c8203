// Crash markers: how a writer learns that the ledger may be older than the last crash. Every git xet
// process that writes into a root (admit.ts) leaves `<common>/xet/allowance/writers/<pid>-<start>`
// while it runs and removes it when done. A marker whose process is gone (or whose pid now names
// another process: the start time differs) means a writer died mid-way: its temporary files may lie
// about and the ledger may count a part it never published. The next writer recounts before it
// admits anything, then removes the dead markers.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { sidecarDir } from '../sidecar/db';
import { startTicksOf } from '../tasks/proc';

export function writersDir(commonDir: string): string {
  return path.join(sidecarDir(commonDir), 'allowance', 'writers');
}

const MARKER_RE = /^(\d+)-(\d+|unknown)$/;

/** Markers of writers that are gone. */
export function deadWriters(commonDir: string): string[] {
  const dir = writersDir(commonDir);
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of names) {
    const m = MARKER_RE.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid) continue;
    const start = startTicksOf(pid);
    if (start === null || (m[2] !== 'unknown' && start !== m[2])) out.push(path.join(dir, name));
  }
  return out;
}

export interface WriterMarker {
  /** Remove the marker (the writer finished, whatever the outcome). Idempotent. */
  end(): void;
  /** Keep the marker when the process exits: the ledger missed an effect, so the next writer recounts. */
  keepForRecount(): void;
}

const held = new Map<string, { count: number; keep: boolean }>();

/** Leave this process's marker (one per process and repository, however many admissions nest). */
export function markWriting(commonDir: string): WriterMarker {
  const dir = writersDir(commonDir);
  const file = path.join(dir, `${process.pid}-${startTicksOf(process.pid) ?? 'unknown'}`);
  const entry = held.get(file);
  if (entry) entry.count++;
  else {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(file, '');
    held.set(file, { count: 1, keep: false });
  }
  let ended = false;
  return {
    end() {
      if (ended) return;
      ended = true;
      const e = held.get(file);
      if (!e) return;
      if (--e.count > 0) return;
      held.delete(file);
      if (!e.keep) fs.rmSync(file, { force: true });
    },
    keepForRecount() {
      const e = held.get(file);
      if (e) e.keep = true;
    },
  };
}

export function removeMarkers(files: string[]): void {
  for (const f of files) fs.rmSync(f, { force: true });
}
