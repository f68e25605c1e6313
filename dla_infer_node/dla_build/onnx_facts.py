"""What the build steps need to know about an ONNX file and a calibration cache, read without running them.

* :func:`onnx_io` - graph inputs/outputs with shapes and element types;
* :func:`precision_kind` - ``"qdq"`` (has QuantizeLinear: explicit int8), ``"fp16"`` (floating tensors are
  fp16: a typed fp16 network), or ``"fp32"`` - what TensorRT 11.4.1+ builds, since it takes the precision
  from the ONNX itself;
* :func:`qdq_scales` / :func:`cache_scales` - per-tensor int8 scales from a Q/DQ ONNX or a TensorRT
  calibration cache (10.x), for the sidecar's int8 tensors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dla_infer_node.core.errors import ModelError
from dla_infer_node.dla_build.trt_cache import read_cache

# onnx.TensorProto element types (stable numbers of the ONNX spec)
FLOAT, UINT8, INT8, FLOAT16 = 1, 2, 3, 10
ELEM_NAMES = {FLOAT: "fp32", UINT8: "uint8", INT8: "int8", FLOAT16: "fp16"}


@dataclass(frozen=True)
class OnnxTensor:
    name: str
    shape: tuple[int, ...]  # -1 for a symbolic dim
    elem_type: int


def model_stem(path: Path) -> str:
    """``yolo.qdq`` of ``yolo.qdq.onnx``: the name the build steps derive their files from."""
    return path.name[: -len(".onnx")] if path.name.endswith(".onnx") else path.stem


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _load(path: str | Path) -> Any:
    import onnx

    p = Path(path)
    if not p.is_file():
        raise ModelError("ONNX file not found", call="onnx.load", params={"path": str(p)})
    try:
        return onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError / ValueError / OSError for a bad file
        raise ModelError(f"not a readable ONNX model: {exc}", call="onnx.load",
                         params={"path": str(p)}) from exc


def _tensor(vi: Any) -> OnnxTensor:
    tt = vi.type.tensor_type
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim)
    return OnnxTensor(vi.name, dims, int(tt.elem_type))


def onnx_io(path: str | Path) -> tuple[list[OnnxTensor], list[OnnxTensor]]:
    """Graph inputs (initializers excluded) and outputs."""
    model = _load(path)
    inits = {t.name for t in model.graph.initializer}
    inputs = [_tensor(v) for v in model.graph.input if v.name not in inits]
    return inputs, [_tensor(v) for v in model.graph.output]


def precision_kind(path: str | Path) -> str:
    """``"qdq"``, ``"fp16"`` or ``"fp32"``: the precision a strongly typed TensorRT will build."""
    model = _load(path)
    ops = {n.op_type for n in model.graph.node}
    if "QuantizeLinear" in ops or "DequantizeLinear" in ops:
        return "qdq"
    # a typed fp16 network: most weights are fp16 (its I/O may stay fp32, as with keep_io_types)
    weights = [int(t.data_type) for t in model.graph.initializer if int(t.data_type) in (FLOAT, FLOAT16)]
    if weights:
        return "fp16" if weights.count(FLOAT16) * 2 > len(weights) else "fp32"
    io = [int(v.type.tensor_type.elem_type) for v in (*model.graph.input, *model.graph.output)]
    return "fp16" if io and all(t == FLOAT16 for t in io) else "fp32"


def _scalar(model: Any, name: str) -> float | None:
    from onnx import numpy_helper

    for t in model.graph.initializer:
        if t.name == name:
            arr = numpy_helper.to_array(t).ravel()
            return float(arr[0]) if arr.size == 1 else None  # per-channel (weights): not an io scale
    for n in model.graph.node:
        if n.op_type == "Constant" and name in n.output:
            arr = numpy_helper.to_array(n.attribute[0].t).ravel()
            return float(arr[0]) if arr.size == 1 else None
    return None


def qdq_scales(path: str | Path) -> dict[str, float]:
    """Per-tensor activation scales of a Q/DQ ONNX, keyed by the tensor each quantizes.

    QuantizeLinear(x, scale) gives x's scale; DequantizeLinear(q, scale) -> y gives y's scale too (an
    int8 output is the tensor a DequantizeLinear produces, or the one a QuantizeLinear reads).
    """
    model = _load(path)
    out: dict[str, float] = {}
    for n in model.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(n.input) < 2:
            continue
        scale = _scalar(model, n.input[1])
        if scale is None:
            continue
        key = n.input[0] if n.op_type == "QuantizeLinear" else n.output[0]
        out.setdefault(key, scale)
    return out


def cache_scales(path: str | Path) -> dict[str, float]:
    """The per-tensor scales of a TensorRT calibration cache (:mod:`trt_cache` reads the file)."""
    return read_cache(path)[1]
