"""INT8 calibration: one pass over real frames gives both TensorRT lines what they need.

    dla_build calibrate MODEL.onnx [--images DIR | --bag BAG --topic T | --scenes N] [--max-images N]
                        [--seed S] [--method minmax|entropy|percentile] [--cache C] [--qdq-out Q]
                        [--trt-version V] [--metadata META]

Frames come from ``dla_build.calibration_frames`` and go through the package's own preprocess (the one the
node runs), so the ranges are those of the tensors the DLA will see. ONNX Runtime's calibrator (MinMax,
Entropy or Percentile) measures every activation once; from those ranges come

* a TensorRT calibration cache (``<stem>.calib``; the 10.x line's ``--calib``): the header
  ``TRT-<version code>-EntropyCalibration2`` of ``--trt-version`` (the only one that TensorRT's trtexec
  uses, whatever method measured the ranges: see ``trt_cache``), then ``tensor: <big-endian float32 hex>``
  with the symmetric int8 scale ``amax / 127`` of every activation, the graph input included;
* a Q/DQ ONNX (``<stem>.qdq.onnx``; the 11.4.1+ line builds what it says): symmetric int8, zero points 0,
  per-tensor activation scales, per-channel weight scales, biases not quantized (TensorRT's parser
  dequantizes int8 only); everything not int8 is float16, io included (opset 19), because a strongly
  typed float32 layer is one the DLA cannot run;
* the input tensor's scale, printed, which the sidecar records for an int8 input.

The layers that produce the model's outputs (the raw heads) stay out of int8 unless ``--int8-heads``: their
outputs are box regressions and class logits, which int8 rounding coarsens (on the shipped model, int8
heads cost 7 points of mAP50:95, fp16 heads 0.3; ``bench.quantized_accuracy``). They are left out of the
cache too, so TensorRT 10.x runs them in fp16 (``--int8 --fp16``: a tensor without a scale is not int8).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dla_infer_node.artifact import trt_support
from dla_infer_node.core.errors import ModelError, ParameterError
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.dla_build.calibration_frames import FrameSource, Progress, calibration_tensors
from dla_infer_node.dla_build.fp16 import checked_fp16, save_portable
from dla_infer_node.dla_build.model_files import cache_path_for, find_metadata, qdq_path_for
from dla_infer_node.dla_build.onnx_facts import qdq_scales
from dla_infer_node.dla_build.trt_cache import write_cache

METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}  # ours -> ONNX Runtime's
INT8_MAX = 127.0  # symmetric int8: [-127, 127], scale = amax / 127 (TensorRT's and ORT's convention)


@dataclass(frozen=True)
class TensorRange:
    name: str
    low: float
    high: float

    @property
    def scale(self) -> float:
        amax = max(abs(self.low), abs(self.high))
        return amax / INT8_MAX if amax > 0 else 1.0 / INT8_MAX  # an all-zero tensor still needs a scale


# the calibrator's settings: symmetric ranges, and TensorRT's entropy histogram (2048 bins folded into 128
# int8 levels); ONNX Runtime's quantize_static would give entropy 128/128 bins, which never clips (= minmax)
CALIBRATOR_OPTIONS = {"minmax": {"symmetric": True},
                      "entropy": {"symmetric": True, "num_bins": 2048, "num_quantized_bins": 128},
                      "percentile": {"symmetric": True, "num_bins": 2048, "percentile": 99.999}}


def quantize(model: Path, qdq_out: Path, feeds: Iterator[dict[str, np.ndarray]], method: str,
             int8_heads: bool = False, typed: bool = True) -> list[TensorRange]:
    """Calibrate once with ONNX Runtime, write the Q/DQ ONNX from those ranges, return every activation's.

    The Q/DQ model comes from ONNX Runtime's QDQQuantizer given the measured ranges: the same steps as
    ``quantize_static`` after its calibration (whose constructor is the same from ORT 1.17 to 1.32), so
    one pass over the frames serves both products, on every onnxruntime this package supports.
    ``typed=False`` leaves the non-int8 parts in float32 (the DLA emulator's int8 network computes so).
    """
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType
    from onnxruntime.quantization.calibrate import create_calibrator
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer, update_opset_version
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    logging.getLogger().setLevel(logging.ERROR)  # ORT's "consider pre-processing" advice is not ours
    ort_method = getattr(CalibrationMethod, METHODS[method])
    producers, outputs = head_layers(model)
    heads = [] if int8_heads else producers
    with tempfile.TemporaryDirectory(prefix="dla_calib_") as tmp:
        try:
            calibrator = create_calibrator(
                model, None, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                calibrate_method=ort_method, extra_options=CALIBRATOR_OPTIONS[method])
            calibrator.collect_data(Reader())
            with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print their steps
                data = calibrator.compute_data()
            onnx_model = update_opset_version(load_model_with_shape_infer(model), QuantType.QInt8)
            quantizer = QDQQuantizer(
                onnx_model, True, False, QuantType.QInt8, QuantType.QInt8, data, [], heads,
                sorted(set(QLinearOpsRegistry) | set(QDQRegistry)),
                {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
            quantizer.quantize_model()
            quantizer.model.save_model_to_file(str(qdq_out), False)
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"ONNX Runtime calibration failed: {exc}", call="QDQQuantizer",
                             params={"model": str(model), "method": method}) from exc
    ranges = [TensorRange(name, _first(d.lowest), _first(d.highest)) for name, d in data.data.items()]
    ranges = _as_quantized(ranges, qdq_out)
    if typed:
        _typed_fp16(qdq_out)
    if heads:
        ranges = [r for r in ranges if r.name not in outputs]
    return ranges


def head_layers(model: Path) -> tuple[list[str], set[str]]:
    """The nodes whose output is a graph output (a trimmed detector's raw head convolutions), and the
    graph's output names."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    outputs = {o.name for o in graph.output}
    return [n.name for n in graph.node if outputs & set(n.output) and n.name], outputs


def _typed_fp16(qdq: Path) -> None:
    """Everything the Q/DQ ONNX keeps in float becomes float16 (opset 19 lets Q/DQ scales be fp16)."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(qdq))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 19:
        model = version_converter.convert_version(model, 19)
    model, _ = checked_fp16(model, "calibrate", {"qdq": str(qdq)})
    save_portable(model, qdq)


def _first(value: object) -> float:
    return float(np.asarray(value).ravel()[0])


def _as_quantized(ranges: list[TensorRange], qdq: Path) -> list[TensorRange]:
    """The ranges the Q/DQ ONNX actually uses. ONNX Runtime gives a Conv output followed by its ReLU the
    ReLU's range (the pair runs as one layer); TensorRT fuses the same pair, so the cache says the same."""
    used = qdq_scales(qdq)
    out = []
    for r in ranges:
        if r.name in used and not math.isclose(used[r.name], r.scale, rel_tol=1e-5):
            amax = used[r.name] * INT8_MAX
            r = TensorRange(r.name, -amax, amax)
        out.append(r)
    return out


def summary(ranges: list[TensorRange], input_name: str) -> str:
    """A table of per-tensor ranges (the input first), for the log of a build."""
    rows = sorted(ranges, key=lambda r: (r.name != input_name, r.name))
    width = max(len("tensor"), *(len(r.name) for r in rows))
    out = [f"{'tensor':<{width}}  {'min':>10}  {'max':>10}  {'int8 scale':>12}"]
    out += [f"{r.name:<{width}}  {r.low:>10.4g}  {r.high:>10.4g}  {r.scale:>12.6g}" for r in rows]
    return "\n".join(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the fp32 ONNX to calibrate (trimmed to raw heads for the DLA)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--images", type=Path, help="a folder of images (searched recursively)")
    src.add_argument("--bag", type=Path, help="an MCAP bag (file or rosbag2 folder); needs --topic")
    src.add_argument("--scenes", type=int, default=0, help="N generated scenes (the default source: 100)")
    parser.add_argument("--topic", help="the bag's Image or CompressedImage topic")
    parser.add_argument("--max-images", type=int, default=200, help="frames used at most (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="which images of a larger set / which scenes")
    parser.add_argument("--method", choices=sorted(METHODS), default="minmax",
                        help="ONNX Runtime calibrator (default minmax; bench.quantized_accuracy compares)")
    parser.add_argument("--cache", type=Path, help="TensorRT cache to write (default <stem>.calib by MODEL)")
    parser.add_argument("--qdq-out", type=Path, help="Q/DQ ONNX to write (default <stem>.qdq.onnx by MODEL)")
    parser.add_argument("--int8-heads", action="store_true",
                        help="quantize the output layers too (default: they stay fp16, see above)")
    parser.add_argument("--trt-version", default="10.3",
                        help="TensorRT whose trtexec reads the cache (default 10.3; compile re-heads a copy)")
    parser.add_argument("--metadata", help="model metadata (default <stem>.meta.yaml beside MODEL)")


def source_from(args: argparse.Namespace) -> FrameSource:
    for name in ("max_images", "scenes", "seed"):
        least = 1 if name == "max_images" else 0
        if getattr(args, name) < least:
            raise ParameterError(f"--{name.replace('_', '-')}", getattr(args, name), f"an integer >= {least}")
    if args.bag is not None and not args.topic:
        raise ParameterError("--topic", None, "an Image or CompressedImage topic of the bag (--bag needs it)")
    if args.topic and args.bag is None:
        raise ParameterError("--topic", args.topic, "only with --bag")
    scenes = args.scenes or (100 if args.images is None and args.bag is None else 0)
    return FrameSource(images=args.images, bag=args.bag, topic=args.topic, scenes=scenes,
                       max_images=args.max_images, seed=args.seed)


def run(args: argparse.Namespace) -> int:
    model = Path(args.model)
    if not model.is_file():
        raise ParameterError("MODEL", str(model), "an existing ONNX file")
    if trt_support.describe(args.trt_version)["line"] != trt_support.LINE_FLAGS:  # before the long part
        raise ParameterError("--trt-version", args.trt_version,
                             "a TensorRT that reads calibration caches (8.5-10.7, e.g. 10.3 on JetPack 6); "
                             "11.4.1+ builds from the Q/DQ ONNX, which does not depend on it")
    meta_path = find_metadata(model, args.metadata)
    input_name = load_metadata(meta_path).input.name
    source = source_from(args)
    total = source.count()
    print(f"calibrating {model} on {source.describe()}: {total} frames, {args.method}")
    qdq = args.qdq_out or qdq_path_for(model)
    feeds = calibration_tensors(source, meta_path, Progress(total))
    ranges = quantize(model, qdq, feeds, args.method, args.int8_heads)
    if not any(r.name == input_name for r in ranges):
        raise ModelError(f"calibration measured no range for the input {input_name!r}", call="calibrate",
                         params={"model": str(model)})
    bad = [r.name for r in ranges if not (math.isfinite(r.low) and math.isfinite(r.high))]
    if bad:
        raise ModelError(f"non-finite activation ranges (the model overflows on these frames): {bad[:5]}",
                         call="calibrate", params={"model": str(model)})
    cache = args.cache or cache_path_for(model)
    write_cache(cache, {r.name: r.scale for r in ranges}, args.trt_version)
    print(summary(ranges, input_name))
    if not args.int8_heads:
        kept = ", ".join(head_layers(model)[0])
        print(f"output layers kept in fp16 (--int8-heads to quantize them): {kept}")
    scale = next(r.scale for r in ranges if r.name == input_name)
    print(f"input {input_name}: int8 scale {scale:.8g} (1/{1 / scale:.4g})")
    print(f"wrote {cache} (TensorRT <= 10.7: dla_build compile ... --calibration-cache {cache})")
    print(f"wrote {qdq} (TensorRT 11.4.1+: dla_build compile ... picks it up beside {model.name})")
    return 0

