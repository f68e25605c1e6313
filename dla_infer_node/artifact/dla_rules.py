"""TensorRT's documented DLA layer support and restrictions, as data plus one small check per layer kind.

Sources, cited per rule below:
- GENERAL / TABLE: TensorRT Developer Guide, "Working with DLA" -> "DLA Supported Layers and Restrictions"
  (its "General Restrictions" list and its "DLA Layer Support Summary" table, TensorRT 10.x/11.x text).
- API: the per-layer "If executing this layer on DLA ..." notes of TensorRT's API reference (NvInfer.h of
  TensorRT 11.1), which give the exact ranges the summary table abbreviates.
Where neither states a limit, no limit is invented: the reason says "not documented".

A check takes the ONNX node's facts (attributes, static shapes, build-time constant inputs) and returns
the problems found; no problem means the layer runs on the DLA. Checks never raise on odd graphs: what
they cannot read they do not judge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GUIDE = "TensorRT Developer Guide, Working with DLA > DLA Supported Layers and Restrictions"
GENERAL = f"{GUIDE} > General Restrictions"
TABLE = f"{GUIDE} > DLA Layer Support Summary"
API = "TensorRT API reference (NvInfer.h)"

# GENERAL: "The maximum supported batch size is 4096." / "... size for non-batch dimensions is 8192."
MAX_BATCH = 4096
MAX_DIM = 8192
# GENERAL: batch for DLA is the product of all dimensions except the last three (CHW).
SPATIAL_RANK = 4  # TABLE: "2D only" for Activation, Convolution, Deconvolution, ElementWise -> NCHW tensors
# TensorRT ONNX Opset Guide (TensorRT 11.x): opset 9 and above, maximum 25. Older releases stop lower.
OPSET_RANGE = (9, 25)

CONV_KERNEL = (1, 32)      # API IConvolutionLayer::setKernelSizeNd; TABLE "kernel [1,32]"
CONV_STRIDE = (1, 8)       # API IConvolutionLayer::setStrideNd; TABLE "stride [1,8]"
CONV_PAD = (0, 31)         # API IConvolutionLayer::setPaddingNd: [0,31] and less than the kernel size
CONV_DILATION = (1, 32)    # API IConvolutionLayer::setDilationNd
CONV_GROUPS = (1, 8192)    # API IConvolutionLayer::setNbGroups: "the max number of groups is 8192"
OUTPUT_MAPS = (1, 8192)    # API I(De)ConvolutionLayer::setNbOutputMaps; TABLE "channels [1,8192]"
DECONV_LARGE = (64, 96, 128)  # API IDeconvolutionLayer: [1,32], or one of these by 1 in the other dim
POOL_WINDOW = (1, 8)       # API IPoolingLayer::setWindowSizeNd
POOL_STRIDE = (1, 16)      # API IPoolingLayer::setStrideNd
POOL_PAD = (0, 7)          # API IPoolingLayer::setPaddingNd
LRN_WINDOWS = (3, 5, 7, 9)  # TABLE "Window 3/5/7/9; ACROSS_CHANNELS only"; API ILRNLayer::setWindowSize
RESIZE_NEAREST = (1, 32)   # API IResizeLayer::setScales: integer H/W scales in [1,32] for kNEAREST
RESIZE_LINEAR = (1, 4)     # ... and [1,4] for kLINEAR; the first two scales exactly 1
# API IResizeLayer (class note): the (coordinate transform, nearest rounding) pairs the DLA runs
RESIZE_NEAREST_MODES = {("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                        ("half_pixel", "round_prefer_ceil")}
SOFTMAX_AXIS_ALONE = 8192  # API ISoftMaxLayer: other non-batch dims all 1 -> axis size up to 8192
SOFTMAX_AXIS_MIXED = 1024  # ... otherwise the axis size is at most 1024

# ONNX op -> TensorRT layer kind the parser builds. TABLE lists the DLA layer kinds; ops whose layer kind
# is not in it get the reason in UNSUPPORTED (or a generic "not a DLA layer").
ACTIVATIONS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip"}  # TABLE Activation row
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}  # TABLE ElementWise row
COMPARISONS = {"Equal", "Greater", "Less"}                          # TABLE Comparison row
SHUFFLES = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"}
NO_OPS = {"Identity", "Dropout"}  # the ONNX parser passes the tensor through; no DLA layer is built
UNSUPPORTED = {
    "Gather": "IGatherLayer: 'No DLA support' (API)",
    "GatherElements": "IGatherLayer: 'No DLA support' (API)",
    "GatherND": "IGatherLayer: 'No DLA support' (API)",
    "MatMul": "matrix multiply is not a DLA layer (TABLE); a 1x1 Conv is the DLA's fully connected form",
    "Gemm": "matrix multiply is not a DLA layer (TABLE); a 1x1 Conv is the DLA's fully connected form",
    "Cast": "Cast on DLA is documented only right after a Comparison (TABLE)",
}
UNARY_DLA = {"Abs"}  # API IUnaryLayer::setOperation: "only UnaryOperation::kABS is supported" on DLA
UNARY = {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
         "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Ceil", "Floor", "Erf", "Not", "Sign", "Round"}

Shape = tuple[int | None, ...]


@dataclass
class NodeFacts:
    """What a check may read about one ONNX node. consts[i] is the value of input i when it is a
    build-time constant whose value could be computed, else None; const_inputs[i] says whether it is a
    build-time constant at all (a value may be constant yet unread)."""

    op: str
    attrs: dict[str, Any]
    in_shapes: list[Shape | None]
    out_shapes: list[Shape | None]
    consts: list[np.ndarray | None]
    const_inputs: list[bool]
    consumer_ops: list[str] = field(default_factory=list)
    opset: int = 13


def _range(label: str, values: Sequence[int], bounds: tuple[int, int], cite: str) -> list[str]:
    lo, hi = bounds
    bad = [v for v in values if not lo <= v <= hi]
    return [f"{label} {list(values)} outside [{lo},{hi}] ({cite})"] if bad else []


def _rank(f: NodeFacts, index: int = 0, *, out: bool = False) -> int | None:
    shapes = f.out_shapes if out else f.in_shapes
    shape = shapes[index] if index < len(shapes) else None
    return None if shape is None else len(shape)


def _need_4d(f: NodeFacts, layer: str, *, out: bool = False) -> list[str]:
    rank = _rank(f, out=out)
    if rank is None or rank == SPATIAL_RANK:
        return []
    return [f"{layer} on a rank-{rank} tensor: DLA layers are '2D only', i.e. 4-D NCHW (TABLE)"]


def _spatial(f: NodeFacts, name: str, default: int, n: int = 2) -> list[int]:
    value = f.attrs.get(name)
    return [int(v) for v in value] if value is not None else [default] * n


def _pads_hw(f: NodeFacts) -> list[int]:
    return [int(v) for v in f.attrs.get("pads", [0, 0, 0, 0])]


def check_conv(f: NodeFacts) -> list[str]:
    weight = f.consts[1] if len(f.consts) > 1 else None
    kernel = _spatial(f, "kernel_shape", 1) if "kernel_shape" in f.attrs or weight is None \
        else [int(v) for v in weight.shape[2:]]
    pads = _pads_hw(f)
    problems = _need_4d(f, "Convolution")
    problems += _range("kernel", kernel, CONV_KERNEL, "API IConvolutionLayer")
    problems += _range("stride", _spatial(f, "strides", 1), CONV_STRIDE, "API IConvolutionLayer")
    problems += _range("padding", pads, CONV_PAD, "API IConvolutionLayer")
    if any(p >= k for p, k in zip(pads, kernel + kernel, strict=False)):
        problems.append(f"padding {pads} not less than kernel {kernel} (API IConvolutionLayer)")
    problems += _range("dilation", _spatial(f, "dilations", 1), CONV_DILATION, "API IConvolutionLayer")
    problems += _range("groups", [int(f.attrs.get("group", 1))], CONV_GROUPS, "API IConvolutionLayer")
    if weight is not None:
        problems += _range("output maps", [int(weight.shape[0])], OUTPUT_MAPS, "API IConvolutionLayer")
    elif len(f.const_inputs) > 1 and not f.const_inputs[1]:
        problems.append("weights computed at run time; DLA convolution weights are build-time (not documented "
                        "otherwise)")
    return problems


def _deconv_dims(label: str, values: list[int]) -> list[str]:
    # API IDeconvolutionLayer: each in [1,32], or [64|96|128] in one dimension with 1 in the other
    if all(1 <= v <= 32 for v in values):
        return []
    if len(values) == 2 and sorted(values)[0] == 1 and max(values) in DECONV_LARGE:
        return []
    return [f"{label} {values} outside [1,32] and not 64/96/128 by 1 (API IDeconvolutionLayer)"]


def check_deconv(f: NodeFacts) -> list[str]:
    problems = _need_4d(f, "Deconvolution")
    weight = f.consts[1] if len(f.consts) > 1 else None
    kernel = _spatial(f, "kernel_shape", 1) if weight is None else [int(v) for v in weight.shape[2:]]
    problems += _deconv_dims("kernel", kernel) + _deconv_dims("stride", _spatial(f, "strides", 1))
    if int(f.attrs.get("group", 1)) != 1:  # TABLE "no grouped/dilated"; API setNbGroups "must be one"
        problems.append("grouped deconvolution (TABLE: no grouped/dilated)")
    if any(d != 1 for d in _spatial(f, "dilations", 1)):
        problems.append("dilated deconvolution (TABLE: no grouped/dilated)")
    if any(_pads_hw(f)):  # TABLE "padding must be 0"
        problems.append(f"padding {_pads_hw(f)} (TABLE: padding must be 0)")
    if weight is not None:
        maps = int(weight.shape[1]) * int(f.attrs.get("group", 1))
        problems += _range("output maps", [maps], OUTPUT_MAPS, "API IDeconvolutionLayer")
    return problems


def check_pool(f: NodeFacts) -> list[str]:
    problems = _need_4d(f, "Pooling")
    shape = f.in_shapes[0] if f.in_shapes else None
    if f.op.startswith("Global"):
        if shape is None or any(d is None for d in shape[2:]):
            return problems
        window = [int(d) for d in shape[2:] if d is not None]  # a global pool is a window over all of H x W
    else:
        window = _spatial(f, "kernel_shape", 1)
        problems += _range("stride", _spatial(f, "strides", 1), POOL_STRIDE, "API IPoolingLayer")
        problems += _range("padding", _pads_hw(f), POOL_PAD, "API IPoolingLayer")
        if any(d != 1 for d in _spatial(f, "dilations", 1)):
            problems.append("dilated pooling: TensorRT's pooling layer has no dilation")
    return problems + _range("window", window, POOL_WINDOW, "API IPoolingLayer")


def check_activation(f: NodeFacts) -> list[str]:
    problems = _need_4d(f, "Activation")
    if f.op == "Clip":  # TABLE names "Clipped ReLU": clip(x, 0, max) with build-time bounds
        low = f.consts[1] if len(f.consts) > 1 and f.consts[1] is not None else f.attrs.get("min")
        if len(f.const_inputs) > 1 and not all(f.const_inputs[1:]):
            problems.append("Clip bounds computed at run time (TABLE: Clipped ReLU)")
        elif low is None or float(np.asarray(low)) != 0.0:
            problems.append("Clip with lower bound other than 0 is not the Clipped ReLU of the TABLE")
    return problems


def check_prelu(f: NodeFacts) -> list[str]:
    # TABLE Parametric ReLU row; API IParametricReLULayer: the slopes must be a build-time constant
    ok = len(f.const_inputs) > 1 and f.const_inputs[1]
    return [] if ok else ["PRelu slope is not a build-time constant (API IParametricReLULayer)"]


def check_elementwise(f: NodeFacts) -> list[str]:
    # TABLE lists Sum, Sub, Product, Max, Min, Div, Pow. (NvInfer.h's older note names only SUM, PROD,
    # MAX, MIN, SUB; the guide's table is the newer statement and is what this lint follows.)
    return _need_4d(f, f"ElementWise {f.op}", out=True)


def check_comparison(f: NodeFacts) -> list[str]:
    # TABLE Comparison row: INT8 only, "Output must be cast to FP16/INT8 immediately"
    if f.consumer_ops and all(op == "Cast" for op in f.consumer_ops):
        return _need_4d(f, f"Comparison {f.op}", out=True)
    return [f"{f.op} output not cast right away (TABLE: output must be cast to FP16/INT8 immediately)"]


def check_concat(f: NodeFacts) -> list[str]:
    rank = _rank(f, out=True)
    if rank is None:
        return []
    axis = int(f.attrs.get("axis", 0)) % rank
    problems = []
    if axis != rank - 3:  # TABLE "Channel axis only"; API IConcatenationLayer: the third to last axis
        problems.append(f"concatenation along axis {axis} of a rank-{rank} tensor; the DLA concatenates "
                        f"only along the channel axis (third to last) (TABLE, API IConcatenationLayer)")
    if len(f.in_shapes) < 2:
        problems.append("fewer than 2 inputs (TABLE: >= 2 inputs)")
    spatial = {s[-2:] for s in f.in_shapes if s is not None and len(s) >= 2}
    if len(spatial) > 1:
        problems.append(f"inputs differ in spatial dims {sorted(spatial, key=str)} (TABLE: same spatial dims)")
    return problems


def check_lrn(f: NodeFacts) -> list[str]:
    size = int(f.attrs.get("size", 0))
    return [] if size in LRN_WINDOWS else [f"LRN window {size} not in {list(LRN_WINDOWS)} (TABLE)"]


def check_resize(f: NodeFacts) -> list[str]:
    problems = _need_4d(f, "Resize")
    mode = str(f.attrs.get("mode", "nearest"))
    scales_at = 1 if f.op == "Upsample" or f.opset < 11 else 2
    scales = f.consts[scales_at] if len(f.consts) > scales_at else None
    if f.op == "Upsample" and scales is None and "scales" in f.attrs:
        scales = np.asarray(f.attrs["scales"])
    if scales is None or scales.size == 0:
        # API IResizeLayer::setOutputDimensions: "not supported" on DLA; scales must be build-time values
        return [*problems, "output given by sizes or run-time scales; the DLA resizes by build-time scales "
                "(API IResizeLayer)"]
    values = [float(v) for v in scales.ravel()]
    bounds = RESIZE_NEAREST if mode == "nearest" else RESIZE_LINEAR
    if mode not in ("nearest", "linear"):
        problems.append(f"resize mode '{mode}' (API IResizeLayer: nearest or linear only)")
    if len(values) != 4 or values[:2] != [1.0, 1.0]:
        problems.append(f"scales {values}: 4 scales with batch and channel exactly 1 (API IResizeLayer)")
    elif any(v != int(v) or not bounds[0] <= v <= bounds[1] for v in values[2:]):
        problems.append(f"H/W scales {values[2:]} not integers in [{bounds[0]},{bounds[1]}] for {mode} "
                        "(API IResizeLayer)")
    transform = str(f.attrs.get("coordinate_transformation_mode", "half_pixel"))
    if f.op == "Upsample" or f.opset < 11:
        transform = "asymmetric"  # Upsample and opset-10 Resize sample asymmetrically, nearest by floor
    rounding = str(f.attrs.get("nearest_mode", "floor" if transform == "asymmetric" else "round_prefer_floor"))
    if mode == "nearest" and (transform, rounding) not in RESIZE_NEAREST_MODES:
        problems.append(f"nearest resize with ({transform}, {rounding}) (API IResizeLayer lists asymmetric+"
                        "floor, half_pixel+round_prefer_floor/ceil)")
    if mode == "linear" and transform != "half_pixel":
        problems.append(f"linear resize with '{transform}' (API IResizeLayer: half_pixel only)")
    return problems


def _slice_axes(f: NodeFacts) -> tuple[list[int], list[int]] | None:
    """(axes, steps) of a Slice when readable; opset < 10 carries them as attributes."""
    rank = _rank(f)
    if f.opset < 10:
        axes = [int(a) for a in f.attrs.get("axes", range(len(f.attrs.get("starts", []))))]
        return ([a % rank for a in axes] if rank else axes), [1] * len(axes)
    starts = f.consts[1] if len(f.consts) > 1 else None
    if starts is None:
        return None
    axes_v = f.consts[3] if len(f.consts) > 3 and f.consts[3] is not None else np.arange(starts.size)
    steps_v = f.consts[4] if len(f.consts) > 4 and f.consts[4] is not None else np.ones(starts.size)
    axes = [int(a) % rank if rank else int(a) for a in axes_v.ravel()]
    return axes, [int(s) for s in steps_v.ravel()]


def check_slice(f: NodeFacts) -> list[str]:
    # API ISliceLayer, DLA constraints: build-time start/size/stride/axes; strides 1; not the first
    # dimension; a four-dimensional input
    if not all(f.const_inputs[1:]):
        return ["slice bounds computed at run time (API ISliceLayer: build-time constants on DLA)"]
    problems = [] if _rank(f) in (None, 4) else [f"slice of a rank-{_rank(f)} tensor (API ISliceLayer: "
                                                  "the DLA slices four-dimensional inputs)"]
    parsed = _slice_axes(f)
    if parsed is not None:
        axes, steps = parsed
        if any(s != 1 for s in steps):
            problems.append(f"slice steps {steps} (API ISliceLayer: strides 1 on DLA)")
        if 0 in axes:
            problems.append("slice on the first dimension (API ISliceLayer: not on DLA)")
    return problems


def check_split(f: NodeFacts) -> list[str]:
    # the ONNX parser builds Split from slice layers, so the slice rules apply (API ISliceLayer)
    rank = _rank(f)
    problems = [] if rank in (None, 4) else [f"split of a rank-{rank} tensor (API ISliceLayer: the DLA "
                                             "slices four-dimensional inputs)"]
    if rank and int(f.attrs.get("axis", 0)) % rank == 0:
        problems.append("split on the first dimension (API ISliceLayer: not on DLA)")
    return problems


def check_softmax(f: NodeFacts) -> list[str]:
    shape = f.in_shapes[0] if f.in_shapes else None
    if shape is None:
        return []
    rank = len(shape)
    axis = int(f.attrs.get("axis", -1 if f.opset >= 13 else 1)) % rank
    if axis == 0:  # API ISoftMaxLayer: "Axis must be one of the channel or spatial dimensions"
        return [f"softmax along axis 0 (batch) (API ISoftMaxLayer: channel or spatial axis only)"]
    size, others = shape[axis], [d for i, d in enumerate(shape) if i not in (0, axis)]
    if size is None or any(d is None for d in others):
        return []
    limit = SOFTMAX_AXIS_ALONE if all(d == 1 for d in others) else SOFTMAX_AXIS_MIXED
    return [] if size <= limit else [f"softmax axis size {size} > {limit} (API ISoftMaxLayer)"]


def check_shuffle(f: NodeFacts) -> list[str]:
    # The summary table's Shuffle limits are not documented in the text this lint follows; what is stated
    # is that DLA layers compute on 4-D NCHW tensors, so a reshape/transpose that leaves 4-D is reported.
    ranks = (_rank(f), _rank(f, out=True))
    if None in ranks or ranks == (4, 4):
        return []
    return [f"{f.op} from rank {ranks[0]} to rank {ranks[1]}: DLA tensors are 4-D NCHW ('2D only', TABLE); "
            "Shuffle limits beyond that not documented"]


def check_batchnorm(f: NodeFacts) -> list[str]:
    # Built as a Scale layer; the guide's intro lists batch normalization among DLA layers. Limits beyond
    # build-time parameters on a 4-D tensor are not documented in the text this lint follows.
    problems = _need_4d(f, "BatchNormalization (Scale)")
    if not all(f.const_inputs[1:]):
        problems.append("BatchNormalization parameters computed at run time (Scale needs build-time weights)")
    return problems


RULES: dict[str, Callable[[NodeFacts], list[str]]] = {
    "Conv": check_conv, "ConvTranspose": check_deconv, "MaxPool": check_pool, "AveragePool": check_pool,
    "GlobalAveragePool": check_pool, "GlobalMaxPool": check_pool, "PRelu": check_prelu,
    "Concat": check_concat, "LRN": check_lrn, "Resize": check_resize, "Upsample": check_resize,
    "Slice": check_slice, "Split": check_split, "Softmax": check_softmax,
    "BatchNormalization": check_batchnorm,
    **{op: check_activation for op in ACTIVATIONS}, **{op: check_elementwise for op in ELEMENTWISE},
    **{op: check_comparison for op in COMPARISONS}, **{op: check_shuffle for op in SHUFFLES},
}


def check_dims(f: NodeFacts) -> list[str]:
    """GENERAL: non-batch dimensions up to 8192; batch (product of all but the last three) up to 4096."""
    problems = []
    for shape in f.out_shapes:
        if shape is None or any(d is None for d in shape):
            continue
        dims = [int(d) for d in shape if d is not None]
        big = [d for d in dims[-3:] if d > MAX_DIM]
        batch = int(np.prod(dims[:-3])) if len(dims) > 3 else 1
        if big:
            problems.append(f"output dims {dims}: {big[0]} > {MAX_DIM} (GENERAL: non-batch dimension limit)")
        if batch > MAX_BATCH:
            problems.append(f"output dims {dims}: batch {batch} > {MAX_BATCH} (GENERAL)")
    return problems


def judge(f: NodeFacts) -> tuple[bool, str]:
    """(runs on the DLA?, reason) for one runtime node (not folded, not a no-op)."""
    if f.op in UNARY:
        if f.op not in UNARY_DLA:
            return False, f"unary {f.op}: on DLA only Abs (API IUnaryLayer)"
        problems = _need_4d(f, "Unary")
    elif f.op in UNSUPPORTED:
        return False, UNSUPPORTED[f.op]
    elif f.op in RULES:
        problems = RULES[f.op](f)
    else:
        return False, f"{f.op}: not a DLA layer (not in the DLA Layer Support Summary)"
    problems += check_dims(f)
    return (not problems), ("; ".join(problems) if problems else "within the documented DLA limits")
