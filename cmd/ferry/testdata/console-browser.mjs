// The console's browser run (TestConsole_InABrowser starts the stack and this script): headless
// Chromium through playwright-core, every page opened, one action of each kind, the three labs.
// It prints one line per step and exits non-zero at the first thing that is not as it should be.
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

const browser = await chromium.launch({
  executablePath: env("FERRY_CHROMIUM"),
  args: ["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"],
});
const problems = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(20_000);
  // A CSP violation, a script error or a failed request of the page's own is a defect.
  page.on("console", (m) => { if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push("console: " + m.text()); });
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
}
