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
const rounds = Number(process.argv[3] ?? 4);
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

// Runs a side: its rate, and this process's CPU time per event (µs) — the client's own cost, which
// the machine's other load changes far less than it changes the rate. Then waits for the worker.
async function measured(side) {
  const before = process.cpuUsage();
  const [rate, key] = await side();
  const used = process.cpuUsage(before);
  const cpu = (used.user + used.system) / events;
  await drain(key);
  return [rate, cpu];
}

async function runSdk() {
  const key = await account("bench-ts-sdk");
  const client = new FerryClient({ baseUrl: base, apiKey: key });
  const b = new Batcher(client, { concurrency });
  const start = performance.now();
  for (let i = 0; i < events; i++) await b.add({ source: "/bench", type: "api.call", data: { n: i } });
  await b.close();
  const rate = events / ((performance.now() - start) / 1000);
  return [rate, key];
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
  return [rate, key];
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
// The geometric mean of the rounds' ratios: rounds where either side went first weigh alike.
const geomean = (xs) => Math.exp(xs.reduce((a, x) => a + Math.log(x), 0) / xs.length);
const sdk = [], bare = [], ratios = [], sdkCpu = [], bareCpu = [];
for (let r = 0; r < rounds; r++) {
  let a, b, ac, bc;
  if (r % 2 === 0) { [a, ac] = await measured(runSdk); [b, bc] = await measured(runBare); } else { [b, bc] = await measured(runBare); [a, ac] = await measured(runSdk); }
  sdk.push(a); bare.push(b); ratios.push(a / b); sdkCpu.push(ac); bareCpu.push(bc);
  console.log(`round ${r + 1}: batcher ${a.toFixed(0)} events/s, bare fetch ${b.toFixed(0)} events/s, ratio ${(a / b).toFixed(2)}; client CPU ${ac.toFixed(1)} µs/event vs ${bc.toFixed(1)}`);
}
console.log(`typescript: client CPU per event: batcher ${median(sdkCpu).toFixed(1)} µs, bare fetch ${median(bareCpu).toFixed(1)} µs (medians)`);
console.log(`typescript: ${events} events a side, ${concurrency} requests in flight: batcher ${median(sdk).toFixed(0)} events/s, bare fetch ${median(bare).toFixed(0)} events/s (medians of ${rounds} rounds); ratio ${geomean(ratios).toFixed(2)}× (geometric mean of the rounds' ratios)`);
