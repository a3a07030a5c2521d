"""Ids: event ids minted once per event, Idempotency-Keys once per logical call."""

import base64
import secrets
import uuid


def new_event_id() -> str:
    """Mints an event id: "evt_" and 128 random bits.

    The client and the batchers mint one for an event without an id, once; a caller that retries
    on its own should mint it first and keep it.
    """
    return "evt_" + base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()


def new_idempotency_key() -> str:
    """Mints a random UUID (version 4) for one logical mutating call."""
    return str(uuid.uuid4())
