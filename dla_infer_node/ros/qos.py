"""Every QoS profile the node uses, built in one place from its parameters."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy


def image_qos(reliability: str, depth: int) -> QoSProfile:
    """An image stream's QoS: the input subscription (from parameters) and the debug overlay."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth,
        reliability=(ReliabilityPolicy.RELIABLE if reliability == "reliable"
                     else ReliabilityPolicy.BEST_EFFORT),
        durability=DurabilityPolicy.VOLATILE)


def latched_qos() -> QoSProfile:
    """Transient local, depth 1: a late subscriber still gets the last message (label_info)."""
    return QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)
