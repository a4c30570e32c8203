// Running the system tools forks need besides git: mount(8), umount(8) and cp(1). One place, so the
// environment and the reading of their failures are uniform.

import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { XetError } from '../errors';

export interface ToolResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Run a tool to completion; never throws for a non-zero exit (callers decide what it means). */
export function runTool(cmd: string, args: string[], cwd?: string): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, LC_ALL: 'C', LANG: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr: stderr.trim() }));
  });
}

/** Whether a failure message is the filesystem being full. */
export function isNoSpace(text: string | undefined): boolean {
  return /No space left on device|ENOSPC|Disk quota exceeded|EDQUOT/i.test(text ?? '');
}

/** Whether a failure was a full filesystem: said so outright (ENOSPC), or a write that failed (git
 * only says "unable to write file") where one of the filesystems involved has no space left. */
export function diskFull(e: unknown, dirs: string[]): string | null {
  const text = e instanceof XetError ? `${e.message} ${String(e.details.stderr ?? '')}` : String((e as Error)?.message);
  const code = (e as NodeJS.ErrnoException)?.code;
  const said = isNoSpace(text) || isNoSpace(code);
  if (!said && !/unable to write|write error|short write|failed to write/i.test(text)) return null;
  for (const d of dirs) {
    try {
      const st = fs.statfsSync(d);
      if (st.bavail * st.bsize < 1 << 20) return d;
    } catch {
      // gone: not the one that filled up
    }
  }
  return said ? dirs[0] : null;
}
