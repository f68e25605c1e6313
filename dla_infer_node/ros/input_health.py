"""What ``/diagnostics`` level the node's frame counters and its input's QoS deserve, per period.

A *status source*: called once per diagnostics period, it returns ``(level, message, values)``, level one
of ``"ok" | "warn" | "error"``. The rules (from the counters' change over the period):

- ERROR: frames ended in the period and every one of them failed (unusable input or a failed inference):
  nothing is being detected.
- WARN: some frames failed; or more than :data:`DROPPED_WARN_SHARE` of the frames that arrived were
  dropped. Dropping is by design: the worker keeps only the newest frame, so a camera faster than the
  model always drops some, and that is not a fault. Past half, detections run at under half the camera's
  rate, which the operator should see, so it is a WARN (not an ERROR: every answer is still correct).
- WARN: a publisher on the input topic has a QoS this subscription cannot match (e.g. it is BEST_EFFORT
  and we subscribe RELIABLE): DDS delivers nothing from it and nothing else would say so. The middleware
  reports it once through the incompatible-QoS event; the level then follows the graph, so it clears
  when that publisher goes.

"No frames while a publisher is matched" (a stalled stream) is another source (input monitoring). One known
cause, measured with the default Fast DDS (rmw_fastrtps_cpp, Kilted wheels): a publisher that publishes a
zero-length serialized sample on a RELIABLE topic. Across processes that sample never reaches the reader;
with BEST_EFFORT only it is lost (the stream goes on), with RELIABLE every later sample stays undelivered
(the reader waits for the missing sequence number; in-order delivery holds the rest back) while the
publisher stays matched. Within one process (no wire) it is delivered. It is the publisher's and the
middleware's fault; the node cannot see the sample, so only the stall detector can report it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

DROPPED_WARN_SHARE = 0.5
_RANK = {"ok": 0, "warn": 1, "error": 2}
Status = tuple[str, str, dict[str, Any]]

_COUNTERS = ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed")


def frame_status(delta: Mapping[str, int]) -> Status:
    """The level of one period from how many frames arrived, were answered, dropped or failed in it."""
    arrived, answered = delta["frames_in"], delta["frames_processed"]
    bad, failed, dropped = delta["frames_bad_input"], delta["frames_failed"], delta["frames_dropped"]
    values = {f"period_{k}": v for k, v in delta.items()}
    if (bad or failed) and not answered:
        return "error", f"every frame failed in the last period ({bad} unusable, {failed} failed)", values
    if bad or failed:
        return "warn", f"{bad} unusable and {failed} failed frame(s) in the last period", values
    if arrived and dropped > DROPPED_WARN_SHARE * arrived:
        return "warn", (f"{dropped} of {arrived} frames dropped in the last period: detections run at under "
                        f"{DROPPED_WARN_SHARE:.0%} of the input rate"), values
    return "ok", "ok", values


class InputHealth:
    """Status source over the frame counters and the input's QoS compatibility."""

    def __init__(self, counters: Callable[[], Mapping[str, Any]],
                 incompatible_publishers: Callable[[], int] = lambda: 0) -> None:
        self._counters = counters
        self._incompatible_publishers = incompatible_publishers
        self._last = {k: 0 for k in _COUNTERS}
        self._lock = threading.Lock()
        self._qos_events = 0
        self._qos_policy = ""

    def note_incompatible_qos(self, total_count: int, policy: str) -> bool:
        """Record the middleware's incompatible-QoS event; True the first time (log it once)."""
        with self._lock:
            first = self._qos_events == 0
            self._qos_events = max(self._qos_events, total_count, 1)
            self._qos_policy = policy
        return first

    def __call__(self) -> Status:
        c = self._counters()
        delta = {k: int(c[k]) - self._last[k] for k in _COUNTERS}
        self._last = {k: int(c[k]) for k in _COUNTERS}
        statuses = [frame_status(delta)]
        with self._lock:
            events, policy = self._qos_events, self._qos_policy
        if events:
            n = self._incompatible_publishers()
            qos_values = {"qos_incompatible_events": events, "qos_incompatible_publishers": n}
            if n:
                statuses.append(("warn", f"{n} publisher(s) on the input topic with an incompatible QoS "
                                         f"({policy}): nothing is received from them", qos_values))
            else:
                statuses.append(("ok", "ok", qos_values))
        level = max((s[0] for s in statuses), key=_RANK.__getitem__)
        values = {k: v for s in statuses for k, v in s[2].items()}  # the two parts use distinct keys
        return level, "; ".join(s[1] for s in statuses if s[0] != "ok") or "ok", values
