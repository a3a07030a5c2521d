// Measures the Batcher's throughput against a running Ferry, side by side with bare fetch posting
// the same batches (an id per event and an Idempotency-Key per request, as the Batcher sends, so
// Ferry does the same work for both and the ratio is the client's own cost): events per second each way, alternating rounds on fresh accounts, and their
// ratio (the goal is at least 0.9). A program, not a test: make bench-sdk runs it against ferry dev.
//
//   FERRY_SDK_STACK_URL=http://127.0.0.1:8080 node bench/batcher.mjs [events] [rounds]
import { randomBytes } from "node:crypto";
import { FerryClient, Batcher, newEventId } from "../dist/index.js";

const base = process.env.FERRY_SDK_STACK_URL;
const admin = process.env.FERRY_ADMIN_KEY || "dev-admin-key";
const events = Number(process.argv[2] ?? 5000);
const rounds = Number(process.argv[3] ?? 3);
const concurrency = 2;
if (!base) throw new Error("FERRY_SDK_STACK_URL names no stack");
const op = new FerryClient({ baseUrl: base, apiKey: admin });

async function account(prefix) {
  const a = await op.createAccount({ id: `${prefix}-${randomBytes(4).toString("hex")}`, limits: { events: 2 * events } });
  return a.apiKey;
}

// Waits until the worker has billed every event a side sent, so the next side starts on an idle
// stack rather than racing the worker for the machine's cores.
async function drain(key) {
  const c = new FerryClient({ baseUrl: base, apiKey: key });
  const deadline = Date.now() + 300_000;
  while (Date.now() < deadline) {
    if ((await c.usage({ feature: "events" })).used === events) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the worker did not bill ${events} events in time`);
}

async function runSdk() {
  const key = await account("bench-ts-sdk");
  const client = new FerryClient({ baseUrl: base, apiKey: key });
  const b = new Batcher(client, { concurrency });
  const start = performance.now();
  for (let i = 0; i < events; i++) await b.add({ source: "/bench", type: "api.call", data: { n: i } });
  await b.close();
  const rate = events / ((performance.now() - start) / 1000);
  await drain(key);
  return rate;
}

async function runBare() {
  const key = await account("bench-ts-bare");
  const start = performance.now();
  let next = 0;
  async function worker() {
    while (next < events) {
      const from = next;
      next = Math.min(next + 100, events);
      const batch = [];
      for (let i = from; i < next; i++) batch.push({ specversion: "1.0", id: newEventId(), source: "/bench", type: "api.call", data: { n: i } });
      const resp = await fetch(`${base}/v1/events/batch`, { method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", "Idempotency-Key": newEventId() }, body: JSON.stringify(batch) });
      await resp.text();
      if (resp.status !== 202) throw new Error(`bare batch: ${resp.status}`);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const rate = events / ((performance.now() - start) / 1000);
  await drain(key);
  return rate;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sdk = [], bare = [];
for (let r = 0; r < rounds; r++) {
  let a, b;
  if (r % 2 === 0) { a = await runSdk(); b = await runBare(); } else { b = await runBare(); a = await runSdk(); }
  sdk.push(a); bare.push(b);
  console.log(`round ${r + 1}: batcher ${a.toFixed(0)} events/s, bare fetch ${b.toFixed(0)} events/s, ratio ${(a / b).toFixed(2)}`);
}
const s = median(sdk), b = median(bare);
console.log(`typescript: ${events} events a round, ${concurrency} in flight: batcher ${s.toFixed(0)} events/s, bare fetch ${b.toFixed(0)} events/s (medians of ${rounds} rounds); ratio ${(s / b).toFixed(2)}×`);
