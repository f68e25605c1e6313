"""The node's input watch (``ros.input_subscription``) routes what the image codecs print during a decode
through its throttled logger, OpenCV's own log lines included; other threads' ROS log lines caught meanwhile
pass through unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")

import rclpy
from rclpy.qos import QoSProfile

from dla_infer_node.core.codec_stderr import CODEC_STDERR
from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_io import decode_compressed
from dla_infer_node.ros.input_subscription import InputWatch

OPENCV_LINE = "[ WARN:0@12.345] global grfmt_png.cpp:310 readDataFromBuf PNG input buffer is incomplete"
ROS_LINE = "[INFO] [1796670063.356370263] [other_node]: a log line of another thread"


def test_the_node_throttles_every_codec_line(capfd: pytest.CaptureFixture[str]) -> None:
    rclpy.init()
    node = rclpy.create_node("codec_stderr_test")
    config = SimpleNamespace(input_loss_warn_ratio=0.5, input_stall_periods=3)
    watch = InputWatch(node, config, dict, QoSProfile(depth=1))  # type: ignore[arg-type]
    png = cv2.imencode(".png", np.random.default_rng(0).integers(0, 256, (40, 40, 3), np.uint8))[1]
    try:
        capfd.readouterr()
        for i in range(60):  # truncated PNGs: libpng's error line each time, through the sink
            with pytest.raises(InputError):
                decode_compressed(png[: len(png) - 10 - i])
            CODEC_STDERR.sink(f"{OPENCV_LINE}\n")  # what OpenCV 4's own logger prints for the same frame
        CODEC_STDERR.sink(f"{ROS_LINE}\n")
        err = capfd.readouterr().err.splitlines()
    finally:
        watch.close()
        node.destroy_node()
        rclpy.shutdown()
    assert err.count(ROS_LINE) == 1  # passed through as it was
    codec = [line for line in err if "PNG input buffer is incomplete" in line]
    assert 1 <= len(codec) <= 2, err  # throttled (5 s): before, each of OpenCV's 60 lines reached stderr
    assert all("image codec:" in line for line in codec)
