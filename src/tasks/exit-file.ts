// The `exit` file: the command's exit status, which the wrapper shell writes (to a temporary file,
// then renamed) when the command ends. Read by the runner, by recovery and by an adopted supervisor.
import * as fs from 'node:fs';
import { taskFile } from './paths';

/** The status the wrapper wrote to the task's `exit` file; null if it never wrote one. */
export function readExitFile(commonDir: string, id: string): number | null {
  let text: string;
  try {
    // Never through a symlink: the task dir is private, but the command could write there.
    const fd = fs.openSync(taskFile(commonDir, id, 'exit'), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      const buf = Buffer.alloc(16);
      text = buf.subarray(0, fs.readSync(fd, buf, 0, 16, 0)).toString('latin1');
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return null;
  }
  const m = /^(\d{1,3})\n$/.exec(text);
  return m ? Number(m[1]) : null;
}
