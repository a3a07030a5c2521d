// Ferry's operator console. Everything it shows comes from Ferry's own HTTP API, called with the
// session cookie (HttpOnly: this script never sees it) and, on every request that changes
// something, the session's CSRF token and a fresh Idempotency-Key. The DOM is built with
// createElement and textContent only: no HTML string is ever parsed (the page's Trusted Types
// policy forbids it).

let csrf = null; // the session's CSRF token, kept in memory only

const $ = (id) => document.getElementById(id);

// el builds an element: el("td", {class: "num"}, "text", childNode, ...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const svgNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

const fmt = (n) => (n === null || n === undefined ? "—" : typeof n === "number" ? n.toLocaleString("en-US") : String(n));

function badge(text) {
  const t = String(text || "");
  const cls = /^(match|APPLIED|INSERTED|SETTLED|SENT|DELIVERED|admitted|ok|ACTIVE|active|enabled)$/.test(t) ? "ok"
    : /(DEAD|REJECTED|UNINSERTABLE|under_billed|over_billed|refused|failed|FAILED|dead)/.test(t) ? "bad"
    : /(RUNNING|PENDING|SENDING|retrying|IGNORED|REVIEW|EXPIRED|pending|disabled)/.test(t) ? "warn" : "";
  return el("span", { class: "badge " + cls, "data-value": t }, t || "—");
}

// ApiError is a problem+json answer.
class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || "HTTP " + status);
    this.status = status;
    this.body = body;
  }
}

// api calls Ferry's API with the session cookie; a method that changes something carries the
// CSRF token and an Idempotency-Key.
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers["X-CSRF-Token"] = csrf || "";
    headers["Idempotency-Key"] = crypto.randomUUID();
    headers["Content-Type"] = "application/json";
  }
  const res = await fetch(path, {
    method, headers, credentials: "same-origin", cache: "no-store",
    body: method === "GET" || method === "DELETE" ? undefined : JSON.stringify(body || {}),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (res.status === 401 && path !== "/v1/sessions") {
    signedOut("The session has ended: sign in again.");
    throw new ApiError(401, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = err instanceof ApiError ? `${err.status}: ${err.message}` : String(err.message || err);
}

// ---- session ---------------------------------------------------------------------------------

function signedIn(sess) {
  csrf = sess.csrfToken;
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("signout").hidden = false;
  $("view").hidden = false;
  $("session").textContent = "signed in until " + new Date(sess.expiresAt).toLocaleTimeString();
  route();
}

function signedOut(message) {
  csrf = null;
  $("signin").hidden = false;
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("view").hidden = true;
  $("view").replaceChildren();
  $("session").textContent = "";
  showError(message ? new Error(message) : null);
}

async function signIn(ev) {
  ev.preventDefault();
  const input = $("key");
  const key = input.value.trim();
  input.value = "";
  showError(null);
  try {
    const res = await fetch("/v1/sessions", {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { Authorization: "Bearer " + key, Accept: "application/json" },
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new ApiError(res.status, data);
    signedIn(data);
  } catch (err) {
    showError(err);
  }
}

async function signOut() {
  try { await api("DELETE", "/v1/sessions/current"); } catch (err) { if (!(err instanceof ApiError && err.status === 401)) showError(err); }
  signedOut("Signed out.");
}

// ---- routing ---------------------------------------------------------------------------------

// The view is the URL's fragment: #/page?account=…&…
function current() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  return { path: path || "/accounts", params: new URLSearchParams(query || "") };
}

function go(path, params) {
  const q = new URLSearchParams(params || {}).toString();
  location.hash = "#" + path + (q ? "?" + q : "");
}

const pages = {};

async function route() {
  if (!csrf) return;
  const { path, params } = current();
  for (const a of $("nav").querySelectorAll("a")) a.classList.toggle("active", a.getAttribute("href") === "#" + path.split("/").slice(0, 2).join("/"));
  showError(null);
  const view = $("view");
  const parts = path.split("/").filter(Boolean);
  const page = pages[parts[0]] || pages.accounts;
  view.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  try {
    const content = await page(params, parts.slice(1));
    view.replaceChildren(...[content].flat());
    view.dataset.page = parts[0] || "accounts";
  } catch (err) {
    view.replaceChildren();
    showError(err);
  }
}

// ---- helpers for pages -----------------------------------------------------------------------

function table(columns, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null }, c.label)))),
    el("tbody", {}, rows.length === 0
      ? el("tr", {}, el("td", { colspan: columns.length, class: "muted" }, "None."))
      : rows.map((r) => tableRow(columns, r))));
}

// tableRow is one row of a table: a page that refreshes a single row (after a replay, say)
// builds it with the same columns.
function tableRow(columns, r) {
  return el("tr", r.attrs || {}, columns.map((c) => {
    const v = c.get(r);
    return el("td", { class: c.num ? "num" : null }, v instanceof Node ? v : fmt(v));
  }));
}

// accountForm is the account picker most pages start with.
function accountForm(path, params, extra) {
  const input = el("input", { name: "account", value: params.get("account") || "", placeholder: "account id", required: true });
  const fields = [el("label", {}, "Account", input)];
  for (const f of extra || []) fields.push(f);
  return el("form", {
    class: "inline", onsubmit: (ev) => {
      ev.preventDefault();
      const next = {};
      for (const [k, v] of new FormData(ev.target)) if (v) next[k] = v;
      go(path, next);
    },
  }, fields, el("button", { type: "submit" }, "Show"));
}

function accountLinks(id) {
  const q = "?account=" + encodeURIComponent(id);
  return el("p", {},
    ["events", "holds", "billing", "reconcile", "outbox"].map((p) => [el("a", { href: "#/" + p + q }, p === "billing" ? "billing events" : p === "reconcile" ? "reconciliation" : p), " · "]).flat().slice(0, -1));
}

