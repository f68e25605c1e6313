"""Pack a float NCHW tensor into, and unpack it from, a DLA loadable's byte layouts.

The layouts are :class:`~dla_infer_node.core.tensor_layout.TensorLayout`. Every element is addressed
through the layout's byte strides, and all bytes that no element occupies (row pads, pad channels,
slack at the end) are written as zero.

fp16 is stored little-endian; int8 is ``q = clamp(round_half_even(x / scale), -128, 127)`` (numpy's
``rint``, the same rounding Python's ``round`` uses).
"""

from __future__ import annotations

import threading

import cv2
import numpy as np

from dla_infer_node.core.tensor_layout import LayoutError, TensorLayout


def _check_buffer(buf: np.ndarray, layout: TensorLayout, call: str) -> np.ndarray:
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1:
        raise LayoutError("buffer must be a 1-D uint8 ndarray", call=call,
                          params={"got": getattr(buf, "dtype", type(buf).__name__),
                                  "ndim": getattr(buf, "ndim", None)})
    if buf.size < layout.size:
        raise LayoutError(f"buffer holds {buf.size} bytes, layout needs {layout.size}", call=call,
                          params={"format": layout.format, "shape": layout.shape})
    if not buf.flags.c_contiguous:
        raise LayoutError("buffer must be contiguous", call=call, params={"format": layout.format})
    return buf


def _scale_for(layout: TensorLayout, scale: float | None, call: str) -> float:
    if layout.dtype != "int8":
        return 1.0
    if scale is None or not np.isfinite(scale) or scale <= 0:
        raise LayoutError("int8 tensors need a positive finite calibration scale", call=call,
                          params={"scale": scale})
    return float(scale)


class _Scratch(threading.local):
    """Per-thread reusable temporaries, so that steady-state pack/unpack allocate nothing."""

    def __init__(self) -> None:
        self.arrays: dict[tuple[str, tuple[int, ...], str], np.ndarray] = {}

    def get(self, tag: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        key = (tag, shape, dtype.str)
        a = self.arrays.get(key)
        if a is None:
            if len(self.arrays) > 64:  # many distinct shapes: forget them rather than grow forever
                self.arrays.clear()
            a = self.arrays[key] = np.empty(shape, dtype)
        return a


_scratch = _Scratch()

# merge/split only move bits: fp16 travels as uint16 there, which every OpenCV version handles
_BITS: dict[str, np.dtype] = {"fp16": np.dtype("<u2"), "int8": np.dtype("i1")}


def _probe_cv2_fp16() -> bool:
    """Whether this OpenCV converts float32 <-> float16 in arithmetic ops exactly as numpy does.

    OpenCV 5 does (and ~7x faster than numpy's cast here); older builds may refuse CV_16F there, and
    then numpy does the conversion.
    """
    try:
        a = np.array([[1.0, 0.1, -2.5e-3, 65504.0, 3.0e-7, 1.0 + 2.0**-11]], np.float32)
        h = np.empty(a.shape, np.float16)
        cv2.addWeighted(a, 1.0, a, 0.0, 0.0, dst=h, dtype=cv2.CV_16F)
        f = np.empty(a.shape, np.float32)
        cv2.addWeighted(h, 1.0, h, 0.0, 0.0, dst=f, dtype=cv2.CV_32F)
        return bool(np.array_equal(h, a.astype(np.float16)) and np.array_equal(f, h.astype(np.float32)))
    except (cv2.error, AttributeError, TypeError):
        return False


CV2_FP16 = _probe_cv2_fp16()


def _elements(x: np.ndarray, layout: TensorLayout, scale: float) -> np.ndarray:
    """``x`` converted to the layout's element type, C-contiguous (a per-thread scratch array).

    fp16 goes through OpenCV (F16C/SIMD, round-to-nearest-even like numpy's cast, ~7x faster here);
    int8 uses numpy so the rounding is literally ``rint(x / scale)`` then clamp.
    """
    e = _scratch.get("elem", layout.shape, layout.np_dtype)
    if layout.dtype == "fp16" and not CV2_FP16:
        np.copyto(e, x, casting="same_kind")
        return e
    if layout.dtype == "fp16":
        src = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, layout.w)
        cv2.addWeighted(src, 1.0, src, 0.0, 0.0, dst=e.reshape(-1, layout.w), dtype=cv2.CV_16F)
        return e
    q = _scratch.get("quant", layout.shape, np.dtype(np.float32))
    np.divide(x, np.float32(scale), out=q, dtype=np.float32)
    np.rint(q, out=q)
    np.clip(q, -128, 127, out=q)
    np.copyto(e, q, casting="unsafe")
    return e


