"""The image subscription, wired so the input monitor learns what each distro can tell it.

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
from rclpy.qos import QoSProfile
from rclpy.subscription import Subscription

from dla_infer_node.ros.input_monitor import InputMonitor

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
    ``on_incompatible_qos`` gets the middleware's incompatible-QoS event (a source of the input health)."""
    callback: Callable[..., None] = on_image
    if not (with_info and message_info_supported()):  # Humble: the executor calls callback(msg)
        def callback(raw: bytes) -> None:
            on_image(raw, None)

    sub = node.create_subscription(msg_type, topic, callback, qos, raw=True,
                                   event_callbacks=_events(monitor.on_rmw_lost, on_incompatible_qos))
    if hasattr(sub, "get_publisher_count"):
        return sub, sub.get_publisher_count
    return sub, lambda: node.count_publishers(sub.topic_name)  # pragma: no cover - Humble
