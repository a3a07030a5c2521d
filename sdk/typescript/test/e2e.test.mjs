// End-to-end tests against a running Ferry through the fault-injecting proxy: `ferry faultproxy
// -- npm run test:e2e` sets FERRY_SDK_URL (the proxy, where the client under test sends) and
// FERRY_SDK_STACK_URL (the stack, for set-up and checks); make test-sdk starts both. Without
// them these tests skip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { FerryClient, Batcher, LimitReachedError, WebhookVerifier, NotFoundError } from "../dist/index.js";

const proxy = process.env.FERRY_SDK_URL;
const stack = process.env.FERRY_SDK_STACK_URL;
const adminKey = process.env.FERRY_ADMIN_KEY || "dev-admin-key";
const skip = !proxy || !stack ? "FERRY_SDK_URL and FERRY_SDK_STACK_URL name no stack (make test-sdk runs these)" : false;
/** Bounds how long a test waits for the worker to bill what was queued. */
const SETTLE_MS = 180_000;

/** An account id no other run made: prefix and 8 random hex digits. */
const newAccountId = (prefix) => `${prefix}-${randomBytes(4).toString("hex")}`;

/** Creates a free account on the stack (`id`, or a fresh one) and returns clients of it. */
async function account(prefix, limits, id = newAccountId(prefix)) {
  const op = new FerryClient({ baseUrl: stack, apiKey: adminKey });
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

// The notifications end to end: a receiver on 127.0.0.1 registered as a webhook endpoint, an
// account driven past its thresholds and its limit through the fault proxy, every delivery
// verified with the SDK's verifier, the delivery log read and replayed through the SDK. ferry dev
// takes http://127.0.0.1 endpoints and runs the notifier every 2 s.

/** Bounds each wait for a delivery (the notifier runs every 2 s under ferry dev). */
const NOTIFICATION_WAIT_MS = 30_000;
/** How long to listen on after the deliveries waited for, so that one more would arrive. */
const NOTIFICATION_QUIET_MS = 5_000;
/** Bounds the body the receiver keeps (Ferry's messages are far smaller). */
const MAX_RECEIVED_BYTES = 1 << 20;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * The platform's side: an HTTP server on 127.0.0.1 that keeps every delivery as it arrived (the
 * raw body and the headers) and answers 204 at once, as a receiver should.
 */
