// git-remote-xet: the remote helper git runs for `xet::<url>` remotes, speaking gitremote-helpers(7)
// on stdin/stdout. Capabilities: fetch, push, option, object-format.
//
// The helper enforces what git does not always check before handing a push over: fast-forward,
// immutable tags and create-once xet refs, compare-and-swap (--force-with-lease) and --atomic, and
// answers with git's own reasons ("non-fast forward", "fetch first", "stale info", "already exists")
// so git prints what users know. Each push appends one state to the store's log; a push that loses
// the race for the next state number re-reads the newer state and decides again.

import * as readline from 'node:readline';
import * as path from 'node:path';
import { XetError } from '../errors';
import { git, gitText } from '../git/exec';
import { objectSizes } from '../git/plumbing';
import { findRepo, repoOpts, type Repo } from '../git/repo';
import { sidecarDir } from '../sidecar/db';
import { acquireLock, type Lock } from '../sidecar/lock';
import { markPublicationReached } from '../sidecar/publications';
import { DirectoryStore } from './store';
import { publishToStore, type StorePushResult, type StorePushSpec } from './store-push';
import { importPacks } from './transfer';
import { storePathFromUrl } from './url';
import * as crypto from 'node:crypto';
// Fault injection for tests (SIGKILL at a named point): src/testing/fault-points.ts.
import { dieAt } from '../testing/fault-points';

/** Set by `git xet push`: the publication id this push carries into the state log. */
export const PUBLICATION_ENV = 'GIT_XET_PUBLICATION_ID';

/** The line on stderr that carries a refusal's details to `git xet push`. */
export const HELPER_ERROR_PREFIX = 'git-remote-xet: error ';

/** Set by `git xet fetch`: the helper then sends a refusal's details as push's does. */
export const TYPED_ERRORS_ENV = 'GIT_XET_TYPED_ERRORS';

export { isCreateOnce, isDeletable, isMutableMarker } from './store-push';

interface PushSpec {
  force: boolean;
  src: string;
  dst: string;
}

interface Options {
  dryRun: boolean;
  atomic: boolean;
  verbosity: number;
  progress: boolean;
  /** --force-with-lease: the value each ref must have now ('' = must not exist). */
  cas: Map<string, string>;
  objectFormat: boolean;
}

/** Unquote a C-style quoted option value (git quotes non-ASCII and special bytes). */
export function unquoteC(value: string): string {
  if (!value.startsWith('"') || !value.endsWith('"')) return value;
  const bytes: number[] = [];
  const s = value.slice(1, -1);
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c !== '\\') {
      for (const b of Buffer.from(c, 'utf8')) bytes.push(b);
      continue;
    }
    const n = s[++i];
    const simple: Record<string, number> = { n: 10, t: 9, r: 13, '"': 34, '\\': 92, a: 7, b: 8, f: 12, v: 11 };
    if (n in simple) bytes.push(simple[n]);
    else if (/[0-7]/.test(n)) {
      bytes.push(parseInt(s.slice(i, i + 3), 8));
      i += 2;
    } else bytes.push(n.charCodeAt(0));
  }
  return Buffer.from(bytes).toString('utf8');
}

export class RemoteHelper {
  private readonly opts: Options = {
    dryRun: false,
    atomic: false,
    verbosity: 1,
    progress: false,
    cas: new Map(),
    objectFormat: false,
  };
  private store: DirectoryStore | null = null;
  private cachedRepo: Repo | null = null;
  private cloning = false;

  constructor(
    private readonly remote: string,
    private readonly url: string,
    private readonly root: string,
    private readonly write: (s: string) => void,
  ) {}

  /** The local repository (git sets GIT_DIR for helpers). Looked up late: `ls-remote` runs outside
   * any repository, and a clone re-initialises a sha256 repository after `list`. */
  private async repo(): Promise<Repo> {
    this.cachedRepo ??= await findRepo(process.cwd(), true);
    return this.cachedRepo;
  }

  private async localFormat(): Promise<'sha1' | 'sha256' | null> {
    return (await this.repo().catch(() => null))?.objectFormat ?? null;
  }

  private openStore(create: false): DirectoryStore | null;
  private openStore(create: true, format: 'sha1' | 'sha256'): DirectoryStore;
  private openStore(create: boolean, format?: 'sha1' | 'sha256'): DirectoryStore | null {
    if (this.store) return this.store;
    try {
      this.store = create ? DirectoryStore.openOrCreate(this.root, format ?? 'sha1') : DirectoryStore.open(this.root);
    } catch (e) {
      if (!create && e instanceof XetError && e.code === 'STORE_UNAVAILABLE' && /no xet store/.test(e.message)) {
        return null;
      }
      throw e;
    }
    return this.store;
  }

