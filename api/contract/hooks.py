"""Ferry's own checks for schemathesis, beyond what the document alone can say.

- Every error is an RFC 9457 problem document: `application/problem+json`, a `type` of Ferry's
  tag scheme, a `title`, and a `status` equal to the HTTP status.
- A refused input stores nothing. Each refused write is compared with what a read shows before
  and after it: a refused account is still absent, a refused account change left the account as
  it was, a refused hold held nothing, a refused charge charged nothing, a refused settlement did
  not settle, a refused webhook endpoint is not listed, a refused endpoint change left the
  endpoint as it was. Events are billed asynchronously, so their check runs once the run is over: every
  event id that was only ever refused reads 404, and the account's usage in each cycle is exactly
  the number of distinct events that were accepted in it.
- Every 422 and every replay answers a key used before, and no claim is left in flight.
- A webhook endpoint's signing secret is shown by its registration and its rotations only: no
  other answer carries a `whsec_` value.

Rules of the document that OpenAPI cannot state shape what is sent: plan and feature names
are the catalog's, whole numbers are integer literals, an event uses one content mode, a list's
cursor is one a list returned, a correction's cycle is one the account has had, and the reporting
routes name the run's account (any other is a 404). Each operation gets the keys its `security`
names, both in turn where it takes either, and a real key of the other kind must be a 401.

The run (api/contract/run.py) passes the stack's address and both keys in the environment, and
runs one worker so that the before-and-after reads see no other request's effect.
"""

import hashlib
import hmac
import json
import os
import re
import time
import urllib.parse

import requests
import requests.auth
import schemathesis
from schemathesis.core.parameters import ParameterLocation

BASE_URL = os.environ["FERRY_CONTRACT_URL"].rstrip("/")
OPERATOR = {"Authorization": "Bearer " + os.environ["FERRY_CONTRACT_OPERATOR_KEY"]}
ACCOUNT = {"Authorization": "Bearer " + os.environ["FERRY_CONTRACT_ACCOUNT_KEY"]}
ACCOUNT_ID = os.environ["FERRY_CONTRACT_ACCOUNT_ID"]
PROBLEM_TYPE = re.compile(r"^tag:ferrymeter\.dev,2026:problem:[a-z-]+$")
# How long the final check waits for the worker to finish the accepted events.
SETTLE_SECONDS = 60

_http = requests.Session()


def _get(path, headers):
    return _http.get(BASE_URL + path, headers=headers, timeout=10)


def _seg(value):
    return urllib.parse.quote(str(value), safe="")


def _json(response):
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def _media_type(response):
    values = response.headers.get("content-type") or [""]
    return values[0].split(";")[0].strip().lower()


def _sent_body(response):
    """The JSON body the request carried, or None."""
    body = response.request.body
    if body is None:
        return None
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    try:
        return json.loads(body)
    except ValueError:
        return None


def _route(response):
    """(method, path) of the request, with the path as sent (still percent-encoded)."""
    url = urllib.parse.urlsplit(response.request.url)
    return response.request.method, url.path


# --- the document, for the catalog of the stack under test ------------------------------------

CATALOG = os.environ.get("FERRY_CONTRACT_CATALOG")


def _cycles_of_the_run(now):
    """A pattern of the one cycle label YYYY-MM a correction of the run's account may name.

    The run makes its account moments before the document is loaded, so the account's first
    cycle is now's month: a correction for an earlier cycle is refused (the cycle ended before
    the account existed), and one for a later cycle has not started.
    """
    return f"^{now.tm_year:04d}-{now.tm_mon:02d}$"


