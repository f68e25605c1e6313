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

DECODER_KINDS = ("yolov5_raw", "yolov5_final", "yolov8")
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
    classes = tuple(str(c) for c in _require(doc, "classes", "", path))
    decoder = DecoderSpec(
        kind=kind,
        num_classes=int(dec.get("num_classes", len(classes))),
        strides=_ints(dec.get("strides", ()), "decoder.strides", path),
        anchors=anchors,
    )
    if decoder.num_classes != len(classes):
        raise ModelError(f"decoder.num_classes={decoder.num_classes} but {len(classes)} class names",
                         call="load_metadata", params={"path": str(path)})
    if kind == "yolov5_raw" and len(anchors) != len(decoder.strides):
        raise ModelError("yolov5_raw needs one anchor list per stride",
                         call="load_metadata", params={"path": str(path)})
    outputs = tuple(
        TensorSpec(name=str(_require(o, "name", "outputs[].", path)),
                   shape=_ints(_require(o, "shape", "outputs[].", path), "outputs[].shape", path))
        for o in _require(doc, "outputs", "", path)
    )
    known = {"input", "decoder", "outputs", "classes", "name"}
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
