"""The ONNX Runtime backend with real ORT: tiny models built here with onnx.helper, plus the shipped model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _core_fixtures import NA, NC, NO, STRIDES, H, W, build_raw_model, make_metadata, write_metadata

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.backend import Backend
from dla_infer_node.core.errors import BackendError, ModelError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.preprocess import reference_preprocess
from dla_infer_node.core.resources import model_dirs


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, ModelMetadata]:
    p = tmp_path / "tiny.onnx"
    build_raw_model(p)
    return p, make_metadata(width=W, height=H, num_classes=NC, path=tmp_path / "tiny.meta.yaml")


def test_outputs_match_numpy(tmp_path: Path) -> None:
    p = tmp_path / "tiny.onnx"
    weights = build_raw_model(p, seed=3)
    meta = make_metadata(width=W, height=H, num_classes=NC)
    img = np.random.default_rng(1).integers(0, 256, (100, 150, 3), dtype=np.uint8)
    be = OnnxRuntimeBackend(p, meta, threads=1)
    assert isinstance(be, Backend) and be.name == "onnxruntime"
    raw = be.infer(img, "bgr8")
    x, lb = reference_preprocess(img, "bgr8", meta.input)
    assert raw.letterbox == lb
    for (w, b), s, out in zip(weights, STRIDES, raw.tensors, strict=True):
        pooled = x[0].reshape(3, H // s, s, W // s, s).mean(axis=(2, 4))
        expect = np.einsum("oc,chw->ohw", w[:, :, 0, 0], pooled) + b[:, None, None]
        assert out.dtype == np.float32 and out.shape == (1, NA * NO, H // s, W // s)
        np.testing.assert_allclose(out[0], expect, atol=1e-4)
    be.close()
    be.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        be.infer(img, "bgr8")


def test_end_to_end_hand_placed_detection(tmp_path: Path) -> None:
    # constant heads (conv weights irrelevant: huge negative offsets except one cell) -> one known box
    consts = [np.zeros((1, NA * NO, H // s, W // s)) for s in STRIDES]
    for c in consts:
        for a in range(NA):
            c[0, a * NO + 4] = -1000.0
    c = consts[0]  # stride 8: 8x12 cells; anchor 0 = (10, 13); cell gy=2, gx=3
    c[0, 0:4, 2, 3] = 1000.0  # s = 1 -> cx = (2 - 0.5 + 3) * 8 = 36, cy = (2 - 0.5 + 2) * 8 = 28,
    # w = (2*1)^2 * 10 = 40, h = 4 * 13 = 52
    c[0, 4, 2, 3] = 1000.0  # obj 1
    c[0, 5, 2, 3], c[0, 6, 2, 3] = -1000.0, 1000.0  # class 1
    p = tmp_path / "const.onnx"
    build_raw_model(p, consts=consts)
    meta = make_metadata(width=W, height=H, num_classes=NC)
    det = Detector(OnnxRuntimeBackend(p, meta), meta, 0.5, 0.45, 10)
    # source 128x64 -> scale 0.75, 96x48 letterboxed with pad_y = 8
    dets = det.detect(np.zeros((64, 128, 3), np.uint8), "rgb8")
    assert len(dets) == 1 and dets.class_ids[0] == 1 and dets.scores[0] == pytest.approx(1.0)
    # network box 16,2,56,54 -> minus pad (0, 8) -> /0.75 -> 21.33,-8,74.67,61.33 -> y1 clipped to 0
    np.testing.assert_allclose(dets.boxes[0], [16 / 0.75, 0, 56 / 0.75, 46 / 0.75], atol=1e-3)
    det.conf_threshold = 0.9
    with pytest.raises(ParameterError, match="confidence_threshold"):
        det.conf_threshold = 1.5
    with pytest.raises(ParameterError, match="nms_iou_threshold"):
        det.iou_threshold = -0.1
    with pytest.raises(ParameterError, match="max_detections"):
        det.max_detections = 0
    det.close()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found") as info:
        OnnxRuntimeBackend(tmp_path / "nope.onnx", make_metadata())
    assert "nope.onnx" in str(info.value) and "[model_load]" in str(info.value)


def test_corrupt_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"this is not a protobuf")
    with pytest.raises(ModelError, match="cannot load") as info:
        OnnxRuntimeBackend(p, make_metadata())
    assert "bad.onnx" in str(info.value)


@pytest.mark.parametrize(
    ("meta_kwargs", "words"),
    [
        ({"input_name": "data"}, "input"),
        ({"width": 128}, "input"),
        ({"outputs": [{"name": "head0", "shape": [1, 21, 8, 12]}, {"name": "head1", "shape": [1, 21, 4, 6]},
                      {"name": "extra", "shape": [1, 21, 2, 3]}]}, "no output 'extra'"),
        ({"outputs": [{"name": "head0", "shape": [1, 21, 8, 12]}, {"name": "head1", "shape": [1, 21, 4, 6]},
                      {"name": "head2", "shape": [1, 22, 2, 3]}]}, "head2"),
    ],
)
def test_metadata_mismatch(tiny: tuple[Path, ModelMetadata], meta_kwargs: dict, words: str) -> None:
    path, _ = tiny
    kwargs = {"width": W, "height": H, "num_classes": NC, **meta_kwargs}
    with pytest.raises(ModelError, match=words) as info:
        OnnxRuntimeBackend(path, make_metadata(**kwargs))
    text = str(info.value)
    assert "[model_check]" in text and "tiny.onnx" in text and "expects" in text


def test_unavailable_provider(tiny: tuple[Path, ModelMetadata]) -> None:
    path, meta = tiny
    with pytest.raises(BackendError, match="NoSuchExecutionProvider"):
        OnnxRuntimeBackend(path, meta, providers=("NoSuchExecutionProvider",))


def test_factory_and_settings_validation(tmp_path: Path) -> None:
    p = tmp_path / "tiny.onnx"
    build_raw_model(p)
    write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    for settings in (BackendSettings(model_path=str(p)),
                     BackendSettings(metadata_path=str(tmp_path / "tiny.meta.yaml"), ort_threads=1)):
        backend, md = open_backend(settings)
        assert md.name == "tiny" and backend.name == "onnxruntime"
        assert len(backend.infer(np.zeros((10, 10, 3), np.uint8), "rgb8").tensors) == 3
        backend.close()
    bad = [
        (BackendSettings(backend="tensorrt"), "backend"),
        (BackendSettings(runtime_mode="standalone"), "runtime_mode"),
        (BackendSettings(preprocess_device="gpu"), "preprocess_device"),
        (BackendSettings(preprocess_device="tpu"), "preprocess_device"),
        (BackendSettings(dla_core=2), "dla_core"),
        (BackendSettings(ort_threads=-1), "ort_threads"),
        (BackendSettings(ort_providers=()), "ort_providers"),
        (BackendSettings(model_path=str(tmp_path / "missing.onnx")), "model_path"),
        (BackendSettings(backend="cudla"), "loadable_path"),
    ]
    for settings, name in bad:
        with pytest.raises(ParameterError, match=name) as info:
            open_backend(settings)
        assert info.value.name == name


def test_cudla_import_failure_is_a_backend_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    loadable = tmp_path / "x.loadable"
    loadable.write_bytes(b"\0")
    monkeypatch.setitem(sys.modules, "dla_infer_node.backends.cudla", None)  # import now raises ImportError
    with pytest.raises(BackendError, match="cuDLA backend") as info:
        open_backend(BackendSettings(backend="cudla", loadable_path=str(loadable)))
    assert "[backend_import]" in str(info.value)


def _shipped_metadata() -> Path | None:
    for d in model_dirs():
        if (d / "shapes_yolo.meta.yaml").is_file() and (d / "shapes_yolo.onnx").is_file():
            return d / "shapes_yolo.meta.yaml"
    return None


@pytest.mark.skipif(_shipped_metadata() is None, reason="shipped model not committed yet")
def test_shipped_model_detects_synthetic_objects() -> None:
    from dla_infer_node.core.synth import generate_scene

    backend, meta = open_backend(BackendSettings())
    det = Detector(backend, meta, 0.25, 0.45, 100)
    hits = total = 0
    for seed in range(900_001, 900_006):  # far from training seeds
        scene = generate_scene(seed)
        dets = det.detect(scene.image, "rgb8")
        for gt, cid in zip(scene.boxes, scene.class_ids, strict=True):
            total += 1
            for b, c in zip(dets.boxes, dets.class_ids, strict=True):
                iw = max(0.0, min(gt[2], b[2]) - max(gt[0], b[0]))
                ih = max(0.0, min(gt[3], b[3]) - max(gt[1], b[1]))
                inter = iw * ih
                union = (gt[2] - gt[0]) * (gt[3] - gt[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
                if c == cid and inter / union >= 0.5:
                    hits += 1
                    break
    det.close()
    assert total > 0 and hits / total >= 0.8, f"{hits}/{total}"


def test_no_import_of_onnxruntime_at_package_import() -> None:
    import subprocess
    import sys

    code = ("import sys, dla_infer_node.backends.factory, dla_infer_node.core.pipeline, "
            "dla_infer_node.cli.detect; "
            "print('onnxruntime' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

