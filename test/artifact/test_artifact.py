"""Artifact sidecar validation and loadable file checks (CPU only)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from dla_infer_node.artifact.sidecar import (
    check_loadable_file,
    default_sidecar,
    load_artifact,
    parse_artifact,
    read_loadable,
)
from dla_infer_node.core.errors import ModelError

MODEL = {
    "name": "m", "classes": ["a", "b"],
    "input": {"name": "images", "width": 64, "height": 64},
    "decoder": {"kind": "yolov5_raw", "num_classes": 2, "strides": [8], "anchors": [[10, 13, 16, 30]]},
    "outputs": [{"name": "p3", "shape": [1, 14, 8, 8]}],
}
DOC: dict[str, Any] = {
    "artifact_version": 1,
    "loadable": "m.loadable",
    "source_model": {"path": "m.onnx", "sha256": "0" * 64, "revision": "v1"},
    "build": {"tool": "trtexec", "tensorrt_version": "10.3.0",
              "command": "trtexec --onnx=m.onnx --useDLACore=0 --int8 --buildDLAStandalone "
                         "--inputIOFormats=int8:dla_hwc4 --outputIOFormats=fp16:chw16 "
                         "--saveEngine=m.loadable"},
    "tensors": {"inputs": [{"name": "images", "format": "hwc4", "dtype": "int8", "shape": [1, 3, 64, 64],
                            "scale": 0.0079}],
                "outputs": [{"name": "p3", "format": "chw16", "dtype": "fp16", "shape": [1, 14, 8, 8]}]},
    "model": MODEL,
}


def write(tmp: Path, doc: dict[str, Any], blob: bytes = b"x" * 100) -> Path:
    (tmp / "m.loadable").write_bytes(blob)
    p = tmp / "m.loadable.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_valid_sidecar_and_summary(tmp_path: Path) -> None:
    a = load_artifact(write(tmp_path, DOC))
    assert a.inputs[0].scale == pytest.approx(0.0079)
    assert a.outputs[0].scale is None
    assert a.loadable_path == tmp_path / "m.loadable"
    s = a.summary()
    assert s["build"]["tensorrt_version"] == "10.3.0" and s["model"]["decoder"] == "yolov5_raw"
    assert read_loadable(a) == b"x" * 100


def test_metadata_file_instead_of_inline(tmp_path: Path) -> None:
    doc = copy.deepcopy(DOC)
    del doc["model"]
    doc["metadata"] = "m.meta.yaml"
    (tmp_path / "m.meta.yaml").write_text(yaml.safe_dump(MODEL))
    assert load_artifact(write(tmp_path, doc)).metadata.classes == ("a", "b")


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    keys = path.split(".")
    node: Any = doc
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    if value is KeyError:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize(("path", "value", "key"), [
    ("tensors.inputs.0.scale", KeyError, "tensors.inputs[0].scale"),
    ("tensors.inputs.0.scale", -1.0, "tensors.inputs[0].scale"),
    ("tensors.inputs.0.format", "nhwc", "tensors.inputs[0].format"),
    ("tensors.outputs.0.format", "hwc4", "tensors.outputs[0].format"),  # hwc4 is input-only
    ("tensors.outputs.0.dtype", "int8", "tensors.outputs[0].format"),  # chw16 cannot hold int8
    ("tensors.inputs.0.shape", [1, 3, 32, 32], "tensors.inputs[0].shape"),
    ("tensors.outputs.0.name", "p4", "tensors.outputs"),
    ("tensors.outputs.0.shape", [1, 14, 4, 4], "tensors.outputs[p3].shape"),
    ("build.command", "trtexec --onnx=m.onnx --useDLACore=0 --saveEngine=m.plan", "build.command"),
    ("build.command", "trtexec --buildDLAStandalone --onnx=m.onnx", "build.command"),
    ("build.command", "trtexec --useDLACore=0 --buildDLAStandalone --inputIOFormats=fp16:dla_linear",
     "build.command"),
    ("artifact_version", 7, "artifact_version"),
    ("model", KeyError, "model"),
    ("loadable_sha256", "xyz", "loadable_sha256"),
])
def test_invalid_sidecar_names_key(tmp_path: Path, path: str, value: Any, key: str) -> None:
    p = write(tmp_path, mutate(path, value))
    with pytest.raises(ModelError) as ei:
        load_artifact(p)
    assert key in str(ei.value) and str(p) in str(ei.value)


def test_model_section_errors_come_from_parse_metadata(tmp_path: Path) -> None:
    p = write(tmp_path, mutate("model.decoder.kind", "ssd"))
    with pytest.raises(ModelError, match=r"decoder\.kind"):
        load_artifact(p)


def test_missing_sidecar_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="sidecar not found"):
        load_artifact(tmp_path / "nope.yaml")
    with pytest.raises(ModelError, match="mapping"):
        parse_artifact(["x"], tmp_path / "s.yaml")


def test_loadable_checks(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        check_loadable_file(tmp_path / "missing.loadable")
    with pytest.raises(ModelError, match="not a regular file"):
        check_loadable_file(tmp_path)
    empty = tmp_path / "e.loadable"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty"):
        check_loadable_file(empty)
    big = tmp_path / "b.loadable"
    big.write_bytes(b"z" * 2048)
    with pytest.raises(ModelError, match="cap"):
        check_loadable_file(big, max_bytes=1024)
    fifo = tmp_path / "f.loadable"
    os.mkfifo(fifo)
    with pytest.raises(ModelError, match="not a regular file"):
        check_loadable_file(fifo)


def test_sha256_mismatch(tmp_path: Path) -> None:
    a = load_artifact(write(tmp_path, mutate("loadable_sha256", "a" * 64)))
    with pytest.raises(ModelError, match="sha256"):
        read_loadable(a)


def test_configured_loadable_wins_and_default_sidecar(tmp_path: Path) -> None:
    other = tmp_path / "other.loadable"
    other.write_bytes(b"y")
    a = load_artifact(write(tmp_path, DOC), loadable=other)
    assert a.loadable_path == other
    assert default_sidecar("/x/m.loadable") == Path("/x/m.loadable.yaml")
