"""The retry decision: pure, apart from its jitter."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ._errors import NetworkError, ProblemError


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds and spaces the retries of one call."""

    max_attempts: int = 6
    base_wait: float = 0.1
    max_wait: float = 30.0


@dataclass(frozen=True)
class Decision:
    retry: bool
    wait: float
    reason: str


def decide(policy: RetryPolicy, attempt: int, outcome: NetworkError | ProblemError,
           rand: Callable[[], float] = random.random) -> Decision:
    """The retry decision after attempt number ``attempt`` (1 for the first) ended in ``outcome``.

    Retried: no answer (a refused or reset connection, a timeout: the effect may or may not have
    happened, and the call's identity makes sending it again safe); 408 request-timeout (the body
    did not reach the server in time, so nothing was done); 429; every 5xx, 502
    outcome-unknown included; 409 idempotency-in-flight, which is this call's own earlier attempt
    still running. Never retried: any other 4xx, which a retry would only repeat.
    """
    if attempt >= policy.max_attempts:
        return Decision(False, 0, "attempts exhausted")
    if isinstance(outcome, NetworkError):
        reason = "no answer"
    elif outcome.status == 408:
        reason = "408"
    elif outcome.status == 429:
        reason = "429"
    elif outcome.status >= 500:
        reason = str(outcome.status)
    elif outcome.status == 409 and outcome.kind == "idempotency-in-flight":
        reason = "in flight"
    else:
        return Decision(False, 0, "not retryable")
    asked = outcome.retry_after if isinstance(outcome, ProblemError) else None
    if asked is not None:
        if asked > policy.max_wait:
            return Decision(False, 0, f"server asks to wait {asked} s")
        return Decision(True, asked + rand() * policy.base_wait, reason)
    return Decision(True, backoff(policy, attempt, rand), reason)


def backoff(policy: RetryPolicy, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """The capped exponential wait before retry number ``attempt``, with equal jitter."""
    step = min(policy.base_wait * 2 ** min(attempt - 1, 30), policy.max_wait)
    return step / 2 + rand() * step / 2


def server_wait(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for: Retry-After (seconds or an HTTP date) or RateLimit-Reset (seconds)."""
    value = (headers.get("retry-after") or "").strip()
    if value:
        if value.isdigit():
            return float(value)
        try:
            return max(email.utils.parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
        except (TypeError, ValueError):
            pass
    reset = (headers.get("ratelimit-reset") or "").strip()
    if reset.isdigit():
        return float(reset)
    return None
