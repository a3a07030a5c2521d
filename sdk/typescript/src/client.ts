import type { components, operations } from "./schema.gen.js";
import { NetworkError, ProblemError, problemFromAnswer } from "./errors.js";
import { newEventId, newIdempotencyKey } from "./ids.js";
import { decide, serverWaitMs, type RetryPolicy } from "./retry.js";
import { VERSION } from "./version.js";

type S = components["schemas"];
export type Usage = S["Usage"];
export type Hold = S["Hold"];
export type Charge = S["Charge"];
export type Settlement = S["Settlement"];
export type EventAccepted = S["EventAccepted"];
export type BatchAccepted = S["BatchAccepted"];
export type BatchItemResult = S["BatchItemResult"];
export type EventStatus = S["EventStatus"];
export type BillingEvent = S["BillingEvent"];
export type BillingEventWithReceipts = S["BillingEventWithReceipts"];
export type Account = S["Account"];
export type AccountWithKey = S["AccountWithKey"];
export type CreateAccountRequest = S["CreateAccountRequest"];
export type UpdateAccountRequest = S["UpdateAccountRequest"];
export type CreateHoldRequest = S["CreateHoldRequest"];
export type ChargeRequest = S["ChargeRequest"];
export type CorrectionRequest = S["CorrectionRequest"];
export type Correction = S["Correction"];
export type ReportRun = S["ReportRun"];
export type ReconcileRequest = S["ReconcileRequest"];
export type ReconcileRun = S["ReconcileRun"];
export type EvidenceList = S["EvidenceList"];
export type ReviewList = S["ReviewList"];
export type Health = S["Health"];
export type Alerts = S["Alerts"];
export type Threshold = S["Threshold"];
export type WebhookEndpoint = S["WebhookEndpoint"];
export type WebhookEndpointWithSecret = S["WebhookEndpointWithSecret"];
export type RotatedWebhookEndpoint = S["RotatedWebhookEndpoint"];
export type CreateWebhookEndpointRequest = S["CreateWebhookEndpointRequest"];
export type UpdateWebhookEndpointRequest = S["UpdateWebhookEndpointRequest"];
export type WebhookDelivery = S["WebhookDelivery"];
export type WebhookDeliveryStatus = S["WebhookDeliveryStatus"];
/** A notification's kind: its message's `type`. */
export type NotificationKind = S["NotificationKind"];
/** The body of every delivery to a webhook endpoint (see WebhookVerifier.verifyMessage). */
export type NotificationMessage = S["NotificationMessage"];
/** The usage query's answer: a meter's rows by window and group (Go's UsageQuery). */
export type UsageQueryResult = S["UsageQuery"];
export type UsageRow = S["UsageRow"];

type Query<Op extends keyof operations> = operations[Op]["parameters"] extends { query?: infer Q } ? NonNullable<Q> : never;
export type UsageQuery = Query<"getUsage">;
export type BillingEventsQuery = Query<"listBillingEvents">;
export type FailedEventsQuery = Query<"listFailedEvents">;
export type HoldsQuery = Query<"listHolds">;
export type AccountsQuery = Query<"listAccounts">;
/** The usage query's parameters (named apart from UsageQuery, which is the usage route's). */
export type QueryUsageParams = Query<"queryUsage">;
export type WebhookDeliveriesQuery = Query<"listWebhookDeliveries">;

/**
 * An event to send: a CloudEvents 1.0 event in its JSON format, whose `specversion` and `id` the
 * client fills when they are left out. (Written here rather than taken from the generated
 * CloudEvent, whose index signature for extension attributes narrows `data` to a primitive.)
 */
export interface EventInput {
  specversion?: "1.0";
  /** Minted once, before the first attempt, when left out. */
  id?: string;
  source: string;
  type: string;
  time?: string;
  subject?: string;
  datacontenttype?: string;
  dataschema?: string;
  data?: unknown;
  data_base64?: string;
  /** Extension attributes: lower-case names, string, boolean or 32-bit integer values. */
  [extension: string]: unknown;
}

/** One record of the client's activity, for the logger hook. */
export interface LogEntry {
  level: "warn" | "error";
  message: string;
  method?: string;
  path?: string;
  attempt?: number;
  waitMs?: number;
  reason?: string;
  idempotencyKey?: string;
  [name: string]: unknown;
}

