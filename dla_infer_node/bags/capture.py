"""Capture a topic (by default the node's ``detections``) to an MCAP bag or a JSON summary.

    capture --topic detections --out FILE.mcap|FILE.json (--duration S | --count N [--timeout S])

Exit status 1, with one line on stderr, when nothing was recorded, or when ``--count N`` was not reached
(within ``--duration``, else ``--timeout``, default 60 s); what did arrive is still written.

The subscription is raw: the serialized bytes are kept as received (and written to the MCAP unchanged, in
rosbag2's conventions, so ``ros2 bag play``/``replay`` can play them back) and deserialized once for the
summary. Python API: :func:`capture` returns ``[(stamp_ns, msg), ...]``; :class:`Recorder` runs in the
background of a process that does other things (its own rclpy context, so it never disturbs the caller's).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dla_infer_node.bags.bag_writer import BagWriter
from dla_infer_node.bags.replay import split_ros_args
from dla_infer_node.bags.replayer import import_message_type
from dla_infer_node.core.errors import DlaInferError, ParameterError
from dla_infer_node.core.stop_signals import stop_on_signals

DEFAULT_TYPE = "vision_msgs/msg/Detection2DArray"
DEFAULT_COUNT_TIMEOUT_S = 60.0  # --count without --duration: a silent topic must not block forever


@dataclass(frozen=True)
class Captured:
    stamp_ns: int  # header stamp when the message has a header, else the receive time
    receive_ns: int  # wall clock (time.time_ns) at reception: what a recorder logs
    data: bytes  # serialized as received
    msg: Any  # deserialized


def _stamp_ns(msg: Any, fallback: int) -> int:
    header = getattr(msg, "header", None)
    if header is None:
        return fallback
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


class Recorder:
    """Subscribe (raw) to one topic in a private rclpy context spun by a background thread."""

    def __init__(
        self,
        topic: str,
        type_name: str = DEFAULT_TYPE,
        *,
        reliability: str = "reliable",
        depth: int = 100,
        node_name: str = "dla_capture",
        ros_args: Sequence[str] = (),
    ) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        if reliability not in ("reliable", "best_effort"):
            raise ParameterError("reliability", reliability, "reliable or best_effort")
        self.topic = topic
        self.type_name = type_name
        self.msg_type = import_message_type(type_name)
        self.records: list[Captured] = []
        self._cond = threading.Condition()
        self._context = Context()
        # explicit args: never parse the host process's argv (pytest, the demo) as ROS arguments
        rclpy.init(args=["capture", *ros_args], context=self._context)
        self.node = rclpy.create_node(node_name, context=self._context)
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=depth,
            reliability=ReliabilityPolicy.RELIABLE
            if reliability == "reliable"
            else ReliabilityPolicy.BEST_EFFORT,
        )
        self._sub = self.node.create_subscription(self.msg_type, topic, self._on_message, qos, raw=True)
        self.resolved_topic = self._sub.topic_name
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="dla-capture-spin", daemon=True)
        self._closed = False
        self._thread.start()

    def _spin(self) -> None:
        try:
            while self._context.ok() and not self._closed:
                self._executor.spin_once(timeout_sec=0.05)
        except Exception:
            # the context was shut down under spin_once (ExternalShutdownException and friends)
            if self._context.ok() and not self._closed:
                raise

    def _on_message(self, data: bytes) -> None:
        from rclpy.serialization import deserialize_message

        received = time.time_ns()
        msg = deserialize_message(data, self.msg_type)
        with self._cond:
            self.records.append(Captured(_stamp_ns(msg, received), received, bytes(data), msg))
            self._cond.notify_all()

    def publisher_count(self) -> int:
        return int(self.node.count_publishers(self.resolved_topic))

    def wait(
        self, count: int | None = None, duration: float | None = None, stop: threading.Event | None = None
    ) -> int:
        """Block until ``count`` messages arrived or ``duration`` seconds passed (whichever first; at least
        one must be given). Returns the number of messages captured so far."""
        if count is None and duration is None:
            raise ParameterError("count/duration", None, "at least one of them")
        deadline = None if duration is None else time.monotonic() + duration
        with self._cond:
            while count is None or len(self.records) < count:
                if stop is not None and stop.is_set():
                    break
                remaining = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return len(self.records)

    def snapshot(self) -> list[Captured]:
        with self._cond:
            return list(self.records)

    def close(self) -> None:
        import rclpy

        if self._closed:
            return
        self._closed = True
        self._thread.join(timeout=5)
        self._executor.shutdown()
        self.node.destroy_node()
        if self._context.ok():
            rclpy.shutdown(context=self._context)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def capture(
    topic: str = "detections",
    *,
    type_name: str = DEFAULT_TYPE,
    count: int | None = None,
    duration: float | None = None,
    reliability: str = "reliable",
) -> list[tuple[int, Any]]:
    """Record ``count`` messages or for ``duration`` seconds; returns ``[(stamp_ns, msg), ...]``."""
    with Recorder(topic, type_name, reliability=reliability) as rec:
        rec.wait(count=count, duration=duration)
        return [(r.stamp_ns, r.msg) for r in rec.snapshot()][: count if count is not None else None]


def summarize(records: Sequence[Captured], topic: str, type_name: str) -> dict[str, Any]:
    """JSON-ready summary: frame count, stamps, detections per frame and per class (Detection2DArray)."""
    per_class: Counter[str] = Counter()
    per_frame: list[int] = []
    for r in records:
        dets = getattr(r.msg, "detections", None)
        if dets is None:
            continue
        per_frame.append(len(dets))
        for d in dets:
            per_class[d.results[0].hypothesis.class_id if d.results else ""] += 1
    out: dict[str, Any] = {
        "topic": topic,
        "type": type_name,
        "frames": len(records),
        "stamps_ns": [r.stamp_ns for r in records],
        "frame_ids": sorted({getattr(getattr(r.msg, "header", None), "frame_id", "") for r in records}),
    }
    if records:
        out["first_receive_ns"] = records[0].receive_ns
        out["last_receive_ns"] = records[-1].receive_ns
    if per_frame or type_name == DEFAULT_TYPE:
        out["detections"] = sum(per_frame)
        out["detections_per_frame"] = per_frame
        out["detections_per_class"] = dict(sorted(per_class.items()))
    return out


def write_output(path: Path, records: Sequence[Captured], topic: str, type_name: str) -> None:
    if path.suffix == ".json":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summarize(records, topic, type_name), indent=1) + "\n")
        return
    with BagWriter(path, overwrite=True) as bag:
        bag.add_topic(topic, type_name)
        for r in records:
            bag.write(topic, r.data, log_time_ns=r.receive_ns, publish_time_ns=r.receive_ns)


def main(argv: Sequence[str] | None = None) -> int:
    tool_args, ros_args = split_ros_args(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="capture", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--topic", default="detections")
    ap.add_argument("--type", default=DEFAULT_TYPE, help=f"message type (default {DEFAULT_TYPE})")
    ap.add_argument(
        "--out", type=Path, required=True, help="FILE.json (summary), FILE.mcap or a bag directory"
    )
    ap.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    ap.add_argument("--count", type=int, default=None,
                    help="stop after N messages; fewer within --duration or --timeout: exit 1")
    ap.add_argument("--timeout", type=float, default=DEFAULT_COUNT_TIMEOUT_S,
                    help=f"with --count and no --duration: give up after S seconds "
                         f"(default {DEFAULT_COUNT_TIMEOUT_S:g})")
    ap.add_argument("--reliability", choices=("reliable", "best_effort"), default="reliable")
    ap.add_argument("--depth", type=int, default=100)
    args = ap.parse_args(tool_args)
    if args.duration is None and args.count is None:
        ap.error("give --duration S and/or --count N")
    if (args.count is not None and args.count < 1) or args.timeout <= 0:
        ap.error("--count and --timeout must be positive")
    limit = args.duration if args.duration is not None else args.timeout
    stop = threading.Event()
    try:
        rec = Recorder(
            args.topic, args.type, reliability=args.reliability, depth=args.depth, ros_args=ros_args
        )
    except DlaInferError as exc:
        print(f"capture: {exc}", file=sys.stderr)
        return 2
    restore_signals = stop_on_signals(stop)
    try:
        rec.wait(count=args.count, duration=limit, stop=stop)
        records = rec.snapshot()
    finally:
        rec.close()
        restore_signals()
    if args.count is not None:
        records = records[: args.count]
    write_output(args.out, records, rec.resolved_topic, args.type)
    return _verdict(len(records), args.count, rec.resolved_topic, args.out, limit, stop.is_set())


def _verdict(got: int, count: int | None, topic: str, out: Path, limit: float, interrupted: bool) -> int:
    """The closing line on stderr and the exit status: 1 when nothing, or fewer than --count, came."""
    if got == 0:
        print(f"capture: no message on {topic} within {limit:g} s (wrote an empty {out}; "
              f"check the topic name and that its publisher runs)", file=sys.stderr)
        return 1
    if count is not None and got < count and not interrupted:
        print(f"capture: only {got} of {count} messages on {topic} within {limit:g} s -> {out}",
              file=sys.stderr)
        return 1
    print(f"capture: {got} messages on {topic} -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