def _interleaved(buf: np.ndarray, layout: TensorLayout, n: int, plane: int) -> np.ndarray:
    """The (H, W, V) bit-view of one batch item's plane/channel group (V = 4 for hwc4 C=3/4, 16, 32)."""
    atom, line, surface, batch = layout.strides
    return np.ndarray((layout.h, layout.w, layout.vector), dtype=_BITS[layout.dtype], buffer=buf,
                      offset=n * batch + plane * surface, strides=(line, atom, layout.elem_size))


def _typed(bits: np.ndarray, layout: TensorLayout) -> np.ndarray:
    return bits.view(layout.np_dtype)


def _landed_in(r: np.ndarray, dst: np.ndarray) -> None:
    """OpenCV writes into ``dst`` unless it had to reallocate (a view it cannot take as is): then the
    result ``r`` is copied over."""
    if r is not dst and r.ctypes.data != dst.ctypes.data:
        np.copyto(dst, r.reshape(dst.shape))


def _merge_into(planes: list[np.ndarray], dst: np.ndarray) -> None:
    _landed_in(cv2.merge(planes, dst), dst)


def _planar(layout: TensorLayout) -> bool:
    """One channel per plane (linear, or a vector of 1): rows are contiguous, numpy copies them row-wise."""
    return layout.format == "linear" or layout.vector == 1


