"""Bag replay over real DDS (loopback, own ROS domain: see conftest.py): the replay tool runs as a separate
process, a raw subscription in the test receives byte-identical recorded payloads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

from dla_infer_node.bags.bag_io import BagReader  # noqa: E402
from dla_infer_node.bags.bag_writer import BagWriter  # noqa: E402
from dla_infer_node.bags.capture import Recorder  # noqa: E402
from dla_infer_node.bags.replayer import Replayer, ReplayOptions  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "samples" / "sample_bag"
CIMG = "sensor_msgs/msg/CompressedImage"
IMG = "sensor_msgs/msg/Image"


def _replay(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dla_infer_node.bags.replay", *args],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"replay did not finish within {timeout} s: {err[-2000:]}")
    return proc.returncode, err


def _aligned(data: bytes) -> bytes:
    # Fast DDS may pad a sample to a multiple of 4 bytes in transit; recordings made from the wire are
    # aligned, so test bags are too (tools/make_sample_bag.py does the same).
    return data + b"\0" * (-len(data) % 4)


def _image_bag(path: Path, n: int = 5, period_ns: int = 100_000_000) -> list[bytes]:
    """A bag with n small rgb8 Images on /cam/image and a String topic; returns the image payloads."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    payloads = []
    with BagWriter(path) as bag:
        bag.add_topic("/cam/image", IMG)
        bag.add_topic("/chatter", "std_msgs/msg/String")
        for i in range(n):
            img = Image(height=4, width=8, encoding="rgb8", step=24)
            img.header.frame_id = "cam"
            img.header.stamp.sec = 100 + i
            img.data = bytes((i * 7 + k) % 256 for k in range(96))
            payloads.append(_aligned(serialize_message(img)))
            bag.write("/cam/image", payloads[-1], log_time_ns=1_000_000_000 + i * period_ns)
            bag.write(
                "/chatter", serialize_message(String(data=f"m{i}")), log_time_ns=1_000_000_001 + i * period_ns
            )
    return payloads


def test_sample_bag_replays_byte_identical() -> None:
    recorded = [m.data for m in BagReader(SAMPLE).messages()]
    assert len(recorded) == 60
    with Recorder("/camera/image/compressed", CIMG) as rec:
        proc = _replay(str(SAMPLE), "--rate", "4", "--wait-subscribers", "1", "--no-progress")
        rc, err = _finish(proc)
        assert rc == 0, err
        rec.wait(count=60, duration=10)
        got = rec.snapshot()
    assert len(got) == 60
    assert [r.data for r in got] == recorded
    assert {r.msg.header.frame_id for r in got} == {"camera"}
    assert "published 60 messages" in err


