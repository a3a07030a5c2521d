"""Background batchers: a thread for the sync client, a task for the async one."""

from __future__ import annotations

import asyncio
import collections
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


def _check(max_batch: int, overflow: str, buffer: int, concurrency: int) -> None:
    if not 1 <= max_batch <= MAX_BATCH_EVENTS:
        raise ValueError(f"ferry: max_batch {max_batch} is not between 1 and {MAX_BATCH_EVENTS}")
    # A buffer of 0 would be no bound at all, and no sender would send nothing ever.
    if buffer < 1:
        raise ValueError(f"ferry: buffer {buffer} is not at least 1")
    if concurrency < 1:
        raise ValueError(f"ferry: concurrency {concurrency} is not at least 1")
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


class _Batch:
    """A sealed batch: its events and its place in the order batches were sealed in."""

    __slots__ = ("events", "seq")

    def __init__(self, events: list[dict[str, Any]], seq: int) -> None:
        self.events, self.seq = events, seq


class Batcher:
    """Sends events in batches from background threads: a batch goes when it holds ``max_batch``
    events or its first event is ``max_age`` seconds old. Each event gets its id when it is added,
    and every retry of its batch sends it with that id under the batch's one Idempotency-Key.
    Thread-safe.

    ``buffer`` bounds the events waiting to be sent; when it is full, ``add`` waits
    (overflow="block", the default) or raises BufferFullError (overflow="error"). ``flush`` and
    ``close`` send everything and raise a BatchError naming exactly the events not accepted.

    ``add`` puts the event straight into the batch being filled, under one lock, and
    ``concurrency`` sender threads take whole batches: the senders wake once a batch, never once
    an event. (Handing each event to a thread of its own through a queue made every add a
    thread switch under the GIL, which the threads sending the batches then waited behind; and
    a thread polling that queue added its poll interval to every flush.)
    """

    def __init__(self, client: Client, *, max_batch: int = MAX_BATCH_EVENTS, max_age: float = 1.0, buffer: int = 10_000,
                 overflow: str = "block", concurrency: int = 2, on_failure: Callable[[list[FailedEvent]], None] | None = None) -> None:
        _check(max_batch, overflow, buffer, concurrency)
        self._client, self._max_batch, self._max_age, self._overflow = client, max_batch, max_age, overflow
        self._buffer = buffer
        self._failures = _Failures(client, on_failure)
        # One lock guards everything below; each condition names what its waiters wait for.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # senders: a sealed batch, or the open one's age
        self._room = threading.Condition(self._lock)  # blocked adds: room in the buffer
        self._settled = threading.Condition(self._lock)  # flush and close: batches answered, adds in
        self._open: list[dict[str, Any]] = []  # the batch being filled
        self._opened_at = 0.0  # when the open batch's first event came (time.monotonic)
        self._sealed: collections.deque[_Batch] = collections.deque()  # waiting for a sender
        self._buffered = 0  # events in the open batch and the sealed ones: what buffer bounds
        self._seq = 0  # the last sealed batch's number
        self._unanswered: set[int] = set()  # sealed batches not yet answered (waiting or in flight)
        self._waiting = 0  # adds waiting for room
        self._closed = False
        self._stopping = False
        self._senders = [threading.Thread(target=self._send_loop, name=f"ferry-batcher-{i}", daemon=True) for i in range(concurrency)]
        for t in self._senders:
            t.start()

    def add(self, event: dict[str, Any], timeout: float | None = None) -> str:
        """Buffers an event and returns its id (the caller's, or one minted now)."""
        ev = prepare_event(event)
        with self._lock:
            if self._closed:
                raise BatcherClosedError("ferry: the batcher is closed")
            if self._buffered >= self._buffer:
                if self._overflow == "error":
                    raise BufferFullError("ferry: the batcher's buffer is full")
                # Counted while it waits, so close sends what it puts after close began.
                self._waiting += 1
                try:
                    if not self._room.wait_for(lambda: self._buffered < self._buffer, timeout):
                        raise BufferFullError("ferry: the batcher's buffer is full")
                    self._put(ev)
                finally:
                    self._waiting -= 1
                    self._settled.notify_all()
            else:
                self._put(ev)
        return ev["id"]

    def _put(self, ev: dict[str, Any]) -> None:
        """Adds an event to the open batch (the lock held), sealing the batch when it is full."""
        if not self._open:
            self._opened_at = time.monotonic()
            # An idle sender starts timing the batch's age.
            self._work.notify()
        self._open.append(ev)
        self._buffered += 1
        if len(self._open) >= self._max_batch:
            self._seal()

    def _seal(self) -> None:
        """Moves the open batch to the senders (the lock held)."""
        self._seq += 1
        self._sealed.append(_Batch(self._open, self._seq))
        self._unanswered.add(self._seq)
        self._open = []
        self._work.notify()

    def flush(self) -> None:
        """Sends every event added before it, waits for the answers, and raises a BatchError naming
        exactly the events since the last flush that were not accepted."""
        with self._lock:
            if self._open:
                self._seal()
            last = self._seq
            self._settled.wait_for(lambda: not self._unanswered or min(self._unanswered) > last)
        self._failures.report()

    def close(self) -> None:
        """Stops taking events, sends everything it holds, waits, and reports as flush does."""
        with self._lock:
            if self._closed:
                raise BatcherClosedError("ferry: the batcher is closed")
            self._closed = True
        failed: list[FailedEvent] = []
        try:
            # Adds that were waiting for room when close began put their events as flush makes room.
            while True:
                try:
                    self.flush()
                except BatchError as e:
                    failed.extend(e.failed)
                with self._lock:
                    self._settled.wait_for(lambda: self._waiting == 0 or self._buffered > 0)
                    if self._waiting == 0 and self._buffered == 0:
                        break
        finally:
            with self._lock:
                self._stopping = True
                self._work.notify_all()
            for t in self._senders:
                t.join()
        if failed:
            raise BatchError(failed)

    def __enter__(self) -> "Batcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _next(self) -> _Batch | None:
        """The next batch to send, waiting for one; None once the batcher stops (the lock held)."""
        while True:
            if self._sealed:
                break
            if self._open:
                left = self._opened_at + self._max_age - time.monotonic()
                if left <= 0:
                    self._seal()
                    break
            elif self._stopping:
                return None
            else:
                left = None
            self._work.wait(left)
        batch = self._sealed.popleft()
        self._buffered -= len(batch.events)
        if self._waiting:
            self._room.notify_all()
        return batch

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                batch = self._next()
            if batch is None:
                return
            try:
                try:
                    res = self._client.send_prepared(batch.events)
                except Exception as e:
                    self._failures.record(batch.events, error=e)
                else:
                    self._failures.record(batch.events, res=res)
            except Exception:
                # The caller's on_failure or on_log hook raised: the failures are kept for flush
                # and close all the same (they are recorded before the hooks run), and this
                # sender must live on to send the rest.
                pass
            finally:
                with self._lock:
                    self._unanswered.discard(batch.seq)
                    self._settled.notify_all()


