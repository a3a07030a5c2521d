"""Verifying Ferry's outgoing notifications with the Standard Webhooks library Ferry signs with."""

from __future__ import annotations

from typing import Any, Mapping

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ._errors import FerryError


class WebhookVerificationFailed(FerryError):
    """A notification whose signature, timestamp or headers do not verify."""


class WebhookVerifier:
    """Verifies notifications Ferry sends to an endpoint (Standard Webhooks: webhook-id,
    webhook-timestamp and webhook-signature, HMAC-SHA256 under the endpoint's secret, a timestamp
    within five minutes). Thread-safe."""

    def __init__(self, secret: str) -> None:
        """``secret`` is the endpoint's signing secret ("whsec_…", base64)."""
        if not secret:
            raise ValueError("ferry: the webhook secret is empty")
        self._wh = Webhook(secret)

    def verify(self, payload: bytes | str, headers: Mapping[str, str]) -> Any:
        """Checks that ``payload`` — the body exactly as it arrived — and ``headers`` are a
        notification signed with the endpoint's secret, recently; returns the parsed body. Dedupe
        on webhook-id, which every retry of a notification repeats."""
        try:
            return self._wh.verify(payload, dict(headers.items()))
        except (WebhookVerificationError, ValueError) as e:
            raise WebhookVerificationFailed(f"ferry: webhook not verified: {e}") from e
