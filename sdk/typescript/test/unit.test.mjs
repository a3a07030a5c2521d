// Unit tests of the TypeScript client, run by node's test runner against the compiled library.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { Webhook } from "standardwebhooks";
import {
  FerryClient, Batcher, BatchError, BufferFullError, BatcherClosedError, ProblemError, LimitReachedError,
  InvalidRequestError, RateLimitedError, HoldNotRunningError, UnavailableError, PROBLEM_KINDS, NetworkError,
  WebhookVerifier, decide, problemFromAnswer, VERSION, NotFoundError, ConflictError,
} from "../dist/index.js";

const problem = (status, kind, extra = {}, headers = {}) => () =>
  new Response(JSON.stringify({ type: `tag:ferrymeter.dev,2026:problem:${kind}`, title: "t", status, detail: "d", ...extra }),
    { status, headers: { "content-type": "application/problem+json", ...headers } });
const json = (status, body) => () => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
const hangUp = () => { throw new TypeError("fetch failed: socket hang up"); };

/** A fetch that answers with the next scripted answer and records every request. */
function scripted(...answers) {
  const requests = [];
  const fetch = async (url, init) => {
    // A copy: a client that changed its headers between attempts must show it here.
    requests.push({ url, method: init.method, headers: { ...init.headers }, body: init.body });
    const answer = answers[Math.min(requests.length - 1, answers.length - 1)];
    return answer(url, init);
  };
  return { fetch, requests };
}

const client = (fetch, extra = {}) => new FerryClient({ baseUrl: "http://ferry.test", apiKey: "fk_test", fetch, baseWaitMs: 1, ...extra });

test("sendEvent: retries lost answers, 502, 503, 500, in-flight and 408 with the same id and key", async () => {
  const s = scripted(hangUp, problem(502, "outcome-unknown", {}, { "retry-after": "0" }), problem(503, "unavailable", {}, { "retry-after": "0" }),
    problem(500, "internal"), problem(409, "idempotency-in-flight", {}, { "retry-after": "0" }), problem(408, "request-timeout"),
    json(202, { id: "x", status: "queued" }));
  await client(s.fetch, { maxAttempts: 7 }).sendEvent({ source: "/t", type: "api.call" });
  assert.equal(s.requests.length, 7);
  const first = JSON.parse(s.requests[0].body);
  assert.match(first.id, /^evt_[a-z2-7]{26}$/);
  assert.equal(first.specversion, "1.0");
  for (const r of s.requests) {
    assert.equal(r.body, s.requests[0].body);
    assert.equal(r.headers["Idempotency-Key"], s.requests[0].headers["Idempotency-Key"]);
    assert.ok(r.headers["User-Agent"].endsWith(`ferry-typescript/${VERSION}`));
  }
});

test("two logical calls mint two Idempotency-Keys", async () => {
  const s = scripted(json(202, { id: "e", status: "queued" }));
  const c = client(s.fetch);
  await c.sendEvent({ id: "e", source: "/t", type: "t" });
  await c.sendEvent({ id: "e", source: "/t", type: "t" });
  assert.notEqual(s.requests[0].headers["Idempotency-Key"], s.requests[1].headers["Idempotency-Key"]);
});

test("other 4xx are never retried", async () => {
  for (const [status, kind] of [[400, "invalid-request"], [401, "unauthorized"], [402, "limit-reached"], [402, "account-inactive"], [404, "not-found"],
    [409, "conflict"], [409, "hold-not-running"], [413, "too-large"], [422, "idempotency-key-reused"], [422, "key-reused"]]) {
    const s = scripted(problem(status, kind));
    await assert.rejects(client(s.fetch).reserveHold({ key: "k", feature: "tokens", amount: 1 }), (e) => e instanceof ProblemError && e.kind === kind);
    assert.equal(s.requests.length, 1, `${kind} was retried`);
  }
});

test("attempts are bounded and the last error is thrown", async () => {
  const s = scripted(problem(503, "unavailable", {}, { "retry-after": "0" }));
  await assert.rejects(client(s.fetch, { maxAttempts: 3 }).usage(), UnavailableError);
  assert.equal(s.requests.length, 3);
});

