"""Model metadata: the facts a decoder and a preprocessor need, read from a YAML file next to the model.

The file is the single source of truth for input size, channel order, normalisation, decoder kind,
strides/anchors and class names; backends check the model they load against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.yaml_file import read_yaml

DECODER_KINDS = ("yolov5_raw", "yolov5_final", "yolov8", "yolov8_raw")
CHANNEL_ORDERS = ("rgb", "bgr")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class InputSpec:
    name: str
    width: int
    height: int
    channel_order: str = "rgb"
    # network input = (pixel - mean) / std, per channel in channel_order
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    pad_value: int = 114


@dataclass(frozen=True)
class DecoderSpec:
    kind: str
    num_classes: int
    strides: tuple[int, ...] = ()
    # anchors[i] are the (w, h) pairs in input pixels for strides[i] (yolov5_raw only)
    anchors: tuple[tuple[tuple[float, float], ...], ...] = ()
    # bins per box side of the DFL head (yolov8_raw only; ultralytics uses 16)
    reg_max: int = 16


@dataclass(frozen=True)
class ModelMetadata:
    path: Path
    name: str
    input: InputSpec
    decoder: DecoderSpec
    outputs: tuple[TensorSpec, ...]
    classes: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self, relative: str) -> Path:
        """A path named in the metadata, relative to the metadata file's folder."""
        p = Path(relative)
        return p if p.is_absolute() else self.path.parent / p


def _bad(path: Path, key: str, value: Any, allowed: str) -> ModelError:
    """The one-line error for a metadata key: file, key, value (shortened) and what is allowed."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return ModelError(f"'{key}' = {shown} is invalid: allowed {allowed}", call="load_metadata",
                      params={"path": str(path)})


def _require(doc: Mapping[str, Any], key: str, where: str, path: Path) -> Any:
    if key not in doc:
        raise ModelError(f"missing key '{where}{key}'", call="load_metadata", params={"path": str(path)})
    return doc[key]


def _mapping(value: Any, key: str, path: Path) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(path, key, value, "a mapping")
    return value


def _list(value: Any, key: str, path: Path) -> Sequence[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _bad(path, key, value, "a list")
    return value


def _int(value: Any, key: str, path: Path, least: int = 0) -> int:
    # bool is an int in Python, and YAML's 'yes'/'true' parse to it: not a count or a size
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _bad(path, key, value, f"an integer >= {least}")
    return value


def _float(value: Any, key: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(path, key, value, "a finite number")
    return float(value)


def _text(value: Any, key: str, path: Path) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(path, key, value, "a non-empty string")
    return value


def _ints(value: Any, what: str, path: Path, least: int = 0) -> tuple[int, ...]:
    return tuple(_int(v, f"{what}[{i}]", path, least) for i, v in enumerate(_list(value, what, path)))


def _floats(value: Any, what: str, path: Path, count: int | None = None) -> tuple[float, ...]:
    out = tuple(_float(v, f"{what}[{i}]", path) for i, v in enumerate(_list(value, what, path)))
    if count is not None and len(out) != count:
        raise _bad(path, what, value, f"a list of {count} numbers")
    return out


def class_names_from_onnx_metadata(text: str) -> tuple[str, ...]:
    """Class names from the ONNX metadata ``names`` entry as ultralytics writes it: the text of a Python
    dict ``{0: 'person', 1: 'bicycle', ...}`` (or a list). Parsed with ``ast.literal_eval``, never
    ``eval``."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ModelError(f"ONNX metadata 'names' is not a dict/list literal: {text[:60]!r}",
                         call="class_names_from_onnx_metadata") from exc
    if isinstance(value, dict):
        try:
            ids = sorted(int(k) for k in value)
        except (TypeError, ValueError) as exc:
            raise ModelError("ONNX metadata 'names' keys are not class ids",
                             call="class_names_from_onnx_metadata") from exc
        if ids != list(range(len(ids))):
            raise ModelError(f"ONNX metadata 'names' ids are not 0..{len(ids) - 1}",
                             call="class_names_from_onnx_metadata")
        return tuple(str(value[k]) for k in sorted(value, key=int))
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    raise ModelError(f"ONNX metadata 'names' is a {type(value).__name__}, not a dict or list",
                     call="class_names_from_onnx_metadata")


