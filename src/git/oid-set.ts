// A set of object ids in shared memory, for the threads of one capture: which objects the
// repository is known to hold, and which ones a thread has already claimed for the pack being
// written. Insert-if-absent is one atomic step, so of two threads that hash the same content (the
// same LICENSE in a hundred packages) exactly one compresses and writes it.
//
// Open addressing with linear probing. A slot is empty (0), being filled (1) or holds an id (2); a
// thread that meets a slot being filled waits for it, since the id it will hold may be its own.

import { copyBytes } from './copy-bytes';

export const INSERTED = 1;
export const PRESENT = 0;

/** One set's memory kept for reuse (see recycle). */
let spare: SharedOidSet | null = null;

export class SharedOidSet {
  readonly state: Int32Array;
  readonly keys: Uint8Array;
  private readonly mask: number;

  constructor(
    readonly buffers: { state: SharedArrayBuffer; keys: SharedArrayBuffer },
    readonly oidBytes: number,
  ) {
    this.state = new Int32Array(buffers.state);
    this.keys = new Uint8Array(buffers.keys);
    this.mask = this.state.length - 1;
  }

  /** Room for `expected` ids at a load of at most a half. */
  static create(expected: number, oidBytes: number): SharedOidSet {
    let slots = 1024;
    while (slots < expected * 2) slots *= 2;
    const old = spare;
    if (old && old.oidBytes === oidBytes && old.state.length === slots) {
      spare = null;
      old.state.fill(0); // every slot empty: the keys need no clearing
      return new SharedOidSet(old.buffers, oidBytes);
    }
    return new SharedOidSet(
      { state: new SharedArrayBuffer(slots * 4), keys: new SharedArrayBuffer(slots * oidBytes) },
      oidBytes,
    );
  }

  /**
   * A set's memory, for the next set of its size (a resident process's next capture): a few MB of
   * fresh pages cost ~10 us each on these VMs, a cleared table a fraction of a millisecond. Only
   * once no thread can touch `set` again (its workers are gone), and `set` is not used after.
   */
  static recycle(set: SharedOidSet): void {
    spare = set;
  }

  /** Add the id at `oid[at..]`; INSERTED when it was not there (the caller now owns it), else PRESENT. */
  add(oid: Uint8Array, at = 0): number {
    const n = this.oidBytes;
    // Object ids are uniformly distributed: their first bytes are a good enough hash.
    let slot = ((oid[at] << 24) | (oid[at + 1] << 16) | (oid[at + 2] << 8) | oid[at + 3]) & this.mask;
    for (let probes = 0; probes <= this.mask; probes++) {
      const s = Atomics.compareExchange(this.state, slot, 0, 1);
      if (s === 0) {
        copyBytes(oid, this.keys, slot * n, at, at + n);
        Atomics.store(this.state, slot, 2);
        Atomics.notify(this.state, slot);
        return INSERTED;
      }
      if (s === 1) Atomics.wait(this.state, slot, 1, 1000);
      if (this.sameKey(slot, oid, at)) return PRESENT;
      slot = (slot + 1) & this.mask;
    }
    throw new Error('shared object-id set is full');
  }

  has(oid: Uint8Array, at = 0): boolean {
    let slot = ((oid[at] << 24) | (oid[at + 1] << 16) | (oid[at + 2] << 8) | oid[at + 3]) & this.mask;
    for (let probes = 0; probes <= this.mask; probes++) {
      const s = Atomics.load(this.state, slot);
      if (s === 0) return false;
      if (s === 1) Atomics.wait(this.state, slot, 1, 1000);
      if (this.sameKey(slot, oid, at)) return true;
      slot = (slot + 1) & this.mask;
    }
    return false;
  }

  addHex(hex: string): number {
    return this.add(Buffer.from(hex, 'hex'));
  }

  hasHex(hex: string): boolean {
    return this.has(Buffer.from(hex, 'hex'));
  }

  private sameKey(slot: number, oid: Uint8Array, at: number): boolean {
    const n = this.oidBytes;
    const k = this.keys;
    const base = slot * n;
    for (let i = 0; i < n; i++) if (k[base + i] !== oid[at + i]) return false;
    return true;
  }
}
