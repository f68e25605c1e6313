"""Every bad input ends in the package's error type naming the stage - never a bare numpy/ORT traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _core_fixtures import build_raw_model, make_metadata, write_metadata

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.decode import make_decoder
from dla_infer_node.core.errors import DlaInferError, InputError, ModelError
from dla_infer_node.core.image_io import decode_compressed, image_from_fields
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.tensor_format import pack
from dla_infer_node.core.tensor_layout import TensorLayout

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Detector:
    d = tmp_path_factory.mktemp("bad")
    build_raw_model(d / "tiny.onnx")
    meta = make_metadata(width=96, height=64)
    return Detector(OnnxRuntimeBackend(d / "tiny.onnx", meta), meta)


@pytest.mark.parametrize(
    ("image", "encoding"),
    [
        (np.zeros((0, 0, 3), np.uint8), "rgb8"),  # empty
        (np.zeros((10, 0, 3), np.uint8), "bgr8"),  # zero width
        (np.zeros((10, 10, 3), np.float32), "rgb8"),  # wrong dtype
        (np.zeros((10, 10, 3), np.uint16), "rgb8"),
        (np.zeros((10, 10, 3), np.uint8), "mono8"),  # wrong channel count
        (np.zeros((10, 10, 1), np.uint8), "rgba8"),
        (np.zeros((10, 10), np.uint8), "bgr8"),
        (np.zeros((10, 10, 3, 1), np.uint8), "rgb8"),
        (np.zeros((10, 10, 3), np.uint8), "yuv420"),  # unknown encoding
        (np.zeros((10, 10, 3), np.uint8), None),
        (None, "rgb8"),  # not an array at all
        (b"\x00" * 300, "rgb8"),
    ],
)
def test_detector_rejects_bad_frames(detector: Detector, image: object, encoding: object) -> None:
    with pytest.raises(InputError) as info:
        detector.detect(image, encoding)  # type: ignore[arg-type]
    assert str(info.value).startswith(("[preprocess]", "[input]"))


def test_message_level_errors() -> None:
    cases = [
        lambda: image_from_fields("rgb8", 4, 4, 12, bytes(47)),  # truncated
        lambda: image_from_fields("rgb8", 4, 4, 11, bytes(48)),  # step too small
        lambda: image_from_fields("rgb8", 0, 4, 12, b""),  # zero size
        lambda: image_from_fields("nv24", 4, 4, 4, bytes(16)),  # an encoding the node refuses
        lambda: decode_compressed(b"\xff\xd8\xff garbage"),  # undecodable JPEG
    ]
    for case in cases:
        with pytest.raises(InputError, match=r"^\[input\]"):
            case()


def test_model_and_metadata_problems(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        load_metadata(tmp_path / "missing.meta.yaml")
    (tmp_path / "broken.meta.yaml").write_text("input: [unclosed", encoding="utf-8")
    with pytest.raises(ModelError, match="cannot read metadata"):
        load_metadata(tmp_path / "broken.meta.yaml")
    build_raw_model(tmp_path / "tiny.onnx")
    write_metadata(tmp_path / "wrong.meta.yaml", "tiny.onnx", input_name="pixels")
    with pytest.raises(ModelError, match=r"\[model_check\].*'pixels'") as info:
        open_backend(BackendSettings(metadata_path=str(tmp_path / "wrong.meta.yaml")))
    assert "tiny.onnx" in str(info.value)
    write_metadata(tmp_path / "gone.meta.yaml", "nothing_here.onnx")
    with pytest.raises(ModelError, match=r"\[model_load\].*nothing_here.onnx"):
        open_backend(BackendSettings(metadata_path=str(tmp_path / "gone.meta.yaml")))


def test_decoder_and_layout_shape_errors() -> None:
    dec = make_decoder(make_metadata("yolov8", num_classes=3))
    for tensors in ([np.zeros((1, 5, 10), np.float32)], [np.zeros((10,), np.float32)], []):
        with pytest.raises(DlaInferError, match=r"\[decode\]"):
            dec(tensors, 0.25, 0.45, 10)
    with pytest.raises(DlaInferError, match=r"\[tensor_layout\]"):
        pack(np.zeros((1, 3, 4, 4), np.int32), TensorLayout.dense("linear", "fp16", 1, 3, 4, 4))


def _run_detect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dla_infer_node.cli.detect", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def test_detect_cli_errors_are_one_line(tmp_path: Path) -> None:
    build_raw_model(tmp_path / "tiny.onnx")
    write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    (tmp_path / "junk.png").write_bytes(b"not a png")
    for image in ("missing.png", "junk.png"):
        out = _run_detect(str(tmp_path / image), "--model", str(tmp_path / "tiny.meta.yaml"))
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.startswith("error: [input]")
    out = _run_detect(str(tmp_path / "junk.png"), "--model", str(tmp_path / "nope.meta.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "[parameters]" in out.stderr
    out = _run_detect(str(tmp_path / "junk.png"), "--model", str(tmp_path / "tiny.meta.yaml"), "--conf", "7")
    assert out.returncode == 2 and "confidence_threshold" in out.stderr


def test_detect_cli_json_one_line_per_image(tmp_path: Path) -> None:
    import json

    import cv2

    build_raw_model(tmp_path / "tiny.onnx")
    write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    names = []
    for i in range(3):
        p = tmp_path / f"img{i}.png"
        cv2.imwrite(str(p), np.random.default_rng(i).integers(0, 256, (50 + i, 70, 3), dtype=np.uint8))
        names.append(str(p))
    out = _run_detect(*names, "--json", "--model", str(tmp_path / "tiny.meta.yaml"), "--conf", "0.3",
                      "--out", str(tmp_path / "ann"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        items = json.loads(line)
        assert isinstance(items, list)
        for it in items:
            assert set(it) == {"class", "score", "bbox", "bbox_format"} and len(it["bbox"]) == 4
            assert it["bbox_format"] == "xyxy_source_pixels"
            x1, y1, x2, y2 = it["bbox"]
            assert 0 <= x1 <= x2 <= 70 and 0 <= y1 <= y2 <= 52  # corners, inside the source image
    assert sorted(p.name for p in (tmp_path / "ann").iterdir()) == [f"img{i}_det.png" for i in range(3)]


def test_detect_help_states_the_bbox_format() -> None:
    out = _run_detect("--help")
    assert out.returncode == 0, out.stderr
    assert "xyxy_source_pixels" in out.stdout and "[x1, y1, x2, y2]" in " ".join(out.stdout.split())