  /** Objects move only between a repository and a store of the same object format. */
  private async matchingRepo(store: DirectoryStore | null): Promise<Repo> {
    this.cachedRepo = null; // a clone may have re-initialised it with the store's format
    const repo = await this.repo();
    if (store && store.objectFormat !== repo.objectFormat) {
      throw new XetError(
        'USAGE',
        `the store at ${this.root} holds ${store.objectFormat} objects; this repository is ${repo.objectFormat}`,
        { store: this.root },
      );
    }
    return repo;
  }

  option(name: string, raw: string): string {
    const value = unquoteC(raw);
    const bool = value === 'true';
    switch (name) {
      case 'verbosity':
        this.opts.verbosity = Number(value);
        return 'ok';
      case 'progress':
        this.opts.progress = bool;
        return 'ok';
      case 'dry-run':
        this.opts.dryRun = bool;
        return 'ok';
      case 'atomic':
        this.opts.atomic = bool;
        return 'ok';
      case 'object-format':
        // git 2.39 sends it without a value, later gits send "true"
        this.opts.objectFormat = value === '' || bool;
        return 'ok';
      case 'cas': {
        const at = value.lastIndexOf(':');
        if (at < 0) return 'error cas needs <ref>:<expected oid>';
        this.opts.cas.set(value.slice(0, at), /^0+$/.test(value.slice(at + 1)) ? '' : value.slice(at + 1));
        return 'ok';
      }
      case 'cloning':
        this.cloning = bool;
        return 'ok';
      case 'followtags':
      case 'check-connectivity':
        return 'ok';
      default:
        return 'unsupported';
    }
  }

  async list(forPush: boolean): Promise<void> {
    const store = this.openStore(false);
    if (!store && !forPush) {
      throw new XetError('STORE_UNAVAILABLE', `no xet store at ${this.root}`, { store: this.root });
    }
    const latest = store?.latest() ?? null;
    const lines: string[] = [];
    if (this.opts.objectFormat) {
      lines.push(`:object-format ${store?.objectFormat ?? (await this.localFormat()) ?? 'sha1'}`);
    }
    const refs = latest?.state.refs ?? {};
    const head = latest?.state.head;
    if (head && refs[head]) lines.push(`@${head} HEAD`);
    for (const name of Object.keys(refs).sort()) lines.push(`${refs[name]} ${name}`);
    this.write(`${lines.join('\n')}${lines.length ? '\n' : ''}\n`);
  }

  async fetch(wanted: string[]): Promise<void> {
    const store = this.openStore(false);
    if (!store) throw new XetError('STORE_UNAVAILABLE', `no xet store at ${this.root}`, { store: this.root });
    const repo = await this.matchingRepo(store);
    const latest = store.latest();
    if (latest) {
      await importPacks(store, repo, latest.state.packs);
      // Packs imported earlier may have lost objects to a local gc since: then import them again.
      const have = await objectSizes(wanted, repoOpts(repo));
      if (wanted.some((oid) => !have.has(oid))) await importPacks(store, repo, latest.state.packs, true);
    }
    if (this.cloning) await this.recordAbsoluteUrl(repo);
    this.write('\n');
  }

  /** git records a clone's URL as given; a relative store path would then resolve against the
   * clone itself on the next fetch. Record the absolute one, as git does for local paths. */
  private async recordAbsoluteUrl(repo: Repo): Promise<void> {
    const given = this.url.startsWith('xet::') ? this.url.slice(5) : this.url;
    if (path.isAbsolute(given) || /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(given) || !this.remote) return;
    const key = `remote.${this.remote}.url`;
    const r = await git(['config', '--get', key], { ...repoOpts(repo), okCodes: [1] });
    const current = r.stdout.toString('utf8').trim();
    if (current === this.url || current === `xet::${this.url}` || current === given) {
      await git(['config', key, `xet::${this.root}`], repoOpts(repo));
    }
  }

