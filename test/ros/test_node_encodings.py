"""Cameras that publish YUYV, NV12, Bayer and 16-bit frames, replayed from bags through the node over DDS,
backend onnxruntime (the shipped model): every camera frame is answered as its rgb8 twin is, and only a
frame that fits no layout is refused. The bags, the replay and the tests are ``_encoding_bags``' (the GPU
machine's test_gpu_node/test_node_encodings_gpu.py runs them with backend cudla and the GPU kernel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _encoding_bags import (  # noqa: F401 (the tests, collected here)
    answer_bags,
    test_camera_bag_is_answered_as_its_rgb8_twin,
    test_every_other_encoding_is_answered_as_its_rgb8_twin,
    test_only_the_frame_that_fits_no_layout_is_refused_with_its_reason,
)

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")


@pytest.fixture(scope="module")
def answered(module_tmp: Path, ros_env: dict[str, str]) -> dict[str, Any]:
    """bag name -> {stamp: (boxes, class names)} as the node answered the bag's frames."""
    from dla_infer_node.core.resources import find_model_file

    return answer_bags(module_tmp, ros_env, {"model_path": str(find_model_file("shapes_yolo.onnx"))})
