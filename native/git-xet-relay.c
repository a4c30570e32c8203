/*
 * git-xet-relay: the thin client without node. `git xet capture|fork|push|handoff create …` is
 * handed whole to the worktree's running daemon, as src/daemon/relay.ts does, by a process that
 * starts in about a millisecond where node takes 100 ms or more on these machines. bin/git-xet (a
 * shell script that is also the CLI's JavaScript entry) runs it as `git-xet-relay <that script>
 * <args>` when it was built.
 *
 * It relays only what it can tell is a line relay.ts would relay, with a request byte for byte the
 * one relay.ts would send (the daemon compares the build and the environment as strings). Anything
 * else, or any doubt (a byte that is not UTF-8, a .git file it does not read as git's simplest form,
 * a socket path too long, a daemon refusing its build or environment, which node computes for
 * itself), runs `node <script> <args>`: the CLI as it always was, which decides again. When it
 * reached the daemon and the daemon did not run the line for another reason (no acknowledgement in
 * time, a line refused as late, a dropped connection), the CLI is told so (GIT_XET_DAEMON_TRIED=1)
 * and does not ask the daemon again. The reply is read as node reads it: decoded as UTF-8 with
 * U+FFFD for what is not, then JSON, with JavaScript's truthiness and Number.isInteger where
 * relay.ts applies them.
 *
 * Kept in step with src/daemon/relay.ts (relayedCommand, relayCli), src/daemon/client.ts
 * (sendToDaemon, ACCEPT_WITHIN_MS) and src/daemon/locate.ts (locateDaemon, gitEnvPrint, buildId).
 * test/relay-native.test.ts runs both clients on the same lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>


extern char **environ;

/* What try_relay returns besides an exit code (0..255). */
#define NOT_MINE -1 /* not decided here: the CLI decides, and may ask the daemon itself */
#define TRIED -2    /* the daemon was asked and did not run the line: the CLI runs it, asking nobody */
#define TOO_LARGE -3 /* the daemon ran the line and its reply is larger than this client reads */

/* client.ts: ACCEPT_WITHIN_MS, and the margin it waits beyond it for the acknowledgement. */
#define ACCEPT_WITHIN_MS 2000
#define ACCEPT_MARGIN_MS 1000
/* A reply larger than this is not one the daemon sends (its output is a command's): not trusted. */
#define MAX_REPLY (256u << 20)

/* ---- a growing byte buffer ---- */

struct buf {
  char *p;
  size_t n, cap;
  int failed;
};

static void put(struct buf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->failed = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void puts_(struct buf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(struct buf *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) b->failed = 1;
  else put(b, tmp, (size_t)n);
}

/* ---- UTF-8 and JSON, as node's decoder and JSON.stringify see them ---- */

/* Whether s[0..n) is well-formed UTF-8 (no surrogates, no overlong forms): node decodes anything
 * else with U+FFFD, which this client does not try to reproduce. */
static int valid_utf8(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (i + len > n) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    i += len;
  }
  return 1;
}

/* JSON.stringify of a string that is valid UTF-8: quotes, backslash and the C0 controls escaped
 * (the short forms where JSON has them, else \u00xx in lower case), every other byte as it is. */
static void put_json_string(struct buf *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  puts_(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    switch (c) {
      case '"': puts_(b, "\\\""); break;
      case '\\': puts_(b, "\\\\"); break;
      case '\b': puts_(b, "\\b"); break;
      case '\f': puts_(b, "\\f"); break;
      case '\n': puts_(b, "\\n"); break;
      case '\r': puts_(b, "\\r"); break;
      case '\t': puts_(b, "\\t"); break;
      default:
        if (c < 0x20) {
          char e[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
          puts_(b, e);
        } else {
          put(b, (const char *)p, 1);
        }
    }
  }
  puts_(b, "\"");
}

/* Reads a whole file (at most `max` bytes) into b: 0, or -1. */
static int read_file(const char *path, struct buf *b, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || b->n + (size_t)n > max) {
      close(fd);
      return -1;
    }
    if (n == 0) break;
    put(b, chunk, (size_t)n);
  }
  close(fd);
  put(b, "", 0);
  return b->failed ? -1 : 0;
}

/* ---- relay.ts relayedCommand ---- */

static int is_global_flag(const char *a) { return !strcmp(a, "--json") || !strcmp(a, "-q") || !strcmp(a, "--quiet"); }

static int is_not_relayed(const char *a) {
  return !strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "-V") || !strcmp(a, "--version") || !strcmp(a, "help");
}

