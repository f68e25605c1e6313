"""A hint for the commonest silent misconfiguration: the camera publishes the *other* image type.

With ``input_transport: raw`` the node listens to ``image`` (sensor_msgs/Image); a camera driver or a
bag replay that only publishes ``image/compressed`` (sensor_msgs/CompressedImage) then feeds nothing, and
nothing fails. :class:`OtherTransportHint` watches the graph: while the configured input has no publisher
but the other transport's topic at the same name has one, it logs a warning once (again only after the
situation cleared and came back) and, as a diagnostics *status source*, reports WARN with the remedy.
Both topics published (image_transport does that) is normal and gives no hint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rclpy.node import Node

RAW_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
COMPRESSED_SUFFIX = "/compressed"
CHECK_PERIOD_S = 2.0  # graph queries are cheap; a person reading the log will not notice 2 s


def other_transport_topic(input_topic: str, compressed: bool) -> tuple[str, str] | None:
    """(topic, type) where the other image transport would sit for the resolved ``input_topic``; None when
    a compressed input was remapped to a name without the ``/compressed`` suffix (no raw name follows)."""
    if not compressed:
        return input_topic.rstrip("/") + COMPRESSED_SUFFIX, COMPRESSED_TYPE
    if input_topic.endswith(COMPRESSED_SUFFIX) and len(input_topic) > len(COMPRESSED_SUFFIX):
        return input_topic[: -len(COMPRESSED_SUFFIX)], RAW_TYPE
    return None


class OtherTransportHint:
    """Checks every :data:`CHECK_PERIOD_S` on the node's executor; :meth:`status` is a status source."""

    def __init__(self, node: Node, input_topic: str, compressed: bool,
                 period: float = CHECK_PERIOD_S) -> None:
        self._node = node
        self._input = input_topic
        self._input_type = COMPRESSED_TYPE if compressed else RAW_TYPE
        self._other = other_transport_topic(input_topic, compressed)
        self._message = ""
        self._timer = node.create_timer(period, self.check) if self._other is not None else None

    @property
    def message(self) -> str:
        """The hint as of the last check ('' when there is none)."""
        return self._message

    def check(self) -> None:
        """Look at the graph now; log the hint when it is new."""
        if self._other is None:
            return
        topic, type_name = self._other
        others = [i for i in self._node.get_publishers_info_by_topic(topic) if i.topic_type == type_name]
        message = ""
        if others and self._node.count_publishers(self._input) == 0:
            param = "raw" if type_name == RAW_TYPE else "compressed"
            message = (f"input {self._input} ({self._input_type}) has no publisher, but {topic} "
                       f"({type_name}) has {len(others)}: set input_transport:={param}, or remap the "
                       f"input to a topic of type {self._input_type}")
            if message != self._message:
                self._node.get_logger().warning(message)
        self._message = message

    def status(self) -> tuple[str, str, Mapping[str, Any]]:
        """Diagnostics status source: WARN with the hint while it holds."""
        if self._message:
            return "warn", self._message, {}
        return "ok", "ok", {}

    def close(self) -> None:
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
            self._timer = None
