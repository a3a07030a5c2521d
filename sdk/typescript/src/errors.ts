import type { components } from "./schema.gen.js";

/** Starts every problem type Ferry answers: the kind follows it. */
export const PROBLEM_TYPE_PREFIX = "tag:ferrymeter.dev,2026:problem:";

type BatchItemResult = components["schemas"]["BatchItemResult"];
type HoldStatus = components["schemas"]["HoldStatus"];

/**
 * An RFC 9457 problem document Ferry answered, as an error. Every kind this client knows is
 * thrown as its own subclass; an unknown kind, or an answer that is not a problem document, as a
 * bare ProblemError.
 */
export class ProblemError extends Error {
  /** The part of `type` after PROBLEM_TYPE_PREFIX ("" for a type of another form). */
  readonly kind: string;
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** The document's other members, by name ("remaining", "errors", …). */
  readonly extensions: Record<string, unknown>;
  /** The answer's Retry-After in milliseconds, when it had one. */
  readonly retryAfterMs: number | undefined;

  constructor(doc: ProblemDocument) {
    super(doc.detail ? `ferry: ${doc.status} ${doc.title}: ${doc.detail}` : `ferry: ${doc.status} ${doc.title}`);
    this.name = new.target.name;
    this.kind = doc.kind;
    this.type = doc.type;
    this.title = doc.title;
    this.status = doc.status;
    this.detail = doc.detail;
    this.extensions = doc.extensions;
    this.retryAfterMs = doc.retryAfterMs;
  }
}

/** What a problem error is built from. */
export interface ProblemDocument {
  kind: string;
  type: string;
  title: string;
  status: number;
  detail: string;
  extensions: Record<string, unknown>;
  retryAfterMs: number | undefined;
}

function num(v: unknown): number | undefined {
  return typeof v === "number" ? v : undefined;
}

/** Something failed on Ferry's side; the detail never shows the cause. */
export class InternalError extends ProblemError {}
/** The input was refused and nothing was stored. */
export class InvalidRequestError extends ProblemError {
  /** Every problem with an account's fields. */
  readonly errors: string[] = Array.isArray(this.extensions["errors"]) ? (this.extensions["errors"] as string[]) : [];
  /** Each item of a batch none of whose items was valid. */
  readonly results: BatchItemResult[] = Array.isArray(this.extensions["results"]) ? (this.extensions["results"] as BatchItemResult[]) : [];
}
/** No key, or not the key this route needs. */
export class UnauthorizedError extends ProblemError {}
/** No such resource, or another account's. */
export class NotFoundError extends ProblemError {}
/** The path does not take the method. */
export class MethodNotAllowedError extends ProblemError {}
/** The body's media type is not one the route reads. */
export class UnsupportedMediaTypeError extends ProblemError {}
/** The body is over the route's limit. */
export class TooLargeError extends ProblemError {}
/** The request conflicts with the resource (an id that exists, a linked id another account holds). */
export class ConflictError extends ProblemError {
  /** The linked id's field, when another account holds it. */
  readonly field: string | undefined = typeof this.extensions["field"] === "string" ? (this.extensions["field"] as string) : undefined;
}
/** The agreement start is fixed after the account's first usage. */
export class AgreementLockedError extends ProblemError {}
/** The limit has no room; nothing moved. */
export class LimitReachedError extends ProblemError {
  /** What is left of the limit. */
  readonly remaining: number | undefined = num(this.extensions["remaining"]);
  /** What a refused hold asked for. */
  readonly needed: number | undefined = num(this.extensions["needed"]);
}
/** The limit cannot be known, so nothing is promised (fail closed). */
export class LimitUnknownError extends ProblemError {}
/** Too many new holds. */
export class RateLimitedError extends ProblemError {
  /** Seconds until a new hold may be admitted. */
  readonly retryAfterSeconds: number | undefined = num(this.extensions["retryAfter"]);
}
/** A dependency is unavailable and nothing was done. */
export class UnavailableError extends ProblemError {}
/** A request with the same Idempotency-Key is still running. */
export class IdempotencyInFlightError extends ProblemError {}
/** The Idempotency-Key belongs to a different request. */
export class IdempotencyKeyReusedError extends ProblemError {}
/** The hold is settled or expired; the job must stop. */
export class HoldNotRunningError extends ProblemError {
  readonly holdStatus: HoldStatus | undefined = this.extensions["holdStatus"] as HoldStatus | undefined;
}
/** A job or step key was sent again with a different request. */
export class KeyReusedError extends ProblemError {}
/** The account is inactive and records no new usage. */
export class AccountInactiveError extends ProblemError {}
/** The write may or may not have landed; sending the same event ids again is safe. */
export class OutcomeUnknownError extends ProblemError {}
/** The request's head is not valid HTTP. */
export class InvalidHeaderError extends ProblemError {}
/** A webhook delivery whose signature cannot be verified. */
export class InvalidSignatureError extends ProblemError {}
/** A console request refused as sent. */
export class ForbiddenError extends ProblemError {}
/** The stack lacks what the request needs. */
export class UnsupportedError extends ProblemError {}
/** As many runs as may run at once are running. */
export class BusyError extends ProblemError {}
/** The request's body did not arrive within the server's bound; nothing was done, and the client sends it again. */
export class RequestTimeoutError extends ProblemError {}

