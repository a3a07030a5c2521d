// The console's browser run (TestConsole_InABrowser starts the stack and this script): headless
// Chromium through playwright-core, every page opened, one action of each kind, the three labs,
// and a webhook endpoint registered at a receiver this script runs, delivered to and replayed.
// It prints one line per step and exits non-zero at the first thing that is not as it should be.
import { createHmac, randomUUID } from "node:crypto";
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(name + " is not set");
  return v;
};
const base = env("FERRY_CONSOLE_URL");
const account = env("FERRY_CONSOLE_ACCOUNT");
const eventId = env("FERRY_CONSOLE_EVENT");
const shots = env("FERRY_CONSOLE_SHOTS");
const require = createRequire(import.meta.url);
const { chromium } = require(env("FERRY_PLAYWRIGHT"));

const step = (msg) => console.log("step: " + msg);
function expect(what, got, want) {
  if (got !== want) throw new Error(`${what}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  console.log(`${what}: ${got}`);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Bounds of the notifications steps: the notifier runs every 2 s under ferry dev, so a
// notification decided now is delivered within a few of its runs.
const deliveryWaitMs = 60_000;
const pollMs = 500;
// The account whose usage crosses 80% of its limit: 8 events of 10.
const notifyAccount = "acct_notify";
const notifyLimit = 10;
const notifyEvents = 8;

// receiver is a webhook endpoint on loopback (ferry dev lets endpoints use http there): it
// answers 200 to every delivery and keeps what it got, raw body included, to verify.
async function startReceiver() {
  const got = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ id: req.headers["webhook-id"], timestamp: req.headers["webhook-timestamp"],
        signature: req.headers["webhook-signature"] || "", body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(200, { "Content-Type": "text/plain" }).end("stored");
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}/ferry`, got, close: () => new Promise((resolve) => {
    server.close(resolve);
    server.closeAllConnections(); // the sender may keep its connection alive
  }) };
}

// signedWith says whether a delivery carries a Standard Webhooks signature made with secret.
function signedWith(delivery, secret) {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const want = "v1," + createHmac("sha256", key).update(`${delivery.id}.${delivery.timestamp}.${delivery.body}`).digest("base64");
  return delivery.signature.split(" ").includes(want);
}

