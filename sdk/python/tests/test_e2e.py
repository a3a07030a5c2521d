"""End-to-end tests against a running Ferry through the fault-injecting proxy.

`ferry faultproxy -- pytest tests/test_e2e.py` sets FERRY_SDK_URL (the proxy, where the client
under test sends) and FERRY_SDK_STACK_URL (the stack, for set-up and checks); make test-sdk starts
both. Without them these tests skip.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import datetime, timedelta, timezone

import pytest

import ferrymeter as f

PROXY = os.environ.get("FERRY_SDK_URL")
STACK = os.environ.get("FERRY_SDK_STACK_URL")
ADMIN_KEY = os.environ.get("FERRY_ADMIN_KEY") or "dev-admin-key"
#: Bounds how long a test waits for the worker to bill what was queued, in seconds.
SETTLE = 180

pytestmark = pytest.mark.skipif(not PROXY or not STACK, reason="FERRY_SDK_URL and FERRY_SDK_STACK_URL name no stack (make test-sdk runs these)")


class Retries:
    def __init__(self):
        self.n = 0

    def __call__(self, record):
        if record.get("message") == "ferry: retrying":
            self.n += 1


def new_account_id(prefix):
    """An account id no other run made: prefix and 8 random hex digits."""
    return f"{prefix}-{secrets.token_hex(4)}"


def account(prefix, limits, retries, account_id=None):
    """Creates a free account on the stack (``account_id``, or a fresh one); returns its key and
    the client options of the tests."""
    with f.Client(STACK, ADMIN_KEY) as op:
        acct = op.create_account(account_id or new_account_id(prefix), plan="free", limits=limits)
    options = dict(timeout=3.0, max_attempts=12, max_wait=10.0, on_log=retries)
    return acct.apiKey, options


def wait_used(direct, feature, want):
    deadline = time.monotonic() + SETTLE
    while True:
        u = direct.usage(feature=feature)
        if u.used >= want or time.monotonic() > deadline:
            time.sleep(1)
            return direct.usage(feature=feature)
        time.sleep(0.25)


def query_days(client, since, want):
    """Reads the account's events meter by UTC day, from the day of ``since`` to the day after
    now, until its rows total ``want`` (or the wait ends: its reads are eventually consistent);
    returns how many rows it read and their total."""
    def day(at):
        return datetime(at.year, at.month, at.day, tzinfo=timezone.utc)

    deadline = time.monotonic() + SETTLE
    while True:
        q = client.query_usage("events", window="DAY", from_=day(since), to=day(datetime.now(timezone.utc)) + timedelta(days=1))
        total = sum(row.value for row in q.rows)
        if total >= want or time.monotonic() > deadline:
            return len(q.rows), total
        time.sleep(0.25)


def test_5000_events_through_the_batcher_with_faults_end_exact():
    events = 5000
    retries = Retries()
    key, options = account("sdk-py-batch", {"events": events * 2}, retries)
    with f.Client(PROXY, key, **options) as through, f.Client(STACK, key, **options) as direct:
        start, since = time.monotonic(), datetime.now(timezone.utc)
        with through.batcher(max_age=0.2) as b:
            for i in range(events):
                b.add({"source": "/sdk/python/e2e", "type": "api.call", "data": {"n": i}})
        sent = time.monotonic() - start
        u = wait_used(direct, "events", events)
        # The usage query, through the faults too, folds the same events by UTC day: its rows
        # add up to the ledger's figure (they are written in the claims that billed the events).
        rows, total = query_days(through, since, events)
    print(f"python e2e batcher: {events} events sent in {sent:.1f} s with {retries.n} retries; usage {u.used} (want {events})")
    print(f"python e2e usage query: {rows} DAY rows totalling {total} (want {events})")
    assert u.used == events
    assert total == events


def test_20_concurrent_jobs_under_holds_end_exact():
    jobs, estimate = 20, 1000
    limit = 10 * estimate
    retries = Retries()
    key, options = account("sdk-py-holds", {"tokens": limit}, retries)

    async def run():
        admitted, refused, spent = 0, 0, 0
        undecided = jobs
        decided = asyncio.Event()

        def decide():
            nonlocal undecided
            undecided -= 1
            if undecided == 0:
                decided.set()

        async with f.AsyncClient(PROXY, key, **options) as through:
            async def one(i):
                nonlocal admitted, refused, spent
                use, ran = 500 + 17 * i, False

                async def job(j):
                    nonlocal admitted, ran
                    ran = True
                    admitted += 1
                    decide()
                    # The admitted jobs run until every admission is decided, so none frees room early.
                    await decided.wait()
                    await j.charge("step-1", use // 2)
                    return use

                try:
                    await through.run_under_hold(f"job-{i}", "tokens", estimate, job)
                    spent += use
                except f.LimitReachedError:
                    refused += 1
                finally:
                    if not ran:
                        decide()

            await asyncio.gather(*(one(i) for i in range(jobs)))
        return admitted, refused, spent

    admitted, refused, spent = asyncio.run(run())
    with f.Client(STACK, key) as direct:
        u = direct.usage(feature="tokens")
    print(f"python e2e holds: {jobs} jobs, {admitted} admitted, {refused} refused, {retries.n} retries; used {u.used} (want {spent}), held {u.held}")
    assert (admitted, refused) == (limit // estimate, jobs - limit // estimate)
    assert u.used == spent and u.held == 0


def test_close_after_a_burst_loses_nothing():
    n = 2000
    retries = Retries()
    key, options = account("sdk-py-burst", {"events": 10 * n}, retries)

    async def run():
        async with f.AsyncClient(PROXY, key, **options) as through:
            b = through.batcher(max_age=3600, buffer=n)
            await asyncio.gather(*(b.add({"source": "/sdk/python/burst", "type": "api.call"}) for _ in range(n)))
            await b.close()

    asyncio.run(run())
    with f.Client(STACK, key) as direct:
        u = wait_used(direct, "events", n)
    print(f"python e2e burst: {n} events added at once (async batcher), then close; {retries.n} retries; usage {u.used}")
    assert u.used == n


# The notifications end to end: a receiver on 127.0.0.1 registered as a webhook endpoint, an
# account driven past its thresholds and its limit through the fault proxy, every delivery
# verified with the SDK's verifier, the delivery log read and replayed through the SDK. ferry dev
# takes http://127.0.0.1 endpoints and runs the notifier every 2 s.

#: Bounds each wait for a delivery, in seconds (the notifier runs every 2 s under ferry dev).
NOTIFICATION_WAIT = 30
#: How long to listen on after the deliveries waited for, so that one more would arrive.
NOTIFICATION_QUIET = 5
#: Bounds the body the receiver keeps (Ferry's messages are far smaller).
MAX_RECEIVED_BYTES = 1 << 20


class Receiver:
    """The platform's side: an HTTP server on 127.0.0.1 that keeps every delivery as it arrived
    (the raw body and the headers) and answers 204 at once, as a receiver should."""

    def __init__(self):
        self.lock, self.got = threading.Lock(), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(min(n, MAX_RECEIVED_BYTES))
                with receiver.lock:
                    receiver.got.append({"body": body, "headers": {k.lower(): v for k, v in self.headers.items()}, "at": time.monotonic()})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ferry/notifications"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def deliveries(self):
        with self.lock:
            return list(self.got)

    def wait_for(self, done):
        """Polls the deliveries until ``done`` holds or the wait ends; says whether it held."""
        deadline = time.monotonic() + NOTIFICATION_WAIT
        while True:
            if done(self.deliveries()):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def by_id(ds):
    """Counts the deliveries of each webhook-id."""
    n = {}
    for d in ds:
        n[d["headers"]["webhook-id"]] = n.get(d["headers"]["webhook-id"], 0) + 1
    return n


def verify_all(v, ds, account_id):
    """Verifies every delivery with ``v``; returns the messages by webhook-id. A delivery that does
    not verify, whose message is not its webhook-id's, that is of another account, or that repeats
    a webhook-id with other bytes (every attempt and replay sends the same) fails."""
    out, bodies = {}, {}
    for i, d in enumerate(ds):
        msg = v.verify_message(d["body"], d["headers"])
        assert msg.id == d["headers"]["webhook-id"], f"delivery {i}"
        assert msg.data.account == account_id, f"delivery {i}"
        assert bodies.setdefault(msg.id, d["body"]) == d["body"], f"webhook-id {msg.id} sent with other bytes"
        out[msg.id] = msg
    return out


def of_kind(msgs, kind):
    """The messages of a kind, by their data's threshold (0 for none)."""
    return {m.data.threshold or 0: m for m in msgs.values() if m.type == kind}


