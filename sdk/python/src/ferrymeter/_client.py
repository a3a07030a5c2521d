"""The sync and async clients: one request loop each over the same pure pieces."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Literal, Mapping, Sequence, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from . import models as m
from ._errors import NetworkError, ProblemError, problem_from_answer
from ._ids import new_event_id, new_idempotency_key
from ._retry import RetryPolicy, decide, server_wait
from ._version import VERSION

T = TypeVar("T", bound=BaseModel)

#: The most events one batch request carries (the route's limit).
MAX_BATCH_EVENTS = 100
#: Bounds one iteration over a listing: 10,000 pages of up to 100 items.
MAX_PAGES = 10_000
#: Bounds the charge and settlement run_under_hold makes after its job.
SETTLE_TIMEOUT = 30.0
#: The step key of the charge run_under_hold makes for what the job reported beyond its own charges.
FINAL_STEP_KEY = "ferry:run-under-hold:final"

_log = logging.getLogger("ferrymeter")

#: The usage query's windows: the generated UsageQuery's ``window`` (a test keeps them equal).
UsageWindow = Literal["MINUTE", "HOUR", "DAY", "CYCLE"]


@dataclass(frozen=True)
class Config:
    """How a client is configured; only base_url and api_key are needed."""

    #: Ferry's address, e.g. http://127.0.0.1:8080 or the API Gateway URL.
    base_url: str
    #: An account's API key, or the operator key for the operator routes.
    api_key: str
    #: Bounds each attempt, in seconds.
    timeout: float = 10.0
    #: Bounds the attempts of one call (1 turns retries off).
    max_attempts: int = 6
    #: The first backoff, in seconds; each retry doubles it.
    base_wait: float = 0.1
    #: Caps backoffs and the server-asked waits the client honours, in seconds.
    max_wait: float = 30.0
    #: Receives a record (a dict) for every retry and every batch a batcher could not send; by
    #: default they go to the "ferrymeter" logger.
    on_log: Callable[[dict[str, Any]], None] | None = None
    #: Put before the client's own product token, e.g. "my-app/1.2".
    user_agent: str = ""


@dataclass
class _Call:
    method: str
    path: str
    params: dict[str, Any] | None = None
    #: The body's bytes, encoded once for every attempt.
    body: bytes | None = None
    #: Minted once per logical mutating call.
    idempotency_key: str | None = None


def _mutating(method: str, path: str, body: Any = None) -> _Call:
    data = None if body is None else _encode(body)
    return _Call(method, path, body=data, idempotency_key=new_idempotency_key())


def _encode(body: Any) -> bytes:
    if isinstance(body, BaseModel):
        body = body.model_dump(mode="json", exclude_none=True, by_alias=True)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def prepare_event(event: dict[str, Any]) -> dict[str, Any]:
    """Fills what the client owns in an event: its spec version and, when left out, its id."""
    ev = dict(event)
    ev.setdefault("specversion", "1.0")
    if not ev.get("id"):
        ev["id"] = new_event_id()
    return ev


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _usage_query_params(meter: str, window: str, from_: datetime, to: datetime, tz: str | None,
                        group_by: str | None, filter: Mapping[str, str] | None, account: str | None) -> dict[str, str]:
    """The usage query's parameters as the query string carries them, each filter as
    ``filter[<dimension>]``, the instants in RFC 3339 with their offsets as given.

    Ferry refuses an empty parameter, and dropping one (as the other reads drop a None) would
    answer another query than the one asked — a day in UTC rather than in the zone meant — so a
    parameter given empty, a naive datetime (whose instant is a guess) or a value of another type
    is refused here, with every other problem at once, before anything is sent.
    """
    problems: list[str] = []
    params: dict[str, str] = {}

    def put(name: str, value: Any, required: bool) -> None:
        if value is None:
            if required:
                problems.append(f"{name} is required")
        elif not isinstance(value, str):
            problems.append(f"{name} is a {type(value).__name__}, not a str")
        elif value == "":
            problems.append(f"{name} is empty" if required else f"{name} is empty; leave it None instead")
        else:
            params[name] = value

    put("meter", meter, True)
    put("window", window, True)
    for name, at in (("from", from_), ("to", to)):
        if at is None:
            problems.append(f"{name} is required")
        elif not isinstance(at, datetime):
            problems.append(f"{name} is a {type(at).__name__}, not a datetime")
        elif at.utcoffset() is None:
            problems.append(f"{name} is a naive datetime; give it a time zone (datetime.timezone.utc, a ZoneInfo)")
        else:
            params[name] = at.isoformat()
    put("tz", tz, False)
    put("groupBy", group_by, False)
    put("account", account, False)
    if filter is not None:
        if not isinstance(filter, Mapping):
            problems.append(f"filter is a {type(filter).__name__}, not a mapping of dimension to value")
        else:
            for dim, value in filter.items():
                if not isinstance(dim, str) or dim == "":
                    problems.append("a filter names an empty dimension (or one that is not a str)")
                elif not isinstance(value, str) or value == "":
                    problems.append(f"filter[{dim}] is not a value; Ferry filters on a value, so leave the dimension out")
                else:
                    params[f"filter[{dim}]"] = value
    if problems:
        raise ValueError("ferry: query usage: " + "; ".join(problems))
    return params


class _Base:
    def __init__(self, config: Config) -> None:
        if not config.base_url.startswith(("http://", "https://")):
            raise ValueError(f"ferry: base_url {config.base_url!r} is not an http(s) URL")
        if not config.api_key:
            raise ValueError("ferry: api_key is empty")
        self._config = config
        self._policy = RetryPolicy(config.max_attempts, config.base_wait, config.max_wait)
        self._headers = {
            "Authorization": f"Bearer {config.api_key}",
            "User-Agent": f"{config.user_agent} ferrymeter-python/{VERSION}".strip(),
            "Accept": "application/json, application/problem+json",
        }

    def _log(self, record: dict[str, Any]) -> None:
        if self._config.on_log is not None:
            self._config.on_log(record)
        else:
            _log.warning("%s %s", record.get("message"), {k: v for k, v in record.items() if k != "message"})

    def _request_args(self, call: _Call) -> dict[str, Any]:
        headers = dict(self._headers)
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        if call.idempotency_key:
            headers["Idempotency-Key"] = call.idempotency_key
        return {"method": call.method, "url": self._config.base_url.rstrip("/") + call.path,
                "params": _clean(call.params or {}), "content": call.body, "headers": headers,
                "timeout": self._config.timeout}

    def _outcome(self, call: _Call, attempt: int, resp: httpx.Response | None, err: Exception | None):
        """Returns (answer, None) for a 2xx, else (None, decision-and-outcome)."""
        if resp is not None and resp.is_success:
            return (resp.json() if resp.content else None), None
        outcome: NetworkError | ProblemError
        if resp is None:
            outcome = NetworkError(call.method, call.path, err)  # type: ignore[arg-type]
        else:
            outcome = problem_from_answer(resp.status_code, server_wait(resp.headers), resp.content)
        d = decide(self._policy, attempt, outcome)
        if not d.retry:
            raise outcome
        self._log({"message": "ferry: retrying", "method": call.method, "path": call.path, "attempt": attempt,
                   "wait": round(d.wait, 3), "reason": d.reason, "idempotency_key": call.idempotency_key})
        return None, d


def _hold_path(hold_id: str, tail: str = "") -> str:
    return f"/v1/holds/{quote(hold_id, safe='')}{tail}"


def _endpoint_path(endpoint_id: str, tail: str = "") -> str:
    """The path of a webhook endpoint, and of what is below it. An empty id is refused before
    anything is sent: the path would name the collection instead."""
    if not endpoint_id:
        raise ValueError("ferry: the webhook endpoint's id is empty")
    return f"/v1/webhook-endpoints/{quote(endpoint_id, safe='')}{tail}"


def _replay_path(endpoint_id: str, notification: str) -> str:
    if not notification:
        raise ValueError("ferry: the notification's id is empty")
    return _endpoint_path(endpoint_id, f"/deliveries/{quote(notification, safe='')}/replay")


def _endpoint_body(url: str | None, kinds: Sequence[str] | None, accounts: Sequence[str] | None,
                   description: str | None, disabled: bool | None = None) -> dict[str, Any]:
    """A webhook endpoint's registration or change, the members given (an empty description is
    given: it removes the description).

    Built as a plain body rather than through the generated request model: the model's URL
    pattern is the common form of an endpoint (https and a DNS name), and Ferry takes more than
    it (an http loopback URL under ferry dev, an allowed IP literal), judging every URL itself and
    naming each problem in an InvalidRequestError.
    """
    return _clean({"url": url, "kinds": None if kinds is None else list(kinds),
                   "accounts": None if accounts is None else list(accounts),
                   "description": description, "disabled": disabled})


class Job:
    """A job running under a hold: its hold, and a way to charge steps as it goes."""

    def __init__(self, client: "Client", hold: m.Hold) -> None:
        self._client, self.hold, self._recorded = client, hold, hold.used
        self._lock = threading.Lock()

    def charge(self, step_key: str, amount: int) -> m.Charge:
        """Charges one step; ``capped`` in the answer means the job must stop."""
        c = self._client.charge_hold(self.hold.id, key=step_key, amount=amount)
        with self._lock:
            self._recorded = max(self._recorded, c.used)
        return c


class AsyncJob:
    """A job running under a hold in an async client."""

    def __init__(self, client: "AsyncClient", hold: m.Hold) -> None:
        self._client, self.hold, self._recorded = client, hold, hold.used

    async def charge(self, step_key: str, amount: int) -> m.Charge:
        """Charges one step; ``capped`` in the answer means the job must stop."""
        c = await self._client.charge_hold(self.hold.id, key=step_key, amount=amount)
        self._recorded = max(self._recorded, c.used)
        return c


class Client(_Base):
    """Calls Ferry's API. Thread-safe; make one and share it. Close it (or use ``with``) when done.

    Every event gets its id once; every mutating call mints one Idempotency-Key and sends it on
    each retry; retries are bounded and exponential with jitter on network errors, timeouts, 429,
    5xx and 409 idempotency-in-flight, never on another 4xx; every problem is raised as its kind.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, config: Config | None = None,
                 http_client: httpx.Client | None = None, **options: Any) -> None:
        super().__init__(config or Config(base_url=base_url or "", api_key=api_key or "", **options))
        self._http = http_client or httpx.Client(limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        self._owns_http = http_client is None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the HTTP client the client made (not one it was given)."""
        if self._owns_http:
            self._http.close()

    def request(self, call: _Call) -> Any:
        """Sends a call, retrying as the policy allows, and returns the decoded 2xx answer."""
        args = self._request_args(call)
        for attempt in range(1, self._policy.max_attempts + 1):
            resp, err = None, None
            try:
                resp = self._http.request(**args)
            except httpx.TransportError as e:
                err = e
            answer, d = self._outcome(call, attempt, resp, err)
            if d is None:
                return answer
            time.sleep(d.wait)
        raise AssertionError("unreachable: decide stops at max_attempts")

    def _get(self, model: type[T], path: str, **params: Any) -> T:
        return model.model_validate(self.request(_Call("GET", path, params=params)))

    def _mutate(self, model: type[T], method: str, path: str, body: Any = None) -> T:
        return model.model_validate(self.request(_mutating(method, path, body)))

    def _pages(self, model: type[T], path: str, **params: Any) -> Iterator[T]:
        for _ in range(MAX_PAGES):
            page = self.request(_Call("GET", path, params=params))
            for item in page["items"]:
                yield model.model_validate(item)
            if not page.get("next"):
                return
            params["cursor"] = page["next"]
        raise FerryErrorPages(path)

    # Events.

    def send_event(self, event: dict[str, Any]) -> m.EventAccepted:
        """Sends one usage event; returns once it is durably queued. Every retry sends the same id."""
        ev = prepare_event(event)
        return m.EventAccepted.model_validate(self.request(_mutating("POST", "/v1/events", ev)))

    def send_batch(self, events: list[dict[str, Any]]) -> m.BatchAccepted:
        """Sends up to 100 events in one request; the answer has one result per event, in order."""
        if not 0 < len(events) <= MAX_BATCH_EVENTS:
            raise ValueError(f"ferry: a batch holds 1 to {MAX_BATCH_EVENTS} events, not {len(events)}")
        return self.send_prepared([prepare_event(e) for e in events])

    def send_prepared(self, events: list[dict[str, Any]]) -> m.BatchAccepted:
        """Sends a batch whose events all have their ids (the batcher's way in)."""
        return m.BatchAccepted.model_validate(self.request(_mutating("POST", "/v1/events/batch", events)))

    def batcher(self, **config: Any) -> "Batcher":
        """Starts a background Batcher on this client (see Batcher for its options)."""
        from ._batcher import Batcher

        return Batcher(self, **config)

    def get_event(self, event_id: str) -> m.EventStatus:
        return self._get(m.EventStatus, f"/v1/events/{quote(event_id, safe='')}")

    def failed_events(self, status: str, account: str | None = None, limit: int | None = None) -> Iterator[m.EventStatus]:
        """Iterates over the account's REJECTED or UNINSERTABLE events, newest first."""
        return self._pages(m.EventStatus, "/v1/events", status=status, account=account, limit=limit)

    def redrive_event(self, event_id: str, account: str) -> dict[str, Any]:
        return self.request(_mutating("POST", f"/v1/events/{quote(event_id, safe='')}/redrive", {"account": account}))

    # Usage and billing events.

    def usage(self, feature: str | None = None, cycle: str | None = None) -> m.Usage:
        """The account's usage of a feature in a cycle (a None limit or remaining is unlimited)."""
        return self._get(m.Usage, "/v1/usage", feature=feature, cycle=cycle)

    def query_usage(self, meter: str, *, window: UsageWindow, from_: datetime, to: datetime, tz: str | None = None,
                    group_by: str | None = None, filter: Mapping[str, str] | None = None, account: str | None = None) -> m.UsageQuery:
        """A meter's usage over [from_, to) by MINUTE, HOUR, DAY (in the IANA zone ``tz``, UTC
        without one) or CYCLE windows, grouped by ``group_by``'s dimensions (comma-separated) and
        kept to ``filter``'s values; the operator names the ``account``. One row per window and
        group with usage; a row with ``other`` counts the groups an hour had no room to keep by
        name. A required parameter missing, or any given empty, raises ValueError before anything
        is sent; what the server refuses (alignment, ranges, dimensions) raises
        InvalidRequestError listing every problem.
        """
        params = _usage_query_params(meter, window, from_, to, tz, group_by, filter, account)
        return m.UsageQuery.model_validate(self.request(_Call("GET", "/v1/usage/query", params=params)))

    def billing_events(self, status: str | None = None, account: str | None = None, limit: int | None = None) -> Iterator[m.BillingEvent]:
        return self._pages(m.BillingEvent, "/v1/billing-events", status=status, account=account, limit=limit)

    def get_billing_event(self, event_id: str) -> m.BillingEventWithReceipts:
        return self._get(m.BillingEventWithReceipts, f"/v1/billing-events/{quote(event_id, safe='')}")

    def replay_billing_event(self, event_id: str) -> m.BillingEvent:
        return self._mutate(m.BillingEvent, "POST", f"/v1/billing-events/{quote(event_id, safe='')}/replay")

    # Holds.

    def reserve_hold(self, key: str, feature: str, amount: int) -> m.Hold:
        """Holds part of a limit before a job starts; the same key answers the same hold."""
        return self._mutate(m.Hold, "POST", "/v1/holds", m.CreateHoldRequest(key=key, feature=feature, amount=amount))

    def get_hold(self, hold_id: str) -> m.Hold:
        return self._get(m.Hold, _hold_path(hold_id))

    def holds(self, status: str, account: str | None = None, limit: int | None = None) -> Iterator[m.Hold]:
        return self._pages(m.Hold, "/v1/holds", status=status, account=account, limit=limit)

    def charge_hold(self, hold_id: str, key: str, amount: int) -> m.Charge:
        """Charges one step against a hold; a repeated step key charges nothing again."""
        return self._mutate(m.Charge, "POST", _hold_path(hold_id, "/charges"), m.ChargeRequest(key=key, amount=amount))

    def settle_hold(self, hold_id: str, used: int | None = None) -> m.Settlement:
        """Settles a hold at ``used`` (or what the charges recorded) and releases the rest."""
        body = None if used is None else m.SettleRequest(used=used)
        return self._mutate(m.Settlement, "POST", _hold_path(hold_id, "/settle"), body)

    def run_under_hold(self, key: str, feature: str, amount: int, job: Callable[[Job], int]) -> m.Settlement:
        """Reserves a hold, runs ``job`` under it, charges what it returns (beyond its own charges)
        and settles the hold — always: when the job raises, or is interrupted, too. A refused
        reservation raises its error (LimitReachedError…) and runs nothing. Re-raises the job's
        exception after settling.
        """
        hold = self.reserve_hold(key, feature, amount)
        handle = Job(self, hold)
        used = 0
        try:
            used = job(handle)
        finally:
            extra = used - handle._recorded
            try:
                if extra > 0 and hold.status == "RUNNING":
                    self.charge_hold(hold.id, key=FINAL_STEP_KEY, amount=extra)
            finally:
                settlement = self.settle_hold(hold.id)
        return settlement

    # Operator routes (the operator key as api_key).

    def create_account(self, id: str, **fields: Any) -> m.AccountWithKey:
        """Creates an account (plan, status, limits, alerts such as ``{"events": [{"percent": 80},
        {"value": 500}]}``, linked ids) and returns it with its API key, shown once."""
        return self._mutate(m.AccountWithKey, "POST", "/v1/accounts", m.CreateAccountRequest(id=id, **fields))

    def get_account(self, account_id: str) -> m.Account:
        return self._get(m.Account, f"/v1/accounts/{quote(account_id, safe='')}")

    def update_account(self, account_id: str, **changes: Any) -> m.Account:
        """Changes an account (plan, status, limits, alerts — a feature's empty list turns its
        thresholds off —, agreement start, linked ids); a linked id given as None unlinks it."""
        return self._mutate(m.Account, "PATCH", f"/v1/accounts/{quote(account_id, safe='')}", changes)

    def accounts(self, prefix: str | None = None, linked_id: str | None = None, limit: int | None = None) -> Iterator[m.Account]:
        return self._pages(m.Account, "/v1/accounts", prefix=prefix, linkedId=linked_id, limit=limit)

    def standing(self, account_id: str, cycles: int | None = None) -> dict[str, Any]:
        return self.request(_Call("GET", f"/v1/accounts/{quote(account_id, safe='')}/standing", params={"cycles": cycles}))

    def create_correction(self, account: str, feature: str, units: int, reason: str, cycle: str | None = None) -> m.Correction:
        """Appends a ± correction row; the call's Idempotency-Key names it, so its retries append it once."""
        return self._mutate(m.Correction, "POST", "/v1/usage/corrections",
                            m.CorrectionRequest(account=account, feature=feature, units=units, reason=reason, cycle=cycle))

    def run_report(self) -> m.ReportRun:
        return self._mutate(m.ReportRun, "POST", "/v1/report", {})

    def reconcile(self, account: str | None = None, cycle: str | None = None, after: str | None = None) -> m.ReconcileRun:
        return self._mutate(m.ReconcileRun, "POST", "/v1/reconcile", _clean({"account": account, "cycle": cycle, "after": after}))

    def evidence(self, account: str, cycle: str | None = None) -> m.EvidenceList:
        return self._get(m.EvidenceList, "/v1/reconcile/evidence", account=account, cycle=cycle)

    def review(self) -> m.ReviewList:
        return self._get(m.ReviewList, "/v1/reconcile/review")

    def outbox(self, account: str, cycle: str | None = None) -> dict[str, Any]:
        return self.request(_Call("GET", "/v1/outbox", params={"account": account, "cycle": cycle}))

    def run_lab(self, lab: str) -> dict[str, Any]:
        return self.request(_mutating("POST", f"/v1/labs/{quote(lab, safe='')}/runs", {}))

    # Webhook endpoints (operator): where Ferry sends its notifications, their signing secrets
    # and their delivery logs. Each mutating call sends one Idempotency-Key on all its attempts,
    # so a retried registration or rotation answers the same endpoint and secret, not a second.

    def create_webhook_endpoint(self, url: str, *, kinds: Sequence[str] | None = None, accounts: Sequence[str] | None = None,
                                description: str | None = None) -> m.WebhookEndpointWithSecret:
        """Registers an endpoint for ``kinds`` ("threshold.crossed", "limit.reached"; none: every
        kind) of ``accounts`` (none: every account) and returns it with its first signing secret
        ("whsec_…"), which no other answer shows: store it with the receiver. A refused
        registration raises InvalidRequestError naming every problem."""
        return self._mutate(m.WebhookEndpointWithSecret, "POST", "/v1/webhook-endpoints",
                            _endpoint_body(url, kinds, accounts, description))

    def webhook_endpoints(self) -> Iterator[m.WebhookEndpoint]:
        """Iterates over every registered endpoint, oldest first (never a secret's value)."""
        return self._pages(m.WebhookEndpoint, "/v1/webhook-endpoints")

    def get_webhook_endpoint(self, endpoint_id: str) -> m.WebhookEndpoint:
        """Reads an endpoint: when each secret that signs was made and stops, never its value."""
        return self._get(m.WebhookEndpoint, _endpoint_path(endpoint_id))

    def update_webhook_endpoint(self, endpoint_id: str, *, url: str | None = None, kinds: Sequence[str] | None = None,
                                accounts: Sequence[str] | None = None, description: str | None = None,
                                disabled: bool | None = None) -> m.WebhookEndpoint:
        """Changes the members given (``description=""`` removes it; ``disabled`` stops and
        resumes deliveries) and returns the endpoint as stored. Secrets are never changed here."""
        return self._mutate(m.WebhookEndpoint, "PATCH", _endpoint_path(endpoint_id),
                            _endpoint_body(url, kinds, accounts, description, disabled))

    def delete_webhook_endpoint(self, endpoint_id: str) -> None:
        """Deletes an endpoint: it is sent nothing more. A second delete raises NotFoundError."""
        self.request(_mutating("DELETE", _endpoint_path(endpoint_id)))

    def rotate_webhook_endpoint_secret(self, endpoint_id: str) -> m.RotatedWebhookEndpoint:
        """Makes a new signing secret current and returns it (in this answer only); the one it
        replaces keeps signing until ``previousSecretExpiresAt`` (24 hours). A rotation that raced
        another raises ConflictError and changed nothing."""
        return self._mutate(m.RotatedWebhookEndpoint, "POST", _endpoint_path(endpoint_id, "/rotate-secret"))

    def webhook_deliveries(self, endpoint_id: str, limit: int | None = None) -> Iterator[m.WebhookDelivery]:
        """Iterates over an endpoint's delivery log, newest notification first, page after page
        (``limit`` deliveries a page, at most 100)."""
        return self._pages(m.WebhookDelivery, _endpoint_path(endpoint_id, "/deliveries"), limit=limit)

    def replay_webhook_delivery(self, endpoint_id: str, notification: str) -> m.WebhookDelivery:
        """Puts an endpoint's delivery of a notification back to PENDING with a fresh set of
        attempts; the notifier sends it on its next run with the same webhook-id. Raises
        ConflictError while an attempt is being sent."""
        return self._mutate(m.WebhookDelivery, "POST", _replay_path(endpoint_id, notification))

    def health(self) -> m.Health:
        return self._get(m.Health, "/healthz")


class FerryErrorPages(Exception):
    """A listing ran past MAX_PAGES pages."""

    def __init__(self, path: str) -> None:
        super().__init__(f"ferry: {path}: more than {MAX_PAGES} pages")


class AsyncClient(_Base):
    """The async client: the same calls as Client, awaited. Safe to share among tasks of one loop."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, config: Config | None = None,
                 http_client: httpx.AsyncClient | None = None, **options: Any) -> None:
        super().__init__(config or Config(base_url=base_url or "", api_key=api_key or "", **options))
        self._http = http_client or httpx.AsyncClient(limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        self._owns_http = http_client is None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def request(self, call: _Call) -> Any:
        """Sends a call, retrying as the policy allows, and returns the decoded 2xx answer."""
        args = self._request_args(call)
        for attempt in range(1, self._policy.max_attempts + 1):
            resp, err = None, None
            try:
                resp = await self._http.request(**args)
            except httpx.TransportError as e:
                err = e
            answer, d = self._outcome(call, attempt, resp, err)
            if d is None:
                return answer
            await asyncio.sleep(d.wait)
        raise AssertionError("unreachable: decide stops at max_attempts")

    async def _get(self, model: type[T], path: str, **params: Any) -> T:
        return model.model_validate(await self.request(_Call("GET", path, params=params)))

    async def _mutate(self, model: type[T], method: str, path: str, body: Any = None) -> T:
        return model.model_validate(await self.request(_mutating(method, path, body)))

    async def _pages(self, model: type[T], path: str, **params: Any) -> AsyncIterator[T]:
        for _ in range(MAX_PAGES):
            page = await self.request(_Call("GET", path, params=params))
            for item in page["items"]:
                yield model.model_validate(item)
            if not page.get("next"):
                return
            params["cursor"] = page["next"]
        raise FerryErrorPages(path)

    async def send_event(self, event: dict[str, Any]) -> m.EventAccepted:
        ev = prepare_event(event)
        return m.EventAccepted.model_validate(await self.request(_mutating("POST", "/v1/events", ev)))

    async def send_batch(self, events: list[dict[str, Any]]) -> m.BatchAccepted:
        if not 0 < len(events) <= MAX_BATCH_EVENTS:
            raise ValueError(f"ferry: a batch holds 1 to {MAX_BATCH_EVENTS} events, not {len(events)}")
        return await self.send_prepared([prepare_event(e) for e in events])

    async def send_prepared(self, events: list[dict[str, Any]]) -> m.BatchAccepted:
        return m.BatchAccepted.model_validate(await self.request(_mutating("POST", "/v1/events/batch", events)))

    def batcher(self, **config: Any) -> "AsyncBatcher":
        """Starts an AsyncBatcher on this client (call it inside the running loop)."""
        from ._batcher import AsyncBatcher

        return AsyncBatcher(self, **config)

    async def get_event(self, event_id: str) -> m.EventStatus:
        return await self._get(m.EventStatus, f"/v1/events/{quote(event_id, safe='')}")

    def failed_events(self, status: str, account: str | None = None, limit: int | None = None) -> AsyncIterator[m.EventStatus]:
        return self._pages(m.EventStatus, "/v1/events", status=status, account=account, limit=limit)

    async def redrive_event(self, event_id: str, account: str) -> dict[str, Any]:
        return await self.request(_mutating("POST", f"/v1/events/{quote(event_id, safe='')}/redrive", {"account": account}))

    async def usage(self, feature: str | None = None, cycle: str | None = None) -> m.Usage:
        return await self._get(m.Usage, "/v1/usage", feature=feature, cycle=cycle)

    async def query_usage(self, meter: str, *, window: UsageWindow, from_: datetime, to: datetime, tz: str | None = None,
                          group_by: str | None = None, filter: Mapping[str, str] | None = None, account: str | None = None) -> m.UsageQuery:
        """As Client.query_usage, awaited."""
        params = _usage_query_params(meter, window, from_, to, tz, group_by, filter, account)
        return m.UsageQuery.model_validate(await self.request(_Call("GET", "/v1/usage/query", params=params)))

    def billing_events(self, status: str | None = None, account: str | None = None, limit: int | None = None) -> AsyncIterator[m.BillingEvent]:
        return self._pages(m.BillingEvent, "/v1/billing-events", status=status, account=account, limit=limit)

    async def get_billing_event(self, event_id: str) -> m.BillingEventWithReceipts:
        return await self._get(m.BillingEventWithReceipts, f"/v1/billing-events/{quote(event_id, safe='')}")

    async def replay_billing_event(self, event_id: str) -> m.BillingEvent:
        return await self._mutate(m.BillingEvent, "POST", f"/v1/billing-events/{quote(event_id, safe='')}/replay")

    async def reserve_hold(self, key: str, feature: str, amount: int) -> m.Hold:
        return await self._mutate(m.Hold, "POST", "/v1/holds", m.CreateHoldRequest(key=key, feature=feature, amount=amount))

    async def get_hold(self, hold_id: str) -> m.Hold:
        return await self._get(m.Hold, _hold_path(hold_id))

    def holds(self, status: str, account: str | None = None, limit: int | None = None) -> AsyncIterator[m.Hold]:
        return self._pages(m.Hold, "/v1/holds", status=status, account=account, limit=limit)

    async def charge_hold(self, hold_id: str, key: str, amount: int) -> m.Charge:
        return await self._mutate(m.Charge, "POST", _hold_path(hold_id, "/charges"), m.ChargeRequest(key=key, amount=amount))

    async def settle_hold(self, hold_id: str, used: int | None = None) -> m.Settlement:
        body = None if used is None else m.SettleRequest(used=used)
        return await self._mutate(m.Settlement, "POST", _hold_path(hold_id, "/settle"), body)

    async def run_under_hold(self, key: str, feature: str, amount: int, job: Callable[[AsyncJob], Awaitable[int]]) -> m.Settlement:
        """As Client.run_under_hold; a cancelled task still settles its hold (the settlement is
        shielded from a second cancellation) before the cancellation goes on."""
        hold = await self.reserve_hold(key, feature, amount)
        handle = AsyncJob(self, hold)
        used = 0

        async def finish() -> m.Settlement:
            extra = used - handle._recorded
            charge_error: Exception | None = None
            if extra > 0 and hold.status == "RUNNING":
                try:
                    await self.charge_hold(hold.id, key=FINAL_STEP_KEY, amount=extra)
                except Exception as e:  # the settlement still runs; the error is raised after it
                    charge_error = e
            settlement = await asyncio.wait_for(self.settle_hold(hold.id), SETTLE_TIMEOUT)
            if charge_error is not None:
                raise charge_error
            return settlement

        try:
            used = await job(handle)
        finally:
            settlement = await asyncio.shield(finish())
        return settlement

    async def create_account(self, id: str, **fields: Any) -> m.AccountWithKey:
        return await self._mutate(m.AccountWithKey, "POST", "/v1/accounts", m.CreateAccountRequest(id=id, **fields))

    async def get_account(self, account_id: str) -> m.Account:
        return await self._get(m.Account, f"/v1/accounts/{quote(account_id, safe='')}")

    async def update_account(self, account_id: str, **changes: Any) -> m.Account:
        return await self._mutate(m.Account, "PATCH", f"/v1/accounts/{quote(account_id, safe='')}", changes)

    def accounts(self, prefix: str | None = None, linked_id: str | None = None, limit: int | None = None) -> AsyncIterator[m.Account]:
        return self._pages(m.Account, "/v1/accounts", prefix=prefix, linkedId=linked_id, limit=limit)

    async def standing(self, account_id: str, cycles: int | None = None) -> dict[str, Any]:
        return await self.request(_Call("GET", f"/v1/accounts/{quote(account_id, safe='')}/standing", params={"cycles": cycles}))

    async def create_correction(self, account: str, feature: str, units: int, reason: str, cycle: str | None = None) -> m.Correction:
        return await self._mutate(m.Correction, "POST", "/v1/usage/corrections",
                                  m.CorrectionRequest(account=account, feature=feature, units=units, reason=reason, cycle=cycle))

    async def run_report(self) -> m.ReportRun:
        return await self._mutate(m.ReportRun, "POST", "/v1/report", {})

    async def reconcile(self, account: str | None = None, cycle: str | None = None, after: str | None = None) -> m.ReconcileRun:
        return await self._mutate(m.ReconcileRun, "POST", "/v1/reconcile", _clean({"account": account, "cycle": cycle, "after": after}))

    async def evidence(self, account: str, cycle: str | None = None) -> m.EvidenceList:
        return await self._get(m.EvidenceList, "/v1/reconcile/evidence", account=account, cycle=cycle)

    async def review(self) -> m.ReviewList:
        return await self._get(m.ReviewList, "/v1/reconcile/review")

    async def outbox(self, account: str, cycle: str | None = None) -> dict[str, Any]:
        return await self.request(_Call("GET", "/v1/outbox", params={"account": account, "cycle": cycle}))

    async def run_lab(self, lab: str) -> dict[str, Any]:
        return await self.request(_mutating("POST", f"/v1/labs/{quote(lab, safe='')}/runs", {}))

    async def create_webhook_endpoint(self, url: str, *, kinds: Sequence[str] | None = None, accounts: Sequence[str] | None = None,
                                      description: str | None = None) -> m.WebhookEndpointWithSecret:
        """As Client.create_webhook_endpoint, awaited."""
        return await self._mutate(m.WebhookEndpointWithSecret, "POST", "/v1/webhook-endpoints",
                                  _endpoint_body(url, kinds, accounts, description))

    def webhook_endpoints(self) -> AsyncIterator[m.WebhookEndpoint]:
        return self._pages(m.WebhookEndpoint, "/v1/webhook-endpoints")

    async def get_webhook_endpoint(self, endpoint_id: str) -> m.WebhookEndpoint:
        return await self._get(m.WebhookEndpoint, _endpoint_path(endpoint_id))

    async def update_webhook_endpoint(self, endpoint_id: str, *, url: str | None = None, kinds: Sequence[str] | None = None,
                                      accounts: Sequence[str] | None = None, description: str | None = None,
                                      disabled: bool | None = None) -> m.WebhookEndpoint:
        return await self._mutate(m.WebhookEndpoint, "PATCH", _endpoint_path(endpoint_id),
                                  _endpoint_body(url, kinds, accounts, description, disabled))

    async def delete_webhook_endpoint(self, endpoint_id: str) -> None:
        await self.request(_mutating("DELETE", _endpoint_path(endpoint_id)))

    async def rotate_webhook_endpoint_secret(self, endpoint_id: str) -> m.RotatedWebhookEndpoint:
        return await self._mutate(m.RotatedWebhookEndpoint, "POST", _endpoint_path(endpoint_id, "/rotate-secret"))

    def webhook_deliveries(self, endpoint_id: str, limit: int | None = None) -> AsyncIterator[m.WebhookDelivery]:
        return self._pages(m.WebhookDelivery, _endpoint_path(endpoint_id, "/deliveries"), limit=limit)

    async def replay_webhook_delivery(self, endpoint_id: str, notification: str) -> m.WebhookDelivery:
        return await self._mutate(m.WebhookDelivery, "POST", _replay_path(endpoint_id, notification))

    async def health(self) -> m.Health:
        return await self._get(m.Health, "/healthz")