@schemathesis.hook
def before_load_schema(context, raw_schema):
    """Names the plans and features of the catalog the stack runs with.

    The document leaves plan and feature names open (a deployment's catalog decides them, and
    refuses other names with a 400). Under test the catalog is known, so its names become enums:
    schemathesis then sends existing names as valid data, which must be accepted, and other names
    as invalid data, which must be refused.
    """
    if not CATALOG:
        return
    with open(CATALOG, encoding="utf-8") as f:
        catalog = json.load(f)
    plans = sorted(catalog["plans"])
    features = sorted(catalog["features"])
    # An allowance's limit is the sum of its cycle's grants: the document says it cannot be set.
    limited = [f for f in features if not catalog["features"][f].get("allowance")]
    schemas = raw_schema["components"]["schemas"]
    schemas["PlanName"]["enum"] = plans
    schemas["Limits"]["propertyNames"] = {"enum": limited}
    # Thresholds, too, are set for the catalog's features but the allowances.
    schemas["Alerts"]["propertyNames"] = {"enum": limited}
    schemas["CreateHoldRequest"]["properties"]["feature"]["enum"] = features
    schemas["CorrectionRequest"]["properties"]["feature"]["enum"] = features
    # A correction's cycle must have started ("only usage that happened can be corrected") and must
    # not have ended before the account existed, which a schema cannot say of a clock or of an
    # account: under test, the one cycle the run's account has had is written out.
    schemas["CorrectionRequest"]["properties"]["cycle"] = {"type": "string", "pattern": _cycles_of_the_run(time.gmtime())}
    # The reporting routes name an account in the body or the query; valid data names the
    # account the run made (any other valid id is a 404, as the document says, and stops there).
    schemas["CorrectionRequest"]["properties"]["account"] = {"enum": [ACCOUNT_ID]}
    schemas["ReconcileRequest"]["properties"]["account"] = {"enum": [ACCOUNT_ID]}
    for parameter in raw_schema["paths"]["/v1/reconcile/evidence"]["get"]["parameters"]:
        if parameter["name"] == "account":
            parameter["schema"] = {"enum": [ACCOUNT_ID]}
    for parameter in raw_schema["paths"]["/v1/usage"]["get"]["parameters"]:
        if parameter["name"] == "feature":
            parameter["schema"]["enum"] = features


# --- credentials: each operation with the keys it documents, and no other ---------------------

KEYS = {"operatorKey": OPERATOR["Authorization"], "accountKey": ACCOUNT["Authorization"]}
_turns = {}  # operation label -> cases that took a key


def _schemes(operation):
    """The security schemes of Ferry's keys that the operation documents, in its order."""
    security = operation.definition.raw.get("security", operation.schema.raw_schema.get("security", []))
    return [name for requirement in security if isinstance(requirement, dict) for name in requirement if name in KEYS]


@schemathesis.auth(refresh_interval=None, retry_on=[])
class FerryKeys:
    """Gives each case the key its operation documents.

    An operation that takes either key (the billing-events routes: an account sees its own
    events, the operator every event) gets them in turn, so both are exercised; schemathesis's
    own choice would be the first alternative every time. The webhook routes, /healthz and
    /openapi.yaml document no key and get none.
    """

    def get(self, case, context):
        schemes = _schemes(case.operation)
        if not schemes:
            return None
        turn = _turns.get(case.operation.label, 0)
        _turns[case.operation.label] = turn + 1
        return KEYS[schemes[turn % len(schemes)]]

    def set(self, case, data, context):
        case.headers = case.headers or {}
        case.headers["Authorization"] = data
        # The routes an account reads its own events and holds on need the operator to name the
        # account (their descriptions say so; a schema cannot tie a parameter to a key): with
        # the operator key, a case that names none names the run's account.
        if data == KEYS["operatorKey"] and (case.operation.method.upper(), case.operation.path) in _OPERATOR_NAMES_ACCOUNT:
            case.query = case.query or {}
            case.query.setdefault("account", ACCOUNT_ID)


# Routes on which the operator key must name the account (account=).
_OPERATOR_NAMES_ACCOUNT = {("GET", "/v1/events"), ("GET", "/v1/events/{id}"), ("GET", "/v1/holds"), ("GET", "/v1/usage/query")}


_other_key_tried = set()  # operation labels whose answer to the other key was checked


