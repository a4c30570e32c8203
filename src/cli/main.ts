// The git-xet command line: commander wiring only. Each command lives in commands/<name>.ts, parses
// its flags, calls one core function and prints the result.

import { Command, CommanderError } from 'commander';
import { EXIT, XetError } from '../errors';
import { TOOL_VERSION } from '../version';
import { emitError } from './output';
import { COMMANDS, GROUPS } from '../commands/registry';
import { registerSpecs } from './from-spec';

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
  // Commands defined once for the CLI and MCP (src/commands/spec.ts); the rest still wire commander.
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
  const program = buildProgram();
  const json = argv.includes('--json');
  // Every command, not only the program: subcommands copied the output settings when they were
  // made, so with --json a usage error in `capture --bogus` would still print to stderr.
  const quietErr = (c: Command): void => {
    c.configureOutput({
      writeErr: (s) => {
        if (!json) process.stderr.write(s);
      },
    });
    c.commands.forEach(quietErr);
  };
  quietErr(program);
  program.parseAsync(argv, { from: 'user' }).catch((e: unknown) => {
    if (e instanceof CommanderError) {
      if (
        e.code === 'commander.helpDisplayed' ||
        e.code === 'commander.version' ||
        (e.code === 'commander.help' && e.exitCode === 0) // `help <cmd>`
      ) {
        process.exitCode = EXIT.OK;
        return;
      }
      if (e.code === 'commander.help') {
        // No command (`git xet`, `git xet handoff`): the usage went to stderr; like an unknown command,
        // this is a usage error. With --json the usage is in the error instead.
        process.exitCode = json
          ? emitError(
              { json },
              new XetError('USAGE', 'a command is required (git xet --help lists them)', { commander: e.code }),
            )
          : EXIT.USAGE;
        return;
      }
      process.exitCode = emitError(
        { json },
        new XetError('USAGE', e.message.replace(/^error: /, ''), { commander: e.code }),
      );
      return;
    }
    process.exitCode = emitError({ json }, e);
  });
}
