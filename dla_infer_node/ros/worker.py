"""A latest-frame worker: one thread that always processes the newest submitted item.

The ROS subscription callback must never wait for inference, and a detector that is slower than the
camera must not build a queue (latency would grow without bound). So there is a single slot: ``submit``
replaces whatever is waiting there and returns at once; an item replaced before the thread took it is
counted as *dropped*. Nothing here knows about ROS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerStats:
    submitted: int
    processed: int
    dropped: int
    failed: int
    busy: bool


class LatestFrameWorker(Generic[T]):
    """Runs ``process(item)`` on a background thread for the newest item only.

    ``on_error(exc)`` is called (on the worker thread) when ``process`` raises; it returns True to keep
    going or False to stop the worker (a fatal error, e.g. an accelerator fault). Without ``on_error``
    the worker keeps going.
    """

    def __init__(self, process: Callable[[T], object], *,
                 on_error: Callable[[BaseException], bool] | None = None,
                 name: str = "latest-frame-worker") -> None:
        self._process = process
        self._on_error = on_error
        self._cond = threading.Condition()
        self._pending: T | None = None
        self._has_pending = False  # separate flag: None may be a legitimate item
        self._stopping = False
        self._busy = False
        self._submitted = 0
        self._processed = 0
        self._dropped = 0
        self._failed = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def start(self) -> LatestFrameWorker[T]:
        with self._cond:
            if not self._started:
                self._started = True
                self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def submit(self, item: T) -> bool:
        """Offer an item; never blocks on processing. Returns True if it replaced an unprocessed item."""
        with self._cond:
            self._submitted += 1
            if self._stopping:
                self._dropped += 1
                return False
            replaced = self._has_pending
            if replaced:
                self._dropped += 1
            self._pending = item
            self._has_pending = True
            self._cond.notify()
        return replaced

    def stats(self) -> WorkerStats:
        with self._cond:
            return WorkerStats(self._submitted, self._processed, self._dropped, self._failed, self._busy)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or running (tests, orderly shutdown). True if idle in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._has_pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return not (self._has_pending or self._busy)
                self._cond.wait(left)
        return True

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread (an item still waiting is counted as dropped). Idempotent; True if it ended."""
        with self._cond:
            self._stopping = True
            if self._has_pending:
                self._has_pending = False
                self._pending = None
                self._dropped += 1
            self._cond.notify_all()
        if not self._started or threading.current_thread() is self._thread:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._has_pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                item = self._pending
                self._pending = None
                self._has_pending = False
                self._busy = True
            keep_going = True
            try:
                self._process(item)  # type: ignore[arg-type]  # set together with _has_pending
                ok = True
            except BaseException as exc:  # the thread must survive a bad frame; policy is on_error's
                ok = False
                keep_going = self._on_error(exc) if self._on_error is not None else True
            with self._cond:
                self._busy = False
                if ok:
                    self._processed += 1
                else:
                    self._failed += 1
                if not keep_going:
                    self._stopping = True
                self._cond.notify_all()
                if self._stopping:
                    return
