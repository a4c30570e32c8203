// One `git update-ref -m <message> --stdin` process writing many ref transactions in turn, for a
// resident process that writes a ref at every request (the daemon's captures): git's own ref
// writing (its locks, conflict checks, reflog and fsync as configured, the reference-transaction
// hook) without a git process started for each, ~10-16 ms of a re-capture on these machines
// (docs/DESIGN-NOTES.md "The snapshot's ref through a resident update-ref").
//
// Each transaction is `start`, its updates, `prepare`, `commit`, which git answers "<command>: ok"
// (update-ref's --stdin transactions, git 2.27 on; after a commit a new `start` opens the next). A
// failed command makes git print "fatal: ..." and exit: the transaction is not committed, the
// caller's promise rejects with what git said, and the updater is spent (`alive` false).
// git reads its config when it starts: whoever keeps one must start another when the config it was
// started under is no longer the one in force (the daemon: src/daemon/server.ts).

import { XetError } from '../errors';
import { gitSpawnEnv, type GitOptions } from './exec';
import { startProcess, type Started } from './spawn';

/** A ref name this line protocol carries as written: no space, control character or newline. */
const PLAIN_REF = /^refs\/[\x21-\x7e]+$/;
const OID = /^[0-9a-f]{40}(?:[0-9a-f]{24})?$/;
const ANSWERS = ['start: ok', 'prepare: ok', 'commit: ok'];

export class RefUpdater {
  private readonly child: Started;
  private running = true;
  private stderr = '';
  private out = '';
  /** The transaction in flight: its answers so far, and how it ends. */
  private waiting: { answers: number; resolve: () => void; reject: (e: Error) => void } | null = null;
  private queue: Promise<void> = Promise.resolve();

  constructor(opts: GitOptions, message: string) {
    this.child = startProcess('git', ['update-ref', '-m', message, '--stdin'], {
      cwd: opts.cwd,
      env: gitSpawnEnv(opts.env),
    });
    this.child.stdout.setEncoding('latin1');
    this.child.stdout.on('data', (s: string) => this.onAnswer(s));
    this.child.stderr.on('data', (b: Buffer) => (this.stderr = (this.stderr + b.toString('utf8')).slice(-4000)));
    this.child.stdin.on('error', () => undefined);
    this.child.exited.then(
      ({ code, signal }) => this.end(`exit ${code ?? signal}`),
      (e: Error) => this.end(`cannot run git: ${e.message}`),
    );
  }

  /** Whether it can take another transaction (git has not exited, nothing has failed). */
  get alive(): boolean {
    return this.running;
  }

  /** Points each ref at its object in one transaction, as `git update-ref -m <message> <ref> <oid>`
   * does for one (no old value: whatever the ref held). */
  update(updates: { ref: string; oid: string }[]): Promise<void> {
    for (const u of updates) {
      if (!PLAIN_REF.test(u.ref) || !OID.test(u.oid)) {
        return Promise.reject(new XetError('USAGE', `not a ref update: ${JSON.stringify(u)}`));
      }
    }
    const run = this.queue.then(() => this.transaction(updates));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Ends git's input (it exits once the last transaction is done); a call after this rejects. */
  close(): void {
    this.running = false;
    this.child.stdin.end();
  }

  private transaction(updates: { ref: string; oid: string }[]): Promise<void> {
    if (!this.running) return Promise.reject(this.failure('the ref updater has ended'));
    return new Promise((resolve, reject) => {
      this.waiting = { answers: 0, resolve, reject };
      const lines = ['start', ...updates.map((u) => `update ${u.ref} ${u.oid}`), 'prepare', 'commit'];
      this.child.stdin.write(lines.join('\n') + '\n');
    });
  }

  private onAnswer(text: string): void {
    this.out += text;
    for (let nl = this.out.indexOf('\n'); nl >= 0; nl = this.out.indexOf('\n')) {
      const line = this.out.slice(0, nl);
      this.out = this.out.slice(nl + 1);
      const w = this.waiting;
      if (!w || line !== ANSWERS[w.answers]) {
        // Not what the protocol says comes next: nothing more from it is trusted.
        this.running = false;
        this.child.kill('SIGKILL');
        this.settle(this.failure(`git update-ref --stdin answered ${JSON.stringify(line.slice(0, 200))}`));
        return;
      }
      if (++w.answers === ANSWERS.length) this.settle(null);
    }
  }

  private end(how: string): void {
    this.running = false;
    // git prints its fatal line before it exits; its stderr pipe is drained before `exited` settles.
    this.settle(this.failure(`git update-ref --stdin ended (${how})`));
  }

  private settle(error: Error | null): void {
    const w = this.waiting;
    this.waiting = null;
    if (!w) return;
    if (error) w.reject(error);
    else w.resolve();
  }

  private failure(what: string): XetError {
    // From git's first "fatal:" or "error:" line on: a lock's advice runs to several lines after it.
    const lines = this.stderr.trim().split('\n');
    const first = lines.findIndex((l) => /^(fatal|error): /.test(l));
    const said = lines
      .slice(first < 0 ? -3 : first)
      .join(' | ')
      .slice(0, 600);
    return new XetError('GIT_FAILED', said ? `${what}: ${said}` : what, { stderr: this.stderr });
  }
}