@schemathesis.check
def ferry_other_key_refused(ctx, response, case):
    """The key of the other kind is a 401 on an operation that takes one kind only.

    schemathesis tries no key and made-up keys; this tries a real key of the wrong kind (the
    account's key on an operator route, the operator key on an account route), which must be a
    401, as the document says of a wrong key. It sends the request that was just answered 2xx
    once more, once per operation.
    """
    label = case.operation.label
    schemes = _schemes(case.operation)
    if len(schemes) != 1 or not 200 <= response.status_code < 300 or label in _other_key_tried:
        return None
    _other_key_tried.add(label)
    other = KEYS["accountKey" if schemes[0] == "operatorKey" else "operatorKey"]
    request = response.request.copy()
    request.headers["Authorization"] = other
    answer = _http.send(request, timeout=10)
    if answer.status_code != 401:
        raise AssertionError(
            f"{case.operation.method.upper()} {case.operation.path} answered the {'account' if schemes[0] == 'operatorKey' else 'operator'} "
            f"key, which it does not take, with {answer.status_code}, not 401"
        )
    return None


# --- keys: refusals and replays only where the key was used before ---------------------------

_keys_sent = set()  # (caller, method, route, Idempotency-Key) of every keyed request
_job_keys = set()  # (caller, job key) of every hold answered 200 or 201
_step_keys = set()  # (caller, hold path, step key) of every charge answered 200


@schemathesis.check
def ferry_key_answers(ctx, response, case):
    """Every 422 and every replay answers a key used before; nothing is left in flight.

    A 422 is either idempotency-key-reused (the Idempotency-Key was sent before by the same caller
    on the same route) or key-reused (the hold's job key, or the charge's step key, already named
    another request). `Idempotent-Replayed: true` answers only a key sent before. Requests go one
    at a time, so a 409 idempotency-in-flight would mean that an earlier request left its claim
    unfinished.
    """
    method, path = _route(response)
    route = (case.operation.method.upper(), case.operation.path)
    caller = response.request.headers.get("Authorization", "")
    key = response.request.headers.get("Idempotency-Key")
    use = (caller, route, key)
    keyed_before = use in _keys_sent
    if key is not None:
        _keys_sent.add(use)
    body = _sent_body(response)
    body = body if isinstance(body, dict) else {}
    body_key = body.get("key") if isinstance(body.get("key"), str) else None
    job = (caller, body_key)
    step = (caller, path, body_key)
    job_before, step_before = job in _job_keys, step in _step_keys
    if route == ("POST", "/v1/holds") and response.status_code in (200, 201) and body_key:
        _job_keys.add(job)
    if route == ("POST", "/v1/holds/{id}/charges") and response.status_code == 200 and body_key:
        _step_keys.add(step)

    problem = _json(response) if response.status_code >= 400 else None
    kind = problem.get("type", "").rsplit(":", 1)[-1] if isinstance(problem, dict) else ""
    if response.status_code == 422:
        if kind == "idempotency-key-reused":
            if not keyed_before:
                raise AssertionError("422 idempotency-key-reused for an Idempotency-Key not sent before on this route")
        elif kind == "key-reused":
            if not (route == ("POST", "/v1/holds") and job_before) and not (
                route == ("POST", "/v1/holds/{id}/charges") and step_before
            ):
                raise AssertionError(f"422 key-reused on {method} {path} for a key that named nothing before")
        else:
            raise AssertionError(f"422 of kind {kind!r}: Ferry's 422s are idempotency-key-reused and key-reused")
    if kind == "idempotency-in-flight":
        raise AssertionError("409 idempotency-in-flight while no other request was running: a claim was left open")
    replayed = (response.headers.get("idempotent-replayed") or [None])[0]
    if replayed is not None and (replayed != "true" or not keyed_before):
        raise AssertionError(f"Idempotent-Replayed: {replayed} for an Idempotency-Key not sent before on this route")


# --- a webhook endpoint's secret is shown once ------------------------------------------------

# The answers that show a secret: a registration and a rotation.
_SHOWS_SECRET = {("POST", "/v1/webhook-endpoints"), ("POST", "/v1/webhook-endpoints/{id}/rotate-secret")}