/* 1 when the line is one relay.ts relays; 0 when it is not or when this client cannot tell. */
static int relayed_command(int argc, char **argv) {
  int i = 0;
  while (i < argc && is_global_flag(argv[i])) i++;
  if (i >= argc) return 0;
  const char *word = argv[i];
  int fork = !strcmp(word, "fork");
  int handoff_create = !strcmp(word, "handoff") && i + 1 < argc && !strcmp(argv[i + 1], "create");
  if (!fork && !handoff_create && strcmp(word, "capture") && strcmp(word, "push")) return 0;
  for (int k = 0; k < argc; k++) {
    const char *a = argv[k];
    if (is_not_relayed(a)) return 0;
    /* Not UTF-8 (node would have read U+FFFD), or U+FFFD itself: relay.ts leaves both to the CLI. */
    if (!valid_utf8((const unsigned char *)a, strlen(a)) || strstr(a, "\xef\xbf\xbd")) return 0;
    if (fork && (!strcmp(a, "--remount") || !strncmp(a, "--remount=", 10))) return 0;
  }
  return 1;
}

/* ---- locate.ts locateDaemon ---- */

/* path.resolve(base, rel) for an absolute base: rel joined on unless absolute, then `.`, `..` and
 * empty segments taken out lexically, as node's path module does. */
static char *resolve_path(const char *base, const char *rel) {
  struct buf in = {0};
  if (rel[0] != '/') {
    puts_(&in, base);
    puts_(&in, "/");
  }
  puts_(&in, rel);
  if (in.failed) return NULL;
  char *out = malloc(in.n + 2);
  if (!out) {
    free(in.p);
    return NULL;
  }
  size_t o = 0;
  char *save = NULL;
  for (char *seg = strtok_r(in.p, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
    if (!strcmp(seg, ".")) continue;
    if (!strcmp(seg, "..")) {
      while (o > 0 && out[o - 1] != '/') o--;
      if (o > 0) o--;
      continue;
    }
    out[o++] = '/';
    size_t l = strlen(seg);
    memcpy(out + o, seg, l);
    o += l;
  }
  if (o == 0) out[o++] = '/';
  out[o] = 0;
  free(in.p);
  return out;
}

/* The length of the JavaScript white space or line terminator (what String#trim removes) that
 * s[0..n) begins with, 0 if none; with `last`, the one it ends with. */
static size_t js_space(const unsigned char *s, size_t n, int last) {
  static const unsigned spaces[] = {0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0xa0, 0x1680, 0x2000, 0x2001,
                                    0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009,
                                    0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff};
  if (!n) return 0;
  size_t at = 0, len = 1;
  if (last) {
    at = n - 1;
    while (at > 0 && (s[at] & 0xc0) == 0x80 && n - at < 4) at--;
    len = n - at;
  } else if (s[0] >= 0xc0) {
    len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
    if (len > n) return 0;
  }
  unsigned cp = s[at];
  if (len == 2) cp = (s[at] & 0x1fu) << 6 | (s[at + 1] & 0x3fu);
  if (len == 3) cp = (s[at] & 0x0fu) << 12 | (s[at + 1] & 0x3fu) << 6 | (s[at + 2] & 0x3fu);
  if (len == 4) return 0; /* nothing above U+FFFF is white space */
  for (size_t i = 0; i < sizeof spaces / sizeof *spaces; i++)
    if (spaces[i] == cp) return len;
  return 0;
}

/* The git directory named by a `.git` file, or NULL when there is none or this client does not
 * read the file for certain the way relay.ts's regular expression (/^gitdir: (.+)$/m, then
 * trim()) does. */
static char *gitdir_of_file(const char *dir, const char *dotgit) {
  struct buf text = {0};
  if (read_file(dotgit, &text, 1u << 20) != 0) {
    free(text.p);
    return NULL;
  }
  size_t n = text.n;
  char *t = text.p;
  char *found = NULL;
  /* Other line ends (\r, U+2028, U+2029), a NUL or bytes that are not UTF-8: left to the CLI. */
  if (memchr(t, 0, n) || memchr(t, '\r', n) || strstr(t, "\xe2\x80\xa8") || strstr(t, "\xe2\x80\xa9") ||
      !valid_utf8((unsigned char *)t, n))
    goto done;
  for (char *line = t; line && *line;) {
    char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > 8 && !strncmp(line, "gitdir: ", 8)) {
      unsigned char *v = (unsigned char *)line + 8;
      size_t vl = len - 8, k;
      while ((k = js_space(v, vl, 0))) v += k, vl -= k;
      while ((k = js_space(v, vl, 1))) vl -= k;
      v[vl] = 0;
      found = resolve_path(dir, (char *)v);
      goto done;
    }
    line = end ? end + 1 : NULL;
  }
done:
  free(text.p);
  return found;
}

