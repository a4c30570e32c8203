// Small copies between buffers (index entries' 40 stat bytes and 20/32-byte object ids, paths of an
// index v4's prefix arena). Buffer#copy goes through a JS wrapper and a native call each time: for
// tens of thousands of entries, once per process (never optimised), it cost about as much as the
// rest of the loop around it. A plain loop does the same in a fraction of it.

/** Copy `src[srcStart, srcEnd)` to `dst` at `dstStart`; returns the bytes copied. */
export function copyBytes(
  src: Uint8Array,
  dst: Uint8Array,
  dstStart: number,
  srcStart: number,
  srcEnd: number,
): number {
  const n = srcEnd - srcStart;
  if (n > 64) {
    dst.set(src.subarray(srcStart, srcEnd), dstStart);
    return n;
  }
  if (src === dst && dstStart > srcStart && dstStart < srcEnd) {
    // Overlapping, copying forwards: from the end, as memmove would.
    for (let k = n - 1; k >= 0; k--) dst[dstStart + k] = src[srcStart + k];
    return n;
  }
  for (let k = 0; k < n; k++) dst[dstStart + k] = src[srcStart + k];
  return n;
}
