"""Background batchers: a thread for the sync client, a task for the async one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ._client import MAX_BATCH_EVENTS, AsyncClient, Client, prepare_event
from ._errors import FerryError, InvalidRequestError

#: Bounds the failed ids kept until flush or close reports them.
MAX_RETAINED_FAILURES = 100_000


@dataclass(frozen=True)
class FailedEvent:
    """An event a batcher could not get accepted, and why."""

    id: str
    error: BaseException


class BufferFullError(FerryError):
    """add's error when the buffer is full and overflow is "error"."""


class BatcherClosedError(FerryError):
    """add's error after close."""


class BatchError(FerryError):
    """Names exactly the events a flush or close could not get accepted."""

    def __init__(self, failed: list[FailedEvent]) -> None:
        ids = ", ".join(f.id for f in failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        super().__init__(f"ferry: {len(failed)} events not accepted ({ids}): {failed[0].error}")
        self.failed = failed

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.failed]


def _check(max_batch: int, overflow: str) -> None:
    if not 1 <= max_batch <= MAX_BATCH_EVENTS:
        raise ValueError(f"ferry: max_batch {max_batch} is not between 1 and {MAX_BATCH_EVENTS}")
    if overflow not in ("block", "error"):
        raise ValueError(f'ferry: overflow {overflow!r} is not "block" or "error"')


def _failures(batch: list[dict[str, Any]], results: list[Any]) -> list[FailedEvent]:
    out = []
    for i, ev in enumerate(batch):
        r = results[i] if i < len(results) else None
        status = getattr(r, "status", None) if r is not None and not isinstance(r, dict) else (r or {}).get("status")
        if r is None:
            out.append(FailedEvent(ev["id"], FerryError("ferry: the batch's answer has no result for this event")))
        elif status == "invalid":
            detail = getattr(r, "detail", None) if not isinstance(r, dict) else r.get("detail")
            out.append(FailedEvent(ev["id"], FerryError(f"ferry: event refused: {detail or 'invalid'}")))
    return out


class _Failures:
    def __init__(self, client: Any, on_failure: Callable[[list[FailedEvent]], None] | None) -> None:
        self._client, self._on_failure = client, on_failure
        self._lock = threading.Lock()
        self._failed: list[FailedEvent] = []

    def add(self, failed: list[FailedEvent]) -> None:
        with self._lock:
            room = max(MAX_RETAINED_FAILURES - len(self._failed), 0)
            self._failed.extend(failed[:room])
        self._client._log({"message": "ferry: events not accepted", "events": len(failed), "first_id": failed[0].id, "error": repr(failed[0].error)})
        if self._on_failure is not None:
            self._on_failure(failed)

    def record(self, batch: list[dict[str, Any]], res: Any = None, error: BaseException | None = None) -> None:
        """Records what a batch's answer (or its error) did not accept."""
        if error is None:
            failed = _failures(batch, res.results)
        elif isinstance(error, InvalidRequestError) and len(error.results) == len(batch):
            failed = _failures(batch, error.results)
        else:
            failed = [FailedEvent(ev["id"], error) for ev in batch]
        if failed:
            self.add(failed)

    def report(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            raise BatchError(failed)


class Batcher:
    """Sends events in batches from a background thread: a batch goes when it holds ``max_batch``
    events or its first event is ``max_age`` seconds old. Each event gets its id when it is added,
    and every retry of its batch sends it with that id under the batch's one Idempotency-Key.
    Thread-safe.

    ``buffer`` bounds the events waiting to be sent; when it is full, ``add`` waits
    (overflow="block", the default) or raises BufferFullError (overflow="error"). ``flush`` and
    ``close`` send everything and raise a BatchError naming exactly the events not accepted.
    """

    def __init__(self, client: Client, *, max_batch: int = MAX_BATCH_EVENTS, max_age: float = 1.0, buffer: int = 10_000,
                 overflow: str = "block", concurrency: int = 2, on_failure: Callable[[list[FailedEvent]], None] | None = None) -> None:
        _check(max_batch, overflow)
        self._client, self._max_batch, self._max_age, self._overflow = client, max_batch, max_age, overflow
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=buffer)
        self._flushes: queue.Queue[threading.Event] = queue.Queue()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ferry-batcher")
        self._slots = threading.Semaphore(concurrency)
        self._failures = _Failures(client, on_failure)
        self._closed = False
        self._adding = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ferry-batcher", daemon=True)
        self._thread.start()

    def add(self, event: dict[str, Any], timeout: float | None = None) -> str:
        """Buffers an event and returns its id (the caller's, or one minted now)."""
        ev = prepare_event(event)
        # Held while the event goes in, so close (which takes it too) never drains the queue
        # between an add's check and its put: an event added is always sent or named.
        with self._adding:
            if self._closed:
                raise BatcherClosedError("ferry: the batcher is closed")
            try:
                if self._overflow == "error":
                    self._queue.put_nowait(ev)
                else:
                    self._queue.put(ev, timeout=timeout)
            except queue.Full:
                raise BufferFullError("ferry: the batcher's buffer is full") from None
        return ev["id"]

    def flush(self) -> None:
        """Sends every event added before it, waits for the answers, and raises a BatchError naming
        exactly the events since the last flush that were not accepted."""
        done = threading.Event()
        self._flushes.put(done)
        done.wait()
        self._failures.report()

    def close(self) -> None:
        """Stops taking events, sends everything it holds, waits, and reports as flush does."""
        with self._adding:
            if self._closed:
                raise BatcherClosedError("ferry: the batcher is closed")
            self._closed = True
        try:
            self.flush()
        finally:
            self._stop.set()
            self._thread.join()
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "Batcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _dispatch(self, batch: list[dict[str, Any]], inflight: list[concurrent.futures.Future[None]]) -> None:
        self._slots.acquire()

        def run() -> None:
            try:
                self._failures.record(batch, res=self._client.send_prepared(batch))
            except Exception as e:
                self._failures.record(batch, error=e)
            finally:
                self._slots.release()

        inflight.append(self._pool.submit(run))

    def _loop(self) -> None:
        batch: list[dict[str, Any]] = []
        first_at = 0.0
        inflight: list[concurrent.futures.Future[None]] = []
        while not self._stop.is_set():
            wait = 0.05 if not batch else max(min(first_at + self._max_age - time.monotonic(), 0.05), 0)
            try:
                ev = self._queue.get(timeout=wait)
                if not batch:
                    first_at = time.monotonic()
                batch.append(ev)
                if len(batch) >= self._max_batch:
                    self._dispatch(batch, inflight)
                    batch = []
            except queue.Empty:
                pass
            if batch and time.monotonic() - first_at >= self._max_age:
                self._dispatch(batch, inflight)
                batch = []
            inflight = [f for f in inflight if not f.done()]
            try:
                done = self._flushes.get_nowait()
            except queue.Empty:
                continue
            # Everything added before the flush is in the queue by now.
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                if len(batch) >= self._max_batch:
                    self._dispatch(batch, inflight)
                    batch = []
            if batch:
                self._dispatch(batch, inflight)
                batch = []
            concurrent.futures.wait(inflight)
            inflight = []
            done.set()


