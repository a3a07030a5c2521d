/**
 * Ferry's client: usage events metered exactly once, holds on a limit for long jobs, and the
 * reads and operator routes around them. Types come from api/openapi.yaml (schema.gen.ts); the
 * layer below them mints each event id once, sends one Idempotency-Key per logical call on every
 * retry, retries within bounds, batches in the background without losing the buffer at close,
 * settles every hold, and throws one error class per problem kind.
 */
export * from "./client.js";
export * from "./batcher.js";
export * from "./errors.js";
export * from "./webhooks.js";
export { newEventId } from "./ids.js";
export { decide, backoff, serverWaitMs, type RetryPolicy, type Decision } from "./retry.js";
export { VERSION } from "./version.js";
export type { components, paths, operations } from "./schema.gen.js";
