// A stand-in CLI for store gc and drop --remote, run as a process (so tests can SIGKILL or pause it
// at its fault points): `node store-gc-run.js gc <store> [--grace SECONDS] [--dry-run] [--now ISO]`
// or `... drop <remote> <id>…`. Prints the result's JSON; a XetError is `{"error": …}` and exit 3.
// `git xet gc --store` and `git xet drop --remote` call the same functions.
import { XetError } from '../../src/errors';
import { describeRemoteDrop, dropOnRemote } from '../../src/remote/drop-remote';
import { describeStoreGc, gcStore } from '../../src/remote/store-gc';

async function main(argv: string[]): Promise<number> {
  const [cmd, where, ...rest] = argv;
  const flag = (name: string): string | undefined => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  try {
    if (cmd === 'gc') {
      const grace = flag('--grace');
      const now = flag('--now');
      const r = await gcStore(process.cwd(), where, {
        dryRun: rest.includes('--dry-run'),
        graceSeconds: grace === undefined ? undefined : grace === 'never' ? Infinity : Number(grace),
        now: now ? new Date(now) : undefined,
      });
      process.stdout.write(`${JSON.stringify(r)}\n`);
      process.stderr.write(`${describeStoreGc(r)}\n`);
      return 0;
    }
    if (cmd === 'drop') {
      const r = await dropOnRemote(process.cwd(), where, rest);
      process.stdout.write(`${JSON.stringify(r)}\n`);
      process.stderr.write(`${describeRemoteDrop(r)}\n`);
      return 0;
    }
    process.stderr.write(`usage: store-gc-run gc|drop …\n`);
    return 2;
  } catch (e) {
    if (!(e instanceof XetError)) throw e;
    process.stdout.write(`${JSON.stringify({ error: e.toJSON() })}\n`);
    return 3;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
    process.exit(70);
  },
);
