// Starts the fauxqs SQS emulator bound to 127.0.0.1 on a free port (its own launcher binds every
// interface), prints {"url": ...} as one line on stdout, and exits when its parent goes away:
// on SIGTERM/SIGINT/SIGHUP, when stdin closes (the parent process died without signalling),
// or when its parent process is no longer its parent (it was re-parented to init or a
// subreaper). The parent also asks the kernel to kill it on the parent's death (Pdeathsig).
// Usage: node sqs-emulator.mjs /path/to/node_modules/fauxqs/dist/app.js [port]
import { pathToFileURL } from "node:url";

const [modulePath, portArg] = process.argv.slice(2);
if (!modulePath) {
  console.error("usage: sqs-emulator.mjs <fauxqs dist/app.js> [port]");
  process.exit(2);
}
const { buildApp } = await import(pathToFileURL(modulePath).href);
const app = buildApp({ logger: false });
const address = await app.listen({ port: Number(portArg ?? 0), host: "127.0.0.1" });
process.stdout.write(JSON.stringify({ url: address }) + "\n");

let closing = false;
const shutdown = async () => {
  if (closing) return;
  closing = true;
  try {
    await app.close();
  } finally {
    process.exit(0);
  }
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.on("SIGHUP", shutdown);
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) shutdown();
}, 250).unref();
process.stdin.on("end", shutdown);
process.stdin.on("error", shutdown);
process.stdin.resume();
