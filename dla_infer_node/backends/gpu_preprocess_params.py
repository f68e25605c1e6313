"""What the GPU preprocess kernel is given, and the checks made before any CUDA call (no GPU needed).

:func:`check_layout` rejects destination layouts the kernel cannot fill and :func:`check_frame` a frame it
cannot take; :func:`static_params` and :func:`set_geometry` fill the kernel's parameter block so that the
kernel reproduces the CPU path (``core.preprocess`` + ``core.tensor_format.pack``) byte for byte. The
kernel itself and why it matches: :mod:`dla_infer_node.backends.preprocess_kernel`; compiling and
launching it: :mod:`dla_infer_node.backends.gpu_preprocess`. The CPU tests exercise all of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dla_infer_node.backends import preprocess_kernel as pk
from dla_infer_node.core import encodings
from dla_infer_node.core.errors import BackendError, InputError, ParameterError

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


@dataclass(frozen=True)
class SourceFormat:
    """How the kernel reads one encoding of :mod:`dla_infer_node.core.encodings` (``family`` picks the kernel,
    see ``preprocess_kernel``)."""

    family: str
    channels: int = 1                       # samples per pixel (packed families)
    rgb: tuple[int, int, int] = (0, 1, 2)   # sample index of R, G, B within a pixel (packed families)
    yuv_off: tuple[int, int, int] = (0, 0, 0)  # YUV: byte of Y in a pixel, of U and V in a pair / NV row
    bayer: str = ""                         # Bayer: colours of the 2x2 tile, row by row

    @property
    def sample_bytes(self) -> int:
        return 2 if self.family in ("packed16", "bayer16") else 1

    @property
    def packed(self) -> bool:
        return self.family in pk.PACKED_FAMILIES


# where the kernel finds Y, U and V: the byte of Y within a pixel, of U and V within a pixel pair (4:2:2:
# YUYV = Y0 U Y1 V, UYVY = U Y0 V Y1) or within a chroma pair of an NV12/NV21 chroma row
_YUV_OFF = {"yuyv": (0, 1, 3), "uyvy": (1, 0, 2), "nv12": (0, 0, 1), "nv21": (0, 1, 0)}
_FAMILY = {encodings.PACKED: "packed", encodings.YUV422: "yuv422", encodings.YUV420SP: "nv",
           encodings.BAYER: "bayer"}


def _reading(enc: encodings.Encoding) -> SourceFormat:
    family = _FAMILY[enc.family]
    if family in ("packed", "bayer"):
        family += str(enc.bits)
    return SourceFormat(family, enc.channels if enc.family == encodings.PACKED else 1,
                        enc.rgb_index or (0, 1, 2), _YUV_OFF.get(enc.name, (0, 0, 0)),
                        enc.name[len("bayer_"):-len(str(enc.bits))] if enc.family == encodings.BAYER else "")


# every encoding of the node's table, as the kernel reads it (aliases resolve through encodings.canonical)
SOURCE_FORMATS: dict[str, SourceFormat] = {name: _reading(e) for name, e in encodings.TABLE.items()}


def source_format(encoding: str) -> SourceFormat:
    """The kernel's reading of ``encoding``; :class:`InputError` (one line naming it) when there is none."""
    return SOURCE_FORMATS[encodings.canonical(encoding, STAGE)]


