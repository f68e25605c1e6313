"""TensorRT's documented DLA layer support and restrictions: one small check per layer kind.

Sources, cited per rule below:
- GENERAL / TABLE: TensorRT Developer Guide, "Working with DLA" -> "DLA Supported Layers and Restrictions"
  (its "General Restrictions" list and its "DLA Layer Support Summary" table, TensorRT 10.x/11.x text).
- API: the per-layer "If executing this layer on DLA ..." notes of TensorRT's API reference (NvInfer.h of
  TensorRT 11.1), which give the exact ranges the summary table abbreviates.
Where neither states a limit, no limit is invented: the reason says "not documented".

The limits themselves are data in ``dla_limits``; the data-movement checks (Resize, Slice, Split,
Softmax, Shuffle, BatchNormalization) live in ``dla_rules_data``. A check takes the ONNX node's facts
(attributes, static shapes, build-time constant inputs) and returns the problems found; no problem means
the layer runs on the DLA. Checks never raise on odd graphs: what they cannot read they do not judge.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dla_infer_node.dla_build.dla_limits import (
    ACTIVATIONS,
    COMPARISONS,
    CONV_DILATION,
    CONV_GROUPS,
    CONV_KERNEL,
    CONV_PAD,
    CONV_STRIDE,
    DECONV_LARGE,
    ELEMENTWISE,
    GENERAL,
    LRN_WINDOWS,
    MAX_BATCH,
    MAX_DIM,
    NO_OPS,
    OPSET_RANGE,
    OUTPUT_MAPS,
    POOL_PAD,
    POOL_STRIDE,
    POOL_WINDOW,
    SHUFFLES,
    UNARY,
    UNARY_DLA,
    UNSUPPORTED,
    NodeFacts,
    in_range,
    need_4d,
    pads_hw,
    rank_of,
    spatial,
)
from dla_infer_node.dla_build.dla_rules_data import (
    check_batchnorm,
    check_resize,
    check_shuffle,
    check_slice,
    check_softmax,
    check_split,
)

# re-exported: the lint reads the general limits and the node facts through this module
__all__ = ["GENERAL", "MAX_BATCH", "MAX_DIM", "NO_OPS", "OPSET_RANGE", "QDQ_OPS", "RULES", "NodeFacts",
           "check_qdq", "judge"]


def check_conv(f: NodeFacts) -> list[str]:
    weight = f.consts[1] if len(f.consts) > 1 else None
    kernel = spatial(f, "kernel_shape", 1) if "kernel_shape" in f.attrs or weight is None \
        else [int(v) for v in weight.shape[2:]]
    pads = pads_hw(f)
    problems = need_4d(f, "Convolution")
    problems += in_range("kernel", kernel, CONV_KERNEL, "API IConvolutionLayer")
    problems += in_range("stride", spatial(f, "strides", 1), CONV_STRIDE, "API IConvolutionLayer")
    problems += in_range("padding", pads, CONV_PAD, "API IConvolutionLayer")
    if any(p >= k for p, k in zip(pads, kernel + kernel, strict=False)):
        problems.append(f"padding {pads} not less than kernel {kernel} (API IConvolutionLayer)")
    problems += in_range("dilation", spatial(f, "dilations", 1), CONV_DILATION, "API IConvolutionLayer")
    problems += in_range("groups", [int(f.attrs.get("group", 1))], CONV_GROUPS, "API IConvolutionLayer")
    if weight is not None:
        problems += in_range("output maps", [int(weight.shape[0])], OUTPUT_MAPS, "API IConvolutionLayer")
    elif len(f.const_inputs) > 1 and not f.const_inputs[1]:
        problems.append("weights computed at run time; run-time weights on DLA: not documented")
    return problems


def _deconv_dims(label: str, values: list[int]) -> list[str]:
    # API IDeconvolutionLayer: each in [1,32], or [64|96|128] in one dimension with 1 in the other
    if all(1 <= v <= 32 for v in values):
        return []
    if len(values) == 2 and sorted(values)[0] == 1 and max(values) in DECONV_LARGE:
        return []
    return [f"{label} {values} outside [1,32] and not 64/96/128 by 1 (API IDeconvolutionLayer)"]


def check_deconv(f: NodeFacts) -> list[str]:
    problems = need_4d(f, "Deconvolution")
    weight = f.consts[1] if len(f.consts) > 1 else None
    kernel = spatial(f, "kernel_shape", 1) if weight is None else [int(v) for v in weight.shape[2:]]
    problems += _deconv_dims("kernel", kernel) + _deconv_dims("stride", spatial(f, "strides", 1))
    if int(f.attrs.get("group", 1)) != 1:  # TABLE "no grouped/dilated"; API setNbGroups "must be one"
        problems.append("grouped deconvolution (TABLE: no grouped/dilated)")
    if any(d != 1 for d in spatial(f, "dilations", 1)):
        problems.append("dilated deconvolution (TABLE: no grouped/dilated)")
    if any(pads_hw(f)):  # TABLE "padding must be 0"
        problems.append(f"padding {pads_hw(f)} (TABLE: padding must be 0)")
    if weight is not None:
        maps = int(weight.shape[1]) * int(f.attrs.get("group", 1))
        problems += in_range("output maps", [maps], OUTPUT_MAPS, "API IDeconvolutionLayer")
    return problems


def check_pool(f: NodeFacts) -> list[str]:
    problems = need_4d(f, "Pooling")
    shape = f.in_shapes[0] if f.in_shapes else None
    if f.op.startswith("Global"):
        if shape is None or any(d is None for d in shape[2:]):
            return problems
        window = [int(d) for d in shape[2:] if d is not None]  # a global pool is a window over all of H x W
    else:
        window = spatial(f, "kernel_shape", 1)
        problems += in_range("stride", spatial(f, "strides", 1), POOL_STRIDE, "API IPoolingLayer")
        problems += in_range("padding", pads_hw(f), POOL_PAD, "API IPoolingLayer")
        if any(d != 1 for d in spatial(f, "dilations", 1)):
            problems.append("dilated pooling: TensorRT's pooling layer has no dilation")
    return problems + in_range("window", window, POOL_WINDOW, "API IPoolingLayer")


def check_activation(f: NodeFacts) -> list[str]:
    problems = need_4d(f, "Activation")
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
    return need_4d(f, f"ElementWise {f.op}", out=True)


def check_comparison(f: NodeFacts) -> list[str]:
    # TABLE Comparison row: INT8 only, "Output must be cast to FP16/INT8 immediately"
    if f.consumer_ops and all(op == "Cast" for op in f.consumer_ops):
        return need_4d(f, f"Comparison {f.op}", out=True)
    return [f"{f.op} output not cast right away (TABLE: output must be cast to FP16/INT8 immediately)"]


def check_concat(f: NodeFacts) -> list[str]:
    rank = rank_of(f, out=True)
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
        problems.append(f"inputs differ in spatial dims {sorted(spatial, key=str)} (TABLE: same dims)")
    return problems


QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
QDQ_CITE = "TensorRT Developer Guide, Explicit Quantization; Working with DLA"


def check_qdq(f: NodeFacts) -> list[str]:
    """A Q/DQ node on a run-time tensor. TensorRT builds no layer for it: it fuses the Q/DQ pair into the
    int8 layers around it (explicit quantization), which needs a build-time, per-tensor (the DLA's
    activations take one scale each) scale and a zero point of 0 in int8 (symmetric quantization only)."""
    problems = []
    scale = f.consts[1] if len(f.consts) > 1 else None
    if len(f.const_inputs) < 2 or not f.const_inputs[1]:
        problems.append(f"{f.op} scale computed at run time ({QDQ_CITE}: scales are build-time constants)")
    elif scale is not None and np.asarray(scale).size != 1:
        problems.append(f"{f.op} of an activation with {np.asarray(scale).size} scales: per-tensor only "
                        f"({QDQ_CITE})")
    if len(f.const_inputs) > 2 and f.const_inputs[2]:
        zero = f.consts[2]
        if zero is not None and (np.asarray(zero).dtype != np.int8 or np.any(np.asarray(zero) != 0)):
            problems.append(f"{f.op} zero point {np.asarray(zero).ravel()[:4].tolist()} of type "
                            f"{np.asarray(zero).dtype}: TensorRT quantizes symmetric int8, zero point 0 "
                            f"({QDQ_CITE})")
    elif len(f.const_inputs) > 2:
        problems.append(f"{f.op} zero point computed at run time ({QDQ_CITE})")
    return problems


def check_lrn(f: NodeFacts) -> list[str]:
    size = int(f.attrs.get("size", 0))
    return [] if size in LRN_WINDOWS else [f"LRN window {size} not in {list(LRN_WINDOWS)} (TABLE)"]


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
        problems = need_4d(f, "Unary")
    elif f.op in UNSUPPORTED:
        return False, UNSUPPORTED[f.op]
    elif f.op in RULES:
        problems = RULES[f.op](f)
    else:
        return False, f"{f.op}: not a DLA layer (not in the DLA Layer Support Summary)"
    problems += check_dims(f)
    return (not problems), ("; ".join(problems) if problems else "within the documented DLA limits")
