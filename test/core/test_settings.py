"""One settings table (core/settings.py): the node's configuration, the backend factory, the cuDLA backend
and the Detector refuse a value by the same row, in the same words (no ROS, no CUDA needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dla_infer_node.backends.cudla import open_cudla_backend
from dla_infer_node.backends.factory import BackendSettings
from dla_infer_node.core.errors import ParameterError
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.resources import default_model_metadata
from dla_infer_node.core.settings import SPECS, STANDALONE_EXPLANATION, validate_value
from dla_infer_node.ros.node_config import validate_config


def _refusal(call: Any) -> str:
    with pytest.raises(ParameterError) as ei:
        call()
    return str(ei.value)


def test_standalone_is_refused_in_one_wording_everywhere(tmp_path: Path) -> None:
    loadable = tmp_path / "m.loadable"
    loadable.write_bytes(b"\0")
    cudla = BackendSettings(backend="cudla", loadable_path=str(loadable), runtime_mode="standalone")
    messages = {
        "table": _refusal(lambda: validate_value("runtime_mode", "standalone")),
        "node": _refusal(lambda: validate_config({"runtime_mode": "standalone"}, check_files=False)),
        "factory": _refusal(lambda: BackendSettings(runtime_mode="standalone").validate()),
        "cudla backend": _refusal(lambda: open_cudla_backend(cudla)),  # before any device call
    }
    assert len(set(messages.values())) == 1, messages
    assert STANDALONE_EXPLANATION in messages["table"] and "runtime_mode" in messages["table"]


class _UnusedBackend:
    name = "unused"

    def close(self) -> None:
        pass


@pytest.mark.parametrize("name, value", [("max_detections", SPECS["max_detections"].max),
                                         ("confidence_threshold", 1.0), ("nms_iou_threshold", 0.0)])
def test_the_detector_has_the_table_limits(name: str, value: Any) -> None:
    meta = load_metadata(default_model_metadata())
    detector = Detector(_UnusedBackend(), meta)  # type: ignore[arg-type]
    attr = {"max_detections": "max_detections", "confidence_threshold": "conf_threshold",
            "nms_iou_threshold": "iou_threshold"}[name]
    setattr(detector, attr, value)  # the row's bound itself is accepted
    beyond = value + 1 if name == "max_detections" else value + 1.5
    assert _refusal(lambda: setattr(detector, attr, beyond)) == _refusal(lambda: validate_value(name, beyond))


@pytest.mark.parametrize("name, value", [("dla_core", 2), ("ort_threads", 257), ("backend", "tensorrt"),
                                         ("preprocess_device", "tpu"), ("ort_providers", ())])
def test_backend_settings_use_the_rows(name: str, value: Any) -> None:
    got = _refusal(lambda: BackendSettings(**{name: value}).validate())
    assert got == _refusal(lambda: validate_value(name, value))


def test_backend_settings_resolve_auto_as_the_node_does() -> None:
    assert BackendSettings(preprocess_device="auto").validate().preprocess_device == "cpu"
