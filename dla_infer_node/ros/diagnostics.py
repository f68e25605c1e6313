"""The node's ``/diagnostics`` status: counters per period, and a level that says what they mean."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from std_msgs.msg import Header

from dla_infer_node.ros import ros_convert

StatusSource = Callable[[], tuple[str, str, Mapping[str, Any]]]


def period_level(new_bad_input: int) -> tuple[str, str]:
    """Level and message of one period from what changed in it."""
    if new_bad_input:
        return "warn", f"{new_bad_input} unusable input frame(s) in the last period"
    return "ok", "ok"


class DiagnosticsReporter:
    """Publishes one DiagnosticStatus every ``period`` seconds from ``counters()`` and fixed ``info``."""

    def __init__(self, node: Node, period: float, counters: Callable[[], Mapping[str, Any]],
                 info: Callable[[], Mapping[str, Any]], hardware_id: str,
                 status: StatusSource | None = None) -> None:
        self._node = node
        # (level, message, values) per period; without one, the level says only whether input was unusable
        self._status = status
        self._counters = counters
        self._info = info
        self._hardware_id = hardware_id
        self._last = (time.monotonic(), 0, 0, 0)
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._timer = node.create_timer(period, self.publish) if period > 0 else None

    def publish(self) -> None:
        c = self._counters()
        now = time.monotonic()
        t0, in0, out0, bad0 = self._last
        dt = max(now - t0, 1e-6)
        self._last = (now, c["frames_in"], c["frames_processed"], c["frames_bad_input"])
        values = {**c, "input_fps": (c["frames_in"] - in0) / dt,
                  "output_fps": (c["frames_processed"] - out0) / dt, **self._info()}
        if self._status is not None:
            level, text, extra = self._status()
            values.update(extra)
        else:
            level, text = period_level(c["frames_bad_input"] - bad0)
        header = Header()
        header.stamp = self._node.get_clock().now().to_msg()
        name = f"{self._node.get_fully_qualified_name()}: detector"
        self._pub.publish(ros_convert.diagnostics(header, name, self._hardware_id, level, text, values))
