"""A late subscriber in a process of its own: ``python test/_late_label_subscriber.py TOPIC``.

Subscribes to TOPIC (vision_msgs/LabelInfo) twice, transient local and volatile, and prints one JSON line:
what each received. Only a latched (transient local) publisher's history reaches the first; the second
proves the message was published before this process joined.
"""

from __future__ import annotations

import json
import sys
import time

import rclpy
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from vision_msgs.msg import LabelInfo


def main(topic: str) -> None:
    rclpy.init()
    node = rclpy.create_node("late_label_subscriber")
    got: dict[str, list[LabelInfo]] = {"transient_local": [], "volatile": []}
    for key, durability in (("transient_local", DurabilityPolicy.TRANSIENT_LOCAL),
                            ("volatile", DurabilityPolicy.VOLATILE)):
        qos = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                         durability=durability)
        node.create_subscription(LabelInfo, topic, got[key].append, qos)
    deadline = time.monotonic() + 30
    while not got["transient_local"] and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.1)
    settle = time.monotonic() + 2.0  # anything the volatile one could get would have come by now
    while time.monotonic() < settle:
        rclpy.spin_once(node, timeout_sec=0.1)
    print(json.dumps({key: [{"classes": [c.class_name for c in m.class_map], "threshold": m.threshold}
                            for m in msgs] for key, msgs in got.items()}))
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
