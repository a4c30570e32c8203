// The cache of measured runtime versions (`<git-common-dir>/xet/runtime-versions.json`): a task's
// manifest records `<command> --version`, and starting `npm` once more costs 250-450 ms of every
// npm task, so a measurement is kept and reused for the same file. docs/FORMAT.md "The manifest".
//
// "The same file" is the resolved executable's realpath with its device, inode, size and mtime
// (a replaced or rebuilt binary is measured again), and the directory and PATH it was measured with
// (a version manager's shim picks its version by the project's files and PATH). The file is ours
// but sits in a directory other processes can write: it is read with a size cap, every entry is
// checked, anything odd is ignored (measured again), and it is replaced atomically.
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const RUNTIME_VERSIONS_FILE = 'runtime-versions.json';
const SCHEMA = 'xet.runtime-versions/v1';
/** Bigger than any file this module writes (MAX_ENTRIES small entries): not ours, ignored. */
const MAX_FILE_BYTES = 256 * 1024;
const MAX_ENTRIES = 64;
const MAX_VERSION = 128;

export interface CachedVersion {
  version: string;
  measuredAt: string;
}

interface Entry extends CachedVersion {
  /** The fingerprint of the file and the context it was measured in. */
  key: string;
}

/** Where execvp would find a bare name (PATH relative to cwd), or the absolute path itself. */
export function resolveExecutable(argv0: string, cwd: string | undefined, env: NodeJS.ProcessEnv): string | null {
  const base = cwd ?? process.cwd();
  const candidates = argv0.includes('/')
    ? path.isAbsolute(argv0)
      ? [argv0]
      : []
    : (env.PATH ?? '/usr/bin:/bin').split(':').map((d) => path.resolve(base, d === '' ? '.' : d, argv0));
  for (const f of candidates) {
    try {
      if (!fs.statSync(f).isFile()) continue;
      fs.accessSync(f, fs.constants.X_OK);
      return f;
    } catch {
      // not there, or not executable: execvp looks further
    }
  }
  return null;
}

/** The cache key of an executable as it is now; null if it cannot be identified (never cached). */
export function executableKey(file: string, cwd: string | undefined, env: NodeJS.ProcessEnv): string | null {
  try {
    const real = fs.realpathSync(file);
    const st = fs.statSync(real, { bigint: true });
    if (!st.isFile()) return null;
    const parts = [real, st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs, path.resolve(cwd ?? '.'), env.PATH ?? ''];
    return crypto.createHash('sha256').update(parts.map(String).join('\0')).digest('hex');
  } catch {
    return null;
  }
}

function load(dir: string): Entry[] {
  const file = path.join(dir, RUNTIME_VERSIONS_FILE);
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch {
    return [];
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile() || st.size > MAX_FILE_BYTES) return [];
    const value = JSON.parse(fs.readFileSync(fd, 'utf8')) as { schema?: unknown; entries?: unknown };
    if (value?.schema !== SCHEMA || !Array.isArray(value.entries)) return [];
    return (value.entries as unknown[]).filter(
      (e): e is Entry =>
        typeof e === 'object' &&
        e !== null &&
        typeof (e as Entry).key === 'string' &&
        /^[0-9a-f]{64}$/.test((e as Entry).key) &&
        typeof (e as Entry).version === 'string' &&
        (e as Entry).version.length > 0 &&
        (e as Entry).version.length <= MAX_VERSION &&
        typeof (e as Entry).measuredAt === 'string' &&
        !Number.isNaN(Date.parse((e as Entry).measuredAt)),
    );
  } catch {
    return [];
  } finally {
    fs.closeSync(fd);
  }
}

export function cachedVersion(dir: string, key: string): CachedVersion | null {
  const e = load(dir).find((x) => x.key === key);
  return e ? { version: e.version, measuredAt: e.measuredAt } : null;
}

/** Best effort: a cache that cannot be written only costs the next task a measurement. */
export function rememberVersion(dir: string, key: string, v: CachedVersion): void {
  const entries = [{ key, ...v }, ...load(dir).filter((e) => e.key !== key)].slice(0, MAX_ENTRIES);
  const file = path.join(dir, RUNTIME_VERSIONS_FILE);
  const tmp = `${file}.tmp-${crypto.randomBytes(6).toString('hex')}`;
  try {
    fs.writeFileSync(tmp, `${JSON.stringify({ schema: SCHEMA, entries })}\n`, { mode: 0o600, flag: 'wx' });
    fs.renameSync(tmp, file);
  } catch {
    fs.rmSync(tmp, { force: true });
  }
}