def test_wait_for_holds_the_replay_until_another_topic_has_its_readers(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    _image_bag(bag, n=2)
    # nobody reads /wait_topic: the replay gives up after --wait-timeout and says what it waited for
    rc, err = _finish(_replay(str(bag), "--no-progress", "--wait-for", "/wait_topic=1",
                              "--wait-timeout", "1"))
    assert rc == 0 and "fewer subscribers than asked (1 on /wait_topic)" in err, err
    with Recorder("/wait_topic", "std_msgs/msg/String") as reader:
        assert reader.node.count_subscribers("/wait_topic") == 1
        rc, err = _finish(_replay(str(bag), "--no-progress", "--wait-for", "/wait_topic=1",
                                  "--wait-timeout", "60"))
    assert rc == 0 and "fewer subscribers" not in err and "published 2 messages" in err, err


def test_remap_and_raw_image_type(tmp_path: Path) -> None:
    bag = tmp_path / "img_bag"
    payloads = _image_bag(bag)
    with Recorder("/remapped/image", IMG) as out, Recorder("/cam/image", IMG) as original:
        proc = _replay(
            str(bag), "--rate", "5", "--remap", "cam/image:=/remapped/image", "--wait-subscribers", "1"
        )
        rc, err = _finish(proc)
        assert rc == 0, err
        out.wait(count=5, duration=10)
        time.sleep(0.3)
        assert [r.data for r in out.snapshot()] == payloads
        assert original.snapshot() == []  # published only under the new name
    # the String topic is not an image topic, so it is not replayed by default
    assert "/chatter" not in err and "/remapped/image x5" in err
    # progress bar lines on stderr (not a terminal: one per 10 %)
    assert "replay 100%" in err


def test_loop_until_sigint(tmp_path: Path) -> None:
    bag = tmp_path / "loop_bag"
    _image_bag(bag, n=4, period_ns=20_000_000)
    with Recorder("/cam/image", IMG) as rec:
        proc = _replay(str(bag), "--loop", "--wait-subscribers", "1", "--no-progress")
        assert rec.wait(count=10, duration=20) >= 10  # more than two passes over 4 messages
        proc.send_signal(signal.SIGINT)
        rc, err = _finish(proc)
    assert rc == 0, err


class _FakePublisher:
    def __init__(self, log: list[tuple[float, bytes]]) -> None:
        self.log = log

    def publish(self, data: bytes) -> None:
        self.log.append((time.monotonic(), data))

    def get_subscription_count(self) -> int:
        return 1


class _FakeNode:
    """Stands in for an rclpy node: the schedule is checked without DDS in the way."""

    def __init__(self) -> None:
        self.log: list[tuple[float, bytes]] = []
        self.topics: list[str] = []

    def create_publisher(self, _cls: Any, topic: str, _qos: Any) -> _FakePublisher:
        self.topics.append(topic)
        return _FakePublisher(self.log)

    def get_logger(self) -> Any:
        return None


@pytest.mark.parametrize("rate", [0.5, 2.0])
def test_rate_factor_scales_recorded_spacing(tmp_path: Path, rate: float) -> None:
    bag = tmp_path / "rate_bag"
    _image_bag(bag, n=5, period_ns=80_000_000)
    node = _FakeNode()
    stats = Replayer(node, str(bag), ReplayOptions(rate=rate, progress=False)).run()
    assert stats.total == 5
    t0 = node.log[0][0]
    offsets = [t - t0 for t, _ in node.log]
    for i, off in enumerate(offsets):
        # never early: message i is due (i * 80 ms) / rate after the first
        assert off >= i * 0.08 / rate - 0.002, offsets


def test_rate_zero_is_unthrottled_and_loop_stops_on_event(tmp_path: Path) -> None:
    bag = tmp_path / "fast_bag"
    _image_bag(bag, n=5, period_ns=1_000_000_000)  # 4 s of bag time
    node = _FakeNode()
    stats = Replayer(node, str(bag), ReplayOptions(rate=0, progress=False)).run()
    assert stats.total == 5 and node.log[-1][0] - node.log[0][0] < 2.0
    stop = threading.Event()
    node2 = _FakeNode()
    looping = Replayer(node2, str(bag), ReplayOptions(rate=0, loop=True, progress=False))
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    stats = looping.run(stop)
    timer.cancel()
    assert stats.loops > 1 and stats.total >= 5


@pytest.mark.parametrize(
    "make, extra, expected",
    [
        ("missing", [], "no such bag"),
        ("no_images", [], "no Image/CompressedImage topics"),
        ("images", ["--remap", "nonsense"], "FROM:=TO"),
        ("images", ["--topics", "/not_there"], "topic is not in the bag"),
        ("images", ["--rate", "-1"], "--rate"),
        ("images", ["--wait-for", "/detections"], "TOPIC=N"),
        ("images", ["--wait-for", "/detections=0"], "TOPIC=N"),
    ],
)
def test_bad_invocations_exit_2_with_reason(
    tmp_path: Path, make: str, extra: list[str], expected: str
) -> None:
    bag = tmp_path / "b"
    if make == "images":
        _image_bag(bag, n=1)
    elif make == "no_images":
        from rclpy.serialization import serialize_message
        from std_msgs.msg import String

        with BagWriter(bag) as w:
            w.add_topic("/chatter", "std_msgs/msg/String")
            w.write("/chatter", serialize_message(String(data="x")), log_time_ns=1)
    rc, err = _finish(_replay(str(bag), "--no-progress", *extra), timeout=60)
    assert rc == 2, err
    assert expected in err
    assert "Traceback" not in err
