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
from pathlib import Path

import numpy as np

from dla_infer_node.core.errors import ModelError, ParameterError
from dla_infer_node.dla_build.calibration_frames import FrameSource, calibration_tensors
from dla_infer_node.dla_build.fp16 import checked_fp16, save_portable
from dla_infer_node.dla_build.model_files import find_metadata, fp16_path_for


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
    model = Path(args.model)
    if not model.is_file():
        raise ParameterError("MODEL", str(model), "an existing ONNX file")
    if args.scenes < 0:
        raise ParameterError("--scenes", args.scenes, "an integer >= 0")
    out = args.out or fp16_path_for(model)
    meta = find_metadata(model, args.metadata)
    convert_fp16(model, out)
    print(f"wrote {out} (fp16-typed: inputs, outputs, weights; TensorRT 11.4.1+ builds it as fp16)")
    source = FrameSource(images=args.images, scenes=args.scenes, max_images=8)
    feeds = list(calibration_tensors(source, meta))
    if feeds:
        for name, diff in compare(model, out, feeds).items():
            print(f"max |fp16 - fp32| of {name} over {len(feeds)} frames: {diff:.4g}")
    return 0
