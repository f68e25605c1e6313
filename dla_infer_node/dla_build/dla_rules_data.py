"""DLA checks for the layers that move or resize data: Resize, Slice, Split, Softmax, Shuffle and the
Scale built from BatchNormalization. Each cites its source (see ``dla_limits``)."""

from __future__ import annotations

import numpy as np

from dla_infer_node.dla_build.dla_limits import (
    RESIZE_LINEAR,
    RESIZE_NEAREST,
    RESIZE_NEAREST_MODES,
    SOFTMAX_AXIS_ALONE,
    SOFTMAX_AXIS_MIXED,
    NodeFacts,
    need_4d,
    rank_of,
)


def check_resize(f: NodeFacts) -> list[str]:
    problems = need_4d(f, "Resize")
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
    default_rounding = "floor" if transform == "asymmetric" else "round_prefer_floor"
    rounding = str(f.attrs.get("nearest_mode", default_rounding))
    if mode == "nearest" and (transform, rounding) not in RESIZE_NEAREST_MODES:
        problems.append(f"nearest resize with ({transform}, {rounding}) (API IResizeLayer lists asymmetric+"
                        "floor, half_pixel+round_prefer_floor/ceil)")
    if mode == "linear" and transform != "half_pixel":
        problems.append(f"linear resize with '{transform}' (API IResizeLayer: half_pixel only)")
    return problems


def _slice_axes(f: NodeFacts) -> tuple[list[int], list[int]] | None:
    """(axes, steps) of a Slice when readable; opset < 10 carries them as attributes."""
    rank = rank_of(f)
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
    problems = [] if rank_of(f) in (None, 4) else [f"slice of a rank-{rank_of(f)} tensor (API ISliceLayer: "
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
    rank = rank_of(f)
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
        return ["softmax along axis 0 (batch) (API ISoftMaxLayer: channel or spatial axis only)"]
    size, others = shape[axis], [d for i, d in enumerate(shape) if i not in (0, axis)]
    if size is None or any(d is None for d in others):
        return []
    limit = SOFTMAX_AXIS_ALONE if all(d == 1 for d in others) else SOFTMAX_AXIS_MIXED
    return [] if size <= limit else [f"softmax axis size {size} > {limit} (API ISoftMaxLayer)"]


def check_shuffle(f: NodeFacts) -> list[str]:
    # The summary table's Shuffle limits are not documented in the text this lint follows; what is stated
    # is that DLA layers compute on 4-D NCHW tensors, so a reshape/transpose that leaves 4-D is reported.
    ranks = (rank_of(f), rank_of(f, out=True))
    if None in ranks or ranks == (4, 4):
        return []
    return [f"{f.op} from rank {ranks[0]} to rank {ranks[1]}: DLA tensors are 4-D NCHW ('2D only', TABLE); "
            "Shuffle limits beyond that not documented"]


def check_batchnorm(f: NodeFacts) -> list[str]:
    # Built as a Scale layer; the guide's intro lists batch normalization among DLA layers. Limits beyond
    # build-time parameters on a 4-D tensor are not documented in the text this lint follows.
    problems = need_4d(f, "BatchNormalization (Scale)")
    if not all(f.const_inputs[1:]):
        problems.append("BatchNormalization parameters computed at run time (Scale needs build-time weights)")
    return problems


