"""The settings table: every node parameter, its type, default, meaning and allowed values, and the one
validation of each value -- ROS-free, so the node, the managed node, the backends and the command-line
tools check a setting by the same row and refuse it with the same words.

:data:`PARAMETERS` is the single source: ``ros/param_binding.py`` turns the rows into rclpy parameter
descriptors, ``ros/node_config.py`` resolves a whole node configuration (paths, files) from them, the
backends and :class:`~dla_infer_node.core.pipeline.Detector` validate their values by the same rows,
``config/*.yaml`` mirror it (a test checks) and the README's table is generated from it. A refusal is a
:class:`~dla_infer_node.core.errors.ParameterError` naming the setting, its value and what is allowed.

Two things are easily confused and kept apart here: the ARTIFACT (how the loadable was compiled:
``trtexec --buildDLAStandalone``) and the RUNTIME mode (how cuDLA runs it: hybrid). Only the hybrid
runtime mode exists in ``cuda.bindings.cudla``; :data:`STANDALONE_EXPLANATION` is the one wording of why
``runtime_mode: standalone`` is refused.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dla_infer_node.core.errors import ParameterError

ParamValue = str | int | float | bool | tuple[str, ...] | tuple[int, ...]

BACKENDS = ("onnxruntime", "cudla")
RUNTIME_MODES = ("hybrid",)
PREPROCESS_DEVICES = ("auto", "cpu", "gpu")
CLASS_ID_MODES = ("name", "index")
INPUT_TRANSPORTS = ("raw", "compressed")
QOS_RELIABILITIES = ("best_effort", "reliable")
EXECUTORS = ("single", "events")

SHIPPED_MODEL = "shapes_yolo.onnx"

# Why standalone is refused, in one line: the node, the managed node, the backends and the tools all say
# exactly this (the refusal's "allowed" part, after the parameter's name and value).
STANDALONE_EXPLANATION = (
    "'hybrid' only: '--buildDLAStandalone' describes how the ARTIFACT was compiled (a DLA loadable that "
    "runs without TensorRT), and such a loadable runs in cuDLA hybrid mode; the Python binding "
    "cuda.bindings.cudla does not support the standalone runtime mode (NvSci buffers/fences)"
)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: ROS type name, default, meaning, allowed values, and whether it can change live."""

    name: str
    type: str  # "string" | "integer" | "double" | "bool" | "string_array" | "integer_array"
    default: ParamValue
    description: str
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    read_only: bool = True
    min_items: int = 1  # arrays: the fewest entries allowed

    def allowed(self) -> str:
        """Human text for what this parameter accepts (used in error messages and docs)."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.type == "integer":
            return f"an integer in [{int(self.min or 0)}, {int(self.max or 0)}]"
        if self.type == "double":
            return f"a number in [{self.min}, {self.max}]"
        if self.type == "bool":
            return "true or false"
        if self.type == "string_array":
            return "a non-empty list of strings" if self.min_items else "a list of strings"
        if self.type == "integer_array":
            return (f"a list of {'at least one ' if self.min_items else ''}integers in "
                    f"[{int(self.min or 0)}, {int(self.max or 0)}]")
        return "a string"

    def validate(self, value: Any) -> ParamValue:
        """Check type, range and choices; returns the value in its canonical Python type."""
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ParameterError(self.name, value, self.allowed())
            return value
        if self.type == "integer":
            # numbers.Integral: numpy integers too (the Detector's callers may pass them)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ParameterError(self.name, value, self.allowed())
            self._check_range(int(value), value)
            return int(value)
        if self.type == "double":
            # ints are accepted and widened: a YAML "1" for a threshold should not be a type error
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
                raise ParameterError(self.name, value, self.allowed())
            self._check_range(float(value), value)
            return float(value)
        if self.type in ("string_array", "integer_array"):
            return self._validate_array(value)
        if not isinstance(value, str):
            raise ParameterError(self.name, value, self.allowed())
        if self.choices and value not in self.choices:
            if self.name == "runtime_mode":
                raise ParameterError(self.name, value, STANDALONE_EXPLANATION if value == "standalone"
                                     else self.allowed())
            raise ParameterError(self.name, value, self.allowed())
        return value

    def _validate_array(self, value: Any) -> tuple[Any, ...]:
        if value is None and self.min_items == 0:  # a parameters file's "[]" arrives without a type
            return ()
        kind: type = str if self.type == "string_array" else numbers.Integral
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) \
                or len(value) < self.min_items \
                or not all(isinstance(v, kind) and not isinstance(v, bool) and v != "" for v in value):
            raise ParameterError(self.name, list(value) if isinstance(value, tuple) else value,
                                 self.allowed())
        if kind is not str:
            for v in value:
                self._check_range(int(v), list(value))
            return tuple(int(v) for v in value)
        return tuple(value)

    def _check_range(self, number: float, value: Any) -> None:
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            raise ParameterError(self.name, value, self.allowed())


def _s(name: str, default: str, description: str, *, choices: tuple[str, ...] = (),
       read_only: bool = True) -> ParamSpec:
    return ParamSpec(name, "string", default, description, choices=choices, read_only=read_only)


PARAMETERS: tuple[ParamSpec, ...] = (
    _s("backend", "onnxruntime", "Inference backend: 'onnxruntime' (CPU, runs anywhere) or 'cudla' "
       "(NVIDIA DLA through cuda.bindings.cudla, hybrid mode).", choices=BACKENDS),
    _s("model_path", "", "ONNX model for backend onnxruntime. Empty: the package's shipped model "
       f"(models/{SHIPPED_MODEL})."),
    _s("metadata_path", "", "Model metadata YAML (input size, normalisation, decoder, classes). Empty: "
       "next to model_path, '<stem>.meta.yaml' (onnxruntime) or the one the artifact sidecar names "
       "(cudla; if given, it must describe the same model)."),
    _s("loadable_path", "", "DLA loadable (built with trtexec --buildDLAStandalone) for backend cudla."),
    _s("artifact_path", "", "Sidecar of the loadable (io tensor formats, int8 scales, build command, model "
       "metadata) for backend cudla. Empty: '<loadable_path>.yaml'."),
    _s("runtime_mode", "hybrid", "cuDLA runtime mode. Only 'hybrid' (cudla.Mode.CUDA_DLA); 'standalone' is "
       "refused at startup with the reason.", choices=RUNTIME_MODES),
    ParamSpec("dla_core", "integer", 0, "DLA core for backend cudla (AGX Orin has cores 0 and 1).",
              min=0, max=1),
    ParamSpec("frames_in_flight", "integer", 2, "Frames on their way to each DLA core at once (backend "
              "cudla; one buffer set each). 2: while the DLA runs one frame, the core's worker preprocesses "
              "and submits the next and then decodes and publishes the first, so the core does not wait for "
              "the CPU: more frames answered when a core is the limit, each taken a task earlier (it waits "
              "on the core, not in its camera's slot). 1: one frame at a time. The onnxruntime backend "
              "always runs one.", min=1, max=2),
    _s("preprocess_device", "auto", "Where letterbox/normalise/pack runs: 'cpu', 'gpu' (one CUDA kernel "
       "into the registered DLA input buffer; backend cudla only), or 'auto' (gpu with backend cudla "
       "where cuda.core is installed, cpu otherwise; the node declares the resolved value).",
       choices=PREPROCESS_DEVICES),
    ParamSpec("ort_threads", "integer", 0, "ONNX Runtime intra-op threads (0: ONNX Runtime's default).",
              min=0, max=256),
    ParamSpec("ort_providers", "string_array", ("CPUExecutionProvider",),
              "ONNX Runtime execution providers, in order of preference."),
    _s("labels_path", "", "Optional class-name file (one name per line) overriding the names in the "
       "model metadata; must have one line per model class."),
    _s("class_id_mode", "name", "What results[0].hypothesis.class_id carries: 'name' (the class name) or "
       "'index' (the class index as a decimal string).", choices=CLASS_ID_MODES),
    ParamSpec("confidence_threshold", "double", 0.25, "Minimum detection score (objectness x class). "
              "Changeable at run time.", min=0.0, max=1.0, read_only=False),
    ParamSpec("nms_iou_threshold", "double", 0.45, "IoU above which NMS suppresses a box of the same "
              "class. Changeable at run time.", min=0.0, max=1.0, read_only=False),
    ParamSpec("max_detections", "integer", 100, "Most detections published per frame. Changeable at run "
              "time.", min=1, max=1000, read_only=False),
    _s("input_transport", "raw", "'raw': subscribe 'image' (sensor_msgs/Image in any encoding of the "
       "encodings table: RGB/BGR/mono at 8 or 16 bits, YUYV/UYVY, NV12/NV21, Bayer at 8 or 16 bits); "
       "'compressed': subscribe 'image/compressed' (sensor_msgs/CompressedImage: 8-bit JPEG; 8- or 16-bit "
       "PNG, grey or colour, alpha ignored; 16-bit values scaled to 8 bits by 255/65535, as cv_bridge "
       "scales mono16).", choices=INPUT_TRANSPORTS),
    ParamSpec("max_input_pixels", "integer", 16_777_216, "Largest compressed image (width x height) decoded; "
              "the size is read from the JPEG/PNG header before decoding, so a small file declaring a huge "
              "image is refused (counted as bad input) without allocating it. Only JPEG and PNG are "
              "accepted for input_transport 'compressed' (OpenCV would also decode BMP, TIFF, PNM..., whose "
              "headers are not checked).", min=1, max=1 << 30),
    _s("qos_reliability", "best_effort", "Reliability of the image subscription.", choices=QOS_RELIABILITIES),
    ParamSpec("qos_depth", "integer", 5, "History depth of the image subscription (keep last N). More than 1 "
              "so a large frame arriving while the executor is busy does not overwrite one not yet taken "
              "(measured: 1080p at 30 Hz, 89/90 at depth 1, 90/90 at 5); the worker still infers only the "
              "newest.",
              min=1, max=100),
    ParamSpec("debug_image", "bool", True, "Publish 'debug_image' (bgr8 overlay); it is rendered only while "
              "the topic has subscribers. Changeable at run time.", read_only=False),
    ParamSpec("diagnostics_period", "double", 1.0, "Seconds between /diagnostics messages (0: off).",
              min=0.0, max=60.0),
    ParamSpec("input_loss_warn_ratio", "double", 0.05, "/diagnostics goes WARN when more than this share "
              "of the frames sent to the node in a diagnostics period were lost on the way (counted from "
              "publication sequence numbers and the rmw's message-lost event). Changeable at run time.",
              min=0.0, max=1.0, read_only=False),
    ParamSpec("input_stall_periods", "double", 5.0, "/diagnostics goes WARN when a matched publisher has "
              "sent no frame for this many of its periods (median arrival interval; 1 s until two frames "
              "came). Changeable at run time.", min=1.0, max=1000.0, read_only=False),
    _s("executor", "single", "rclpy executor that takes the images: 'single' (SingleThreadedExecutor, every "
       "distro) or 'events' (rclpy.experimental.EventsExecutor, in C++, less per-message overhead; ROS 2 "
       "Kilted or newer, refused at startup where rclpy lacks it).", choices=EXECUTORS),
    ParamSpec("cameras", "string_array", (), "Names of the cameras this one node serves. Empty: one camera, "
              "as set by input_transport, qos_reliability, qos_depth and dla_core, on 'image'. Each name N "
              "(letters, digits, '_') has its own N.topic, N.input_transport, N.qos_reliability, N.qos_depth "
              "and N.dla_core, its outputs under N/ (N/detections, N/debug_image, N/label_info), its own "
              "latest-frame slot and its own /diagnostics status.", min_items=0),
    ParamSpec("dla_cores", "integer_array", (), "DLA cores to open with several cameras: one backend per "
              "core (loaded once, one CUDA context), each serving its cameras in turn. Empty: [dla_core]. "
              "With backend onnxruntime each entry is one session and worker thread.", min=0, max=1,
              min_items=0),
)

SPECS: dict[str, ParamSpec] = {p.name: p for p in PARAMETERS}
LIVE_PARAMETERS = tuple(p.name for p in PARAMETERS if not p.read_only)


# Each camera's own parameters, "<camera>.<key>"; an empty topic / ROUND_ROBIN core take what the text says.
ROUND_ROBIN = -1
# inherited from the node's own parameter of the same name when a camera does not set it
_INHERITED = ("input_transport", "qos_reliability", "qos_depth")
_CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
MAX_CAMERAS = 16
CAMERA_PARAMETERS: tuple[ParamSpec, ...] = (
    _s("topic", "", "The camera's image topic (relative names resolve in the node's namespace). Empty: "
       "'<camera>/image', or '<camera>/image/compressed' for input_transport 'compressed'."),
    _s("input_transport", "raw", "'raw' (sensor_msgs/Image) or 'compressed' (sensor_msgs/CompressedImage); "
       "default: the node's input_transport.", choices=INPUT_TRANSPORTS),
    _s("qos_reliability", "best_effort", "Reliability of this camera's subscription; default: the node's "
       "qos_reliability.", choices=QOS_RELIABILITIES),
    ParamSpec("qos_depth", "integer", 5, "History depth of this camera's subscription; default: the node's "
              "qos_depth.", min=1, max=100),
    ParamSpec("dla_core", "integer", ROUND_ROBIN, "The DLA core (one of dla_cores) that serves this camera; "
              "-1: the core with the fewest cameras so far, in camera order (round robin).", min=-1, max=1),
)
CAMERA_SPECS: dict[str, ParamSpec] = {p.name: p for p in CAMERA_PARAMETERS}


@dataclass(frozen=True)
class CameraConfig:
    """One camera of a multi-camera node: where its frames come from and which core serves them."""

    name: str
    topic: str
    input_transport: str
    qos_reliability: str
    qos_depth: int
    dla_core: int


def camera_spec(name: str) -> ParamSpec | None:
    """The camera row of a "<camera>.<key>" parameter name, or None."""
    camera, _, key = name.rpartition(".")
    return CAMERA_SPECS.get(key) if camera else None


def camera_configs(values: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[CameraConfig, ...]:
    """Each camera of ``node["cameras"]`` with its own parameters from ``values`` ("<camera>.<key>"), the
    node's for what it does not set, and its core: the one it names, else round robin over the cores."""
    names: tuple[str, ...] = node["cameras"]
    if len(names) > MAX_CAMERAS:
        raise ParameterError("cameras", list(names), f"at most {MAX_CAMERAS} camera names")
    for name in names:
        if not _CAMERA_NAME.match(name):
            raise ParameterError("cameras", list(names), f"names of letters, digits and '_' starting with a "
                                 f"letter (a ROS name token); {name!r} is not")
    if len(set(names)) != len(names):
        raise ParameterError("cameras", list(names), "distinct names")
    cores: tuple[int, ...] = node["dla_cores"] or (node["dla_core"],)
    if len(set(cores)) != len(cores):
        raise ParameterError("dla_cores", list(cores), "distinct cores")
    load = dict.fromkeys(cores, 0)
    out = []
    for name in names:
        v: dict[str, Any] = {key: validate_value(f"{name}.{key}", values.get(f"{name}.{key}", spec.default))
                             for key, spec in CAMERA_SPECS.items()}
        for key in _INHERITED:
            if f"{name}.{key}" not in values:
                v[key] = node[key]
        core = int(v["dla_core"])
        if core == ROUND_ROBIN:
            core = min(cores, key=lambda c: load[c])  # the first of the least loaded: round robin
        elif core not in load:
            raise ParameterError(f"{name}.dla_core", core,
                                 f"one of dla_cores {list(cores)} (or -1: round robin)")
        load[core] += 1
        default_topic = f"{name}/image" + ("/compressed" if v["input_transport"] == "compressed" else "")
        out.append(CameraConfig(name, str(v["topic"]) or default_topic, str(v["input_transport"]),
                                str(v["qos_reliability"]), int(v["qos_depth"]), core))
    return tuple(out)


