"""Verifying Ferry's outgoing notifications with the Standard Webhooks library Ferry signs with."""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from . import models as m
from ._errors import FerryError


class WebhookVerificationFailed(FerryError):
    """A notification whose signature, timestamp or headers do not verify."""


class NotificationNotUnderstood(FerryError):
    """A delivery that verified — Ferry sent it — whose body this version cannot read as a
    notification: a kind added after it (an endpoint registered for every kind is sent those
    too). Answer it 2xx and ignore it; ``body`` is the parsed JSON."""

    def __init__(self, body: Any, cause: ValidationError) -> None:
        super().__init__(f"ferry: a verified webhook that is not a notification this version knows: {cause.error_count()} problems")
        self.body = body


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

    def verify_message(self, payload: bytes | str, headers: Mapping[str, str]) -> m.NotificationMessage:
        """Verifies as ``verify`` does and returns the notification: its ``id`` (the webhook-id,
        the same on every attempt and replay: dedupe on it), ``type`` ("threshold.crossed",
        "limit.reached", …) and ``data`` (the account, and the members its kind carries: for a
        threshold crossed, the feature, cycle, threshold, limit and usage). Raises
        WebhookVerificationFailed when it does not verify, and NotificationNotUnderstood when it
        verifies but this version cannot read it."""
        body = self.verify(payload, headers)
        try:
            return m.NotificationMessage.model_validate(body)
        except ValidationError as e:
            raise NotificationNotUnderstood(body, e) from e
