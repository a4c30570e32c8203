// Every typed error git xet can raise, in one place. Codes are stable API: agents match on them,
// README.md and docs/CLI.md list them. Add new codes at the end of a group; never rename one.

export const ERROR_CODES = {
  // Usage and environment
  USAGE: 'bad arguments or option values',
  NOT_A_REPOSITORY: 'not inside a Git repository',
  BARE_REPOSITORY: 'the repository has no working tree',
  GIT_FAILED: 'a git command failed unexpectedly',
  GIT_TOO_OLD: 'the installed git is older than git xet needs',
  CONFIG_INVALID: 'a git config xet.* value is invalid',
  BUSY: 'another git xet process holds the lock; retry later',
  // Capture refusals (checked before anything is written)
  UNMERGED_INDEX: 'an unmerged (conflicted) index entry names a blob the repository lacks',
  OPERATION_IN_PROGRESS: 'an operation in progress whose state git xet cannot restore faithfully',
  SUBMODULE_PRESENT: 'forks do not support snapshots with submodules or nested repositories',
  SPARSE_CHECKOUT: 'the sparse-checkout patterns file cannot be captured',
  LFS_CONTENT_MISSING: 'a Git LFS pointer is checked out without its content',
  PATH_ENCODING: 'a file name is not valid UTF-8',
  WORKTREE_CHANGED: 'a file changed while it was being captured; capture again',
  PATH_TOO_LONG: 'a path is longer than the system allows (PATH_MAX, 4096 bytes with the directory it is in)',
  // Snapshots
  SNAPSHOT_NOT_FOUND: 'no such snapshot',
  SNAPSHOT_INVALID: 'the object is not a valid git xet snapshot',
  SCHEMA_UNSUPPORTED: 'the format version is newer than this git xet understands',
  // Restore and verify
  TARGET_NOT_EMPTY: 'the target directory exists and is not empty',
  TARGET_UNUSABLE: 'the target directory cannot be created or replaced',
  PATH_ESCAPE: 'a snapshot path would land outside the target directory',
  PATH_CONFLICT: 'two snapshot paths collide',
  RESTORE_INCOMPLETE: 'the directory holds a restore that did not finish',
  OPERATION_RUNS_COMMANDS: "the snapshot's rebase todo has exec lines; restore with --allow-exec to keep them",
  // Forks
  FORK_NOT_FOUND: 'the directory is not a registered fork of this repository',
  FORK_MODE_UNAVAILABLE: 'the requested fork mode cannot work here (no mount permission, no reflink)',
  FORK_BUSY: 'the fork is in use (a process has a file or its working directory in it)',
  FORK_BROKEN: "the fork's overlay layers are missing or unusable",
  DISK_FULL: 'no space left on the filesystem; nothing was kept half written',
  BRANCH_EXISTS: 'the branch exists; pass --force to move it',
  WORK_NOT_KEPT: 'discarding would lose files the capture left out (secrets, unsupported files)',
  // Handoffs and publication
  HANDOFF_NOT_FOUND: 'no such handoff',
  HANDOFF_INVALID: 'the handoff descriptor breaks the xet.handoff/v1 schema or its limits',
  INTEGRITY_MISMATCH: 'bytes do not hash to the id that names them (descriptor, manifest, pack or state)',
  REF_IMMUTABLE: 'the ref is create-once (handoffs, snapshots) and already exists with other content',
  STORE_UNAVAILABLE: 'the xet store is missing, unreadable or read-only',
  PUSH_REJECTED: 'the remote refused one or more refs',
  OUTCOME_UNKNOWN: 'whether an earlier push was published cannot be established',
  REMOTE_UNAVAILABLE: 'the remote (a path or URL) cannot be reached: no repository there, or no connection',
  REQUEST_ID_REUSED: 'the request id was already used for a handoff with different inputs',
  // Durable roots and garbage collection
  SNAPSHOT_RETAINED: 'the snapshot is still a root (pinned, a live fork, an unexpired handoff); details name it',
  NOT_PINNED: 'the snapshot has no pin',
  SNAPSHOT_RECLAIMED: 'the snapshot was dropped and the collector has reclaimed its objects',
  FORK_NOT_EXCLUSIVE: 'nothing keeps writers out of this fork until reclaim completes (clone and copy forks)',
  SIDECAR_UNREADABLE: 'the sidecar database is corrupt or unreadable; git xet fsck --rebuild rebuilds it',
  // Tasks and guards
  TASK_NOT_FOUND: 'no such task',
  WORKDIR_BUSY: "another task holds this workspace's writer lease",
  WORKDIR_RECOVERY_REQUIRED: 'a task runner died while it could write this workspace; run git xet task recover',
  TASK_TIMED_OUT: 'the task reached its deadline: its processes were ended and its workspace captured',
  TASK_CANCELLED: 'the task was cancelled: its processes were ended and its workspace captured',
  TASK_INTERRUPTED: 'the task runner died; reconciliation found the command gone',
  TASK_NOT_RESUMABLE: 'the task declared no session id, or its session cannot be continued',
  RESULT_TOO_LARGE: 'the result is over 8 MiB; it was not kept (the workspace capture still stands)',
  RESULT_NOT_UTF8: 'the result is not valid UTF-8; it was not kept',
  RESULT_NOT_AVAILABLE: 'the task has no result (not ended, refused, or collected)',
  HOOK_CONFLICT: 'a hook cannot be installed or removed without losing what is there',
  // storage allowance (issue 11)
  ALLOWANCE_EXCEEDED: 'the operation would take a root past its storage allowance; nothing was written',
  // The agents' interface and signed handoffs (issue 12)
  ARGUMENT_NOT_ALLOWED:
    "an MCP argument names a path outside the server's repository and roots, or starts with '-' where git would read an option",
  CANCELLED: 'the caller cancelled the call; it was stopped with nothing half written',
  HANDOFF_UNTRUSTED: 'the handoff has no valid signature from an allowed (or the required) signer',
  SIGNING_FAILED: 'the handoff could not be signed: no signing key configured, or the signing program failed',
  // Large files: chunks and range reads (issue 13)
  CHUNK_MISSING: 'a chunk of a chunked file is not in the repository and no remote supplied it',
  RANGE_NOT_SATISFIABLE: 'the byte range starts past the end of the file',
  LAZY_DEFERRED: 'the worktree is a lazy restore whose chunked files are not written yet; git xet hydrate them first',
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Process exit codes; documented in docs/CLI.md. */
export const EXIT = {
  OK: 0,
  DIFFERENT: 1, // verify/diff found differences: a result, not a failure
  USAGE: 2,
  ERROR: 3, // any XetError
  INTERNAL: 70, // a bug: anything that is not a XetError
} as const;

export class XetError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'XetError';
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: ErrorCode; message: string; details: Record<string, unknown> } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export function isXetError(e: unknown, code?: ErrorCode): e is XetError {
  return e instanceof XetError && (code === undefined || e.code === code);
}
