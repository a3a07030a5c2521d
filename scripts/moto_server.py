"""moto's server for `make test-moto`: DynamoDB, S3 and SQS on one port of 127.0.0.1.

It is moto_server (the same dispatcher, request handler and threads) with two differences:
- it binds a free port and prints {"url": ...} as its first line, so that the caller never
  races another process for a port;
- DynamoDB requests run one at a time. moto's DynamoDB is not safe under concurrent requests
  (its FAQ: "Moto is not designed for multithreaded access"): TransactWriteItems snapshots every
  table it touches and, when one of its conditions fails, restores those snapshots whole,
  erasing what concurrent requests committed meanwhile, and the snapshot itself fails with
  "dictionary changed size during iteration" (HTTP 500) when another request writes the table.
  DynamoDB makes every single-item write atomic and every transaction serializable; one lock
  around each DynamoDB request gives moto that isolation without changing any answer. SQS (its
  long polls wait on a condition of their own) and S3 run concurrently, as in moto_server;
- a transaction keeps an undo log of the items it names instead of a deep copy of every table it
  touches (one copy per item, so a transaction of three items on one table copied that table
  three times). The copies made each transaction cost time in proportion to the tables' size:
  a test that bills 2,000 events slowed to about two transactions a second as its tables grew.
  With requests serialized, restoring the items a failed transaction names is the same rollback;
- a TransactWriteItems sent again with the ClientRequestToken of one that committed (the SDK
  fills the token in and keeps it on its retries) is answered as the first was and not applied
  again, as DynamoDB documents for 10 minutes. moto ignores the token, so an SDK retry of a
  transaction whose answer was lost applied it twice (an ADD counted a webhook copy twice).
"""

import copy
import hashlib
import io
import json
import os
import signal
import sys
import threading
import time

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models.table import Table

from werkzeug.serving import ThreadedWSGIServer, make_server

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


class SerializeDynamoDB:
    """Runs each DynamoDB request (X-Amz-Target DynamoDB_*) alone; others pass through. A
    TransactWriteItems carrying a ClientRequestToken that already committed is answered as it was,
    without being applied again, as DynamoDB does for 10 minutes (moto ignores the token)."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        # ClientRequestToken -> (expiry, digest of the other parameters, status, headers, body)
        self.committed = {}

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB_"):
            return self.app(environ, start_response)
        with self.lock:
            if target.endswith(".TransactWriteItems"):
                return self.transact_write(environ, start_response)
            # Produce the whole body under the lock: the answer is computed while iterating.
            return [b"".join(self.app(environ, start_response))]

    def transact_write(self, environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            params = json.loads(body)
        except ValueError:
            params = {}
        token = params.pop("ClientRequestToken", None) if isinstance(params, dict) else None
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
        now = time.monotonic()
        self.committed = {t: v for t, v in self.committed.items() if v[0] > now}
        if token in self.committed:
            _, seen, status, headers, out = self.committed[token]
            if seen != digest:
                out = json.dumps({
                    "__type": "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                    "message": "The request uses the same client token as a previous, but non-identical request.",
                }).encode()
                status, headers = "400 Bad Request", [
                    ("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(out)))]
            start_response(status, headers)
            return [out]
        answer = {}

        def capture(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return start_response(status, headers, exc_info)

        out = b"".join(self.app(environ, capture))
        if token and answer.get("status", "").startswith("200"):
            self.committed[token] = (now + TOKEN_WINDOW_SECONDS, digest, answer["status"], answer["headers"], out)
        return [out]


# DynamoDB's idempotency window for a TransactWriteItems ClientRequestToken.
TOKEN_WINDOW_SECONDS = 600


class _TablesAreNotCopied:
    """The `copy` module as moto's DynamoDB backend sees it, but a Table is not deep-copied:
    transact_write_items' whole-table snapshot becomes the table itself (its restore a no-op),
    and undo_log_transactions restores the items instead."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None):
        if isinstance(x, Table):
            return x
        return copy.deepcopy(x, memo)


def undo_log_transactions():
    backend = dynamodb_models.DynamoDBBackend
    transact = backend.transact_write_items

    def transact_write_items(self, transact_items):
        undo = []
        for entry in transact_items[:100]:
            try:
                op_type, op = next(iter(entry.items()))
                name = op["TableName"]
                table = self.get_table(name)
                if op_type == "Put":
                    attrs = op["Item"]
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                current = self.get_item(name, key)
            except Exception:
                continue  # moto refuses the transaction itself, before it writes anything
            undo.append((name, key, copy.deepcopy(current.to_json()["Attributes"]) if current else None))
        try:
            return transact(self, transact_items)
        except BaseException:
            for name, key, attrs in reversed(undo):
                if attrs is None:
                    if self.get_item(name, key) is not None:
                        self.delete_item(name, key)
                else:
                    self.put_item(name, attrs)
            raise

    dynamodb_models.copy = _TablesAreNotCopied()
    backend.transact_write_items = transact_write_items


def exit_with_parent():
    """Stops the server when the process that started it is gone, however it ended."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


def main():
    undo_log_transactions()
    host = os.environ.get("MOTO_HOST", "127.0.0.1")
    dispatcher = DomainDispatcherApplication(create_backend_app)
    # werkzeug listens with a backlog of 128 and closes every connection after one answer; under
    # the tests' concurrency the backlog overflows and the kernel resets connections, some after
    # moto has already acted, so the SDK's retry of the request then fails (a CreateTable retried
    # after its table was made answers "Table already exists").
    ThreadedWSGIServer.request_queue_size = 4096
    server = make_server(
        host, 0, SerializeDynamoDB(dispatcher), threaded=True, request_handler=MotoRequestHandler
    )
    # moto builds SQS queue URLs from MOTO_PORT.
    os.environ["MOTO_PORT"] = str(server.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=exit_with_parent, daemon=True).start()
    print(json.dumps({"url": f"http://{host}:{server.port}"}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
