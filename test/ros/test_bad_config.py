"""Every parameter and every metadata / sidecar key, given a bad value: exit 2, ONE stderr line, no traceback.

The node's ``main`` runs in this process (rclpy initialised and shut down per row) with the file
descriptors captured, so the table costs milliseconds a row; ``test_node_startup`` covers the same
contract through a real node process.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _node_helpers import ros_value, write_oracle_model

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")

from dla_infer_node.core.settings import PARAMETERS
from dla_infer_node.ros import node as node_module


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad_config")
    model, meta = write_oracle_model(d / "oracle")
    fifo = d / "fifo"
    os.mkfifo(fifo)
    loadable = d / "m.loadable"
    loadable.write_bytes(b"\x00" * 64)
    labels = d / "labels.txt"
    labels.write_text("only_one\n")
    return {"dir": d, "model": model, "meta": meta, "fifo": fifo, "loadable": loadable, "labels": labels}


def _run(capfd: pytest.CaptureFixture[str], params: dict[str, Any],
         extra: tuple[str, ...] = ()) -> tuple[int, str]:
    argv = ["dla_infer_node", *extra, "--ros-args"]
    for k, v in params.items():
        argv += ["-p", f"{k}:={ros_value(v)}"]
    capfd.readouterr()
    rc = node_module.main(argv)
    out = capfd.readouterr()
    return rc, out.err + out.out


def _assert_one_line(rc: int, out: str, name: str) -> None:
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert rc == 2, out
    assert len(lines) == 1, out
    assert name in lines[0], out


# parameter -> (bad value, extra parameters); every row of the table has one
PARAM_ROWS: dict[str, Callable[[dict[str, Path]], tuple[Any, dict[str, Any]]]] = {
    "backend": lambda f: ("tensorrt", {}),
    "model_path": lambda f: (str(f["dir"]), {}),  # a directory: said so
    "metadata_path": lambda f: (str(f["fifo"]), {"model_path": str(f["model"])}),  # a FIFO: said so
    "loadable_path": lambda f: ("", {"backend": "cudla"}),
    "artifact_path": lambda f: (str(f["dir"] / "none.yaml"), {"backend": "cudla",
                                                              "loadable_path": str(f["loadable"])}),
    "runtime_mode": lambda f: ("standalone", {}),
    "dla_core": lambda f: (5, {}),
    "frames_in_flight": lambda f: (3, {}),
    "preprocess_device": lambda f: ("gpu", {}),
    "ort_threads": lambda f: (-1, {}),
    "ort_providers": lambda f: (5, {}),
    "labels_path": lambda f: (str(f["labels"]), {"model_path": str(f["model"])}),
    "class_id_mode": lambda f: ("uuid", {}),
    "confidence_threshold": lambda f: (1.5, {}),
    "nms_iou_threshold": lambda f: ("high", {}),
    "max_detections": lambda f: (0, {}),
    "input_transport": lambda f: ("h264", {}),
    "max_input_pixels": lambda f: (0, {}),
    "input_loss_warn_ratio": lambda f: (1.5, {}),
    "input_stall_periods": lambda f: ("often", {}),
    "qos_reliability": lambda f: ("sometimes", {}),
    "qos_depth": lambda f: (0, {}),
    "debug_image": lambda f: ("yes", {}),
    "diagnostics_period": lambda f: (-1.0, {}),
    "executor": lambda f: ("multi", {}),
    "cameras": lambda f: (["front", "front"], {}),
    "dla_cores": lambda f: ([0, 2], {}),
}


def test_the_table_covers_every_parameter() -> None:
    assert sorted(PARAM_ROWS) == sorted(p.name for p in PARAMETERS)


@pytest.mark.parametrize("name", sorted(PARAM_ROWS))
def test_bad_parameter(name: str, files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    value, extra = PARAM_ROWS[name](files)
    rc, out = _run(capfd, {**extra, name: value})
    _assert_one_line(rc, out, f"'{name}'")
    if name == "model_path":
        assert "a directory" in out
    if name == "metadata_path":
        assert "FIFO" in out


# metadata key -> bad value (None deletes the key); the oracle metadata is otherwise valid
META_ROWS: dict[str, Any] = {
    "name": 5, "input": ["images"], "input.name": 5, "input.width": "wide", "input.height": -3,
    "input.channel_order": "rgba", "input.mean": "0", "input.std": [1, 0, 1], "input.pad_value": 300,
    "decoder": [1], "decoder.kind": "yolov9", "decoder.num_classes": "two", "decoder.strides": "8,16",
    "decoder.anchors": {"a": 1}, "outputs": {"name": "head0"}, "outputs[0]": "head0",
    "outputs[0].name": 7, "outputs[0].shape": "1x7", "classes": "ab",
    "labels": 5,  # next to a 'classes' list: was a TypeError traceback
    "decoder.strides[0]": 0,  # stride 0 reported every object again at the image corner
    "decoder.anchors[0]": [-20, 10],  # a negative anchor size
}


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    parts = key.replace("[0]", ".0").split(".")
    target: Any = doc
    for p in parts[:-1]:
        target = target[int(p)] if p.isdigit() else target[p]
    last = parts[-1]
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value


@pytest.mark.parametrize("key", sorted(META_ROWS))
def test_bad_metadata_key(key: str, files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(files["meta"].read_text())
    _set(doc, key, META_ROWS[key])
    meta = files["dir"] / f"bad_{key.replace('[', '_').replace(']', '_')}.meta.yaml"
    meta.write_text(yaml.safe_dump(doc))
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, f"'{key}'")
    assert str(meta) in out


def test_metadata_class_count_that_does_not_fit_the_model(files: dict[str, Path],
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(files["meta"].read_text())
    doc["classes"] = [*doc["classes"], "extra"]
    doc["decoder"]["num_classes"] += 1
    doc["outputs"][0]["shape"][1] += 1  # consistent metadata; the ONNX graph disagrees (checked by ORT)
    meta = files["dir"] / "nc.meta.yaml"
    meta.write_text(yaml.safe_dump(doc))
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, "head0")
    doc["outputs"][0]["shape"][1] -= 1  # now metadata outputs match the graph, the class list does not
    meta.write_text(yaml.safe_dump(doc))
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, "num_classes=")


def test_yaml_syntax_errors_name_file_line_and_column(files: dict[str, Path],
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    meta = files["dir"] / "syntax.meta.yaml"
    meta.write_text("name: x\ninput: [1, 2\nclasses: []\n")
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, str(meta))
    assert "line 3, column" in out
    params = files["dir"] / "params.yaml"
    params.write_text("dla_infer_node:\n  ros__parameters:\n    backend: [onnx\n    x: 1\n")
    rc, out = _run(capfd, {}, ("--ros-args", "--params-file", str(params)))
    _assert_one_line(rc, out, str(params))
    assert "line 4, column" in out


def _sidecar(files: dict[str, Path]) -> dict[str, Any]:
    return {"artifact_version": 1, "metadata": str(files["meta"]), "loadable": str(files["loadable"]),
            "emulated": False, "source_model": {"path": "m.onnx"}, "loadable_sha256": None,
            "build": {"command": "trtexec --useDLACore=0 --buildDLAStandalone"},
            "tensors": {"inputs": [{"name": "images", "format": "hwc4", "dtype": "int8", "scale": 0.5,
                                    "shape": [1, 3, 64, 64]}],
                        "outputs": [{"name": "head0", "format": "linear", "dtype": "fp16",
                                     "shape": [1, 7, 2, 2]}]}}


SIDECAR_ROWS: dict[str, Any] = {
    "artifact_version": 2, "tensors": ["inputs"], "tensors.inputs": 5, "tensors.outputs": {"a": 1},
    "tensors.inputs[0]": "images", "tensors.inputs[0].name": 3, "tensors.inputs[0].format": ["hwc4"],
    "tensors.inputs[0].dtype": "int4", "tensors.inputs[0].shape": "1,3,64,64",
    "tensors.inputs[0].scale": "big", "tensors.outputs[0].shape": [1, 8, 2, 2], "build": ["x"],
    "build.command": 5, "model": ["x"], "metadata": 5, "loadable": 5, "source_model": ["x"],
    "loadable_sha256": "xyz", "emulated": "yes",
}


@pytest.mark.parametrize("key", sorted(SIDECAR_ROWS))
def test_bad_sidecar_key(key: str, files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(_sidecar(files))
    _set(doc, key, SIDECAR_ROWS[key])
    if key == "loadable_sha256":
        doc[key] = "xyz"
    path = files["dir"] / f"bad_{key.replace('[', '_').replace(']', '_')}.loadable.yaml"
    path.write_text(yaml.safe_dump(doc))
    rc, out = _run(capfd, {"backend": "cudla", "loadable_path": str(files["loadable"]),
                           "artifact_path": str(path)})
    _assert_one_line(rc, out, key.split("[")[0])
    assert str(path) in out


# what a few hundred bytes of YAML can ask a parser for: nesting past Python's recursion limit, and aliases
# that expand nine-fold per level (9**8 class names of 'x' if nothing capped them)
DEEP_YAML = "input: " + "[" * 10000 + "]" * 10000 + "\n"
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefg", "bcdefgh", strict=True))


@pytest.mark.parametrize("text", [DEEP_YAML, ALIAS_BOMB], ids=["deep", "aliases"])
@pytest.mark.parametrize("role", ["metadata", "sidecar", "params"])
def test_hostile_yaml_is_refused_in_one_line(role: str, text: str, files: dict[str, Path],
                                            capfd: pytest.CaptureFixture[str]) -> None:
    path = files["dir"] / f"hostile_{role}_{len(text)}.yaml"
    if role == "metadata":  # the bomb as the class list of an otherwise valid file
        doc = yaml.safe_load(files["meta"].read_text())
        doc.pop("classes")
        path.write_text(yaml.safe_dump(doc) + (text if text is DEEP_YAML else text + "classes: *h\n"))
        params: dict[str, Any] = {"model_path": str(files["model"]), "metadata_path": str(path)}
        extra: tuple[str, ...] = ()
    elif role == "sidecar":
        path.write_text(text)
        params = {"backend": "cudla", "loadable_path": str(files["loadable"]), "artifact_path": str(path)}
        extra = ()
    else:
        path.write_text(text)
        params, extra = {}, ("--ros-args", "--params-file", str(path))
    rc, out = _run(capfd, params, extra)
    _assert_one_line(rc, out, str(path))
    assert ("nested too deeply" if text is DEEP_YAML else "expands to more than") in out


def _yolov8_raw_meta(files: dict[str, Path], num_classes: int, reg_max: int) -> Path:
    """The oracle model's one [1, 7, 2, 2] output read as a yolov8_raw head (4*reg_max box + nc classes)."""
    doc = yaml.safe_load(files["meta"].read_text())
    doc["decoder"] = {"kind": "yolov8_raw", "num_classes": num_classes, "strides": [32], "reg_max": reg_max}
    doc["classes"] = [f"c{i}" for i in range(num_classes)]
    path = files["dir"] / f"v8raw_{num_classes}_{reg_max}.meta.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("num_classes", [2, 4])
