// `git xet allowance`: the contract version, and per root its limits, usage, headroom, what is
// counted and what is not covered. OWNER: the CLI/report helper (issue 11). Stub; see ISSUE11.md.

export interface AllowanceReportOptions {
  cwd: string;
  recount?: boolean;
  /** Stores to report besides the repository's own roots (remote names or paths). */
  stores?: string[];
}

export async function allowanceReport(options: AllowanceReportOptions): Promise<unknown> {
  void options;
  throw new Error('allowanceReport: not implemented yet');
}
