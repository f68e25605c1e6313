"""The node's image input: the raw subscription, and everything watched about the input besides the
frames' content, for both node kinds.

- liveness (``input_liveness``): frames lost between publisher and node, silent matched publishers;
- health (``input_health``): failed / unusable / dropped frames, publishers with an incompatible QoS;
- the image codecs' own stderr messages (libjpeg, libpng), routed through the node's throttled logger.

:meth:`InputWatch.subscribe` makes the image subscription wired to all of it; :attr:`health` and
:meth:`monitor_status` are diagnostics status sources; :meth:`close` gives stderr back.

How the subscription is wired on each distro (:func:`image_subscription`):

- Iron and later: a callback with two parameters gets ``(message, message_info)`` from rclpy's executors
  (the C++ EventsExecutor included); the info carries the publication sequence number, and from Kilted
  (rclpy 9) the publisher's GID. Humble's executors pass the message only, so the callback is wrapped and
  the monitor gets ``None``.
- Every distro since Galactic: the rmw's message-lost event (``SubscriptionEventCallbacks.message_lost``),
  where the rmw implements it (Fast DDS and Cyclone DDS do); where it does not, rclpy skips it silently.
- Not with the EventsExecutor of rclpy 9.1.2 (Kilted): a callback taking the message info makes its
  ``spin_once`` raise ``SystemError: null argument to internal routine`` at the first frame (seen with the
  node's reliable subscription), so ``executor: events`` takes the message only, like Humble.
- Matched publishers: ``Subscription.get_publisher_count`` (Iron and later: publishers whose QoS matched),
  else the graph's publisher count on the topic (Humble).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSCompatibility, QoSProfile, qos_check_compatible
from rclpy.subscription import Subscription

from dla_infer_node.core.codec_stderr import CODEC_STDERR, codec_lines, write_stderr
from dla_infer_node.ros.input_health import InputHealth, Status
from dla_infer_node.ros.input_liveness import InputMonitor
from dla_infer_node.ros.node_config import NodeConfig

OnImage = Callable[[bytes, "Mapping[str, Any] | None"], None]


def message_info_supported() -> bool:
    """Whether rclpy hands a two-parameter callback the message info (Iron and later)."""
    return hasattr(Subscription, "CallbackType")


def _events(on_lost: Callable[[int], None], on_incompatible_qos: Callable[[Any], None] | None) -> Any:
    try:
        from rclpy.event_handler import SubscriptionEventCallbacks  # Iron and later
    except ImportError:  # pragma: no cover - Humble
        from rclpy.qos_event import SubscriptionEventCallbacks  # type: ignore[no-redef,unused-ignore]
    return SubscriptionEventCallbacks(message_lost=lambda status: on_lost(status.total_count_change),
                                      incompatible_qos=on_incompatible_qos)


def image_subscription(node: Node, msg_type: Any, topic: str, qos: QoSProfile, on_image: OnImage,
                       monitor: InputMonitor, *, with_info: bool = True,
                       on_incompatible_qos: Callable[[Any], None] | None = None,
                       ) -> tuple[Subscription[Any], Callable[[], int]]:
    """The raw (serialized) image subscription and a function counting its matched publishers;
    ``with_info=False`` never asks for the message info (the EventsExecutor, see the module docstring);
    ``on_incompatible_qos`` gets the middleware's incompatible-QoS event (the health source)."""
    callback: Callable[..., None] = on_image
    if not (with_info and message_info_supported()):  # Humble: the executor calls callback(msg)
        def callback(raw: bytes) -> None:
            on_image(raw, None)

    sub = node.create_subscription(msg_type, topic, callback, qos, raw=True,
                                   event_callbacks=_events(monitor.on_rmw_lost, on_incompatible_qos))
    if hasattr(sub, "get_publisher_count"):
        return sub, sub.get_publisher_count
    return sub, lambda: node.count_publishers(sub.topic_name)  # pragma: no cover - Humble


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

    def monitor_status(self) -> Status:
        """Diagnostics status source: frames lost on the way, matched publishers gone silent."""
        return self.monitor.status(self._matched())

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
        codec, other = codec_lines(text)
        for line in other:  # another thread's log line caught while a decode held stderr
            write_stderr(line + "\n")
        for line in codec:
            self._node.get_logger().warning(f"image codec: {line.strip()}", throttle_duration_sec=5.0)
