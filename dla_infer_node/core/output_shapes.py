"""Startup check: do the model's output shapes fit the decoder the metadata names?

Backends check the loaded model (ONNX graph outputs, cuDLA sidecar tensors) against ``metadata.outputs``;
this checks those shapes against ``decoder.kind`` and ``decoder.num_classes``. Without it, a class list
that does not match the model is accepted at startup and then every frame fails.
"""

from __future__ import annotations

from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import ModelMetadata, TensorSpec


def _allowed_channels(kind: str, num_classes: int, anchors: int) -> tuple[int, int] | None:
    """(least, most) channels an output of ``kind`` may have; None for a kind without a rule here."""
    if kind == "yolov5_raw":
        # metadata shapes are the model's logical shapes: a DLA layout's channel padding (255 -> 256) is
        # in the tensor format, not here, so the count is exact
        return anchors * (5 + num_classes), anchors * (5 + num_classes)
    if kind == "yolov5_final":
        return 5 + num_classes, 5 + num_classes
    if kind == "yolov8":
        return 4 + num_classes, 4 + num_classes
    return None


def _channels(kind: str, spec: TensorSpec, want: int) -> int | None:
    """The output's channel count as the decoder reads it; None when the shape has no such axis."""
    shape = spec.shape
    if kind == "yolov5_final":
        return shape[2] if len(shape) == 3 else None
    if kind == "yolov8" and len(shape) == 3 and shape[1] != want and shape[2] == want:
        return shape[2]  # [1, N, 4+nc] is decoded too
    return shape[1] if len(shape) >= 2 else None


def check_output_shapes(metadata: ModelMetadata) -> None:
    """Raise a one-line :class:`ModelError` (stage ``decode``) when an output cannot carry the classes.

    Dims <= 0 (dynamic) are not checked; single-tensor decoders read only the first output.
    """
    d = metadata.decoder
    heads = metadata.outputs if d.kind == "yolov5_raw" else metadata.outputs[:1]
    for i, spec in enumerate(heads):
        anchors = len(d.anchors[i]) if d.kind == "yolov5_raw" and i < len(d.anchors) else 0
        allowed = _allowed_channels(d.kind, d.num_classes, anchors)
        if allowed is None:
            return
        least, most = allowed
        got = _channels(d.kind, spec, least)
        if got is None or got <= 0:
            continue
        if not least <= got <= most:
            want = str(least) if least == most else f"{least}..{most}"
            raise ModelError(f"output {spec.name!r} shape {list(spec.shape)} has {got} channels; decoder "
                             f"{d.kind} with num_classes={d.num_classes} needs {want}: the class list does "
                             f"not match the model", call="check_output_shapes",
                             params={"metadata": str(metadata.path)}, stage="decode")
