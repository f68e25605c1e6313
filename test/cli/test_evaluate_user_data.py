"""``evaluate`` on the user's own labelled data: generated scenes written out as PNG files with COCO JSON and
with YOLO txt labels score exactly what ``evaluate`` gives on the same scenes directly; what is left out
(foreign classes, crowd regions) is reported; bad labels are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

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
    assert "left out 1 crowd regions (iscrowd=1)" in out
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
])
def test_bad_labels_are_one_line_and_exit_2(tmp_path: Path, dataset: Path, setup: str | None, argv: list[str],
                                            words: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "images").symlink_to(dataset / "images")
    if setup == "bad_txt":
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "scene_0.txt").write_text("42 0.5 0.5 0.1 0.1\n")
    if setup == "bad_json":
        (tmp_path / "bad.json").write_text('{"images": [}')
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