/** Each kind Ferry answers (its problem table), with its error class. */
export const PROBLEM_KINDS: Readonly<Record<string, new (doc: ProblemDocument) => ProblemError>> = {
  internal: InternalError,
  "invalid-request": InvalidRequestError,
  unauthorized: UnauthorizedError,
  "not-found": NotFoundError,
  "method-not-allowed": MethodNotAllowedError,
  "unsupported-media-type": UnsupportedMediaTypeError,
  "too-large": TooLargeError,
  conflict: ConflictError,
  "agreement-locked": AgreementLockedError,
  "limit-reached": LimitReachedError,
  "limit-unknown": LimitUnknownError,
  "rate-limited": RateLimitedError,
  unavailable: UnavailableError,
  "idempotency-in-flight": IdempotencyInFlightError,
  "idempotency-key-reused": IdempotencyKeyReusedError,
  "hold-not-running": HoldNotRunningError,
  "key-reused": KeyReusedError,
  "account-inactive": AccountInactiveError,
  "outcome-unknown": OutcomeUnknownError,
  "invalid-header": InvalidHeaderError,
  "invalid-signature": InvalidSignatureError,
  forbidden: ForbiddenError,
  unsupported: UnsupportedError,
  busy: BusyError,
  "request-timeout": RequestTimeoutError,
};

/** A request that got no complete answer: refused, reset, timed out. Its effect is unknown. */
export class NetworkError extends Error {
  constructor(
    readonly method: string,
    readonly path: string,
    readonly cause: unknown,
  ) {
    super(`ferry: ${method} ${path}: no answer: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = "NetworkError";
  }
}

/** Turns a non-2xx answer into the error of its kind. */
export function problemFromAnswer(status: number, retryAfterMs: number | undefined, body: string): ProblemError {
  const doc: ProblemDocument = { kind: "", type: "", title: "", status, detail: "", extensions: {}, retryAfterMs };
  let members: unknown;
  try {
    members = JSON.parse(body);
  } catch {
    members = undefined;
  }
  if (typeof members !== "object" || members === null || Array.isArray(members)) {
    const text = body.trim();
    if (text.length > 0 && text.length <= 200) doc.detail = text;
    return new ProblemError(doc);
  }
  for (const [name, value] of Object.entries(members as Record<string, unknown>)) {
    if (name === "type" && typeof value === "string") doc.type = value;
    else if (name === "title" && typeof value === "string") doc.title = value;
    else if (name === "status" && typeof value === "number") doc.status = value;
    else if (name === "detail" && typeof value === "string") doc.detail = value;
    else doc.extensions[name] = value;
  }
  if (doc.type.startsWith(PROBLEM_TYPE_PREFIX)) doc.kind = doc.type.slice(PROBLEM_TYPE_PREFIX.length);
  const Kind = PROBLEM_KINDS[doc.kind] ?? ProblemError;
  return new Kind(doc);
}
