"""Two frames in flight per DLA core, in the node over DDS, with backend cudla on the DLA EMULATOR over its
fake CUDA driver (test/_fake_cudla_env.py; no GPU): every task is held 25 ms on its core (DLA_EMU_TASK_MS),
and the cameras send more frames than the core can run (60 frames/s in all), so the core's worker submits
each next frame while the last one is still on the core and decodes it afterwards. Every frame is a
different scene (the emulated loadable's oracle finds its rectangles) stamped with its camera and number:
each answer must come on its camera's topic with that camera's frame_id and carry the boxes of the very
frame its stamp names. Once with three cameras on one core, once with the single-camera node."""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fake_cudla_env import cuda_home
from _node_helpers import REPO, NodeRunner, RosProbe, image_msg

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("cuda") is None
                       or importlib.util.find_spec("cuda.bindings") is None, reason="cuda-bindings missing"),
    pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler"),
    pytest.mark.skipif(cuda_home() is None, reason="CUDA headers (cuda.h) missing"),
]
RATE, SECONDS = 60, 1.5  # frames/s into the node (all cameras): one core at 25 ms per task runs 40 of them


def scene(camera: int, number: int) -> Any:
    from emulator import cases

    return cases.make_frame(1000 * camera + number)


def boxes_of(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    from emulator import cases

    rows = [(d.bbox.center.position.x - d.bbox.size_x / 2, d.bbox.center.position.y - d.bbox.size_y / 2,
             d.bbox.center.position.x + d.bbox.size_x / 2, d.bbox.center.position.y + d.bbox.size_y / 2)
            for d in msg.detections]
    ids = [cases.CLASSES.index(d.results[0].hypothesis.class_id) for d in msg.detections]
    return np.array(rows, np.float32).reshape(-1, 4), np.array(ids, np.int64)


def run_node(tmp_path: Path, ros_env: dict[str, str], cameras: tuple[str, ...]) -> None:
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray

    from emulator import cases

    art = cases.oracle_artifact(tmp_path / "art", "linear", "fp16", "linear", "fp16")
    loadable = art.sidecar.with_name(art.sidecar.name.removesuffix(".yaml"))
    env = dict(ros_env, PYTHONPATH=f"{REPO}:{REPO / 'test'}", DLA_EMU_TASK_MS="25")
    params: dict[str, Any] = {"backend": "cudla", "loadable_path": str(loadable), "confidence_threshold": 0.5,
                              "qos_reliability": "reliable"}
    if cameras != ("",):
        params.update({"cameras": list(cameras), "dla_cores": [0]})
    runner = NodeRunner(tmp_path, env)
    node = runner.start(params, module="_fake_cudla_env", extra_args=(str(tmp_path / "emu"), "node"))
    probe = RosProbe("frames_in_flight_probe")
    try:
        ns = node.namespace
        prefix = {c: f"{ns}/{c}/" if c else f"{ns}/" for c in cameras}
        deep = probe.qos(depth=500)  # every answer is kept: the probe spins only after the stream
        got = {c: probe.collect(Detection2DArray, prefix[c] + "detections", deep) for c in cameras}
        pubs = {c: probe.node.create_publisher(Image, prefix[c] + "image", probe.qos()) for c in cameras}
        assert probe.spin_until(lambda: "ready:" in node.output() or node.proc.poll() is not None, 120)
        assert probe.spin_until(lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 30), \
            node.output()
        probe.spin_until(lambda: False, 1.0)  # the reliable match completes on the node's side too
        frames = int(RATE * SECONDS / len(cameras))  # per camera
        messages = {(k, i): image_msg(scene(k, i).image, "rgb8", i, frame_id=c or "cam")
                    for k, c in enumerate(cameras) for i in range(frames)}
        for (k, _), msg in messages.items():
            msg.header.stamp.nanosec = k
        start = time.monotonic()
        for i in range(frames):
            for k, c in enumerate(cameras):
                pubs[c].publish(messages[k, i])
            time.sleep(max(0.0, start + (i + 1) * len(cameras) / RATE - time.monotonic()))
        probe.spin_until(lambda: False, 2.0)  # the frames in hand
        answered = {c: len(v) for c, v in got.items()}
        for k, c in enumerate(cameras):
            assert got[c], (answered, node.output())
            for msg in got[c]:
                assert msg.header.frame_id == (c or "cam") and msg.header.stamp.nanosec == k
                number = msg.header.stamp.sec
                why = cases.match_detections(scene(k, number), *boxes_of(msg), tol=2.5)
                assert why is None, f"camera {c!r} frame {number}: {why}"
        # the core could not run every frame: the newest of each camera was taken, the others dropped
        assert sum(answered.values()) < len(cameras) * frames, answered
        assert node.stop() == 0, node.output()
    finally:
        probe.close()
        runner.cleanup()


def test_three_cameras_one_core_each_answer_is_its_own_frame(tmp_path: Path, ros_env: dict[str, str]) -> None:
    run_node(tmp_path, ros_env, ("front", "rear", "left"))


def test_single_camera_node_each_answer_is_its_own_frame(tmp_path: Path, ros_env: dict[str, str]) -> None:
    run_node(tmp_path, ros_env, ("",))