def frame_shape(encoding: str, w: int, h: int) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` of the view a ``w`` x ``h`` frame of ``encoding`` is handed over as."""
    enc = encodings.lookup(encoding, STAGE)
    return (enc.rows(h), w, enc.channels), enc.dtype


def check_frame(image: Any, encoding: str, max_w: int, max_h: int) -> np.ndarray:
    """Validate one frame before anything is enqueued; returns its 3-D view (``core.encodings``' shapes:
    16-bit ones carry their byte order in the dtype, a ``>u2`` view is a big-endian frame)."""
    img, enc = encodings.validate(image, encoding, stage=STAGE)
    w, h = encodings.frame_size(img, enc)
    if w > max_w or h > max_h:
        raise InputError(f"frame {w}x{h} larger than the staging buffer ({max_w}x{max_h}, set at startup)",
                         call="GpuInputPath.enqueue", params={"encoding": encoding, "shape": img.shape},
                         stage=STAGE, hint="raise max_width/max_height of the GPU input path")
    return img


def frame_size(image: np.ndarray, encoding: str) -> tuple[int, int]:
    """``(width, height)`` in pixels of a frame already checked by :func:`check_frame`."""
    return encodings.frame_size(image, encodings.lookup(encoding, STAGE))


def source_channels(encoding: str, channel_order: str) -> tuple[int, int, int]:
    """Per model channel (metadata order): byte offset within a packed pixel, or R/G/B index (0-2)."""
    fmt = source_format(encoding)
    r, g, b = (i * fmt.sample_bytes for i in fmt.rgb) if fmt.packed else (0, 1, 2)
    return (r, g, b) if channel_order == "rgb" else (b, g, r)


def source_tables(fmt: SourceFormat, w: int) -> tuple[int, int, int]:
    """``(tap unit, row unit, staged row bytes)``: how tap tables address this family's staged frame."""
    if fmt.packed:
        pixel = fmt.channels * fmt.sample_bytes
        return pixel, pixel * w, pixel * w
    return 1, 1, w * (2 if fmt.family == "yuv422" else fmt.sample_bytes)


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
    p.n, p.h, p.w, p.c = layout.n, layout.h, layout.w, layout.c
    p.groups = {"linear": layout.c, "hwc4": 1}.get(layout.format, -(-layout.c // layout.vector))
    p.span, p.work = pk.thread_span(layout.size, layout.n, p.groups, p.surface, p.batch)
    p.line_m, p.line_s = pk.divisor_magic(p.line)
    p.span_m, p.span_s = pk.divisor_magic(p.span)
    for k, (mean, std) in enumerate(zip(spec.mean, spec.std, strict=True)):
        p.alpha[k] = np.float32(1.0 / std)  # what cv2.addWeighted gets from the CPU path
        p.gamma[k] = np.float32(-mean / std)
        p.pad[k] = np.float32((spec.pad_value - mean) / std)  # as the CPU path fills its padding
    p.scale = np.float32(int8_scale) if layout.dtype == "int8" and int8_scale is not None else 1.0
    return p


def set_geometry(p: pk.PackParams, spec: InputSpec, lb: Letterbox, encoding: str,
                 big_endian: bool = False) -> None:
    """Kernel parameters that follow the frame: letterbox placement, source reading, rounding mode."""
    fmt = source_format(encoding)
    p.pad_x, p.pad_y, p.new_w, p.new_h = lb.pad_x, lb.pad_y, lb.new_w, lb.new_h
    p.fused = int(cpu_path_fuses(spec, lb.new_w, lb.new_h, spec.width))
    for k, off in enumerate(source_channels(encoding, spec.channel_order)):
        p.src_off[k] = off
    p.src_w, p.src_h = lb.src_w, lb.src_h
    p.src_step = source_tables(fmt, lb.src_w)[2]
    p.src_px = fmt.channels * fmt.sample_bytes if fmt.packed else 0
    p.swap = int(big_endian and fmt.sample_bytes == 2)
    for k, off in enumerate(fmt.yuv_off):
        p.yuv_off[k] = off
    colour = {"r": 0, "g": 1, "b": 2}
    p.bayer = sum(colour[ch] << (2 * i) for i, ch in enumerate(fmt.bayer))


def staged_bytes(image: np.ndarray) -> np.ndarray:
    """The frame's bytes as the staging buffer holds them (rows packed, byte order kept): tests."""
    return np.ascontiguousarray(image).reshape(-1).view(np.uint8)


def emulate_source_channels(staged: np.ndarray, p: pk.PackParams, family: str) -> np.ndarray:
    """What the kernel reads as each source pixel, from the staged bytes and the parameter block alone:
    ``(H, W, 3)`` uint8 in model channel order (numpy, for tests; resize it with ``emulate_resize``)."""
    w, h, step = p.src_w, p.src_h, p.src_step
    rows = staged[: step * (h * 3 // 2 if family == "nv" else h)].reshape(-1, step)
    off = list(p.src_off)[:3]
    if family in pk.PACKED_FAMILIES:
        wide = family == "packed16"
        pixel = step // w
        idx = np.arange(w)[:, None] * pixel + np.array(off)  # byte offset of each model channel
        if not wide:
            return rows[:h][:, idx]
        lo, hi = rows[:h][:, idx + p.swap], rows[:h][:, idx + 1 - p.swap]  # swap: big-endian samples
        return pk.to8(hi.astype(np.int64) << 8 | lo)
    if family in ("yuv422", "nv"):
        yo, uo, vo = list(p.yuv_off)[:3]
        x = np.arange(w)
        if family == "yuv422":
            luma = rows[:, 2 * x + yo]
            u, v = rows[:, 4 * (x // 2) + uo], rows[:, 4 * (x // 2) + vo]
        else:
            luma = rows[:h, :w]
            crow = rows[h + np.arange(h) // 2]
            u, v = crow[:, (x & ~1) + uo], crow[:, (x & ~1) + vo]
        return pk.yuv_rgb(luma, u, v)[:, :, off]
    wide = family == "bayer16"
    raw = rows[:, : w * (2 if wide else 1)]
    if wide:
        pairs = raw.reshape(h, w, 2).astype(np.int64)
        raw = pairs[:, :, 1 - p.swap] << 8 | pairs[:, :, p.swap]
    site = tuple((p.bayer >> (2 * i)) & 3 for i in range(4))
    rgb = pk.emulate_demosaic(raw, site)
    return (pk.to8(rgb) if wide else rgb.astype(np.uint8))[:, :, off]
