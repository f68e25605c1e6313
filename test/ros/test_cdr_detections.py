"""The node's detection arrays, written as CDR by hand (core.cdr_detections), are the message rclpy builds.

The reference is the message :func:`ros_convert.detection_array` builds: the hand-written bytes must read
back through rclpy's deserializer as exactly that message and be as long as rclpy's own serialization of
it (which leaves pad bytes unset, so bytes are not compared), for frame ids and class labels of every
length modulo 8 (every alignment of the float64 fields that follow them), both ``class_id_mode`` values
and ids outside the class list. Then over DDS: a subscriber receives from ``DetectionOutputs`` the same
message whether it published the writer's bytes or built the message (when the start-up check fails).
"""

from __future__ import annotations

import numpy as np
import pytest
from _node_helpers import RosProbe

pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")

from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray

from dla_infer_node.core.cdr_detections import DetectionArrayWriter
from dla_infer_node.core.detections import Detections
from dla_infer_node.ros import outputs, ros_convert

CLASSES = ("c", "sq", "tri", "star", "cross", "ringxy", "hexagon", "arrow_up", "kreis_ä")


def _header(sec: int, nanosec: int, frame_id: str) -> Header:
    h = Header()
    h.stamp.sec, h.stamp.nanosec, h.frame_id = sec, nanosec, frame_id
    return h


def _dets(n: int, seed: int) -> Detections:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-10, 1900, (n, 2)).astype(np.float32)
    wh = rng.uniform(0, 400, (n, 2)).astype(np.float32)
    return Detections(np.hstack([xy, xy + wh]), rng.uniform(0, 1, n).astype(np.float32),
                      rng.integers(0, len(CLASSES) + 3, n))  # some ids past the class list


@pytest.mark.parametrize("mode", ["name", "index"])
@pytest.mark.parametrize("frame_id", ["", "a", "ab", "abc", "abcd", "cam_a", "camera", "kamera_",
                                      "camera_front"])
def test_written_bytes_read_back_as_the_message(mode: str, frame_id: str) -> None:
    writer = DetectionArrayWriter(ros_convert.class_id_text(CLASSES, mode))
    for n in (0, 1, 2, 5, 40):
        dets = _dets(n, seed=n + len(frame_id))
        header = _header(-7 + n, 999_999_999 - n, frame_id)
        msg = ros_convert.detection_array(dets, header, CLASSES, mode)
        raw = writer.serialize(dets, header.stamp.sec, header.stamp.nanosec, frame_id)
        assert len(raw) == len(serialize_message(msg)), (n, frame_id)
        assert deserialize_message(raw, Detection2DArray) == msg, (n, frame_id)


def test_the_start_up_check_takes_the_writer_here_and_refuses_a_wrong_one(monkeypatch: pytest.MonkeyPatch
                                                                          ) -> None:
    assert outputs.checked_writer(CLASSES, "name") is not None
    assert outputs.checked_writer(CLASSES, "index") is not None
    good = DetectionArrayWriter.serialize
    monkeypatch.setattr(DetectionArrayWriter, "serialize",
                        lambda self, *a: good(self, *a).replace(b"camera_check", b"camera_chekk"))
    assert outputs.checked_writer(CLASSES, "name") is None


@pytest.mark.parametrize("writer", [True, False])
def test_subscribers_get_the_same_message_either_way(writer: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not writer:
        monkeypatch.setattr(outputs, "checked_writer", lambda *a: None)
    probe = RosProbe("cdr_detections")
    try:
        out = outputs.DetectionOutputs(probe.node, CLASSES, "name", 0.25, debug_enabled=False,
                                       namespace="cdr_check")
        assert (out._writer is not None) == writer
        got = probe.collect(Detection2DArray, "cdr_check/detections")
        dets = _dets(4, seed=3)
        header = _header(42, 17, "camera_optical")
        want = ros_convert.detection_array(dets, header, CLASSES, "name")
        frame = np.zeros((4, 4, 3), np.uint8)
        assert probe.spin_until(lambda: got, 30, every=lambda: out.publish(dets, header, frame, "rgb8"),
                                period=0.5)
        assert got[0] == want
    finally:
        probe.close()
