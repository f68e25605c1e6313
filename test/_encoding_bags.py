"""Cameras that publish YUYV, NV12, Bayer and 16-bit frames, replayed from bags through the node over DDS:
the bags, the replay and the tests, shared by the CPU suite (test/ros/test_node_encodings.py: ONNX Runtime)
and the GPU machine's (test_gpu_node/test_node_encodings_gpu.py: backend cudla with the fused GPU kernel,
on the DLA EMULATOR).

Bags of the same synthetic scenes are generated with tools/make_sample_bag.py as a YUYV, an NV12 and a
bayer_rggb8 camera would record them, each with its rgb8 twin (the rgb8 frames cv_bridge makes of that
camera's frames); a further bag holds every other encoding (uyvy, nv21, the Bayer patterns at 8 and 16
bits, rgb16, mono16), each frame followed by its twin, and one NV12 frame of odd height. replay (separate
process, the recorded CDR bytes) -> node (separate process, raw input) -> detections captured in the test
process: every camera frame is answered as its rgb8 twin is (same classes, boxes within 1 px), and only the
odd NV12 frame is refused, with a reason naming its encoding and size.

Why the twin and not the scene's original rgb8: a YUV camera keeps chroma for pairs (4:2:2) or 2x2
blocks (4:2:0) of pixels in an 8-bit video range, a Bayer camera one colour a pixel, so what reaches the
node is not the original picture; the node's part is to convert it as cv_bridge does, and that is what is
checked. Frames are 320x240 so the largest (rgb16, 460 kB) fits Fast DDS's default shared-memory segment.
Bags are written uncompressed: the GPU machine's carried wheels have no zstandard.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _node_helpers import REPO, NodeRunner, replay_until_settled

CAMERAS = ("yuyv", "nv12", "bayer_rggb8")
OTHERS = ("uyvy", "nv21", "bayer_bggr8", "bayer_gbrg8", "bayer_grbg8", "bayer_rggb16", "bayer_bggr16",
          "bayer_gbrg16", "bayer_grbg16", "rgb16", "mono16")
FRAMES, WIDTH, HEIGHT = 6, 320, 240
OTHER_SCENES = 2
# every node that takes these bags: raw frames, none lost on the way
NODE_PARAMS = {"input_transport": "raw", "qos_reliability": "reliable", "qos_depth": 10}


def sample_bag_tool() -> Any:
    """tools/make_sample_bag.py as a module (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location("make_sample_bag", REPO / "tools" / "make_sample_bag.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mixed_bag(tool: Any, out: Path) -> dict[int, tuple[str, int]]:
    """Every OTHERS encoding, OTHER_SCENES scenes each, each frame followed by its rgb8 twin; returns
    stamp -> (encoding, pair number) with the twin's stamp mapping to ("rgb8 twin", same pair)."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    from dla_infer_node.bags.bag_writer import BagWriter
    from dla_infer_node.core.synth import generate_scene

    what: dict[int, tuple[str, int]] = {}
    stamp = tool.START_NS
    with BagWriter(out, compression="none", overwrite=True, ros_distro="jazzy") as bag:
        bag.add_topic(tool.RAW_TOPIC, "sensor_msgs/msg/Image", qos=[tool.CAMERA_QOS])
        pair = 0
        for encoding in OTHERS:
            for s in range(OTHER_SCENES):
                scene = generate_scene(tool.SEED0 + s, width=WIDTH, height=HEIGHT)
                for twin in (False, True):
                    msg = tool.raw_image(Image(), scene.image, encoding, twin)
                    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
                    msg.header.frame_id = tool.FRAME_ID
                    data = serialize_message(msg)
                    bag.write(tool.RAW_TOPIC, data + b"\0" * (-len(data) % 4), log_time_ns=stamp,
                              publish_time_ns=stamp)
                    what[stamp] = ("rgb8 twin" if twin else encoding, pair)
                    stamp += 100_000_000
                pair += 1
        # last, a frame no NV12 camera can send (odd height): counted as bad input, its reason logged
        bad = Image(encoding="nv12", height=HEIGHT - 1, width=WIDTH, step=WIDTH,
                    data=bytes(WIDTH * (HEIGHT - 1) * 3 // 2))
        bad.header.stamp.sec, bad.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        data = serialize_message(bad)
        bag.write(tool.RAW_TOPIC, data + b"\0" * (-len(data) % 4), log_time_ns=stamp, publish_time_ns=stamp)
    return what


def write_bags(folder: Path) -> tuple[dict[str, Path], dict[int, tuple[str, int]]]:
    """Each camera's bag and its twin's, then the mixed bag (last); returns (name -> bag, the mixed bag's
    stamps as :func:`_mixed_bag` returns them)."""
    tool = sample_bag_tool()
    bags: dict[str, Path] = {}
    for encoding in CAMERAS:
        for twin in (False, True):
            name = f"{encoding}_rgb8_twin" if twin else encoding
            args = ["--encoding", encoding, "--out", str(folder / name), "--frames", str(FRAMES),
                    "--width", str(WIDTH), "--height", str(HEIGHT), "--compression", "none"]
            assert tool.main(args + (["--rgb8-twin"] if twin else [])) == 0
            bags[name] = folder / name
    bags["mixed"] = folder / "mixed"
    return bags, _mixed_bag(tool, bags["mixed"])


def answer_bags(folder: Path, env: Mapping[str, str], params: Mapping[str, Any], *, startup_s: float = 90.0,
                warm_up: bool = False, **start: Any) -> dict[str, Any]:
    """Start the node (:meth:`NodeRunner.start` with ``params`` over :data:`NODE_PARAMS` and ``start``),
    replay every bag of :func:`write_bags` into it, stop it. Returns bag name -> {stamp: (boxes, class
    names)} as the node answered, "mixed_stamps" and the node's "log". ``warm_up``: replay the first twin
    bag once before, unrecorded (a backend that makes its session at the first frame would otherwise miss
    the frames that arrive meanwhile)."""
    from dla_infer_node.bags.capture import Recorder
    from dla_infer_node.ros.ros_convert import from_detection_array

    bags, mixed = write_bags(folder)
    raw_topic = sample_bag_tool().RAW_TOPIC
    runner = NodeRunner(folder, env)
    node = runner.start({**NODE_PARAMS, **params}, **start)
    ns = node.namespace
    rec = Recorder(f"{ns}/detections", depth=200, node_name="encodings_test_capture")
    out: dict[str, Any] = {"mixed_stamps": mixed}
    try:
        deadline = time.monotonic() + startup_s  # the node is up and its detections reach us before replaying
        while rec.publisher_count() < 1 and time.monotonic() < deadline and node.proc.poll() is None:
            time.sleep(0.1)
        assert rec.publisher_count() >= 1, node.output()
        first = [("warm-up", bags[f"{CAMERAS[0]}_rgb8_twin"])] if warm_up else []
        for name, bag in first + list(bags.items()):
            before = len(rec.snapshot())
            replay = replay_until_settled(bag, f"{raw_topic}:={ns}/image", rec, env, quiet_s=2.0)
            assert replay.returncode == 0, replay.stderr
            answers = {}
            for r in rec.snapshot()[before:]:
                arr = r.msg
                boxes, names, _ = from_detection_array(arr)
                answers[arr.header.stamp.sec * 1_000_000_000 + arr.header.stamp.nanosec] = (boxes, names)
            out[name] = answers
    finally:
        rec.close()
        rc = node.stop(timeout=60.0)
        runner.cleanup()
    assert rc == 0, node.output()
    out["log"] = node.output()
    return out


def _same(got: tuple[np.ndarray, list[str]], twin: tuple[np.ndarray, list[str]], what: str) -> None:
    assert got[1] == twin[1], what
    np.testing.assert_allclose(got[0], twin[0], atol=1.0, err_msg=what)


# The tests both suites run: a test module imports them (pytest collects them there) and defines the
# fixture ``answered``, :func:`answer_bags`' result for its node.
@pytest.mark.parametrize("encoding", CAMERAS)
def test_camera_bag_is_answered_as_its_rgb8_twin(answered: dict[str, Any], encoding: str) -> None:
    got, twin = answered[encoding], answered[f"{encoding}_rgb8_twin"]
    # reliable input at half the recorded rate: the worker may still skip a frame on a loaded machine
    assert len(got) >= FRAMES - 1 and len(twin) >= FRAMES - 1, (len(got), len(twin))
    both = sorted(set(got) & set(twin))
    assert len(both) >= FRAMES - 2
    for stamp in both:
        _same(got[stamp], twin[stamp], f"{encoding} frame stamped {stamp}")
    assert sum(len(got[s][1]) for s in both) > 0


def test_only_the_frame_that_fits_no_layout_is_refused_with_its_reason(answered: dict[str, Any]) -> None:
    refusals = [line for line in answered["log"].splitlines() if "dropped an unusable frame" in line]
    assert len(refusals) == 1, answered["log"]
    assert "320x239 frame with step 320 does not fit: nv12 needs an even width and height" in refusals[0]


def test_every_other_encoding_is_answered_as_its_rgb8_twin(answered: dict[str, Any]) -> None:
    stamps, got = answered["mixed_stamps"], answered["mixed"]
    frames: dict[int, dict[str, Any]] = {}
    for stamp, (kind, pair) in stamps.items():
        if stamp in got:
            frames.setdefault(pair, {})["twin" if kind == "rgb8 twin" else "camera"] = (kind, got[stamp])
    compared = set()
    for pair in frames.values():
        if len(pair) == 2:
            encoding, answer = pair["camera"]
            _same(answer, pair["twin"][1], encoding)
            compared.add(encoding)
    # a frame or two may be skipped by the latest-frame worker on a loaded machine, not an encoding
    assert compared == set(OTHERS), set(OTHERS) - compared
