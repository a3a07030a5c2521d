"""Measures the sync Batcher's throughput against a running Ferry, side by side with a bare httpx
client posting the same batches (an id per event and an Idempotency-Key per request, as the
Batcher sends, so Ferry does the same work for both and the ratio is the client's own cost):
events per second each way, alternating rounds on fresh
accounts, and their ratio (the goal is at least 0.9). A program, not a test: make bench-sdk runs
it against ferry dev.

    FERRY_SDK_STACK_URL=http://127.0.0.1:8080 python bench/batcher.py [events] [rounds]
"""

import json
import os
import secrets
import statistics
import sys
import threading
import time

import httpx

import ferrymeter

BASE = os.environ["FERRY_SDK_STACK_URL"]
ADMIN = os.environ.get("FERRY_ADMIN_KEY") or "dev-admin-key"
EVENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
CONCURRENCY = 2


def account(prefix):
    with ferrymeter.Client(BASE, ADMIN) as op:
        return op.create_account(f"{prefix}-{secrets.token_hex(4)}", limits={"events": 2 * EVENTS}).apiKey


def drain(key):
    """Waits until the worker has billed every event a side sent, so the next side starts on an
    idle stack rather than racing the worker for the machine's cores."""
    with ferrymeter.Client(BASE, key) as c:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if c.usage(feature="events").used == EVENTS:
                return
            time.sleep(0.25)
    raise RuntimeError(f"the worker did not bill {EVENTS} events in time")


def run_sdk():
    key = account("bench-py-sdk")
    with ferrymeter.Client(BASE, key) as client:
        start = time.perf_counter()
        with client.batcher(concurrency=CONCURRENCY) as b:
            for i in range(EVENTS):
                b.add({"source": "/bench", "type": "api.call", "data": {"n": i}})
        rate = EVENTS / (time.perf_counter() - start)
    return rate, key


def run_bare():
    key = account("bench-py-bare")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    lock = threading.Lock()
    cursor = [0]
    # A long timeout: a bare client has no retries, and a slow stack must not end the run.
    with httpx.Client(timeout=60) as http:
        def worker():
            while True:
                with lock:
                    first = cursor[0]
                    if first >= EVENTS:
                        return
                    cursor[0] = last = min(first + 100, EVENTS)
                batch = [{"specversion": "1.0", "id": ferrymeter.new_event_id(), "source": "/bench", "type": "api.call", "data": {"n": i}}
                         for i in range(first, last)]
                resp = http.post(f"{BASE}/v1/events/batch", content=json.dumps(batch),
                                 headers={**headers, "Idempotency-Key": ferrymeter.new_event_id()})
                if resp.status_code != 202:
                    raise RuntimeError(f"bare batch: {resp.status_code}")

        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = EVENTS / (time.perf_counter() - start)
    return rate, key


def measured(side):
    """Runs a side: its rate, and this process's CPU time per event (µs) — the client's own cost,
    which the machine's other load changes far less than it changes the rate. Then waits for the
    worker."""
    before = time.process_time()
    rate, key = side()
    cpu = (time.process_time() - before) * 1e6 / EVENTS
    drain(key)
    return rate, cpu


sdk, bare, ratios, sdk_cpu, bare_cpu = [], [], [], [], []
for r in range(ROUNDS):
    if r % 2 == 0:
        (a, ac), (b, bc) = measured(run_sdk), measured(run_bare)
    else:
        (b, bc), (a, ac) = measured(run_bare), measured(run_sdk)
    sdk.append(a)
    bare.append(b)
    ratios.append(a / b)
    sdk_cpu.append(ac)
    bare_cpu.append(bc)
    print(f"round {r + 1}: batcher {a:.0f} events/s, bare httpx {b:.0f} events/s, ratio {a / b:.2f}; client CPU {ac:.1f} µs/event vs {bc:.1f}")
print(f"python: client CPU per event: batcher {statistics.median(sdk_cpu):.1f} µs, bare httpx {statistics.median(bare_cpu):.1f} µs (medians)")
# The geometric mean of the rounds' ratios: rounds where either side went first weigh alike.
print(f"python: {EVENTS} events a side, {CONCURRENCY} requests in flight: batcher {statistics.median(sdk):.0f} events/s, "
      f"bare httpx {statistics.median(bare):.0f} events/s (medians of {ROUNDS} rounds); "
      f"ratio {statistics.geometric_mean(ratios):.2f}× (geometric mean of the rounds' ratios)")