test("a wait longer than maxWaitMs ends the call with the server's error", async () => {
  const s = scripted(problem(429, "rate-limited", { retryAfter: 37 }, { "retry-after": "37" }));
  await assert.rejects(client(s.fetch, { maxWaitMs: 1000 }).reserveHold({ key: "k", feature: "tokens", amount: 1 }),
    (e) => e instanceof RateLimitedError && e.retryAfterSeconds === 37 && e.retryAfterMs === 37000);
  assert.equal(s.requests.length, 1);
});

test("a timed-out attempt is retried", async () => {
  // A real hung request keeps its socket (and so the event loop) alive; this stand-in does not,
  // and AbortSignal.timeout's timer does not either.
  const keepAlive = setInterval(() => {}, 1000);
  const slow = (url, init) => new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason)));
  const s = scripted(slow, json(200, { feature: "events", cycle: "2026-11", limit: null, used: 1, held: 0, remaining: null, corrections: 0 }));
  const u = await client(s.fetch, { timeoutMs: 30 }).usage();
  clearInterval(keepAlive);
  assert.equal(u.used, 1);
  assert.equal(u.limit, null);
});

const usageQueryAnswer = {
  account: "acct_1", meter: "tokens_in", aggregation: "SUM", window: "DAY", from: "2026-10-31T23:00:00Z", to: "2026-11-01T23:00:00Z",
  tz: "Europe/Paris", groupBy: ["model"], filter: { region: "eu" },
  rows: [
    { windowStart: "2026-10-31T23:00:00Z", windowEnd: "2026-11-01T23:00:00Z", group: { model: "gpt-4" }, value: 1532 },
    { windowStart: "2026-10-31T23:00:00Z", windowEnd: "2026-11-01T23:00:00Z", group: {}, other: true, value: 7 },
  ],
};

test("queryUsage: every parameter sent once, as given, and the rows decoded", async () => {
  const s = scripted(json(200, usageQueryAnswer));
  const q = await client(s.fetch).queryUsage({
    meter: "tokens_in", window: "DAY", from: "2026-11-01T00:00:00+01:00", to: "2026-11-02T00:00:00+01:00",
    tz: "Europe/Paris", groupBy: "model", filter: { region: "eu" }, account: "acct_1",
  });
  assert.equal(s.requests.length, 1);
  const r = s.requests[0];
  assert.equal(r.method, "GET");
  assert.equal(r.url, "http://ferry.test/v1/usage/query?meter=tokens_in&window=DAY&from=2026-11-01T00%3A00%3A00%2B01%3A00"
    + "&to=2026-11-02T00%3A00%3A00%2B01%3A00&tz=Europe%2FParis&groupBy=model&account=acct_1&filter%5Bregion%5D=eu");
  assert.equal(r.headers.Authorization, "Bearer fk_test");
  assert.equal(r.headers.Accept, "application/json, application/problem+json");
  assert.ok(r.headers["User-Agent"].endsWith(`ferry-typescript/${VERSION}`));
  // A read is no mutation: no Idempotency-Key, and no body to declare.
  assert.equal(r.headers["Idempotency-Key"], undefined);
  assert.equal(r.headers["Content-Type"], undefined);
  assert.equal(r.body, undefined);
  assert.deepEqual(q, usageQueryAnswer);
  assert.equal(q.rows[1].other, true);
});

test("queryUsage: only the required parameters, nothing else sent", async () => {
  const s = scripted(json(200, { ...usageQueryAnswer, window: "HOUR", tz: undefined, groupBy: [], filter: {}, rows: [] }));
  const q = await client(s.fetch).queryUsage({ meter: "events", window: "HOUR", from: "2026-11-01T10:00:00Z", to: "2026-11-01T12:00:00Z" });
  assert.equal(s.requests[0].url, "http://ferry.test/v1/usage/query?meter=events&window=HOUR&from=2026-11-01T10%3A00%3A00Z&to=2026-11-01T12%3A00%3A00Z");
  assert.deepEqual(q.rows, []);
});

