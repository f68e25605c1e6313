"""A whole node configuration (ros/node_config.py) against the settings table (core/settings.py), the
table itself and the shipped config files that mirror it (no ROS needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dla_infer_node.core import settings
from dla_infer_node.core.errors import ParameterError
from dla_infer_node.ros import node_config

REPO = Path(__file__).resolve().parents[3]


def _files(tmp_path: Path) -> dict[str, str]:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    (tmp_path / "m.meta.yaml").write_text("x")
    return {"model_path": str(model)}


def test_table_is_unique_and_defaults_validate() -> None:
    names = [p.name for p in settings.PARAMETERS]
    assert len(names) == len(set(names))
    for p in settings.PARAMETERS:
        assert p.validate(p.default) == p.default, p.name
        assert p.description
    assert set(settings.LIVE_PARAMETERS) == {"confidence_threshold", "nms_iou_threshold", "max_detections",
                                           "debug_image", "input_loss_warn_ratio", "input_stall_periods"}
    for ro in ("backend", "model_path", "loadable_path", "artifact_path", "runtime_mode", "dla_core",
               "input_transport", "qos_reliability", "qos_depth"):
        assert settings.SPECS[ro].read_only


@pytest.mark.parametrize("name,value", [
    ("backend", "tensorrt"), ("dla_core", 2), ("dla_core", -1), ("dla_core", 0.0), ("dla_core", True),
    ("confidence_threshold", 1.5), ("confidence_threshold", "0.3"), ("confidence_threshold", float("nan")),
    ("nms_iou_threshold", -0.1), ("max_detections", 0), ("max_detections", 5000),
    ("input_transport", "theora"), ("qos_reliability", "system_default"), ("qos_depth", 0),
    ("class_id_mode", "both"), ("preprocess_device", "npu"), ("ort_providers", []),
    ("ort_providers", "CPUExecutionProvider"), ("debug_image", 1), ("ort_threads", -2),
])
def test_bad_values_name_parameter_value_and_allowed(name: str, value: object) -> None:
    with pytest.raises(ParameterError) as err:
        settings.validate_value(name, value)
    text = str(err.value)
    assert err.value.name == name and f"'{name}'" in text and repr(value) in text
    assert "allowed" in text and "\n" not in text


def test_double_accepts_int_and_returns_float() -> None:
    assert settings.validate_value("confidence_threshold", 1) == 1.0
    assert isinstance(settings.validate_value("confidence_threshold", 0), float)


def test_standalone_is_explained() -> None:
    with pytest.raises(ParameterError) as err:
        node_config.validate_config({"runtime_mode": "standalone"})
    text = str(err.value)
    assert "--buildDLAStandalone" in text and "hybrid" in text
    assert "cuda.bindings.cudla" in text and "standalone runtime mode" in text


def test_config_fills_metadata_next_to_model(tmp_path: Path) -> None:
    cfg = node_config.validate_config(_files(tmp_path))
    assert cfg.metadata_path == str(tmp_path / "m.meta.yaml")
    assert cfg.ort_providers == ("CPUExecutionProvider",)
    assert cfg.confidence_threshold == 0.25 and cfg.qos_depth == 5


def test_missing_files_are_parameter_errors(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="model_path"):
        node_config.validate_config({"model_path": str(tmp_path / "nope.onnx")})
    with pytest.raises(ParameterError, match="loadable_path"):
        node_config.validate_config({"backend": "cudla"})
    with pytest.raises(ParameterError, match="labels_path"):
        node_config.validate_config({**_files(tmp_path), "labels_path": str(tmp_path / "nope.txt")})


def test_preprocess_auto_follows_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default, so `backend:=onnxruntime` works with the Orin config (which leaves it at auto)
    assert settings.SPECS["preprocess_device"].default == "auto"
    assert node_config.validate_config(_files(tmp_path)).preprocess_device == "cpu"
    loadable = tmp_path / "x.loadable"
    loadable.write_bytes(b"\0")
    (tmp_path / "x.loadable.yaml").write_text("x")
    cfg = node_config.validate_config({"backend": "cudla", "loadable_path": str(loadable)})
    # gpu where the fused kernel can run (cuda.core installed), else cpu: this machine has no cuda.core
    assert cfg.preprocess_device == ("gpu" if settings.gpu_preprocess_possible() else "cpu")
    monkeypatch.setattr(settings, "gpu_preprocess_possible", lambda: True)
    cfg = node_config.validate_config({"backend": "cudla", "loadable_path": str(loadable)})
    assert cfg.preprocess_device == "gpu"
    orin = yaml.safe_load((REPO / "config" / "orin_dla.yaml").read_text())["/**"]["ros__parameters"]
    cfg = node_config.validate_config({**orin, **_files(tmp_path), "backend": "onnxruntime",
                                  "ort_providers": tuple(orin["ort_providers"])})
    assert cfg.backend == "onnxruntime" and cfg.preprocess_device == "cpu"


def test_cudla_without_loadable_names_the_parameter_in_one_line() -> None:
    with pytest.raises(ParameterError) as err:
        node_config.validate_config({"backend": "cudla"})
    text = str(err.value)
    assert err.value.name == "loadable_path" and "\n" not in text
    assert "loadable_path" in text and "artifact_path" in text and "--buildDLAStandalone" in text


def test_gpu_preprocess_needs_cudla(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="preprocess_device"):
        node_config.validate_config({**_files(tmp_path), "preprocess_device": "gpu"})


def test_cudla_config(tmp_path: Path) -> None:
    loadable = tmp_path / "x.loadable"
    loadable.write_bytes(b"\0")
    meta = tmp_path / "meta.yaml"
    meta.write_text("x")
    with pytest.raises(ParameterError, match="artifact_path"):  # no sidecar next to the loadable
        node_config.validate_config({"backend": "cudla", "loadable_path": str(loadable)})
    (tmp_path / "x.loadable.yaml").write_text("x")
    cfg = node_config.validate_config({"backend": "cudla", "loadable_path": str(loadable), "dla_core": 1,
                                  "preprocess_device": "gpu"})
    assert cfg.backend == "cudla" and cfg.dla_core == 1
    assert cfg.artifact_path == str(tmp_path / "x.loadable.yaml") and cfg.metadata_path == ""
    cfg = node_config.validate_config({"backend": "cudla", "loadable_path": str(loadable),
                                  "artifact_path": str(meta), "metadata_path": str(meta)})
    assert cfg.artifact_path == cfg.metadata_path == str(meta)


def test_labels(tmp_path: Path) -> None:
    f = tmp_path / "l.txt"
    f.write_text("a\n\nb\n")
    assert node_config.load_labels(str(f), 2) == ("a", "b")
    with pytest.raises(ParameterError, match="exactly 3"):
        node_config.load_labels(str(f), 3)


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A parameters file's nesting as ROS reads it: {"front": {"topic": x}} is "front.topic"."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _tupled(values: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


@pytest.mark.parametrize("name", ["cpu_demo.yaml", "orin_dla.yaml", "orin_dla_four_cameras.yaml"])
def test_config_files_mirror_the_table(name: str) -> None:
    doc = yaml.safe_load((REPO / "config" / name).read_text())
    values = _flat(doc["/**"]["ros__parameters"])
    # every parameter of the table, and every camera parameter of each camera named
    expected = set(settings.SPECS) | {f"{c}.{k}" for c in values["cameras"] for k in settings.CAMERA_SPECS}
    assert set(values) == expected, set(values) ^ expected
    for key, value in values.items():
        settings.validate_value(key, tuple(value) if isinstance(value, list) else value)
        # ROS parameter types are strict: a YAML int for a double parameter would be rejected by rclpy
        spec = settings.SPECS.get(key) or settings.camera_spec(key)
        assert spec is not None
        if spec.type == "double":
            assert isinstance(value, float), key
    node_config.validate_config(_tupled(values), check_files=False)


def test_four_camera_example_uses_both_cores() -> None:
    doc = yaml.safe_load((REPO / "config" / "orin_dla_four_cameras.yaml").read_text())
    cfg = node_config.validate_config(_tupled(_flat(doc["/**"]["ros__parameters"])), check_files=False)
    assert [c.name for c in cfg.camera_configs] == ["front", "rear", "left", "right"]
    assert [c.dla_core for c in cfg.camera_configs] == [0, 1, 0, 1]  # two pinned, two round robin
    assert cfg.cores == (0, 1) and cfg.backend == "cudla"
    assert cfg.camera_configs[2].input_transport == "compressed"


def test_camera_parameters_round_robin_defaults_and_errors() -> None:
    given = {"cameras": ("a", "b", "c"), "dla_cores": (1, 0), "qos_depth": 2, "b.qos_depth": 7,
             "c.input_transport": "compressed"}
    cfg = node_config.validate_config(given, check_files=False)
    a, b, c = cfg.camera_configs
    assert (a.dla_core, b.dla_core, c.dla_core) == (1, 0, 1)  # in dla_cores' order, least loaded first
    assert (a.topic, a.qos_depth, b.qos_depth) == ("a/image", 2, 7)  # the node's value unless its own
    assert c.topic == "c/image/compressed"
    assert cfg.for_camera(c).input_transport == "compressed" and cfg.for_camera(b).qos_depth == 7
    single = node_config.validate_config({}, check_files=False)
    assert single.camera_configs == () and single.cores == (0,)
    for bad, name in (({"cameras": ("a", "a")}, "cameras"), ({"cameras": ("1a",)}, "cameras"),
                      ({"dla_cores": (0, 0)}, "dla_cores"), ({"dla_cores": (2,)}, "dla_cores"),
                      ({"cameras": ("a",), "a.dla_core": 1}, "a.dla_core"),
                      ({"cameras": ("a",), "a.qos_depth": 0}, "a.qos_depth")):
        with pytest.raises(ParameterError) as err:
            node_config.validate_config(bad, check_files=False)
        assert err.value.name == name and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["cpu_demo.yaml", "orin_dla.yaml"])
def test_config_comments_name_the_values_below_them(name: str) -> None:
    # a comment that gives a parameter a number ("depth 1 keeps latency lowest") must give the file's value;
    # a comment covers the run of keys below it
    values = yaml.safe_load((REPO / "config" / name).read_text())["/**"]["ros__parameters"]
    comment: list[str] = []
    keys_since = False
    for line in (REPO / "config" / name).read_text().splitlines():
        text = line.strip()
        if text.startswith("#"):
            comment = [text] if keys_since else [*comment, text]
            keys_since = False
            continue
        keys_since = True
        key = text.split(":", 1)[0]
        if key in values and comment and isinstance(values[key], (int, float)):
            word = key.split("_")[-1]  # qos_depth -> "depth"
            for number in re.findall(rf"\b{word}\s+(-?\d+(?:\.\d+)?)(?!\d|\s*\.\.)", " ".join(comment)):
                assert float(number) == values[key], \
                    f"{name}: the comment above {key} says {word} {number}, the value is {values[key]}"


def test_orin_config_is_hybrid_cudla() -> None:
    values = yaml.safe_load((REPO / "config" / "orin_dla.yaml").read_text())["/**"]["ros__parameters"]
    assert values["backend"] == "cudla" and values["runtime_mode"] == "hybrid"
    assert values["loadable_path"] and values["artifact_path"] and values["dla_core"] in (0, 1)


def test_markdown_table_lists_every_parameter() -> None:
    table = settings.markdown_table()
    for p in settings.PARAMETERS:
        assert f"`{p.name}`" in table


def test_readme_parameter_table_is_the_generated_one() -> None:
    # README.md carries the table verbatim; regenerate it with
    # .venv/bin/python -c "from dla_infer_node.core.settings import markdown_table; print(markdown_table())"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert settings.markdown_table() in readme, "README.md's parameter table is out of date"