/* The git directory of the worktree holding cwd, or NULL (none found, or not decided here). */
static char *locate_git_dir(const char *cwd) {
  char *d = strdup(cwd);
  if (!d) return NULL;
  for (;;) {
    struct buf dot = {0};
    puts_(&dot, strcmp(d, "/") ? d : "");
    puts_(&dot, "/.git");
    if (dot.failed) break;
    struct stat st;
    int here = lstat(dot.p, &st) == 0;
    if (here && S_ISDIR(st.st_mode)) {
      free(d);
      return dot.p;
    }
    if (here && S_ISREG(st.st_mode)) {
      char *g = gitdir_of_file(d, dot.p);
      free(dot.p);
      free(d);
      return g;
    }
    free(dot.p);
    if (!strcmp(d, "/")) break;
    char *slash = strrchr(d, '/');
    if (slash == d) d[1] = 0;
    else *slash = 0;
  }
  free(d);
  return NULL;
}

/* ---- locate.ts gitEnvPrint and buildId ---- */

static int wanted_env(const char *k, size_t n) {
  if (n >= 4 && !strncmp(k, "GIT_", 4)) {
    if (n == 16 && !strncmp(k, "GIT_XET_PROGRESS", 16)) return 0;
    if (n >= 9 && !strncmp(k, "GIT_TRACE", 9)) return 0;
    return 1;
  }
  if (n >= 4 && !strncmp(k, "XET_", 4)) return 1;
  static const char *also[] = {"HOME", "XDG_CONFIG_HOME", "TZ", "TZDIR"};
  for (size_t i = 0; i < sizeof also / sizeof *also; i++)
    if (strlen(also[i]) == n && !strncmp(k, also[i], n)) return 1;
  return 0;
}

static int by_key(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  /* Keys are ASCII here (checked), where byte order is JavaScript's sort order. */
  size_t lx = strcspn(x, "="), ly = strcspn(y, "=");
  int c = memcmp(x, y, lx < ly ? lx : ly);
  return c ? c : (lx < ly ? -1 : lx > ly);
}

/* gitEnvPrint() into b: 0, or -1 when an entry is one this client cannot print as node would. */
static int env_print(struct buf *b) {
  size_t count = 0, cap = 0;
  for (char **e = environ; *e; e++) cap++;
  const char **keep = calloc(cap + 1, sizeof *keep);
  if (!keep) return -1;
  for (char **e = environ; *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || eq == *e) continue;
    size_t kl = (size_t)(eq - *e);
    for (size_t i = 0; i < kl; i++)
      if ((unsigned char)(*e)[i] >= 0x80) {
        free(keep);
        return -1;
      }
    if (!wanted_env(*e, kl)) continue;
    if (!valid_utf8((const unsigned char *)eq + 1, strlen(eq + 1))) {
      free(keep);
      return -1;
    }
    keep[count++] = *e;
  }
  qsort(keep, count, sizeof *keep, by_key);
  for (size_t i = 1; i < count; i++)
    if (!by_key(&keep[i - 1], &keep[i])) { /* a name twice: which one node keeps is not ours to guess */
      free(keep);
      return -1;
    }
  puts_(b, "[");
  for (size_t i = 0; i < count; i++) {
    const char *eq = strchr(keep[i], '=');
    char key[256];
    size_t kl = (size_t)(eq - keep[i]);
    if (kl >= sizeof key) {
      free(keep);
      return -1;
    }
    memcpy(key, keep[i], kl);
    key[kl] = 0;
    puts_(b, "[");
    put_json_string(b, key);
    puts_(b, ",");
    put_json_string(b, eq + 1);
    puts_(b, "],");
  }
  mode_t mask = umask(0);
  umask(mask);
  putf(b, "[\"umask\",%u]]", (unsigned)mask);
  free(keep);
  return b->failed ? -1 : 0;
}

/* ---- JSON as JSON.parse reads it, on text node's UTF-8 decoder made ---- */

/* Bytes as node's UTF-8 decoder turns them into a string, back in UTF-8: each maximal ill-formed
 * subpart becomes U+FFFD (the WHATWG decoder, which node's socket decoding follows). */
static void decode_utf8_lossy(const unsigned char *s, size_t n, struct buf *out) {
  static const char fffd[] = "\xef\xbf\xbd";
  size_t i = 0;
  while (i < n && !out->failed) {
    unsigned char c = s[i];
    if (c < 0x80) {
      size_t run = i;
      while (i < n && s[i] < 0x80) i++;
      put(out, (const char *)s + run, i - run);
      continue;
    }
    unsigned need, lower = 0x80, upper = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c == 0xe0) need = 2, lower = 0xa0;
    else if (c == 0xed) need = 2, upper = 0x9f;
    else if (c >= 0xe1 && c <= 0xef) need = 2;
    else if (c == 0xf0) need = 3, lower = 0x90;
    else if (c == 0xf4) need = 3, upper = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3) need = 3;
    else {
      put(out, fffd, 3);
      i++;
      continue;
    }
    size_t j = i + 1;
    unsigned k = 0;
    for (; k < need; k++, j++) {
      if (j >= n || s[j] < lower || s[j] > upper) break;
      lower = 0x80, upper = 0xbf;
    }
    if (k < need) {
      put(out, fffd, 3); /* the subpart read so far; the byte that broke it is read again */
      i = j;
      continue;
    }
    put(out, (const char *)s + i, j - i);
    i = j;
  }
}

