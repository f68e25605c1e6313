"""Metadata for foreign models: ``labels`` as a synonym of ``classes``, class names from the ONNX metadata,
fp16-input/-output ONNX in the onnxruntime backend; NMS ways and the fast argmax against references."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from _core_fixtures import NA, NC, NO, STRIDES, H, W, build_raw_model, write_metadata
from onnx import TensorProto, helper

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.decode import argmax_rows
from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import class_names_from_onnx_metadata, load_metadata
from dla_infer_node.core.nms import nms


def _doc(tmp_path: Path) -> dict:
    build_raw_model(tmp_path / "tiny.onnx")
    write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    return yaml.safe_load((tmp_path / "tiny.meta.yaml").read_text(encoding="utf-8"))


def _load(tmp_path: Path, doc: dict):  # type: ignore[no-untyped-def]
    (tmp_path / "m.meta.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return load_metadata(tmp_path / "m.meta.yaml")


def test_labels_is_a_synonym_of_classes(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    doc["labels"] = doc.pop("classes")
    assert _load(tmp_path, doc).classes == ("c0", "c1")
    doc["classes"] = ["x", "y"]
    with pytest.raises(ModelError, match="'classes' and 'labels'"):
        _load(tmp_path, doc)
    del doc["classes"]
    (tmp_path / "names.txt").write_text("cat\n\ndog\n", encoding="utf-8")
    doc["labels"] = "names.txt"  # a string is a labels file, relative to the metadata (the shipped form)
    assert _load(tmp_path, doc).classes == ("cat", "dog")


def test_onnx_names_parsed_without_eval() -> None:
    assert class_names_from_onnx_metadata("{0: 'person', 1: 'traffic light'}") == ("person", "traffic light")
    assert class_names_from_onnx_metadata("['a', 'b']") == ("a", "b")
    for bad in ("__import__('os').system('true')", "{1: 'a'}", "42"):
        with pytest.raises(ModelError):
            class_names_from_onnx_metadata(bad)


def test_class_names_from_onnx_metadata_when_yaml_has_none(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    del doc["classes"]
    model = onnx.load(str(tmp_path / "tiny.onnx"))
    helper.set_model_props(model, {"names": "{0: 'apple', 1: 'pear'}"})
    onnx.save(model, str(tmp_path / "tiny.onnx"))
    (tmp_path / "tiny.meta.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    backend, meta = open_backend(BackendSettings(metadata_path=str(tmp_path / "tiny.meta.yaml")))
    assert meta.classes == ("apple", "pear")
    backend.close()
    helper.set_model_props(model, {})
    del model.metadata_props[:]
    onnx.save(model, str(tmp_path / "tiny.onnx"))
    with pytest.raises(ModelError, match="0 class names"):
        open_backend(BackendSettings(metadata_path=str(tmp_path / "tiny.meta.yaml")))


def _to_fp16_io(src: Path, dst: Path) -> None:
    """The same network with a float16 input and float16 outputs (Casts at both ends)."""
    model = onnx.load(str(src))
    g = model.graph
    for node in g.node:
        node.input[:] = ["images_f32" if i == "images" else i for i in node.input]
        node.output[:] = [o + "_f32" if o.startswith("head") else o for o in node.output]
    g.node.insert(0, helper.make_node("Cast", ["images"], ["images_f32"], to=TensorProto.FLOAT))
    for i, s in enumerate(STRIDES):
        g.node.append(helper.make_node("Cast", [f"head{i}_f32"], [f"head{i}"], to=TensorProto.FLOAT16))
        g.output[i].CopyFrom(helper.make_tensor_value_info(f"head{i}", TensorProto.FLOAT16,
                                                           [1, NA * NO, H // s, W // s]))
    g.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


def test_fp16_input_and_outputs_run(tmp_path: Path) -> None:
    build_raw_model(tmp_path / "tiny.onnx", seed=4)
    meta = write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    _to_fp16_io(tmp_path / "tiny.onnx", tmp_path / "tiny16.onnx")
    img = np.random.default_rng(2).integers(0, 256, (70, 90, 3), dtype=np.uint8)
    with OnnxRuntimeBackend(tmp_path / "tiny.onnx", meta) as ref, \
            OnnxRuntimeBackend(tmp_path / "tiny16.onnx", meta) as half:
        want, got = ref.infer(img, "rgb8").tensors, half.infer(img, "rgb8").tensors
    for w, g in zip(want, got, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, atol=2e-2, rtol=2e-3)  # fp16 input rounding + fp16 output


def _reference_nms(b: np.ndarray, s: np.ndarray, c: np.ndarray, t: float, max_det: int) -> list[int]:
    order = np.argsort(-s, kind="stable")
    keep: list[int] = []
    for i in order:
        if len(keep) == max_det:
            break
        ok = True
        for j in keep:
            if c[i] != c[j]:
                continue
            iw = max(0.0, min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0]))
            ih = max(0.0, min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1]))
            area = [max(0.0, b[k, 2] - b[k, 0]) * max(0.0, b[k, 3] - b[k, 1]) for k in (i, j)]
            if iw * ih > t * (area[0] + area[1] - iw * ih):
                ok = False
                break
        if ok:
            keep.append(int(i))
    return keep


@pytest.mark.parametrize("seed", range(6))
def test_nms_ways_equal_the_plain_greedy_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 600))
    xy = rng.uniform(0, 200, (n, 2)).round()  # integer coordinates: IoU ties and exact overlaps happen
    wh = rng.uniform(-5, 60, (n, 2)).round()  # some degenerate (zero/negative size) boxes
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    scores = rng.choice(rng.uniform(0, 1, n // 3), n).astype(np.float32)  # repeated scores: stable order
    ids = rng.integers(0, 3, n)
    for t, max_det in ((0.5, 1000), (0.3, 7), (0.0, 50), (0.9, 100)):
        want = _reference_nms(boxes.astype(np.float64), scores, ids, t, max_det)
        for method in ("sparse", "blocks", "auto"):
            assert nms(boxes, scores, ids, t, max_det, method).tolist() == want, (method, t)


def test_argmax_rows_matches_numpy_with_ties_and_nan() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (7, 500)).astype(np.float32)  # many ties
    assert np.array_equal(argmax_rows(x, x.max(0)), np.argmax(x, 0))
    y = rng.normal(0, 1, (80, 300)).astype(np.float32)
    assert np.array_equal(argmax_rows(y, y.max(0)), np.argmax(y, 0))
    y[3, 10] = np.nan
    assert np.array_equal(argmax_rows(y, y.max(0)), np.argmax(y, 0))
    assert NC == 2  # the tiny model's class count the metadata tests above rely on


def test_yolov8_raw_paired_and_per_level_concat_forms_agree() -> None:
    from _core_fixtures import make_metadata

    from dla_infer_node.core.decode import DecodeError, make_decoder

    rng = np.random.default_rng(7)
    nc, strides = 3, (8, 16)
    outs = []
    for s in strides:
        outs += [rng.normal(0, 2, (1, 64, 64 // s, 96 // s)).astype(np.float32),
                 rng.normal(-1, 2, (1, nc, 64 // s, 96 // s)).astype(np.float32)]
    concat = [np.concatenate(outs[i:i + 2], axis=1) for i in (0, 2)]
    spec = [{"name": f"o{i}", "shape": list(o.shape)} for i, o in enumerate(outs)]
    paired = make_decoder(make_metadata("yolov8_raw", num_classes=nc, strides=strides, outputs=spec))
    joined_spec = [{"name": f"j{i}", "shape": list(c.shape)} for i, c in enumerate(concat)]
    joined = make_decoder(make_metadata("yolov8_raw", num_classes=nc, strides=strides, outputs=joined_spec))
    a, b = paired(outs, 0.3, 0.5, 50), joined(concat, 0.3, 0.5, 50)
    assert len(a) > 3 and np.array_equal(a.boxes, b.boxes) and np.array_equal(a.class_ids, b.class_ids)
    with pytest.raises(DecodeError, match="yolov8_raw"):
        paired([outs[0][:, :10], *outs[1:]], 0.3, 0.5, 50)
    with pytest.raises(ModelError, match="yolov8_raw needs"):
        make_metadata("yolov8_raw", num_classes=nc, strides=strides, outputs=spec[:3])
