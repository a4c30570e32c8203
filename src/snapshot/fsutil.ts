// Small filesystem helpers shared by capture, restore and verify.
import * as fs from 'node:fs';

/** A text file's content, or null when it does not exist or cannot be read. */
export function readOptional(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}
