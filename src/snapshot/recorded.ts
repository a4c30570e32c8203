// What a capture records of a repository besides its files: which refs, and which local config
// keys. Capture writes them, restore and verify read the same lists, and diff compares them. A
// module of its own so that restore, verify and diff do not load capture's (~60 ms of a restore's
// start-up) for three constants.

/** Refs a snapshot records (and keeps reachable). refs/xet/* is ours and never captured. */
export const CAPTURED_REF_PATTERNS = ['refs/heads/', 'refs/tags/', 'refs/remotes/', 'refs/notes/'];
/** git xet's own refs, here or fetched from a remote (`git xet fetch`): other people's snapshots and
 * handoffs, never part of this worktree's state nor parents of its snapshot. */
export const XET_NAMESPACE_RE = /^refs\/(?:remotes\/.+\/)?xet\//;
/** Local config a restore needs to behave like the source (upstreams, line endings, file modes). */
export const CAPTURED_CONFIG_RE =
  '^(branch\\..*\\.(remote|merge|rebase|pushremote|description)|remote\\..*\\.(url|pushurl|fetch|push|tagopt|mirror)|core\\.(autocrlf|eol|safecrlf|filemode|ignorecase|precomposeunicode|symlinks|checkroundtripencoding|quotepath)|submodule\\.(active|.*\\.(url|active|branch)))$';
/** The same as a JavaScript pattern: `.` matching every character, as git's (POSIX) does, so a
 * branch named with a line or paragraph separator keeps its upstream. */
export const CAPTURED_CONFIG = new RegExp(CAPTURED_CONFIG_RE, 's');
