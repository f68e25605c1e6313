"""Processes of the several-cameras benchmark (``dla_infer_node.bench.cameras``) and its test: a camera
(publisher) and a listener, each run as ``python -m dla_infer_node.bench.camera_roles ROLE ...``.

- ``camera``: publishes one generated scene (``core.synth``, so the detector finds real objects) as
  sensor_msgs/Image rgb8 on ``--topic`` at ``--rate`` Hz for ``--duration`` s, best effort, each frame
  stamped with the wall clock at publish; it starts once a subscriber matched (or after ``--wait``).
- ``listen``: takes ``<camera>/detections`` of each ``--camera`` and ``/diagnostics``; notes per camera
  how many arrays arrived and each one's latency (arrival - stamp: transport, the node, and the small
  message's hop), and the last diagnostics values of each status. Saves on SIGINT/SIGTERM.
Each writes ``--result`` (JSON); the listener also creates ``--ready`` once every camera's detections
publisher is in the graph.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bench.paced import publish_paced
from dla_infer_node.core.stop_signals import stop_on_signals
from dla_infer_node.core.synth import generate_scene
from dla_infer_node.ros.frame_memory import keep_frame_buffers


def _ros(name: str) -> tuple[Any, Any, threading.Event]:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    stop = threading.Event()
    keep_frame_buffers()
    rclpy.init(args=[name], signal_handler_options=SignalHandlerOptions.NO)
    stop_on_signals(stop)
    return rclpy, rclpy.create_node(name), stop


def role_camera(args: argparse.Namespace) -> int:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    rclpy, node, stop = _ros(f"bench_camera_{args.seed}")
    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
    pub = node.create_publisher(Image, args.topic, qos)
    msg = Image()
    msg.height, msg.width, msg.encoding, msg.step = args.height, args.width, "rgb8", args.width * 3
    msg.header.frame_id = "camera"
    msg.data = np.ascontiguousarray(generate_scene(args.seed, args.width, args.height).image).tobytes()
    deadline = time.monotonic() + args.wait
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    matched = pub.get_subscription_count() >= 1
    stop.wait(0.5)  # the reader's side of the match completes a little after the writer's
    sent, late, seconds = publish_paced(pub, msg, args.rate, stop, lambda _n, t: t < args.duration)
    stop.wait(0.5)  # in-flight fragments
    Path(args.result).write_text(json.dumps({"published": sent, "seconds": seconds, "late": late,
                                             "matched": matched}))
    node.destroy_node()
    rclpy.shutdown()
    return 0


def role_listen(args: argparse.Namespace) -> int:
    from diagnostic_msgs.msg import DiagnosticArray
    from vision_msgs.msg import Detection2DArray

    rclpy, node, stop = _ros("bench_cameras_listen")
    latency: dict[str, list[float]] = {c: [] for c in args.camera}
    objects: dict[str, int] = dict.fromkeys(args.camera, 0)
    status: dict[str, dict[str, str]] = {}
    lock = threading.Lock()

    def on_detections(camera: str, msg: Any) -> None:
        now = time.time_ns()
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with lock:
            latency[camera].append((now - stamp) / 1e6)
            objects[camera] += len(msg.detections)

    def on_diagnostics(msg: Any) -> None:
        with lock:
            for st in msg.status:
                status[st.name] = {kv.key: kv.value for kv in st.values}

    for camera in args.camera:
        topic = f"{args.prefix}{camera}/detections"
        node.create_subscription(Detection2DArray, topic, lambda m, c=camera: on_detections(c, m), 50)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor()
    executor.add_node(node)
    announced = False

    def save_on_stop() -> None:
        stop.wait()
        with lock:
            doc = {"latency_ms": {c: list(v) for c, v in latency.items()}, "objects": dict(objects),
                   "status": dict(status)}
        Path(args.result).write_text(json.dumps(doc))

    saver = threading.Thread(target=save_on_stop, daemon=True)
    saver.start()
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)
        if not announced and all(node.count_publishers(f"{args.prefix}{c}/detections") > 0
                                 for c in args.camera):
            Path(args.ready).touch()
            announced = True
    saver.join(10.0)
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_camera_roles")
    ap.add_argument("role", choices=("camera", "listen"))
    ap.add_argument("--result", required=True)
    ap.add_argument("--ready", default="")
    ap.add_argument("--topic", default="image")
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--wait", type=float, default=60.0, help="longest wait for a subscriber")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--camera", action="append", default=[], help="listen: a camera name (repeatable)")
    ap.add_argument("--prefix", default="/", help="listen: the node namespace's prefix of '<camera>/...'")
    args = ap.parse_args(argv)
    return role_camera(args) if args.role == "camera" else role_listen(args)


if __name__ == "__main__":
    sys.exit(main())