class AsyncBatcher:
    """The async client's batcher: the same behaviour as Batcher, with ``concurrency`` sender
    tasks of the running loop. ``add`` puts the event straight into the batch being filled, as
    Batcher's does; the senders wake once a batch, not once an event."""

    def __init__(self, client: AsyncClient, *, max_batch: int = MAX_BATCH_EVENTS, max_age: float = 1.0, buffer: int = 10_000,
                 overflow: str = "block", concurrency: int = 2, on_failure: Callable[[list[FailedEvent]], None] | None = None) -> None:
        _check(max_batch, overflow, buffer, concurrency)
        self._client, self._max_batch, self._max_age, self._overflow = client, max_batch, max_age, overflow
        self._buffer = buffer
        self._failures = _Failures(client, on_failure)
        # The state is Batcher's; the loop runs one task at a time, so no lock guards it. Each
        # event wakes its waiters, which look again at the state (set, then cleared by a waiter
        # before it waits again).
        self._work = asyncio.Event()  # senders: a sealed batch, or an opened one to time
        self._room = asyncio.Event()  # adds waiting for room: a sender took a batch
        self._settled = asyncio.Event()  # flush and close: a batch answered, a waiting add in
        self._open: list[dict[str, Any]] = []
        self._opened_at = 0.0  # the loop's clock
        self._sealed: collections.deque[_Batch] = collections.deque()
        self._buffered = 0
        self._seq = 0
        self._unanswered: set[int] = set()
        self._waiting = 0
        self._closed = False
        self._stopping = False
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._senders = [loop.create_task(self._send_loop()) for _ in range(concurrency)]

    async def add(self, event: dict[str, Any]) -> str:
        """Buffers an event and returns its id (the caller's, or one minted now)."""
        ev = prepare_event(event)
        if self._closed:
            raise BatcherClosedError("ferry: the batcher is closed")
        if self._buffered >= self._buffer:
            if self._overflow == "error":
                raise BufferFullError("ferry: the batcher's buffer is full")
            # Counted while it waits for room, so close sends what it puts after close began.
            self._waiting += 1
            try:
                while self._buffered >= self._buffer:
                    self._room.clear()
                    await self._room.wait()
                self._put(ev)
            finally:
                self._waiting -= 1
                self._settled.set()
        else:
            self._put(ev)
        return ev["id"]

    def _put(self, ev: dict[str, Any]) -> None:
        if not self._open:
            self._opened_at = self._loop.time()
            self._work.set()
        self._open.append(ev)
        self._buffered += 1
        if len(self._open) >= self._max_batch:
            self._seal()

    def _seal(self) -> None:
        self._seq += 1
        self._sealed.append(_Batch(self._open, self._seq))
        self._unanswered.add(self._seq)
        self._open = []
        self._work.set()

    async def flush(self) -> None:
        """Sends every event added before it, waits, and raises a BatchError naming what failed."""
        if self._open:
            self._seal()
        last = self._seq
        while self._unanswered and min(self._unanswered) <= last:
            self._settled.clear()
            await self._settled.wait()
        self._failures.report()

    async def close(self) -> None:
        """Stops taking events, sends everything it holds, waits, and reports as flush does."""
        if self._closed:
            raise BatcherClosedError("ferry: the batcher is closed")
        self._closed = True
        failed: list[FailedEvent] = []
        try:
            # Adds that were waiting for room when close began put their events as flush makes room.
            while True:
                try:
                    await self.flush()
                except BatchError as e:
                    failed.extend(e.failed)
                while self._waiting and not self._buffered:
                    self._settled.clear()
                    await self._settled.wait()
                if not self._waiting and not self._buffered:
                    break
        finally:
            self._stopping = True
            self._work.set()
            await asyncio.gather(*self._senders)
        if failed:
            raise BatchError(failed)

    async def __aenter__(self) -> "AsyncBatcher":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _next(self) -> _Batch | None:
        """The next batch to send, waiting for one; None once the batcher stops."""
        while not self._sealed:
            left: float | None = None
            if self._open:
                left = self._opened_at + self._max_age - self._loop.time()
                if left <= 0:
                    self._seal()
                    break
            elif self._stopping:
                return None
            self._work.clear()
            try:
                await asyncio.wait_for(self._work.wait(), left)
            except TimeoutError:
                pass
        batch = self._sealed.popleft()
        self._buffered -= len(batch.events)
        self._room.set()
        return batch

    async def _send_loop(self) -> None:
        while (batch := await self._next()) is not None:
            try:
                try:
                    res = await self._client.send_prepared(batch.events)
                except Exception as e:
                    self._failures.record(batch.events, error=e)
                else:
                    self._failures.record(batch.events, res=res)
            except Exception:
                # As in Batcher: a caller's hook raised; the failures are kept, the sender goes on.
                pass
            finally:
                self._unanswered.discard(batch.seq)
                self._settled.set()
