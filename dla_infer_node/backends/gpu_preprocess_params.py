"""What the GPU preprocess kernel is given, and the checks made before any CUDA call (no GPU needed).

:func:`check_layout` rejects destination layouts the kernel cannot fill and :func:`check_frame` a frame it
cannot take; :func:`static_params` and :func:`set_geometry` fill the kernel's parameter block so that the
kernel reproduces the CPU path (``core.preprocess`` + ``core.tensor_format.pack``) byte for byte. The
kernel itself and why it matches: :mod:`dla_infer_node.backends.preprocess_kernel`; compiling and
launching it: :mod:`dla_infer_node.backends.gpu_preprocess`. The CPU tests exercise all of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dla_infer_node.backends import preprocess_kernel as pk
from dla_infer_node.core.errors import BackendError, InputError, ParameterError
from dla_infer_node.core.image_io import RGB_INDEX, validate_image

if TYPE_CHECKING:
    from dla_infer_node.core.model_meta import InputSpec
    from dla_infer_node.core.preprocess import Letterbox
    from dla_infer_node.core.tensor_layout import TensorLayout

STAGE = "gpu_preprocess"


class GpuPreprocessError(BackendError):
    """The GPU preprocessing path failed (kernel compile, module load, launch, or an unusable layout)."""

    stage = STAGE


def check_layout(spec: InputSpec, layout: TensorLayout, int8_scale: float | None) -> None:
    """Reject, before any CUDA call, layouts the kernel cannot fill."""
    params = {"format": layout.format, "dtype": layout.dtype, "shape": layout.shape,
              "strides": layout.strides, "size": layout.size}
    if layout.dtype == "int8" and (int8_scale is None or not np.isfinite(int8_scale) or int8_scale <= 0):
        raise ParameterError("int8_scale", int8_scale, "a positive finite float for an int8 input tensor")
    problems = []
    if layout.n != 1:
        problems.append(f"batch {layout.n} (the node runs one frame at a time: N must be 1)")
    if layout.c != 3:
        problems.append(f"{layout.c} channels (the model input has 3)")
    if (layout.h, layout.w) != (spec.height, spec.width):
        problems.append(f"tensor {layout.w}x{layout.h} != metadata input {spec.width}x{spec.height}")
    if any(s % pk.STRIDE_ALIGN for s in layout.strides[1:]):
        problems.append(f"line/surface/batch strides {layout.strides[1:]} not multiples of 16 bytes")
    if not 0 < layout.size < 2**31:
        problems.append(f"size {layout.size} out of range")
    if (layout.elem_size, layout.vector) not in pk.VARIANTS:
        problems.append(f"no kernel for element size {layout.elem_size} with {layout.vector} channels/atom")
    if problems:
        raise GpuPreprocessError("layout not supported by the GPU path: " + "; ".join(problems),
                                 call="GpuInputPath", params=params,
                                 hint="use preprocess_device: cpu for this loadable")


def check_frame(image: Any, encoding: str, max_w: int, max_h: int) -> np.ndarray:
    """Validate one frame before anything is enqueued; returns its ``(H, W, C)`` view."""
    img = validate_image(image, encoding, stage=STAGE)
    h, w = img.shape[:2]
    if w > max_w or h > max_h:
        raise InputError(f"frame {w}x{h} larger than the staging buffer ({max_w}x{max_h}, set at startup)",
                         call="GpuInputPath.enqueue", params={"encoding": encoding, "shape": img.shape},
                         stage=STAGE, hint="raise max_width/max_height of the GPU input path")
    return img


def source_channels(encoding: str, channel_order: str) -> tuple[int, int, int]:
    """Byte offset within a source pixel of each model channel (metadata order)."""
    r, g, b = RGB_INDEX[encoding]
    return (r, g, b) if channel_order == "rgb" else (b, g, r)


def cpu_path_fuses(spec: InputSpec, new_w: int, new_h: int, dst_w: int) -> bool:
    """Whether the CPU path's ``cv2.addWeighted`` rounds ``pixel*alpha + gamma`` once (FMA) at this width.

    OpenCV's SIMD loop fuses; rows too short for it take a scalar loop that rounds twice (seen for rows
    under 32 floats on x86 AVX2). The kernel does whichever the CPU path does, found by running the same
    call on a probe value whose two results differ.
    """
    import cv2

    values = np.arange(256, dtype=np.float64)
    for mean, std in zip(spec.mean, spec.std, strict=True):
        a, g = np.float32(1.0 / std), np.float32(-mean / std)
        fused = (values * float(a) + float(g)).astype(np.float32)  # exact in float64 for these magnitudes
        split = values.astype(np.float32) * a + g
        differ = np.flatnonzero(fused != split)
        if differ.size:
            rows = min(new_h, 64)
            plane = np.full((rows, new_w), differ[0], np.uint8)
            canvas = np.zeros((rows, dst_w), np.float32)  # the CPU path writes into a view of its tensor
            view = canvas[:, :new_w]
            cv2.addWeighted(plane, 1.0 / std, plane, 0.0, -mean / std, dst=view, dtype=cv2.CV_32F)
            return bool(np.all(view == fused[differ[0]]))
    return True


def static_params(spec: InputSpec, layout: TensorLayout, int8_scale: float | None) -> pk.PackParams:
    """Kernel parameters fixed at startup: destination layout, normalisation, pad value, int8 scale."""
    p = pk.PackParams()
    p.size = layout.size
    p.line, p.surface, p.batch = layout.strides[1], layout.strides[2], layout.strides[3]
    p.line_m, p.line_s = pk.divisor_magic(layout.strides[1])
    p.surface_m, p.surface_s = pk.divisor_magic(layout.strides[2])
    p.batch_m, p.batch_s = pk.divisor_magic(layout.strides[3])
    p.n, p.h, p.w, p.c = layout.n, layout.h, layout.w, layout.c
    p.groups = {"linear": layout.c, "hwc4": 1}.get(layout.format, -(-layout.c // layout.vector))
    for k, (mean, std) in enumerate(zip(spec.mean, spec.std, strict=True)):
        p.alpha[k] = np.float32(1.0 / std)  # what cv2.addWeighted gets from the CPU path
        p.gamma[k] = np.float32(-mean / std)
        p.pad[k] = np.float32((spec.pad_value - mean) / std)  # as the CPU path fills its padding
    p.scale = np.float32(int8_scale) if layout.dtype == "int8" and int8_scale is not None else 1.0
    return p


def set_geometry(p: pk.PackParams, spec: InputSpec, lb: Letterbox, encoding: str) -> None:
    """Kernel parameters that follow the frame: letterbox placement, channel map, rounding mode."""
    p.pad_x, p.pad_y, p.new_w, p.new_h = lb.pad_x, lb.pad_y, lb.new_w, lb.new_h
    p.fused = int(cpu_path_fuses(spec, lb.new_w, lb.new_h, spec.width))
    for k, off in enumerate(source_channels(encoding, spec.channel_order)):
        p.src_off[k] = off
