// Per-test temporary directories and a deterministic environment for git and the CLI.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** bin dir of git-remote-xet (compiled location: dist/test/support -> ../../../remote-helper). */
export const REMOTE_HELPER_DIR = path.resolve(__dirname, '..', '..', '..', 'remote-helper');

/** A fixed author/committer date so that commit ids are reproducible. */
export const FIXED_DATE = '@1700000000 +0000';

export interface Sandbox {
  /** Real (symlink-resolved) path of the temporary directory owned by this test. */
  readonly root: string;
  /** Temporary HOME with a .gitconfig (user.name, user.email, init.defaultBranch=main). */
  readonly home: string;
  /** Environment for every git / git-xet process started by the test. */
  readonly env: NodeJS.ProcessEnv;
  /** Absolute path inside the sandbox. */
  path(...parts: string[]): string;
  /** Removes the sandbox (unless XET_TEST_KEEP=1). */
  cleanup(): void;
}

function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    // Never let the caller's git environment (GIT_DIR, GIT_INDEX_FILE, GIT_CONFIG_*, ...) leak in.
    if (k.startsWith('GIT_')) continue;
    if (k === 'XDG_CONFIG_HOME' || k === 'HOME') continue;
    env[k] = v;
  }
  return env;
}

/** `base` defaults to the OS temp dir; fork tests use /dev/shm (the root ext4 here is slow and erratic
 * for many small files, docs/notes/forks-on-these-machines.md). */
export function createSandbox(prefix = 'xet-test-', base = os.tmpdir()): Sandbox {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(base, prefix)));
  const home = path.join(root, 'home');
  fs.mkdirSync(path.join(home, '.config'), { recursive: true });
  fs.writeFileSync(
    path.join(home, '.gitconfig'),
    [
      '[user]',
      '\tname = Xet Test',
      '\temail = xet-test@example.invalid',
      '[init]',
      '\tdefaultBranch = main',
      '[advice]',
      '\tdetachedHead = false',
      // No background auto-gc / maintenance: it would repack while a test runs or is cleaning up.
      '[gc]',
      '\tauto = 0',
      '\tautoDetach = false',
      '[maintenance]',
      '\tauto = false',
      '',
    ].join('\n'),
  );
  const env: NodeJS.ProcessEnv = {
    ...baseEnv(),
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, '.config'),
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_DATE: FIXED_DATE,
    GIT_COMMITTER_DATE: FIXED_DATE,
    GIT_EDITOR: 'true',
    GIT_SEQUENCE_EDITOR: 'true',
    GIT_MERGE_AUTOEDIT: 'no',
    GIT_TERMINAL_PROMPT: '0',
    GIT_PAGER: 'cat',
    PAGER: 'cat',
    // Repositories live strictly below root: never discover a repository above it.
    GIT_CEILING_DIRECTORIES: root,
    // git finds git-remote-xet (for xet:: URLs) the way an installed one is found: on PATH.
    PATH: `${REMOTE_HELPER_DIR}${path.delimiter}${process.env.PATH ?? ''}`,
  };
  return {
    root,
    home,
    env,
    path: (...parts: string[]) => path.join(root, ...parts),
    cleanup: () => {
      if (process.env.XET_TEST_KEEP === '1') {
        process.stderr.write(`[xet-test] keeping ${root}\n`);
        return;
      }
      fs.rmSync(root, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
    },
  };
}

/** Runs fn with a fresh sandbox and always removes it afterwards. */
export async function withSandbox<T>(fn: (sb: Sandbox) => T | Promise<T>): Promise<T> {
  const sb = createSandbox();
  try {
    return await fn(sb);
  } finally {
    sb.cleanup();
  }
}