struct json {
  const char *p, *end;
  int bad;
};

static void ws(struct json *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    *v <<= 4;
    if (c >= '0' && c <= '9') *v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') *v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') *v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  return 1;
}

static void put_code_point(struct buf *b, unsigned cp) {
  char u[4];
  if (cp < 0x80) u[0] = (char)cp, put(b, u, 1);
  else if (cp < 0x800) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), put(b, u, 2);
  else if (cp < 0x10000)
    u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[2] = (char)(0x80 | (cp & 0x3f)),
    put(b, u, 3);
  else
    u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), put(b, u, 4);
}

/* A JSON string at j->p (the text is well-formed UTF-8), into out (when not NULL) as the UTF-8 bytes
 * node would write for it: a lone surrogate becomes U+FFFD, as node's UTF-8 encoder makes it. */
static void json_string(struct json *j, struct buf *out) {
  if (j->p >= j->end || *j->p != '"') {
    j->bad = 1;
    return;
  }
  j->p++;
  struct buf sink = {0};
  struct buf *o = out ? out : &sink;
  while (!j->bad) {
    if (j->p >= j->end) {
      j->bad = 1;
      break;
    }
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      break;
    }
    if (c < 0x20) {
      j->bad = 1;
      break;
    }
    if (c != '\\') {
      const char *run = j->p;
      while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) j->p++;
      if (out) put(o, run, (size_t)(j->p - run));
      continue;
    }
    if (j->end - j->p < 2) {
      j->bad = 1;
      break;
    }
    char e = j->p[1];
    j->p += 2;
    switch (e) {
      case '"': puts_(o, "\""); break;
      case '\\': puts_(o, "\\"); break;
      case '/': puts_(o, "/"); break;
      case 'b': puts_(o, "\b"); break;
      case 'f': puts_(o, "\f"); break;
      case 'n': puts_(o, "\n"); break;
      case 'r': puts_(o, "\r"); break;
      case 't': puts_(o, "\t"); break;
      case 'u': {
        unsigned u, lo;
        if (j->end - j->p < 4 || !hex4(j->p, &u)) {
          j->bad = 1;
          break;
        }
        j->p += 4;
        if (u >= 0xd800 && u <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' &&
            hex4(j->p + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
          j->p += 6;
          put_code_point(o, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
        } else if (u >= 0xd800 && u <= 0xdfff) {
          put_code_point(o, 0xfffd);
        } else {
          put_code_point(o, u);
        }
        break;
      }
      default: j->bad = 1;
    }
    if (!out) sink.n = 0; /* skipped, not kept */
  }
  free(sink.p);
  if (o->failed) j->bad = 1;
}

/* A JSON number at j->p: its value in *v. */
static void json_number(struct json *j, double *v) {
  const char *s = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p < j->end && *j->p == '0') j->p++;
  else if (j->p < j->end && *j->p >= '1' && *j->p <= '9')
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  else j->bad = 1;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') j->bad = 1;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') j->bad = 1;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  if (j->bad) return;
  char tmp[64];
  size_t len = (size_t)(j->p - s);
  if (len >= sizeof tmp) { /* a long literal: its value, as strtod reads it from a copy */
    char *copy = strndup(s, len);
    if (!copy) {
      j->bad = 1;
      return;
    }
    *v = strtod(copy, NULL);
    free(copy);
    return;
  }
  memcpy(tmp, s, len);
  tmp[len] = 0;
  *v = strtod(tmp, NULL);
}

/* The kinds of value JSON has, and what a member's reader learns of one. */
enum kind { K_NONE, K_STRING, K_NUMBER, K_TRUE, K_FALSE, K_NULL, K_OBJECT, K_ARRAY };

struct value {
  enum kind kind;
  double number;
  struct buf *text; /* where a string goes, when the reader wants it */
};

/* A scalar (string, number, true, false, null) at j->p: its kind, its number into *number and a
 * string into text (when not NULL; NULL skips it). */
static enum kind json_scalar(struct json *j, double *number, struct buf *text) {
  char c = *j->p;
  if (c == '"') {
    if (text) {
      text->n = 0;
      put(text, "", 0);
    }
    json_string(j, text);
    return K_STRING;
  }
  if (j->end - j->p >= 4 && !strncmp(j->p, "true", 4)) return j->p += 4, K_TRUE;
  if (j->end - j->p >= 5 && !strncmp(j->p, "false", 5)) return j->p += 5, K_FALSE;
  if (j->end - j->p >= 4 && !strncmp(j->p, "null", 4)) return j->p += 4, K_NULL;
  if (c == '-' || (c >= '0' && c <= '9')) return json_number(j, number), K_NUMBER;
  j->bad = 1;
  return K_NONE;
}

