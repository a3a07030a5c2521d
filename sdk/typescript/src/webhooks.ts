import { Webhook } from "standardwebhooks";

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
   * Checks that `payload` — the request's body exactly as it arrived — and `headers` are a
   * notification signed with the endpoint's secret, recently, and returns its parsed body.
   * Throws when it is not. Dedupe on webhook-id, which every retry of a notification repeats.
   */
  verify(payload: string, headers: Record<string, string> | Headers): unknown {
    const h: Record<string, string> = {};
    if (headers instanceof Headers) headers.forEach((v, k) => (h[k] = v));
    else for (const [k, v] of Object.entries(headers)) h[k.toLowerCase()] = v;
    return this.#wh.verify(payload, h);
  }
}
