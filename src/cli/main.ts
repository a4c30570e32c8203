// The git-xet command line: the program, its global flags and its error handling. Every command is a
// definition in src/commands/ (one for the CLI and MCP), built into commander by from-spec.ts.

import { Command, CommanderError } from 'commander';
import { EXIT, XetError } from '../errors';
import { TOOL_VERSION } from '../version';
import { emitError } from './output';
import { COMMANDS, GROUPS } from '../commands/registry';
import { registerSpecs } from './from-spec';
import { invocation } from './invocation';

export function buildProgram(): Command {
  const program = new Command();
  program
    .name('git xet')
    .description('Capture, restore and verify whole Git working trees as ordinary Git objects')
    .version(TOOL_VERSION, '-V, --version')
    .option('--json', 'print results and errors as JSON on stdout')
    .option('-q, --quiet', 'no progress line and no notes on stderr (results and errors still print)')
    .showHelpAfterError()
    .exitOverride();
  registerSpecs(program, COMMANDS, GROUPS);
  return program;
}

export function main(argv: string[]): void {
  // A reader that closes the pipe early (`git xet task list --json | head -c 0`): what it did not
  // read is lost to it, not a crash of ours. Never exit here: an attached task runner must still
  // end its task, remove its guard and release its lease.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EPIPE') throw e;
    });
  }
  // A command whose work waits on something that can never happen (an event that was lost) leaves
  // node with nothing to do, and node then exits with 0 as if the command had succeeded: say it
  // failed instead.
  let settled = false;
  process.once('beforeExit', () => {
    if (settled) return;
    process.exitCode = emitError(
      { json: argv.includes('--json') },
      new Error('the command stopped before its end, waiting on work that could not finish (a bug in git xet)'),
    );
  });
  void runCli(argv).then((code) => {
    settled = true;
    process.exitCode = code;
  });
}

/** Runs one command line to its end and returns its exit code; output goes to the current
 * invocation (src/cli/invocation.ts), so the daemon runs a relayed command line with this too. */
export async function runCli(argv: string[]): Promise<number> {
  const program = buildProgram();
  const json = argv.includes('--json');
  const io = invocation();
  // Every command, not only the program: subcommands copied the output settings when they were
  // made, so with --json a usage error in `capture --bogus` would still print to stderr.
  const quietErr = (c: Command): void => {
    c.configureOutput({
      writeOut: (s) => io.stdout(s),
      writeErr: (s) => {
        if (!json) io.stderr(s);
      },
    });
    c.commands.forEach(quietErr);
  };
  quietErr(program);
  // Command actions (src/cli/run.ts) leave their code in process.exitCode.
  const before = process.exitCode;
  process.exitCode = undefined;
  try {
    await program.parseAsync(argv, { from: 'user' });
    return Number(process.exitCode ?? EXIT.OK);
  } catch (e) {
    return commanderExit(e, json);
  } finally {
    process.exitCode = before;
  }
}

function commanderExit(e: unknown, json: boolean): number {
  if (e instanceof CommanderError) {
    if (
      e.code === 'commander.helpDisplayed' ||
      e.code === 'commander.version' ||
      (e.code === 'commander.help' && e.exitCode === 0) // `help <cmd>`
    ) {
      return EXIT.OK;
    }
    if (e.code === 'commander.help') {
      // No command (`git xet`, `git xet handoff`): the usage went to stderr; like an unknown command,
      // this is a usage error. With --json the usage is in the error instead.
      return json
        ? emitError(
            { json },
            new XetError('USAGE', 'a command is required (git xet --help lists them)', { commander: e.code }),
          )
        : EXIT.USAGE;
    }
    return emitError({ json }, new XetError('USAGE', e.message.replace(/^error: /, ''), { commander: e.code }));
  }
  return emitError({ json }, e);
}
