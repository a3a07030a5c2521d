// Ids from the Web Crypto API, which Node.js 20+ and every browser have (getRandomValues works in
// pages that are not secure contexts too, where randomUUID does not).

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

function randomBytes(n: number): Uint8Array {
  const b = new Uint8Array(n);
  globalThis.crypto.getRandomValues(b);
  return b;
}

/**
 * Mints an event id: "evt_" and 128 random bits. The client and the Batcher mint one for an event
 * without an id, once; a caller that retries on its own should mint it first and keep it.
 */
export function newEventId(): string {
  const bytes = randomBytes(16);
  let bits = 0;
  let value = 0;
  let out = "evt_";
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

/** Mints a random UUID (version 4): one Idempotency-Key per logical mutating call. */
export function newIdempotencyKey(): string {
  const b = randomBytes(16);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
