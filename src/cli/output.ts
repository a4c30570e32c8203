// Printing results and errors, human or --json. Core modules return values; only this prints.

import { EXIT, XetError } from '../errors';

export interface Out {
  json: boolean;
}

export function emit(out: Out, value: unknown, human: () => string): void {
  clearProgress();
  if (out.json) process.stdout.write(`${JSON.stringify(value)}\n`);
  else {
    const text = human();
    if (text) process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  }
}

export function emitError(out: Out, e: unknown): number {
  clearProgress();
  if (e instanceof XetError) {
    if (out.json) process.stdout.write(`${JSON.stringify({ error: e.toJSON() })}\n`);
    else process.stderr.write(`git xet: ${e.message} [${e.code}]\n`);
    return e.code === 'USAGE' ? EXIT.USAGE : EXIT.ERROR;
  }
  const err = e as Error;
  const payload = { code: 'INTERNAL', message: err?.message ?? String(e), details: { stack: err?.stack } };
  if (out.json) process.stdout.write(`${JSON.stringify({ error: payload })}\n`);
  else process.stderr.write(`git xet: internal error: ${payload.message}\n${err?.stack ?? ''}\n`);
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

function clearProgress(): void {
  if (!progressText) return;
  process.stderr.write(`\r${' '.repeat(progressText.length)}\r`);
  progressText = '';
}

/** A one-line progress reporter on a terminal's stderr; silent with --json or when not a TTY. */
export function progressLine(out: Out): ((what: string) => void) | undefined {
  if (out.json || !process.stderr.isTTY) return undefined;
  const started = Date.now();
  return (what: string) => {
    clearProgress();
    progressText = `git xet: ${what}… (${((Date.now() - started) / 1000).toFixed(1)} s)`;
    process.stderr.write(progressText);
  };
}