/* Any value at j->p, skipped and checked without recursion: JSON.parse takes any nesting, and a
 * reply this client refused after the daemon took the line would be run again by node. */
static void json_skip(struct json *j) {
  enum { VALUE, VALUE_OR_END, KEY, KEY_OR_END, AFTER } state = VALUE;
  struct buf open = {0}; /* the containers entered, '{' or '[' */
  for (;;) {
    ws(j);
    if (j->p >= j->end) {
      j->bad = 1;
      break;
    }
    char c = *j->p;
    if (state == VALUE_OR_END && c == ']') {
      j->p++, open.n--, state = AFTER;
    } else if (state == VALUE || state == VALUE_OR_END) {
      if (c == '{' || c == '[') {
        put(&open, &c, 1);
        j->p++;
        state = c == '{' ? KEY_OR_END : VALUE_OR_END;
      } else {
        double ignored;
        json_scalar(j, &ignored, NULL);
        state = AFTER;
      }
    } else if (state == KEY_OR_END && c == '}') {
      j->p++, open.n--, state = AFTER;
    } else if (state == KEY || state == KEY_OR_END) {
      json_string(j, NULL);
      ws(j);
      if (j->p >= j->end || *j->p != ':') j->bad = 1;
      else j->p++, state = VALUE;
    } else if (c == ',') {
      j->p++;
      state = open.p[open.n - 1] == '{' ? KEY : VALUE;
    } else if (c == (open.p[open.n - 1] == '{' ? '}' : ']')) {
      j->p++, open.n--, state = AFTER;
    } else {
      j->bad = 1;
    }
    if (j->bad || open.failed || (state == AFTER && open.n == 0)) break;
  }
  if (open.failed) j->bad = 1;
  free(open.p);
}

typedef void (*member_fn)(struct json *j, const struct buf *key, void *ctx);

static void json_value(struct json *j, struct value *v, member_fn fn, void *ctx);

/* An object's members, each handed to fn (which reads its value), or skipped when fn is NULL. */
static void json_members(struct json *j, member_fn fn, void *ctx) {
  j->p++; /* the '{' */
  ws(j);
  if (j->p < j->end && *j->p == '}') {
    j->p++;
    return;
  }
  struct buf key = {0};
  while (!j->bad) {
    ws(j);
    key.n = 0;
    put(&key, "", 0);
    json_string(j, &key);
    ws(j);
    if (j->bad || j->p >= j->end || *j->p != ':') {
      j->bad = 1;
      break;
    }
    j->p++;
    ws(j);
    if (fn) fn(j, &key, ctx);
    else json_skip(j);
    ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == '}') {
      j->p++;
      break;
    }
    j->bad = 1;
  }
  free(key.p);
}

/* Any value; v (when not NULL) learns its kind, its number, its string (into v->text); an object's
 * members go to fn. Only objects read through fn recurse (the reply and its result: two levels). */
static void json_value(struct json *j, struct value *v, member_fn fn, void *ctx) {
  ws(j);
  if (j->p >= j->end) {
    j->bad = 1;
    return;
  }
  char c = *j->p;
  if (!v && !(fn && c == '{')) {
    json_skip(j);
    return;
  }
  struct value ignored = {0};
  if (!v) v = &ignored;
  if (c == '{' && fn) {
    v->kind = K_OBJECT;
    json_members(j, fn, ctx);
  } else if (c == '{' || c == '[') {
    v->kind = c == '{' ? K_OBJECT : K_ARRAY;
    json_skip(j);
  } else {
    v->kind = json_scalar(j, &v->number, v->text);
  }
}

/* Whether a key is exactly `name` (a decoded key may hold a NUL: compared with its length). */
static int key_is(const struct buf *key, const char *name) {
  size_t n = strlen(name);
  return key->n == n && !memcmp(key->p, name, n);
}

/* JavaScript's truthiness of a JSON value (what `!reply.ok` tests). */
static int truthy(const struct value *v) {
  switch (v->kind) {
    case K_TRUE: case K_OBJECT: case K_ARRAY: return 1;
    case K_NUMBER: return v->number != 0;
    case K_STRING: return v->text ? v->text->n > 0 : 1;
    default: return 0;
  }
}

struct reply {
  int ok;       /* reply.ok, truthy */
  int accepted; /* reply.accepted === true */
  int refused_here; /* refused: "version" or "environment": this client's print, not node's, may differ */
  int has_result;   /* result is what relay.ts isRelayedRun accepts */
  int exit_code;
  struct buf out, err, text;
};

static void reply_free(struct reply *r) {
  free(r->out.p);
  free(r->err.p);
  free(r->text.p);
  memset(r, 0, sizeof *r);
}

struct result_read {
  struct reply *r;
  int code, has_out, has_err;
};

