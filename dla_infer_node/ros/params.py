"""Every node parameter, declared once, and its validation — without rclpy.

The table :data:`PARAMETERS` is the single source: :mod:`dla_infer_node.ros.node` turns it into rclpy
``ParameterDescriptor`` objects, the tests check ``config/*.yaml`` against it, and the README's table is
generated from the same rows. Validation here raises :class:`~dla_infer_node.core.errors.ParameterError`
naming the parameter, its value and what is allowed, so a bad configuration ends the node with one line
before any backend is opened.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dla_infer_node.artifact.sidecar import default_sidecar
from dla_infer_node.core.errors import ModelError, ParameterError
from dla_infer_node.core.resources import find_model_file, metadata_for_model, model_dirs

ParamValue = str | int | float | bool | tuple[str, ...] | tuple[int, ...]

BACKENDS = ("onnxruntime", "cudla")
RUNTIME_MODES = ("hybrid",)
PREPROCESS_DEVICES = ("auto", "cpu", "gpu")
CLASS_ID_MODES = ("name", "index")
INPUT_TRANSPORTS = ("raw", "compressed")
QOS_RELIABILITIES = ("best_effort", "reliable")
EXECUTORS = ("single", "events")

SHIPPED_MODEL = "shapes_yolo.onnx"

# Why standalone is refused, in one line (the node prints exactly this at startup).
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
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParameterError(self.name, value, self.allowed())
            self._check_range(value)
            return int(value)
        if self.type == "double":
            # ints are accepted and widened: a YAML "1" for a threshold should not be a type error
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ParameterError(self.name, value, self.allowed())
            self._check_range(value)
            return float(value)
        if self.type in ("string_array", "integer_array"):
            if value is None and self.min_items == 0:  # a parameters file's "[]" arrives without a type
                return ()
            kind = str if self.type == "string_array" else int
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) \
                    or len(value) < self.min_items \
                    or not all(isinstance(v, kind) and not isinstance(v, bool) and v != "" for v in value):
                raise ParameterError(self.name, list(value) if isinstance(value, tuple) else value,
                                     self.allowed())
            for v in value:
                if kind is int:
                    self._check_range(v, shown=list(value))
            return tuple(value)
        if not isinstance(value, str):
            raise ParameterError(self.name, value, self.allowed())
        if self.choices and value not in self.choices:
            if self.name == "runtime_mode":
                raise ParameterError(self.name, value, STANDALONE_EXPLANATION if value == "standalone"
                                     else self.allowed())
            raise ParameterError(self.name, value, self.allowed())
        return value

    def _check_range(self, value: float, shown: Any = None) -> None:
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise ParameterError(self.name, value if shown is None else shown, self.allowed())


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
       "refused at startup with the reason.", choices=("hybrid",)),
    ParamSpec("dla_core", "integer", 0, "DLA core for backend cudla (AGX Orin has cores 0 and 1).",
              min=0, max=1),
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
    _s("input_transport", "raw", "'raw': subscribe 'image' (sensor_msgs/Image); 'compressed': subscribe "
       "'image/compressed' (sensor_msgs/CompressedImage, JPEG/PNG).", choices=INPUT_TRANSPORTS),
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
# inherited from the node's own parameter of the same name when a camera does not set it
_INHERITED = ("input_transport", "qos_reliability", "qos_depth")
_CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
MAX_CAMERAS = 16


@dataclass(frozen=True)
class CameraConfig:
    """One camera of a multi-camera node: where its frames come from and which core serves them."""

    name: str
    topic: str
    input_transport: str
    qos_reliability: str
    qos_depth: int
    dla_core: int


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


def validate_value(name: str, value: Any) -> ParamValue:
    """Validate one value against its table row (used by the live on-set callback); a camera's own
    parameter ("<camera>.<key>") against its camera row."""
    spec = camera_spec(name)
    if spec is not None:
        return replace(spec, name=name).validate(value)
    if name not in SPECS:
        raise ParameterError(name, value, "a declared parameter: " + ", ".join(SPECS))
    return SPECS[name].validate(value)


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


def gpu_preprocess_possible() -> bool:
    """Whether the fused GPU preprocess can run here: it needs cuda.core (cuda-python), which a machine
    driving the DLA through cuda.bindings alone (or the emulator's CPU fake driver) may lack."""
    import importlib.util

    try:
        return importlib.util.find_spec("cuda.core") is not None
    except (ImportError, ValueError):  # no 'cuda' package at all
        return False


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
    if v["preprocess_device"] == "auto":  # resolved here, so every later check sees a concrete device
        v["preprocess_device"] = "gpu" if v["backend"] == "cudla" and gpu_preprocess_possible() else "cpu"
    if not check_files:
        return NodeConfig(**v)
    if v["backend"] == "onnxruntime":
        if v["preprocess_device"] != "cpu":
            raise ParameterError("preprocess_device", v["preprocess_device"],
                                 "'cpu' with backend 'onnxruntime' ('gpu' needs backend 'cudla')")
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
