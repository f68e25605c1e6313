"""DLA limits as data, the facts a check reads about one ONNX node, and the helpers the checks share.

The figures come from TensorRT's "Working with DLA" -> "DLA Supported Layers and Restrictions" section
(GENERAL, TABLE) and from the "If executing this layer on DLA" notes of TensorRT's API reference (API);
each constant names its source. ``dla_rules`` holds the checks that use them.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def in_range(label: str, values: Sequence[int], bounds: tuple[int, int], cite: str) -> list[str]:
    lo, hi = bounds
    bad = [v for v in values if not lo <= v <= hi]
    return [f"{label} {list(values)} outside [{lo},{hi}] ({cite})"] if bad else []


def rank_of(f: NodeFacts, index: int = 0, *, out: bool = False) -> int | None:
    shapes = f.out_shapes if out else f.in_shapes
    shape = shapes[index] if index < len(shapes) else None
    return None if shape is None else len(shape)


def need_4d(f: NodeFacts, layer: str, *, out: bool = False) -> list[str]:
    rank = rank_of(f, out=out)
    if rank is None or rank == SPATIAL_RANK:
        return []
    return [f"{layer} on a rank-{rank} tensor: DLA layers are '2D only', i.e. 4-D NCHW (TABLE)"]


def spatial(f: NodeFacts, name: str, default: int, n: int = 2) -> list[int]:
    value = f.attrs.get(name)
    return [int(v) for v in value] if value is not None else [default] * n


def pads_hw(f: NodeFacts) -> list[int]:
    return [int(v) for v in f.attrs.get("pads", [0, 0, 0, 0])]


