// Package idempotency is Ferry's one contract for the Idempotency-Key header: every mutating
// route of the HTTP API, present and future, gets the same behaviour from one middleware.
//
// A key is scoped by (caller, route template, key). The first durable write for a keyed request
// is a conditional insert of a claim (attribute_not_exists), carrying a fingerprint of the
// request; only the request that wins it runs. Its answer is then stored with the claim and
// replayed byte for byte to every repeat. A repeat that arrives while the first still runs is
// told to retry (409); the same key with a different request is refused (422). A claim whose
// owner died expires after Lease and is taken over by a conditional write that checks it is
// still the expired claim that was read. Answers that mean "the work did not happen" (5xx, 429)
// release the claim so that a retry runs. Records expire after their route's retention (its
// entry in the route table, internal/platform/httpapi), by a TTL attribute.
//
// The decisions are pure functions over the stored record (Decide, Retain),
// the DynamoDB adapter (Table) only writes and translates conditional-check failures into
// ErrClaimed and ErrClaimLost, and Service strings them together.
//
// # Keys inside bodies are not a second contract
//
// Some request bodies carry their own identity: a CloudEvent's id, a hold's job key, a charge
// step's key. Those are not idempotency keys in this package's sense; they name the effect
// itself, and the domain that owns the effect enforces them with its own conditional write (the
// ledger claims (account, event id); a hold is keyed by its job key). This package protects the
// HTTP exchange: the same request, repeated, gets the same answer without running again. The two
// compose: a client that lost an answer and retries under a new Idempotency-Key runs the handler
// again, and the domain key makes that second run harmless.
//
// Within one request the same rule holds. A batch is claimed as a whole under its key; its items
// are collapsed by their own ids before anything is queued, so two copies of an item are never
// in flight together. Every write a handler derives from the request is keyed by something
// derived from the request's own identity (the event id, the job key, the step key), never by a
// fresh id, an attempt or the claim: a takeover after a crash runs the handler again, and only
// derived keys make that second run land on the same effect.
//
// # Stored answers are sealed
//
// An answer can hold a secret (creating an account returns its API key, which Ferry otherwise
// stores only as a hash). Stored bodies are therefore encrypted (AES-256-GCM) with a key derived
// from the client's Idempotency-Key, and records are addressed by a hash of (caller, route, key):
// the table alone holds neither the key nor a readable answer. The protection is as strong as the
// client's key is hard to guess, which is why clients should send a random UUID.
package idempotency