static void result_member(struct json *j, const struct buf *key, void *ctx) {
  struct result_read *rr = ctx;
  struct value v = {0};
  if (key_is(key, "exitCode")) {
    json_value(j, &v, NULL, NULL);
    /* Number.isInteger(x) && x >= 0 && x < 256 */
    rr->code = v.kind == K_NUMBER && v.number >= 0 && v.number < 256 && v.number == (double)(int)v.number
                   ? (int)v.number
                   : -1;
  } else if (key_is(key, "stdout") || key_is(key, "stderr")) {
    int is_out = key->p[3] == 'o';
    struct buf *o = is_out ? &rr->r->out : &rr->r->err;
    v.text = o;
    json_value(j, &v, NULL, NULL);
    if (is_out) rr->has_out = v.kind == K_STRING;
    else rr->has_err = v.kind == K_STRING;
  } else {
    json_value(j, NULL, NULL, NULL);
  }
}

static void reply_member(struct json *j, const struct buf *key, void *ctx) {
  struct reply *r = ctx;
  struct value v = {.text = &r->text};
  if (key_is(key, "ok")) {
    json_value(j, &v, NULL, NULL);
    r->ok = truthy(&v);
  } else if (key_is(key, "accepted")) {
    json_value(j, &v, NULL, NULL);
    r->accepted = v.kind == K_TRUE;
  } else if (key_is(key, "refused")) {
    json_value(j, &v, NULL, NULL);
    r->refused_here = v.kind == K_STRING && (key_is(&r->text, "version") || key_is(&r->text, "environment"));
  } else if (key_is(key, "result")) {
    struct result_read rr = {r, -1, 0, 0};
    ws(j);
    int object = j->p < j->end && *j->p == '{';
    json_value(j, NULL, object ? result_member : NULL, &rr);
    r->has_result = object && rr.code >= 0 && rr.has_out && rr.has_err;
    r->exit_code = rr.code;
  } else {
    json_value(j, NULL, NULL, NULL);
  }
}

/* One line of the daemon's, as client.ts reads it (decoded as UTF-8, then JSON.parse): 0 when it
 * is a JSON object (read into r), -1 otherwise (JSON.parse would throw, or it is not an object). */
static int parse_reply(const char *line, size_t n, struct reply *r) {
  struct buf text = {0};
  decode_utf8_lossy((const unsigned char *)line, n, &text);
  put(&text, "", 0);
  if (text.failed) {
    free(text.p);
    return -1;
  }
  struct json j = {text.p, text.p + text.n, 0};
  ws(&j);
  int object = j.p < j.end && *j.p == '{';
  json_value(&j, NULL, object ? reply_member : NULL, r);
  ws(&j);
  int ok = !j.bad && j.p == j.end && object;
  free(text.p);
  return ok ? 0 : -1;
}

/* The string member `name` of the JSON object in text[0..n) (the last one, as JSON.parse keeps),
 * into out: 0, or -1 when the text is not such an object. */
struct find_read {
  const char *name;
  struct buf *out;
  int found;
};

static void find_member(struct json *j, const struct buf *key, void *ctx) {
  struct find_read *f = ctx;
  if (!key_is(key, f->name)) {
    json_value(j, NULL, NULL, NULL);
    return;
  }
  struct value v = {.text = f->out};
  json_value(j, &v, NULL, NULL);
  f->found = v.kind == K_STRING;
}

static int json_string_member(const char *text, size_t n, const char *name, struct buf *out) {
  struct json j = {text, text + n, 0};
  ws(&j);
  if (j.p >= j.end || *j.p != '{') return -1;
  struct find_read f = {name, out, 0};
  json_value(&j, NULL, find_member, &f);
  ws(&j);
  return !j.bad && j.p == j.end && f.found && !out->failed ? 0 : -1;
}

/* ---- locate.ts buildId ---- */

/* TOOL_VERSION (src/version.ts): the version in the package.json next to the build, read as
 * require() reads it (relative to the real path of dist/src/version.js, a BOM dropped). */
static int tool_version(const char *daemon_dir, struct buf *out) {
  struct buf v = {0}, pkg = {0};
  put(out, "", 0); /* an empty version is a version: out->p is a string in every case */
  puts_(&v, daemon_dir);
  puts_(&v, "/../version.js");
  char real[PATH_MAX];
  int ok = !v.failed && realpath(v.p, real) != NULL;
  free(v.p);
  if (!ok) return -1;
  *strrchr(real, '/') = 0;
  puts_(&pkg, real);
  puts_(&pkg, "/../../package.json");
  struct buf text = {0};
  ok = !pkg.failed && read_file(pkg.p, &text, 1u << 24) == 0;
  free(pkg.p);
  if (ok) {
    const char *t = text.p;
    size_t n = text.n;
    if (n >= 3 && !memcmp(t, "\xef\xbb\xbf", 3)) t += 3, n -= 3;
    struct buf decoded = {0};
    decode_utf8_lossy((const unsigned char *)t, n, &decoded);
    ok = !decoded.failed && json_string_member(decoded.p ? decoded.p : "", decoded.n, "version", out) == 0;
    free(decoded.p);
  }
  free(text.p);
  /* A NUL in it would end the id early here: node's would not. */
  return ok && strlen(out->p) == out->n ? 0 : -1;
}