  async push(specs: PushSpec[]): Promise<void> {
    const pushId = process.env[PUBLICATION_ENV] || `push-${crypto.randomBytes(8).toString('hex')}`;
    let lock: Lock | null = null;
    const repo = await this.repo();
    if (process.env[PUBLICATION_ENV]) {
      // Held while this push runs: `git xet push` resolving a lost reply waits for it, so it never
      // looks up the log while the push could still land.
      lock = acquireLock(
        path.join(sidecarDir(repo.commonDir), 'locks', `publication-${pushId}.lockdb`),
        'publishing this push',
      );
      // Before the store is opened or created: a publication without it never reached any store.
      markPublicationReached(repo.commonDir, pushId);
    }
    try {
      const results = await this.pushLocked(specs, pushId);
      dieAt('before-reply');
      this.write(`${results.map((r) => (r.error ? `error ${r.dst} ${r.error}` : `ok ${r.dst}`)).join('\n')}\n\n`);
    } finally {
      lock?.release();
    }
  }

  private async pushLocked(specs: PushSpec[], pushId: string): Promise<StorePushResult[]> {
    const repo = await this.matchingRepo(null);
    const o = repoOpts(repo);
    const store = this.opts.dryRun ? this.openStore(false) : this.openStore(true, repo.objectFormat);
    await this.matchingRepo(store);
    const resolved: StorePushSpec[] = [];
    for (const s of specs) {
      // An annotated tag is published as the tag object itself, as git does.
      resolved.push({
        force: s.force,
        dst: s.dst,
        oid: s.src ? await gitText(['rev-parse', '--verify', s.src], o) : null,
      });
    }
    return publishToStore(store, repo, resolved, this.opts, pushId);
  }
}

/** Run the helper protocol: `git-remote-xet <remote> [<url>]`. */
export async function main(argv: string[]): Promise<number> {
  const [remote, url] = argv;
  const out = (s: string) => process.stdout.write(s);
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  // The iterator buffers lines from now on; lines read while we await anything else are kept.
  const it = lines[Symbol.asyncIterator]();
  try {
    const given = url ?? remote;
    const root = storePathFromUrl(given, process.cwd());
    const helper = new RemoteHelper(url === undefined ? '' : remote, given, root, out);
    const next = async (): Promise<string | null> => {
      const r = await it.next();
      return r.done ? null : r.value;
    };
    for (;;) {
      const line = await next();
      if (line === null || line === '') return 0;
      if (line === 'capabilities') out('fetch\npush\noption\nobject-format\n\n');
      else if (line.startsWith('option ')) {
        const [, name, ...rest] = line.split(' ');
        out(`${helper.option(name, rest.join(' '))}\n`);
      } else if (line === 'list' || line === 'list for-push') await helper.list(line === 'list for-push');
      else if (line.startsWith('fetch ')) {
        // A batch of fetch lines ends with a blank line; everything the store has comes at once.
        const wanted: string[] = [];
        for (let l: string | null = line; l; l = await next()) {
          if (!l.startsWith('fetch ')) throw new XetError('USAGE', `unexpected in a fetch batch: ${l}`);
          wanted.push(l.split(' ')[1]);
        }
        await helper.fetch(wanted);
      } else if (line.startsWith('push ')) {
        const specs: PushSpec[] = [];
        for (let l: string | null = line; l; l = await next()) {
          if (!l.startsWith('push ')) throw new XetError('USAGE', `unexpected in a push batch: ${l}`);
          let spec = l.slice('push '.length);
          const force = spec.startsWith('+');
          if (force) spec = spec.slice(1);
          const colon = spec.lastIndexOf(':');
          specs.push({ force, src: spec.slice(0, colon), dst: spec.slice(colon + 1) });
        }
        await helper.push(specs);
      } else {
        throw new XetError('USAGE', `git-remote-xet does not understand ${JSON.stringify(line)}`);
      }
    }
  } catch (e) {
    const msg = e instanceof XetError ? `${e.message} [${e.code}]` : ((e as Error).stack ?? String(e));
    process.stderr.write(`fatal: git-remote-xet: ${msg}\n`);
    // `git xet push` and `git xet fetch` turn this line back into the typed error with its details (publish.ts).
    if (
      e instanceof XetError &&
      e.code === 'ALLOWANCE_EXCEEDED' &&
      (process.env[PUBLICATION_ENV] || process.env[TYPED_ERRORS_ENV])
    ) {
      process.stderr.write(`${HELPER_ERROR_PREFIX}${JSON.stringify(e.toJSON())}\n`);
    }
    return e instanceof XetError ? 128 : 70;
  } finally {
    // Done (or failed): stop reading, so the process can exit whatever git still has open.
    lines.close();
    process.stdin.destroy();
  }
}