test("queryUsage: a missing or empty parameter is refused before anything is sent", async () => {
  // Ferry refuses an empty parameter, and dropping one would answer another query (a day in UTC
  // rather than in the zone meant).
  const valid = { meter: "tokens_in", window: "DAY", from: "2026-11-01T00:00:00Z", to: "2026-11-02T00:00:00Z" };
  for (const [name, params, want] of [
    ["nothing", {}, ["meter is required", "window is required", "from is required", "to is required"]],
    ["meter empty", { ...valid, meter: "" }, ["meter is empty"]],
    ["tz empty", { ...valid, tz: "" }, ["tz is empty"]],
    ["groupBy empty", { ...valid, groupBy: "" }, ["groupBy is empty"]],
    ["account empty", { ...valid, account: "" }, ["account is empty"]],
    ["tz null", { ...valid, tz: null }, ["tz is not a string"]],
    ["from a Date", { ...valid, from: new Date("2026-11-01T00:00:00Z") }, ["from is not a string"]],
    ["filter value empty", { ...valid, filter: { region: "" } }, ["filter[region] is not a value"]],
    ["filter dimension empty", { ...valid, filter: { "": "eu" } }, ["empty dimension"]],
  ]) {
    const s = scripted(json(200, usageQueryAnswer));
    await assert.rejects(client(s.fetch).queryUsage(params), (e) => e instanceof TypeError && want.every((w) => e.message.includes(w)), name);
    assert.equal(s.requests.length, 0, `${name}: sent`);
  }
});

test("queryUsage: the server's refusal is an InvalidRequestError, not retried", async () => {
  const s = scripted(problem(400, "invalid-request", { errors: ["from 2026-11-01T00:30:00Z is not aligned to an hour (the nearest: 2026-11-01T00:00:00Z)"] }));
  await assert.rejects(client(s.fetch, { maxAttempts: 5 }).queryUsage({ meter: "events", window: "HOUR", from: "2026-11-01T00:30:00Z", to: "2026-11-01T01:30:00Z" }),
    (e) => e instanceof InvalidRequestError && e.status === 400 && e.errors.length === 1 && e.errors[0].includes("not aligned"));
  assert.equal(s.requests.length, 1);
});

test("decide: exponential backoff with jitter, bounded, RateLimit-Reset honoured", () => {
  const p = { maxAttempts: 4, baseWaitMs: 100, maxWaitMs: 2000 };
  const net = new NetworkError("GET", "/v1/usage", new Error("reset"));
  for (const attempt of [1, 2, 3]) {
    const d = decide(p, attempt, net);
    const step = Math.min(100 * 2 ** (attempt - 1), 2000);
    assert.ok(d.retry && d.waitMs >= step / 2 && d.waitMs <= step, `attempt ${attempt}: ${JSON.stringify(d)}`);
  }
  assert.equal(decide(p, 4, net).retry, false);
  const reset = problemFromAnswer(429, 1000, JSON.stringify({ type: "tag:ferrymeter.dev,2026:problem:busy", title: "b", status: 429 }));
  const d = decide(p, 1, reset);
  assert.ok(d.retry && d.waitMs >= 1000 && d.waitMs <= 1100);
});

test("problem kinds are the server's: its table and its golden answers", () => {
  const table = readFileSync(new URL("../../../internal/platform/httpapi/problem.go", import.meta.url), "utf8");
  const slugs = [...table.matchAll(/slug: "([a-z-]+)"/g)].map((m) => m[1]);
  assert.ok(slugs.length > 0);
  assert.deepEqual([...slugs].sort(), Object.keys(PROBLEM_KINDS).sort());
  const golden = readFileSync(new URL("../../../testdata/golden/problems.golden", import.meta.url), "utf8").trim().split("\n");
  for (const line of golden) {
    const f = line.split("\t");
    const retryAfter = JSON.parse(f[2]);
    const err = problemFromAnswer(Number(f[1]), retryAfter ? Number(retryAfter) * 1000 : undefined, f[5]);
    assert.ok(err instanceof PROBLEM_KINDS[err.kind], `${f[0]}: ${err.kind}`);
    assert.notEqual(err.constructor, ProblemError, `${f[0]}: a known kind came back as a bare ProblemError`);
    assert.equal(err.status, Number(f[1]));
  }
});

