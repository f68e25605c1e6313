"""Float16 typing of an ONNX graph: every float data tensor becomes float16, checked by onnx's inference.

Shared by ``convert`` (an fp16-typed ONNX) and ``calibrate`` (the non-int8 parts of the Q/DQ ONNX). What
the ONNX standard keeps in float32 (Resize/Upsample ``scales`` and ``roi``) stays float32: those are
shapes, not data.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.core.errors import ModelError

FP16_MAX = 65504.0
# (op, input index) the ONNX standard types as float32 whatever the data type is
FLOAT32_SLOTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}


def _float32_only(model: Any) -> set[str]:
    """Tensors read only through float32 slots (scales/roi): they stay float32."""
    uses: dict[str, list[bool]] = defaultdict(list)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name:
                uses[name].append((node.op_type, i) in FLOAT32_SLOTS)
    return {name for name, slots in uses.items() if all(slots)}


def _half(array: np.ndarray, name: str, clipped: list[str]) -> np.ndarray:
    if np.any(np.abs(array[np.isfinite(array)]) > FP16_MAX):
        clipped.append(name)
    return np.clip(array, -FP16_MAX, FP16_MAX).astype(np.float16)


def to_fp16(model: Any) -> tuple[Any, list[str]]:
    """The model with every float data tensor in float16; also the names of tensors clipped to fp16 range."""
    from onnx import TensorProto, numpy_helper

    keep = _float32_only(model)
    clipped: list[str] = []
    g = model.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep:
            half = _half(numpy_helper.to_array(t), t.name, clipped)
            g.initializer[i].CopyFrom(numpy_helper.from_array(half, t.name))
    for node in g.node:
        if node.op_type == "Constant" and node.output[0] not in keep:
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                    a.t.CopyFrom(numpy_helper.from_array(_half(numpy_helper.to_array(a.t), node.output[0],
                                                                     clipped)))
        elif node.op_type == "Cast" and node.output[0] not in keep:
            for a in node.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16
    for v in (*g.input, *g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    del g.value_info[:]  # re-inferred below: stale float32 annotations would contradict the new types
    model.producer_name, model.producer_version = "dla_infer_node.convert", "1"
    return model, clipped


def checked_fp16(model: Any, call: str, params: dict[str, str]) -> tuple[Any, list[str]]:
    """:func:`to_fp16`, then onnx's strict type inference and checker: a ModelError when the fp16 graph
    does not type-check (an op that needs float32 data)."""
    import onnx

    model, clipped = to_fp16(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several types here; each means the same: not a valid fp16 graph
        raise ModelError(f"the fp16 graph does not type-check: {exc}".splitlines()[0], call=call,
                         params=params,
                         hint="an op that needs float32 data: report it with `dla_build lint MODEL`") from exc
    return model, clipped


def save_portable(model: Any, path: Path) -> None:
    """Save with the oldest IR version the model's opsets allow: an onnx newer than the robot's (or this
    machine's) onnxruntime / TensorRT parser would otherwise stamp an IR version they refuse."""
    import onnx

    model.ir_version = min(model.ir_version, onnx.helper.find_min_ir_version_for(list(model.opset_import)))
    onnx.save(model, str(path))