/** How a client is configured; only baseUrl and apiKey are needed. */
export interface FerryConfig {
  /** Ferry's address, e.g. http://127.0.0.1:8080 or the API Gateway URL. */
  baseUrl: string;
  /** An account's API key, or the operator key for the operator routes. */
  apiKey: string;
  /** Bounds each attempt (10,000 ms by default). */
  timeoutMs?: number;
  /** Bounds the attempts of one call (6 by default; 1 turns retries off). */
  maxAttempts?: number;
  /** The first backoff (100 ms by default); each retry doubles it. */
  baseWaitMs?: number;
  /** Caps backoffs and the server-asked waits the client honours (30,000 ms by default). */
  maxWaitMs?: number;
  /** The fetch to send with (globalThis.fetch by default): a wrapper for tracing, proxies, tests. */
  fetch?: typeof fetch;
  /** Receives a record for every retry and every batch the Batcher could not send. */
  logger?: (entry: LogEntry) => void;
  /** Put before the client's own product token, e.g. "my-app/1.2". */
  userAgent?: string;
}

/** Per-call options. */
export interface CallOptions {
  /** Ends the call (and its retries) when aborted. */
  signal?: AbortSignal;
}

/** The most events one batch request carries (the route's limit). */
export const MAX_BATCH_EVENTS = 100;

/** Bounds the charge and settlement runUnderHold makes after its job, on a signal of their own. */
const SETTLE_TIMEOUT_MS = 30_000;

/** Bounds one iteration over a listing: 10,000 pages of up to 100 items. */
const MAX_PAGES = 10_000;

/** The step key of the charge runUnderHold makes for what the job reported beyond its own charges. */
const FINAL_STEP_KEY = "ferry:run-under-hold:final";

interface Call {
  method: string;
  path: string;
  query?: Record<string, string | number | undefined>;
  /** The body's bytes, encoded once for every attempt. */
  body?: string;
  /** Minted once per logical mutating call. */
  idempotencyKey?: string;
}

/** A job running under a hold: its hold, and a way to charge steps as it goes. */
export interface Job {
  readonly hold: Hold;
  /** Charges one step (see FerryClient.chargeHold); `capped` means the job must stop. */
  charge(stepKey: string, amount: number, options?: CallOptions): Promise<Charge>;
  /** Aborted when the caller's signal is. */
  readonly signal: AbortSignal;
}

/**
 * Calls Ferry's API. Holds no global state; one client may serve any number of concurrent calls.
 */
export class FerryClient {
  readonly #base: string;
  readonly #auth: string;
  readonly #userAgent: string;
  readonly #fetch: typeof fetch;
  readonly #log: (entry: LogEntry) => void;
  readonly #policy: RetryPolicy;
  readonly #timeoutMs: number;

