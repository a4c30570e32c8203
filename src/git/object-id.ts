// Git object ids computed in-process: no process is started and nothing is written, so a caller can
// know an object's name before deciding whether to store it.
import * as crypto from 'node:crypto';

export function objectId(type: string, bytes: Buffer, format: 'sha1' | 'sha256'): string {
  return crypto.createHash(format).update(`${type} ${bytes.length}\0`).update(bytes).digest('hex');
}