@schemathesis.check
def ferry_secrets_shown_once(ctx, response, case):
    """Only a registration and a rotation show a signing secret; every other answer, reads of the
    endpoints first, shows none (an endpoint shows when each secret was made and when it stops
    signing, never its value)."""
    route = (case.operation.method.upper(), case.operation.path)
    if route in _SHOWS_SECRET and response.status_code in (200, 201):
        return
    if b"whsec_" in (response.content or b"") and route[1].startswith("/v1/webhook-endpoints"):
        raise AssertionError(f"{route[0]} {route[1]} answered {response.status_code} with a signing secret")


# --- every error is a problem document ---------------------------------------------------------


@schemathesis.check
def ferry_errors_are_problems(ctx, response, case):
    """Every 4xx and 5xx is application/problem+json with type, title and the same status."""
    if response.status_code < 400:
        return
    if _media_type(response) != "application/problem+json":
        raise AssertionError(
            f"{response.status_code} answered with Content-Type {_media_type(response)!r}, not application/problem+json"
        )
    problem = _json(response)
    if not isinstance(problem, dict):
        raise AssertionError("the problem document is not a JSON object")
    if not isinstance(problem.get("type"), str) or not PROBLEM_TYPE.match(problem["type"]):
        raise AssertionError(f"problem type {problem.get('type')!r} is not tag:ferrymeter.dev,2026:problem:<kind>")
    if not isinstance(problem.get("title"), str) or not problem["title"]:
        raise AssertionError("the problem document has no title")
    if problem.get("status") != response.status_code:
        raise AssertionError(f"the problem says status {problem.get('status')!r}, the answer is {response.status_code}")


# --- a refused input stores nothing ------------------------------------------------------------

# What a read showed just before the request now in flight (one worker: one request at a time).
_before = {}


def _usage(feature):
    r = _get("/v1/usage?feature=" + _seg(feature), ACCOUNT)
    return _json(r) if r.status_code == 200 else None


def _hold(hold_id):
    r = _get("/v1/holds/" + _seg(hold_id), ACCOUNT)
    return _json(r) if r.status_code == 200 else None


def _account(account_id):
    r = _get("/v1/accounts/" + _seg(account_id), OPERATOR)
    return r.status_code, _json(r)


def _webhook_endpoints():
    r = _get("/v1/webhook-endpoints", OPERATOR)
    body = _json(r) if r.status_code == 200 else None
    return sorted(e["id"] for e in body["items"]) if isinstance(body, dict) else None


def _webhook_endpoint(endpoint_id):
    r = _get("/v1/webhook-endpoints/" + _seg(endpoint_id), OPERATOR)
    return r.status_code, _json(r)