def _groups(layout: TensorLayout) -> int:
    """Interleaved channel groups: hwc4 holds every channel in one, chwN needs ceil(C / N)."""
    return 1 if layout.format == "hwc4" else -(-layout.c // layout.vector)


def _covers_all(layout: TensorLayout) -> bool:
    """Whether writing every atom (pad channels included) writes every byte: then no zero-fill is needed."""
    atom, line, surface, batch = layout.strides
    if _planar(layout):
        return False
    return (line == layout.w * atom and surface == line * layout.h and batch == surface * _groups(layout)
            and layout.size == batch * layout.n)


def pack(x: np.ndarray, layout: TensorLayout, scale: float | None = None,
         out: np.ndarray | None = None) -> np.ndarray:
    """Pack ``x`` ``(N, C, H, W)`` float into a uint8 buffer of ``layout.size`` bytes.

    With ``out`` (a 1-D uint8 array of at least ``layout.size`` bytes) nothing is allocated in the
    steady state (temporaries are per-thread and reused). Padding is written as zero on every call, so
    a reused buffer never leaks a previous frame into pad bytes.
    """
    x = np.asarray(x)
    if x.shape != layout.shape:
        raise LayoutError(f"tensor shape {x.shape} does not match layout shape {layout.shape}",
                          call="pack", params={"format": layout.format, "dtype": layout.dtype})
    if x.dtype.kind != "f":
        raise LayoutError(f"tensor must be floating point, got {x.dtype}", call="pack",
                          params={"format": layout.format})
    s = _scale_for(layout, scale, "pack")
    if out is None:
        out = np.zeros(layout.size, dtype=np.uint8)
    else:
        _check_buffer(out, layout, "pack")
        if not _covers_all(layout):
            out[: layout.size].fill(0)
    e = _elements(x, layout, s)
    if _planar(layout):
        np.copyto(layout.element_view(out), e)
        return out
    bits = _BITS[layout.dtype]
    v, zero = layout.vector, _scratch.get("zero", (layout.h, layout.w), bits)
    zero.fill(0)
    e = e.view(bits)
    for n in range(layout.n):
        for g in range(_groups(layout)):
            planes = [e[n, c] if c < layout.c else zero for c in range(g * v, g * v + v)]
            _merge_into(planes, _interleaved(out, layout, n, g))
    return out


def _probe_cv2_fp16_widen() -> bool:
    """Whether this OpenCV widens float16 to float32 exactly as numpy's cast does, infinities, signed zeros
    and subnormals included (``cv2.multiply`` by 1; OpenCV 5 does, ~7x faster than numpy here)."""
    try:
        h = np.array([[np.inf, -np.inf, -0.0, 6e-8, -6.1e-5, 1.0 + 2.0**-10, 65504.0]], np.float16)
        f = np.empty(h.shape, np.float32)
        cv2.multiply(h, 1.0, dst=f, dtype=cv2.CV_32F)
        return bool(np.array_equal(f.view(np.uint32), h.astype(np.float32).view(np.uint32)))
    except (cv2.error, AttributeError, TypeError):
        return False


CV2_FP16_WIDEN = _probe_cv2_fp16_widen()


def _widen(src: np.ndarray, dst: np.ndarray, layout: TensorLayout, scale: float) -> None:
    """``dst`` (float32, rows contiguous) = the elements ``src`` (2-D; rows may be strided) as float32:
    fp16 exactly as numpy casts it, int8 times the calibration scale (in float32)."""
    # OpenCV takes an array of one column and up to 4 rows for a scalar: such tiny ones go through numpy
    if layout.dtype == "fp16" and CV2_FP16_WIDEN and src.shape[1] > 1:
        _landed_in(cv2.multiply(src, 1.0, dst=dst, dtype=cv2.CV_32F), dst)
    elif layout.dtype == "fp16":
        np.copyto(dst, src)
    else:
        np.multiply(src, np.float32(scale), out=dst, dtype=np.float32)


def _planar_rows(buf: np.ndarray, layout: TensorLayout) -> np.ndarray | None:
    """The elements of a planar layout as one ``(N*C*H, W)`` view (rows ``line`` bytes apart), or None
    when planes or batch items are not evenly spaced rows."""
    atom, line, surface, batch = layout.strides
    if atom != layout.elem_size or surface != layout.h * line:
        return None
    if layout.n > 1 and batch != layout.c * surface:
        return None
    return np.ndarray((layout.n * layout.c * layout.h, layout.w), dtype=layout.np_dtype, buffer=buf,
                      strides=(line, atom))


def unpack(buf: np.ndarray, layout: TensorLayout, scale: float | None = None,
           out: np.ndarray | None = None) -> np.ndarray:
    """Read ``(N, C, H, W)`` float32 back from a packed buffer; padding is ignored.

    ``out`` (float32, C-contiguous, of the layout's shape) avoids the allocation. fp16 values come back
    exactly as numpy's cast gives them (infinities and signed zeros included).

    Few calls per tensor: a planar layout is one strided 2-D conversion; an interleaved one (hwc4, chwN)
    is, per channel group, one transpose of its ``(H*W, V)`` atoms into ``(V, H*W)`` planes and one
    conversion of the planes that hold real channels.
    """
    buf = np.asarray(buf)
    if buf.dtype != np.uint8:
        raise LayoutError(f"buffer must be uint8, got {buf.dtype}", call="unpack",
                          params={"format": layout.format})
    buf = _check_buffer(buf.reshape(-1), layout, "unpack")
    s = _scale_for(layout, scale, "unpack")
    if out is None:
        out = np.empty(layout.shape, dtype=np.float32)
    elif out.shape != layout.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise LayoutError(f"out must be C-contiguous float32 of shape {layout.shape}", call="unpack",
                          params={"out_shape": out.shape, "out_dtype": str(out.dtype)})
    if _planar(layout):
        rows = _planar_rows(buf, layout)
        if rows is not None:
            _widen(rows, out.reshape(-1, layout.w), layout, s)
            return out
        view = layout.element_view(buf)
        for n in range(layout.n):
            for c in range(layout.c):
                _widen(view[n, c], out[n, c], layout, s)
        return out
    v, hw = layout.vector, layout.h * layout.w
    bits = _BITS[layout.dtype]
    atom, line = layout.strides[:2]
    dense_rows = atom == v * layout.elem_size and line == layout.w * atom
    planes = _scratch.get("unpack_planes", (v, hw), bits)
    for n in range(layout.n):
        for g in range(_groups(layout)):
            group = _interleaved(buf, layout, n, g)
            if not dense_rows:  # row pads between the atoms: gather the rows first
                dense = _scratch.get("unpack_rows", group.shape, bits)
                np.copyto(dense, group)
                group = dense
            _landed_in(cv2.transpose(group.reshape(hw, v), dst=planes), planes)
            used = min(v, layout.c - g * v)
            _widen(_typed(planes[:used], layout), out[n, g * v: g * v + used].reshape(used, hw), layout, s)
    return out
