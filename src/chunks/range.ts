// Byte ranges as `git xet cat --range` spells them, resolved against a file's size.
//
//   START-END     bytes START..END, END inclusive (HTTP's Range: bytes=0-0 is the first byte)
//   START-        from START to the end of the file
//   START+LENGTH  LENGTH bytes from START (LENGTH 0: an empty read)
//
// Resolution follows HTTP: a range reaching past the end is cut at the end; a range whose first
// byte is past the last (START >= size) is RANGE_NOT_SATISFIABLE — except a zero-length
// `START+0` with START <= size, which is an empty read at a real position (START == size is the
// end of the file, as a seek there is). An empty file has no satisfiable START-END range.

import { XetError } from '../errors';

export type RangeSpec =
  | { kind: 'span'; start: number; end: number | null } // end inclusive; null: to the end
  | { kind: 'length'; start: number; length: number };

const NUM = '(0|[1-9][0-9]*)';
const SPAN_RE = new RegExp(`^${NUM}-${NUM}?$`);
const LENGTH_RE = new RegExp(`^${NUM}\\+${NUM}$`);

function num(text: string, range: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new XetError('USAGE', `--range ${range}: ${text} is too large`, { range });
  return n;
}

/** Parse `--range`; USAGE when it is none of the forms (or END < START). */
export function parseRange(text: string): RangeSpec {
  const span = SPAN_RE.exec(text);
  if (span) {
    const start = num(span[1], text);
    const end = span[2] === undefined ? null : num(span[2], text);
    if (end !== null && end < start) {
      throw new XetError(
        'USAGE',
        `--range ${text}: END is before START (END is inclusive: ${start}-${start} is one byte)`,
        {
          range: text,
        },
      );
    }
    return { kind: 'span', start, end };
  }
  const len = LENGTH_RE.exec(text);
  if (len) return { kind: 'length', start: num(len[1], text), length: num(len[2], text) };
  throw new XetError(
    'USAGE',
    `--range ${JSON.stringify(text)}: use START-END (END inclusive), START- or START+LENGTH`,
    {
      range: text,
    },
  );
}

/** The bytes [start, end) (end exclusive) a range selects in a file of `size` bytes. */
export function resolveRange(spec: RangeSpec | null, size: number, where: string): { start: number; end: number } {
  if (!spec) return { start: 0, end: size };
  const unsatisfiable = (): XetError =>
    new XetError(
      'RANGE_NOT_SATISFIABLE',
      `${where} is ${size} bytes: a range starting at byte ${spec.start} is past its end`,
      { path: where, size, start: spec.start },
    );
  if (spec.kind === 'length') {
    if (spec.length === 0) {
      if (spec.start > size) throw unsatisfiable();
      return { start: spec.start, end: spec.start };
    }
    if (spec.start >= size) throw unsatisfiable();
    return { start: spec.start, end: Math.min(size, spec.start + spec.length) };
  }
  if (spec.start >= size) throw unsatisfiable();
  return { start: spec.start, end: spec.end === null ? size : Math.min(size, spec.end + 1) };
}