  constructor(config: FerryConfig) {
    let url: URL;
    try {
      url = new URL(config.baseUrl);
    } catch {
      throw new TypeError(`ferry: baseUrl ${JSON.stringify(config.baseUrl)} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`ferry: baseUrl ${config.baseUrl} is not http(s)`);
    if (!config.apiKey) throw new TypeError("ferry: apiKey is empty");
    this.#base = config.baseUrl.replace(/\/+$/, "");
    this.#auth = `Bearer ${config.apiKey}`;
    this.#userAgent = `${config.userAgent ? config.userAgent + " " : ""}ferry-typescript/${VERSION}`;
    this.#fetch = config.fetch ?? globalThis.fetch.bind(globalThis);
    this.#log = config.logger ?? (() => {});
    this.#timeoutMs = positive(config.timeoutMs, 10_000);
    this.#policy = {
      maxAttempts: positive(config.maxAttempts, 6),
      baseWaitMs: positive(config.baseWaitMs, 100),
      maxWaitMs: positive(config.maxWaitMs, 30_000),
    };
  }

  /** @internal Sends a call, retrying as the policy allows, and returns the decoded 2xx answer. */
  async request<T>(call: Call, options: CallOptions = {}): Promise<T> {
    let url = this.#base + call.path;
    const q = Object.entries(call.query ?? {}).filter(([, v]) => v !== undefined && v !== "");
    if (q.length > 0) url += "?" + new URLSearchParams(q.map(([k, v]) => [k, String(v)])).toString();
    const headers: Record<string, string> = {
      Authorization: this.#auth,
      "User-Agent": this.#userAgent,
      Accept: "application/json, application/problem+json",
    };
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    if (call.idempotencyKey) headers["Idempotency-Key"] = call.idempotencyKey;
    for (let attempt = 1; ; attempt++) {
      let outcome: NetworkError | ProblemError;
      const timeout = AbortSignal.timeout(this.#timeoutMs);
      const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
      try {
        const resp = await this.#fetch(url, { method: call.method, headers, body: call.body, signal });
        const text = await resp.text();
        if (resp.ok) return (text ? JSON.parse(text) : undefined) as T;
        outcome = problemFromAnswer(resp.status, serverWaitMs(resp.headers), text);
      } catch (err) {
        if (options.signal?.aborted) throw options.signal.reason ?? err;
        outcome = new NetworkError(call.method, call.path, err);
      }
      const d = decide(this.#policy, attempt, outcome);
      if (!d.retry) throw outcome;
      this.#log({ level: "warn", message: "ferry: retrying", method: call.method, path: call.path, attempt, waitMs: Math.round(d.waitMs), reason: d.reason, idempotencyKey: call.idempotencyKey });
      await sleep(d.waitMs, options.signal);
    }
  }

  #get<T>(path: string, query?: Call["query"], options?: CallOptions): Promise<T> {
    return this.request<T>({ method: "GET", path, query }, options);
  }

  #mutate<T>(method: string, path: string, body: unknown, options?: CallOptions): Promise<T> {
    return this.request<T>({ method, path, body: body === undefined ? undefined : JSON.stringify(body), idempotencyKey: newIdempotencyKey() }, options);
  }

  async *#pages<T>(path: string, query: Record<string, string | number | undefined>, options?: CallOptions): AsyncGenerator<T> {
    const q = { ...query };
    for (let n = 0; n < MAX_PAGES; n++) {
      const page = await this.#get<{ items: T[]; next: string | null }>(path, q, options);
      yield* page.items;
      if (!page.next) return;
      q["cursor"] = page.next;
    }
    throw new Error(`ferry: ${path}: more than ${MAX_PAGES} pages`);
  }

  // Events.

  /**
   * Sends one usage event and resolves once it is durably queued. An event without an id gets one;
   * every retry sends the same id under the same Idempotency-Key, so it counts once.
   */
  async sendEvent(event: EventInput, options?: CallOptions): Promise<EventAccepted> {
    const ev = prepareEvent(event);
    return this.request<EventAccepted>({ method: "POST", path: "/v1/events", body: JSON.stringify(ev), idempotencyKey: newIdempotencyKey() }, options);
  }

  /** Sends up to 100 events in one request; the answer has one result per event, in order. */
  async sendBatch(events: EventInput[], options?: CallOptions): Promise<BatchAccepted> {
    if (events.length === 0 || events.length > MAX_BATCH_EVENTS) throw new RangeError(`ferry: a batch holds 1 to ${MAX_BATCH_EVENTS} events, not ${events.length}`);
    return this.sendPrepared(events.map(prepareEvent), options);
  }

  /** @internal Sends a batch whose events all have their ids. */
  sendPrepared(events: EventInput[], options?: CallOptions): Promise<BatchAccepted> {
    return this.request<BatchAccepted>({ method: "POST", path: "/v1/events/batch", body: JSON.stringify(events), idempotencyKey: newIdempotencyKey() }, options);
  }

  /** Reads where an event is in processing. */
  getEvent(id: string, options?: CallOptions): Promise<EventStatus> {
    return this.#get(`/v1/events/${encodeURIComponent(id)}`, undefined, options);
  }

  /** Iterates over the account's REJECTED or UNINSERTABLE events, newest first. */
  failedEvents(query: FailedEventsQuery, options?: CallOptions): AsyncGenerator<EventStatus> {
    return this.#pages("/v1/events", { ...query }, options);
  }

  /** Queues an UNINSERTABLE event again from the archive (operator). */
  redriveEvent(id: string, account: string, options?: CallOptions): Promise<{ id: string; status: string; was: string }> {
    return this.#mutate("POST", `/v1/events/${encodeURIComponent(id)}/redrive`, { account }, options);
  }

  // Usage and billing events.

  /** Reads the account's usage of a feature in a cycle (a null limit or remaining is unlimited). */
  usage(query: UsageQuery = {}, options?: CallOptions): Promise<Usage> {
    return this.#get("/v1/usage", { ...query }, options);
  }

  /**
   * Reads a meter's usage over [from, to) by MINUTE, HOUR, DAY (in the IANA zone `tz`, UTC
   * without one) or CYCLE windows, grouped by `groupBy`'s dimensions (comma-separated) and kept
   * to `filter`'s values: one row per window and group with usage; a row with `other` counts the
   * groups an hour had no room to keep by name. A required parameter left out or any given empty
   * throws a TypeError before anything is sent; what the server refuses (alignment, ranges,
   * dimensions) throws an InvalidRequestError listing every problem.
   */
  async queryUsage(params: QueryUsageParams, options?: CallOptions): Promise<UsageQueryResult> {
    return this.#get("/v1/usage/query", usageQueryParams(params), options);
  }

  /** Iterates over the stored billing events, newest first. */
  billingEvents(query: BillingEventsQuery = {}, options?: CallOptions): AsyncGenerator<BillingEvent> {
    return this.#pages("/v1/billing-events", { ...query }, options);
  }

  /** Reads a stored billing event with its receipts. */
  getBillingEvent(id: string, options?: CallOptions): Promise<BillingEventWithReceipts> {
    return this.#get(`/v1/billing-events/${encodeURIComponent(id)}`, undefined, options);
  }

  /** Puts a stored billing event back to RECEIVED. */
  replayBillingEvent(id: string, options?: CallOptions): Promise<BillingEvent> {
    return this.#mutate("POST", `/v1/billing-events/${encodeURIComponent(id)}/replay`, undefined, options);
  }

  // Holds.

  /** Holds part of a limit before a job starts; the same key answers the same hold. */
  reserveHold(req: CreateHoldRequest, options?: CallOptions): Promise<Hold> {
    return this.#mutate("POST", "/v1/holds", req, options);
  }

  /** Reads a hold. */
  getHold(id: string, options?: CallOptions): Promise<Hold> {
    return this.#get(`/v1/holds/${encodeURIComponent(id)}`, undefined, options);
  }

  /** Iterates over the account's holds in one status, newest first. */
  holds(query: HoldsQuery, options?: CallOptions): AsyncGenerator<Hold> {
    return this.#pages("/v1/holds", { ...query }, options);
  }

  /** Charges one step of a job against its hold; a repeated step key charges nothing again. */
  chargeHold(holdId: string, req: ChargeRequest, options?: CallOptions): Promise<Charge> {
    return this.#mutate("POST", `/v1/holds/${encodeURIComponent(holdId)}/charges`, req, options);
  }

  /** Settles a hold at `used` (or what the charges recorded) and releases the rest. */
  settleHold(holdId: string, used?: number, options?: CallOptions): Promise<Settlement> {
    return this.#mutate("POST", `/v1/holds/${encodeURIComponent(holdId)}/settle`, used === undefined ? undefined : { used }, options);
  }

  /**
   * Reserves a hold, runs `job` under it, charges what the job reports it used (beyond the steps it
   * charged itself) and settles the hold — always: when the job throws or the caller's signal
   * aborts too. The charge and the settlement run on a signal of their own. A refused reservation
   * throws its error (LimitReachedError…) and runs nothing. Resolves to the settlement; rejects
   * with the job's error when it threw (the settlement's own error, if any, is its `cause`).
   */
  async runUnderHold(req: CreateHoldRequest, job: (job: Job) => Promise<number>, options: CallOptions = {}): Promise<Settlement> {
    const hold = await this.reserveHold(req, options);
    let recorded = hold.used;
    const signal = options.signal ?? new AbortController().signal;
    const handle: Job = {
      hold,
      signal,
      charge: async (stepKey, amount, o) => {
        const c = await this.chargeHold(hold.id, { key: stepKey, amount }, o ?? { signal });
        recorded = Math.max(recorded, c.used);
        return c;
      },
    };
    let used = 0;
    let jobError: unknown;
    let failed = false;
    try {
      used = await job(handle);
    } catch (err) {
      failed = true;
      jobError = err;
    }
    const own = { signal: AbortSignal.timeout(SETTLE_TIMEOUT_MS) };
    let chargeError: unknown;
    if (used > recorded && hold.status === "RUNNING") {
      try {
        await this.chargeHold(hold.id, { key: FINAL_STEP_KEY, amount: used - recorded }, own);
      } catch (err) {
        chargeError = err;
      }
    }
    let settlement: Settlement;
    try {
      settlement = await this.settleHold(hold.id, undefined, own);
    } catch (err) {
      if (failed) throw Object.assign(jobError instanceof Error ? jobError : new Error(String(jobError)), { settleError: err });
      throw err;
    }
    if (failed) throw jobError;
    if (chargeError) throw chargeError;
    return settlement;
  }

  // Operator routes (the operator key as apiKey).

  /** Creates an account and returns it with its API key, shown this once. */
  createAccount(req: CreateAccountRequest, options?: CallOptions): Promise<AccountWithKey> {
    return this.#mutate("POST", "/v1/accounts", req, options);
  }

  /** Reads an account (never its key). */
  getAccount(id: string, options?: CallOptions): Promise<Account> {
    return this.#get(`/v1/accounts/${encodeURIComponent(id)}`, undefined, options);
  }

  /**
   * Changes an account's plan, status, limits, alerts (a feature's empty list turns its thresholds
   * off), agreement start or linked ids (null unlinks).
   */
  updateAccount(id: string, req: UpdateAccountRequest, options?: CallOptions): Promise<Account> {
    return this.#mutate("PATCH", `/v1/accounts/${encodeURIComponent(id)}`, req, options);
  }

  /** Iterates over the accounts in id order. */
  accounts(query: AccountsQuery = {}, options?: CallOptions): AsyncGenerator<Account> {
    return this.#pages("/v1/accounts", { ...query }, options);
  }

  /** An account's usage of every feature over its recent cycles. */
  standing(id: string, cycles?: number, options?: CallOptions): Promise<Record<string, unknown>> {
    return this.#get(`/v1/accounts/${encodeURIComponent(id)}/standing`, { cycles }, options);
  }

  /** Appends a ± correction row; the call's Idempotency-Key names it, so its retries append it once. */
  createCorrection(req: CorrectionRequest, options?: CallOptions): Promise<Correction> {
    return this.#mutate("POST", "/v1/usage/corrections", req, options);
  }

  /** Runs the reporter now, then drains the Stripe outbox once. */
  runReport(options?: CallOptions): Promise<ReportRun> {
    return this.#mutate("POST", "/v1/report", {}, options);
  }

  /** Reconciles one account (and cycle), or one page of every account. */
  reconcile(req: ReconcileRequest = {}, options?: CallOptions): Promise<ReconcileRun> {
    return this.#mutate("POST", "/v1/reconcile", req, options);
  }

  /** The stored reconciliation evidence of an account's cycle. */
  evidence(account: string, cycle?: string, options?: CallOptions): Promise<EvidenceList> {
    return this.#get("/v1/reconcile/evidence", { account, cycle }, options);
  }

  /** The review list: what a person must settle with a provider. */
  review(options?: CallOptions): Promise<ReviewList> {
    return this.#get("/v1/reconcile/review", undefined, options);
  }

  /** An account's Stripe outbox rows of one cycle, grouped by state. */
  outbox(account: string, cycle?: string, options?: CallOptions): Promise<Record<string, unknown>> {
    return this.#get("/v1/outbox", { account, cycle }, options);
  }

  /** Runs one of the labs (holds-five, webhooks-nine, reconcile) against the stack. */
  runLab(lab: string, options?: CallOptions): Promise<Record<string, unknown>> {
    return this.#mutate("POST", `/v1/labs/${encodeURIComponent(lab)}/runs`, {}, options);
  }

  // Webhook endpoints (operator): where Ferry sends its notifications, their signing secrets and
  // their delivery logs. Each mutating call sends one Idempotency-Key on all its attempts, so a
  // retried registration or rotation answers the same endpoint and secret, not a second one.

  /**
   * Registers an endpoint and returns it with its first signing secret ("whsec_…"), which no other
   * answer shows: store it with the receiver. A refused registration throws an
   * InvalidRequestError naming every problem.
   */
  createWebhookEndpoint(req: CreateWebhookEndpointRequest, options?: CallOptions): Promise<WebhookEndpointWithSecret> {
    return this.#mutate("POST", "/v1/webhook-endpoints", req, options);
  }

  /** Iterates over every registered endpoint, oldest first (never a secret's value). */
  webhookEndpoints(options?: CallOptions): AsyncGenerator<WebhookEndpoint> {
    return this.#pages("/v1/webhook-endpoints", {}, options);
  }

  /** Reads an endpoint: when each secret that signs was made and stops, never its value. */
  async getWebhookEndpoint(id: string, options?: CallOptions): Promise<WebhookEndpoint> {
    return this.#get(endpointPath(id), undefined, options);
  }

  /**
   * Changes the members of `req` that are given (a description of "" removes it; `disabled` stops
   * and resumes deliveries) and resolves to the endpoint as stored. Secrets are never changed here.
   */
  async updateWebhookEndpoint(id: string, req: UpdateWebhookEndpointRequest, options?: CallOptions): Promise<WebhookEndpoint> {
    return this.#mutate("PATCH", endpointPath(id), req, options);
  }

  /** Deletes an endpoint: it is sent nothing more. A second delete throws a NotFoundError. */
  async deleteWebhookEndpoint(id: string, options?: CallOptions): Promise<void> {
    await this.#mutate<void>("DELETE", endpointPath(id), undefined, options);
  }

  /**
   * Makes a new signing secret current and returns it (in this answer only); the one it replaces
   * keeps signing until `previousSecretExpiresAt` (24 hours). A rotation that raced another throws
   * a ConflictError and changed nothing.
   */
  async rotateWebhookEndpointSecret(id: string, options?: CallOptions): Promise<RotatedWebhookEndpoint> {
    return this.#mutate("POST", endpointPath(id, "/rotate-secret"), undefined, options);
  }

  /**
   * Iterates over an endpoint's delivery log, newest notification first, page after page (`limit`
   * deliveries a page, at most 100): each delivery's status, attempts and last answer.
   */
  async *webhookDeliveries(id: string, query: WebhookDeliveriesQuery = {}, options?: CallOptions): AsyncGenerator<WebhookDelivery> {
    yield* this.#pages<WebhookDelivery>(endpointPath(id, "/deliveries"), { ...query }, options);
  }

  /**
   * Puts an endpoint's delivery of a notification back to PENDING with a fresh set of attempts; the
   * notifier sends it on its next run with the same webhook-id. Throws a ConflictError while an
   * attempt is being sent.
   */
  async replayWebhookDelivery(id: string, notification: string, options?: CallOptions): Promise<WebhookDelivery> {
    if (!notification) throw new TypeError("ferry: the notification's id is empty");
    return this.#mutate("POST", endpointPath(id, `/deliveries/${encodeURIComponent(notification)}/replay`), undefined, options);
  }

  /** Whether every part of a local stack answers (ferry dev only). */
  health(options?: CallOptions): Promise<Health> {
    return this.#get("/healthz", undefined, options);
  }

  /** @internal The client's logger hook. */
  log(entry: LogEntry): void {
    this.#log(entry);
  }
}

/**
 * The path of a webhook endpoint, and of what is below it. An empty id is refused here, before
 * anything is sent (the methods that call it are async, so it rejects their promise): the path
 * would name the collection instead.
 */
function endpointPath(id: string, tail = ""): string {
  if (!id) throw new TypeError("ferry: the webhook endpoint's id is empty");
  return `/v1/webhook-endpoints/${encodeURIComponent(id)}${tail}`;
}

/** Fills what the client owns in an event: its spec version and, when left out, its id. */
export function prepareEvent(event: EventInput): EventInput {
  return { ...event, specversion: event.specversion ?? "1.0", id: event.id || newEventId() };
}

/**
 * The usage query's parameters as the query string carries them, each filter as
 * `filter[<dimension>]`. Ferry refuses an empty parameter, and dropping one (as the other reads
 * drop an empty value) would answer another query than the one asked — a day in UTC rather than in
 * the zone meant — so a parameter given empty, or not as a string, is refused here with every
 * other problem at once.
 */
function usageQueryParams(params: QueryUsageParams): Record<string, string> {
  const problems: string[] = [];
  const out: Record<string, string> = {};
  const put = (name: string, v: unknown, required: boolean) => {
    if (v === undefined) {
      if (required) problems.push(`${name} is required`);
    } else if (typeof v !== "string") {
      problems.push(`${name} is not a string`);
    } else if (v === "") {
      problems.push(required ? `${name} is empty` : `${name} is empty; leave it out instead`);
    } else {
      out[name] = v;
    }
  };
  put("meter", params.meter, true);
  put("window", params.window, true);
  put("from", params.from, true);
  put("to", params.to, true);
  put("tz", params.tz, false);
  put("groupBy", params.groupBy, false);
  put("account", params.account, false);
  const filter: unknown = params.filter;
  if (filter !== undefined && (typeof filter !== "object" || filter === null)) {
    problems.push("filter is not an object of dimension → value");
  } else {
    for (const [dim, v] of Object.entries(filter ?? {})) {
      if (dim === "") problems.push("a filter names an empty dimension");
      else if (typeof v !== "string" || v === "") problems.push(`filter[${dim}] is not a value; Ferry filters on a value, so leave the dimension out`);
      else out[`filter[${dim}]`] = v;
    }
  }
  if (problems.length > 0) throw new TypeError(`ferry: query usage: ${problems.join("; ")}`);
  return out;
}

function positive(v: number | undefined, d: number): number {
  return v !== undefined && v > 0 ? v : d;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

