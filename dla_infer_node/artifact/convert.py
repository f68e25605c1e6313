"""An fp16-typed ONNX for TensorRT 11.4.1+, which builds the precision the ONNX's own types say.

    dla_build convert MODEL.onnx --precision fp16 [--out M.fp16.onnx] [--scenes N | --images DIR]
                      [--metadata META]

Every float tensor becomes float16: weights, constants, casts, and the graph's inputs and outputs (the DLA
reads and writes fp16, so the sidecar's ``fp16:dla_hwc4`` / ``fp16:chw16`` formats match the ONNX's types).
The exception is what the ONNX standard keeps in float32 (Resize/Upsample ``scales`` and ``roi``): those are
shapes, not data. General-purpose converters leave whole ops such as Resize in float32 behind casts, which
on the DLA would be a float32 layer it cannot run, so this module converts data tensors only.

The converted model then runs beside the fp32 one on sample frames (through the package's preprocess) and
the largest absolute difference of each output is printed: fp16 rounding shows as ~1e-2 on raw logits; a
wrong conversion shows as far more.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.artifact.calibration_frames import FrameSource
from dla_infer_node.core.errors import ModelError, ParameterError

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


def convert_fp16(src: Path, dst: Path) -> Path:
    """``src`` (fp32 ONNX) -> ``dst`` (fp16-typed ONNX), checked by onnx's type inference; returns ``dst``."""
    import onnx

    try:
        model = onnx.load(str(src))
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError, ValueError) as exc:
        raise ModelError(f"cannot read ONNX: {exc}", call="onnx.load", params={"path": str(src)}) from exc
    inputs = [v.type.tensor_type.elem_type for v in model.graph.input]
    if inputs and all(t == onnx.TensorProto.FLOAT16 for t in inputs):
        raise ModelError("the model is already fp16-typed: compile it as it is", call="convert_fp16",
                         params={"model": str(src)})
    model, clipped = checked_fp16(model, "convert_fp16", {"model": str(src)})
    dst.parent.mkdir(parents=True, exist_ok=True)
    save_portable(model, dst)
    if clipped:
        print(f"note: {len(clipped)} tensors had values beyond fp16's +-65504, clipped: {clipped[:5]}")
    return dst


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


def compare(fp32: Path, fp16: Path, feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Largest |fp16 - fp32| of each output over the sample frames (ONNX Runtime CPU, both models)."""
    import onnxruntime as ort

    a = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(fp16), providers=["CPUExecutionProvider"])
    names = [o.name for o in a.get_outputs()]
    worst = dict.fromkeys(names, 0.0)
    for feed in feeds:
        ref = a.run(names, feed)
        got = b.run(names, {k: v.astype(np.float16) for k, v in feed.items()})
        for name, r, h in zip(names, ref, got, strict=True):
            worst[name] = max(worst[name], float(np.max(np.abs(r - h.astype(np.float32)))))
    return worst


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the fp32 ONNX (trimmed to raw heads for the DLA)")
    parser.add_argument("--precision", choices=["fp16"], default="fp16",
                        help="fp16 (int8 comes from dla_build calibrate's Q/DQ ONNX)")
    parser.add_argument("--out", type=Path, help="where to write (default <stem>.fp16.onnx beside MODEL)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--scenes", type=int, default=8, help="generated scenes to compare on (default 8)")
    src.add_argument("--images", type=Path, help="compare on the images of this folder (at most 8)")
    parser.add_argument("--metadata", help="model metadata (default <stem>.meta.yaml beside MODEL)")


def run(args: argparse.Namespace) -> int:
    from dla_infer_node.artifact.calibrate import calibration_tensors
    from dla_infer_node.artifact.onnx_facts import model_stem
    from dla_infer_node.artifact.sidecar_writer import find_metadata

    model = Path(args.model)
    if not model.is_file():
        raise ParameterError("MODEL", str(model), "an existing ONNX file")
    if args.scenes < 0:
        raise ParameterError("--scenes", args.scenes, "an integer >= 0")
    out = args.out or model.with_name(f"{model_stem(model)}.fp16.onnx")
    meta = find_metadata(model, args.metadata)
    convert_fp16(model, out)
    print(f"wrote {out} (fp16-typed: inputs, outputs, weights; TensorRT 11.4.1+ builds it as fp16)")
    source = FrameSource(images=args.images, scenes=args.scenes, max_images=8)
    feeds = list(calibration_tensors(source, meta))
    if feeds:
        for name, diff in compare(model, out, feeds).items():
            print(f"max |fp16 - fp32| of {name} over {len(feeds)} frames: {diff:.4g}")
    return 0
