"""Any supported frame -> 8-bit RGB/BGR the way cv_bridge converts it (its OpenCV codes and scaling).

This is the one conversion function of the package: the debug overlay, ``detect`` and the CPU preprocess
of a frame that cannot take the exact shortcut (:mod:`dla_infer_node.core.convert_gather`) all go through
:func:`to_packed8`. Following cv_bridge: colour conversion runs at the source depth and 16-bit values are
then scaled to 8 bits by 255/65535 (``convertTo``'s rounding, ``round(v / 257)``); a big-endian 16-bit
frame is byte-swapped first (cv_bridge copies it too).
"""

from __future__ import annotations

import cv2
import numpy as np

from dla_infer_node.core.encodings import PACKED, Encoding, validate

SCALE_16_TO_8 = 255.0 / 65535.0


def native(values: np.ndarray) -> np.ndarray:
    """``values`` in the machine's byte order (a copy only when it is not)."""
    return values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))


def scale_to_8bit(values: np.ndarray) -> np.ndarray:
    """uint16 (any byte order) -> uint8 by 255/65535 with round-to-nearest, as cv_bridge's convertTo
    (``round(v / 257)``; no value lies on a half, so the rounding mode cannot matter). Keeps the shape."""
    out = cv2.convertScaleAbs(native(values), alpha=SCALE_16_TO_8)
    return out.reshape(values.shape)


def to_packed8(image: np.ndarray, encoding: str, stage: str = "input") -> tuple[np.ndarray, str]:
    """A frame in any supported encoding -> ``(H, W, C)`` uint8 packed frame and its encoding.

    8-bit packed frames come back as they are (no copy); 16-bit packed ones as their scaled 8-bit twin
    (rgb16 -> rgb8); YUV, NV12/NV21 and Bayer frames as rgb8.
    """
    img, enc = validate(image, encoding, stage)
    if enc.family == PACKED:
        if enc.bits == 8:
            return img, enc.name
        return scale_to_8bit(img), enc.eight_bit
    rgb = to_rgb_same_depth(img, enc)
    return (rgb if enc.bits == 8 else scale_to_8bit(rgb)), "rgb8"


def to_rgb_same_depth(img: np.ndarray, enc: Encoding, dst: np.ndarray | None = None) -> np.ndarray:
    """RGB at the source depth of a validated YUV, NV12/NV21 or Bayer view (cv_bridge's OpenCV code);
    into ``dst`` when given (a reused buffer spares the page faults of a fresh frame-sized one)."""
    assert enc.to_rgb_code is not None  # every non-packed entry has one
    src = native(img) if enc.channels == 2 else native(img[:, :, 0])
    if not (src.strides[-1] == src.itemsize and src.strides[0] >= 0):
        src = np.ascontiguousarray(src)
    return cv2.cvtColor(src, enc.to_rgb_code, dst=dst)


def to_rgb8(image: np.ndarray, encoding: str, stage: str = "input") -> np.ndarray:
    """``(H, W, 3)`` uint8 RGB of a frame in any supported encoding (a copy unless it is rgb8)."""
    packed, enc8 = to_packed8(image, encoding, stage)
    return _reorder(packed, enc8, bgr=False)


def to_bgr8(image: np.ndarray, encoding: str, stage: str = "overlay") -> np.ndarray:
    """A contiguous ``(H, W, 3)`` uint8 BGR COPY of a frame in any supported encoding (to draw, publish)."""
    packed, enc8 = to_packed8(image, encoding, stage)
    out = _reorder(packed, enc8, bgr=True)
    # a bgr8 frame comes back as itself from _reorder: the caller draws on the result, so copy it
    return np.array(out, dtype=np.uint8, order="C", copy=True) if np.may_share_memory(out, image) else out


_TO_RGB = {"bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB, "bgra8": cv2.COLOR_BGRA2RGB,
           "mono8": cv2.COLOR_GRAY2RGB}
_TO_BGR = {"rgb8": cv2.COLOR_RGB2BGR, "rgba8": cv2.COLOR_RGBA2BGR, "bgra8": cv2.COLOR_BGRA2BGR,
           "mono8": cv2.COLOR_GRAY2BGR}


def _reorder(packed: np.ndarray, enc8: str, bgr: bool) -> np.ndarray:
    codes = _TO_BGR if bgr else _TO_RGB
    if enc8 not in codes:  # already in the wanted order
        return np.ascontiguousarray(packed)
    src = packed[:, :, 0] if enc8 == "mono8" else packed
    return cv2.cvtColor(np.ascontiguousarray(src), codes[enc8])