def test_yolov8_raw_class_count_is_checked_against_the_outputs(
        num_classes: int, files: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    # 7 channels = 4 (reg_max 1) + 3 classes: one class too few silently dropped the last class, one too
    # many failed every frame at decode; both now stop the start
    meta = _yolov8_raw_meta(files, num_classes, 1)
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, "'head0'")
    assert f"num_classes={num_classes}, reg_max=1 needs {4 + num_classes}" in out


def test_yolov8_raw_reg_max_16_on_a_head_without_dfl_bins(files: dict[str, Path],
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    meta = _yolov8_raw_meta(files, 3, 16)  # 64 + 3 channels expected, the head has 7
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, "reg_max=16 needs 67")


@pytest.mark.parametrize("labels", ["fifo", "binary"])
def test_a_bad_labels_file_in_the_metadata_is_one_line(labels: str, files: dict[str, Path],
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    # a FIFO blocked the start forever; bytes that are not UTF-8 were a UnicodeDecodeError traceback
    target = files["fifo"] if labels == "fifo" else files["dir"] / "binary_labels.txt"
    if labels == "binary":
        target.write_bytes(b"\xff\xfealpha\nbeta\n")
    doc = yaml.safe_load(files["meta"].read_text())
    doc.pop("classes")
    doc["labels"] = str(target)
    meta = files["dir"] / f"labels_{labels}.meta.yaml"
    meta.write_text(yaml.safe_dump(doc))
    rc, out = _run(capfd, {"model_path": str(files["model"]), "metadata_path": str(meta)})
    _assert_one_line(rc, out, str(target))
    assert ("not a regular file" if labels == "fifo" else "unreadable") in out