test("extension members and unknown kinds", () => {
  const lr = problemFromAnswer(402, undefined, JSON.stringify({ type: "tag:ferrymeter.dev,2026:problem:limit-reached", title: "L", status: 402, remaining: 68800, needed: 90000 }));
  assert.ok(lr instanceof LimitReachedError && lr.remaining === 68800 && lr.needed === 90000);
  const ir = problemFromAnswer(400, undefined, JSON.stringify({ type: "tag:ferrymeter.dev,2026:problem:invalid-request", title: "I", status: 400, errors: ["a", "b"] }));
  assert.ok(ir instanceof InvalidRequestError && ir.errors.length === 2);
  const hn = problemFromAnswer(409, undefined, JSON.stringify({ type: "tag:ferrymeter.dev,2026:problem:hold-not-running", title: "H", status: 409, holdStatus: "SETTLED" }));
  assert.ok(hn instanceof HoldNotRunningError && hn.holdStatus === "SETTLED");
  const tea = problemFromAnswer(418, undefined, JSON.stringify({ type: "tag:ferrymeter.dev,2026:problem:teapot", title: "T", status: 418, spout: 1 }));
  assert.ok(tea.constructor === ProblemError && tea.kind === "teapot" && tea.extensions.spout === 1);
  const html = problemFromAnswer(502, undefined, "<html>bad gateway</html>");
  assert.ok(html.constructor === ProblemError && html.status === 502 && html.kind === "");
});

test("the constructor refuses a bad configuration", () => {
  assert.throws(() => new FerryClient({ baseUrl: "127.0.0.1:8080", apiKey: "k" }));
  assert.throws(() => new FerryClient({ baseUrl: "http://x", apiKey: "" }));
});

/** A client whose batch route queues everything (after `gate`, if set) and records the batches. */
function batchRecorder({ fail, gate } = {}) {
  const batches = [];
  const fetch = async (url, init) => {
    if (gate) await gate;
    const batch = JSON.parse(init.body);
    batches.push(batch);
    const err = fail?.(batch, batches.length);
    if (err) return err();
    return json(202, { results: batch.map((e) => ({ id: e.id, status: "queued" })) })();
  };
  return { batches, c: client(fetch, { maxAttempts: 1 }) };
}

test("batcher: flushes at size, the rest on close", async () => {
  const { batches, c } = batchRecorder();
  const b = new Batcher(c, { maxBatch: 10, maxAgeMs: 3_600_000 });
  for (let i = 0; i < 25; i++) await b.add({ source: "/t", type: "t" });
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(batches.map((x) => x.length), [10, 10]);
  await b.close();
  assert.equal(new Set(batches.flat().map((e) => e.id)).size, 25);
  await assert.rejects(b.add({ source: "/t", type: "t" }), BatcherClosedError);
});

test("batcher: flushes at age", async () => {
  const { batches, c } = batchRecorder();
  const b = new Batcher(c, { maxAgeMs: 20 });
  const id = await b.add({ source: "/t", type: "t" });
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(batches.flat()[0]?.id, id);
  await b.close();
});

test("batcher: a full buffer errors or blocks, as the caller chose", async () => {
  let open;
  const gate = new Promise((r) => (open = r));
  const { c } = batchRecorder({ gate });
  const failing = new Batcher(c, { maxBatch: 1, buffer: 2, concurrency: 1, overflow: "error" });
  let added = 0;
  let err;
  for (let i = 0; i < 10; i++) {
    try { await failing.add({ source: "/t", type: "t" }); added++; } catch (e) { err = e; break; }
  }
  assert.ok(err instanceof BufferFullError && added <= 3, `after ${added}: ${err}`);
  const blocking = new Batcher(c, { maxBatch: 1, buffer: 2, concurrency: 1 });
  const adds = [];
  for (let i = 0; i < 5; i++) adds.push(blocking.add({ source: "/t", type: "t" }));
  const settled = await Promise.race([Promise.all(adds).then(() => "all"), new Promise((r) => setTimeout(() => r("waiting"), 50))]);
  assert.equal(settled, "waiting");
  open();
  await Promise.all(adds);
  await failing.close();
  await blocking.close();
});

