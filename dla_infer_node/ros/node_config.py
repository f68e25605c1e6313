"""A whole node configuration, validated and resolved -- without rclpy.

The rows (names, types, defaults, allowed values) are the settings table in
:mod:`dla_infer_node.core.settings`; this module checks a full set of values against it
(:func:`validate_config`), then what only a node needs: the files its paths name exist (so a typo is
reported as the parameter, before a backend is opened), the defaults of empty paths filled in, and the
labels file read. Refusals are :class:`~dla_infer_node.core.errors.ParameterError` in one line naming the
parameter, its value and what is allowed.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dla_infer_node.artifact.sidecar import default_sidecar
from dla_infer_node.core.errors import ModelError, ParameterError
from dla_infer_node.core.resources import find_model_file, metadata_for_model, model_dirs
from dla_infer_node.core.settings import (
    PARAMETERS,
    SHIPPED_MODEL,
    CameraConfig,
    camera_configs,
    resolve_preprocess_device,
)


@dataclass(frozen=True)
class NodeConfig:
    """Validated startup configuration; paths are resolved (empty defaults filled in)."""

    backend: str
    model_path: str
    metadata_path: str
    loadable_path: str
    artifact_path: str
    runtime_mode: str
    dla_core: int
    frames_in_flight: int
    preprocess_device: str
    ort_threads: int
    ort_providers: tuple[str, ...]
    labels_path: str
    class_id_mode: str
    confidence_threshold: float
    nms_iou_threshold: float
    max_detections: int
    input_transport: str
    max_input_pixels: int
    qos_reliability: str
    qos_depth: int
    debug_image: bool
    diagnostics_period: float
    input_loss_warn_ratio: float
    input_stall_periods: float
    executor: str
    cameras: tuple[str, ...] = ()
    dla_cores: tuple[int, ...] = ()
    # the cameras with their settings resolved (empty for the single-camera node)
    camera_configs: tuple[CameraConfig, ...] = ()

    @property
    def cores(self) -> tuple[int, ...]:
        """The DLA cores (backends) this node opens: dla_cores, or dla_core alone."""
        return self.dla_cores or (self.dla_core,)

    def for_camera(self, camera: CameraConfig) -> NodeConfig:
        """This configuration as one camera sees it: its transport, QoS and core in the node's fields."""
        return replace(self, input_transport=camera.input_transport, qos_reliability=camera.qos_reliability,
                       qos_depth=camera.qos_depth, dla_core=camera.dla_core)


def shipped_model_path() -> Path:
    """The shipped ONNX model (source tree, ament index or prefix share dir); ParameterError if absent."""
    try:
        return find_model_file(SHIPPED_MODEL)
    except ModelError as exc:
        raise ParameterError("model_path", "", f"an existing ONNX model; the shipped {SHIPPED_MODEL} was "
                             f"not found in {[str(d) for d in model_dirs()]}") from exc


def _existing(name: str, value: str, what: str) -> str:
    try:
        mode = os.stat(value).st_mode
    except OSError:
        raise ParameterError(name, value, f"an existing file ({what}); not found") from None
    if not stat.S_ISREG(mode):
        raise ParameterError(name, value, f"a regular file ({what}); this path is {_file_kind(mode)}")
    return str(Path(value))


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((text for test, text in kinds if test(mode)), "not a regular file")


def validate_config(values: Mapping[str, Any], *, check_files: bool = True) -> NodeConfig:
    """Validate a full set of values (missing ones take their defaults) in table order, then cross-check.

    The first problem raises :class:`ParameterError`; file existence is checked here so that a typo in a
    path is reported as a parameter, before a backend is opened. ``check_files=False`` (a backend
    injected by a benchmark or test) skips the artifact files, which are then not used.
    """
    v: dict[str, Any] = {}
    for spec in PARAMETERS:
        v[spec.name] = spec.validate(values.get(spec.name, spec.default))
    v["camera_configs"] = camera_configs(values, v)
    # resolved here, so every later check sees a concrete device
    v["preprocess_device"] = resolve_preprocess_device(v["backend"], v["preprocess_device"])
    if not check_files:
        return NodeConfig(**v)
    if v["backend"] == "onnxruntime":
        model = v["model_path"] or str(shipped_model_path())
        v["model_path"] = _existing("model_path", model, "an ONNX model; empty means the shipped model")
    else:
        if not v["loadable_path"]:
            raise ParameterError("loadable_path", "", "the path of an existing DLA loadable (trtexec "
                                 "--buildDLAStandalone output) when backend is 'cudla'; set loadable_path "
                                 "(and artifact_path if its sidecar is not '<loadable_path>.yaml')")
        v["loadable_path"] = _existing("loadable_path", v["loadable_path"], "a DLA loadable")
        sidecar = v["artifact_path"] or str(default_sidecar(v["loadable_path"]))
        v["artifact_path"] = _existing("artifact_path", sidecar, "the loadable's sidecar; empty means "
                                       "'<loadable_path>.yaml'")
        if v["model_path"]:
            v["model_path"] = _existing("model_path", v["model_path"], "an ONNX model")
    if v["metadata_path"]:
        v["metadata_path"] = _existing("metadata_path", v["metadata_path"], "model metadata YAML")
    elif v["backend"] == "onnxruntime":
        v["metadata_path"] = _existing("metadata_path", str(metadata_for_model(Path(v["model_path"]))),
                                       "model metadata YAML next to the model, '<stem>.meta.yaml'")
    # cudla: the artifact sidecar carries the model metadata; an explicit metadata_path is only a cross-check
    if v["labels_path"]:
        v["labels_path"] = _existing("labels_path", v["labels_path"], "one class name per line")
    return NodeConfig(**v)


def load_labels(path: str, num_classes: int) -> tuple[str, ...]:
    """Class names from a labels file (one per line, blank lines ignored); count must match the model."""
    try:
        names = tuple(line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()
                      if line.strip())
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError("labels_path", path, f"a readable UTF-8 text file ({exc})") from exc
    if len(names) != num_classes:
        raise ParameterError("labels_path", path, f"a file with exactly {num_classes} class names "
                             f"(the model's class count), found {len(names)}")
    return names


