"""Problem documents as exceptions: one class per kind Ferry answers."""

from __future__ import annotations

import json
from typing import Any

PROBLEM_TYPE_PREFIX = "tag:ferrymeter.dev,2026:problem:"


class FerryError(Exception):
    """Every error the client raises about a call."""


class NetworkError(FerryError):
    """A request that got no complete answer: refused, reset, timed out. Its effect is unknown."""

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        super().__init__(f"ferry: {method} {path}: no answer: {cause!r}")
        self.method, self.path, self.cause = method, path, cause


class ProblemError(FerryError):
    """An RFC 9457 problem document Ferry answered.

    Every kind this client knows is raised as its own subclass; an unknown kind, or an answer that
    is not a problem document, as a bare ProblemError.
    """

    def __init__(self, *, kind: str, type: str, title: str, status: int, detail: str,
                 extensions: dict[str, Any], retry_after: float | None) -> None:
        super().__init__(f"ferry: {status} {title}: {detail}" if detail else f"ferry: {status} {title}")
        self.kind, self.type, self.title, self.status, self.detail = kind, type, title, status, detail
        #: The document's other members, by name ("remaining", "errors", …).
        self.extensions = extensions
        #: The answer's Retry-After in seconds, when it had one.
        self.retry_after = retry_after


class InternalError(ProblemError):
    """Something failed on Ferry's side; the detail never shows the cause."""


class InvalidRequestError(ProblemError):
    """The input was refused and nothing was stored."""

    @property
    def errors(self) -> list[str]:
        """Every problem with an account's fields."""
        return list(self.extensions.get("errors") or [])

    @property
    def results(self) -> list[dict[str, Any]]:
        """Each item of a batch none of whose items was valid."""
        return list(self.extensions.get("results") or [])


class UnauthorizedError(ProblemError):
    """No key, or not the key this route needs."""


class NotFoundError(ProblemError):
    """No such resource, or another account's."""


class MethodNotAllowedError(ProblemError):
    """The path does not take the method."""


class UnsupportedMediaTypeError(ProblemError):
    """The body's media type is not one the route reads."""


class TooLargeError(ProblemError):
    """The body is over the route's limit."""


class ConflictError(ProblemError):
    """The request conflicts with the resource (an id that exists, a linked id another account holds)."""

    @property
    def field(self) -> str | None:
        return self.extensions.get("field")


class AgreementLockedError(ProblemError):
    """The agreement start is fixed after the account's first usage."""


class LimitReachedError(ProblemError):
    """The limit has no room; nothing moved."""

    @property
    def remaining(self) -> int | None:
        """What is left of the limit."""
        return self.extensions.get("remaining")

    @property
    def needed(self) -> int | None:
        """What a refused hold asked for."""
        return self.extensions.get("needed")


class LimitUnknownError(ProblemError):
    """The limit cannot be known, so nothing is promised (fail closed)."""


class RateLimitedError(ProblemError):
    """Too many new holds."""

    @property
    def retry_after_seconds(self) -> int | None:
        return self.extensions.get("retryAfter")


class UnavailableError(ProblemError):
    """A dependency is unavailable and nothing was done."""


class IdempotencyInFlightError(ProblemError):
    """A request with the same Idempotency-Key is still running."""


class IdempotencyKeyReusedError(ProblemError):
    """The Idempotency-Key belongs to a different request."""


class HoldNotRunningError(ProblemError):
    """The hold is settled or expired; the job must stop."""

    @property
    def hold_status(self) -> str | None:
        return self.extensions.get("holdStatus")


class KeyReusedError(ProblemError):
    """A job or step key was sent again with a different request."""


class AccountInactiveError(ProblemError):
    """The account is inactive and records no new usage."""


class OutcomeUnknownError(ProblemError):
    """The write may or may not have landed; sending the same event ids again is safe."""


class InvalidHeaderError(ProblemError):
    """The request's head is not valid HTTP."""


class InvalidSignatureError(ProblemError):
    """A webhook delivery whose signature cannot be verified."""


class ForbiddenError(ProblemError):
    """A console request refused as sent."""


class UnsupportedError(ProblemError):
    """The stack lacks what the request needs."""


class BusyError(ProblemError):
    """As many runs as may run at once are running."""


class RequestTimeoutError(ProblemError):
    """The request's body did not arrive within the server's bound; nothing was done, and the client sends it again."""


#: Each kind Ferry answers (its problem table), with its exception class.
PROBLEM_KINDS: dict[str, type[ProblemError]] = {
    "internal": InternalError,
    "invalid-request": InvalidRequestError,
    "unauthorized": UnauthorizedError,
    "not-found": NotFoundError,
    "method-not-allowed": MethodNotAllowedError,
    "unsupported-media-type": UnsupportedMediaTypeError,
    "too-large": TooLargeError,
    "conflict": ConflictError,
    "agreement-locked": AgreementLockedError,
    "limit-reached": LimitReachedError,
    "limit-unknown": LimitUnknownError,
    "rate-limited": RateLimitedError,
    "unavailable": UnavailableError,
    "idempotency-in-flight": IdempotencyInFlightError,
    "idempotency-key-reused": IdempotencyKeyReusedError,
    "hold-not-running": HoldNotRunningError,
    "key-reused": KeyReusedError,
    "account-inactive": AccountInactiveError,
    "outcome-unknown": OutcomeUnknownError,
    "invalid-header": InvalidHeaderError,
    "invalid-signature": InvalidSignatureError,
    "forbidden": ForbiddenError,
    "unsupported": UnsupportedError,
    "busy": BusyError,
    "request-timeout": RequestTimeoutError,
}


def problem_from_answer(status: int, retry_after: float | None, body: bytes) -> ProblemError:
    """Turns a non-2xx answer into the exception of its kind."""
    fields: dict[str, Any] = {"kind": "", "type": "", "title": "", "status": status, "detail": "",
                              "extensions": {}, "retry_after": retry_after}
    try:
        members = json.loads(body)
    except ValueError:
        members = None
    if not isinstance(members, dict):
        text = body.decode("utf-8", "replace").strip()
        if 0 < len(text) <= 200:
            fields["detail"] = text
        return ProblemError(**fields)
    for name, value in members.items():
        if name in ("type", "title", "detail") and isinstance(value, str):
            fields[name] = value
        elif name == "status" and isinstance(value, int):
            fields["status"] = value
        else:
            fields["extensions"][name] = value
    if fields["type"].startswith(PROBLEM_TYPE_PREFIX):
        fields["kind"] = fields["type"][len(PROBLEM_TYPE_PREFIX):]
    return PROBLEM_KINDS.get(fields["kind"], ProblemError)(**fields)
