"""Publish the recorded messages of a rosbag2 MCAP bag into a live ROS 2 graph (the ``replay`` tool's engine).

:class:`Replayer` publishes the recorded serialized (CDR) bytes unchanged through publishers of a node the
caller owns, paced by the recorded receive times divided by ``rate``; the command line is in ``replay``.
rclpy is imported inside the two functions that need it (publisher QoS, the final drain), so this module
imports without ROS.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dla_infer_node.bags.bag_io import BagReader, TopicInfo
from dla_infer_node.bags.bag_meta import parse_offered_qos
from dla_infer_node.core.errors import DlaInferError, ParameterError

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
# The replay sees another process's reader in the graph before that process's writer (the node's output) has
# necessarily matched it: a participant that missed the reader's first announcements learns of it at the
# next one, and Fast DDS re-announces every 3 s. --wait-for waits that long once the readers are in the graph.
DISCOVERY_SETTLE_S = 3.5
# The replay's own publisher counts a subscription as matched a little before that reader has matched the
# publisher back, and a reader drops what comes from a writer it does not know yet: the first message of a
# replay was lost that way. --wait-subscribers waits this long after the match.
READER_MATCH_SETTLE_S = 1.0


class ReplayError(DlaInferError):
    stage = "replay"


@dataclass
class ReplayOptions:
    rate: float = 1.0  # 0 = as fast as possible
    loop: bool = False
    remap: dict[str, str] = field(default_factory=dict)
    topics: list[str] | None = None  # None: image topics (or all with all_types)
    all_types: bool = False
    progress: bool = True
    reliability: str | None = None  # None: derived from the recorded offered QoS
    depth: int | None = None
    wait_subscribers: int = 0  # wait until every output topic has this many subscriptions
    wait_for: dict[str, int] = field(default_factory=dict)  # and until these topics have this many
    wait_timeout: float = 10.0
    start_delay: float = 0.0

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The rules for rate and depth, named as the command-line options (also run by :class:`Replayer`,
        since the fields may have changed since construction)."""
        if not self.rate >= 0:  # also rejects nan
            raise ParameterError("--rate", self.rate, "a number > 0 (or 0 for as fast as possible)")
        if self.depth is not None and self.depth < 1:
            raise ParameterError("--depth", self.depth, "an integer >= 1")


@dataclass
class ReplayStats:
    published: dict[str, int] = field(default_factory=dict)  # by output topic
    loops: int = 0
    wall_s: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.published.values())


def _abs(name: str) -> str:
    return name if name.startswith("/") else "/" + name