class AsyncBatcher:
    """The async client's batcher: the same behaviour as Batcher, as a task of the running loop."""

    def __init__(self, client: AsyncClient, *, max_batch: int = MAX_BATCH_EVENTS, max_age: float = 1.0, buffer: int = 10_000,
                 overflow: str = "block", concurrency: int = 2, on_failure: Callable[[list[FailedEvent]], None] | None = None) -> None:
        _check(max_batch, overflow)
        self._client, self._max_batch, self._max_age, self._overflow = client, max_batch, max_age, overflow
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=buffer)
        self._slots = asyncio.Semaphore(concurrency)
        self._inflight: set[asyncio.Task[None]] = set()
        self._failures = _Failures(client, on_failure)
        self._closed = False
        self._adding = 0
        # The batch being filled: taken from the queue, not yet sent. Flush sends it too.
        self._batch: list[dict[str, Any]] = []
        # Set by close: the loop ends (it is never cancelled, so no event taken from the queue
        # can be lost to a cancellation racing the get).
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def add(self, event: dict[str, Any]) -> str:
        """Buffers an event and returns its id (the caller's, or one minted now)."""
        ev = prepare_event(event)
        if self._closed:
            raise BatcherClosedError("ferry: the batcher is closed")
        if self._overflow == "error":
            try:
                self._queue.put_nowait(ev)
            except asyncio.QueueFull:
                raise BufferFullError("ferry: the batcher's buffer is full") from None
        else:
            # Counted while it waits for room, so close sends what it puts after close began.
            self._adding += 1
            try:
                await self._queue.put(ev)
            finally:
                self._adding -= 1
        return ev["id"]

    async def flush(self) -> None:
        """Sends every event added before it, waits, and raises a BatchError naming what failed."""
        pending, self._batch = self._batch, []
        while not self._queue.empty():
            pending.append(self._queue.get_nowait())
        for i in range(0, len(pending), self._max_batch):
            await self._dispatch(pending[i:i + self._max_batch])
        if self._inflight:
            await asyncio.gather(*self._inflight)
        self._failures.report()

    async def close(self) -> None:
        """Stops taking events, sends everything it holds, waits, and reports as flush does."""
        if self._closed:
            raise BatcherClosedError("ferry: the batcher is closed")
        self._closed = True
        self._stop.set()
        await self._task
        failed: list[FailedEvent] = []
        # Adds that were waiting for room when close began put their events as flush makes room.
        while True:
            try:
                await self.flush()
            except BatchError as e:
                failed.extend(e.failed)
            if self._queue.empty() and self._adding == 0:
                break
            await asyncio.sleep(0)
        if failed:
            raise BatchError(failed)

    async def __aenter__(self) -> "AsyncBatcher":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _dispatch(self, batch: list[dict[str, Any]]) -> None:
        await self._slots.acquire()

        async def run() -> None:
            try:
                self._failures.record(batch, res=await self._client.send_prepared(batch))
            except Exception as e:
                self._failures.record(batch, error=e)
            finally:
                self._slots.release()

        task = asyncio.get_running_loop().create_task(run())
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _next(self, timeout: float | None) -> dict[str, Any] | None:
        """The next event, or None when the timeout passes or the batcher stops first."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            pass
        getter = asyncio.ensure_future(self._queue.get())
        stopper = asyncio.ensure_future(self._stop.wait())
        done, _ = await asyncio.wait({getter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        try:
            # The get may have taken an event while it was being cancelled: keep it.
            return await getter
        except asyncio.CancelledError:
            return None

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            first = await self._next(None)
            if first is None:
                continue
            self._batch.append(first)
            deadline = loop.time() + self._max_age
            while len(self._batch) < self._max_batch and not self._stop.is_set():
                left = deadline - loop.time()
                if left <= 0:
                    break
                ev = await self._next(left)
                if ev is None:
                    break
                self._batch.append(ev)
            if self._batch and not self._stop.is_set():
                batch, self._batch = self._batch, []
                await self._dispatch(batch)
