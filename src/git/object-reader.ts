// One `git cat-file --batch-command` process answering many questions in turn: `info` (type, size,
// size on disk) before `contents`, so an object's size is known before a byte of it is read, and a
// batch of questions is written at once and answered in order (one round trip per batch, not per
// object). For walks that decide what to read next from what they read (the push's tree
// comparison, src/remote/push-objects.ts).

import { XetError } from '../errors';
import type { GitOptions } from './exec';
import { gitSpawnEnv } from './exec';
import { startProcess, type Started } from './spawn';

export interface ObjectInfo {
  oid: string;
  type: string;
  size: number;
  /** Bytes it takes in this repository (a packed entry as stored, a loose object compressed). */
  diskSize: number;
}

export interface ObjectContents extends ObjectInfo {
  data: Buffer;
}

interface Pending {
  contents: boolean;
  /** Contents bigger than this end the reader (the caller falls back); info is never refused. */
  max: number;
  resolve: (v: ObjectInfo | ObjectContents | null) => void;
  reject: (e: Error) => void;
}

/** Thrown for an object bigger than the caller's bound: the reader is closed, nothing of it read. */
export class TooBig extends Error {}

export class ObjectReader {
  private readonly child: Started;
  private running = true;
  private buf: Buffer = Buffer.alloc(0);
  private failed: Error | null = null;
  private stderr = '';
  private readonly queue: Pending[] = [];

  constructor(opts: GitOptions) {
    this.child = startProcess(
      'git',
      ['cat-file', '--batch-command=%(objectname) %(objecttype) %(objectsize) %(objectsize:disk)'],
      { cwd: opts.cwd, env: gitSpawnEnv(opts.env) },
    );
    this.child.stdout.on('data', (b: Buffer) => this.onData(b));
    this.child.stderr.on('data', (b: Buffer) => (this.stderr += b.toString('utf8').slice(0, 4000)));
    this.child.stdin.on('error', () => undefined);
    this.child.exited.then(
      () => {
        this.running = false;
        this.fail(new XetError('GIT_FAILED', `git cat-file --batch-command ended: ${this.stderr.trim()}`));
      },
      (e: Error) => {
        this.running = false;
        this.fail(new XetError('GIT_FAILED', `cannot run git: ${e.message}`));
      },
    );
  }

  /** Type and sizes of each oid (full hex ids only), null for one this repository lacks. */
  info(oids: string[]): Promise<(ObjectInfo | null)[]> {
    return Promise.all(oids.map((oid) => this.ask(oid, false, Infinity) as Promise<ObjectInfo | null>));
  }

  /** Each object whole, null for one this repository lacks; TooBig (and the reader closed) for one
   * over `max` bytes. */
  contents(oids: string[], max: number): Promise<(ObjectContents | null)[]> {
    return Promise.all(oids.map((oid) => this.ask(oid, true, max) as Promise<ObjectContents | null>));
  }

  close(): void {
    if (this.running) this.child.kill('SIGKILL');
    this.child.stdin.destroy(); // whether or not git is still there: its pipe is ours to close
    this.fail(new XetError('GIT_FAILED', 'the object reader was closed'));
  }

  private ask(oid: string, contents: boolean, max: number): Promise<ObjectInfo | ObjectContents | null> {
    if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(oid)) {
      return Promise.reject(new XetError('USAGE', `not an object id: ${JSON.stringify(oid)}`));
    }
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.queue.push({ contents, max, resolve, reject });
      this.child.stdin.write(`${contents ? 'contents' : 'info'} ${oid}\n`);
    });
  }

  private fail(e: Error): void {
    this.failed ??= e;
    this.body = null;
    for (const p of this.queue.splice(0)) p.reject(this.failed);
  }

  /** The contents being received: copied into a buffer of their size as the pipe delivers them
   * (joining every chunk to what came before was quadratic: a 25 MB blob took 16 s, review 24). */
  private body: { data: Buffer; at: number; info: ObjectInfo; p: Pending } | null = null;

  private onData(chunk: Buffer): void {
    let rest = chunk;
    if (this.body) {
      const b = this.body;
      const n = Math.min(b.data.length - b.at, rest.length);
      rest.copy(b.data, b.at, 0, n);
      b.at += n;
      rest = rest.subarray(n);
      if (b.at < b.data.length) return;
      this.body = null;
      this.queue.shift();
      b.p.resolve({ ...b.info, data: b.data.subarray(0, b.info.size) });
    }
    if (!rest.length) return;
    this.buf = this.buf.length ? Buffer.concat([this.buf, rest]) : rest;
    for (;;) {
      const p = this.queue[0];
      if (!p) return;
      const nl = this.buf.indexOf(10);
      if (nl < 0) return;
      const header = this.buf.subarray(0, nl).toString('latin1');
      const f = header.split(' ');
      if (f[1] === 'missing' || f[1] === 'ambiguous') {
        this.buf = this.buf.subarray(nl + 1);
        this.queue.shift();
        p.resolve(null);
        continue;
      }
      const info: ObjectInfo = { oid: f[0], type: f[1], size: Number(f[2]), diskSize: Number(f[3]) };
      if (f.length !== 4 || !Number.isSafeInteger(info.size) || !Number.isSafeInteger(info.diskSize)) {
        this.close();
        return;
      }
      if (!p.contents) {
        this.buf = this.buf.subarray(nl + 1);
        this.queue.shift();
        p.resolve(info);
        continue;
      }
      if (info.size > p.max) {
        this.queue.shift();
        p.reject(new TooBig(`${info.oid} is ${info.size} bytes`));
        this.close();
        return;
      }
      if (this.buf.length < nl + 1 + info.size + 1) {
        // Not all here yet: the contents and their newline go into a buffer of their own.
        const data = Buffer.allocUnsafe(info.size + 1);
        const at = this.buf.copy(data, 0, nl + 1);
        this.buf = Buffer.alloc(0);
        this.body = { data, at, info, p };
        return;
      }
      const data = Buffer.from(this.buf.subarray(nl + 1, nl + 1 + info.size));
      this.buf = this.buf.subarray(nl + 1 + info.size + 1);
      this.queue.shift();
      p.resolve({ ...info, data });
    }
  }
}
