"""End-to-end tests against a running Ferry through the fault-injecting proxy.

`ferry faultproxy -- pytest tests/test_e2e.py` sets FERRY_SDK_URL (the proxy, where the client
under test sends) and FERRY_SDK_STACK_URL (the stack, for set-up and checks); make test-sdk starts
both. Without them these tests skip.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
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


def account(prefix, limits, retries):
    with f.Client(STACK, ADMIN_KEY) as op:
        acct = op.create_account(f"{prefix}-{secrets.token_hex(4)}", plan="free", limits=limits)
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