// action runs a state-changing call from a button and shows what came back.
function actionButton(label, run, attrs) {
  const b = el("button", Object.assign({ type: "button" }, attrs || {}), label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    showError(null);
    try {
      await run(b);
    } catch (err) {
      showError(err);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

// ---- accounts --------------------------------------------------------------------------------

pages.accounts = async (params, rest) => {
  if (rest.length > 0) return accountPage(decodeURIComponent(rest[0]), params);
  const prefix = params.get("prefix") || "";
  const query = new URLSearchParams({ limit: "50" });
  if (params.get("linkedId")) query.set("linkedId", params.get("linkedId"));
  else if (prefix) query.set("prefix", prefix);
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  const page = await api("GET", "/v1/accounts?" + query);
  const form = el("form", {
    class: "inline", onsubmit: (ev) => {
      ev.preventDefault();
      const v = new FormData(ev.target);
      const next = {};
      if (v.get("prefix")) next.prefix = v.get("prefix");
      if (v.get("linkedId")) next.linkedId = v.get("linkedId");
      go("/accounts", next);
    },
  },
  el("label", {}, "Id starts with", el("input", { name: "prefix", value: prefix, placeholder: "acct_" })),
  el("label", {}, "or linked provider id", el("input", { name: "linkedId", value: params.get("linkedId") || "", placeholder: "cus_… / kp_… / agreement" })),
  el("button", { type: "submit" }, "Search"));
  const rows = page.items.map((a) => Object.assign({ attrs: { "data-account": a.id } }, a));
  const out = [el("h1", {}, "Accounts"), form, table([
    { label: "Account", get: (a) => el("a", { href: "#/accounts/" + encodeURIComponent(a.id) }, a.id) },
    { label: "Plan", get: (a) => a.plan },
    { label: "Status", get: (a) => badge(a.status) },
    { label: "Kinde customer", get: (a) => a.kindeCustomerId },
    { label: "Stripe customer", get: (a) => a.stripeCustomerId },
    { label: "Kinde agreement", get: (a) => a.kindeAgreementId },
    { label: "Created", get: (a) => a.createdAt },
  ], rows, { id: "accounts-table" })];
  if (page.next) out.push(el("a", { href: "#/accounts?" + new URLSearchParams({ prefix, cursor: page.next }) }, "Next page →"));
  return out;
};

async function accountPage(id, params) {
  const [a, standing] = await Promise.all([
    api("GET", "/v1/accounts/" + encodeURIComponent(id)),
    api("GET", "/v1/accounts/" + encodeURIComponent(id) + "/standing"),
  ]);
  const cards = el("div", { class: "cards" },
    el("div", { class: "card" }, el("div", { class: "muted" }, "Plan"), el("div", { class: "big", id: "account-plan" }, a.plan)),
    el("div", { class: "card" }, el("div", { class: "muted" }, "Status"), el("div", { class: "big" }, badge(a.status))),
    el("div", { class: "card" }, el("div", { class: "muted" }, "Linked customers"),
      el("div", {}, "Kinde: ", fmt(a.kindeCustomerId)), el("div", {}, "Stripe: ", fmt(a.stripeCustomerId)),
      el("div", {}, "Kinde agreement: ", fmt(a.kindeAgreementId))),
    el("div", { class: "card" }, el("div", { class: "muted" }, "Created"), el("div", {}, a.createdAt),
      el("div", { class: "muted" }, "Agreement day"), el("div", {}, fmt(a.agreementStart))));
  const out = [el("h1", {}, "Account ", el("code", {}, a.id)), accountLinks(a.id), cards, el("h2", {}, "Standing per feature and cycle")];
  for (const f of standing.features) {
    out.push(el("h2", {}, f.feature, f.allowance ? el("span", { class: "muted" }, " (allowance)") : null));
    out.push(el("div", { class: "cards" }, el("div", {}, chart(f.cycles)),
      table([
        { label: "Cycle", get: (c) => c.cycle },
        { label: "Limit", num: true, get: (c) => (c.limit === null ? "unlimited" : c.limit) },
        { label: "Used", num: true, get: (c) => c.used },
        { label: "Held", num: true, get: (c) => c.held },
        { label: "Remaining", num: true, get: (c) => c.remaining },
      ], f.cycles.slice().reverse(), { "data-feature": f.feature, class: "standing" })));
  }
  return out.concat(await usageSection(id, params || new URLSearchParams()));
}

// usageDays is how many days the account page's usage chart shows (today's included).
const usageDays = 30;
// usageColours is how many groups the chart tells apart by colour (.g0 … .g5); more share them.
const usageColours = 6;

// usageSection is a meter's usage per day over the last usageDays days (UTC), one stacked bar a
// day and one colour a group, read from GET /v1/usage/query; the form picks the meter and the
// dimension to group by, kept in the URL.
async function usageSection(id, params) {
  const meter = params.get("meter") || "events";
  const groupBy = params.get("groupBy") || "";
  const to = new Date();
  to.setUTCHours(0, 0, 0, 0);
  to.setUTCDate(to.getUTCDate() + 1);
  const from = new Date(to.getTime() - usageDays * 86400000);
  const iso = (d) => d.toISOString().replace(/\.\d{3}Z$/, "Z");
  const form = el("form", {
    class: "inline", id: "usage-form", onsubmit: (ev) => {
      ev.preventDefault();
      const next = {};
      for (const [k, v] of new FormData(ev.target)) if (v) next[k] = v;
      go("/accounts/" + encodeURIComponent(id), next);
    },
  }, el("label", {}, "Meter", el("input", { name: "meter", value: meter })),
  el("label", {}, "Group by", el("input", { name: "groupBy", value: groupBy, placeholder: "a dimension (optional)" })),
  el("button", { type: "submit" }, "Show"));
  const out = [el("h2", {}, "Usage over time"), form];
  const q = new URLSearchParams({ account: id, meter, window: "DAY", from: iso(from), to: iso(to) });
  if (groupBy) q.set("groupBy", groupBy);
  let res;
  try {
    res = await api("GET", "/v1/usage/query?" + q);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 400) throw err;
    // A meter or dimension this deployment does not have: the problem names what it has.
    return out.concat(el("p", { class: "muted", id: "usage-refused" }, err.message));
  }
  const days = [];
  for (let t = from.getTime(); t < to.getTime(); t += 86400000) days.push(iso(new Date(t)));
  const label = (r) => (r.other ? "other" : groupBy ? (r.group[groupBy] === "" ? "(none)" : r.group[groupBy]) : res.meter);
  const groups = [...new Set(res.rows.map(label))];
  out.push(el("p", { class: "muted" }, `${res.meter} (${res.aggregation}) per day, UTC, from ${days[0].slice(0, 10)}`),
    usageChart(days, groups, res.rows, label),
    el("div", { class: "legend", id: "usage-legend" }, groups.map((g, i) => el("span", { "data-group": g }, el("i", { class: "g" + (i % usageColours) }), g))),
    table([
      { label: "Day", get: (r) => r.windowStart.slice(0, 10) },
      { label: "Group", get: (r) => label(r) },
      { label: "Value", num: true, get: (r) => r.value },
    ], res.rows.slice().reverse(), { id: "usage-table" }));
  return out;
}

// usageChart stacks each day's groups as bars, scaled to the largest day.
function usageChart(days, groups, rows, label) {
  const col = 18, w = col * days.length + 40, h = 140, base = 110;
  const byDay = new Map(days.map((d) => [d, []]));
  for (const r of rows) if (byDay.has(r.windowStart)) byDay.get(r.windowStart).push(r);
  const top = Math.max(1, ...days.map((d) => byDay.get(d).reduce((s, r) => s + r.value, 0)));
  const s = svg("svg", { class: "chart usage", id: "usage-chart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  s.append(svg("title", {}, "usage per day, stacked by group"));
  s.append(svg("text", { x: 2, y: 10 }, String(top)));
  days.forEach((d, i) => {
    const x = 30 + i * col;
    let y = base;
    for (const r of byDay.get(d)) {
      const height = (r.value / top) * (base - 14);
      y -= height;
      const g = groups.indexOf(label(r));
      const bar = svg("rect", { class: "g" + (g % usageColours), x, y, width: col - 4, height, "data-day": d.slice(0, 10), "data-value": r.value });
      bar.append(svg("title", {}, `${d.slice(0, 10)} ${label(r)}: ${r.value}`));
      s.append(bar);
    }
    if (i % 5 === 0) s.append(svg("text", { x, y: base + 14 }, d.slice(5, 10)));
  });
  return s;
}

// chart draws a cycle's used and held as bars against its limit.
function chart(cycles) {
  const w = 36 * cycles.length + 20, h = 120, base = 100;
  // A limit is a number, or null when unlimited.
  const top = Math.max(1, ...cycles.map((c) => Math.max(c.used + c.held, c.limit === null ? 0 : c.limit)));
  const s = svg("svg", { class: "chart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  s.append(svg("title", {}, "used and held per cycle, against the limit"));
  cycles.forEach((c, i) => {
    const x = 14 + i * 36;
    const used = (c.used / top) * (base - 10), held = (c.held / top) * (base - 10);
    s.append(svg("rect", { class: "used", x, y: base - used, width: 22, height: used }));
    s.append(svg("rect", { class: "held", x, y: base - used - held, width: 22, height: held }));
    if (c.limit !== null) {
      const y = base - (c.limit / top) * (base - 10);
      s.append(svg("line", { class: "limit", x1: x - 3, x2: x + 25, y1: y, y2: y }));
    }
    s.append(svg("text", { x: x - 2, y: base + 14 }, c.cycle.slice(2)));
  });
  return s;
}

// ---- events ----------------------------------------------------------------------------------

pages.events = async (params) => {
  const account = params.get("account");
  const out = [el("h1", {}, "Events"), accountForm("/events", params, [
    el("label", {}, "Event id (optional)", el("input", { name: "id", value: params.get("id") || "", placeholder: "evt_…" })),
  ])];
  if (!account) return out.concat(el("p", { class: "muted" }, "Name an account to see its REJECTED and UNINSERTABLE events, or look one event up."));
  out.push(accountLinks(account));
  if (params.get("id")) {
    const e = await api("GET", "/v1/events/" + encodeURIComponent(params.get("id")) + "?account=" + encodeURIComponent(account));
    out.push(el("h2", {}, "Event ", el("code", {}, e.id)), table([
      { label: "Status", get: (x) => badge(x.status) }, { label: "Cycle", get: (x) => x.cycle },
      { label: "Received", get: (x) => x.receivedAt }, { label: "Billed", get: (x) => x.billingAcceptedAt },
      { label: "Reason", get: (x) => x.reason },
    ], [e], { id: "event-detail" }));
  }
  const q = (status) => "/v1/events?" + new URLSearchParams({ account, status, limit: "50" });
  const [rejected, uninsertable] = await Promise.all([api("GET", q("REJECTED")), api("GET", q("UNINSERTABLE"))]);
  out.push(el("h2", {}, "UNINSERTABLE"), el("p", { class: "muted" },
    "Billed, but their row was refused by the analytics table. Redrive once the cause is fixed: the event is stored without being billed again."));
  out.push(table([
    { label: "Event", get: (e) => el("code", {}, e.id) }, { label: "Cycle", get: (e) => e.cycle },
    { label: "Received", get: (e) => e.receivedAt }, { label: "Reason", get: (e) => e.reason },
    { label: "", get: (e) => actionButton("Redrive", async (b) => {
      const res = await api("POST", "/v1/events/" + encodeURIComponent(e.id) + "/redrive", { account });
      b.replaceWith(el("span", { class: "badge warn", "data-redriven": e.id }, "queued again (was " + res.was + ")"));
    }, { "data-redrive": e.id }) },
  ], uninsertable.items, { id: "uninsertable-table" }));
  out.push(el("h2", {}, "REJECTED"), el("p", { class: "muted" }, "Refused before billing, with the reason; nothing was billed."));
  out.push(table([
    { label: "Event", get: (e) => el("code", {}, e.id) }, { label: "Cycle", get: (e) => e.cycle },
    { label: "Received", get: (e) => e.receivedAt }, { label: "Reason", get: (e) => e.reason },
  ], rejected.items, { id: "rejected-table" }));
  return out;
};

// ---- holds -----------------------------------------------------------------------------------

pages.holds = async (params) => {
  const account = params.get("account");
  const out = [el("h1", {}, "Holds"), accountForm("/holds", params)];
  if (!account) return out.concat(el("p", { class: "muted" }, "Name an account to see its running, expired and settled holds."));
  out.push(accountLinks(account));
  const lists = await Promise.all(["RUNNING", "EXPIRED", "SETTLED"].map((s) =>
    api("GET", "/v1/holds?" + new URLSearchParams({ account, status: s, limit: "50" })).then((p) => [s, p.items])));
  for (const [status, items] of lists) {
    out.push(el("h2", {}, status.charAt(0) + status.slice(1).toLowerCase()), table([
      { label: "Hold", get: (h) => el("code", {}, h.id) }, { label: "Key", get: (h) => h.key },
      { label: "Feature", get: (h) => h.feature }, { label: "Cycle", get: (h) => h.cycle },
      { label: "Amount", num: true, get: (h) => h.amount }, { label: "Used", num: true, get: (h) => h.used },
      { label: "Charged", num: true, get: (h) => h.charged }, { label: "Released", num: true, get: (h) => h.released },
      { label: status === "RUNNING" ? "Lease until" : "Settled", get: (h) => (status === "RUNNING" ? h.leaseExpiresAt : h.settledAt) },
    ], items, { "data-holds": status }));
  }
  return out;
};

// ---- billing events --------------------------------------------------------------------------

pages.billing = async (params, rest) => {
  if (rest.length > 0) return billingEventPage(decodeURIComponent(rest[0]));
  const account = params.get("account") || "";
  const status = params.get("status") || "";
  const statusSelect = el("select", { name: "status" }, ["", "RECEIVED", "PROCESSING", "APPLIED", "IGNORED", "FAILED", "DEAD"].map((s) =>
    el("option", { value: s, selected: s === status }, s || "any status")));
  const form = el("form", {
    class: "inline", onsubmit: (ev) => {
      ev.preventDefault();
      const next = {};
      for (const [k, v] of new FormData(ev.target)) if (v) next[k] = v;
      go("/billing", next);
    },
  }, el("label", {}, "Account (optional)", el("input", { name: "account", value: account, placeholder: "account id" })),
  el("label", {}, "Status", statusSelect), el("button", { type: "submit" }, "Show"));
  const list = (st) => {
    const q = new URLSearchParams({ limit: "50" });
    if (account) q.set("account", account);
    if (st) q.set("status", st);
    return api("GET", "/v1/billing-events?" + q);
  };
  const cols = [
    { label: "Event", get: (e) => el("a", { href: "#/billing/" + encodeURIComponent(e.id) }, e.id) },
    { label: "Source", get: (e) => e.source }, { label: "Type", get: (e) => e.type },
    { label: "Account", get: (e) => e.accountId }, { label: "Seen", num: true, get: (e) => e.seenCount },
    { label: "Status", get: (e) => badge(e.status) }, { label: "Reason", get: (e) => e.reason || e.result },
    { label: "", get: (e) => replayButton(e) },
  ];
  const out = [el("h1", {}, "Billing events"), form];
  if (status) {
    out.push(table(cols, (await list(status)).items, { id: "billing-table" }));
    return out;
  }
  const [all, dead, ignored] = await Promise.all([list(""), list("DEAD"), list("IGNORED")]);
  out.push(el("h2", {}, "DEAD"), el("p", { class: "muted" }, "Out of attempts; nothing more happens until someone replays them."),
    table(cols, dead.items, { id: "dead-table" }));
  out.push(el("h2", {}, "IGNORED"), el("p", { class: "muted" }, "Stored and deliberately not applied (older than what the account has, or not Ferry's)."),
    table(cols, ignored.items, { id: "ignored-table" }));
  out.push(el("h2", {}, "Latest"), table(cols, all.items, { id: "billing-table" }));
  return out;
};

function replayButton(e) {
  return actionButton("Replay", async (b) => {
    const res = await api("POST", "/v1/billing-events/" + encodeURIComponent(e.id) + "/replay", {});
    b.replaceWith(el("span", { class: "badge warn", "data-replayed": e.id }, "replayed: " + res.status));
  }, { "data-replay": e.id });
}

async function billingEventPage(id) {
  const e = await api("GET", "/v1/billing-events/" + encodeURIComponent(id));
  return [el("h1", {}, "Billing event ", el("code", {}, e.id)),
    table([
      { label: "Source", get: (x) => x.source }, { label: "Provider id", get: (x) => x.providerEventId },
      { label: "Type", get: (x) => x.type }, { label: "Occurred", get: (x) => x.occurredAt },
      { label: "Seen", num: true, get: (x) => x.seenCount }, { label: "Status", get: (x) => badge(x.status) },
      { label: "Attempts", num: true, get: (x) => x.attempts }, { label: "Account", get: (x) => x.accountId },
      { label: "Result / reason", get: (x) => x.reason || x.result },
    ], [e], { id: "billing-detail" }),
    el("p", {}, replayButton(e)),
    el("h2", {}, "Receipts (every delivery, copies included)"),
    table([
      { label: "Received", get: (r) => r.receivedAt }, { label: "Copy", get: (r) => (r.duplicate ? "yes" : "first") },
      { label: "Webhook id", get: (r) => r.webhookId }, { label: "Key", get: (r) => r.keyId },
      { label: "Payload SHA-256", get: (r) => el("code", {}, r.payloadSha256) },
    ], e.receipts || [], { id: "receipts-table" })];
}

// ---- reconciliation --------------------------------------------------------------------------

pages.reconcile = async (params) => {
  const account = params.get("account");
  const out = [el("h1", {}, "Reconciliation"), accountForm("/reconcile", params, [
    el("label", {}, "Cycle (optional)", el("input", { name: "cycle", value: params.get("cycle") || "", placeholder: "YYYY-MM" })),
  ])];
  const review = api("GET", "/v1/reconcile/review");
  if (account) {
    out.push(accountLinks(account));
    const result = el("div", { id: "reconcile-result" });
    out.push(el("p", {}, actionButton("Reconcile now", async () => {
      const body = { account };
      if (params.get("cycle")) body.cycle = params.get("cycle");
      const res = await api("POST", "/v1/reconcile", body);
      result.replaceChildren(el("h2", {}, "This run"), checksTable(res.results));
      await refreshEvidence();
    }, { id: "reconcile-now" })), result);
    const evidence = el("div", { id: "evidence" });
    out.push(el("h2", {}, "Evidence history"), evidence);
    const refreshEvidence = async () => {
      const q = new URLSearchParams({ account });
      if (params.get("cycle")) q.set("cycle", params.get("cycle"));
      const ev = await api("GET", "/v1/reconcile/evidence?" + q);
      evidence.replaceChildren(el("p", { class: "muted" }, "Cycle " + ev.cycle + ": one row per distinct set of numbers, oldest first."),
        table([
          { label: "At", get: (r) => r.at }, { label: "Feature", get: (r) => r.feature }, { label: "Provider", get: (r) => r.provider },
          { label: "Ledger", num: true, get: (r) => r.ledger }, { label: "Last sent", num: true, get: (r) => r.sent },
          { label: "Provider meter", num: true, get: (r) => r.meter }, { label: "Verdict", get: (r) => badge(r.verdict) },
          { label: "Cause", get: (r) => r.cause }, { label: "Repair", num: true, get: (r) => r.repair },
          { label: "Read back", num: true, get: (r) => r.readBack }, { label: "Confirmed", get: (r) => (r.confirmed ? "yes" : "no") },
        ], ev.evidence, { id: "evidence-table" }));
    };
    await refreshEvidence();
  }
  const rv = await review;
  out.push(el("h2", {}, "Review list"), el("p", { class: "muted" }, "What a person must settle: closed cycles that drifted, over-billing that can no longer be cancelled."),
    table([
      { label: "Account", get: (e) => el("a", { href: "#/reconcile?account=" + encodeURIComponent(e.account) }, e.account) },
      { label: "Feature", get: (e) => e.feature }, { label: "Cycle", get: (e) => e.cycle }, { label: "Provider", get: (e) => e.provider },
      { label: "Reason", get: (e) => badge(e.reason) }, { label: "Ledger", num: true, get: (e) => e.ledger },
      { label: "Sent", num: true, get: (e) => e.sent }, { label: "Meter", num: true, get: (e) => e.meter },
      { label: "Detail", get: (e) => e.detail }, { label: "At", get: (e) => e.at },
    ], rv.entries, { id: "review-table" }));
  return out;
};

function checksTable(results) {
  const rows = [];
  for (const r of results) for (const c of r.checks) rows.push(Object.assign({ feature: r.feature, cycle: r.cycle, error: r.error }, c));
  return table([
    { label: "Feature", get: (c) => c.feature }, { label: "Cycle", get: (c) => c.cycle }, { label: "Provider", get: (c) => c.provider },
    { label: "Ledger", num: true, get: (c) => c.ledger }, { label: "Last sent", num: true, get: (c) => c.sent },
    { label: "Provider meter", num: true, get: (c) => c.meter }, { label: "Verdict", get: (c) => badge(c.verdict) },
    { label: "Cause", get: (c) => c.cause || c.error }, { label: "Repair", num: true, get: (c) => c.repair },
    { label: "Confirmed", get: (c) => (c.confirmed ? "yes" : "no") },
  ], rows, { id: "checks-table" });
}

// ---- outbox ----------------------------------------------------------------------------------

pages.outbox = async (params) => {
  const account = params.get("account");
  const out = [el("h1", {}, "Stripe outbox"), accountForm("/outbox", params, [
    el("label", {}, "Cycle (optional)", el("input", { name: "cycle", value: params.get("cycle") || "", placeholder: "YYYY-MM" })),
  ])];
  if (!account) return out.concat(el("p", { class: "muted" }, "Name an account to see its meter events owed to Stripe: pending, retrying and dead."));
  out.push(accountLinks(account));
  const q = new URLSearchParams({ account });
  if (params.get("cycle")) q.set("cycle", params.get("cycle"));
  const ob = await api("GET", "/v1/outbox?" + q);
  const cols = [
    { label: "Feature", get: (r) => r.feature }, { label: "Key", get: (r) => el("code", {}, r.key) }, { label: "Kind", get: (r) => r.kind },
    { label: "Status", get: (r) => badge(r.status) }, { label: "Total", num: true, get: (r) => r.total },
    { label: "Value", num: true, get: (r) => r.delta }, { label: "Attempts", num: true, get: (r) => r.attempts },
    { label: "Next attempt", get: (r) => r.nextAttemptAt }, { label: "Last error", get: (r) => r.lastError },
    { label: "Sent", get: (r) => r.sentAt },
  ];
  out.push(el("p", { class: "muted" }, "Cycle " + ob.cycle + "."));
  for (const [state, title] of [["pending", "Pending"], ["retrying", "Retrying"], ["dead", "Dead"], ["done", "Sent, cancelled or on review"]]) {
    out.push(el("h2", {}, title), table(cols, ob.rows[state], { "data-outbox": state }));
  }
  return out;
};

// ---- notifications ---------------------------------------------------------------------------

// The kinds of notification Ferry sends (NotificationKind in api/openapi.yaml). An endpoint that
// lists none is sent every kind, kinds added later included.
const notificationKinds = [
  "threshold.crossed", "threshold.resolved", "limit.reached", "hold.refused", "reconcile.mismatch",
  "outbox.dead", "billing_event.dead", "account.plan_changed", "account.status_changed",
];
// The fields of a registration, as the API names them at the start of each problem it lists.
const endpointFields = ["url", "kinds", "accounts", "description"];
// deliveriesPageSize is how many deliveries a page of the log shows (the route takes 1 to 100).
const deliveriesPageSize = 20;
// While a delivery on the page waits or is being sent, the log reads itself again every
// logRefreshMs, at most logRefreshesMax times in a row (a minute), and never once it is left.
const logRefreshMs = 2000;
const logRefreshesMax = 30;

const endpointPath = (id) => "/v1/webhook-endpoints/" + encodeURIComponent(id);

// when shows an instant the API gave (RFC 3339, UTC) to the second, the whole of it on hover.
const when = (at) => (at ? el("time", { datetime: at, title: at }, at.replace("T", " ").replace(/\.\d+Z$/, "Z")) : null);

pages.notifications = async (params, rest) => {
  if (rest.length > 0) return endpointPage(decodeURIComponent(rest[0]), params);
  const list = el("div", { id: "endpoints" });
  const ctx = { secretBox: secretBox() };
  ctx.refresh = async () => {
    const page = await api("GET", "/v1/webhook-endpoints");
    list.replaceChildren(endpointsTable(page.items, ctx));
  };
  ctx.deleted = ctx.refresh;
  await ctx.refresh();
  return [el("h1", {}, "Notifications"),
    el("p", { class: "muted" }, "The webhook endpoints Ferry sends its notifications to, signed as Standard Webhooks. " +
      "A signing secret is shown once, when it is made; every read shows only when each secret was made and when it stops signing."),
    ctx.secretBox, list, el("h2", {}, "Register an endpoint"), endpointForm(ctx)];
};

// secretBox is where a secret the API just returned is shown, once.
function secretBox() {
  return el("div", { id: "secret-box", class: "secret", role: "status", hidden: true });
}

// showSecret puts a secret the API returned this once in box, until the operator hides it or
// leaves the page: nothing keeps it, and no read can show it again.
function showSecret(box, what, secret, more) {
  const value = el("code", { id: "secret-value" }, secret);
  const copy = el("button", { type: "button" }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(secret);
      copy.textContent = "Copied";
    } catch {
      // No clipboard here (refused, or an origin the browser does not trust): select it instead.
      getSelection().selectAllChildren(value);
      copy.textContent = "Selected: copy it with Ctrl-C";
    }
  });
  const done = el("button", { type: "button", class: "secondary", id: "secret-done" }, "I have stored it");
  done.addEventListener("click", () => { box.hidden = true; box.replaceChildren(); });
  box.replaceChildren(
    el("p", {}, el("strong", {}, "Copy it now. "), "This is " + what + ". Ferry shows it this once: no read shows it again, " +
      "and a lost secret is replaced by rotating."),
    el("p", {}, value, " ", copy, " ", done),
    more ? el("p", { class: "muted" }, more) : null);
  box.hidden = false;
  box.scrollIntoView({ block: "nearest" });
}

function endpointsTable(items, ctx) {
  const every = (what) => el("span", { class: "muted" }, what);
  return table([
    { label: "Endpoint", get: (e) => el("div", {}, el("code", { "data-url": "" }, e.url),
      el("div", {}, el("a", { href: "#/notifications/" + encodeURIComponent(e.id) }, e.id))) },
    { label: "Kinds", get: (e) => (e.kinds.length ? e.kinds.join(", ") : every("every kind")) },
    { label: "Accounts", get: (e) => (e.accounts.length ? e.accounts.join(", ") : every("every account")) },
    { label: "Description", get: (e) => el("span", { "data-description": "" }, fmt(e.description)) },
    { label: "State", get: (e) => badge(e.disabled ? "disabled" : "enabled") },
    { label: "Signing secrets", get: (e) => secretsCell(e.secrets) },
    { label: "Created", get: (e) => when(e.createdAt) },
    { label: "", get: (e) => endpointActions(e, ctx) },
  ], items.map((e) => Object.assign({ attrs: { "data-endpoint": e.id } }, e)), { id: "endpoints-table" });
}

// secretsCell says how many secrets sign and until when: reads never carry a secret's value.
function secretsCell(secrets) {
  return el("div", { "data-secrets": secrets.length }, secrets.map((s) => el("div", {},
    s.expiresAt ? ["previous, signs until ", when(s.expiresAt)] : ["current, since ", when(s.createdAt)])));
}

// endpointActions are an endpoint's buttons: rotate its secret, disable or enable it, delete it
// (asked once more in the page). Each refreshes what the page shows of it.
function endpointActions(e, ctx) {
  const path = endpointPath(e.id);
  const rotate = actionButton("Rotate secret", async () => {
    const res = await api("POST", path + "/rotate-secret", {});
    showSecret(ctx.secretBox, "the new signing secret of " + e.id, res.secret, res.previousSecretExpiresAt
      ? "The secret it replaces keeps signing until " + res.previousSecretExpiresAt +
        ": give the receiver the new one beside the old, and drop the old one after that."
      : null);
    await ctx.refresh();
  }, { class: "secondary", "data-rotate": e.id });
  const toggle = actionButton(e.disabled ? "Enable" : "Disable", async () => {
    await api("PATCH", path, { disabled: !e.disabled });
    await ctx.refresh();
  }, { class: "secondary", "data-toggle": e.id });
  const del = actionButton("Delete", async (b) => {
    const yes = actionButton("Delete " + e.id, async () => {
      await api("DELETE", path);
      await ctx.deleted();
    }, { class: "danger", "data-confirm-delete": e.id });
    const no = el("button", { type: "button", class: "secondary" }, "Keep it");
    const ask = el("span", { class: "confirm" }, "It is sent nothing more, and its pending deliveries end DEAD. ", yes, " ", no);
    no.addEventListener("click", () => ask.replaceWith(b));
    b.replaceWith(ask);
  }, { class: "secondary", "data-delete": e.id });
  return el("div", { class: "actions" }, rotate, toggle, del);
}

// endpointForm registers an endpoint. A refusal lists every problem the API named, each under
// the form and its field marked; nothing was stored.
function endpointForm(ctx) {
  const url = el("input", { name: "url", id: "endpoint-url", required: true, inputmode: "url", spellcheck: "false", autocomplete: "off",
    placeholder: "an https URL" });
  const kinds = el("fieldset", { class: "kinds", id: "endpoint-kinds" }, el("legend", {}, "Kinds (none ticked: every kind)"),
    notificationKinds.map((k) => el("label", { class: "check" }, el("input", { type: "checkbox", name: "kinds", value: k }), k)));
  const accounts = el("input", { name: "accounts", id: "endpoint-accounts", spellcheck: "false", autocomplete: "off",
    placeholder: "acct_1, acct_2" });
  const description = el("input", { name: "description", id: "endpoint-description", maxlength: 256, placeholder: "optional note" });
  const fields = { url, kinds, accounts, description };
  const errors = el("ul", { id: "endpoint-errors", class: "field-errors", hidden: true });
  const submit = el("button", { type: "submit", id: "endpoint-register" }, "Register");
  const mark = (problems) => {
    errors.replaceChildren(...problems.map((p) => el("li", { "data-field": endpointFields.find((f) => p.startsWith(f + " ") || p.startsWith(f + "[")) || "" }, p)));
    errors.hidden = problems.length === 0;
    for (const [name, input] of Object.entries(fields)) {
      const bad = problems.some((p) => p.startsWith(name + " ") || p.startsWith(name + "["));
      input.classList.toggle("invalid", bad);
      if (bad) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
    }
  };
  const form = el("form", { id: "endpoint-form", class: "inline" },
    el("label", {}, "URL", url), kinds, el("label", {}, "Accounts (none: every account)", accounts), el("label", {}, "Description", description), submit);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const body = { url: String(data.get("url")).trim() };
    const picked = data.getAll("kinds").map(String);
    if (picked.length) body.kinds = picked;
    const ids = String(data.get("accounts")).split(/[\s,]+/).filter(Boolean);
    if (ids.length) body.accounts = ids;
    if (String(data.get("description")).trim()) body.description = String(data.get("description")).trim();
    submit.disabled = true;
    showError(null);
    try {
      const res = await api("POST", "/v1/webhook-endpoints", body);
      form.reset();
      mark([]);
      // The secret first: if reading the list back fails, the one chance to copy it is not lost.
      showSecret(ctx.secretBox, "the signing secret of " + res.id, res.secret, null);
      await ctx.refresh();
    } catch (err) {
      if (err instanceof ApiError && err.status === 400 && err.body && Array.isArray(err.body.errors)) mark(err.body.errors);
      else showError(err);
    } finally {
      submit.disabled = false;
    }
  });
  return el("div", {}, form, errors);
}

// endpointPage is one endpoint, its buttons, and its delivery log.
async function endpointPage(id, params) {
  const summary = el("div", { id: "endpoint-summary" });
  const ctx = { secretBox: secretBox() };
  ctx.refresh = async () => summary.replaceChildren(endpointsTable([await api("GET", endpointPath(id))], ctx));
  ctx.deleted = async () => go("/notifications");
  await ctx.refresh();
  const log = el("div", { id: "deliveries" });
  await deliveryLog(id, params.get("cursor") || "", log);
  return [el("h1", {}, "Endpoint ", el("code", {}, id)), el("p", {}, el("a", { href: "#/notifications" }, "Every endpoint")),
    ctx.secretBox, summary,
    el("h2", {}, "Delivery log"),
    el("p", { class: "muted" }, "Newest notification first. Replay sends a delivery again from a fresh set of attempts, whatever its status, " +
      "with the same webhook-id, so a receiver that has it already can drop the copy."),
    log];
}

// deliveryLog fills box with a page of the endpoint's deliveries (cursor "" for the newest), and
// keeps it current while a delivery on it waits or is being sent.
async function deliveryLog(id, cursor, box) {
  const query = new URLSearchParams({ limit: String(deliveriesPageSize) });
  if (cursor) query.set("cursor", cursor);
  const pageHref = (c) => "#/notifications/" + encodeURIComponent(id) + (c ? "?" + new URLSearchParams({ cursor: c }) : "");
  let timer = null;
  let refreshes = 0;
  const tagged = (d) => Object.assign({ attrs: { "data-delivery": d.notification, "data-status": d.status, "data-replays": d.replays } }, d);
  const cols = [
    { label: "Notification", get: (d) => el("code", {}, d.notification) },
    { label: "Kind", get: (d) => d.kind },
    { label: "Account", get: (d) => (d.account ? el("a", { href: "#/accounts/" + encodeURIComponent(d.account) }, d.account) : el("span", { class: "muted" }, "no account")) },
    { label: "Status", get: (d) => badge(d.status) },
    { label: "Attempts", num: true, get: (d) => d.attempts },
    { label: "Last answer", num: true, get: (d) => el("span", { "data-last-status": d.lastStatus ?? "" }, fmt(d.lastStatus)) },
    { label: "Last error", get: (d) => el("div", {}, d.lastError || (d.lastAnswer ? null : "—"),
      d.lastAnswer ? el("div", { class: "muted" }, "answered: " + d.lastAnswer) : null) },
    { label: "Next attempt / delivered", get: (d) => when(d.status === "DELIVERED" ? d.deliveredAt : d.nextAttemptAt) },
    { label: "Replays", num: true, get: (d) => d.replays },
    { label: "Created", get: (d) => when(d.createdAt) },
    { label: "", get: (d) => actionButton("Replay", async (b) => {
      const res = await api("POST", endpointPath(id) + "/deliveries/" + encodeURIComponent(d.notification) + "/replay", {});
      const row = b.closest("tr");
      if (row) row.replaceWith(tableRow(cols, tagged(res)));
      refreshes = 0;
      follow([res]);
    }, { "data-replay-delivery": d.notification }) },
  ];
  const refresh = actionButton("Refresh", async () => { refreshes = 0; await load(); }, { class: "secondary", id: "deliveries-refresh" });
  // follow reads the page again a little later while one of its deliveries is not yet settled.
  const follow = (items) => {
    clearTimeout(timer);
    if (refreshes >= logRefreshesMax || items.every((d) => d.status === "DELIVERED" || d.status === "DEAD")) return;
    timer = setTimeout(async () => {
      if (!box.isConnected) return;
      refreshes++;
      try { await load(); } catch (err) { showError(err); }
    }, logRefreshMs);
  };
  const load = async () => {
    const page = await api("GET", endpointPath(id) + "/deliveries?" + query);
    box.replaceChildren(el("p", {}, refresh),
      table(cols, page.items.map(tagged), { id: "deliveries-table" }),
      el("p", { class: "pager" },
        cursor ? el("a", { href: pageHref(""), id: "deliveries-newest" }, "← Newest") : null,
        cursor && page.next ? " · " : null,
        page.next ? el("a", { href: pageHref(page.next), id: "deliveries-older" }, "Older →") : null));
    follow(page.items);
  };
  await load();
}

// ---- labs ------------------------------------------------------------------------------------

const labInfo = {
  "holds-five": ["Concurrency Lab", "Five jobs of 40,000 tokens start at once against a limit of 100,000: a plain check lets all five run; holds admit two and refuse three."],
  "webhooks-nine": ["Engine Room", "Nine Kinde deliveries of three events, one apply killed half way and one arriving late: Ferry's plan and balance after each, beside a naive handler."],
  "reconcile": ["Reconciliation lab", "Late usage the provider never got (its report is rate-limited): the reconciler finds under_billed, repairs from the ledger, reads it back, and the next run matches."],
};

pages.labs = async (params, rest) => {
  const out = [el("h1", {}, "Live labs"), el("p", { class: "muted" }, "Each run creates a fresh account and runs the same code as ferry lab, against this stack.")];
  for (const [name, [title, summary]] of Object.entries(labInfo)) {
    const result = el("div", { "data-lab-result": name });
    out.push(el("section", { class: "lab", "data-lab": name }, el("h2", {}, title), el("p", {}, summary),
      actionButton("Run " + title, async (b) => {
        result.replaceChildren(el("p", { class: "muted" }, "Running… (the Engine Room waits out a 30 s lease)"));
        try {
          const run = await api("POST", "/v1/labs/" + name + "/runs", {});
          result.replaceChildren(...renderLab(run));
        } catch (err) {
          result.replaceChildren();
          throw err;
        }
        void b;
      }, { "data-run-lab": name }), result));
  }
  void params; void rest;
  return out;
};

function renderLab(run) {
  const out = [el("p", {}, badge(run.ok ? "ok" : "failed"), " ", `${(run.durationMs / 1000).toFixed(1)} s`,
    run.accountId ? [" · account ", el("a", { href: "#/accounts/" + encodeURIComponent(run.accountId) }, run.accountId)] : null)];
  if (run.error) out.push(el("p", { class: "badge bad" }, run.error));
  if (run.intro) out.push(el("pre", {}, run.intro));
  if (run.jobs && run.jobs.length) out.push(jobBars(run));
  if (run.steps && run.steps.length) out.push(stepsTable(run.steps));
  const cols = [{ label: "", get: (r) => r[0] }].concat(run.columns.map((c, i) => ({ label: c, get: (r) => r[i + 1] })));
  out.push(table(cols, run.rows.map((r) => Object.assign(r.slice(), { attrs: { "data-row": r[0] } })), { "data-lab-rows": run.lab }));
  for (const list of [run.notes, run.problems, run.failures]) if (list.length) out.push(el("pre", {}, list.join("\n")));
  return out;
}

// jobBars draws the Concurrency Lab: each job's spend, plain check and holds, against the limit.
function jobBars(run) {
  const limit = run.limit;
  const total = (sel) => run.jobs.reduce((s, j) => s + sel(j), 0);
  const scale = Math.max(limit, total((j) => j.plainSpent), total((j) => j.spent)) * 1.05;
  const row = (label, segments, id) => {
    const bar = el("div", { class: "bar", "data-bar": id });
    let x = 0;
    for (const [amount, cls] of segments) {
      const f = el("div", { class: "fill " + cls });
      f.style.left = (x / scale) * 100 + "%";
      f.style.width = Math.max(0, (amount / scale) * 100 - 0.4) + "%";
      bar.append(f);
      x += amount;
    }
    const l = el("div", { class: "limit" });
    l.style.left = (limit / scale) * 100 + "%";
    bar.append(l);
    return [el("div", {}, label), bar];
  };
  let running = 0;
  const plainSegs = run.jobs.filter((j) => j.plainRan).map((j) => { running += j.plainSpent; return [j.plainSpent, running > limit ? "over" : ""]; });
  const holdSegs = run.jobs.filter((j) => j.outcome === "admitted").map((j) => [j.spent, ""]);
  const admitted = run.jobs.filter((j) => j.outcome === "admitted").length;
  const refused = run.jobs.filter((j) => j.outcome === "refused").length;
  const spent = total((j) => j.spent);
  return el("div", {},
    el("div", { class: "cards" },
      el("div", { class: "card" }, el("div", { class: "muted" }, "Admitted"), el("div", { class: "big", "data-figure": "admitted" }, fmt(admitted))),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Refused"), el("div", { class: "big", "data-figure": "refused" }, fmt(refused))),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Spent with holds"), el("div", { class: "big", "data-figure": "spent" }, fmt(spent))),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Spent with a plain check"), el("div", { class: "big", "data-figure": "plain-spent" }, fmt(total((j) => j.plainSpent)))),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Limit"), el("div", { class: "big" }, fmt(limit)))),
    el("div", { class: "bars" }, row("plain check", plainSegs, "plain"), row("holds", holdSegs, "holds")),
    table([
      { label: "Job", get: (j) => j.key }, { label: "Plain check", get: (j) => (j.plainRan ? "ran" : "stopped") },
      { label: "Holds", get: (j) => badge(j.outcome) }, { label: "Spent", num: true, get: (j) => j.spent },
      { label: "Ferry said", get: (j) => j.detail },
    ], run.jobs, { "data-jobs": "holds-five" }));
}

