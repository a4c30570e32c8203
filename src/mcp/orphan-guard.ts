// Preloaded (`node --require`) into each child CLI of the MCP server (src/mcp/child.ts). The child's
// stdin is a pipe the server holds open and never writes: its end means the server is gone, even
// SIGKILLed (no signal reaches a child then), and the child ends its own process group as a
// cancellation would, so no process outlives the server and nothing is left half written (the CLI's
// crash guarantees). The pipe never keeps the child alive: its handle is unreferenced.
import { isMainThread } from 'node:worker_threads';

// A preload runs in worker threads too (the pack writer's compression workers), where stdin is an
// empty stream that ends at once: only the main thread watches.
if (isMainThread) {
  const stdin = process.stdin as NodeJS.ReadStream & { unref?: () => void };
  const gone = (): void => {
    try {
      process.kill(-process.pid, 'SIGTERM');
    } catch {
      process.kill(process.pid, 'SIGTERM');
    }
  };
  stdin.on('data', () => undefined);
  stdin.once('end', gone);
  stdin.once('error', gone);
  stdin.unref?.();
}
