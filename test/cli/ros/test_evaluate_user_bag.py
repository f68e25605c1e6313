"""``evaluate --bag BAG --topic T --labels COCO.json``: labels keyed by the header stamp of each message
(``<sec>.<nanosec>``), raw and compressed topics, messages serialized by rclpy; a frame without labels is
counted, not scored, and the score equals ``evaluate`` on the same scenes."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest
from builtin_interfaces.msg import Time
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from dla_infer_node.bags.bag_writer import BagWriter
from dla_infer_node.cli.evaluate import evaluate, main
from dla_infer_node.core.synth import CLASS_NAMES, generate_scene

FIRST = 20_000_400


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bag")
    coco: dict = {"images": [], "annotations": [],
                  "categories": [{"id": k, "name": n} for k, n in enumerate(CLASS_NAMES)]}
    with BagWriter(root / "cam.mcap", ros_distro="kilted") as w:
        w.add_topic("/cam/image_raw", "sensor_msgs/msg/Image", definition="")
        w.add_topic("/cam/image_raw/compressed", "sensor_msgs/msg/CompressedImage", definition="")
        for i in range(4):
            scene = generate_scene(FIRST + i)
            header = Header(stamp=Time(sec=1_700_000_000 + i, nanosec=5_000 * i), frame_id="cam")
            raw = Image(header=header, height=480, width=640, encoding="rgb8", step=1920,
                        data=scene.image.tobytes())
            png = cv2.imencode(".png", scene.image[:, :, ::-1])[1].tobytes()  # lossless: same pixels
            t = (1 + i) * 100_000_000
            w.write("/cam/image_raw", serialize_message(raw), log_time_ns=t)
            w.write("/cam/image_raw/compressed",
                    serialize_message(CompressedImage(header=header, format="png", data=png)), log_time_ns=t)
            if i == 3:
                continue  # this frame has no labels
            coco["images"].append({"id": i, "file_name": f"{1_700_000_000 + i}.{5_000 * i:09d}"})
            for b, c in zip(scene.boxes.tolist(), scene.class_ids.tolist(), strict=True):
                coco["annotations"].append({"id": len(coco["annotations"]) + 1, "image_id": i,
                                            "category_id": c, "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]})
    (root / "labels.json").write_text(json.dumps(coco))
    return root


@pytest.mark.parametrize("topic", ["/cam/image_raw", "/cam/image_raw/compressed"])
def test_bag_topic_with_stamp_keyed_labels(recording: Path, topic: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bag", str(recording / "cam.mcap"), "--topic", topic, "--labels",
                 str(recording / "labels.json"), "--json", "-"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out.splitlines()[-2])
    ref = evaluate(scenes=3, first_seed=FIRST)
    assert doc["frames"] == 3 and doc["mAP50"] == pytest.approx(ref.map50, abs=6e-5)
    assert doc["mAP50_95"] == pytest.approx(ref.map50_95, abs=6e-5)
    assert "1 frames of the topic have no labels entry: not scored" in out


def test_labels_whose_stamp_matches_no_frame_are_reported(recording: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # a labelled stamp one nanosecond off every frame: before, its objects were dropped without a word
    coco = json.loads((recording / "labels.json").read_text())
    coco["images"].append({"id": 50, "file_name": "1700000000.000000001"})
    coco["annotations"] += [{"id": 500 + k, "image_id": 50, "category_id": 0, "bbox": [10, 10, 20, 20]}
                            for k in range(2)]
    (tmp_path / "labels.json").write_text(json.dumps(coco))
    assert main(["--bag", str(recording / "cam.mcap"), "--topic", "/cam/image_raw", "--labels",
                 str(tmp_path / "labels.json"), "--json", "-"]) == 0
    out = capsys.readouterr().out
    note = "1 labelled stamps match no frame of the topic: their 2 objects not scored"
    assert f"note: {note}" in out and note in json.loads(out.splitlines()[-2])["left_out"]
