"""DLA EMULATOR (test infrastructure): "compile" the shipped model into emulated ``network`` loadables.

    python -m emulator.network_build --out DIR [--precision fp16|int8|all] [--input FMT] [--output FMT]

writes ``<stem>.loadable`` + ``<stem>.loadable.yaml`` per variant (complete sidecars: tensors with
formats, dtypes and int8 scales, the model metadata inline, source_model = the trimmed ONNX with its
sha256). What each precision runs on the emulated DLA:

* fp16 -- an fp16-EMULATING fp32 graph: every weight rounded to fp16, and a Cast to float16 and back
  after every float node output, so each activation is stored with fp16 precision; arithmetic inside a
  layer is fp32 (ONNX Runtime's CPU provider has no fp16 convolutions). I/O tensors are fp16 in the DLA
  layouts. Not imitated: TensorRT's fp16 kernels (accumulation order, fused layers' skipped roundings).
* int8 -- the Q/DQ model of ``dla_build calibrate`` (``dla_build.calibrate.quantize``: ONNX Runtime's
  calibrator and QDQ quantizer, minmax ranges, per-channel symmetric int8 weights, per-tensor symmetric
  int8 activations, TensorRT's scheme) from training-range synthetic scenes through the package's own
  preprocess, with ``--int8-heads`` (int8 outputs need their scales) and float32 elsewhere. The input
  is quantised with the sidecar's scale (= the QDQ input scale); int8 outputs carry the QDQ output
  scales. Not imitated: TensorRT/DLA int8 kernels,
  layer fusion and which layers it keeps in fp16, rounding inside fused layers, the DLA's own
  requantisation arithmetic. So int8 figures here estimate calibration loss, not a Jetson's exact result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emulator.make_loadable import EmuTensor, network_params, write_artifact

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "shapes_yolo.onnx"
META = ROOT / "models" / "shapes_yolo.meta.yaml"
CALIB_FIRST_SEED = 900_000  # training range (< 1_000_000): disjoint from the evaluation seeds
FP16_VARIANTS = (("linear", "linear"), ("linear", "chw16"), ("hwc4", "linear"), ("hwc4", "chw16"),
                 ("chw16", "linear"), ("chw16", "chw16"))
INT8_VARIANTS = tuple((i, o) for i in ("linear", "hwc4", "chw32") for o in ("linear", "chw32", "chw16"))


def fp16_network(onnx_path: Path = MODEL) -> bytes:
    """The fp16-emulating graph (see the module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path)))
    g = model.graph
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT:
            arr = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
    floats = {v.name for v in (*g.value_info, *g.output) if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    nodes = []
    for node in g.node:
        nodes.append(node)
        if node.op_type == "Constant":
            continue
        for k, out in enumerate(list(node.output)):
            if out not in floats:
                continue
            node.output[k] = out + "__fp32"
            nodes.append(helper.make_node("Cast", [out + "__fp32"], [out + "__fp16"], to=TensorProto.FLOAT16))
            nodes.append(helper.make_node("Cast", [out + "__fp16"], [out], to=TensorProto.FLOAT))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return bytes(model.SerializeToString())


def calibration_frames(count: int, first_seed: int = CALIB_FIRST_SEED) -> Iterator[np.ndarray]:
    """Network inputs of training-range scenes, through the package's own CPU preprocess."""
    from dla_infer_node.core.model_meta import load_metadata
    from dla_infer_node.core.preprocess import reference_preprocess
    from dla_infer_node.core.synth import generate_scene

    spec = load_metadata(META).input
    for seed in range(first_seed, first_seed + count):
        tensor, _ = reference_preprocess(generate_scene(seed, 640, 480).image, "rgb8", spec)
        yield tensor


def int8_network(work: Path, frames: int = 24, onnx_path: Path = MODEL) -> tuple[bytes, dict[str, float]]:
    """(QDQ ONNX bytes, int8 scale per I/O tensor name). Cached in ``work`` by source sha and frames."""
    from dla_infer_node.dla_build.calibrate import quantize

    src = onnx_path.read_bytes()
    tag = f"{hashlib.sha256(src).hexdigest()[:16]}_{frames}_calibrate"
    out, scales_file = work / f"qdq_{tag}.onnx", work / f"qdq_{tag}.scales.json"
    if not out.is_file() or not scales_file.is_file():
        work.mkdir(parents=True, exist_ok=True)

        feeds = ({"images": x} for x in calibration_frames(frames))
        quantize(onnx_path, out, feeds, "minmax", int8_heads=True, typed=False)
        scales_file.write_text(json.dumps(io_scales(out)), encoding="utf-8")
    return out.read_bytes(), json.loads(scales_file.read_text(encoding="utf-8"))


def io_scales(qdq_path: Path) -> dict[str, float]:
    """The QuantizeLinear scale of each graph input/output of a QDQ model (the scale on the int8 wire)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(qdq_path))
    inits = {i.name: i for i in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    scales: dict[str, float] = {}
    for node in m.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in {i.name for i in m.graph.input}:
            scales[node.input[0]] = float(numpy_helper.to_array(inits[node.input[1]]))
    for out in m.graph.output:
        dq = producer[out.name]  # DequantizeLinear <- QuantizeLinear (its scale)
        q = producer[dq.input[0]]
        scales[out.name] = float(numpy_helper.to_array(inits[q.input[1]]))
    return scales


def model_doc() -> dict[str, Any]:
    """The shipped model's metadata as an inline sidecar 'model' mapping (classes inlined)."""
    import yaml

    doc = yaml.safe_load(META.read_text(encoding="utf-8"))
    doc["classes"] = [c for c in (META.parent / doc["labels"]).read_text().split() if c] \
        if "classes" not in doc else doc["classes"]
    return {k: v for k, v in doc.items() if k not in ("onnx", "labels", "training", "accuracy")}


def network_artifact(directory: Path, precision: str, in_fmt: str, out_fmt: str, network: bytes,
                     scales: dict[str, float] | None = None) -> Any:
    """One emulated loadable + sidecar running ``network`` with the given I/O formats."""
    model = model_doc()
    scales = scales or {}
    w, h = model["input"]["width"], model["input"]["height"]
    in_dt = precision
    out_dt = "fp16" if precision == "fp16" or out_fmt == "chw16" else "int8"
    inp = EmuTensor("images", in_fmt, in_dt, (1, 3, h, w), scales.get("images") if in_dt == "int8" else None)
    outs: list[EmuTensor] = []
    logical: dict[str, Sequence[int]] = {"images": [1, 3, h, w]}
    for o in model["outputs"]:
        n, c, oh, ow = o["shape"]
        v = {"chw16": 16, "chw32": 32}.get(out_fmt, 1)
        outs.append(EmuTensor(o["name"], out_fmt, out_dt, (n, -(-c // v) * v, oh, ow),
                              scales.get(o["name"]) if out_dt == "int8" else None))
        logical[o["name"]] = [n, c, oh, ow]
    src = MODEL.read_bytes()
    source = {"path": str(MODEL.relative_to(ROOT)), "sha256": hashlib.sha256(src).hexdigest(),
              "revision": None}
    stem = f"network_{precision}_{in_fmt}_{out_dt}_{out_fmt}"
    return write_artifact(directory, stem, "network", [inp], outs, model, None, logical,
                          network_params(precision, network), source)


def build_all(directory: Path, precisions: Sequence[str] = ("fp16", "int8"),
              only: tuple[str, str] | None = None, calib_frames: int = 24) -> list[Any]:
    arts = []
    for prec in precisions:
        if prec == "fp16":
            net, scales = fp16_network(), None
        else:
            net, scales = int8_network(directory / "work", calib_frames)
        for in_fmt, out_fmt in FP16_VARIANTS if prec == "fp16" else INT8_VARIANTS:
            if only is None or only == (in_fmt, out_fmt):
                arts.append(network_artifact(directory, prec, in_fmt, out_fmt, net, scales))
    return arts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write emulated network loadables (DLA EMULATOR, test only).")
    ap.add_argument("--out", required=True)
    ap.add_argument("--precision", choices=("fp16", "int8", "all"), default="all")
    ap.add_argument("--input", help="only this input format (with --output)")
    ap.add_argument("--output", help="only this output format (with --input)")
    ap.add_argument("--calib-frames", type=int, default=24)
    a = ap.parse_args(argv)
    precs = ("fp16", "int8") if a.precision == "all" else (a.precision,)
    only = (a.input, a.output) if a.input and a.output else None
    for art in build_all(Path(a.out), precs, only, a.calib_frames):
        print(art.sidecar)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
