import { Webhook } from "standardwebhooks";
import type { components } from "./schema.gen.js";

/**
 * A delivery's headers: a fetch `Headers`, or a plain object such as Node's
 * `IncomingMessage.headers` (a repeated header's values are joined as HTTP joins them).
 */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/**
 * Verifies the notifications Ferry sends to an endpoint (Standard Webhooks: the webhook-id,
 * webhook-timestamp and webhook-signature headers, HMAC-SHA256 under the endpoint's secret, a
 * timestamp within five minutes), with the Standard Webhooks library Ferry signs with.
 */
export class WebhookVerifier {
  readonly #wh: Webhook;

  /** `secret` is the endpoint's signing secret ("whsec_…", base64). */
  constructor(secret: string) {
    if (!secret) throw new TypeError("ferry: the webhook secret is empty");
    this.#wh = new Webhook(secret);
  }

  /**
   * Checks that `payload` — the request's body exactly as it arrived, as a string or its bytes —
   * and `headers` are a notification signed with the endpoint's secret, recently, and returns its
   * parsed body. Throws when it is not. Dedupe on webhook-id, which every retry of a notification
   * repeats.
   */
  verify(payload: string | Uint8Array, headers: WebhookHeaders): unknown {
    const h: Record<string, string> = {};
    if (headers instanceof Headers) headers.forEach((v, k) => (h[k] = v));
    else
      for (const [k, v] of Object.entries(headers)) {
        if (v !== undefined) h[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
      }
    // The signature is over the body's bytes; a body that is not UTF-8 cannot be Ferry's JSON,
    // and decoding it leniently would sign other bytes than those that came.
    const body = typeof payload === "string" ? payload : new TextDecoder("utf-8", { fatal: true }).decode(payload);
    return this.#wh.verify(body, h);
  }

  /**
   * Verifies as `verify` does and returns the notification: its `id` (the webhook-id, the same on
   * every attempt and replay: dedupe on it), `type` ("threshold.crossed", "limit.reached", …)
   * and `data` (the account, and the members its kind carries: for a threshold crossed, the
   * feature, cycle, threshold, limit and usage). An endpoint
   * registered for every kind is sent the kinds added later too, so `type` may be one this
   * version does not name: answer it 2xx and ignore it. Throws when the body does not verify, or
   * verifies but is not a notification.
   */
  verifyMessage(payload: string | Uint8Array, headers: WebhookHeaders): components["schemas"]["NotificationMessage"] {
    const msg = this.verify(payload, headers);
    if (!isNotification(msg)) throw new TypeError("ferry: the webhook verified, but its body is not a notification");
    return msg;
  }
}

/** The members every notification has, with their types. */
function isNotification(v: unknown): v is components["schemas"]["NotificationMessage"] {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  return typeof m["id"] === "string" && typeof m["type"] === "string" && typeof m["timestamp"] === "string" &&
    typeof m["data"] === "object" && m["data"] !== null;
}
