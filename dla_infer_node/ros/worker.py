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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerStats:
    submitted: int
    processed: int
    dropped: int
    failed: int
    busy: bool


@dataclass
class _Slot:
    process: Callable[[Any], object]
    pending: Any = None
    has_pending: bool = False  # separate flag: None may be a legitimate item
    busy: bool = False
    submitted: int = 0
    processed: int = 0
    dropped: int = 0
    failed: int = 0


class FairFrameWorker:
    """Runs each slot's ``process(item)`` on one background thread, for the newest item of each slot, slots
    in turn.

    ``on_error(exc)`` is called (on the worker thread) when a ``process`` raises; it returns True to keep
    going or False to stop the worker (a fatal error, e.g. an accelerator fault: every slot stops). Without
    ``on_error`` the worker keeps going.
    """

    def __init__(self, *, on_error: Callable[[BaseException], bool] | None = None,
                 name: str = "latest-frame-worker") -> None:
        self._on_error = on_error
        self._cond = threading.Condition()
        self._slots: dict[Hashable, _Slot] = {}
        self._order: list[Hashable] = []
        self._next = 0  # where the next round-robin search starts
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def add_slot(self, key: Hashable, process: Callable[[Any], object]) -> None:
        with self._cond:
            if key in self._slots:
                raise ValueError(f"slot {key!r} exists")
            self._slots[key] = _Slot(process)
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
            return WorkerStats(s.submitted, s.processed, s.dropped, s.failed, s.busy)

    def wait_idle(self, timeout: float, key: Hashable | None = None) -> bool:
        """Wait until nothing is pending or running (in slot ``key``, or in any); True if idle in time."""
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
        """Stop the thread (items still waiting are counted as dropped). Idempotent; True if it ended."""
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

    def _run(self) -> None:
        while True:
            with self._cond:
                slot = self._take()
                while slot is None and not self._stopping:
                    self._cond.wait()
                    slot = self._take()
                if self._stopping or slot is None:
                    return
                item = slot.pending
                slot.pending, slot.has_pending, slot.busy = None, False, True
            keep_going = True
            try:
                slot.process(item)
                ok = True
            except BaseException as exc:  # the thread must survive a bad frame; policy is on_error's
                ok = False
                keep_going = self._on_error(exc) if self._on_error is not None else True
            with self._cond:
                slot.busy = False
                if ok:
                    slot.processed += 1
                else:
                    slot.failed += 1
                if not keep_going:
                    self._stopping = True
                self._cond.notify_all()
                if self._stopping:
                    return


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
