// Looking paths up in a sorted list when the questions come in order: staleSizes (capture.ts) asks
// for the size of every index entry, in the index's order. Each search starts where the last one
// ended and gallops forward, so n questions in order over m paths cost O(n log(m/n)) comparisons
// instead of O(n log m): 34,000 binary searches over 34,000 paths, each comparison a long shared
// prefix, were ~20 ms of a daemon's re-capture of a tree whose every file is tracked. A question
// out of order searches the whole list, as before.

/** A finder over `sorted` (ascending in JavaScript's string order, no duplicates): the position of
 * a path, or -1. */
export function orderedFinder(sorted: readonly string[]): (p: string) => number {
  // Every path at or before `last` sorts before the question that follows it in order.
  let last = -1;
  return (p) => {
    let lo = 0;
    let hi = sorted.length - 1;
    if (last >= 0 && sorted[last] < p) {
      // All of [0, lo) sort before p; the probes double until one does not.
      lo = last + 1;
      let step = 1;
      while (lo + step - 1 <= hi && sorted[lo + step - 1] < p) {
        lo += step;
        step *= 2;
      }
      hi = Math.min(hi, lo + step - 1);
    }
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const m = sorted[mid];
      if (m === p) {
        last = mid;
        return mid;
      }
      if (m < p) lo = mid + 1;
      else hi = mid - 1;
    }
    last = lo - 1;
    return -1;
  };
}
