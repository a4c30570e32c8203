// The tool's version, recorded in every format it writes.
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const TOOL_VERSION: string = (require('../../package.json') as { version: string }).version;
