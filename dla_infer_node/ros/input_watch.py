"""Everything the node watches about its input besides the frames' content, for both node kinds.

- the input monitor: frames lost between publisher and node, silent matched publishers;
- the input health: failed / unusable / dropped frames, publishers with an incompatible QoS;
- the image codecs' own stderr messages (libjpeg, libpng), routed through the node's throttled logger.

:meth:`InputWatch.subscribe` makes the image subscription wired to all of it; :meth:`sources` are the
diagnostics status sources; :meth:`close` gives stderr back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSCompatibility, QoSProfile, qos_check_compatible
from rclpy.subscription import Subscription

from dla_infer_node.core.codec_stderr import CODEC_STDERR, write_stderr
from dla_infer_node.ros.diagnostics import StatusSource
from dla_infer_node.ros.health import InputHealth
from dla_infer_node.ros.image_subscription import image_subscription
from dla_infer_node.ros.input_monitor import InputMonitor
from dla_infer_node.ros.params import NodeConfig


class InputWatch:
    def __init__(self, node: Node, config: NodeConfig, counters: Callable[[], Mapping[str, Any]],
                 qos: QoSProfile) -> None:
        self._node = node
        self._config = config
        self._qos = qos
        self._sub: Subscription[Any] | None = None
        self._matched: Callable[[], int] = lambda: 0
        self.monitor = InputMonitor(config.input_loss_warn_ratio, config.input_stall_periods)
        self.health = InputHealth(counters, self._incompatible_publishers)
        CODEC_STDERR.sink = self._codec_output  # libjpeg/libpng warnings: through the throttled logger

    def subscribe(self, msg_type: Any, topic: str, on_frame: Callable[[bytes], None]) -> Subscription[Any]:
        """The raw image subscription; every frame goes to ``on_frame`` after the monitor has seen it."""
        def on_image(raw: bytes, info: Mapping[str, Any] | None) -> None:
            self.monitor.on_frame(info)
            on_frame(raw)

        self._sub, self._matched = image_subscription(
            self._node, msg_type, topic, self._qos, on_image, self.monitor,
            with_info=self._config.executor != "events", on_incompatible_qos=self._on_incompatible_qos)
        return self._sub

    def unsubscribed(self) -> None:
        """The subscription was destroyed (a lifecycle deactivate): nothing is matched any more."""
        self._sub = None
        self._matched = lambda: 0

    def sources(self) -> list[StatusSource]:
        return [self.health, lambda: self.monitor.status(self._matched())]

    def apply(self, values: Mapping[str, Any]) -> None:
        """Live parameter changes that concern the monitor."""
        if "input_loss_warn_ratio" in values:
            self.monitor.loss_warn_ratio = values["input_loss_warn_ratio"]
        if "input_stall_periods" in values:
            self.monitor.stall_periods = values["input_stall_periods"]

    def close(self) -> None:
        if CODEC_STDERR.sink == self._codec_output:
            CODEC_STDERR.sink = write_stderr

    def _on_incompatible_qos(self, event: Any) -> None:
        policy = getattr(event.last_policy_kind, "name", str(event.last_policy_kind))
        if self.health.note_incompatible_qos(int(event.total_count), policy) and self._sub is not None:
            cfg = self._config
            self._node.get_logger().warning(
                f"a publisher on {self._sub.topic_name} offers a QoS incompatible with this subscription "
                f"({cfg.qos_reliability}, depth {cfg.qos_depth}; policy {policy}): nothing will be received "
                f"from it; /diagnostics reports WARN while it is there")

    def _incompatible_publishers(self) -> int:
        """Publishers on the input topic whose QoS this subscription cannot match (from the graph)."""
        if self._sub is None:
            return 0
        infos = self._node.get_publishers_info_by_topic(self._sub.topic_name)
        return sum(1 for i in infos
                   if qos_check_compatible(i.qos_profile, self._qos)[0] == QoSCompatibility.ERROR)

    def _codec_output(self, text: str) -> None:
        for line in text.splitlines():
            if line.startswith("["):  # another thread's log line caught while a decode held stderr
                write_stderr(line + "\n")
            elif line.strip():
                self._node.get_logger().warning(f"image codec: {line.strip()}", throttle_duration_sec=5.0)