def _integer_literals(value):
    """The same JSON value with every whole number written as an integer literal (7, not 7.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integer_literals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integer_literals(v) for v in value]
    return value


@schemathesis.hook
def before_call(context, case, kwargs):
    """Writes integers as the document requires, then reads, just before a write, the state the
    write must leave alone if it is refused.

    JSON Schema counts 7.0 as an integer, so schemathesis sends it for `integer` fields; the
    document's strict-input rule, which a schema cannot state, takes integer literals only (and
    Ferry refuses 7.0, as its own tests check). The value is the same; only its spelling changes.
    """
    if isinstance(case.body, (dict, list)):
        written = _integer_literals(case.body)
        if written != case.body or json.dumps(written) != json.dumps(case.body):
            case.body = written
    if (case.operation.method.upper(), case.operation.path) == ("POST", "/v1/events"):
        _one_content_mode(case)
    if (case.operation.method.upper(), case.operation.path) == ("POST", "/v1/webhooks/stripe"):
        _sign_stripe(case, kwargs)
    if (case.operation.method.upper(), case.operation.path) == ("GET", "/v1/usage/query"):
        _valid_usage_query(case)
    if case.query and "cursor" in case.query and case.query["cursor"] not in _cursors:
        # The document's cursor is "the `next` of the page before": one this API returned.
        del case.query["cursor"]
    _before.clear()
    _read_before(case)


def _read_before(case):
    """What a read shows before a write that must leave it alone if it is refused."""
    op = case.operation
    body = case.body if isinstance(case.body, dict) else {}
    key = (op.method.upper(), op.path)
    if key == ("POST", "/v1/holds") and isinstance(body.get("feature"), str) and body["feature"]:
        _before["usage"] = _usage(body["feature"])
    elif key in {("POST", "/v1/holds/{id}/charges"), ("POST", "/v1/holds/{id}/settle")}:
        hold_id = (case.path_parameters or {}).get("id")
        if isinstance(hold_id, str) and hold_id:
            _before["hold"] = _hold(hold_id)
    elif key == ("POST", "/v1/accounts") and isinstance(body.get("id"), str) and body["id"]:
        _before["account"] = _account(body["id"])
    elif key == ("PATCH", "/v1/accounts/{id}"):
        account_id = (case.path_parameters or {}).get("id")
        if isinstance(account_id, str) and account_id:
            _before["account"] = _account(account_id)
    elif key == ("POST", "/v1/webhook-endpoints"):
        _before["endpoints"] = _webhook_endpoints()
    elif key == ("PATCH", "/v1/webhook-endpoints/{id}"):
        endpoint_id = (case.path_parameters or {}).get("id")
        if isinstance(endpoint_id, str) and endpoint_id:
            _before["endpoint"] = _webhook_endpoint(endpoint_id)
    _before["route"] = key


STRIPE_SECRET = os.environ.get("FERRY_CONTRACT_STRIPE_SECRET", "")


class _StripeSignature(requests.auth.AuthBase):
    """Signs the bytes actually sent, as Stripe does: v1 = HMAC-SHA256(secret, "<t>.<body>")."""

    def __call__(self, request):
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        t = str(int(time.time()))
        v1 = hmac.new(STRIPE_SECRET.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
        request.headers["Stripe-Signature"] = f"t={t},v1={v1}"
        return request


def _sign_stripe(case, kwargs):
    """Gives a Stripe delivery a valid signature, so that its body reaches the inbox.

    Only the stack knows its signing secret, so every generated delivery would stop at the 401 of
    its signature, and nothing behind it would be judged. A case whose headers are generated to
    break the document (a missing or malformed Stripe-Signature) keeps them.
    """
    meta = getattr(case, "meta", None)
    negative_header = meta is not None and meta.is_negative_at(ParameterLocation.HEADER)
    if STRIPE_SECRET and not negative_header and any(n.lower() == "stripe-signature" for n in (case.headers or {})):
        kwargs["auth"] = _StripeSignature()


def _valid_usage_query(case):
    """Makes a usage query generated as valid data valid for the stack under test.

    What makes a query valid depends on things its schema cannot state: the deployment's meters
    and their dimensions, instants aligned to the window (a CYCLE's to the account's billing
    cycles), a span the window allows. A case generated to break the document keeps what it was
    given; any other gets a meter of the catalog, the window it was given (CYCLE becomes DAY:
    a cycle's start is the account's agreement day, which no route reads), one window that
    ended an hour ago, and a grouping only by the meter's own dimensions; the account it names
    stays.
    """
    meta = getattr(case, "meta", None)
    if meta is not None and meta.is_negative_at(ParameterLocation.QUERY):
        return
    with open(CATALOG, encoding="utf-8") as f:
        meters = json.load(f)["meters"]
    q = dict(case.query or {})
    names = sorted(meters)
    meter = q.get("meter") if q.get("meter") in meters else names[len(str(q.get("meter", ""))) % len(names)]
    window = q.get("window") if q.get("window") in ("MINUTE", "HOUR", "DAY") else "DAY"
    step = {"MINUTE": 60, "HOUR": 3600, "DAY": 86400}[window]
    end = (int(time.time()) - 3600) // step * step
    out = {"meter": meter, "window": window,
           "from": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end - step)),
           "to": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end))}
    dims = sorted(meters[meter].get("dimensions", {}))
    if dims and "groupBy" in q:
        out["groupBy"] = dims[0]
    if "account" in q:
        out["account"] = q["account"]
    case.query = out


_cursors = set()  # every `next` a list answered


@schemathesis.check
def ferry_collect_cursors(ctx, response, case):
    """Keeps every cursor a list returns, the only cursors a client may send back."""
    body = _json(response) if response.status_code == 200 else None
    if isinstance(body, dict) and isinstance(body.get("next"), str):
        _cursors.add(body["next"])


BINARY_REQUIRED = {"ce-specversion": "1.0", "ce-source": "/contract", "ce-type": "contract.binary"}


def _one_content_mode(case):
    """Sends POST /v1/events in one CloudEvents content mode, as the document requires.

    OpenAPI cannot tie headers to a media type, so schemathesis mixes them: ce-* headers with a
    structured body, or a body of another type with no ce-* headers. The document says an event
    is either structured (application/cloudevents+json or application/json, no ce-* headers) or
    binary (the ce-* attributes, with specversion, id, source and type required, and the data in
    the body). A JSON body is generated as the event, so its request is structured and loses any
    ce-* headers (binary mode would make the body the data, which the schema does not describe);
    a body of any other type is binary and gets the missing required attributes (a fresh id each
    time). Schemathesis also sends a body it generated from the `*/*` schema (binary mode's data:
    `false`, `[]`) as application/json; a valid body that is no JSON object cannot be a
    structured event, so it is binary too.
    """
    headers = case.headers if case.headers is not None else {}
    ce = [name for name in list(headers) if name.lower().startswith("ce-")]
    media = (case.media_type or "").split(";")[0].strip().lower()
    meta = getattr(case, "meta", None)
    negative_body = meta is not None and meta.is_negative_at(ParameterLocation.BODY)
    structured = isinstance(case.body, dict) or negative_body
    if media in ("application/json", "application/cloudevents+json") and structured:
        if ce:
            for name in ce:
                del headers[name]
            case.headers = headers
        return
    present = {name.lower() for name in ce}
    for name, value in BINARY_REQUIRED.items():
        if name not in present:
            headers[name] = value
    if "ce-id" not in present:
        headers["ce-id"] = "contract-" + os.urandom(8).hex()
    case.headers = headers


@schemathesis.check
class ferry_refusals_store_nothing:
    """A refused write changes nothing that a read can see."""

    def __init__(self):
        self.accepted = set()  # event ids answered queued (202, or queued in a batch)
        self.refused = set()  # event ids carried by a refused request or a refused batch item
        self.event_holds = False  # a hold on feature "events" also moves events usage

    def after_response(self, ctx, response, case):
        op = case.operation
        route = (op.method.upper(), op.path)
        if route == ("POST", "/v1/events"):
            return self._event(response)
        if route == ("POST", "/v1/events/batch"):
            return self._batch(response)
        if route == ("POST", "/v1/holds") and response.status_code in (200, 201):
            self.event_holds |= (_json(response) or {}).get("feature") == "events"
        refused = 400 <= response.status_code < 500
        if not refused or _before.get("route") != route:
            return
        body = _sent_body(response)
        body = body if isinstance(body, dict) else {}
        if route == ("POST", "/v1/holds"):
            before = _before.get("usage")
            after = _usage(body.get("feature")) if before else None
            # The sweeper may expire a hold meanwhile, which lowers held and used + held; a
            # stored hold raises both.
            if before and after and (
                after["held"] > before["held"] or after["used"] + after["held"] > before["used"] + before["held"]
            ):
                raise AssertionError(f"a refused hold moved usage of {body.get('feature')!r}: {before} -> {after}")
        elif route == ("POST", "/v1/holds/{id}/charges"):
            before = _before.get("hold")
            after = _hold(before["id"]) if before else None
            if before and after and after["used"] != before["used"]:
                raise AssertionError(f"a refused charge moved the hold: used {before['used']} -> {after['used']}")
        elif route == ("POST", "/v1/holds/{id}/settle"):
            before = _before.get("hold")
            after = _hold(before["id"]) if before else None
            if before and after and before["status"] == "RUNNING" and after["status"] == "SETTLED":
                raise AssertionError("a refused settlement settled the hold")
        elif route == ("POST", "/v1/accounts"):
            before = _before.get("account")
            if before and before[0] == 404:
                status, _ = _account(body.get("id"))
                if status != 404:
                    raise AssertionError(f"a refused account creation stored account {body.get('id')!r}")
        elif route == ("PATCH", "/v1/accounts/{id}"):
            before = _before.get("account")
            if before and before[0] == 200:
                after = _account(before[1]["id"])
                if after != before:
                    raise AssertionError(f"a refused account change changed it: {before[1]} -> {after[1]}")
        elif route == ("POST", "/v1/webhook-endpoints"):
            before = _before.get("endpoints")
            after = _webhook_endpoints() if before is not None else None
            if before is not None and after != before:
                raise AssertionError(f"a refused webhook endpoint registration stored one: {sorted(set(after or []) - set(before))}")
        elif route == ("PATCH", "/v1/webhook-endpoints/{id}"):
            before = _before.get("endpoint")
            if before and before[0] == 200:
                after = _webhook_endpoint(before[1]["id"])
                if after != before:
                    raise AssertionError(f"a refused webhook endpoint change changed it: {before[1]} -> {after[1]}")

    def _event(self, response):
        event_id = response.request.headers.get("ce-id")  # binary mode
        if event_id is None:
            body = _sent_body(response)
            event_id = body.get("id") if isinstance(body, dict) else None
        if not isinstance(event_id, str) or not event_id:
            return
        if response.status_code == 202:
            self.accepted.add(event_id)
        elif 400 <= response.status_code < 500:
            self.refused.add(event_id)

    def _batch(self, response):
        items = _sent_body(response)
        if not isinstance(items, list):
            return
        answer = _json(response) if response.status_code in (202, 400) else None
        results = answer.get("results") if isinstance(answer, dict) else None
        if response.status_code == 202 and isinstance(results, list):
            for result in results:
                if not isinstance(result, dict) or not result.get("id"):
                    continue
                if result.get("status") == "queued":
                    self.accepted.add(result["id"])
                elif result.get("status") == "invalid":
                    self.refused.add(result["id"])
        elif 400 <= response.status_code < 500:
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
                    self.refused.add(item["id"])

    def after_run(self, ctx):
        # Wait for the worker to finish every accepted event.
        statuses = {}
        deadline = time.monotonic() + SETTLE_SECONDS
        pending = set(self.accepted)
        while pending and time.monotonic() < deadline:
            for event_id in sorted(pending):
                r = _get("/v1/events/" + _seg(event_id), ACCOUNT)
                if r.status_code == 200 and _json(r).get("status") != "INSERTING":
                    statuses[event_id] = _json(r)
                    pending.discard(event_id)
            if pending:
                time.sleep(0.5)
        problems = []
        if pending:
            problems.append(f"{len(pending)} accepted events were not processed within {SETTLE_SECONDS} s: {sorted(pending)[:5]}")
        stored = []
        for event_id in sorted(self.refused - self.accepted):
            r = _get("/v1/events/" + _seg(event_id), ACCOUNT)
            if r.status_code != 404:
                stored.append((event_id, r.status_code))
        if stored:
            problems.append(f"{len(stored)} refused events are stored: {stored[:5]}")
        billed = {}
        for event_id, status in statuses.items():
            if status.get("billingAcceptedAt"):
                billed[status["cycle"]] = billed.get(status["cycle"], 0) + 1
            else:
                problems.append(f"accepted event {event_id!r} ended {status.get('status')} unbilled: {status.get('reason')}")
        for cycle, count in sorted(billed.items()):
            usage = _json(_get(f"/v1/usage?feature=events&cycle={cycle}", ACCOUNT)) or {}
            used = usage.get("used")
            if used != count and not (self.event_holds and isinstance(used, int) and used > count):
                problems.append(f"cycle {cycle}: usage says {usage.get('used')} events, {count} distinct events were accepted")
        print(
            f"\nFerry's checks: {len(self.accepted)} distinct events accepted, "
            f"{len(self.refused - self.accepted)} only refused; billed by cycle {billed or '{}'}"
        )
        if problems:
            raise AssertionError("; ".join(problems))
