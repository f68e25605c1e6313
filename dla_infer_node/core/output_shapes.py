"""Startup check: do the model's output shapes fit the decoder the metadata names?

Backends check the loaded model (ONNX graph outputs, cuDLA sidecar tensors) against ``metadata.outputs``;
this checks those shapes against ``decoder.kind`` and ``decoder.num_classes``. Without it, a class list
that does not match the model is accepted at startup and then every frame fails.
"""

from __future__ import annotations

from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import ModelMetadata, TensorSpec


def _expected_channels(metadata: ModelMetadata, i: int) -> int | None:
    """The channels output ``i`` must have for ``decoder.kind``; None for an output the decoder does not read.

    Metadata shapes are the model's logical shapes: a DLA layout's channel padding (255 -> 256) is in the
    tensor format, not here, so every count is exact.
    """
    d = metadata.decoder
    if d.kind == "yolov5_raw":
        return len(d.anchors[i]) * (5 + d.num_classes) if i < len(d.anchors) else None
    if d.kind == "yolov8_raw":
        box = 4 * d.reg_max
        if len(metadata.outputs) == 2 * len(d.strides):  # box, cls per stride
            return box if i % 2 == 0 else d.num_classes
        return box + d.num_classes  # one tensor per stride, box bins then class logits
    if i > 0:  # single-tensor decoders read the first output only
        return None
    return (5 if d.kind == "yolov5_final" else 4) + d.num_classes


def _channels(kind: str, spec: TensorSpec, want: int) -> int | None:
    """The output's channel count as the decoder reads it; None when the shape has no such axis."""
    shape = spec.shape
    if kind == "yolov5_final":
        return shape[2] if len(shape) == 3 else None
    if kind == "yolov8" and len(shape) == 3 and shape[1] != want and shape[2] == want:
        return shape[2]  # [1, N, 4+nc] is decoded too
    return shape[1] if len(shape) >= 2 else None


def check_output_shapes(metadata: ModelMetadata) -> None:
    """Raise a one-line :class:`ModelError` (stage ``decode``) when an output cannot carry the classes (or,
    for ``yolov8_raw``, the ``4*reg_max`` box bins): one check for every decoder kind.

    Dims <= 0 (dynamic) are not checked.
    """
    d = metadata.decoder
    for i, spec in enumerate(metadata.outputs):
        want = _expected_channels(metadata, i)
        if want is None:
            continue
        got = _channels(d.kind, spec, want)
        if got is None or got <= 0 or got == want:
            continue
        bins = f", reg_max={d.reg_max}" if d.kind == "yolov8_raw" else ""
        raise ModelError(f"output {spec.name!r} shape {list(spec.shape)} has {got} channels; decoder "
                         f"{d.kind} with num_classes={d.num_classes}{bins} needs {want}: the class list "
                         f"does not match the model", call="check_output_shapes",
                         params={"metadata": str(metadata.path)}, stage="decode")
