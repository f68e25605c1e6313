"""Model metadata: the facts a decoder and a preprocessor need, read from a YAML file next to the model.

The file is the single source of truth for input size, channel order, normalisation, decoder kind,
strides/anchors and class names; backends check the model they load against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dla_infer_node.core.errors import ModelError

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


def _require(doc: Mapping[str, Any], key: str, where: str, path: Path) -> Any:
    if key not in doc:
        raise ModelError(f"missing key '{where}{key}'", call="load_metadata", params={"path": str(path)})
    return doc[key]


def _ints(value: Any, what: str, path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"'{what}' must be a list of integers, got {value!r}",
                         call="load_metadata", params={"path": str(path)}) from exc


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


def class_names(doc: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """``classes`` (a list of names); ``labels`` is its synonym when it is a list, or names a labels file
    (one name per line, relative to the metadata file) when it is a string. Empty when neither is given."""
    where = {"path": str(path)}
    names = doc.get("classes")
    labels = doc.get("labels")
    if isinstance(labels, str):
        if names is None:
            file = Path(labels) if Path(labels).is_absolute() else path.parent / labels
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ModelError(f"labels file {labels!r} unreadable ({exc})", call="load_metadata",
                                 params=where) from exc
            return tuple(line.strip() for line in text.splitlines() if line.strip())
        labels = None
    if labels is not None:
        if names is not None and list(labels) != list(names):
            raise ModelError("'classes' and 'labels' (its synonym) both given and they differ",
                             call="load_metadata", params=where)
        names = labels
    if names is None:
        return ()
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise ModelError(f"'classes' must be a list of names, got {names!r}", call="load_metadata",
                         params=where)
    return tuple(str(c) for c in names)


def _check_yolov8_raw(decoder: DecoderSpec, n_outputs: int, path: Path) -> None:
    if not decoder.strides or n_outputs not in (len(decoder.strides), 2 * len(decoder.strides)):
        raise ModelError(f"yolov8_raw needs decoder.strides and per stride one output (box+cls) or two "
                         f"(box, cls); got {len(decoder.strides)} strides, {n_outputs} outputs",
                         call="load_metadata", params={"path": str(path)})
    if decoder.reg_max < 1:
        raise ModelError(f"decoder.reg_max must be >= 1, got {decoder.reg_max}", call="load_metadata",
                         params={"path": str(path)})


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
    inp = _require(doc, "input", "", path)
    dec = _require(doc, "decoder", "", path)
    order = str(inp.get("channel_order", "rgb"))
    if order not in CHANNEL_ORDERS:
        raise ModelError(f"input.channel_order {order!r} not in {CHANNEL_ORDERS}",
                         call="load_metadata", params={"path": str(path)})
    mean = tuple(float(v) for v in inp.get("mean", (0.0, 0.0, 0.0)))
    std = tuple(float(v) for v in inp.get("std", (255.0, 255.0, 255.0)))
    if len(mean) != 3 or len(std) != 3 or any(s == 0 for s in std):
        raise ModelError("input.mean/std need 3 values each, std non-zero",
                         call="load_metadata", params={"path": str(path)})
    input_spec = InputSpec(
        name=str(_require(inp, "name", "input.", path)),
        width=int(_require(inp, "width", "input.", path)),
        height=int(_require(inp, "height", "input.", path)),
        channel_order=order,
        mean=(mean[0], mean[1], mean[2]),
        std=(std[0], std[1], std[2]),
        pad_value=int(inp.get("pad_value", 114)),
    )
    kind = str(_require(dec, "kind", "decoder.", path))
    if kind not in DECODER_KINDS:
        raise ModelError(f"decoder.kind {kind!r} not in {DECODER_KINDS}",
                         call="load_metadata", params={"path": str(path)})
    anchors_doc: Sequence[Sequence[float]] = dec.get("anchors", ()) or ()
    anchors = tuple(
        tuple((float(a[i]), float(a[i + 1])) for i in range(0, len(a), 2)) for a in anchors_doc
    )
    classes = class_names(doc, path)
    if not classes and "num_classes" not in dec:
        raise ModelError("no class names: give 'classes' (a list of names) or 'decoder.num_classes' (names "
                         "then come from the ONNX metadata 'names')", call="load_metadata",
                         params={"path": str(path)})
    decoder = DecoderSpec(
        kind=kind,
        num_classes=int(dec.get("num_classes", len(classes))),
        strides=_ints(dec.get("strides", ()), "decoder.strides", path),
        anchors=anchors,
        reg_max=int(dec.get("reg_max", 16)),
    )
    if classes and decoder.num_classes != len(classes):
        raise ModelError(f"decoder.num_classes={decoder.num_classes} but {len(classes)} class names",
                         call="load_metadata", params={"path": str(path)})
    if kind == "yolov5_raw" and len(anchors) != len(decoder.strides):
        raise ModelError("yolov5_raw needs one anchor list per stride",
                         call="load_metadata", params={"path": str(path)})
    if kind == "yolov8_raw":
        _check_yolov8_raw(decoder, len(_require(doc, "outputs", "", path)), path)
    outputs = tuple(
        TensorSpec(name=str(_require(o, "name", "outputs[].", path)),
                   shape=_ints(_require(o, "shape", "outputs[].", path), "outputs[].shape", path))
        for o in _require(doc, "outputs", "", path)
    )
    known = {"input", "decoder", "outputs", "classes", "name"}
    if not isinstance(doc.get("labels"), str):  # a labels *file* stays in extra (the shipped model has one)
        known.add("labels")
    return ModelMetadata(
        path=path,
        name=str(doc.get("name", path.stem)),
        input=input_spec,
        decoder=decoder,
        outputs=outputs,
        classes=classes,
        extra={k: v for k, v in doc.items() if k not in known},
    )


def load_metadata(path: str | Path) -> ModelMetadata:
    """Read and validate a metadata YAML file; every problem is a :class:`ModelError` naming the file."""
    import yaml  # local: keeps the import graph of the package light

    p = Path(path)
    if not p.is_file():
        raise ModelError("metadata file not found", call="load_metadata", params={"path": str(p)})
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ModelError(f"cannot read metadata: {exc}", call="load_metadata",
                         params={"path": str(p)}) from exc
    return parse_metadata(doc, p)