// operatorCall calls the API as a client does, with the operator key (the page is not involved).
async function operatorCall(method, route, key, body) {
  const res = await fetch(base + route, {
    method, body: JSON.stringify(body),
    headers: { Authorization: "Bearer " + key, "Content-Type": "application/json", "Idempotency-Key": randomUUID() },
  });
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${JSON.stringify(data)}`);
  return data;
}

// waitFor polls check until it returns something, for at most ms.
async function waitFor(what, ms, check) {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await sleep(pollMs)) {
    const v = await check();
    if (v) return v;
  }
  throw new Error(what + ": not within " + ms / 1000 + " s");
}

const browser = await chromium.launch({
  executablePath: env("FERRY_CHROMIUM"),
  args: ["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"],
});
const problems = [];
// A refusal the run provokes on purpose is logged by the browser as a failed request; it is not
// a defect while expectedStatus names it.
let expectedStatus = null;
const receiver = await startReceiver();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(20_000);
  // A CSP violation, a script error or a failed request of the page's own is a defect.
  page.on("console", (m) => {
    if (m.type() !== "error" || /status of 401/.test(m.text())) return;
    if (expectedStatus && m.text().includes("status of " + expectedStatus)) return;
    problems.push("console: " + m.text());
  });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const shot = (name) => page.screenshot({ path: path.join(shots, name + ".png"), fullPage: true });
  const open = async (hash, ready) => {
    await page.goto(base + "/console" + hash);
    await page.locator(ready).first().waitFor();
  };

  step("sign in");
  await page.goto(base + "/console");
  await page.locator("#signin").waitFor();
  await shot("signin");
  await page.fill("#key", env("FERRY_CONSOLE_KEY"));
  await page.click("#signin-form button");
  await page.locator("#nav").waitFor();
  const readable = await page.evaluate(() => ({ cookie: document.cookie, local: localStorage.length, session: sessionStorage.length }));
  expect("cookie readable by the page", readable.cookie, "");
  expect("local storage entries", readable.local + readable.session, 0);

  step("accounts");
  await open("#/accounts", `[data-account="${account}"]`);
  await shot("accounts");
  await open("#/accounts/" + account, "table.standing");
  await page.locator("#usage-chart").waitFor();
  await shot("account");
  // The usage chart reads the usage query: its bars and its rows add up to what the cycle's
  // standing says was used (every event of the account was sent today, and every unit's claim
  // writes the rollups the query reads).
  const usage = await page.evaluate(() => ({
    chart: [...document.querySelectorAll("#usage-chart rect")].reduce((s, r) => s + Number(r.dataset.value), 0),
    table: [...document.querySelectorAll("#usage-table tbody td.num")].reduce((s, td) => s + Number(td.textContent), 0),
    used: Number(document.querySelector('table.standing[data-feature="events"] tbody tr td:nth-child(3)').textContent),
  }));
  expect("usage over time, its bars summed", usage.chart, usage.used);
  expect("usage over time, its rows summed", usage.table, usage.used);

  step("events: redrive the UNINSERTABLE event");
  await open("#/events?account=" + account, `[data-redrive="${eventId}"]`);
  await shot("events");
  await page.click(`[data-redrive="${eventId}"]`);
  const redriven = await page.locator(`[data-redriven="${eventId}"]`).textContent();
  console.log("redrive: " + redriven);

  step("holds");
  await open("#/holds?account=" + account, '[data-holds="SETTLED"]');
  await shot("holds");

  const runLab = async (name, ready, timeout) => {
    await open("#/labs", `[data-run-lab="${name}"]`);
    await page.click(`[data-run-lab="${name}"]`);
    await page.locator(`[data-lab-result="${name}"] ${ready}`).first().waitFor({ timeout });
    await page.locator(`[data-lab="${name}"]`).screenshot({ path: path.join(shots, "lab-" + name + ".png") });
    return page.locator(`[data-lab-result="${name}"]`);
  };
  const text = async (loc) => (await loc.textContent()).trim();
  const ferryCell = async (lab, row) => text(lab.locator(`tr[data-row="${row}"] td`).nth(2));

  step("Concurrency Lab");
  const five = await runLab("holds-five", '[data-figure="admitted"]', 60_000);
  expect("holds-five admitted", await text(five.locator('[data-figure="admitted"]')), "2");
  expect("holds-five refused", await text(five.locator('[data-figure="refused"]')), "3");
  expect("holds-five spent", await text(five.locator('[data-figure="spent"]')), "80,000");

  step("Engine Room");
  const nine = await runLab("webhooks-nine", '[data-figure="ferry-plan"]', 180_000);
  expect("engine room: Ferry's plan", await text(nine.locator('[data-figure="ferry-plan"]')), "plus");
  expect("engine room: Ferry's balance", await text(nine.locator('[data-figure="ferry-balance"]')), "500");
  const nineAccount = await text(nine.locator("a").first());

  step("billing events: replay one");
  await open("#/billing?account=" + nineAccount, "#billing-table [data-replay]");
  await shot("billing");
  const replay = page.locator("#billing-table [data-replay]").first();
  const replayed = await replay.getAttribute("data-replay");
  await replay.click();
  console.log("replay: " + (await page.locator(`[data-replayed="${replayed}"]`).first().textContent()));
  await open("#/billing/" + replayed, "#receipts-table");
  await shot("billing-event");

  step("reconciliation lab");
  const rec = await runLab("reconcile", '[data-lab-rows="reconcile"]', 300_000);
  expect("reconcile: second run's verdict", await ferryCell(rec, "second run: verdict"), "under_billed");
  expect("reconcile: next run's verdict", await ferryCell(rec, "next run: verdict"), "match");
  const recAccount = await text(rec.locator("a").first());

  step("reconciliation page: reconcile now");
  await open("#/reconcile?account=" + recAccount, "#evidence-table");
  const verdicts = await page.locator("#evidence-table [data-value]").allTextContents();
  if (!verdicts.includes("under_billed") || !verdicts.includes("match")) throw new Error("evidence verdicts " + verdicts);
  console.log("evidence verdicts: " + verdicts.join(", "));
  await page.click("#reconcile-now");
  await page.locator("#checks-table").waitFor();
  const now = await page.locator('#checks-table [data-value="match"]').count();
  if (now < 1) throw new Error("reconcile now: no match");
  console.log("reconcile now: match");
  await shot("reconcile");

  step("outbox");
  await open("#/outbox?account=" + recAccount, '[data-outbox="dead"]');
  await shot("outbox");

  step("notifications: a refused registration names its fields");
  await open("#/notifications", "#endpoints-table");
  const endpointsBefore = await page.locator("tr[data-endpoint]").count();
  expectedStatus = 400;
  await page.fill("#endpoint-url", "http://10.0.0.1/hook");
  await page.click("#endpoint-register");
  await page.locator('#endpoint-errors li[data-field="url"]').first().waitFor();
  expectedStatus = null;
  console.log("refused: " + (await page.locator("#endpoint-errors li").allTextContents()).join(" | "));
  expect("the URL field marked", await page.getAttribute("#endpoint-url", "aria-invalid"), "true");
  expect("a secret after a refusal", await page.locator("#secret-value").count(), 0);
  expect("endpoints after a refusal", await page.locator("tr[data-endpoint]").count(), endpointsBefore);
  await shot("notifications-refused");

  step("notifications: register an endpoint at a local receiver");
  const note = '<b id="injected">ops</b> & "billing"';
  await page.fill("#endpoint-url", receiver.url);
  await page.check('#endpoint-kinds input[value="threshold.crossed"]');
  await page.fill("#endpoint-accounts", notifyAccount);
  await page.fill("#endpoint-description", note);
  await page.click("#endpoint-register");
  const secret = await text(page.locator("#secret-value"));
  if (!/^whsec_[A-Za-z0-9+/]{43}=$/.test(secret)) throw new Error("the secret shown: " + secret);
  console.log("secret shown once: whsec_…");
  expect("the refusal cleared", await page.locator("#endpoint-errors").isHidden(), true);
  const row = page.locator("tr[data-endpoint]", { has: page.locator("[data-url]", { hasText: receiver.url }) });
  const endpoint = await row.getAttribute("data-endpoint");
  expect("its kinds", await text(row.locator("td").nth(1)), "threshold.crossed");
  expect("its accounts", await text(row.locator("td").nth(2)), notifyAccount);
  expect("its description, as text", await text(row.locator("[data-description]")), note);
  expect("markup it carried, rendered", await page.locator("#injected").count(), 0);
  expect("its secrets", await row.locator("[data-secrets]").getAttribute("data-secrets"), "1");
  const listed = await page.evaluate(async () => (await fetch("/v1/webhook-endpoints")).text());
  expect("the secret in a read", listed.includes(secret), false);
  await page.click("#secret-done");
  expect("the secret after it was put away", await page.locator("#secret-value").count(), 0);
  await shot("notifications");

  step("notifications: cross 80% of a limit, see the delivery");
  const created = await operatorCall("POST", "/v1/accounts", env("FERRY_CONSOLE_KEY"),
    { id: notifyAccount, plan: "free", limits: { events: notifyLimit } });
  for (let i = 0; i < notifyEvents; i++) {
    await operatorCall("POST", "/v1/events", created.apiKey,
      { specversion: "1.0", id: "evt_notify_" + i, source: "/console-test", type: "api.call" });
  }
  await open("#/notifications/" + endpoint, "#deliveries-table");
  const delivered = page.locator('tr[data-delivery][data-status="DELIVERED"]');
  await waitFor("a DELIVERED delivery in the log", deliveryWaitMs, async () => {
    if (await delivered.count() > 0) return true;
    await page.click("#deliveries-refresh");
    return false;
  });
  const notification = await delivered.first().getAttribute("data-delivery");
  const cell = (n) => text(delivered.first().locator("td").nth(n));
  expect("its kind", await cell(1), "threshold.crossed");
  expect("its account", await cell(2), notifyAccount);
  expect("its attempts", await cell(4), "1");
  expect("its last answer", await cell(5), "200");
  expect("deliveries the receiver got", receiver.got.length, 1);
  const first = receiver.got[0];
  expect("its webhook-id", first.id, notification);
  expect("signed with the secret shown", signedWith(first, secret), true);
  const message = JSON.parse(first.body);
  expect("the message's type", message.type, "threshold.crossed");
  expect("the message's threshold", `${message.data.account} ${message.data.percent}% = ${message.data.threshold} of ${message.data.limit}`,
    `${notifyAccount} 80% = 8 of ${notifyLimit}`);

  step("notifications: rotate the secret, replay the delivery");
  await page.click(`[data-rotate="${endpoint}"]`);
  await page.locator(`tr[data-endpoint="${endpoint}"] [data-secrets="2"]`).waitFor();
  const rotated = await text(page.locator("#secret-value"));
  if (!/^whsec_/.test(rotated) || rotated === secret) throw new Error("the rotated secret shown: " + rotated);
  console.log("rotated: a new secret shown once, two signing");
  await page.click("#secret-done");
  await page.click(`[data-replay-delivery="${notification}"]`);
  await waitFor("the replay at the receiver", deliveryWaitMs, () => receiver.got.length >= 2);
  await page.locator(`tr[data-delivery="${notification}"][data-status="DELIVERED"][data-replays="1"]`).waitFor({ timeout: deliveryWaitMs });
  const again = receiver.got[1];
  expect("the replay's webhook-id", again.id, notification);
  expect("the replay's body, as first sent", again.body, first.body);
  expect("the replay signed with the new secret and the old", signedWith(again, rotated) && signedWith(again, secret), true);
  console.log("receiver: the replay came with the same webhook-id");
  await shot("notifications-endpoint");

  step("notifications: disable, enable, delete");
  await page.click(`[data-toggle="${endpoint}"]`);
  await page.locator(`tr[data-endpoint="${endpoint}"] [data-value="disabled"]`).waitFor();
  await page.click(`[data-toggle="${endpoint}"]`);
  await page.locator(`tr[data-endpoint="${endpoint}"] [data-value="enabled"]`).waitFor();
  console.log("disabled, then enabled");
  await page.click(`[data-delete="${endpoint}"]`);
  await page.click(`[data-endpoint="${endpoint}"] .confirm button.secondary`);
  expect("a delete kept", await page.locator(`[data-confirm-delete="${endpoint}"]`).count(), 0);
  await page.click(`[data-delete="${endpoint}"]`);
  await page.click(`[data-confirm-delete="${endpoint}"]`);
  await page.waitForURL(/#\/notifications$/);
  await page.locator("#endpoints-table").waitFor();
  expect("the endpoint listed after its delete", await page.locator(`tr[data-endpoint="${endpoint}"]`).count(), 0);
  console.log("deleted");

  step("sign out");
  await page.click("#signout");
  await page.locator("#signin").waitFor();
  const after = await page.evaluate(async () => (await fetch("/v1/accounts")).status);
  expect("a read after signing out", after, 401);
  await shot("signed-out");
  if (problems.length) throw new Error(problems.join("\n"));
  console.log("ok");
} catch (err) {
  console.log("FAILED: " + err.message);
  if (problems.length) console.log(problems.join("\n"));
  process.exitCode = 1;
} finally {
  await browser.close();
  await receiver.close();
}