/* buildId(): the version, the directory of the client's module (dist/src/daemon, resolved as node
 * resolves a module's path) and the capture module's mtime in nanoseconds. */
static int build_id(struct buf *b, const char *script) {
  struct buf rel = {0};
  const char *slash = strrchr(script, '/');
  if (!slash) return -1;
  put(&rel, script, (size_t)(slash - script));
  puts_(&rel, "/../dist/src/daemon/relay.js");
  if (rel.failed) return -1;
  char real[PATH_MAX];
  int ok = realpath(rel.p, real) != NULL;
  free(rel.p);
  if (!ok) return -1;
  *strrchr(real, '/') = 0;
  if (!valid_utf8((unsigned char *)real, strlen(real))) return -1;
  struct buf version = {0};
  if (tool_version(real, &version) != 0) {
    free(version.p);
    return -1;
  }
  struct buf cap = {0};
  puts_(&cap, real);
  puts_(&cap, "/../snapshot/capture.js");
  if (cap.failed) return -1;
  struct stat st;
  long long ns = 0;
  if (stat(cap.p, &st) == 0) ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  free(cap.p);
  put(b, version.p, version.n);
  free(version.p);
  puts_(b, " ");
  puts_(b, real);
  putf(b, " %lld", ns);
  return b->failed ? -1 : 0;
}

/* ---- the exchange ---- */

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Writes all of p to fd, waiting when the descriptor it inherited is non-blocking (as node's
 * stream writes wait). */
static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      if (poll(&pf, 1, -1) < 0 && errno != EINTR) return -1;
      continue;
    }
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads what the (non-blocking) socket has into in: 1 (data, or none yet), 0 at its end, -1 on an
 * error, -2 for a reply too large. */
static int read_some(int fd, struct buf *in) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
    if (n <= 0) return n == 0 ? 0 : -1;
    put(in, chunk, (size_t)n);
    if (in->failed || in->n > MAX_REPLY) return -2;
  }
}

/* Sends the request and takes the reply (client.ts sendToDaemon with `accept`): the command's exit
 * code after printing its output, or TRIED. The daemon acknowledges a command before running it;
 * without that within ACCEPT_WITHIN_MS and the margin, the line is given up (the daemon refuses it
 * once its deadline has passed, so it will not run it later). */
static int exchange(int fd, const struct buf *req) {
  long long give_up = now_ms() + ACCEPT_WITHIN_MS + ACCEPT_MARGIN_MS;
  for (size_t sent = 0; sent < req->n;) {
    ssize_t w = write(fd, req->p + sent, req->n - sent);
    if (w > 0) {
      sent += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      long long left = give_up - now_ms();
      struct pollfd p = {fd, POLLOUT, 0};
      if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR)) return TRIED;
      continue;
    }
    return TRIED;
  }
  struct buf in = {0};
  size_t taken = 0;
  int acknowledged = 0, ended = 0, result = TRIED;
  for (;;) {
    /* Every whole line read so far, in order, as client.ts takes them. */
    char *nl;
    while (in.p && (nl = memchr(in.p + taken, '\n', in.n - taken))) {
      struct reply r = {0};
      size_t len = (size_t)(nl - (in.p + taken));
      int parsed = parse_reply(in.p + taken, len, &r);
      taken += len + 1;
      if (parsed == 0 && r.accepted && !acknowledged) {
        acknowledged = 1;
        reply_free(&r);
        continue;
      }
      if (parsed == 0 && !r.ok && r.refused_here) {
        /* Refused for its build or environment before running it: node's own print may be the
         * daemon's where this client's is not (node asks again, at once). */
        result = NOT_MINE;
      } else if (parsed == 0 && r.ok && r.has_result) {
        /* As relay.ts: both streams written, then the exit code; a reader gone is not an error. */
        write_all(1, r.out.p ? r.out.p : "", r.out.n);
        write_all(2, r.err.p ? r.err.p : "", r.err.n);
        result = r.exit_code;
      }
      reply_free(&r);
      goto done;
    }
    if (ended) goto done;
    int timeout = -1;
    if (!acknowledged) {
      long long left = give_up - now_ms();
      timeout = left > 0 ? (int)left : 0;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int ready = poll(&p, 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) goto done;
    /* On a time-out too: what arrived while this process was stopped (Ctrl-Z) is read first, as
     * client.ts decides only after its next poll. */
    int got = read_some(fd, &in);
    /* Too large once the daemon took the line: it ran it, so the CLI must not run it again (node's
     * client would fail on the string, too). */
    if (got == -2 && acknowledged) result = TOO_LARGE;
    if (got < 0) goto done;
    if (got == 0) ended = 1;
    if (ready == 0 && !acknowledged && !(in.p && memchr(in.p + taken, '\n', in.n - taken))) goto done;
  }
done:
  free(in.p);
  return result;
}