async function startReceiver() {
  const got = [];
  const server = createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => { size += c.length; if (size <= MAX_RECEIVED_BYTES) chunks.push(c); });
    req.on("end", () => {
      got.push({ body: Buffer.concat(chunks), headers: req.headers, at: Date.now() });
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/ferry/notifications`,
    deliveries: () => [...got],
    // Ferry's sender keeps its connection open between deliveries: end it too.
    close: () => new Promise((resolve) => { server.close(resolve); server.closeAllConnections(); }),
  };
}

/** Counts the deliveries of each webhook-id. */
const byId = (ds) => ds.reduce((n, d) => n.set(d.headers["webhook-id"], (n.get(d.headers["webhook-id"]) ?? 0) + 1), new Map());

/** Polls the receiver until `done` holds or the wait ends; says whether it held. */
async function waitFor(rcv, done) {
  const deadline = Date.now() + NOTIFICATION_WAIT_MS;
  for (;;) {
    if (done(rcv.deliveries())) return true;
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
}

/**
 * Verifies every delivery with `v` and returns the messages by webhook-id; a delivery that does
 * not verify, whose message is not its webhook-id's, that is of another account, or that repeats
 * a webhook-id with other bytes (every attempt and replay sends the same) fails.
 */
function verifyAll(v, ds, account) {
  const out = new Map();
  const bodies = new Map();
  for (const [i, d] of ds.entries()) {
    const msg = v.verifyMessage(d.body, d.headers);
    assert.equal(msg.id, d.headers["webhook-id"], `delivery ${i}`);
    assert.equal(msg.data.account, account, `delivery ${i}`);
    const prev = bodies.get(msg.id);
    if (prev) assert.ok(prev.equals(d.body), `webhook-id ${msg.id} sent with other bytes`);
    bodies.set(msg.id, d.body);
    out.set(msg.id, msg);
  }
  return out;
}

/** The messages of a kind, by their data's threshold (0 for none). */
const ofKind = (msgs, kind) => new Map([...msgs.values()].filter((m) => m.type === kind).map((m) => [m.data.threshold ?? 0, m]));

async function sendThroughBatcher(client, n, first) {
  const b = new Batcher(client, { maxAgeMs: 200 });
  for (let i = 0; i < n; i++) await b.add({ source: "/sdk/ts/notifications", type: "api.call", data: { n: first + i } });
  await b.close();
}

/** The endpoint's whole delivery log, one delivery a page so that the iterator follows cursors. */
async function deliveryLog(op, endpoint) {
  const out = new Map();
  for await (const d of op.webhookDeliveries(endpoint, { limit: 1 })) out.set(d.notification, d);
  return out;
}

async function waitLog(op, endpoint, done) {
  const deadline = Date.now() + NOTIFICATION_WAIT_MS;
  for (;;) {
    const log = await deliveryLog(op, endpoint);
    if (done(log) || Date.now() > deadline) return log;
    await sleep(500);
  }
}

test("notifications: thresholds and the limit told once each, signed, logged and replayed", { skip }, async () => {
  const opRetries = { n: 0 };
  // The operator's calls go through the faults too: a registration, rotation or replay whose
  // answer is lost is sent again under its Idempotency-Key, and must land once.
  const op = new FerryClient({ baseUrl: proxy, apiKey: adminKey, timeoutMs: 3000, maxAttempts: 12, maxWaitMs: 10_000,
    logger: (e) => { if (e.message === "ferry: retrying") opRetries.n++; } });
  const rcv = await startReceiver();
  try {
    const id = newAccountId("sdk-ts-alerts");
    // The endpoint first, for the account about to be made (an account need not exist yet).
    const ep = await op.createWebhookEndpoint({ url: rcv.url, kinds: ["threshold.crossed", "limit.reached"], accounts: [id], description: "sdk ts e2e" });
    let listed = 0;
    for await (const e of op.webhookEndpoints()) if (e.id === ep.id) listed++;
    assert.equal(listed, 1);
    assert.equal(ep.url, rcv.url);
    const v = new WebhookVerifier(ep.secret);

    const { through, direct, retries } = await account("sdk-ts-alerts", { events: 100 }, id);
    const acct = await op.getAccount(id);
    assert.deepEqual(acct.alerts.events, [{ percent: 80 }, { percent: 100 }]);

    // 85 events: the 80% threshold is crossed, once.
    const start = Date.now();
    await sendThroughBatcher(through, 85, 0);
    assert.equal((await waitUsed(direct, "events", 85)).used, 85);
    assert.ok(await waitFor(rcv, (ds) => ds.length > 0), `no delivery within ${NOTIFICATION_WAIT_MS} ms of usage reaching 85`);
    const firstMs = rcv.deliveries()[0].at - start;
    await sleep(NOTIFICATION_QUIET_MS);
    let msgs = verifyAll(v, rcv.deliveries(), id);
    let crossed = ofKind(msgs, "threshold.crossed");
    assert.equal(msgs.size, 1, `after 85 events: ${[...msgs.values()].map((m) => m.type)}`);
    const at80 = crossed.get(80);
    assert.ok(at80, "no threshold.crossed at 80");
    assert.equal(at80.data.percent, 80);
    assert.equal(at80.data.limit, 100);
    assert.equal(at80.data.feature, "events");
    assert.ok(at80.data.used >= 80);

    // A body changed by one byte does not verify.
    const d0 = rcv.deliveries()[0];
    const tampered = Buffer.from(d0.body);
    tampered[tampered.length - 2] ^= 1;
    assert.throws(() => v.verifyMessage(tampered, d0.headers));

    // 20 more: 15 fit and cross 100%, 5 are refused at the limit, which is told once.
    await sendThroughBatcher(through, 20, 85);
    assert.equal((await waitUsed(direct, "events", 100)).used, 100);
    assert.ok(await waitFor(rcv, (ds) => byId(ds).size >= 3), `${byId(rcv.deliveries()).size} distinct notifications within ${NOTIFICATION_WAIT_MS} ms, want 3`);
    await sleep(NOTIFICATION_QUIET_MS);
    msgs = verifyAll(v, rcv.deliveries(), id);
    crossed = ofKind(msgs, "threshold.crossed");
    const reached = ofKind(msgs, "limit.reached");
    assert.equal(msgs.size, 3);
    assert.deepEqual([...crossed.keys()].sort((a, b) => a - b), [80, 100]);
    assert.equal(crossed.get(80).id, at80.id);
    assert.equal(crossed.get(100).data.percent, 100);
    assert.equal(reached.size, 1);
    assert.equal(reached.get(0).data.limit, 100);
    assert.equal(reached.get(0).data.used, 100);
    const beforeReplay = rcv.deliveries().length;

    // The delivery log, through the SDK: three deliveries, each DELIVERED.
    let log = await waitLog(op, ep.id, (l) => [...l.values()].filter((d) => d.status === "DELIVERED").length === 3);
    assert.equal(log.size, 3);
    for (const [n, d] of log) {
      assert.ok(msgs.has(n), n);
      assert.equal(d.status, "DELIVERED");
      assert.equal(d.account, id);
      assert.equal(d.endpoint, ep.id);
    }

    // Rotate, then replay the 80% notification: it comes again with the same webhook-id, signed
    // with both secrets during the overlap, and the receiver still has 3 distinct ids.
    const rotated = await op.rotateWebhookEndpointSecret(ep.id);
    assert.notEqual(rotated.secret, ep.secret);
    assert.equal(rotated.secrets.length, 2);
    assert.ok(rotated.previousSecretExpiresAt);
    const replayAt = Date.now();
    await op.replayWebhookDelivery(ep.id, at80.id);
    assert.ok(await waitFor(rcv, (ds) => (byId(ds).get(at80.id) ?? 0) >= 2), `the replay of ${at80.id} did not arrive`);
    const againMs = rcv.deliveries().at(-1).at - replayAt;
    await sleep(NOTIFICATION_QUIET_MS);
    const all = rcv.deliveries();
    const ids = byId(all);
    assert.equal(ids.size, 3);
    assert.equal(ids.get(at80.id), 2);
    assert.equal(all.length, beforeReplay + 1);
    verifyAll(v, all, id);
    const replay = all.at(-1);
    assert.equal(new WebhookVerifier(rotated.secret).verifyMessage(replay.body, replay.headers).id, at80.id);
    log = await waitLog(op, ep.id, (l) => l.get(at80.id)?.replays === 1 && l.get(at80.id)?.status === "DELIVERED");
    assert.equal(log.size, 3);
    assert.equal(log.get(at80.id).replays, 1);
    assert.equal(log.get(at80.id).status, "DELIVERED");

    // Change, then delete the endpoint: a read after is a NotFoundError.
    const changed = await op.updateWebhookEndpoint(ep.id, { disabled: true });
    assert.equal(changed.disabled, true);
    assert.equal(changed.secrets.length, 2);
    await op.deleteWebhookEndpoint(ep.id);
    await assert.rejects(op.getWebhookEndpoint(ep.id), NotFoundError);

    console.log(`typescript e2e notifications: 85 events -> threshold.crossed 80 (used ${at80.data.used}) first delivery ${firstMs} ms after the first add; `
      + `20 more -> threshold.crossed 100 (used ${crossed.get(100).data.used}) and limit.reached (used ${reached.get(0).data.used}); `
      + `${all.length} deliveries verified, ${ids.size} distinct webhook-ids, log 3 DELIVERED; replay of ${at80.id} after a rotation arrived ${againMs} ms after the replay call began, `
      + `verified under both secrets, replays=1; ${opRetries.n + retries.n} operator/client retries`);
  } finally {
    await rcv.close();
  }
});