test("batcher: close after a burst sends everything once", async () => {
  const { batches, c } = batchRecorder();
  const b = new Batcher(c, { maxAgeMs: 3_600_000, buffer: 500 });
  const ids = await Promise.all(Array.from({ length: 2000 }, () => b.add({ source: "/t", type: "t" })));
  await b.close();
  const sent = batches.flat().map((e) => e.id);
  assert.equal(sent.length, 2000);
  assert.deepEqual(new Set(sent), new Set(ids));
});

test("batcher: failures are named exactly, once", async () => {
  const { batches, c } = batchRecorder({ fail: (batch, n) => (n === 2 ? problem(503, "unavailable") : undefined) });
  let background = 0;
  const b = new Batcher(c, { maxBatch: 5, maxAgeMs: 3_600_000, concurrency: 1, onFailure: (f) => (background += f.length) });
  for (let i = 0; i < 15; i++) await b.add({ source: "/t", type: "t" });
  await assert.rejects(b.flush(), (e) => e instanceof BatchError && e.failed.length === 5 && e.failed.every((f) => f.error instanceof UnavailableError)
    && JSON.stringify(e.ids) === JSON.stringify(batches[1].map((x) => x.id)));
  assert.equal(background, 5);
  await b.close();
});

test("runUnderHold: charges what the job reports, settles on success, error and abort", async () => {
  const routes = (url, init) => {
    const path = new URL(url).pathname;
    if (path === "/v1/holds") return json(201, { id: "hold_1", key: "job", feature: "tokens", amount: 100, used: 0, status: "RUNNING", leaseExpiresAt: "2026-11-30T00:00:00Z" })();
    if (path.endsWith("/charges")) {
      const amount = JSON.parse(init.body).amount;
      return json(200, { charged: amount, capped: false, used: amount, amount: 100, status: "RUNNING", leaseExpiresAt: "2026-11-30T00:00:00Z" })();
    }
    return json(200, { id: "hold_1", status: "SETTLED", charged: 40, released: 60 })();
  };
  const paths = (s) => s.requests.map((r) => new URL(r.url).pathname);

  let s = scripted(routes);
  const st = await client(s.fetch).runUnderHold({ key: "job", feature: "tokens", amount: 100 }, async () => 40);
  assert.equal(st.status, "SETTLED");
  assert.deepEqual(paths(s), ["/v1/holds", "/v1/holds/hold_1/charges", "/v1/holds/hold_1/settle"]);

  s = scripted(routes);
  await assert.rejects(client(s.fetch).runUnderHold({ key: "job", feature: "tokens", amount: 100 }, async () => { throw new Error("model crashed"); }), /model crashed/);
  assert.deepEqual(paths(s), ["/v1/holds", "/v1/holds/hold_1/settle"]);

  s = scripted(routes);
  const ac = new AbortController();
  await assert.rejects(client(s.fetch).runUnderHold({ key: "job", feature: "tokens", amount: 100 }, async (job) => {
    await job.charge("step-1", 40);
    ac.abort(new Error("cancelled"));
    throw job.signal.reason;
  }, { signal: ac.signal }), /cancelled/);
  assert.deepEqual(paths(s), ["/v1/holds", "/v1/holds/hold_1/charges", "/v1/holds/hold_1/settle"]);

  s = scripted(problem(402, "limit-reached", { remaining: 5, needed: 100 }));
  let ran = false;
  await assert.rejects(client(s.fetch).runUnderHold({ key: "job", feature: "tokens", amount: 100 }, async () => { ran = true; return 0; }),
    (e) => e instanceof LimitReachedError && e.remaining === 5);
  assert.equal(ran, false);
});

