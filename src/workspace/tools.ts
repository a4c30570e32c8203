// Running the system tools forks need besides git: mount(8), umount(8) and cp(1). One place, so the
// environment and the reading of their failures are uniform.

import { spawn } from 'node:child_process';

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
