"""The node's ``/diagnostics`` status: counters per period, and a level that says what they mean.

The level comes from *status sources*: callables returning ``(level, message, values)`` with level one of
``"ok"``, ``"warn"``, ``"error"``, called once per diagnostics period on the executor thread (each keeps its
own window since its previous call). :func:`merge_statuses` combines them: the worst level wins, the
message joins the messages of every source that is not ok (worst level first, then in source order) with
``"; "`` (``"ok"`` when all are), and the values are merged in source order after the node's counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from std_msgs.msg import Header

from dla_infer_node.ros import ros_convert

StatusSource = Callable[[], tuple[str, str, Mapping[str, Any]]]
LEVEL_RANK = {"ok": 0, "warn": 1, "error": 2}


def merge_statuses(statuses: Iterable[tuple[str, str, Mapping[str, Any]]],
                   values: Mapping[str, Any] | None = None) -> tuple[str, str, dict[str, Any]]:
    """Worst level; the not-ok messages, worst first; the values merged in order.

    A key already present (from the counters or an earlier source) is kept and the later value is added
    as ``"<key> #2"`` (``#3``...): sources should use distinct keys, but a clash must not hide a value.
    """
    merged: dict[str, Any] = dict(values or {})
    noted: list[tuple[int, int, str]] = []
    worst = "ok"
    for index, (level, message, source_values) in enumerate(statuses):
        if LEVEL_RANK[level] > LEVEL_RANK[worst]:
            worst = level
        if level != "ok":
            noted.append((-LEVEL_RANK[level], index, message))
        for key, value in source_values.items():
            name, n = key, 1
            while name in merged:
                n += 1
                name = f"{key} #{n}"
            merged[name] = value
    message = "; ".join(m for _, _, m in sorted(noted)) if noted else "ok"
    return worst, message, merged


class DiagnosticsReporter:
    """Publishes one DiagnosticStatus every ``period`` seconds from ``counters()``, fixed ``info`` and the
    status ``sources`` (see the module docstring for how they merge)."""

    def __init__(self, node: Node, period: float, counters: Callable[[], Mapping[str, Any]],
                 info: Callable[[], Mapping[str, Any]], hardware_id: str,
                 sources: Sequence[StatusSource] = (), label: str = "detector") -> None:
        self._node = node
        self._label = label  # the status is "<node>: <label>" (a camera's name in a multi-camera node)
        self._counters = counters
        self._info = info
        self._hardware_id = hardware_id
        self._sources = list(sources)
        self._last = (time.monotonic(), 0, 0, 0)
        self._pub: Any = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._timer: Any = node.create_timer(period, self.publish) if period > 0 else None

    def close(self) -> None:
        """Stop publishing (a camera withdrawn). Idempotent."""
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
            self._timer = None
        if self._pub is not None:
            self._node.destroy_publisher(self._pub)
            self._pub = None

    def add_source(self, source: StatusSource) -> None:
        self._sources.append(source)

    def _call(self, source: StatusSource) -> tuple[str, str, Mapping[str, Any]]:
        try:
            level, message, values = source()
            if level not in LEVEL_RANK:
                raise ValueError(f"level {level!r} is not one of {sorted(LEVEL_RANK)}")
            return level, message, values
        except Exception as exc:  # one broken source must not stop the executor or hide the others
            name = getattr(source, "__qualname__", repr(source))
            return "error", f"diagnostics source {name} failed: {exc!r}", {}

    def publish(self) -> None:
        if self._pub is None:
            return
        c = self._counters()
        now = time.monotonic()
        t0, in0, out0, _ = self._last
        dt = max(now - t0, 1e-6)
        self._last = (now, c["frames_in"], c["frames_processed"], c["frames_bad_input"])
        values = {**c, "input_fps": (c["frames_in"] - in0) / dt,
                  "output_fps": (c["frames_processed"] - out0) / dt, **self._info()}
        statuses = [self._call(source) for source in self._sources]
        level, text, merged = merge_statuses(statuses, values)
        header = Header()
        header.stamp = self._node.get_clock().now().to_msg()
        name = f"{self._node.get_fully_qualified_name()}: {self._label}"
        self._pub.publish(ros_convert.diagnostics(header, name, self._hardware_id, level, text, merged))
