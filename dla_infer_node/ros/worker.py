"""Latest-frame workers: one thread that always processes the newest submitted item of each slot.

The ROS subscription callback must never wait for inference, and a detector that is slower than the
camera must not build a queue (latency would grow without bound). So each slot (a camera) holds one item:
``submit`` replaces whatever is waiting there and returns at once; an item replaced before the thread took
it is counted as *dropped*.

:class:`FairFrameWorker` serves several slots from one thread (one DLA core's cameras): it takes the
waiting items in turn, round robin from the slot after the one it served last, so each slot gets at most
one frame per round. A camera at 60 Hz then cannot starve one at 10 Hz: when the core is too slow for all
of them, every camera's rate falls to the same share (or stays at its own rate, if that is lower).
:class:`LatestFrameWorker` is the one-slot case. Nothing here knows about ROS.

An accelerator that runs on its own (the DLA) idles while the thread prepares and decodes on the CPU. A
slot added with :meth:`FairFrameWorker.add_staged_slot` takes its item in two stages: ``start(item)``
prepares and submits it and returns an :class:`InFlight` (or None when there is nothing left to do), whose
``finish()`` waits for the accelerator and publishes. With ``depth`` 2 the thread starts the next item
(the same turn order) before it finishes the one in flight, unless that one is done already: the
accelerator gets its next task while the thread decodes the last. Items are finished in the order they
were started. A frame once started is answered even if a newer one arrives meanwhile; the slot keeps only
the newest of those that wait.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class InFlight(Protocol):
    """An item started by a staged slot: ``ready()`` says whether ``finish()`` would not wait."""

    def ready(self) -> bool: ...

    def finish(self) -> None: ...


@dataclass(frozen=True)
class WorkerStats:
    submitted: int
    processed: int
    dropped: int
    failed: int
    busy: bool


@dataclass
class _Slot:
    start: Callable[[Any], InFlight | None]
    pending: Any = None
    has_pending: bool = False  # separate flag: None may be a legitimate item
    busy: int = 0  # items taken and not yet finished
    submitted: int = 0
    processed: int = 0
    dropped: int = 0
    failed: int = 0


def _whole(process: Callable[[Any], object]) -> Callable[[Any], InFlight | None]:
    def start(item: Any) -> None:
        process(item)

    return start


class FairFrameWorker:
    """Runs each slot's work on one background thread, for the newest item of each slot, slots in turn;
    up to ``depth`` staged items in flight (module docstring).

    ``on_error(exc)`` is called (on the worker thread) when a slot's work raises; it returns True to keep
    going or False to stop the worker (a fatal error, e.g. an accelerator fault: every slot stops, and
    items still in flight are counted as failed). Without ``on_error`` the worker keeps going.
    """

    def __init__(self, *, on_error: Callable[[BaseException], bool] | None = None,
                 name: str = "latest-frame-worker", depth: int = 1) -> None:
        self._on_error = on_error
        self._depth = max(1, int(depth))
        self._cond = threading.Condition()
        self._slots: dict[Hashable, _Slot] = {}
        self._order: list[Hashable] = []
        self._next = 0  # where the next round-robin search starts
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def add_slot(self, key: Hashable, process: Callable[[Any], object]) -> None:
        """A slot whose ``process(item)`` does all of an item's work at once."""
        self.add_staged_slot(key, _whole(process))

    def add_staged_slot(self, key: Hashable, start: Callable[[Any], InFlight | None]) -> None:
        """A slot whose items are started and finished in two stages (module docstring)."""
        with self._cond:
            if key in self._slots:
                raise ValueError(f"slot {key!r} exists")
            self._slots[key] = _Slot(start)
            self._order.append(key)

    def start(self) -> FairFrameWorker:
        with self._cond:
            if not self._started:
                self._started = True
                self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def submit(self, key: Hashable, item: Any) -> bool:
        """Offer an item to a slot; never blocks on processing. True if it replaced an unprocessed item."""
        with self._cond:
            slot = self._slots[key]
            slot.submitted += 1
            if self._stopping:
                slot.dropped += 1
                return False
            replaced = slot.has_pending
            if replaced:
                slot.dropped += 1
            slot.pending, slot.has_pending = item, True
            self._cond.notify()
        return replaced

    def stats(self, key: Hashable) -> WorkerStats:
        with self._cond:
            s = self._slots[key]
            return WorkerStats(s.submitted, s.processed, s.dropped, s.failed, s.busy > 0)

    def wait_idle(self, timeout: float, key: Hashable | None = None) -> bool:
        """Wait until nothing is pending, running or in flight (in slot ``key``, or in any); True if idle
        in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active(key):
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return not self._active(key)
                self._cond.wait(left)
        return True

    def _active(self, key: Hashable | None) -> bool:
        slots = self._slots.values() if key is None else (self._slots[key],)
        return any(s.has_pending or s.busy for s in slots)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread (items still waiting are counted as dropped; items in flight are finished).
        Idempotent; True if it ended."""
        with self._cond:
            self._stopping = True
            for slot in self._slots.values():
                if slot.has_pending:
                    slot.has_pending, slot.pending = False, None
                    slot.dropped += 1
            self._cond.notify_all()
        if not self._started or threading.current_thread() is self._thread:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _take(self) -> _Slot | None:
        """The next slot holding an item, round robin (called with the lock held)."""
        n = len(self._order)
        for i in range(n):
            pos = (self._next + i) % n
            slot = self._slots[self._order[pos]]
            if slot.has_pending:
                self._next = (pos + 1) % n
                return slot
        return None

    def _next_item(self, flight: deque[tuple[_Slot, InFlight]]) -> tuple[_Slot, Any] | None:
        """The next item to start, or None when the oldest item in flight is to be finished first (it is
        done already, or no more may start) or, with nothing in flight, when stopping. Waits for an item
        only while nothing is in flight."""
        oldest_done = bool(flight) and self._ready(flight[0][1])
        with self._cond:
            if oldest_done or len(flight) >= self._depth:
                return None
            slot = self._take()
            while slot is None and not flight and not self._stopping:
                self._cond.wait()
                slot = self._take()
            if slot is None:
                return None
            item = slot.pending
            slot.pending, slot.has_pending = None, False
            slot.busy += 1
            return slot, item

    def _ready(self, flying: InFlight) -> bool:
        try:
            return bool(flying.ready())
        except Exception:  # finish() will raise it, where it is counted
            return True

    def _settle(self, slot: _Slot, exc: BaseException | None) -> bool:
        """Count one item's end; False when ``on_error`` stops the worker (a fatal error)."""
        keep_going = True
        if exc is not None and self._on_error is not None:
            keep_going = self._on_error(exc)
        with self._cond:
            slot.busy -= 1
            if exc is None:
                slot.processed += 1
            else:
                slot.failed += 1
            if not keep_going:
                self._stopping = True
            self._cond.notify_all()
            return keep_going

    def _run(self) -> None:
        flight: deque[tuple[_Slot, InFlight]] = deque()
        while True:
            taken = self._next_item(flight)
            if taken is None and not flight:
                return  # stopping, nothing in flight
            if taken is not None:
                slot, item = taken
                try:
                    flying = slot.start(item)
                except BaseException as exc:  # the thread must survive a bad frame; policy is on_error's
                    if not self._settle(slot, exc):
                        break
                    continue
                if flying is None:
                    self._settle(slot, None)
                else:
                    flight.append((slot, flying))
                continue
            slot, flying = flight.popleft()
            try:
                flying.finish()
            except BaseException as exc:
                if not self._settle(slot, exc):
                    break
                continue
            self._settle(slot, None)
        with self._cond:  # a fatal error: what is still in flight is not finished
            for slot, _ in flight:
                slot.busy -= 1
                slot.failed += 1
            self._cond.notify_all()


class LatestFrameWorker(Generic[T]):
    """One slot of a :class:`FairFrameWorker` of its own: ``process(item)`` for the newest item only."""

    def __init__(self, process: Callable[[T], object], *,
                 on_error: Callable[[BaseException], bool] | None = None,
                 name: str = "latest-frame-worker") -> None:
        self._worker = FairFrameWorker(on_error=on_error, name=name)
        self._worker.add_slot(0, process)

    def start(self) -> LatestFrameWorker[T]:
        self._worker.start()
        return self

    @property
    def running(self) -> bool:
        return self._worker.running

    def submit(self, item: T) -> bool:
        """Offer an item; never blocks on processing. Returns True if it replaced an unprocessed item."""
        return self._worker.submit(0, item)

    def stats(self) -> WorkerStats:
        return self._worker.stats(0)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or running (tests, orderly shutdown). True if idle in time."""
        return self._worker.wait_idle(timeout)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread (an item still waiting is counted as dropped). Idempotent; True if it ended."""
        return self._worker.stop(timeout)