def send_through_batcher(client, n, first):
    with client.batcher(max_age=0.2) as b:
        for i in range(n):
            b.add({"source": "/sdk/python/notifications", "type": "api.call", "data": {"n": first + i}})


def delivery_log(op, endpoint):
    """The endpoint's whole delivery log, one delivery a page so that the iterator follows cursors."""
    return {d.notification: d for d in op.webhook_deliveries(endpoint, limit=1)}


def wait_log(op, endpoint, done):
    deadline = time.monotonic() + NOTIFICATION_WAIT
    while True:
        log = delivery_log(op, endpoint)
        if done(log) or time.monotonic() > deadline:
            return log
        time.sleep(0.5)


def test_notifications_thresholds_and_limit_once_each_signed_logged_and_replayed():
    retries = Retries()
    rcv = Receiver()
    # The operator's calls go through the faults too: a registration, rotation or replay whose
    # answer is lost is sent again under its Idempotency-Key, and must land once.
    op = f.Client(PROXY, ADMIN_KEY, timeout=3.0, max_attempts=12, max_wait=10.0, on_log=retries)
    try:
        account_id = new_account_id("sdk-py-alerts")
        # The endpoint first, for the account about to be made (an account need not exist yet).
        ep = op.create_webhook_endpoint(rcv.url, kinds=["threshold.crossed", "limit.reached"], accounts=[account_id], description="sdk python e2e")
        assert [e.id for e in op.webhook_endpoints()].count(ep.id) == 1
        assert ep.url == rcv.url
        v = f.WebhookVerifier(ep.secret)

        key, options = account("sdk-py-alerts", {"events": 100}, retries, account_id)
        acct = op.get_account(account_id)
        assert [t.model_dump(exclude_none=True) for t in acct.alerts["events"].root] == [{"percent": 80}, {"percent": 100}]

        with f.Client(PROXY, key, **options) as through, f.Client(STACK, key, **options) as direct:
            # 85 events: the 80% threshold is crossed, once.
            start = time.monotonic()
            send_through_batcher(through, 85, 0)
            assert wait_used(direct, "events", 85).used == 85
            assert rcv.wait_for(lambda ds: len(ds) > 0), f"no delivery within {NOTIFICATION_WAIT} s of usage reaching 85"
            first = rcv.deliveries()[0]["at"] - start
            time.sleep(NOTIFICATION_QUIET)
            msgs = verify_all(v, rcv.deliveries(), account_id)
            assert len(msgs) == 1, [m.type for m in msgs.values()]
            at80 = of_kind(msgs, "threshold.crossed")[80]
            assert (at80.data.percent, at80.data.limit, at80.data.feature) == (80, 100, "events") and at80.data.used >= 80

            # A body changed by one byte does not verify.
            d0 = rcv.deliveries()[0]
            tampered = bytearray(d0["body"])
            tampered[-2] ^= 1
            with pytest.raises(f.WebhookVerificationFailed):
                v.verify_message(bytes(tampered), d0["headers"])

            # 20 more: 15 fit and cross 100%, 5 are refused at the limit, which is told once.
            send_through_batcher(through, 20, 85)
            assert wait_used(direct, "events", 100).used == 100
        assert rcv.wait_for(lambda ds: len(by_id(ds)) >= 3), f"{len(by_id(rcv.deliveries()))} distinct notifications, want 3"
        time.sleep(NOTIFICATION_QUIET)
        msgs = verify_all(v, rcv.deliveries(), account_id)
        crossed, reached = of_kind(msgs, "threshold.crossed"), of_kind(msgs, "limit.reached")
        assert len(msgs) == 3 and sorted(crossed) == [80, 100] and list(reached) == [0]
        assert crossed[80].id == at80.id and crossed[100].data.percent == 100
        assert (reached[0].data.limit, reached[0].data.used) == (100, 100)
        before_replay = len(rcv.deliveries())

        # The delivery log, through the SDK: three deliveries, each DELIVERED.
        log = wait_log(op, ep.id, lambda l: sum(d.status == "DELIVERED" for d in l.values()) == 3)
        assert set(log) == set(msgs)
        assert all((d.status, d.account, d.endpoint) == ("DELIVERED", account_id, ep.id) for d in log.values())

        # Rotate, then replay the 80% notification: it comes again with the same webhook-id,
        # signed with both secrets during the overlap, and the receiver still has 3 distinct ids.
        rotated = op.rotate_webhook_endpoint_secret(ep.id)
        assert rotated.secret != ep.secret and len(rotated.secrets) == 2 and rotated.previousSecretExpiresAt is not None
        replay_at = time.monotonic()
        op.replay_webhook_delivery(ep.id, at80.id)
        assert rcv.wait_for(lambda ds: by_id(ds).get(at80.id, 0) >= 2), f"the replay of {at80.id} did not arrive"
        again = rcv.deliveries()[-1]["at"] - replay_at
        time.sleep(NOTIFICATION_QUIET)
        all_ = rcv.deliveries()
        ids = by_id(all_)
        assert len(ids) == 3 and ids[at80.id] == 2 and len(all_) == before_replay + 1, ids
        verify_all(v, all_, account_id)
        assert f.WebhookVerifier(rotated.secret).verify_message(all_[-1]["body"], all_[-1]["headers"]).id == at80.id
        log = wait_log(op, ep.id, lambda l: l[at80.id].replays == 1 and l[at80.id].status == "DELIVERED")
        assert len(log) == 3 and (log[at80.id].replays, log[at80.id].status) == (1, "DELIVERED")

        # Change, then delete the endpoint: a read after is a NotFoundError.
        changed = op.update_webhook_endpoint(ep.id, disabled=True)
        assert changed.disabled and len(changed.secrets) == 2
        op.delete_webhook_endpoint(ep.id)
        with pytest.raises(f.NotFoundError):
            op.get_webhook_endpoint(ep.id)
    finally:
        op.close()
        rcv.close()
    print(f"python e2e notifications: 85 events -> threshold.crossed 80 (used {at80.data.used}) first delivery {first:.3f} s after the first add; "
          f"20 more -> threshold.crossed 100 (used {crossed[100].data.used}) and limit.reached (used {reached[0].data.used}); "
          f"{len(all_)} deliveries verified, {len(ids)} distinct webhook-ids, log 3 DELIVERED; replay of {at80.id} after a rotation arrived "
          f"{again:.3f} s after the replay call began, verified under both secrets, replays=1; {retries.n} operator/client retries")
