"""CPU preprocessing: letterbox, resize (cv2 INTER_LINEAR), channel order, normalisation, NCHW float32.

Geometry (fixed for CPU and GPU paths alike): ``scale = min(dst_w/src_w, dst_h/src_h)``,
``new_w = round(src_w*scale)``, ``new_h = round(src_h*scale)`` (at least 1), ``pad_x = (dst_w-new_w)//2``,
``pad_y = (dst_h-new_h)//2``; padding takes ``input.pad_value``; ``x = (pixel - mean) / std`` per channel
in the model's channel order.

Why the fast path looks the way it does: the only full-frame pass is ``cv2.resize`` at uint8. Everything
after it touches just the resized pixels: one de-interleave into preallocated planes, then one fused
``x*alpha + gamma`` per channel that writes float32 straight into the interior of a preallocated NCHW
tensor whose padding was filled once. No buffer is allocated per frame (fresh large allocations cost
page faults that were measured to be slower than the conversion itself).

One exact shortcut: when the frame is an odd whole multiple of the resized size on both axes (1920x1080 ->
640x360 is 3x), INTER_LINEAR's sample point ``(d + 0.5) * k - 0.5 = k*d + (k-1)/2`` falls exactly on a
pixel centre with weight 1, so the bilinear result IS the centre pixel of every k x k block. OpenCV's
INTER_NEAREST_EXACT picks exactly that pixel (``floor((d + 0.5) * k)``) without reading the other rows and
without the weighting: the same bytes, measured at about half the bilinear pass's time here
(0.15-0.18 ms vs 0.33-0.45 ms for 1920x1080 -> 640x360). Even factors
(2x averages two pixels) and fractional ones take INTER_LINEAR; tests compare both paths with
``cv2.resize(..., INTER_LINEAR)`` byte for byte.

On machines with many cores the de-interleave and conversions after the resize (one thread each) cost more
than the resize itself; for the shortcut with one normalisation for all channels there is a second way,
remap + LUT, both spread over OpenCV's pool (:mod:`dla_infer_node.core.preprocess_gather`). Which way is
faster depends on the machine (remap+LUT on a 16-core host, the usual way on 2 cores), so it is timed on
the first frame of each size.

Frames in the other camera encodings (YUV 4:2:2, NV12/NV21, Bayer, 16-bit) are converted to 8 bits first,
as cv_bridge converts them: at the network size where the resize is the odd-factor shortcut (exact, see
:mod:`dla_infer_node.core.convert_gather`), else whole (:mod:`dla_infer_node.core.color_convert`); a second
preprocessor then takes the 8-bit result, so neither's buffers displace the other's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from dla_infer_node.core import encodings
from dla_infer_node.core.color_convert import to_packed8
from dla_infer_node.core.convert_gather import GatherConvert
from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_io import RGB_INDEX, validate_image
from dla_infer_node.core.model_meta import InputSpec
from dla_infer_node.core.preprocess_gather import FusedGather, uniform_normalisation
from dla_infer_node.core.tensor_format import pack
from dla_infer_node.core.tensor_layout import TensorLayout


@dataclass(frozen=True)
class Letterbox:
    """Where the source image landed inside the network input, and how to map boxes back."""

    scale: float
    pad_x: int
    pad_y: int
    src_w: int
    src_h: int
    dst_w: int
    dst_h: int

    @classmethod
    def fit(cls, src_w: int, src_h: int, dst_w: int, dst_h: int) -> Letterbox:
        if min(src_w, src_h, dst_w, dst_h) < 1:
            raise InputError("letterbox needs positive sizes", call="Letterbox.fit",
                             params={"src": (src_w, src_h), "dst": (dst_w, dst_h)}, stage="preprocess")
        scale = min(dst_w / src_w, dst_h / src_h)
        new_w = max(1, round(src_w * scale))
        new_h = max(1, round(src_h * scale))
        return cls(scale, (dst_w - new_w) // 2, (dst_h - new_h) // 2, src_w, src_h, dst_w, dst_h)

    @property
    def new_w(self) -> int:
        return max(1, round(self.src_w * self.scale))

    @property
    def new_h(self) -> int:
        return max(1, round(self.src_h * self.scale))

    @property
    def content(self) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1) of the image inside the network input; the rest is padding."""
        return (float(self.pad_x), float(self.pad_y), float(self.pad_x + self.new_w),
                float(self.pad_y + self.new_h))

    def to_source(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        """Network-input xyxy boxes -> source pixels (pad removed, scale undone, clipped to the image).

        The scale is undone per axis with the exact factor the resize used (``new_w/src_w``), which
        differs from ``scale`` by the rounding of the new size.
        """
        b = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
        sx = np.float32(self.new_w / self.src_w)
        sy = np.float32(self.new_h / self.src_h)
        out = np.empty_like(b)
        out[:, 0::2] = (b[:, 0::2] - np.float32(self.pad_x)) / sx
        out[:, 1::2] = (b[:, 1::2] - np.float32(self.pad_y)) / sy
        np.clip(out[:, 0::2], 0, self.src_w, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, self.src_h, out=out[:, 1::2])
        return out

    def to_network(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        """Source-pixel xyxy boxes -> network-input pixels (the inverse of :meth:`to_source`, unclipped)."""
        b = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4)
        out = np.empty_like(b)
        out[:, 0::2] = b[:, 0::2] * np.float32(self.new_w / self.src_w) + np.float32(self.pad_x)
        out[:, 1::2] = b[:, 1::2] * np.float32(self.new_h / self.src_h) + np.float32(self.pad_y)
        return out


def _scale_shift(src: np.ndarray, alpha: float, gamma: float, dst: np.ndarray) -> None:
    """``dst = src * alpha + gamma`` as float32, uint8 plane in, written into ``dst`` (a strided view).

    OpenCV exposes its fast ``convertTo(dst, CV_32F, alpha, gamma)`` to Python only through
    ``normalize(NORM_MINMAX)``, which maps [src.min, src.max] linearly onto [a, b]: choosing
    ``a = min*alpha + gamma`` and ``b = max*alpha + gamma`` makes that exactly ``alpha`` and ``gamma``
    (to float rounding, <1e-7 relative). Measured 2-2.5x faster than ``addWeighted`` on a 640x360 plane.
    ``normalize`` orders a/b itself, so a negative ``alpha`` takes the general path. For ``gamma == 0``
    the preprocessor may use a scaled multiply instead (see :func:`multiply_is_fast`).
    """
    if alpha > 0:
        lo, hi, _, _ = cv2.minMaxLoc(src)
        cv2.normalize(src, dst, lo * alpha + gamma, hi * alpha + gamma, cv2.NORM_MINMAX, cv2.CV_32F)
    else:
        cv2.addWeighted(src, alpha, src, 0.0, gamma, dst=dst, dtype=cv2.CV_32F)


@functools.lru_cache(maxsize=1)
def multiply_is_fast() -> bool:
    """Whether this OpenCV build converts uint8 -> float32 as fast with a scaled multiply as with normalize.

    For a zero-mean model (``x = pixel * alpha``) ``multiply(src, 1, scale=alpha, dtype=CV_32F)`` is the
    same conversion without normalize's min/max scan: 0.07 vs 0.11 ms for three freshly split 640x360
    planes with OpenCV 5.1 here. But OpenCV 5.0 has no fast kernel for that multiply: 0.32 ms per plane
    against normalize's 0.047 ms on a 16-core x86 host. So it is measured once per process (best of 5
    calls each, ~1 ms) instead of assumed; within 1.5x counts as fast (the scan is then the extra cost).
    """
    src = np.random.default_rng(0).integers(0, 256, (360, 640), dtype=np.uint8)
    dst = np.empty((360, 640), np.float32)

    def best_of_5(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    mul = best_of_5(lambda: cv2.multiply(src, 1.0, dst=dst, scale=1 / 255, dtype=cv2.CV_32F))
    norm = best_of_5(lambda: _scale_shift(src, 1 / 255, 0.0, dst))
    return mul <= 1.5 * norm


def resize_interpolation(src_w: int, src_h: int, new_w: int, new_h: int) -> int:
    """The OpenCV interpolation that reproduces INTER_LINEAR for this size change (see the module doc)."""
    def odd_factor(src: int, new: int) -> bool:
        return src % new == 0 and (src // new) % 2 == 1

    if (src_w, src_h) != (new_w, new_h) and odd_factor(src_w, new_w) and odd_factor(src_h, new_h):
        return cv2.INTER_NEAREST_EXACT
    return cv2.INTER_LINEAR


def _source_index(encoding: str, channel_order: str) -> tuple[int, int, int]:
    """For each model channel (in metadata order) the channel index in the source frame."""
    r, g, b = RGB_INDEX[encoding]
    return (r, g, b) if channel_order == "rgb" else (b, g, r)


def letterbox_image(image: np.ndarray, encoding: str, dst_w: int, dst_h: int,
                    pad_value: int) -> tuple[np.ndarray, Letterbox]:
    """The letterboxed uint8 canvas ``(dst_h, dst_w, C)`` in the 8-bit packed encoding the frame converts
    to (its own for rgb8, bgr8, rgba8, bgra8, mono8; rgb8 for YUV and Bayer; reference/debug path)."""
    img = validate_image(*to_packed8(image, encoding, stage="preprocess"), stage="preprocess")
    h, w, c = img.shape
    lb = Letterbox.fit(w, h, dst_w, dst_h)
    canvas = np.full((dst_h, dst_w, c), pad_value, dtype=np.uint8)
    resized = cv2.resize(np.ascontiguousarray(img), (lb.new_w, lb.new_h), interpolation=cv2.INTER_LINEAR)
    y, x = lb.pad_y, lb.pad_x
    canvas[y:y + lb.new_h, x:x + lb.new_w] = resized.reshape(lb.new_h, lb.new_w, c)
    return canvas, lb


def reference_preprocess(image: np.ndarray, encoding: str, spec: InputSpec) -> tuple[np.ndarray, Letterbox]:
    """The preprocessing contract written out literally, in float64: slow, for tests and cross-checks."""
    canvas, lb = letterbox_image(image, encoding, spec.width, spec.height, spec.pad_value)
    idx = _source_index(to_packed8(image, encoding)[1], spec.channel_order)
    chw = canvas[:, :, list(idx)].astype(np.float64).transpose(2, 0, 1)
    mean = np.array(spec.mean, np.float64).reshape(3, 1, 1)
    std = np.array(spec.std, np.float64).reshape(3, 1, 1)
    return ((chw - mean) / std).astype(np.float32)[np.newaxis], lb


class Preprocessor:
    """Reusable CPU preprocessor for one model input; holds its buffers (not thread-safe: one per worker).

    The tensor returned by :meth:`__call__` is owned by the preprocessor and overwritten by the next
    call; copy it if you keep it.
    """

    def __init__(self, spec: InputSpec, *, fused_gather: bool | None = None) -> None:
        self.spec = spec
        # the odd-factor shortcut as remap + LUT (preprocess_gather) where it applies: None = timed
        # against the usual path on the first frame of each size, True/False = forced
        self.fused_gather = fused_gather
        self._gather: FusedGather | None = None
        self._use_gather: bool | None = None
        self._alpha = [1.0 / s for s in spec.std]
        self._gamma = [-m / s for m, s in zip(spec.mean, spec.std, strict=True)]
        self._tensor = np.empty((1, 3, spec.height, spec.width), dtype=np.float32)
        self._key: tuple[int, int, int, str] | None = None
        self._lb: Letterbox | None = None
        self._new_size: tuple[int, int] | None = None  # None: the frame already has the resized size
        self._small = np.empty(0, np.uint8)
        self._planes: list[np.ndarray] = []
        # per model channel: (source plane, alpha, gamma, tensor view), see _scale_shift
        self._steps: list[tuple[int, float, float, np.ndarray]] = []
        self.interpolation = cv2.INTER_LINEAR  # of the last frame size seen (see resize_interpolation)
        self.fast_multiply = multiply_is_fast()
        # frames that are not 8-bit packed: (encoding, w, h) -> its exact gather (None: convert it all)
        self._convert_key: tuple[str, int, int] | None = None
        self._convert: tuple[GatherConvert | None, Letterbox] | None = None
        self._inner: Preprocessor | None = None  # preprocesses what the conversion gives

    def _prepare(self, w: int, h: int, c: int, encoding: str) -> None:
        """(Re)build buffers and the per-channel steps when the frame size or encoding changes."""
        spec = self.spec
        lb = Letterbox.fit(w, h, spec.width, spec.height)
        for k in range(3):  # padding value is the same every frame: write it once
            self._tensor[0, k].fill(np.float32((spec.pad_value - spec.mean[k]) / spec.std[k]))
        self._small = np.empty((lb.new_h, lb.new_w) if c == 1 else (lb.new_h, lb.new_w, c), np.uint8)
        self._planes = [np.empty((lb.new_h, lb.new_w), np.uint8) for _ in range(c)] if c > 1 else []
        rows, cols = slice(lb.pad_y, lb.pad_y + lb.new_h), slice(lb.pad_x, lb.pad_x + lb.new_w)
        views = [self._tensor[0, k, rows, cols] for k in range(3)]
        index = _source_index(encoding, spec.channel_order)
        self._steps = [(src, self._alpha[k], self._gamma[k], views[k]) for k, src in enumerate(index)]
        self._new_size = None if (lb.new_w, lb.new_h) == (w, h) else (lb.new_w, lb.new_h)
        self.interpolation = resize_interpolation(w, h, lb.new_w, lb.new_h)
        self._gather, self._use_gather = None, self.fused_gather
        if (self.interpolation == cv2.INTER_NEAREST_EXACT and self.fused_gather is not False
                and uniform_normalisation(self._alpha, self._gamma) and FusedGather.fits(w, c)):
            self._gather = FusedGather(
                src_w=w, src_h=h, channels=c, source_index=index,
                new_w=lb.new_w, new_h=lb.new_h, pad_x=lb.pad_x, pad_y=lb.pad_y, tensor=self._tensor,
                alpha=self._alpha[0], gamma=self._gamma[0], pad_value=spec.pad_value)
        self._key, self._lb = (w, h, c, encoding), lb

    @property
    def gather_applies(self) -> bool:
        """Whether the last frame size has the remap + LUT way (see preprocess_gather)."""
        return self._gather is not None

    @property
    def uses_gather(self) -> bool:
        """Whether frames of the last size go the remap + LUT way (decided on the first of them)."""
        return self._gather is not None and bool(self._use_gather)

    def _usual(self, src: np.ndarray, c: int) -> None:
        """Resize (if needed), de-interleave, and convert each channel into the tensor."""
        small = src if self._new_size is None else cv2.resize(  # no resize pass when sizes match
            src, self._new_size, dst=self._small, interpolation=self.interpolation)
        self._normalise((small,) if c == 1 else cv2.split(small, self._planes))

    def _normalise(self, planes: Sequence[np.ndarray]) -> None:
        """Each model channel's uint8 plane (at the resized size) -> its window of the tensor."""
        for plane, alpha, gamma, view in self._steps:
            if gamma == 0.0 and self.fast_multiply:  # zero-mean model: no min/max scan needed
                cv2.multiply(planes[plane], 1.0, dst=view, scale=alpha, dtype=cv2.CV_32F)
            else:
                _scale_shift(planes[plane], alpha, gamma, view)

    def _tensor_of_planes(self, planes: Sequence[np.ndarray]) -> np.ndarray:
        """R, G and B uint8 planes already at the resized size (a converter's output) -> the tensor."""
        h, w = planes[0].shape
        if self._key != (w, h, 3, "rgb8"):
            self._prepare(w, h, 3, "rgb8")
        self._normalise(planes)
        return self._tensor

    def _gather_is_faster(self, gather: FusedGather, src: np.ndarray, c: int) -> bool:
        """Both ways three times, alternating, on this frame; the fastest single run decides (~3 ms once)."""
        best = {True: float("inf"), False: float("inf")}
        for use in (True, False) * 3:
            t0 = time.perf_counter()
            gather(src) if use else self._usual(src, c)
            best[use] = min(best[use], time.perf_counter() - t0)
        return best[True] < best[False]

    def _conversion(self, image: np.ndarray, encoding: str
                    ) -> tuple[np.ndarray, encodings.Encoding, GatherConvert | None, Letterbox]:
        """The validated view, its table entry, its exact gather (None: convert it whole), its letterbox."""
        img, enc = encodings.validate(image, encoding, stage="preprocess")
        w, h = encodings.frame_size(img, enc)
        if self._convert_key != (enc.name, w, h):
            lb = Letterbox.fit(w, h, self.spec.width, self.spec.height)
            small = Letterbox.fit(lb.new_w, lb.new_h, self.spec.width, self.spec.height)
            placed = (small.new_w, small.new_h, small.pad_x, small.pad_y) == (lb.new_w, lb.new_h, lb.pad_x,
                                                                               lb.pad_y)
            exact = placed and GatherConvert.applies(enc, w, h, lb.new_w, lb.new_h)
            self._convert = (GatherConvert(enc, w, h, lb.new_w, lb.new_h) if exact else None), lb
            self._convert_key = (enc.name, w, h)
        assert self._convert is not None  # set just above
        return img, enc, *self._convert

    def _converted(self, image: np.ndarray, encoding: str) -> tuple[np.ndarray, Letterbox]:
        """A YUV, NV12/NV21, Bayer or 16-bit frame: gathered and converted at the network size where that
        is exact (:mod:`dla_infer_node.core.convert_gather`), else converted whole (cv_bridge's way); the
        8-bit result goes through a second preprocessor, so its buffers never displace this one's."""
        img, enc, gather, lb = self._conversion(image, encoding)
        if self._inner is None:
            self._inner = Preprocessor(self.spec, fused_gather=self.fused_gather)
        try:
            if gather is None:
                return self._inner(*to_packed8(img, enc.name, stage="preprocess"))
            # a frame already at the resized size lands where the whole frame would (same letterbox)
            if gather.gives_planes:
                tensor = self._inner._tensor_of_planes(gather.planes(img))
            else:
                tensor, _ = self._inner(*gather.packed(img))
        except cv2.error as exc:
            raise InputError(f"OpenCV failed: {exc}", call="Preprocessor",
                             params={"shape": img.shape, "encoding": encoding}, stage="preprocess") from exc
        return tensor, lb

    def conversion_path(self, image: np.ndarray, encoding: str) -> str:
        """Which way a frame of this encoding and size is converted."""
        enc = encodings.lookup(encoding)
        if enc.family == encodings.PACKED and enc.bits == 8:
            return "none (8-bit packed)"
        gather = self._conversion(image, encoding)[2]
        if gather is not None:
            return gather.way
        return "converted whole (cv_bridge's code), then the 8-bit preprocess"

    def __call__(self, image: np.ndarray, encoding: str) -> tuple[np.ndarray, Letterbox]:
        """A frame (view shaped by its encoding, see :mod:`dla_infer_node.core.encodings`) ->
        ``(1, 3, dst_h, dst_w)`` float32 tensor and its :class:`Letterbox`."""
        if encoding not in RGB_INDEX or encodings.lookup(encoding).bits != 8:
            return self._converted(image, encoding)
        img = validate_image(image, encoding, stage="preprocess")
        h, w, c = img.shape
        if self._key != (w, h, c, encoding):
            self._prepare(w, h, c, encoding)
        src = img[:, :, 0] if c == 1 else img
        if src.strides[-1] != 1 or (c > 1 and src.strides[-2] != c):
            src = np.ascontiguousarray(src)  # e.g. a flipped view; cv2 would copy it anyway
        try:
            gather = self._gather
            if gather is not None and self._use_gather is None:
                self._use_gather = self._gather_is_faster(gather, src, c)
            if gather is not None and self._use_gather:
                gather(src)
            else:
                self._usual(src, c)
        except cv2.error as exc:
            raise InputError(f"OpenCV failed: {exc}", call="Preprocessor",
                             params={"shape": img.shape, "encoding": encoding}, stage="preprocess") from exc
        assert self._lb is not None  # set by _prepare
        return self._tensor, self._lb

    def into_layout(self, image: np.ndarray, encoding: str, layout: TensorLayout, out: np.ndarray,
                    scale: float | None = None) -> Letterbox:
        """Preprocess and pack straight into a DLA-layout byte buffer (the cuDLA CPU input path)."""
        tensor, lb = self(image, encoding)
        pack(tensor, layout, scale=scale, out=out)
        return lb


def preprocess(image: np.ndarray, encoding: str, spec: InputSpec) -> tuple[np.ndarray, Letterbox]:
    """One-off convenience: a fresh tensor (use :class:`Preprocessor` in loops)."""
    tensor, lb = Preprocessor(spec)(image, encoding)
    return tensor.copy(), lb