static int try_relay(const char *script, int argc, char **argv) {
  const char *no = getenv("GIT_XET_NO_DAEMON");
  if ((no && !strcmp(no, "1")) || getenv("GIT_XET_PROGRESS") || getenv("GIT_XET_DAEMON_TRIED")) return NOT_MINE;
  if (!relayed_command(argc, argv)) return NOT_MINE;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd) || cwd[0] != '/' || !valid_utf8((unsigned char *)cwd, strlen(cwd))) return NOT_MINE;
  char *git_dir = locate_git_dir(cwd);
  if (!git_dir) return NOT_MINE;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  /* A path that does not fit sun_path (or the root as the git directory) is the CLI's to try. */
  int fits = strcmp(git_dir, "/") &&
             snprintf(addr.sun_path, sizeof addr.sun_path, "%s/xet/daemon/sock", git_dir) < (int)sizeof addr.sun_path;
  free(git_dir);
  if (!fits) return NOT_MINE;
  /* client.ts ownSocket: a socket, and this user's. */
  struct stat st;
  if (lstat(addr.sun_path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != getuid()) return NOT_MINE;

  struct buf req = {0}, env = {0}, id = {0};
  if (env_print(&env) != 0 || build_id(&id, script) != 0) {
    free(env.p);
    free(id.p);
    return NOT_MINE;
  }
  struct timeval tv;
  gettimeofday(&tv, NULL);
  long long deadline = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 + ACCEPT_WITHIN_MS;
  puts_(&req, "{\"op\":\"cli\",\"cwd\":");
  put_json_string(&req, cwd);
  puts_(&req, ",\"argv\":[");
  for (int i = 0; i < argc; i++) {
    if (i) puts_(&req, ",");
    put_json_string(&req, argv[i]);
  }
  int tty = isatty(2);
  putf(&req, "],\"stderrTTY\":%s", tty ? "true" : "false");
  struct winsize w;
  if (tty && ioctl(2, TIOCGWINSZ, &w) == 0) putf(&req, ",\"columns\":%u", (unsigned)w.ws_col);
  putf(&req, ",\"deadline\":%lld,\"version\":", deadline);
  put_json_string(&req, id.p);
  puts_(&req, ",\"env\":");
  put_json_string(&req, env.p);
  puts_(&req, "}\n");
  free(env.p);
  free(id.p);
  if (req.failed) {
    free(req.p);
    return NOT_MINE;
  }
  /* Non-blocking from the start: a daemon that accepts nothing (suspended, its queue of connections
   * full) makes connect fail at once (EAGAIN), as node's does, instead of waiting for ever. */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    free(req.p);
    return NOT_MINE;
  }
  int r;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) r = NOT_MINE; /* no daemon answering there */
  else r = exchange(fd, &req);
  close(fd);
  free(req.p);
  return r;
}

int main(int argc, char **argv) {
  /* Standard descriptors closed by the caller are opened on /dev/null, as node opens them: the
   * socket must not take number 1 or 2 and receive the command's output. */
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null >= 0 && null != fd) close(null); /* a lower descriptor was free: leave it */
    }
  /* bin/git-xet asks first whether this build runs here (another architecture or C library after a
   * copy of dist/): if it does not, node runs every line. */
  if (argc == 2 && !strcmp(argv[1], "--can-run")) return 0;
  if (argc < 2) {
    fprintf(stderr, "usage: git-xet-relay <bin/git-xet> [args...]\n");
    return 70;
  }
  signal(SIGPIPE, SIG_IGN);
  int r = try_relay(argv[1], argc - 2, argv + 2);
  if (r >= 0) return r;
  if (r == TOO_LARGE) {
    fprintf(stderr, "git xet: the daemon ran the command but its reply is too large to read (over %u MiB)\n",
            MAX_REPLY >> 20);
    return 1;
  }
  signal(SIGPIPE, SIG_DFL);
  if (r == TRIED) setenv("GIT_XET_DAEMON_TRIED", "1", 1);
  /* The CLI itself: `node <script> <args>`, node found on PATH as the script's own `env node` was. */
  char **nv = calloc((size_t)argc + 1, sizeof *nv);
  if (!nv) return 70;
  nv[0] = "node";
  for (int i = 1; i < argc; i++) nv[i] = argv[i];
  execvp("node", nv);
  fprintf(stderr, "git xet: cannot run node: %s\n", strerror(errno));
  return 127;
}