test("webhooks: signatures made by the Standard Webhooks library verify; tampering does not", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const signer = new Webhook(secret);
  const body = JSON.stringify({ type: "usage.threshold", data: { account: "acct_1", percent: 80 } });
  const sign = (at, payload) => ({ "webhook-id": "msg_1", "webhook-timestamp": String(Math.floor(at.getTime() / 1000)), "webhook-signature": signer.sign("msg_1", at, payload) });
  const v = new WebhookVerifier(secret);
  assert.deepEqual(v.verify(body, sign(new Date(), body)), JSON.parse(body));
  assert.deepEqual(v.verify(body, new Headers(sign(new Date(), body))), JSON.parse(body));
  assert.throws(() => v.verify(body.replace("acct_1", "acct_2"), sign(new Date(), body)));
  assert.throws(() => v.verify(body, sign(new Date(Date.now() - 10 * 60_000), body)));
  assert.throws(() => new WebhookVerifier("whsec_c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ=").verify(body, sign(new Date(), body)));
  assert.throws(() => new WebhookVerifier(""));
});

const endpointId = "we_4t7kq2m5xv3nb6ydz2wjc7hgra";
const endpoint = {
  id: endpointId, url: "http://127.0.0.1:9/hook", kinds: ["threshold.crossed", "limit.reached"], accounts: ["acct_1"], description: null,
  disabled: false, secrets: [{ createdAt: "2026-11-15T12:00:00.000Z", expiresAt: null }],
  createdAt: "2026-11-15T12:00:00.000Z", updatedAt: "2026-11-15T12:00:00.000Z",
};
const delivery = (notification, status = "DELIVERED") => ({
  notification, endpoint: endpointId, kind: "threshold.crossed", account: "acct_1", status, attempts: 1, lastStatus: 204, replays: 0,
  createdAt: "2026-11-15T12:00:00.000Z", updatedAt: "2026-11-15T12:00:02.000Z",
});

test("webhook endpoints: a registration whose answer is lost is sent again with the same bytes and key", async () => {
  const secret = "whsec_Ed6lJUaehf1BhhX5RbFQGypEWULXlNaqr7xRzXgLHcA=";
  const s = scripted(hangUp, problem(502, "outcome-unknown", {}, { "retry-after": "0" }), problem(409, "idempotency-in-flight", {}, { "retry-after": "0" }),
    json(201, { ...endpoint, secret }));
  const got = await client(s.fetch, { maxAttempts: 4 }).createWebhookEndpoint({ url: "http://127.0.0.1:9/hook", kinds: ["threshold.crossed", "limit.reached"], accounts: ["acct_1"] });
  assert.equal(s.requests.length, 4);
  for (const r of s.requests) {
    assert.equal(r.method, "POST");
    assert.equal(r.url, "http://ferry.test/v1/webhook-endpoints");
    assert.equal(r.body, '{"url":"http://127.0.0.1:9/hook","kinds":["threshold.crossed","limit.reached"],"accounts":["acct_1"]}');
    assert.equal(r.headers["Content-Type"], "application/json");
    assert.ok(r.headers["Idempotency-Key"]);
    assert.equal(r.headers["Idempotency-Key"], s.requests[0].headers["Idempotency-Key"]);
  }
  assert.equal(got.secret, secret);
  assert.equal(got.id, endpointId);
});

