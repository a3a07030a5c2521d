import { InvalidRequestError } from "./errors.js";
import { FerryClient, MAX_BATCH_EVENTS, prepareEvent, type BatchItemResult, type EventInput } from "./client.js";

/** How a Batcher is configured; every field has a default. */
export interface BatcherConfig {
  /** The most events one request carries (100 by default; at most 100). */
  maxBatch?: number;
  /** How long an event waits for its batch to fill (1,000 ms by default). */
  maxAgeMs?: number;
  /** How many events wait to be sent at most (10,000 by default). */
  buffer?: number;
  /** What add does when the buffer is full: wait for room ("block", the default) or throw ("error"). */
  overflow?: "block" | "error";
  /** How many batch requests are in flight at once (2 by default). */
  concurrency?: number;
  /** Called with the events of a batch that could not be sent (after the retries) or were refused. */
  onFailure?: (failed: FailedEvent[]) => void;
}

/** An event the Batcher could not get accepted, and why. */
export interface FailedEvent {
  id: string;
  error: unknown;
}

/** add's error when the buffer is full and overflow is "error". */
export class BufferFullError extends Error {
  constructor() {
    super("ferry: the batcher's buffer is full");
    this.name = "BufferFullError";
  }
}

/** add's error after close. */
export class BatcherClosedError extends Error {
  constructor() {
    super("ferry: the batcher is closed");
    this.name = "BatcherClosedError";
  }
}

/** Names exactly the events a flush or close could not get accepted. */
export class BatchError extends Error {
  constructor(readonly failed: FailedEvent[]) {
    const first = failed[0]?.error;
    super(`ferry: ${failed.length} events not accepted (${failed.slice(0, 3).map((f) => f.id).join(", ")}${failed.length > 3 ? ` and ${failed.length - 3} more` : ""})${first instanceof Error ? ": " + first.message : ""}`);
    this.name = "BatchError";
  }

  /** The ids of the failed events. */
  get ids(): string[] {
    return this.failed.map((f) => f.id);
  }
}

/** Bounds the failed ids kept until flush or close reports them. */
const MAX_RETAINED_FAILURES = 100_000;

/**
 * Sends events in batches in the background: a batch goes when it holds maxBatch events or its
 * first event is maxAgeMs old. Each event gets its id when it is added, and every retry of its
 * batch sends it with that id under the batch's one Idempotency-Key.
 */
export class Batcher {
  readonly #client: FerryClient;
  readonly #maxBatch: number;
  readonly #maxAgeMs: number;
  readonly #buffer: number;
  readonly #overflow: "block" | "error";
  readonly #concurrency: number;
  readonly #onFailure: ((failed: FailedEvent[]) => void) | undefined;
  #pending: EventInput[] = [];
  readonly #inflight = new Set<Promise<void>>();
  #room: Array<() => void> = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #failed: FailedEvent[] = [];
  #closed = false;

  constructor(client: FerryClient, config: BatcherConfig = {}) {
    const maxBatch = config.maxBatch ?? MAX_BATCH_EVENTS;
    if (maxBatch < 1 || maxBatch > MAX_BATCH_EVENTS) throw new RangeError(`ferry: maxBatch ${maxBatch} is not between 1 and ${MAX_BATCH_EVENTS}`);
    this.#client = client;
    this.#maxBatch = maxBatch;
    this.#maxAgeMs = config.maxAgeMs ?? 1_000;
    this.#buffer = config.buffer ?? 10_000;
    this.#overflow = config.overflow ?? "block";
    this.#concurrency = config.concurrency ?? 2;
    this.#onFailure = config.onFailure;
  }

  /** Buffers an event and resolves to its id (the caller's, or one minted now). */
  async add(event: EventInput): Promise<string> {
    const ev = prepareEvent(event);
    while (this.#pending.length >= this.#buffer) {
      if (this.#closed) throw new BatcherClosedError();
      if (this.#overflow === "error") throw new BufferFullError();
      await new Promise<void>((resolve) => this.#room.push(resolve));
    }
    if (this.#closed) throw new BatcherClosedError();
    this.#pending.push(ev);
    if (this.#pending.length >= this.#maxBatch) this.#dispatch(false);
    else if (this.#timer === undefined) this.#startTimer();
    return ev.id as string;
  }

  /**
   * Sends every event added before it and waits for the answers. Rejects with a BatchError naming
   * exactly the events since the last flush that were not accepted (background failures included).
   */
  async flush(): Promise<void> {
    await this.#drain();
    this.#report();
  }

  /** Stops taking events, sends everything it holds, waits, and reports as flush does. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const wake of this.#room.splice(0)) wake();
    await this.flush();
  }

  #startTimer(): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#dispatch(true);
    }, this.#maxAgeMs);
    // In Node.js, a batcher waiting on its age does not keep the process alive (close sends).
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /** Sends full batches (and a partial one when `partial`) while there is room in flight. */
  #dispatch(partial: boolean): void {
    while (this.#inflight.size < this.#concurrency && (this.#pending.length >= this.#maxBatch || (partial && this.#pending.length > 0))) {
      const batch = this.#pending.splice(0, this.#maxBatch);
      for (const wake of this.#room.splice(0)) wake();
      const p: Promise<void> = this.#deliver(batch).finally(() => {
        this.#inflight.delete(p);
        this.#dispatch(false);
        if (this.#pending.length > 0 && this.#timer === undefined) this.#startTimer();
      });
      this.#inflight.add(p);
    }
    if (this.#pending.length === 0 && this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  async #drain(): Promise<void> {
    while (this.#pending.length > 0 || this.#inflight.size > 0) {
      this.#dispatch(true);
      if (this.#inflight.size > 0) await Promise.race(this.#inflight);
    }
  }

  async #deliver(batch: EventInput[]): Promise<void> {
    try {
      const res = await this.#client.sendPrepared(batch);
      this.#failResults(batch, res.results);
    } catch (error) {
      if (error instanceof InvalidRequestError && error.results.length === batch.length) {
        this.#failResults(batch, error.results);
        return;
      }
      this.#fail(batch.map((ev) => ({ id: ev.id as string, error })));
    }
  }

  #failResults(batch: EventInput[], results: BatchItemResult[]): void {
    const failed: FailedEvent[] = [];
    batch.forEach((ev, i) => {
      const r = results[i];
      if (!r) failed.push({ id: ev.id as string, error: new Error("ferry: the batch's answer has no result for this event") });
      else if (r.status === "invalid") failed.push({ id: ev.id as string, error: new Error(`ferry: event refused: ${r.detail ?? "invalid"}`) });
    });
    if (failed.length > 0) this.#fail(failed);
  }

  #fail(failed: FailedEvent[]): void {
    const room = Math.max(MAX_RETAINED_FAILURES - this.#failed.length, 0);
    this.#failed.push(...failed.slice(0, room));
    this.#client.log({ level: "error", message: "ferry: events not accepted", events: failed.length, firstId: failed[0]?.id, error: String(failed[0]?.error) });
    this.#onFailure?.(failed);
  }

  #report(): void {
    if (this.#failed.length === 0) return;
    const failed = this.#failed;
    this.#failed = [];
    throw new BatchError(failed);
  }
}