def parse_remap(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        src, sep, dst = item.partition(":=")
        if not sep or not src or not dst:
            raise ParameterError(
                "--remap", item, "FROM:=TO, e.g. /camera/image/compressed:=/image/compressed"
            )
        out[_abs(src)] = _abs(dst)
    return out


def parse_wait_for(items: Sequence[str]) -> dict[str, int]:
    """``TOPIC=N`` items: wait until TOPIC (any topic, e.g. one the node publishes) has N subscriptions."""
    out: dict[str, int] = {}
    for item in items:
        topic, sep, count = item.rpartition("=")
        if not sep or not topic or not count.isdigit() or int(count) < 1:
            raise ParameterError("--wait-for", item, "TOPIC=N with N >= 1, e.g. /detections=2")
        out[topic] = int(count)
    return out


def import_message_type(type_name: str) -> Any:
    """``pkg/msg/Type`` -> the generated Python class."""
    parts = type_name.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ReplayError(
            "not a message type name pkg/msg/Type", call="import_message_type", params={"type": type_name}
        )
    try:
        return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    except (ImportError, AttributeError) as exc:
        raise ReplayError(
            f"message type is not importable here: {exc}",
            call="import_message_type",
            params={"type": type_name},
            hint="source the ROS workspace that provides it, or leave the topic out with --topics",
        ) from exc


def select_topics(reader: BagReader, opts: ReplayOptions) -> list[TopicInfo]:
    if opts.topics:
        chosen = []
        for name in opts.topics:
            info = reader.topics.get(_abs(name))
            if info is None:
                raise ReplayError(
                    "topic is not in the bag",
                    call="select_topics",
                    params={"topic": name, "bag": sorted(reader.topics)},
                )
            chosen.append(info)
        return chosen
    chosen = [t for t in reader.topics.values() if opts.all_types or t.type in IMAGE_TYPES]
    if not chosen:
        listing = {t.name: t.type for t in reader.topics.values()}
        raise ReplayError(
            "the bag has no Image/CompressedImage topics",
            call="select_topics",
            params={"topics": listing},
            hint="name topics with --topics or use --all-types",
        )
    return sorted(chosen, key=lambda t: t.name)


def qos_for(info: TopicInfo, opts: ReplayOptions) -> Any:
    """Publisher QoS: reliable/transient-local only when every recorded publisher offered it."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    offered = parse_offered_qos(info.offered_qos_profiles)
    reliable = all(p.reliability == "reliable" for p in offered) if offered else True
    if opts.reliability is not None:
        reliable = opts.reliability == "reliable"
    latched = bool(offered) and all(p.durability == "transient_local" for p in offered)
    depth = opts.depth if opts.depth is not None else max([10, *(p.depth for p in offered if p.depth > 0)])
    # Unthrottled and reliable: keep every sample until acknowledged (publish blocks instead of a
    # keep-last history silently overwriting frames the subscriber has not acknowledged yet).
    keep_all = reliable and opts.rate == 0 and opts.depth is None
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if keep_all else HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


class Progress:
    """A one-line progress bar on stderr (a line per 10 % when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool, stream: Any = None) -> None:
        self.total = max(total, 1)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_draw = 0.0
        self._last_decile = -1

    def update(self, done: int, bag_s: float, total_s: float, loop: int) -> None:
        if not self.enabled:
            return
        frac = min(done / self.total, 1.0)
        text = f"{done:>{len(str(self.total))}}/{self.total} msgs  {bag_s:6.1f}/{total_s:.1f} s bag"
        if loop:
            text += f"  loop {loop + 1}"
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < 0.1 and done < self.total:
                return
            self._last_draw = now
            width = 30
            fill = int(frac * width)
            self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {text}")
        else:
            decile = int(frac * 10)
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self.stream.write(f"replay {int(frac * 100):3d}%  {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class Replayer:
    """Publishes a bag through publishers of ``node`` (rclpy must be initialised by the caller)."""

    def __init__(self, node: Any, bag: str, opts: ReplayOptions) -> None:
        opts.check()
        self.node = node
        self.opts = opts
        self.reader = BagReader(bag)
        self.topics = select_topics(self.reader, opts)
        self.publishers: dict[str, Any] = {}
        self.out_name: dict[str, str] = {}
        for info in self.topics:
            cls = import_message_type(info.type)
            out = opts.remap.get(info.name, info.name)
            self.out_name[info.name] = out
            self.publishers[info.name] = node.create_publisher(cls, out, qos_for(info, opts))

    def wait_for_subscribers(self, stop: threading.Event) -> bool:
        need = self.opts.wait_subscribers

        def ready() -> bool:
            return (all(p.get_subscription_count() >= need for p in self.publishers.values())
                    and all(self.node.count_subscribers(t) >= n for t, n in self.opts.wait_for.items()))

        if need <= 0 and not self.opts.wait_for:
            return True
        deadline = time.monotonic() + self.opts.wait_timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if ready():
                stop.wait(DISCOVERY_SETTLE_S if self.opts.wait_for else READER_MATCH_SETTLE_S)
                return True
            time.sleep(0.02)
        return ready()

    def run(
        self, stop: threading.Event | None = None, on_message: Callable[[str, bytes], None] | None = None
    ) -> ReplayStats:
        stop = stop or threading.Event()
        stats = ReplayStats(published={self.out_name[t.name]: 0 for t in self.topics})
        names = [t.name for t in self.topics]
        total_msgs = sum(t.message_count for t in self.topics)
        t_total = self.reader.duration_ns / 1e9
        progress = Progress(total_msgs, self.opts.progress)
        rate = self.opts.rate
        if not self.wait_for_subscribers(stop):
            need = self.opts.wait_subscribers
            wanted = [f"{need} on each replayed topic"] * (need > 0)
            wanted += [f"{n} on {t}" for t, n in self.opts.wait_for.items()]
            self.node.get_logger().warning(
                f"fewer subscribers than asked ({', '.join(wanted)}) after {self.opts.wait_timeout} s;"
                " replaying anyway"
            )
        if self.opts.start_delay > 0:
            stop.wait(self.opts.start_delay)
        t_wall0 = time.monotonic()
        try:
            while not stop.is_set():
                done = 0
                bag_t0: int | None = None
                loop_start = 0.0  # set with bag_t0, at the first message
                for msg in self.reader.messages(names):
                    if stop.is_set():
                        break
                    if bag_t0 is None:
                        # the schedule starts at the first message, not before opening the bag: reading the
                        # first chunk takes a few ms under load, which would make message 1 follow message 0
                        # sooner than recorded
                        bag_t0 = msg.log_time_ns
                        loop_start = time.monotonic()
                    offset = (msg.log_time_ns - bag_t0) / 1e9
                    if rate > 0:
                        delay = loop_start + offset / rate - time.monotonic()
                        if delay > 0 and stop.wait(delay):
                            break
                    self.publishers[msg.topic].publish(msg.data)  # serialized bytes, unchanged
                    stats.published[self.out_name[msg.topic]] += 1
                    if on_message is not None:
                        on_message(self.out_name[msg.topic], msg.data)
                    done += 1
                    progress.update(done, offset, t_total, stats.loops)
                stats.loops += 1
                if not self.opts.loop or done == 0:
                    break
        finally:
            progress.close()
        stats.wall_s = time.monotonic() - t_wall0
        self._drain()
        return stats

    def _drain(self) -> None:
        # Reliable publishers: give late acknowledgements a moment so the last frames are not lost.
        for pub in self.publishers.values():
            wait = getattr(pub, "wait_for_all_acked", None)
            if wait is not None:
                from rclpy.duration import Duration

                # best effort: an rmw without ack tracking is no reason to fail
                with contextlib.suppress(Exception):
                    wait(Duration(seconds=2))
        time.sleep(0.1)
