"""Publishing frames at a steady rate, for the benchmarks' camera processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def publish_paced(pub: Any, msg: Any, rate: float, stop: threading.Event,
                  more: Callable[[int, float], bool]) -> tuple[int, int, float]:
    """Publish ``msg`` at ``rate`` Hz, each stamped with the wall clock at publish, while ``more(sent,
    elapsed_s)`` holds and ``stop`` is not set. Returns (frames sent, frames sent late, seconds)."""
    sent, late, period = 0, 0, 1.0 / rate
    t0 = time.monotonic()
    while not stop.is_set() and more(sent, time.monotonic() - t0):
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
        pub.publish(msg)
        sent += 1
        wait = t0 + sent * period - time.monotonic()
        late += wait < 0
        stop.wait(max(0.0, wait))
    return sent, late, time.monotonic() - t0
