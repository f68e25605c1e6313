"""The capture tool: raw subscription -> MCAP (rosbag2 conventions) or JSON summary, over real DDS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

from dla_infer_node.bags.bag_io import BagReader  # noqa: E402
from dla_infer_node.bags.capture import Captured, capture, summarize  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "samples" / "sample_bag"
TRUTH = REPO / "samples" / "sample_bag.ground_truth.json"
CIMG = "sensor_msgs/msg/CompressedImage"


def _start(module: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{proc.args!r} did not finish in {timeout} s: {err[-2000:]}")
    assert proc.returncode == 0, err
    return err


def test_capture_json_summary_of_a_replay(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    cap = _start("dla_infer_node.bags.capture", "--topic", "/camera/image/compressed", "--type", CIMG,
                 "--out", str(out), "--count", "60", "--duration", "40")  # fmt: skip
    replay = _start(
        "dla_infer_node.bags.replay", str(SAMPLE), "--rate", "4", "--wait-subscribers", "1", "--no-progress"
    )
    _wait(replay)
    err = _wait(cap)
    summary = json.loads(out.read_text())
    truth = json.loads(TRUTH.read_text())
    assert summary["frames"] == 60, err
    assert summary["frame_ids"] == ["camera"]
    expected = [f["stamp"]["sec"] * 1_000_000_000 + f["stamp"]["nanosec"] for f in truth["frames"]]
    assert summary["stamps_ns"] == expected
    assert "detections" not in summary  # not a Detection2DArray topic


def test_capture_to_mcap_is_replayable(tmp_path: Path) -> None:
    out = tmp_path / "captured.mcap"
    cap = _start("dla_infer_node.bags.capture", "--topic", "/camera/image/compressed", "--type", CIMG,
                 "--out", str(out), "--count", "5", "--duration", "40")  # fmt: skip
    replay = _start(
        "dla_infer_node.bags.replay", str(SAMPLE), "--rate", "4", "--wait-subscribers", "1", "--no-progress"
    )
    _wait(cap)
    _wait(replay)
    recorded = [m.data for m in BagReader(SAMPLE).messages()][:5]
    bag = BagReader(out)
    info = bag.topics["/camera/image/compressed"]
    assert (info.type, info.serialization_format, info.message_count) == (CIMG, "cdr", 5)
    assert info.type_description_hash.startswith("RIHS01_")
    assert [m.data for m in bag.messages()] == recorded


def _detections(stamp_s: int, classes: list[str]) -> object:
    from vision_msgs.msg import Detection2D, Detection2DArray, ObjectHypothesisWithPose

    arr = Detection2DArray()
    arr.header.stamp.sec = stamp_s
    arr.header.frame_id = "camera"
    for name in classes:
        det = Detection2D()
        hyp = ObjectHypothesisWithPose()
        hyp.hypothesis.class_id = name
        hyp.hypothesis.score = 0.9
        det.results.append(hyp)
        arr.detections.append(det)
    return arr


def test_summary_counts_detections_per_class() -> None:
    frames = [["circle", "star"], [], ["circle"]]
    records = [Captured(i * 10**9, i * 10**9 + 5, b"", _detections(i, c)) for i, c in enumerate(frames)]
    s = summarize(records, "/detections", "vision_msgs/msg/Detection2DArray")
    assert s["frames"] == 3 and s["detections"] == 3
    assert s["detections_per_frame"] == [2, 0, 1]
    assert s["detections_per_class"] == {"circle": 2, "star": 1}
    assert s["stamps_ns"] == [0, 10**9, 2 * 10**9]
    empty = summarize([], "/detections", "vision_msgs/msg/Detection2DArray")
    assert empty["frames"] == 0 and empty["detections"] == 0


def test_capture_api_returns_stamp_and_message() -> None:
    from rclpy.context import Context
    from vision_msgs.msg import Detection2DArray

    ctx = Context()
    rclpy.init(args=["pub"], context=ctx)
    node = rclpy.create_node("capture_test_pub", context=ctx)
    pub = node.create_publisher(Detection2DArray, "/detections", 10)
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.is_set():
            if pub.get_subscription_count() > 0:
                pub.publish(_detections(100 + i, ["ring"] * (i % 3)))
                i += 1
            time.sleep(0.05)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        got = capture("detections", count=4, duration=20)
    finally:
        stop.set()
        thread.join(5)
        node.destroy_node()
        rclpy.shutdown(context=ctx)
    assert len(got) == 4
    stamps = [s for s, _ in got]
    assert stamps == sorted(stamps) and all(s % 10**9 == 0 and s >= 100 * 10**9 for s in stamps)
    assert all(isinstance(m, Detection2DArray) for _, m in got)


def _silent_topic() -> str:
    return f"/nobody_publishes_{os.getpid()}"


def test_capture_of_nothing_exits_1_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "none.json"
    proc = subprocess.run([sys.executable, "-m", "dla_infer_node.bags.capture", "--topic", _silent_topic(),
                           "--out", str(out), "--duration", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "no message on" in proc.stderr, proc.stderr
    assert json.loads(out.read_text())["frames"] == 0


def test_capture_count_partly_reached_exits_1_and_keeps_what_came(tmp_path: Path) -> None:
    from _node_helpers import RosProbe
    from std_msgs.msg import String

    topic, out = _silent_topic() + "_few", tmp_path / "few.json"
    cap = _start("dla_infer_node.bags.capture", "--topic", topic, "--type", "std_msgs/msg/String",
                 "--out", str(out), "--count", "10", "--timeout", "15")  # fmt: skip
    probe = RosProbe("capture_feeder")
    try:
        pub = probe.node.create_publisher(String, topic, probe.qos(depth=10))
        assert probe.spin_until(lambda: pub.get_subscription_count() > 0, 30), "capture did not subscribe"
        for i in range(3):
            pub.publish(String(data=f"m{i}"))
        _, err = cap.communicate(timeout=60)
    finally:
        probe.close()
    assert cap.returncode == 1, err
    assert err.strip().count("\n") == 0 and "only 3 of 10 messages" in err, err
    assert json.loads(out.read_text())["frames"] == 3


def test_capture_count_not_reached_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "few.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dla_infer_node.bags.capture", "--topic", _silent_topic(),
                           "--out", str(out), "--count", "5", "--timeout", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and time.monotonic() - start < 50, proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    help_text = subprocess.run([sys.executable, "-m", "dla_infer_node.bags.capture", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    assert "--timeout" in help_text and "default 60" in help_text
