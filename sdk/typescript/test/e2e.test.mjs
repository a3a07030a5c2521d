// End-to-end tests against a running Ferry through the fault-injecting proxy: `ferry faultproxy
// -- npm run test:e2e` sets FERRY_SDK_URL (the proxy, where the client under test sends) and
// FERRY_SDK_STACK_URL (the stack, for set-up and checks); make test-sdk starts both. Without
// them these tests skip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { FerryClient, Batcher, LimitReachedError } from "../dist/index.js";

const proxy = process.env.FERRY_SDK_URL;
const stack = process.env.FERRY_SDK_STACK_URL;
const adminKey = process.env.FERRY_ADMIN_KEY || "dev-admin-key";
const skip = !proxy || !stack ? "FERRY_SDK_URL and FERRY_SDK_STACK_URL name no stack (make test-sdk runs these)" : false;
/** Bounds how long a test waits for the worker to bill what was queued. */
const SETTLE_MS = 180_000;

async function account(prefix, limits) {
  const op = new FerryClient({ baseUrl: stack, apiKey: adminKey });
  const id = `${prefix}-${randomBytes(4).toString("hex")}`;
  const acct = await op.createAccount({ id, plan: "free", limits });
  const retries = { n: 0 };
  const config = { apiKey: acct.apiKey, timeoutMs: 3000, maxAttempts: 12, maxWaitMs: 10_000, logger: (e) => { if (e.message === "ferry: retrying") retries.n++; } };
  return { through: new FerryClient({ ...config, baseUrl: proxy }), direct: new FerryClient({ ...config, baseUrl: stack }), retries };
}

async function waitUsed(client, feature, want) {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const u = await client.usage({ feature });
    if (u.used >= want || Date.now() > deadline) {
      await new Promise((r) => setTimeout(r, 1000));
      return client.usage({ feature });
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

test("5,000 events through the batcher with faults end with usage exactly 5,000", { skip }, async () => {
  const events = 5000;
  const { through, direct, retries } = await account("sdk-ts-batch", { events: events * 2 });
  const b = new Batcher(through, { maxAgeMs: 200 });
  const start = Date.now();
  for (let i = 0; i < events; i++) await b.add({ source: "/sdk/ts/e2e", type: "api.call", data: { n: i } });
  await b.close();
  const sentMs = Date.now() - start;
  const u = await waitUsed(direct, "events", events);
  console.log(`typescript e2e batcher: ${events} events sent in ${sentMs} ms with ${retries.n} retries; usage ${u.used} (want ${events})`);
  assert.equal(u.used, events);
  // The usage query, through the faults too, folds the same events by UTC day: its rows add up to
  // the ledger's figure (they are written in the claims that billed the events).
  const { rows, total } = await queryDays(through, start, events);
  console.log(`typescript e2e usage query: ${rows} DAY rows totalling ${total} (want ${events})`);
  assert.equal(total, events);
});

/**
 * Reads the account's events meter by UTC day, from the day of `sinceMs` to the day after now,
 * until its rows total `want` (or the wait ends: its reads are eventually consistent).
 */
async function queryDays(client, sinceMs, want) {
  const DAY_MS = 86_400_000;
  const day = (ms) => new Date(Math.floor(ms / DAY_MS) * DAY_MS).toISOString().replace(".000Z", "Z");
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const q = await client.queryUsage({ meter: "events", window: "DAY", from: day(sinceMs), to: day(Date.now() + DAY_MS) });
    const total = q.rows.reduce((sum, row) => sum + row.value, 0);
    if (total >= want || Date.now() > deadline) return { rows: q.rows.length, total };
    await new Promise((r) => setTimeout(r, 250));
  }
}

test("20 concurrent jobs under holds against a limit end exact", { skip }, async () => {
  const jobs = 20, estimate = 1000, limit = 10 * estimate;
  const { through, direct, retries } = await account("sdk-ts-holds", { tokens: limit });
  let admitted = 0, refused = 0, spent = 0;
  // The admitted jobs run until every admission is decided, so none frees room early.
  let undecided = jobs;
  let allDecided;
  const decided = new Promise((r) => (allDecided = r));
  const decide = () => { if (--undecided === 0) allDecided(); };
  await Promise.all(Array.from({ length: jobs }, async (_, i) => {
    const use = 500 + 17 * i;
    let ran = false;
    try {
      await through.runUnderHold({ key: `job-${i}`, feature: "tokens", amount: estimate }, async (job) => {
        ran = true;
        admitted++;
        decide();
        await decided;
        await job.charge("step-1", Math.floor(use / 2));
        return use;
      });
      spent += use;
    } catch (err) {
      if (!ran) decide();
      if (err instanceof LimitReachedError) refused++;
      else throw err;
    }
  }));
  const u = await direct.usage({ feature: "tokens" });
  console.log(`typescript e2e holds: ${jobs} jobs, ${admitted} admitted, ${refused} refused, ${retries.n} retries; used ${u.used} (want ${spent}), held ${u.held}`);
  assert.equal(admitted, limit / estimate);
  assert.equal(refused, jobs - limit / estimate);
  assert.equal(u.used, spent);
  assert.equal(u.held, 0);
});

test("close after a burst loses nothing", { skip }, async () => {
  const n = 2000;
  const { through, direct, retries } = await account("sdk-ts-burst", { events: 10 * n });
  const b = new Batcher(through, { maxAgeMs: 3_600_000, buffer: n });
  await Promise.all(Array.from({ length: n }, (_, i) => b.add({ source: "/sdk/ts/burst", type: "api.call" })));
  await b.close();
  const u = await waitUsed(direct, "events", n);
  console.log(`typescript e2e burst: ${n} events added at once, then close; ${retries.n} retries; usage ${u.used}`);
  assert.equal(u.used, n);
});
