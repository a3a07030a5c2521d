"""make test-contract: schemathesis against a fresh `ferry dev`, through its own contract.

Starts the given ferry binary as `ferry dev` (the whole embedded stack) on a free port of
127.0.0.1 in a scratch folder, with a random operator key; creates, through the API, the account
whose key the account routes use; runs schemathesis over every operation of api/openapi.yaml with
the config and checks beside this file; and stops the stack however the run ends.

Usage: python run.py FERRY_BINARY [schemathesis run options...]
Environment: FERRY_CONTRACT_MAX_EXAMPLES (default 40), FERRY_CONTRACT_SEED (default fixed, so a
run is repeatable; "random" for a new one).
"""

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
START_LIMIT = 120  # seconds for the stack to print its address and answer /healthz
STOP_LIMIT = 20


def start_stack(binary, workdir, operator_key, stripe_secret):
    env = dict(os.environ, FERRY_ADMIN_KEY=operator_key, FERRY_STRIPE_WEBHOOK_SECRET=stripe_secret)
    env.setdefault("FERRY_FAUXQS_DIR", os.path.join(ROOT, "_tools", "node_modules", "fauxqs"))
    for name in ("FERRY_DYNAMODB_ENDPOINT", "FERRY_S3_ENDPOINT", "FERRY_SQS_ENDPOINT"):
        env.pop(name, None)  # the embedded stack, always
    log = open(os.path.join(workdir, "ferry.log"), "wb")
    proc = subprocess.Popen(
        [binary, "dev", "--addr", "127.0.0.1:0"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
    )
    found = {}

    def read():
        for line in proc.stdout:
            m = re.match(rb"Ferry is running on (http://\S+)", line)
            if m and "url" not in found:
                found["url"] = m.group(1).decode()
        proc.stdout.close()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_LIMIT
    while "url" not in found:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_stack(proc)
            raise SystemExit(f"ferry dev did not start; its log is {log.name}")
        time.sleep(0.1)
    url = found["url"]
    while True:
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_stack(proc)
            raise SystemExit(f"ferry dev did not become healthy; its log is {log.name}")
        time.sleep(0.2)


def stop_stack(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_LIMIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_account(url, operator_key):
    """The account the account routes run as: plus, so that no event is refused at a limit."""
    account_id = "contract-" + secrets.token_hex(6)
    r = requests.post(
        url + "/v1/accounts",
        headers={"Authorization": "Bearer " + operator_key},
        json={"id": account_id, "plan": "plus"},
        timeout=10,
    )
    if r.status_code != 201:
        raise SystemExit(f"create the contract account: {r.status_code} {r.text}")
    return account_id, r.json()["apiKey"]


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    extra = sys.argv[2:]
    workdir = tempfile.mkdtemp(prefix="ferry-contract-")
    operator_key = "op_" + secrets.token_urlsafe(24)
    stripe_secret = "whsec_" + secrets.token_urlsafe(24)
    proc = None
    code = 1
    # A SIGTERM (CI's timeout, a Ctrl-C'd make) still stops the stack.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        proc, url = start_stack(binary, workdir, operator_key, stripe_secret)
        account_id, account_key = create_account(url, operator_key)
        print(f"ferry dev on {url}; account {account_id}; stack log {workdir}/ferry.log", flush=True)
        env = dict(
            os.environ,
            FERRY_CONTRACT_URL=url,
            FERRY_CONTRACT_OPERATOR_KEY=operator_key,
            FERRY_CONTRACT_ACCOUNT_KEY=account_key,
            FERRY_CONTRACT_ACCOUNT_ID=account_id,
            FERRY_CONTRACT_STRIPE_SECRET=stripe_secret,
            PYTHONPATH=HERE,
            FERRY_CONTRACT_CATALOG=os.path.join(ROOT, "internal", "accounts", "plans", "plans.json"),
        )
        seed = os.environ.get("FERRY_CONTRACT_SEED", "20261201")
        cmd = [
            os.path.join(os.path.dirname(sys.executable), "schemathesis"),
            "--config-file", os.path.join(HERE, "schemathesis.toml"),
            "run", os.path.join(ROOT, "api", "openapi.yaml"),
            "--max-examples", os.environ.get("FERRY_CONTRACT_MAX_EXAMPLES", "40"),
            "--report", "junit", "--report-dir", os.path.join(workdir, "report"),
        ]
        if seed != "random":
            cmd += ["--seed", seed]
        code = subprocess.call(cmd + extra, env=env, cwd=workdir)
        if code != 0:
            print(f"schemathesis failed ({code}); the stack's log and the report are in {workdir}", flush=True)
        return code
    finally:
        if proc is not None:
            stop_stack(proc)
        if code == 0:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