test("webhook endpoints: each route's method, path, body and key", async () => {
  const cases = [
    ["list", json(200, { items: [endpoint], next: null }), async (c) => {
      const all = [];
      for await (const e of c.webhookEndpoints()) all.push(e.id);
      assert.deepEqual(all, [endpointId]);
    }, "GET", `/v1/webhook-endpoints`, undefined],
    ["get", json(200, endpoint), async (c) => assert.equal((await c.getWebhookEndpoint(endpointId)).url, endpoint.url),
      "GET", `/v1/webhook-endpoints/${endpointId}`, undefined],
    // An empty description is sent, not dropped: it is how the description is removed.
    ["update", json(200, { ...endpoint, disabled: true }), async (c) => assert.equal((await c.updateWebhookEndpoint(endpointId, { description: "", disabled: true })).disabled, true),
      "PATCH", `/v1/webhook-endpoints/${endpointId}`, '{"description":"","disabled":true}'],
    ["delete", () => new Response(null, { status: 204 }), async (c) => assert.equal(await c.deleteWebhookEndpoint(endpointId), undefined),
      "DELETE", `/v1/webhook-endpoints/${endpointId}`, undefined],
    ["rotate", json(200, { ...endpoint, secret: "whsec_ujdZKLH6rzzed/aH4YV/LvkOqkbJFYqOJk/v7bUSni0=", previousSecretExpiresAt: "2026-11-17T09:00:00.000Z" }),
      async (c) => assert.equal((await c.rotateWebhookEndpointSecret(endpointId)).previousSecretExpiresAt, "2026-11-17T09:00:00.000Z"),
      "POST", `/v1/webhook-endpoints/${endpointId}/rotate-secret`, undefined],
    ["replay", json(202, delivery("ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr", "PENDING")),
      async (c) => assert.equal((await c.replayWebhookDelivery(endpointId, "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr")).status, "PENDING"),
      "POST", `/v1/webhook-endpoints/${endpointId}/deliveries/ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr/replay`, undefined],
    ["an id escaped", json(200, endpoint), async (c) => c.getWebhookEndpoint("we_a/b?c"), "GET", "/v1/webhook-endpoints/we_a%2Fb%3Fc", undefined],
  ];
  for (const [name, answer, call, method, path, body] of cases) {
    const s = scripted(answer);
    await call(client(s.fetch));
    assert.equal(s.requests.length, 1, name);
    const r = s.requests[0];
    assert.equal(r.method, method, name);
    assert.equal(r.url, `http://ferry.test${path}`, name);
    assert.equal(r.body, body, name);
    assert.equal(r.headers["Content-Type"], body === undefined ? undefined : "application/json", name);
    assert.equal(Boolean(r.headers["Idempotency-Key"]), method !== "GET", `${name}: Idempotency-Key ${r.headers["Idempotency-Key"]}`);
  }
});

test("webhook endpoints: the delivery log is read page after page by cursor", async () => {
  const s = scripted(json(200, { items: [delivery("ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr")], next: "c2" }),
    json(200, { items: [delivery("ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr")], next: null }));
  const got = [];
  for await (const d of client(s.fetch).webhookDeliveries(endpointId, { limit: 1 })) got.push(d.notification);
  assert.deepEqual(got, ["ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr", "ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr"]);
  assert.deepEqual(s.requests.map((r) => r.url), [
    `http://ferry.test/v1/webhook-endpoints/${endpointId}/deliveries?limit=1`,
    `http://ferry.test/v1/webhook-endpoints/${endpointId}/deliveries?limit=1&cursor=c2`,
  ]);
});

test("webhook endpoints: refusals are their kinds and not retried; an empty id is refused unsent", async () => {
  for (const [answer, call, kind] of [
    [problem(404, "not-found"), (c) => c.deleteWebhookEndpoint(endpointId), NotFoundError],
    [problem(409, "conflict"), (c) => c.rotateWebhookEndpointSecret(endpointId), ConflictError],
    [problem(409, "conflict"), (c) => c.replayWebhookDelivery(endpointId, "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr"), ConflictError],
    [problem(404, "not-found"), async (c) => { for await (const _ of c.webhookDeliveries(endpointId)) break; }, NotFoundError],
    [problem(400, "invalid-request", { errors: ["url: https only", "kinds: unknown kind usage.spike"] }),
      (c) => c.createWebhookEndpoint({ url: "ftp://x" }), InvalidRequestError],
  ]) {
    const s = scripted(answer);
    await assert.rejects(call(client(s.fetch, { maxAttempts: 5 })), kind);
    assert.equal(s.requests.length, 1);
  }
  const s = scripted(json(200, {}));
  const c = client(s.fetch);
  for (const call of [() => c.getWebhookEndpoint(""), () => c.updateWebhookEndpoint("", { disabled: true }), () => c.deleteWebhookEndpoint(""),
    () => c.rotateWebhookEndpointSecret(""), () => c.replayWebhookDelivery(endpointId, ""),
    async () => { for await (const _ of c.webhookDeliveries("")) break; }]) {
    await assert.rejects(call(), TypeError);
  }
  assert.equal(s.requests.length, 0);
});

/** A secret as Ferry makes one: "whsec_" and the standard base64 of 32 random bytes. */
const serverSecret = () => `whsec_${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))}`;

/**
 * A delivery's headers as Ferry's sender writes them (Go's canonical names, unix seconds, one
 * signature per secret, newest first, separated by spaces).
 */
