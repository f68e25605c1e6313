"""Compressed input (JPEG/PNG), class-index mode, the default best-effort QoS, and accelerator faults."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from _node_helpers import (
    ORACLE_SOURCE,
    NodeRunner,
    RosProbe,
    compressed_msg,
    diag_values,
    image_msg,
    oracle_expected,
    write_oracle_model,
)

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")

from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CompressedImage, Image
from vision_msgs.msg import Detection2DArray

STAMPS = itertools.count(5000)


def _scene_bgr() -> np.ndarray:
    # smooth content: survives JPEG well (the oracle ignores pixels anyway)
    y, x = np.mgrid[0:ORACLE_SOURCE, 0:ORACLE_SOURCE]
    return np.dstack([x * 2, y * 2, (x + y)]).astype(np.uint8)


class Link:
    """A publisher on the node's input plus collectors of its outputs."""

    def __init__(self, probe: RosProbe, ns: str, msg_type: Any, topic: str, reliable: bool) -> None:
        self.probe = probe
        qos = probe.qos(reliable=reliable, depth=1)
        self.pub = probe.node.create_publisher(msg_type, f"{ns}/{topic}", qos)
        self.dets: list[Any] = probe.collect(Detection2DArray, f"{ns}/detections")
        self.diags: list[Any] = probe.collect(DiagnosticArray, "/diagnostics")

    def ready(self, proc: Any, ns: str) -> None:
        ok = self.probe.spin_until(lambda: (self.pub.get_subscription_count() > 0
                                            and self.probe.node.count_publishers(f"{ns}/detections") > 0)
                                   or proc.poll() is not None, 90)
        assert ok and proc.poll() is None

    def send(self, msg: Any, timeout: float = 30.0) -> Any:
        sec = msg.header.stamp.sec
        # best effort on the input: re-publish until the frame gets through
        out = self.probe.spin_until(lambda: next((d for d in self.dets if d.header.stamp.sec == sec), None),
                                    timeout, every=lambda: self.pub.publish(msg), period=2.0)
        assert out is not None, f"no detections for stamp {sec}"
        return out


@pytest.fixture(scope="module")
def compressed(module_tmp: Path, ros_env: dict[str, str]) -> Iterator[tuple[Link, Any]]:
    model, _ = write_oracle_model(module_tmp / "oracle")
    runner = NodeRunner(module_tmp, ros_env)
    # defaults otherwise: best-effort depth-1 input, as a camera driver publishes
    node = runner.start({"model_path": str(model), "input_transport": "compressed", "class_id_mode": "index",
                         "diagnostics_period": 0.2})
    probe = RosProbe("compressed_probe")
    try:
        link = Link(probe, node.namespace, CompressedImage, "image/compressed", reliable=False)
        link.ready(node.proc, node.namespace)
        yield link, node
    finally:
        probe.close()
        rc = node.stop()
        runner.cleanup()
    assert rc == 0, node.output()


@pytest.mark.parametrize("ext,fmt", [(".jpg", "jpeg"), (".png", "png")])
def test_compressed_frames_are_decoded(compressed: tuple[Link, Any], ext: str, fmt: str) -> None:
    link, _ = compressed
    ok, buf = cv2.imencode(ext, _scene_bgr())
    assert ok
    sec = next(STAMPS)
    arr = link.send(compressed_msg(buf.tobytes(), sec, fmt=fmt, frame_id="jpeg_cam"))
    assert (arr.header.stamp.sec, arr.header.stamp.nanosec, arr.header.frame_id) == (sec, 456, "jpeg_cam")
    expected = oracle_expected()
    assert len(arr.detections) == len(expected)
    for det, (name, score, box) in zip(arr.detections, expected, strict=True):
        # class_id_mode=index: the class index as a decimal string
        assert det.results[0].hypothesis.class_id == str(("alpha", "beta").index(name))
        assert det.results[0].hypothesis.score == pytest.approx(score, abs=1e-4)
        assert det.bbox.size_x == pytest.approx(box[2] - box[0], abs=0.01)


def test_undecodable_compressed_frames_are_counted_and_survived(compressed: tuple[Link, Any]) -> None:
    link, node = compressed
    bad = [b"", b"not an image at all", b"\xff\xd8\xff\xe0" + bytes(200)]  # empty, garbage, truncated JPEG
    for i, data in enumerate(bad, start=1):
        link.pub.publish(compressed_msg(data, next(STAMPS)))
        # best effort could lose a frame on the way: publish again if it was not counted
        def counted(want: str = str(i)) -> bool:
            return diag_values(link.diags, node.fqn).get("frames_bad_input") == want

        if not link.probe.spin_until(counted, 15):
            link.pub.publish(compressed_msg(data, next(STAMPS)))
            assert link.probe.spin_until(counted, 15), i
        _, buf = cv2.imencode(".jpg", _scene_bgr())
        arr = link.send(compressed_msg(buf.tobytes(), next(STAMPS)))
        assert len(arr.detections) == 2
    assert node.proc.poll() is None


def test_execution_fault_exits_nonzero_other_errors_do_not(module_tmp: Path, ros_env: dict[str, str]) -> None:
    env = dict(ros_env)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    runner = NodeRunner(module_tmp, env)
    node = runner.start({"qos_reliability": "reliable", "diagnostics_period": 0.2}, module="_fault_node",
                        extra_args=(str(module_tmp / "fault_model"),))
    probe = RosProbe("fault_probe")
    try:
        link = Link(probe, node.namespace, Image, "image", reliable=True)
        link.ready(node.proc, node.namespace)
        frame = np.full((ORACLE_SOURCE, ORACLE_SOURCE, 3), 10, np.uint8)
        assert len(link.send(image_msg(frame, "rgb8", next(STAMPS))).detections) == 2
        frame[0, 0, 0] = 254  # recoverable: counted as failed, the node keeps serving
        link.pub.publish(image_msg(frame, "rgb8", next(STAMPS)))
        assert probe.spin_until(lambda: diag_values(link.diags, node.fqn).get("frames_failed") == "1", 15)
        frame[0, 0, 0] = 10
        assert len(link.send(image_msg(frame, "rgb8", next(STAMPS))).detections) == 2
        frame[0, 0, 0] = 255  # a DLA execution fault: log, stop, exit 1 (respawn restarts the node)
        link.pub.publish(image_msg(frame, "rgb8", next(STAMPS)))
        rc = node.wait_exit(30)
    finally:
        probe.close()
        runner.cleanup()
    out = node.output()
    assert rc == 1, out
    assert "accelerator fault, exiting" in out and "[execution]" in out
    assert "stopped: worker joined, backend closed" in out
