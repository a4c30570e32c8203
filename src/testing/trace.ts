// Timing of a command's phases, for finding where the time goes: with GIT_XET_TRACE=1 each call
// prints, on stderr, the milliseconds since the process started, the CPU milliseconds the process
// (every thread) has used so far, and what begins. Off (one environment lookup) otherwise.

const on = process.env.GIT_XET_TRACE === '1';

export function tracePhase(what: string): void {
  if (!on) return;
  const cpu = process.cpuUsage();
  const ms = (cpu.user + cpu.system) / 1000;
  process.stderr.write(
    `[xet ${performance.now().toFixed(0).padStart(6)} ms, cpu ${ms.toFixed(0).padStart(6)} ms] ${what}\n`,
  );
}
