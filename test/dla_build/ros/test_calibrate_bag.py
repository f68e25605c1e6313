"""dla_build calibrate from a recording: an MCAP bag with a raw Image topic and a CompressedImage topic,
messages serialized by rclpy (the bytes a real `ros2 bag record` keeps); frames go through the package's
CDR view and preprocess, a seeded sample of them when the topic holds more than --max-images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from _build_fixtures import copy_model
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image

from dla_infer_node.bags.bag_writer import BagWriter
from dla_infer_node.core.synth import generate_scene
from dla_infer_node.dla_build import onnx_facts


def write_bag(path: Path, frames: int) -> None:
    with BagWriter(path, ros_distro="kilted") as w:
        w.add_topic("/cam/image_raw", "sensor_msgs/msg/Image", definition="")
        w.add_topic("/cam/image_raw/compressed", "sensor_msgs/msg/CompressedImage", definition="")
        w.add_topic("/chatter", "std_msgs/msg/String", definition="string data\n")
        for i in range(frames):
            rgb = generate_scene(40_100_000 + i, 320, 240).image
            raw = Image(height=240, width=320, encoding="rgb8", step=960, data=rgb.tobytes())
            ok, jpg = cv2.imencode(".jpg", rgb[:, :, ::-1])
            assert ok
            comp = CompressedImage(format="jpeg", data=jpg.tobytes())
            t = 1_000_000_000 + i * 100_000_000
            w.write("/cam/image_raw", serialize_message(raw), log_time_ns=t)
            w.write("/cam/image_raw/compressed", serialize_message(comp), log_time_ns=t)


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bag") / "cam.mcap"
    write_bag(path, 5)
    return path


def calibrate(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    model = copy_model(folder)
    return subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", "calibrate",
                           str(model), *argv], cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("topic", ["/cam/image_raw", "/cam/image_raw/compressed"])
def test_calibrate_from_a_bag_topic(tmp_path: Path, bag: Path, topic: str) -> None:
    p = calibrate(tmp_path, "--bag", str(bag), "--topic", topic, "--max-images", "3", "--seed", "2")
    assert p.returncode == 0, p.stderr
    assert f"topic {topic} of bag {bag}: 3 frames" in p.stdout and "3/3" in p.stderr
    assert onnx_facts.cache_scales(tmp_path / "shapes_yolo.calib")["images"] > 0


def test_a_topic_that_is_not_an_image_topic_names_the_image_topics(tmp_path: Path, bag: Path) -> None:
    p = calibrate(tmp_path, "--bag", str(bag), "--topic", "/chatter")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "/cam/image_raw, /cam/image_raw/compressed" in p.stderr and "'--topic' = '/chatter'" in p.stderr
