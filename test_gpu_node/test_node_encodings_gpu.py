"""Every camera encoding through the node on the GPU machine: backend cudla on the DLA EMULATOR (the shipped
network as an emulated fp16 loadable, run by ONNX Runtime in the node's process) with
``preprocess_device: gpu``, so the fused kernel reads each frame as the camera sent it (YUYV, UYVY, NV12,
NV21, the four Bayer patterns at 8 and 16 bits, rgb16, mono16) and writes the DLA input in one pass.

The bags, the replay and the tests are the CPU suite's (test/_encoding_bags.py, test/ros/
test_node_encodings.py): YUYV, NV12 and bayer_rggb8 camera bags with their rgb8 twins and one bag of every
other encoding, replayed from another process over DDS (raw transport); every frame is answered as its
rgb8 twin (same classes, boxes within 1 px), only the frame that fits no layout is refused. The node's
ready line names the input path its backend built (``preprocess=gpu``; the cuDLA backend has no other
path per frame): the kernel, not a CPU conversion, made every input tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _encoding_bags import (  # noqa: F401 (the CPU suite's tests, collected here)
    answer_bags,
    test_camera_bag_is_answered_as_its_rgb8_twin,
    test_every_other_encoding_is_answered_as_its_rgb8_twin,
    test_only_the_frame_that_fits_no_layout_is_refused_with_its_reason,
)

PREPROCESS = "gpu"


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory, ros_env: dict[str, str],
             emulated_loadable: Path, emulated_node: dict[str, Any]) -> dict[str, Any]:
    # warm_up: the emulator's host makes its ONNX Runtime session at the first task
    return answer_bags(tmp_path_factory.mktemp("encodings"), ros_env,
                       {"backend": "cudla", "loadable_path": str(emulated_loadable),
                        "preprocess_device": PREPROCESS},
                       startup_s=180.0, warm_up=True, **emulated_node)


def test_the_fused_kernel_made_every_input(answered: dict[str, Any]) -> None:
    log = answered["log"]
    ready = next(line for line in log.splitlines() if "ready:" in line)
    assert "backend=cudla" in ready and f" preprocess={PREPROCESS} " in ready, ready
    stopped = next(line for line in log.splitlines() if "stopped:" in line)
    assert "bad input 1, failed 0)" in stopped, stopped  # the odd NV12 frame only