function serverHeaders(id, at, body, ...secrets) {
  return {
    "Content-Type": "application/json", "User-Agent": "Ferry-Webhooks/1", "Webhook-Id": id, "Webhook-Timestamp": String(Math.floor(at.getTime() / 1000)),
    "Webhook-Signature": secrets.map((s) => new Webhook(s).sign(id, at, body)).join(" "),
  };
}

test("webhooks: a notification as Ferry sends it verifies under either secret and is typed; tampering does not", () => {
  const id = "ntf_a3kz7q2m5xv3nb6ydz2wjc7hgr";
  const body = `{"id":"${id}","type":"threshold.crossed","timestamp":"2026-11-15T12:00:00.000Z",`
    + `"data":{"account":"acct_1","feature":"events","meter":"events","cycle":"2026-11","threshold":80,"percent":80,"limit":100,"used":85}}`;
  const current = serverSecret(), previous = serverSecret();
  const h = serverHeaders(id, new Date(), body, current, previous);
  for (const secret of [current, previous]) {
    const v = new WebhookVerifier(secret);
    const msg = v.verifyMessage(body, h);
    assert.equal(msg.id, id);
    assert.equal(msg.type, "threshold.crossed");
    assert.deepEqual(msg.data, { account: "acct_1", feature: "events", meter: "events", cycle: "2026-11", threshold: 80, percent: 80, limit: 100, used: 85 });
    // The body's bytes, as a server framework hands them over, and Node's lower-cased headers.
    const lower = Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
    assert.equal(v.verifyMessage(new TextEncoder().encode(body), lower).id, id);
    assert.equal(v.verifyMessage(body, new Headers(h)).id, id);
  }
  const v = new WebhookVerifier(current);
  assert.throws(() => v.verifyMessage(body.replace('"used":85', '"used":8'), h));
  assert.throws(() => v.verifyMessage(body, { ...h, "Webhook-Id": "ntf_b3kz7q2m5xv3nb6ydz2wjc7hgr" }));
  assert.throws(() => new WebhookVerifier(serverSecret()).verifyMessage(body, h));
  assert.throws(() => v.verifyMessage(body, {}));
  const bytes = new TextEncoder().encode(body);
  bytes[bytes.length - 3] = 0xff; // no longer UTF-8, so no longer the bytes signed
  assert.throws(() => v.verifyMessage(bytes, h));
  // A kind added after this version is handed over as sent; a verified body that is no
  // notification is refused.
  const later = body.replace("threshold.crossed", "usage.spike");
  assert.equal(v.verifyMessage(later, serverHeaders(id, new Date(), later, current)).type, "usage.spike");
  assert.throws(() => v.verifyMessage("[1]", serverHeaders(id, new Date(), "[1]", current)), /not a notification/);
});

test("the library's version is the API's", () => {
  const spec = readFileSync(new URL("../../../api/openapi.yaml", import.meta.url), "utf8");
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(spec.match(/^  version: (\S+)$/m)[1], VERSION);
  assert.equal(pkg.version, VERSION);
});

test("the library imports no Node.js built-in (it runs in browsers too)", () => {
  const dist = new URL("../dist/", import.meta.url);
  const found = new Set();
  for (const name of readdirSync(dist).filter((f) => f.endsWith(".js"))) {
    const code = readFileSync(new URL(name, dist), "utf8");
    // Import and re-export statements (one a line, as tsc writes them) and dynamic imports; a
    // string that merely ends in "from" (a parameter's name) is none.
    const statements = /^\s*(?:import|export)\b[^"'\n;=]*?\bfrom\s*["']([^"']+)["']|^\s*import\s*["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']/gm;
    const imports = [...code.matchAll(statements)].map((m) => m[1] ?? m[2] ?? m[3]);
    for (const spec of imports) {
      found.add(spec);
      assert.ok(spec.startsWith("./") || spec === "standardwebhooks", `${name} imports ${spec}`);
    }
    assert.doesNotMatch(code, /\brequire\(|\bprocess\.|\bBuffer\b/, name);
  }
  // The pattern finds the imports there are, relative and bare.
  assert.ok(found.has("./client.js") && found.has("standardwebhooks"), [...found].join(", "));
});