def _names(value: Any, key: str, path: Path) -> tuple[str, ...]:
    """A list of class names; each a string or a number (YAML reads ``- 1`` as one), never a list or a
    mapping (whose text could be anything, an alias expansion included)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _bad(path, key, value, "a list of class names" + (" or a labels file name" if key == "labels"
                                                                 else ""))
    names = value
    for i, n in enumerate(names):
        if isinstance(n, (list, tuple, dict, Mapping)) or n is None:
            raise _bad(path, f"{key}[{i}]", n, "a class name (a string)")
    return tuple(str(n) for n in names)


def _labels_file(file: Path, path: Path) -> tuple[str, ...]:
    """Class names from the labels file the metadata ``path`` names, one per line (blank lines skipped);
    a one-line ModelError when it is not a regular file of UTF-8 text."""
    where = {"path": str(path)}
    if not file.is_file():  # missing, a folder, or a FIFO that would block the read forever
        raise ModelError(f"labels file {str(file)!r} is not a regular file", call="load_metadata",
                         params=where)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"labels file {str(file)!r} unreadable ({' '.join(str(exc).split())})",
                         call="load_metadata", params=where) from exc
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def class_names(doc: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """``classes`` (a list of names); ``labels`` is its synonym when it is a list, or names a labels file
    (one name per line, relative to the metadata file) when it is a string. Empty when neither is given."""
    where = {"path": str(path)}
    names = None if doc.get("classes") is None else _names(doc["classes"], "classes", path)
    labels = doc.get("labels")
    if isinstance(labels, str):
        if names is None:
            file = Path(labels) if Path(labels).is_absolute() else path.parent / labels
            return _labels_file(file, path)
        labels = None
    if labels is not None:
        listed = _names(labels, "labels", path)
        if names is not None and listed != names:
            raise ModelError("'classes' and 'labels' (its synonym) both given and they differ",
                             call="load_metadata", params=where)
        names = listed
    return () if names is None else names


def _check_yolov8_raw(decoder: DecoderSpec, n_outputs: int, path: Path) -> None:
    if not decoder.strides or n_outputs not in (len(decoder.strides), 2 * len(decoder.strides)):
        raise ModelError(f"yolov8_raw needs decoder.strides and per stride one output (box+cls) or two "
                         f"(box, cls); got {len(decoder.strides)} strides, {n_outputs} outputs",
                         call="load_metadata", params={"path": str(path)})


def with_class_names(metadata: ModelMetadata, names: Sequence[str], source: str) -> ModelMetadata:
    """``metadata`` with class names from elsewhere (the model file), when its YAML gave none."""
    from dataclasses import replace

    if metadata.classes:
        return metadata
    if len(names) != metadata.decoder.num_classes:
        raise ModelError(f"{len(names)} class names in {source} but decoder.num_classes="
                         f"{metadata.decoder.num_classes}", call="with_class_names",
                         params={"metadata": str(metadata.path)})
    return replace(metadata, classes=tuple(names))


def parse_metadata(doc: Mapping[str, Any], path: Path) -> ModelMetadata:
    """Validate a metadata mapping (as read from YAML) and build the record."""
    if not isinstance(doc, Mapping):
        raise ModelError("metadata must be a mapping", call="load_metadata", params={"path": str(path)})
    inp = _mapping(_require(doc, "input", "", path), "input", path)
    dec = _mapping(_require(doc, "decoder", "", path), "decoder", path)
    order = inp.get("channel_order", "rgb")
    if order not in CHANNEL_ORDERS:
        raise _bad(path, "input.channel_order", order, f"one of {CHANNEL_ORDERS}")
    mean = _floats(inp.get("mean", (0.0, 0.0, 0.0)), "input.mean", path, 3)
    std = _floats(inp.get("std", (255.0, 255.0, 255.0)), "input.std", path, 3)
    if any(s == 0 for s in std):
        raise _bad(path, "input.std", list(std), "3 non-zero numbers")
    input_spec = InputSpec(
        name=_text(_require(inp, "name", "input.", path), "input.name", path),
        width=_int(_require(inp, "width", "input.", path), "input.width", path, 1),
        height=_int(_require(inp, "height", "input.", path), "input.height", path, 1),
        channel_order=order,
        mean=(mean[0], mean[1], mean[2]),
        std=(std[0], std[1], std[2]),
        pad_value=_int(inp.get("pad_value", 114), "input.pad_value", path),
    )
    if input_spec.pad_value > 255:
        raise _bad(path, "input.pad_value", input_spec.pad_value, "an integer in [0, 255]")
    kind = _require(dec, "kind", "decoder.", path)
    if kind not in DECODER_KINDS:
        raise _bad(path, "decoder.kind", kind, f"one of {DECODER_KINDS}")
    anchors_doc = _list(dec.get("anchors", ()) or (), "decoder.anchors", path)
    anchors = []
    for i, a in enumerate(anchors_doc):
        flat = _floats(a, f"decoder.anchors[{i}]", path)
        if not flat or len(flat) % 2 or min(flat) <= 0:
            raise _bad(path, f"decoder.anchors[{i}]", a,
                       "a non-empty list of (w, h) pairs of positive sizes: w1, h1, w2, h2")
        anchors.append(tuple((flat[j], flat[j + 1]) for j in range(0, len(flat), 2)))
    classes = class_names(doc, path)
    if not classes and "num_classes" not in dec:
        raise ModelError("no class names: give 'classes' (a list of names) or 'decoder.num_classes' (names "
                         "then come from the ONNX metadata 'names')", call="load_metadata",
                         params={"path": str(path)})
    decoder = DecoderSpec(
        kind=kind,
        num_classes=_int(dec.get("num_classes", len(classes)), "decoder.num_classes", path, 1),
        strides=_ints(dec.get("strides", ()), "decoder.strides", path, least=1),
        anchors=tuple(anchors),
        reg_max=_int(dec.get("reg_max", 16), "decoder.reg_max", path, least=1),
    )
    if classes and decoder.num_classes != len(classes):
        raise ModelError(f"decoder.num_classes={decoder.num_classes} but {len(classes)} class names",
                         call="load_metadata", params={"path": str(path)})
    if kind == "yolov5_raw" and len(anchors) != len(decoder.strides):
        raise ModelError("yolov5_raw needs one anchor list per stride",
                         call="load_metadata", params={"path": str(path)})
    if kind == "yolov8_raw":
        _check_yolov8_raw(decoder, len(_list(_require(doc, "outputs", "", path), "outputs", path)), path)
    outputs = []
    for i, o in enumerate(_list(_require(doc, "outputs", "", path), "outputs", path)):
        o = _mapping(o, f"outputs[{i}]", path)
        key = f"outputs[{i}]"
        outputs.append(TensorSpec(name=_text(_require(o, "name", f"{key}.", path), f"{key}.name", path),
                                  shape=_ints(_require(o, "shape", f"{key}.", path), f"{key}.shape", path)))
    name = doc.get("name", path.stem)
    known = {"input", "decoder", "outputs", "classes", "name"}
    if not isinstance(doc.get("labels"), str):  # a labels *file* stays in extra (the shipped model has one)
        known.add("labels")
    return ModelMetadata(
        path=path,
        name=_text(name, "name", path) if "name" in doc else str(name),
        input=input_spec,
        decoder=decoder,
        outputs=tuple(outputs),
        classes=classes,
        extra={k: v for k, v in doc.items() if k not in known},
    )


def load_metadata(path: str | Path) -> ModelMetadata:
    """Read and validate a metadata YAML file; every problem is a :class:`ModelError` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ModelError("metadata file not found", call="load_metadata", params={"path": str(p)})
    try:
        doc = read_yaml(p)
    except ValueError as exc:
        raise ModelError(f"cannot read metadata: {exc}", call="load_metadata",
                         params={"path": str(p)}) from exc
    return parse_metadata(doc, p)
