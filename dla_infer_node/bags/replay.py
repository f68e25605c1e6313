"""Replay the image topics of a rosbag2 MCAP bag into a live ROS 2 graph.

    python -m dla_infer_node.bags.replay BAG [--rate F] [--loop] [--remap FROM:=TO ...] [--topics T ...]
                                        [--no-progress] [--wait-subscribers N] [--wait-for TOPIC=N ...]
                                        [--wait-timeout S] [--start-delay S]

BAG is a ``.mcap`` file or a rosbag2 bag directory. The recorded serialized (CDR) bytes are published
unchanged, so what a subscriber receives is byte-identical to what was recorded, with the original
spacing of receive times divided by ``--rate``. By default the sensor_msgs/Image and
sensor_msgs/CompressedImage topics are replayed; ``--topics`` picks any topics whose message types are
importable, ``--all-types`` takes every such topic. The publishing loop is ``replayer``; bag reading
(ROS-free) lives in ``bag_io``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from typing import Any

from dla_infer_node.bags.bag_io import BagError, BagReader
from dla_infer_node.bags.replayer import Replayer, ReplayOptions, parse_remap, parse_wait_for
from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.core.stop_signals import stop_on_signals


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="replay", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("bag", help="a .mcap file or a rosbag2 bag directory (metadata.yaml)")
    ap.add_argument("--rate", type=float, default=1.0, help="speed factor (2 = twice as fast; 0 = no delays)")
    ap.add_argument("--loop", action="store_true", help="start over at the end until interrupted")
    ap.add_argument("--remap", nargs="+", default=[], metavar="FROM:=TO", help="publish topic FROM as TO")
    ap.add_argument("--topics", nargs="+", default=None, metavar="TOPIC", help="replay only these topics")
    ap.add_argument("--all-types", action="store_true", help="replay every topic with an importable type")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    ap.add_argument(
        "--reliability",
        choices=("reliable", "best_effort"),
        default=None,
        help="publisher reliability (default: as recorded)",
    )
    ap.add_argument(
        "--depth", type=int, default=None, help="publisher history depth (default: max(10, recorded))"
    )
    ap.add_argument(
        "--wait-subscribers",
        type=int,
        default=0,
        metavar="N",
        help="before starting, wait until every topic has N subscriptions, then 1 s for the readers' side of "
        "the match (see --wait-timeout)",
    )
    ap.add_argument(
        "--wait-for",
        action="append",
        default=[],
        metavar="TOPIC=N",
        help="before starting, also wait until TOPIC has N subscriptions (e.g. the readers of the node's "
        "output: --wait-for /detections=2), then 3.5 s for the topic's publisher to match them; repeatable",
    )
    ap.add_argument("--wait-timeout", type=float, default=10.0, metavar="S")
    ap.add_argument(
        "--start-delay", type=float, default=0.0, metavar="S", help="sleep S seconds before the first message"
    )
    ap.add_argument("--node-name", default="dla_replay")
    return ap


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """The options of the command line; ReplayOptions checks --rate and --depth."""
    return ReplayOptions(
        rate=args.rate,
        loop=args.loop,
        remap=parse_remap(args.remap),
        topics=args.topics,
        all_types=args.all_types,
        progress=not args.no_progress,
        reliability=args.reliability,
        depth=args.depth,
        wait_subscribers=args.wait_subscribers,
        wait_for=parse_wait_for(args.wait_for),
        wait_timeout=args.wait_timeout,
        start_delay=args.start_delay,
    )


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(tool arguments, ROS arguments): everything from ``--ros-args`` on goes to rclpy only, so a
    ``FROM:=TO`` of ``--remap`` is never taken for a (deprecated) global rcl remap rule."""
    argv = list(argv)
    if "--ros-args" in argv:
        i = argv.index("--ros-args")
        return argv[:i], argv[i:]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    tool_args, ros_args = split_ros_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(tool_args)
    try:
        opts = options_from_args(args)
        BagReader(args.bag)  # fail on a bad bag before touching ROS
    except (DlaInferError, BagError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    import rclpy

    stop = threading.Event()
    rclpy.init(args=["replay", *ros_args], signal_handler_options=_no_signal_handlers())
    restore_signals = stop_on_signals(stop)
    node = rclpy.create_node(args.node_name)
    try:
        replayer = Replayer(node, args.bag, opts)
        stats = replayer.run(stop)
        summary = ", ".join(f"{n} x{c}" for n, c in stats.published.items())
        print(
            f"replay: published {stats.total} messages ({summary}) in {stats.wall_s:.2f} s", file=sys.stderr
        )
        return 0
    except DlaInferError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        restore_signals()


def _no_signal_handlers() -> Any:
    # Our own handlers stop the loop cleanly; rclpy's would shut the context down under a publish.
    from rclpy.signals import SignalHandlerOptions

    return SignalHandlerOptions.NO


if __name__ == "__main__":
    sys.exit(main())
