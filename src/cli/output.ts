// Printing results and errors, human or --json. Core modules return values; only this prints.

import { EXIT, XetError } from '../errors';
import { invocation } from './invocation';

export interface Out {
  json: boolean;
  /** --quiet: no progress and no informational notes on stderr; results and errors still print. */
  quiet?: boolean;
}

/** Whether informational notes (counts, what was left out) go to stderr: a terminal, not --quiet. */
export function chatty(out: Out): boolean {
  return !out.json && !out.quiet && invocation().stderrTTY;
}

export function emit(out: Out, value: unknown, human: () => string): void {
  clearProgress();
  const io = invocation();
  if (out.json) io.stdout(`${JSON.stringify(value)}\n`);
  else {
    const text = human();
    if (text) io.stdout(text.endsWith('\n') ? text : `${text}\n`);
  }
}

export function emitError(out: Out, e: unknown): number {
  clearProgress();
  const io = invocation();
  if (e instanceof XetError) {
    if (out.json) io.stdout(`${JSON.stringify({ error: e.toJSON() })}\n`);
    else io.stderr(`git xet: ${e.message} [${e.code}]\n`);
    return e.code === 'USAGE' ? EXIT.USAGE : EXIT.ERROR;
  }
  const err = e as Error;
  const payload = { code: 'INTERNAL', message: err?.message ?? String(e), details: { stack: err?.stack } };
  if (out.json) io.stdout(`${JSON.stringify({ error: payload })}\n`);
  else io.stderr(`git xet: internal error: ${payload.message}\n${err?.stack ?? ''}\n`);
  return EXIT.INTERNAL;
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** The progress line currently on the terminal, erased before anything else is printed. */
let progressText = '';
/** Redraws the progress line while a phase lasts, so the elapsed time moves. */
let ticker: NodeJS.Timeout | null = null;
/** How often the elapsed time is redrawn during a long phase (the test suite shortens it, so a
 * phase of a few tens of milliseconds shows the redraws on any machine). */
export const PROGRESS_TICK_MS = Number(process.env.GIT_XET_TEST_PROGRESS_TICK_MS) || 250;

function eraseProgress(): void {
  if (!progressText) return;
  process.stderr.write(`\r${' '.repeat(progressText.length)}\r`);
  progressText = '';
}

function clearProgress(): void {
  if (ticker) clearInterval(ticker);
  ticker = null;
  eraseProgress();
}

/** With GIT_XET_PROGRESS=json (the MCP server's child processes, src/mcp/child.ts) every phase is one
 * `{"progress":"<phase>"}` line on stderr, terminal or not, --json or not: a reader forwards them. */
export const PROGRESS_ENV = 'GIT_XET_PROGRESS';
/** Read once and taken out of the environment: it is for this process, not for the commands a task
 * runs or the git processes it starts. */
const JSON_PROGRESS = process.env[PROGRESS_ENV] === 'json';
delete process.env[PROGRESS_ENV];

/** Whether this process is one of the MCP server's child CLIs (which set GIT_XET_PROGRESS=json):
 * such a call runs on behalf of a tool, and a tool annotated read-only must not apply deletions a
 * policy would (task retention). */
export function underMcp(): boolean {
  return JSON_PROGRESS;
}

function jsonProgress(what: string): void {
  process.stderr.write(`${JSON.stringify({ progress: what })}\n`);
}

/** A one-line progress reporter on a terminal's stderr; silent with --json, --quiet or when not a
 * TTY. The line names the current phase and the time since the command started, redrawn every
 * PROGRESS_TICK_MS while the phase lasts (git's own work runs in child processes, so the event loop
 * is free to redraw). */
export function progressLine(out: Out): ((what: string) => void) | undefined {
  if (!invocation().live) return undefined;
  if (JSON_PROGRESS) return jsonProgress;
  if (!chatty(out)) return undefined;
  const started = Date.now();
  let phase = '';
  const draw = () => {
    eraseProgress();
    const text = `git xet: ${phase}… (${((Date.now() - started) / 1000).toFixed(1)} s)`;
    // A line wider than the terminal wraps, and \r would then erase only its last part.
    const width = process.stderr.columns ? process.stderr.columns - 1 : text.length;
    progressText = text.length > width ? text.slice(0, width) : text;
    process.stderr.write(progressText);
  };
  return (what: string) => {
    phase = what;
    if (!ticker) {
      ticker = setInterval(draw, PROGRESS_TICK_MS);
      ticker.unref(); // never keeps the process alive
    }
    draw();
  };
}
