import { NetworkError, ProblemError } from "./errors.js";

/** Bounds and spaces the retries of one call. */
export interface RetryPolicy {
  maxAttempts: number;
  baseWaitMs: number;
  maxWaitMs: number;
}

/** What one attempt got: a problem answer, or no answer at all. */
export type Outcome = NetworkError | ProblemError;

/** Whether to send a call again, after how long, and why. */
export interface Decision {
  retry: boolean;
  waitMs: number;
  reason: string;
}

/**
 * The retry decision after attempt number `attempt` (1 for the first) ended in `outcome`.
 *
 * Retried: no answer (a refused or reset connection, a timeout: the effect may or may not have
 * happened, and the call's identity makes sending it again safe); 408 request-timeout (the body did
 * not reach the server in time, so nothing was done); 429; every 5xx, 502
 * outcome-unknown included; 409 idempotency-in-flight, which is this call's own earlier attempt
 * still running. Never retried: any other 4xx, which a retry would only repeat.
 */
export function decide(policy: RetryPolicy, attempt: number, outcome: Outcome, random: () => number = Math.random): Decision {
  if (attempt >= policy.maxAttempts) return { retry: false, waitMs: 0, reason: "attempts exhausted" };
  let reason: string;
  if (outcome instanceof NetworkError) reason = "no answer";
  else if (outcome.status === 408) reason = "408";
  else if (outcome.status === 429) reason = "429";
  else if (outcome.status >= 500) reason = String(outcome.status);
  else if (outcome.status === 409 && outcome.kind === "idempotency-in-flight") reason = "in flight";
  else return { retry: false, waitMs: 0, reason: "not retryable" };
  const asked = outcome instanceof ProblemError ? outcome.retryAfterMs : undefined;
  if (asked !== undefined) {
    if (asked > policy.maxWaitMs) return { retry: false, waitMs: 0, reason: `server asks to wait ${asked} ms` };
    return { retry: true, waitMs: asked + random() * policy.baseWaitMs, reason };
  }
  return { retry: true, waitMs: backoff(policy, attempt, random), reason };
}

/** The capped exponential wait before retry number `attempt`, with equal jitter. */
export function backoff(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const step = Math.min(policy.baseWaitMs * 2 ** Math.min(attempt - 1, 30), policy.maxWaitMs);
  return step / 2 + random() * (step / 2);
}

/** The wait a server asked for: Retry-After (seconds or an HTTP date) or RateLimit-Reset (seconds). */
export function serverWaitMs(headers: Headers): number | undefined {
  const retryAfter = headers.get("retry-after")?.trim();
  if (retryAfter) {
    if (/^\d+$/.test(retryAfter)) return Number(retryAfter) * 1000;
    const at = Date.parse(retryAfter);
    if (!Number.isNaN(at)) return Math.max(at - Date.now(), 0);
  }
  const reset = headers.get("ratelimit-reset")?.trim();
  if (reset && /^\d+$/.test(reset)) return Number(reset) * 1000;
  return undefined;
}