// stepsTable is the Engine Room: the deliveries one by one, Ferry beside the naive handler.
function stepsTable(steps) {
  const last = steps[steps.length - 1];
  return el("div", {},
    el("div", { class: "cards" },
      el("div", { class: "card" }, el("div", { class: "muted" }, "Ferry: plan"), el("div", { class: "big", "data-figure": "ferry-plan" }, last.ferry.plan)),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Ferry: balance"), el("div", { class: "big", "data-figure": "ferry-balance" }, fmt(last.ferry.credits))),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Naive: plan"), el("div", { class: "big", "data-figure": "naive-plan" }, last.naive.plan)),
      el("div", { class: "card" }, el("div", { class: "muted" }, "Naive: balance"), el("div", { class: "big", "data-figure": "naive-balance" }, fmt(last.naive.credits)))),
    table([
      { label: "#", num: true, get: (s) => s.n }, { label: "Event", get: (s) => s.event },
      { label: "Copy", get: (s) => (s.duplicate ? "copy" : "first") }, { label: "What happens", get: (s) => s.note },
      { label: "Stored status", get: (s) => badge(s.status) },
      { label: "Ferry plan", get: (s) => s.ferry.plan }, { label: "Ferry balance", num: true, get: (s) => s.ferry.credits },
      { label: "Naive plan", get: (s) => s.naive.plan }, { label: "Naive balance", num: true, get: (s) => s.naive.credits },
    ], steps, { class: "steps", "data-steps": "webhooks-nine" }));
}

// ---- start -----------------------------------------------------------------------------------

async function start() {
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  try {
    const res = await fetch("/v1/sessions/current", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
    if (res.ok) { signedIn(await res.json()); return; }
  } catch { /* not signed in */ }
  signedOut();
}

start();
