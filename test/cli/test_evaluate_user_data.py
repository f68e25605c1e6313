"""``evaluate`` on the user's own labelled data: generated scenes written out as PNG files with COCO JSON and
with YOLO txt labels score exactly what ``evaluate`` gives on the same scenes directly; what is left out
(foreign classes, crowd regions) is reported; bad labels are one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.cli import detect
from dla_infer_node.cli.coco_map import coco_map
from dla_infer_node.cli.eval_pipeline import evaluation_detector
from dla_infer_node.cli.evaluate import evaluate, main
from dla_infer_node.core.synth import CLASS_NAMES, generate_scene

FIRST = 20_000_300
SCENES = 6


def write_scenes(folder: Path) -> dict:
    """PNG files (lossless: the pipeline sees the scene's pixels) and their COCO JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    coco: dict = {"images": [], "annotations": [],
                  "categories": [{"id": 10 + k, "name": n} for k, n in enumerate(CLASS_NAMES)]
                  + [{"id": 99, "name": "dog"}]}
    for i in range(SCENES):
        scene = generate_scene(FIRST + i)
        name = f"scene_{i}.png"
        cv2.imwrite(str(folder / name), scene.image[:, :, ::-1])
        coco["images"].append({"id": i, "file_name": name, "width": 640, "height": 480})
        for box, cls in zip(scene.boxes.tolist(), scene.class_ids.tolist(), strict=True):
            coco["annotations"].append({"id": len(coco["annotations"]) + 1, "image_id": i,
                                        "category_id": 10 + cls, "iscrowd": 0,
                                        "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
    coco["annotations"] += [{"id": 900, "image_id": 0, "category_id": 99, "bbox": [1, 1, 5, 5]},
                            {"id": 901, "image_id": 1, "category_id": 10, "bbox": [1, 1, 5, 5], "iscrowd": 1}]
    return coco


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    coco = write_scenes(root / "images")
    (root / "coco.json").write_text(json.dumps(coco))
    (root / "yolo").mkdir()
    for i in range(SCENES):
        scene = generate_scene(FIRST + i)
        lines = []
        for (x1, y1, x2, y2), cls in zip(scene.boxes.tolist(), scene.class_ids.tolist(), strict=True):
            lines.append(f"{cls} {(x1 + x2) / 1280:.9f} {(y1 + y2) / 960:.9f} {(x2 - x1) / 640:.9f} "
                         f"{(y2 - y1) / 480:.9f}")
        (root / "yolo" / f"scene_{i}.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def reference() -> tuple[float, float]:
    r = evaluate(scenes=SCENES, first_seed=FIRST)
    return r.map50, r.map50_95


def test_coco_json_folder_scores_what_the_scenes_score(dataset: Path, reference: tuple[float, float],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out_json = dataset / "result.json"
    assert main(["--images", str(dataset / "images"), "--labels", str(dataset / "coco.json"),
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert doc["frames"] == SCENES and (doc["mAP50"], doc["mAP50_95"]) == pytest.approx(reference, abs=6e-5)
    assert out.splitlines()[-1] == f"mAP50={reference[0]:.4f} mAP50_95={reference[1]:.4f}"
    assert "left out 1 objects of classes the model lacks: {'dog': 1}" in out
    assert "1 crowd regions (iscrowd=1): detections on them are ignored, as COCOeval does" in out
    objects = sum(c["objects"] for c in doc["classes"].values())
    assert objects == sum(len(generate_scene(FIRST + i).class_ids) for i in range(SCENES))
    table = out[out.index("class "):].splitlines()[:-1]  # up to the mAP line
    assert table[-1].startswith("all ") and len(table) == len(CLASS_NAMES) + 2


def test_yolo_txt_folder_scores_the_same(dataset: Path, reference: tuple[float, float],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--images", str(dataset / "images"), "--labels", str(dataset / "yolo"), "--json", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    doc = json.loads(lines[-2])
    assert (doc["mAP50"], doc["mAP50_95"]) == pytest.approx(reference, abs=6e-5)


@pytest.mark.parametrize(("setup", "argv", "words"), [
    (None, ["--images", "{d}/images"], "'--labels' = None"),
    ("bad_txt", ["--images", "{d}/images", "--labels", "{d}/bad"], "class 42 outside the model's 0..7"),
    ("bad_json", ["--images", "{d}/images", "--labels", "{d}/bad.json"], "'--labels'"),
    ("deep_json", ["--images", "{d}/images", "--labels", "{d}/deep.json"], "'--labels'"),  # RecursionError
    ("binary_txt", ["--images", "{d}/images", "--labels", "{d}/bad"], "unreadable as UTF-8"),  # traceback
])
def test_bad_labels_are_one_line_and_exit_2(tmp_path: Path, dataset: Path, setup: str | None, argv: list[str],
                                            words: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "images").symlink_to(dataset / "images")
    if setup == "bad_txt":
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "scene_0.txt").write_text("42 0.5 0.5 0.1 0.1\n")
    if setup == "bad_json":
        (tmp_path / "bad.json").write_text('{"images": [}')
    if setup == "deep_json":
        (tmp_path / "deep.json").write_text('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    if setup == "binary_txt":
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "scene_0.txt").write_bytes(b"\xff\xfe0 0.5 0.5 0.1 0.1\n")
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_no_ground_truth_class_is_shown_as_dash(dataset: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    coco = json.loads((dataset / "coco.json").read_text())
    coco["annotations"] = [a for a in coco["annotations"] if a["category_id"] != 10]  # no circles
    (tmp_path / "c.json").write_text(json.dumps(coco))
    assert main(["--images", str(dataset / "images"), "--labels", str(tmp_path / "c.json"),
                 "--json", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["classes"]["circle"] == {"objects": 0, "AP50": None, "AP50_95": None}
    assert np.isfinite(doc["mAP50"])


def test_detect_json_carries_full_precision(dataset: Path, reference: tuple[float, float],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # before: boxes rounded to 0.01 px and scores to 1e-6, so mAP computed from detect's output differed
    # from evaluate's by up to 1.8e-3 per class; now every number reads back as the detector's float32
    images = [dataset / "images" / f"scene_{i}.png" for i in range(SCENES)]
    settings = ["--json", "--conf", "0.001", "--iou", "0.6", "--max-det", "300"]  # evaluate's
    assert detect.main([*map(str, images), *settings]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    backend, meta = open_backend(BackendSettings())
    gts, dets = [], []
    with evaluation_detector(backend, meta) as detector:
        for path, items, i in zip(images, found, range(SCENES), strict=True):
            d = detector.detect(cv2.imread(str(path)), "bgr8")
            assert np.array_equal(np.float32([it["bbox"] for it in items]).reshape(-1, 4), d.boxes)
            assert np.array_equal(np.float32([it["score"] for it in items]), d.scores)
            scene = generate_scene(FIRST + i)
            gts.append((scene.boxes, scene.class_ids))
            dets.append((np.array([it["bbox"] for it in items]).reshape(-1, 4),
                         np.array([it["score"] for it in items]),
                         np.array([CLASS_NAMES.index(it["class"]) for it in items], int)))
    assert coco_map(gts, dets, len(CLASS_NAMES))[:2] == pytest.approx(reference, abs=1e-12)


def _run_json(argv: list[str], out: Path) -> dict:
    assert main([*argv, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_detection_on_a_crowd_region_is_ignored(dataset: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # the same object once marked iscrowd (COCOeval: a detection on it is neither true nor false) and once
    # deleted (the detection on it is a false positive); before, both were scored alike
    coco = json.loads((dataset / "coco.json").read_text())
    target = next(a for a in coco["annotations"] if a["category_id"] == 10 and a["image_id"] == 0)
    others = [a for a in coco["annotations"] if a is not target]
    (tmp_path / "crowd.json").write_text(json.dumps({**coco, "annotations": [*others,
                                                                              {**target, "iscrowd": 1}]}))
    (tmp_path / "gone.json").write_text(json.dumps({**coco, "annotations": others}))
    images = ["--images", str(dataset / "images"), "--labels"]
    crowd = _run_json([*images, str(tmp_path / "crowd.json")], tmp_path / "c.json")
    gone = _run_json([*images, str(tmp_path / "gone.json")], tmp_path / "g.json")
    assert crowd["classes"]["circle"]["AP50"] == 1.0 > gone["classes"]["circle"]["AP50"]
    assert "2 crowd regions (iscrowd=1)" in capsys.readouterr().out


def test_invalid_yolo_lines_are_left_out_and_counted(dataset: Path, tmp_path: Path,
                                                     reference: tuple[float, float],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(dataset / "yolo", tmp_path / "yolo")
    with (tmp_path / "yolo" / "scene_0.txt").open("a") as f:
        f.write("0 0.1 0.1 0.2 0.1 0.2 0.2 0.1 0.2\n"  # a segmentation polygon: was read as a box
                "1 320 240 50 40\n"  # pixels, not fractions
                "1 -0.2 0.5 0.1 0.1\n"  # negative
                "1 nan 0.5 0.1 0.1\n")  # not a number
    doc = _run_json(["--images", str(dataset / "images"), "--labels", str(tmp_path / "yolo")],
                    tmp_path / "r.json")
    assert (doc["mAP50"], doc["mAP50_95"]) == pytest.approx(reference, abs=6e-5)  # the valid labels alone
    assert doc["left_out"] == ["left out 4 invalid labels (the first: scene_0.txt:"
                               f"{len(generate_scene(FIRST).class_ids) + 1}: 9 fields, a box is "
                               "'class cx cy w h')"]


def test_invalid_coco_boxes_are_left_out_and_counted(dataset: Path, tmp_path: Path,
                                                     reference: tuple[float, float]) -> None:
    coco = json.loads((dataset / "coco.json").read_text())
    coco["annotations"] += [
        {"id": 700, "image_id": 0, "category_id": 10, "bbox": [10, 10, 0, 5]},  # width 0
        {"id": 701, "image_id": 0, "category_id": 11, "bbox": [10, 10, -4, 5]},  # negative width
        {"id": 702, "image_id": 1, "category_id": 12, "bbox": [630, 10, 40, 5]},  # past the right border
        {"id": 703, "image_id": 1, "category_id": 12, "bbox": [-30, -30, 20, 20]},  # wholly outside
    ]
    (tmp_path / "c.json").write_text(json.dumps(coco))
    doc = _run_json(["--images", str(dataset / "images"), "--labels", str(tmp_path / "c.json")],
                    tmp_path / "r.json")
    assert (doc["mAP50"], doc["mAP50_95"]) == pytest.approx(reference, abs=6e-5)
    assert ("left out 4 invalid labels (the first: c.json annotation 700: bbox [10, 10, 0, 5] has width or "
            "height <= 0)") in doc["left_out"]


def test_no_ground_truth_is_refused_not_scored_zero(dataset: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "yolo").mkdir()
    (tmp_path / "yolo" / "scene_0.txt").write_text("1 320 240 50 40\n")  # the only label: pixels
    assert main(["--images", str(dataset / "images"), "--labels", str(tmp_path / "yolo")]) == 2
    captured = capsys.readouterr()
    assert "mAP50=" not in captured.out  # before: mAP50=0.0000, as if the model had found nothing
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "at least one object of the model's classes" in err[0]
    assert "left out 1 invalid labels" in err[0]


def test_a_missing_image_is_one_line(dataset: Path, tmp_path: Path,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    coco = json.loads((dataset / "coco.json").read_text())
    coco["images"][0]["file_name"] = "not_there.png"
    (tmp_path / "c.json").write_text(json.dumps(coco))
    capfd.readouterr()
    assert main(["--images", str(dataset / "images"), "--labels", str(tmp_path / "c.json")]) == 2
    err = capfd.readouterr().err.strip().splitlines()  # fd 2: OpenCV writes there itself, not via Python
    assert len(err) == 1 and "not_there.png" in err[0], err  # before: OpenCV's WARN line came first