def validate_value(name: str, value: Any) -> ParamValue:
    """Validate one value against its table row (used by the live on-set callback); a camera's own
    parameter ("<camera>.<key>") against its camera row."""
    spec = camera_spec(name)
    if spec is not None:
        return replace(spec, name=name).validate(value)
    if name not in SPECS:
        raise ParameterError(name, value, "a declared parameter: " + ", ".join(SPECS))
    return SPECS[name].validate(value)


def validate_number(name: str, value: Any) -> float:
    """:func:`validate_value` for a ``double`` row, typed as such."""
    return float(validate_value(name, value))  # type: ignore[arg-type]


def validate_integer(name: str, value: Any) -> int:
    """:func:`validate_value` for an ``integer`` row, typed as such."""
    return int(validate_value(name, value))  # type: ignore[arg-type]


def gpu_preprocess_possible() -> bool:
    """Whether the fused GPU preprocess can run here: it needs cuda.core (cuda-python), which a machine
    driving the DLA through cuda.bindings alone (or the emulator's CPU fake driver) may lack."""
    try:
        return importlib.util.find_spec("cuda.core") is not None
    except (ImportError, ValueError):  # no 'cuda' package at all
        return False


def resolve_preprocess_device(backend: str, device: str) -> str:
    """The concrete device for ``preprocess_device`` (``auto``: gpu with backend cudla where the fused
    kernel can run, cpu otherwise); 'gpu' with backend onnxruntime is refused."""
    if device == "auto":
        return "gpu" if backend == "cudla" and gpu_preprocess_possible() else "cpu"
    if backend == "onnxruntime" and device != "cpu":
        raise ParameterError("preprocess_device", device,
                             "'cpu' with backend 'onnxruntime' ('gpu' needs backend 'cudla')")
    return device


def markdown_table() -> str:
    """The README's parameter table, generated from :data:`PARAMETERS` and, as ``<camera>.<key>``, from
    :data:`CAMERA_PARAMETERS`."""
    rows = ["| name | type | default | read-only | description / allowed values |",
            "| --- | --- | --- | --- | --- |"]
    for p in (*PARAMETERS, *(replace(c, name=f"<camera>.{c.name}") for c in CAMERA_PARAMETERS)):
        default = list(p.default) if isinstance(p.default, tuple) else p.default
        shown = f"`{default!r}`" if not isinstance(default, bool) else f"`{str(default).lower()}`"
        text = p.description
        if p.choices or p.type in ("integer", "double", "integer_array"):
            text += f" Allowed: {p.allowed()}."
        rows.append(f"| `{p.name}` | {p.type} | {shown} | {'yes' if p.read_only else 'no'} | {text} |")
    return "\n".join(rows)
